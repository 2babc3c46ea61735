package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/rig/loadgen"
)

func TestWALGoalSaysWhenACheckpointBeganInThePush(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		checkpoints int64
		want        string
	}{
		{0, ""},
		{1, "1 checkpoint(s) began during the push or its drain: 0.12 full-page images per event are in this figure"},
	} {
		b := &bench{}
		b.rep.Sustained = &Sustained{Events: 1000, WALBytesPerEvent: 3631, WALImagesPerEvent: 0.12, Checkpoints: tc.checkpoints}
		var wal *Goal
		for _, g := range b.coreGoals() {
			if g.Key == "wal_bytes_per_event" {
				wal = &g
			}
		}
		if wal == nil || wal.Met {
			t.Fatalf("checkpoints %d: WAL goal %+v", tc.checkpoints, wal)
		}
		if got := strings.Contains(wal.Margin, "checkpoint"); got != (tc.want != "") || !strings.Contains(wal.Margin, tc.want) {
			t.Errorf("checkpoints %d: margin %q, want it to say %q", tc.checkpoints, wal.Margin, tc.want)
		}
	}
}

func TestPooledOpenTakesWindowsTogether(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	w1 := OpenIngest{Offered: 100, Latency: loadgen.Summary{P99: 20 * ms}, CPU: CPUShare{0.4, 0.6, 0.2, 0.6},
		Waits:        []loadgen.WaitShare{{Wait: "CPU", Query: "INSERT", Avg: 0.3}, {Wait: "IO:WALSync", Query: "COMMIT", Avg: 0.2}},
		GroupCommits: map[string]float64{"decided": 10}}
	w2 := OpenIngest{Offered: 100, Latency: loadgen.Summary{P99: 40 * ms}, CPU: CPUShare{0.6, 0.8, 0.4, 0},
		Waits:        []loadgen.WaitShare{{Wait: "IO:WALSync", Query: "COMMIT", Avg: 0.4}},
		GroupCommits: map[string]float64{"decided": 20, "locked": 1}}
	a := loadgen.Result{Offered: 100, Elapsed: time.Second}
	b := loadgen.Result{Offered: 100, Elapsed: time.Second}
	for i := range 100 {
		a.Latencies = append(a.Latencies, time.Duration(i+1)*ms/10) // up to 10 ms
		b.Latencies = append(b.Latencies, time.Duration(i+1)*ms)    // up to 100 ms
	}
	a.OK, b.OK = 100, 100
	all := loadgen.Merge(a, b)

	got := pooledOpen([]OpenIngest{w1, w2}, all)
	if got.OK != 200 || got.PerSecond != 100 || got.Seconds != 2 || got.Latency.N != 200 || got.Latency.P99 != all.Latency().P99 {
		t.Errorf("pooled answers: %+v, want both windows' 200 answers over 2 s", got)
	}
	if !slices.Equal(got.WindowP99, []float64{20, 40}) || len(got.WindowCPU) != 2 {
		t.Errorf("windows: p99 %v, cpu %v", got.WindowP99, got.WindowCPU)
	}
	if want := (CPUShare{0.5, 0.7, 0.3, 0.3}); got.CPU != want {
		t.Errorf("cpu %+v, want the windows' mean %+v", got.CPU, want)
	}
	if want := []loadgen.WaitShare{{Wait: "IO:WALSync", Query: "COMMIT", Avg: 0.3}, {Wait: "CPU", Query: "INSERT", Avg: 0.15}}; !slices.Equal(got.Waits, want) {
		t.Errorf("waits %v, want the windows' mean, largest first %v", got.Waits, want)
	}
	if got.GroupCommits["decided"] != 30 || got.GroupCommits["locked"] != 1 {
		t.Errorf("group commits %v, want the windows' sum", got.GroupCommits)
	}
	if noisy(append([]CPUShare{got.CPU}, got.WindowCPU...)...) == "" {
		t.Error("a window where other work took 0.6 cores is not flagged")
	}

	w2.GroupCommits = nil
	if gc := pooledOpen([]OpenIngest{w1, w2}, all).GroupCommits; gc != nil {
		t.Errorf("group commits %v with one window's unread, want none", gc)
	}
	if one := pooledOpen([]OpenIngest{w1}, a); one.CPU != w1.CPU || one.WindowP99 != nil || one.Latency != w1.Latency {
		t.Errorf("one window: %+v, want it as it was", one)
	}
}

func TestSustainedCountsAShortPushAndNotAnEmptyOne(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 5, 22, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		span, ramp time.Duration
	}{
		{8 * time.Second, time.Second},
		{4 * time.Second, time.Second},
		{2 * time.Second, 500 * time.Millisecond}, // --quick: a whole second is left to count
		{time.Second, 250 * time.Millisecond},
	} {
		if got := underLoadFrom(t0, t0.Add(tc.span)).Sub(t0); got != tc.ramp {
			t.Errorf("push of %v: counts from %v in, want %v", tc.span, got, tc.ramp)
		}
	}

	sustained := func(buckets []int) Goal {
		b := &bench{baseline: map[int]LoadLevel{32: {PerSecond: 3000}}}
		b.rep.Sustained = &Sustained{FulfilledPerSec: 3300, PerSecondBuckets: buckets, ProcessingKeptUp: true}
		for _, g := range b.coreGoals() {
			if g.Key == "sustained_over_baseline" {
				return g
			}
		}
		t.Fatal("no sustained goal")
		return Goal{}
	}
	if g := sustained([]int{3300}); !g.Met || !strings.HasPrefix(g.Value, "1.10×") {
		t.Errorf("one whole second counted: %+v", g)
	}
	if g := sustained(nil); g.Met || !strings.HasPrefix(g.Value, "not measured: the push's receipts spanned less than a whole second") {
		t.Errorf("no second counted: %+v, want it not measured, and said why", g)
	}
}
