package storage_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var (
	subRef = fulfillment.SubscriptionRef{OrgID: "org_a", Environment: fulfillment.EnvLive, Provider: fulfillment.ProviderYolfi,
		ProviderSubscriptionID: "sub_1", CustomerRef: "user_42", PlanID: "pro-monthly"}
	subPlan = fulfillment.Plan{ID: "pro-monthly", Period: fulfillment.Period{Months: 1}, Grace: 72 * time.Hour}
	// yearPlan is another plan, for changes of plan.
	yearPlan = fulfillment.Plan{ID: "pro-yearly", Period: fulfillment.Period{Months: 12}, Grace: 72 * time.Hour}
	subJan1  = time.Date(2027, 1, 1, 10, 0, 0, 0, time.UTC)
)

// concurrently runs fn n times at once.
func concurrently(n int, fn func()) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			fn()
		})
	}
	close(start)
	wg.Wait()
}

// A renewal delivered three times at once pays one period; the first
// payment created the subscription; a second payment of the same bill opens
// one extra_payment item.
func TestSubscriptionRenewalOnce(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	first := fulfillment.SubscriptionEvent{Kind: fulfillment.SubRenewalPaid, OccurredAt: subJan1, InvoiceID: "inv_1", PaymentID: "pay_1"}
	if out, rec, err := s.SubscriptionApply(ctx, subRef, first, "evt_1", subPlan); err != nil || out.Decision != fulfillment.DecisionRenewed || rec.Periods != 1 {
		t.Fatalf("first payment = %v, %+v, %v", out.Decision, rec, err)
	}
	renewal := fulfillment.SubscriptionEvent{Kind: fulfillment.SubRenewalPaid, OccurredAt: subJan1.AddDate(0, 1, 0), InvoiceID: "inv_2", PaymentID: "pay_2"}
	var (
		mu        sync.Mutex
		decisions = map[fulfillment.Decision]int{}
	)
	concurrently(3, func() {
		out, _, err := s.SubscriptionApply(ctx, subRef, renewal, "evt_2", subPlan)
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		decisions[out.Decision]++
		mu.Unlock()
	})
	if decisions[fulfillment.DecisionRenewed] != 1 || decisions[fulfillment.DecisionAlreadyApplied] != 2 {
		t.Errorf("decisions %v, want one renewed and two already_applied", decisions)
	}
	if n := count(t, conn, "SELECT count(*) FROM subscription_periods"); n != 2 {
		t.Errorf("%d periods, want 2", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM subscriptions"); n != 1 {
		t.Errorf("%d subscriptions, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM order_events WHERE subscription_id IS NOT NULL AND topic = 'subscription.renewed'"); n != 2 {
		t.Errorf("%d subscription.renewed events, want one per period", n)
	}
	other := renewal
	other.PaymentID = "pay_9"
	for range 2 {
		if out, _, err := s.SubscriptionApply(ctx, subRef, other, "evt_9", subPlan); err != nil || out.Decision != fulfillment.DecisionDuplicatePayment {
			t.Fatalf("another payment of a paid bill = %v, %v", out.Decision, err)
		}
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'extra_payment' AND subscription_id IS NOT NULL"); n != 1 {
		t.Errorf("%d extra_payment items, want 1", n)
	}
	if end := count(t, conn, "SELECT extract(epoch FROM period_end)::int FROM subscriptions"); end != int(subJan1.AddDate(0, 2, 0).Unix()) {
		t.Errorf("period ends at %d, want two months after the first payment", end)
	}
}

// Cancelled mid-period: access ends at the period's end, and two sweepers
// racing end it once.
func TestSubscriptionSweepOnce(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	pay := fulfillment.SubscriptionEvent{Kind: fulfillment.SubRenewalPaid, OccurredAt: subJan1, InvoiceID: "inv_1", PaymentID: "pay_1"}
	_, rec, err := s.SubscriptionApply(ctx, subRef, pay, "evt_1", subPlan)
	if err != nil {
		t.Fatal(err)
	}
	cancel := fulfillment.SubscriptionEvent{Kind: fulfillment.SubCancelledEvent, OccurredAt: subJan1.AddDate(0, 0, 10)}
	if out, _, err := s.SubscriptionApply(ctx, subRef, cancel, "evt_2", subPlan); err != nil || out.Decision != fulfillment.DecisionSubscriptionCancelled {
		t.Fatalf("cancel = %v, %v", out.Decision, err)
	}
	if swept, err := s.SubscriptionSweep(ctx, rec.ID, subPlan, subJan1.AddDate(0, 0, 20)); err != nil || swept {
		t.Errorf("sweep within the paid period = %v, %v; want nothing to do", swept, err)
	}
	var (
		mu    sync.Mutex
		ended int
	)
	concurrently(2, func() {
		swept, err := s.SubscriptionSweep(ctx, rec.ID, subPlan, subJan1.AddDate(0, 1, 1))
		if err != nil {
			t.Error(err)
		}
		if swept {
			mu.Lock()
			ended++
			mu.Unlock()
		}
	})
	if ended != 1 {
		t.Errorf("%d sweepers ended the access, want 1", ended)
	}
	if n := count(t, conn, "SELECT count(*) FROM subscriptions WHERE state = 'expired' AND access_ended_at IS NOT NULL"); n != 1 {
		t.Errorf("%d subscriptions expired with their access ended, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM order_events WHERE subscription_id IS NOT NULL AND topic = 'subscription.access_ended'"); n != 1 {
		t.Errorf("%d subscription.access_ended events, want 1", n)
	}
}
