package storage_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// countingTable is a worker.Table that counts the items its claims took.
type countingTable struct {
	worker.Table
	claimed atomic.Int64
}

func (c *countingTable) Claim(ctx context.Context, p worker.ClaimParams) ([]worker.Claim, error) {
	claims, err := c.Table.Claim(ctx, p)
	c.claimed.Add(int64(len(claims)))
	return claims, err
}

// runInbox runs an inbox queue of s under l, with workers × batch room for
// hand-offs, handing s's stored events to it, until the test ends.
func runInbox(t *testing.T, s *storage.Store, l *storage.Liveness, workers, batch int) *countingTable {
	t.Helper()
	table := &countingTable{Table: s.InboxQueue()}
	q := worker.NewInbox(table, s, l, worker.Config{Workers: workers, Batch: batch, Poll: time.Hour}, slog.New(slog.DiscardHandler), nil)
	s.HandInboxTo(q)
	runQueue(t, q)
	t.Cleanup(func() { s.HandInboxTo(nil) }) // before the queue stops: cleanups run last first
	return table
}

// runQueue runs q until the test ends.
func runQueue(t *testing.T, q *worker.Queue) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = q.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// storeConcurrently creates n orders (m-prefix-0 to m-prefix-n-1) and stores
// a payment of each twice, from 2n goroutines at once.
func storeConcurrently(t *testing.T, s *storage.Store, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", fmt.Sprintf("m-%s-%d", prefix, i))); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range 2 * n {
		wg.Go(func() {
			id := fmt.Sprintf("%s-%d", prefix, i%n)
			_, err := s.InboxInsert(ctx, confirmedEvent(id, "m-"+id), []byte("{}"))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// waitFor polls cond until it holds, for up to 30 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Events stored while this process's inbox queue runs are handed to it:
// leased as they are inserted and processed without a claim, once each,
// redeliveries included. The queue's room (workers × batch) bounds what it
// is handed; what does not fit is inserted unleased and claimed as usual.
func TestStoredEventsAreHandedToTheInbox(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		workers, batch int
		handedOnly     bool
	}{
		{name: "room for every event", workers: 2, batch: 64, handedOnly: true},
		{name: "room for two", workers: 1, batch: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, conn := newStore(t)
			l, _, _ := live(t, s)
			table := runInbox(t, s, l, tc.workers, tc.batch)
			const n = 40
			storeConcurrently(t, s, "h", n)
			waitFor(t, "every event processed", func() bool {
				return count(t, conn, `SELECT count(*) FROM inbox_events WHERE state = 'processed'`) == n &&
					count(t, conn, `SELECT count(*) FROM inbox_work`) == 0
			})
			if got := count(t, conn, `SELECT count(*) FROM entitlements`); got != 2*n {
				t.Errorf("%d licenses, want %d: each payment grants its two once", got, 2*n)
			}
			if got := count(t, conn, `SELECT count(*) FROM ledger_entries`); got != n {
				t.Errorf("%d ledger entries, want %d", got, n)
			}
			claimed := table.claimed.Load()
			switch {
			case tc.handedOnly && claimed != 0:
				t.Errorf("claims took %d events; with room for all, every event is handed over", claimed)
			case !tc.handedOnly && claimed == 0:
				t.Errorf("no event was claimed; with room for two, the rest must be claimed")
			}
		})
	}
}

// handTo is an InboxHandoff leasing every event to owner, whose process
// then dies before it works on any: they are delivered to nobody.
type handTo string

func (o handTo) Reserve(n int) worker.Handoff {
	return worker.Handoff{Owner: string(o), N: n, Lease: time.Hour}
}
func (handTo) Deliver(worker.Handoff, []worker.Claim) {}

// Events handed to an owner that dies before processing them are not lost
// to their lease: another replica's queue reclaims them as soon as the
// owner is not live, and processes each once.
func TestHandedEventsOfADeadOwnerAreReclaimed(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	_, owner, stopDying := live(t, s)
	s.HandInboxTo(handTo(owner))
	const n = 10
	storeConcurrently(t, s, "d", n)
	s.HandInboxTo(nil)
	if got := count(t, conn, `SELECT count(*) FROM inbox_work WHERE lease_owner = $1 AND attempts = 1
		AND next_attempt_at > now() + interval '50 minutes'`, owner); got != n {
		t.Fatalf("%d events leased to the dying owner for the hour, want %d", got, n)
	}
	stopDying()

	other, err := storage.Open(context.Background(), conn.Config().ConnString(), storage.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(other.Close)
	l, _, _ := live(t, other)
	table := runInbox(t, other, l, 1, 4)
	waitFor(t, "the dead owner's events processed", func() bool {
		return count(t, conn, `SELECT count(*) FROM inbox_events WHERE state = 'processed'`) == n
	})
	if got := count(t, conn, `SELECT count(*) FROM entitlements`); got != 2*n {
		t.Errorf("%d licenses, want %d", got, 2*n)
	}
	if got := table.claimed.Load(); got != n {
		t.Errorf("the other queue claimed %d events, want the %d reclaimed", got, n)
	}
}
