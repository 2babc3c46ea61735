package worker

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// A running queue with a live owner reserves room for workers × batch
// waiting items at most, leased for its lease; the items delivered are
// processed in batches without a claim, and are in flight meanwhile; a
// reservation delivered with fewer items (or none) gives its room back.
func TestQueueTakesHandedItems(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var (
			claimed   calls[time.Time]
			processed calls[[]int64]
		)
		gate := make(chan struct{})
		ft := &fakeTable{
			claim: batches(&claimed),
			process: func(_ context.Context, _ string, claims []Claim) error {
				<-gate
				processed.add(ids(claims))
				return nil
			},
		}
		q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 2, Batch: 3, Lease: 42 * time.Second, Poll: time.Minute}, discard)
		if h := q.Reserve(5); h.N != 0 {
			t.Fatalf("a queue not running reserved %+v, want nothing", h)
		}
		stop := start(q)
		defer stop()
		synctest.Wait()
		claims := len(claimed.all()) // the first claims of the workers

		h := q.Reserve(10)
		if h != (Handoff{Owner: "a", N: 6, Lease: 42 * time.Second}) {
			t.Fatalf("reserved %+v, want 6 (2 workers × 3) for owner a, lease 42s", h)
		}
		if more := q.Reserve(1); more.N != 0 {
			t.Fatalf("reserved %+v beyond the room", more)
		}
		q.Deliver(h, []Claim{{1, 1}, {2, 1}, {3, 1}, {4, 1}}) // 2 of the 6 unused
		synctest.Wait()                                       // both workers took theirs: 3 and 1
		if got := slices.Sorted(slices.Values(q.holding())); fmt.Sprint(got) != "[1 2 3 4]" {
			t.Errorf("in flight %v, want the 4 handed items (a claim is told them)", got)
		}
		if got := q.Reserve(10); got.N != 6 {
			t.Errorf("reserved %d with nothing waiting, want 6", got.N)
		} else {
			q.Deliver(got, nil)
		}
		close(gate)
		synctest.Wait()
		var got []int64
		for _, b := range processed.all() {
			if len(b) > 3 {
				t.Errorf("a batch of %d, want at most 3", len(b))
			}
			got = append(got, b...)
		}
		slices.Sort(got)
		if fmt.Sprint(got) != "[1 2 3 4]" {
			t.Errorf("processed %v, want 1 to 4 once each", got)
		}
		if n := len(claimed.all()) - claims; n != 0 {
			t.Errorf("%d claims after the hand-off, want none", n)
		}
	})
}

// Items handed under an owner that was lost before a worker took them are
// dropped (other replicas reclaim them); those delivered after Run ended
// are released.
func TestQueueDropsOrReleasesHandedItems(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		owners, lose := switchingOwner("a")
		var processed, released calls[string]
		ft := &fakeTable{
			process: func(_ context.Context, o string, claims []Claim) error {
				processed.add(fmt.Sprint(o, ids(claims)))
				return nil
			},
			release: func(o string) (int, error) { released.add(o); return 0, nil },
		}
		q := NewQueue("test", ft, ft.Process, owners, Config{Workers: 1, Batch: 4, Poll: time.Hour}, discard)
		stop := start(q)
		synctest.Wait()
		h := q.Reserve(2)
		lose("b")
		q.Deliver(h, []Claim{{1, 1}, {2, 1}})
		synctest.Wait()
		if got := processed.all(); len(got) != 0 {
			t.Errorf("processed %v: items leased to a lost owner are the others' to reclaim", got)
		}

		h = q.Reserve(2)
		stop()
		released.seen = nil
		q.Deliver(h, []Claim{{3, 1}})
		if got := released.all(); !slices.Equal(got, []string{"b"}) {
			t.Errorf("released %v after a delivery to a stopped queue, want owner b once", got)
		}
		if got := processed.all(); len(got) != 0 {
			t.Errorf("processed %v", got)
		}
	})
}
