package storage_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// An order that another transaction keeps locked (an operator's open psql
// session, a client stuck in a transaction) holds back its own event and
// no other: the inbox processor's batch waits for the lock at most its
// lock wait, each of the batch's events is then tried alone, the other
// order is fulfilled meanwhile, and the held one once the lock is gone.
// Counted in licenses granted, not read from a state.
func TestALockedOrderHoldsBackOnlyItsOwnEvent(t *testing.T) {
	t.Parallel()
	s, conn, url := openStore(t, storage.Options{MaxConns: 10})
	s.SetWorkLockWait("100ms")
	ctx := context.Background()
	for _, m := range []string{"m-held", "m-free"} {
		if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", m)); err != nil {
			t.Fatal(err)
		}
	}
	holder := holderTx(ctx, t, url)
	if _, err := holder.Exec(ctx, `SELECT 1 FROM orders WHERE merchant_order_id = 'm-held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	// Both stored queued before the processor runs: its first claim
	// takes them together, in one batch.
	for _, m := range []string{"m-held", "m-free"} {
		if _, err := s.InboxInsert(ctx, confirmedEvent("e-"+m, m), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	licenses := func(m string) int {
		return count(t, conn, `SELECT count(*) FROM entitlements e JOIN orders o ON o.id = e.order_id
			WHERE o.merchant_order_id = $1`, m)
	}
	l, _, _ := live(t, s)
	table := &countingTable{Table: s.InboxQueue()}
	q := worker.NewInbox(table, s, l, worker.Config{Workers: 1, Batch: 64, Poll: 50 * time.Millisecond,
		BaseBackoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}, slog.New(slog.DiscardHandler), nil)
	runQueue(t, q)
	waitFor(t, "the free order's licenses, while the other order stays locked", func() bool { return licenses("m-free") == 2 })
	if got := table.claimed.Load(); got < 2 {
		t.Fatalf("the processor claimed %d events, want both in its first batch", got)
	}
	if got := licenses("m-held"); got != 0 {
		t.Fatalf("%d licenses of the locked order while it is locked", got)
	}
	if got := count(t, conn, `SELECT count(*) FROM inbox_work w JOIN inbox_events e ON e.id = w.id
		WHERE e.merchant_order_id = 'm-held' AND w.last_error LIKE 'event e-m-held of yolfi-live: %lock timeout%'`); got != 1 {
		t.Fatalf("the locked order's event: %d pending with a lock wait as its error, naming the event, want 1", got)
	}

	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the held order's licenses once its lock is gone", func() bool { return licenses("m-held") == 2 })
	time.Sleep(200 * time.Millisecond) // anything applied twice would show by now
	for _, m := range []string{"m-held", "m-free"} {
		if got := licenses(m); got != 2 {
			t.Errorf("%s: %d licenses, want 2", m, got)
		}
	}
}
