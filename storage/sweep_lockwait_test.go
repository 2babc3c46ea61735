package storage_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/worker"
)

// A subscription that another transaction keeps locked holds back its own
// sweep and no other: the sweeper waits for its lock at most the work lock
// wait, then tries the rest of its batch, and ends the held subscription's
// access once the lock is gone. Counted in access_ended events, once each.
func TestALockedSubscriptionHoldsBackOnlyItsOwnSweep(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	s.SetWorkLockWait("100ms")
	ctx := context.Background()
	// Paid for one month, months ago: period and grace are over. The held
	// one's access ended first, so that its sweep comes first in the batch.
	for i, id := range []string{"sub_held", "sub_free"} {
		ref := subRef
		ref.ProviderSubscriptionID = id
		pay := fulfillment.SubscriptionEvent{Kind: fulfillment.SubRenewalPaid, OccurredAt: time.Now().AddDate(0, -5+i, 0), InvoiceID: "inv_1"}
		if _, _, err := s.SubscriptionApply(ctx, ref, pay, "evt", subPlan); err != nil {
			t.Fatal(err)
		}
	}
	url := conn.Config().ConnString()
	holder := holderTx(ctx, t, url)
	if _, err := holder.Exec(ctx, `SELECT 1 FROM subscriptions WHERE provider_subscription_id = 'sub_held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	ended := func(id string) int {
		return count(t, conn, `SELECT count(*) FROM order_events e JOIN subscriptions s ON s.id = e.subscription_id
			WHERE e.topic = 'subscription.access_ended' AND s.provider_subscription_id = $1`, id)
	}
	live, _, _ := live(t, s)
	q := worker.NewSweeper(s.SweepQueue(), s, live, worker.Config{Workers: 1, Batch: 4, Poll: 20 * time.Millisecond,
		BaseBackoff: 50 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}, nil, slog.New(slog.DiscardHandler))
	runQueue(t, q)

	waitFor(t, "the free subscription's access ended, while the other stays locked", func() bool { return ended("sub_free") == 1 })
	if got := ended("sub_held"); got != 0 {
		t.Fatalf("the locked subscription's access ended %d times while it is locked", got)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the held subscription's access ended once its lock is gone", func() bool { return ended("sub_held") == 1 })
	time.Sleep(200 * time.Millisecond) // anything done twice would show by now
	for _, id := range []string{"sub_held", "sub_free"} {
		if got := ended(id); got != 1 {
			t.Errorf("%s: access ended %d times, want once", id, got)
		}
	}
}
