package loadgen

import (
	"net/http"
	"testing"
	"time"
)

func TestMergePoolsRuns(t *testing.T) {
	t.Parallel()
	a := Result{Offered: 100, Elapsed: 2 * time.Second, Late: 1, Unsent: 2}
	a.record(http.StatusOK, nil, 3*time.Millisecond)
	a.record(http.StatusServiceUnavailable, nil, time.Millisecond)
	b := Result{Offered: 50, Elapsed: 3 * time.Second, Late: 4}
	b.record(http.StatusServiceUnavailable, nil, time.Millisecond)
	b.record(http.StatusOK, nil, 9*time.Millisecond)
	b.record(http.StatusOK, nil, 5*time.Millisecond)
	b.record(0, http.ErrHandlerTimeout, 0)

	m := Merge(a, b)
	if m.Elapsed != 5*time.Second || m.Offered != 100 || m.Requests != 6 || m.OK != 3 || m.Errors != 1 ||
		m.Late != 5 || m.Unsent != 2 || m.Statuses[http.StatusServiceUnavailable] != 2 {
		t.Fatalf("merged: %+v", m)
	}
	if got := m.Latency(); got.N != 3 || got.Max != 9*time.Millisecond {
		t.Fatalf("pooled latencies: %+v, want the three 200 answers of both runs", got)
	}
	if got := m.Throughput(); got != 0.6 {
		t.Fatalf("throughput %v, want 3 answers over the 5 s of both windows", got)
	}
	if a.Statuses[http.StatusServiceUnavailable] != 1 || b.Statuses[http.StatusServiceUnavailable] != 1 {
		t.Fatalf("the runs' own counts changed: %v, %v", a.Statuses, b.Statuses)
	}
}
