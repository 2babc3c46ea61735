package fulfillment

import (
	"testing"
	"time"
)

// Only a paid order that is still paid or fulfilling, paid longer than the
// SLA ago, is past it; the boundary itself is not.
func TestPastFulfillmentSLA(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	sla := time.Hour
	for _, tc := range []struct {
		state  State
		paidAt time.Time
		want   bool
	}{
		{StatePaid, now.Add(-2 * time.Hour), true},
		{StateFulfilling, now.Add(-sla - time.Nanosecond), true},
		{StateFulfilling, now.Add(-sla), false},
		{StateFulfilling, now.Add(-time.Minute), false},
		{StateFulfilling, time.Time{}, false},
		{StateFulfilled, now.Add(-48 * time.Hour), false},
		{StateOnHold, now.Add(-48 * time.Hour), false},
		{StateRefunded, now.Add(-48 * time.Hour), false},
		{StatePendingPayment, now.Add(-48 * time.Hour), false},
		{StateCancelled, now.Add(-48 * time.Hour), false},
		{StateExpired, now.Add(-48 * time.Hour), false},
	} {
		if got := PastFulfillmentSLA(tc.state, tc.paidAt, now, sla); got != tc.want {
			t.Errorf("PastFulfillmentSLA(%s, paid %v before now) = %v, want %v", tc.state, now.Sub(tc.paidAt), got, tc.want)
		}
	}
}

// One paid_not_fulfilled item per order: its key names the order alone.
func TestPaidNotFulfilledKey(t *testing.T) {
	t.Parallel()
	a := ItemSubject{Provider: ProviderYolfi, OrgID: "org_a", Environment: EnvLive, OrderID: "o1", AttemptRef: "a1", PaymentID: "p1"}
	b := ItemSubject{OrderID: "o1", EventID: "evt_2"}
	if ka, kb := ItemKey(ReconPaidNotFulfilled, a), ItemKey(ReconPaidNotFulfilled, b); ka != kb || ka != OrderKeyPrefix+"o1" {
		t.Errorf("keys %q and %q, want both %q", ka, kb, OrderKeyPrefix+"o1")
	}
}

// The item of an overdue order says when it was paid (in UTC, whatever the
// clock's zone), what it still is, and the SLA it is past.
func TestOverdueDetail(t *testing.T) {
	t.Parallel()
	paid := time.Date(2026, 3, 1, 15, 4, 5, 0, time.FixedZone("MSK", 3*3600))
	got := OverdueDetail(StateFulfilling, paid, 24*time.Hour)
	want := "paid at 2026-03-01T12:04:05Z and still fulfilling past the fulfillment SLA of 24h0m0s"
	if got != want {
		t.Errorf("OverdueDetail = %q, want %q", got, want)
	}
}
