package storage_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// Subscriptions fed through the inbox, as the providers' events reach them:
// each test counts what the events left (periods, events for the feed and
// the outbox, items), not a status field alone.

// subEvent is a Yolfi event of kind about subscription subID, occurring at
// at; a payment pays invoice (its payment is "pay_"+invoice).
func subEvent(id, subID string, kind fulfillment.EventKind, at time.Time, invoice string) fulfillment.ProviderEvent {
	ev := fulfillment.ProviderEvent{
		Provider: fulfillment.ProviderYolfi, EndpointID: "yolfi-live", OrgID: "org_a", Environment: fulfillment.EnvLive,
		EventID: id, Type: string(kind), Kind: kind, OccurredAt: at,
		Payment: fulfillment.PaymentInfo{SubscriptionID: subID},
	}
	if invoice != "" {
		ev.Payment.InvoiceID, ev.Payment.AttemptRef = invoice, invoice
		if kind == fulfillment.EventPaymentConfirmed {
			ev.Payment.PaymentID = "pay_" + invoice
			ev.Payment.Amount = fulfillment.TokenAmount(decimal.RequireFromString("10"), "USDT", "TRON")
		}
	}
	return ev
}

// subscriptionOrder stores an order of one period of pro-monthly for
// user_42, paid in 10 USDT.
func subscriptionOrder(t *testing.T, s *storage.Store, merchantID string) {
	t.Helper()
	planOrder(t, s, merchantID, subPlan.ID)
}

// planOrder stores an order of one period of plan for user_42, paid in
// 10 USDT, and returns its id.
func planOrder(t *testing.T, s *storage.Store, merchantID, plan string) string {
	t.Helper()
	spec, err := fulfillment.OrderDraft{
		OrgID: "org_a", Environment: "live", MerchantOrderID: merchantID,
		Lines: []fulfillment.LineDraft{{SKU: "pro", Kind: "subscription", Quantity: 1, Currency: "USD", MinorUnits: 1000,
			AccountRef: "user_42", PlanID: plan}},
		Settlement: &fulfillment.SettlementDraft{Token: "USDT", Network: "TRON", Amount: "10"},
	}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	o, _, err := s.OrderCreate(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return o.ID
}

// firstPayment is the payment of order merchantID that starts subscription
// subID on Jan 1.
func firstPayment(id, subID, merchantID string) fulfillment.ProviderEvent {
	ev := subEvent(id, subID, fulfillment.EventPaymentConfirmed, subJan1, "inv_"+subID+"_1")
	ev.Payment.MerchantOrderID = merchantID
	return ev
}

// deliver stores evs and processes them in one batch, returning their
// decisions in order.
func deliver(t *testing.T, s *storage.Store, evs ...fulfillment.ProviderEvent) string {
	t.Helper()
	for _, ev := range evs {
		if _, err := s.InboxInsert(context.Background(), ev, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	return processAll(t, s, len(evs))
}

// subRow is what one subscription holds, and what its events left.
type subRow struct {
	State   string
	Periods int
	End     time.Time
	// Renewed, PastDue and Ended count its events, each in the feed and in
	// crm's outbox.
	Renewed, PastDue, Ended int
	Items                   int
}

// wantSub fails t when subscription subID is not as want says.
func wantSub(t *testing.T, conn *pgx.Conn, subID string, want subRow) {
	t.Helper()
	if got := readSub(t, conn, subID); got != want {
		t.Errorf("%+v, want %+v", got, want)
	}
}

func readSub(t *testing.T, conn *pgx.Conn, subID string) subRow {
	t.Helper()
	var r subRow
	err := conn.QueryRow(context.Background(), `
		SELECT s.state, s.periods, s.period_end,
			(SELECT count(*) FROM order_events e WHERE e.subscription_id = s.id AND e.topic = 'subscription.renewed'),
			(SELECT count(*) FROM order_events e WHERE e.subscription_id = s.id AND e.topic = 'subscription.past_due'),
			(SELECT count(*) FROM order_events e WHERE e.subscription_id = s.id AND e.topic = 'subscription.access_ended'),
			(SELECT count(*) FROM reconciliation_items i WHERE i.subscription_id = s.id)
		FROM subscriptions s WHERE provider_subscription_id = $1`, subID).
		Scan(&r.State, &r.Periods, &r.End, &r.Renewed, &r.PastDue, &r.Ended, &r.Items)
	if err != nil {
		t.Fatal(err)
	}
	var periods, messages int
	err = conn.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM subscription_periods p WHERE p.subscription_id = s.id),
			(SELECT count(*) FROM outbox_messages m WHERE m.subscription_id = s.id AND m.destination_id = 'crm')
		FROM subscriptions s WHERE provider_subscription_id = $1`, subID).Scan(&periods, &messages)
	if err != nil {
		t.Fatal(err)
	}
	if periods != r.Periods || messages != r.Renewed+r.PastDue+r.Ended {
		t.Errorf("%s: %d period rows for %d periods, %d crm messages for %d events", subID, periods, r.Periods,
			messages, r.Renewed+r.PastDue+r.Ended)
	}
	r.End = r.End.UTC()
	return r
}

// The first paid order creates the subscription with its first period; a
// renewal delivered three times at once (three event ids) pays one period;
// the first payment delivered again pays nothing.
func TestSubscriptionFlowRenewalOnce(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	subscriptionOrder(t, s, "m-1")
	if got := deliver(t, s, firstPayment("evt_1", "sub_1", "m-1")); got != "fulfilled" {
		t.Fatalf("first payment: %s", got)
	}
	want := subRow{State: "active", Periods: 1, End: subJan1.AddDate(0, 1, 0), Renewed: 1}
	if got := readSub(t, conn, "sub_1"); got != want {
		t.Fatalf("after the first payment %+v, want %+v", got, want)
	}
	if n := count(t, conn, `SELECT count(*) FROM subscriptions WHERE customer_ref = 'user_42' AND plan_id = $1`, subPlan.ID); n != 1 {
		t.Errorf("%d subscriptions of the line's customer and plan, want 1", n)
	}

	renewal := func(id string) fulfillment.ProviderEvent {
		return subEvent(id, "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 0), "inv_2")
	}
	_, decisions := decideAtOnce(t, s, renewal("evt_2a"), renewal("evt_2b"), renewal("evt_2c"))
	if got := decisions; got != "already_applied,already_applied,renewed" {
		t.Errorf("decisions %s, want one renewed and two already_applied", got)
	}
	if got := deliver(t, s, firstPayment("evt_1b", "sub_1", "m-1")); got != "already_applied" {
		t.Errorf("first payment again: %s", got)
	}
	want = subRow{State: "active", Periods: 2, End: subJan1.AddDate(0, 2, 0), Renewed: 2}
	if got := readSub(t, conn, "sub_1"); got != want {
		t.Errorf("after the renewals %+v, want %+v", got, want)
	}
	// The first payment and the three renewals; the repeated first payment
	// was the order's to decide (already paid), and paid nothing.
	if n := count(t, conn, `SELECT count(*) FROM inbox_events WHERE applied_subscription_id IS NOT NULL`); n != 4 {
		t.Errorf("%d events applied to the subscription, want 4", n)
	}
}

// Renewals paid in one order or the other leave the same subscription.
func TestSubscriptionFlowRenewalsOutOfOrder(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	feb, mar := subJan1.AddDate(0, 1, 0), subJan1.AddDate(0, 2, 0)
	for _, sub := range []string{"sub_a", "sub_b"} {
		subscriptionOrder(t, s, "m-"+sub)
		deliver(t, s, firstPayment("evt_1_"+sub, sub, "m-"+sub))
	}
	deliver(t, s, subEvent("evt_2_a", "sub_a", fulfillment.EventPaymentConfirmed, feb, "inv_a_2"))
	deliver(t, s, subEvent("evt_3_a", "sub_a", fulfillment.EventPaymentConfirmed, mar, "inv_a_3"))
	deliver(t, s, subEvent("evt_3_b", "sub_b", fulfillment.EventPaymentConfirmed, mar, "inv_b_3"))
	deliver(t, s, subEvent("evt_2_b", "sub_b", fulfillment.EventPaymentConfirmed, feb, "inv_b_2"))
	a, b := readSub(t, conn, "sub_a"), readSub(t, conn, "sub_b")
	want := subRow{State: "active", Periods: 3, End: subJan1.AddDate(0, 3, 0), Renewed: 3}
	if a != want || b != want {
		t.Errorf("in order %+v, out of order %+v; want both %+v", a, b, want)
	}
}

// Overdue, then the renewal paid: active again, extended by one period
// once; the overdue delivered again is older than the renewal, and
// ignored.
func TestSubscriptionFlowOverdueThenRenewal(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	subscriptionOrder(t, s, "m-1")
	deliver(t, s, firstPayment("evt_1", "sub_1", "m-1"))
	overdue := subEvent("evt_od", "sub_1", fulfillment.EventSubscriptionOverdue, subJan1.AddDate(0, 1, 1), "")
	if got := deliver(t, s, overdue); got != "past_due" {
		t.Fatalf("overdue: %s", got)
	}
	if got := readSub(t, conn, "sub_1"); got.State != "past_due" || got.PastDue != 1 {
		t.Fatalf("after the overdue %+v", got)
	}
	paid := subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 2), "inv_2")
	overdue.EventID = "evt_od_again"
	if got := deliver(t, s, paid, overdue); got != "renewed,stale_ignored" {
		t.Errorf("renewal, overdue again: %s", got)
	}
	want := subRow{State: "active", Periods: 2, End: subJan1.AddDate(0, 2, 0), Renewed: 2, PastDue: 1}
	wantSub(t, conn, "sub_1", want)
}

// A lifecycle event that also names the order that started the
// subscription is the subscription's: the overdue makes it past_due, once
// however often it is announced, and the order is left as it is.
func TestSubscriptionFlowLifecycleEventNamingItsOrder(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	subscriptionOrder(t, s, "m-1")
	deliver(t, s, firstPayment("evt_1", "sub_1", "m-1"))
	overdue := subEvent("evt_od", "sub_1", fulfillment.EventSubscriptionOverdue, subJan1.AddDate(0, 1, 1), "")
	overdue.Payment.MerchantOrderID = "m-1"
	again := overdue
	again.EventID = "evt_od_again"
	if got := deliver(t, s, overdue, again); got != "past_due,already_applied" {
		t.Fatalf("overdue naming the order, twice: %s", got)
	}
	want := subRow{State: "past_due", Periods: 1, End: subJan1.AddDate(0, 1, 0), Renewed: 1, PastDue: 1}
	wantSub(t, conn, "sub_1", want)
	if n := count(t, conn, `SELECT count(*) FROM orders WHERE merchant_order_id = 'm-1' AND state = 'fulfilled'`); n != 1 {
		t.Errorf("the order that started the subscription is no longer fulfilled")
	}
	// One naming the order and a subscription nobody knows waits for that
	// subscription, not for the order, which exists: unmatched, and not
	// queued again.
	stranger := subEvent("evt_od_stranger", "sub_unknown", fulfillment.EventSubscriptionOverdue, subJan1.AddDate(0, 1, 1), "")
	stranger.Payment.MerchantOrderID = "m-1"
	if got := deliver(t, s, stranger); got != "unmatched" {
		t.Errorf("an overdue of an unknown subscription naming an order: %s, want unmatched", got)
	}
	if n := count(t, conn, `SELECT count(*) FROM inbox_work WHERE state = 'pending'`); n != 0 {
		t.Errorf("%d events queued again after an unmatched lifecycle event naming an existing order", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM inbox_events WHERE event_id = 'evt_od_stranger' AND state = 'unmatched'`); n != 1 {
		t.Errorf("the overdue of an unknown subscription is not left unmatched")
	}
}

// cancelledSubscription pays the first period of subscription sub_1
// through order m-1, cancels the subscription at cancelAt, and returns its
// id.
func cancelledSubscription(t *testing.T, s *storage.Store, conn *pgx.Conn, cancelAt time.Time) string {
	t.Helper()
	return subscriptionAfter(t, s, conn, subEvent("evt_cancel", "sub_1", fulfillment.EventSubscriptionCancelled, cancelAt, ""),
		"subscription_cancelled")
}

// subscriptionAfter stores subscription sub_1, bought through order m-1 on
// Jan 1, then delivers ev, fails t unless it is decided want, and returns
// the subscription's id.
func subscriptionAfter(t *testing.T, s *storage.Store, conn *pgx.Conn, ev fulfillment.ProviderEvent, want string) string {
	t.Helper()
	subscriptionOrder(t, s, "m-1")
	deliver(t, s, firstPayment("evt_1", "sub_1", "m-1"))
	if got := deliver(t, s, ev); got != want {
		t.Fatalf("%s: %s, want %s", ev.EventID, got, want)
	}
	return subscriptionID(t, conn, "sub_1")
}

// subscriptionID is the id of the subscription its provider knows by
// providerID.
func subscriptionID(t *testing.T, conn *pgx.Conn, providerID string) string {
	t.Helper()
	var id string
	if err := conn.QueryRow(context.Background(), `SELECT id::text FROM subscriptions WHERE provider_subscription_id = $1`,
		providerID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// A charge after the cancellation opens one extra_payment item, however
// many event ids announce that payment.
func TestSubscriptionFlowExtraPaymentItemOncePerPayment(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	cancelledSubscription(t, s, conn, subJan1.AddDate(0, 0, 10))
	charge := subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 0), "inv_2")
	again := charge
	again.EventID = "evt_2_again"
	if got := deliver(t, s, charge) + "," + deliver(t, s, again); got != "duplicate_payment,duplicate_payment" {
		t.Fatalf("the charge after the cancellation, announced twice: %s", got)
	}
	if n := count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'extra_payment' AND payment_id = 'pay_inv_2'`); n != 1 {
		t.Errorf("%d extra_payment items for one payment, want 1", n)
	}
}

// A cancelled subscription whose access the sweeper ended keeps its
// cancellation: a charge after it is an extra payment with its item, and
// the subscription stays expired (it was started again before).
func TestSubscriptionFlowChargeAfterCancelledAccessEnded(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	id := cancelledSubscription(t, s, conn, subJan1.AddDate(0, 0, 10))
	if swept, err := s.SubscriptionSweep(ctx, id, subPlan, subJan1.AddDate(0, 1, 1)); err != nil || !swept {
		t.Fatalf("the sweep after the cancelled period = %v, %v", swept, err)
	}
	charge := subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 2), "inv_2")
	if got := deliver(t, s, charge); got != "duplicate_payment" {
		t.Errorf("a charge after the cancellation, access ended: %s, want duplicate_payment", got)
	}
	want := subRow{State: "expired", Periods: 1, End: subJan1.AddDate(0, 1, 0), Renewed: 1, Ended: 1, Items: 1}
	wantSub(t, conn, "sub_1", want)
	if n := count(t, conn, `SELECT count(*) FROM subscriptions WHERE cancelled_at = $1`, subJan1.AddDate(0, 0, 10)); n != 1 {
		t.Errorf("the cancellation's time is not kept through the sweep")
	}
}

// A charge paid before the cancellation and announced after the sweeper
// ended the cancelled access pays the period after the paid one: access
// comes back until that period ends, the subscription stays cancelled, and
// the sweeper ends the access again then, once.
func TestSubscriptionFlowChargeBeforeTheCancellationAfterTheSweep(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	id := cancelledSubscription(t, s, conn, subJan1.AddDate(0, 0, 10))
	feb1 := subJan1.AddDate(0, 1, 0)
	if swept, err := s.SubscriptionSweep(ctx, id, subPlan, feb1.Add(time.Hour)); err != nil || !swept {
		t.Fatalf("the sweep after the cancelled period = %v, %v", swept, err)
	}
	if got := deliver(t, s, subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 0, 5), "inv_2")); got != "renewed" {
		t.Fatalf("the charge paid before the cancellation: %s, want renewed", got)
	}
	want := subRow{State: "cancelled", Periods: 2, End: feb1.AddDate(0, 1, 0), Renewed: 2, Ended: 1}
	wantSub(t, conn, "sub_1", want)
	if n := count(t, conn, `SELECT count(*) FROM subscriptions WHERE access_ended_at IS NULL`); n != 1 {
		t.Errorf("the access ended by the sweep is not given back for the period paid")
	}
	if swept, err := s.SubscriptionSweep(ctx, id, subPlan, feb1.AddDate(0, 1, 1)); err != nil || !swept {
		t.Fatalf("the sweep after the period paid = %v, %v", swept, err)
	}
	want.State, want.Ended = "expired", 2
	if got := readSub(t, conn, "sub_1"); got != want {
		t.Errorf("after the second sweep %+v, want %+v", got, want)
	}
}

// Migration 048 gives the subscriptions cancelled before it the time of
// their newest event as their cancellation's, and rolls back.
func TestMigration048CancelledAt(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	subscriptionOrder(t, s, "m-1")
	deliver(t, s, firstPayment("evt_1", "sub_1", "m-1"))
	deliver(t, s, subEvent("evt_cancel", "sub_1", fulfillment.EventSubscriptionCancelled, subJan1.AddDate(0, 0, 10), ""))
	m, v := migratedBefore(t, conn, "_subscription_cancelled_at.sql")
	if err := m.MigrateTo(ctx, v); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, `SELECT count(*) FROM subscriptions WHERE state = 'cancelled' AND cancelled_at = last_event_at
		AND cancelled_at = $1`, subJan1.AddDate(0, 0, 10)); n != 1 {
		t.Errorf("the cancelled subscription has no cancellation time after the migration")
	}
}

// Migration 050 gives the subscriptions that were cancelled and then
// expired before migration 048 kept cancellations the time of the
// cancellation applied to them last, unless a purchase came after it: a
// charge after that cancellation is then an extra payment.
func TestMigration050ExpiredCancelledAt(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	cancelAt := subJan1.AddDate(0, 0, 10)
	id := cancelledSubscription(t, s, conn, cancelAt)
	if swept, err := s.SubscriptionSweep(ctx, id, subPlan, subJan1.AddDate(0, 1, 1)); err != nil || !swept {
		t.Fatalf("the sweep after the cancelled period = %v, %v", swept, err)
	}
	// A second subscription, cancelled, expired, then bought again and
	// expired again: it is not cancelled.
	planOrder(t, s, "m-2", subPlan.ID)
	first := firstPayment("evt_b1", "sub_2", "m-2")
	first.Payment.InvoiceID, first.Payment.PaymentID = "inv_b1", "pay_b1"
	deliver(t, s, first)
	deliver(t, s, subEvent("evt_b_cancel", "sub_2", fulfillment.EventSubscriptionCancelled, cancelAt, ""))
	id2 := subscriptionID(t, conn, "sub_2")
	if swept, err := s.SubscriptionSweep(ctx, id2, subPlan, subJan1.AddDate(0, 1, 1)); err != nil || !swept {
		t.Fatalf("the sweep of the second = %v, %v", swept, err)
	}
	planOrder(t, s, "m-3", subPlan.ID)
	again := firstPayment("evt_b2", "sub_2", "m-3")
	again.OccurredAt, again.Payment.InvoiceID, again.Payment.PaymentID = subJan1.AddDate(0, 2, 0), "inv_b2", "pay_b2"
	if got := deliver(t, s, again); got != "fulfilled" {
		t.Fatalf("bought again: %s", got)
	}
	if swept, err := s.SubscriptionSweep(ctx, id2, subPlan, subJan1.AddDate(0, 5, 0)); err != nil || !swept {
		t.Fatalf("the sweep of the second, bought again = %v, %v", swept, err)
	}
	// As the schema before migration 048 left them.
	if _, err := conn.Exec(ctx, `UPDATE subscriptions SET cancelled_at = NULL`); err != nil {
		t.Fatal(err)
	}
	m, v := migrator(t, conn, "_expired_cancelled_at.sql")
	for _, version := range []int32{v - 1, v, v - 1, v, int32(len(m.Migrations))} {
		if err := m.MigrateTo(ctx, version); err != nil {
			t.Fatalf("migrating to %d: %v", version, err)
		}
	}
	if n := count(t, conn, `SELECT count(*) FROM subscriptions WHERE id = $1 AND state = 'expired' AND cancelled_at = $2`, id, cancelAt); n != 1 {
		t.Errorf("the expired subscription has no cancellation time after the migration")
	}
	if n := count(t, conn, `SELECT count(*) FROM subscriptions WHERE cancelled_at IS NOT NULL`); n != 1 {
		t.Errorf("%d subscriptions cancelled after the migration, want 1 (the one bought again is not)", n)
	}
	charge := subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 2), "inv_2")
	if got := deliver(t, s, charge); got != "duplicate_payment" {
		t.Errorf("a charge after the cancellation, after the migration: %s, want duplicate_payment", got)
	}
}

// renewedSubscription stores subscription sub_1, bought through order m-1
// on Jan 1 and renewed by a charge on Feb 1 (invoice inv_2), and returns
// its id.
func renewedSubscription(t *testing.T, s *storage.Store, conn *pgx.Conn) string {
	t.Helper()
	return subscriptionAfter(t, s, conn, subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 0), "inv_2"),
		"renewed")
}

// A cancellation announced after a charge that occurred after it was
// applied cancels the subscription: the period the charge paid is kept,
// one extra_payment item asks for a review of that charge, and the next
// charge is an extra payment of its own (rows counted). Announced again,
// it changes nothing.
func TestSubscriptionFlowCancellationAnnouncedAfterALaterCharge(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	renewedSubscription(t, s, conn)
	feb1 := subJan1.AddDate(0, 1, 0)
	cancel := subEvent("evt_cancel", "sub_1", fulfillment.EventSubscriptionCancelled, subJan1.AddDate(0, 0, 10), "")
	if got := deliver(t, s, cancel); got != "subscription_cancelled" {
		t.Fatalf("the cancellation announced late: %s, want subscription_cancelled", got)
	}
	want := subRow{State: "cancelled", Periods: 2, End: feb1.AddDate(0, 1, 0), Renewed: 2, Items: 1}
	wantSub(t, conn, "sub_1", want)
	cancel.EventID += "_again"
	if got := deliver(t, s, cancel); got != "stale_ignored" {
		t.Errorf("the cancellation again: %s, want stale_ignored", got)
	}
	if got := deliver(t, s, subEvent("evt_3", "sub_1", fulfillment.EventPaymentConfirmed, feb1.AddDate(0, 1, 0), "inv_3")); got != "duplicate_payment" {
		t.Errorf("the next charge: %s, want duplicate_payment", got)
	}
	want.Items = 2
	wantSub(t, conn, "sub_1", want)
	wantCounts(t, conn, []countCheck{
		{"extra_payment items", `SELECT count(*) FROM reconciliation_items WHERE kind = 'extra_payment'`, 2},
		{"items naming the charge after the cancellation", `SELECT count(*) FROM reconciliation_items
			WHERE kind = 'extra_payment' AND payment_id = 'pay_inv_2'`, 1},
		{"cancellations kept", `SELECT count(*) FROM subscriptions WHERE cancelled_at = '` + subJan1.AddDate(0, 0, 10).Format(time.RFC3339) + `'`, 1},
		{"periods with their payment's time", `SELECT count(*) FROM subscription_periods WHERE paid_at IS NOT NULL`, 2},
		{"purchases", `SELECT count(*) FROM subscription_periods WHERE purchase`, 1},
	})
}

// Migration 051 adds when each period's payment occurred, and rolls back
// keeping the periods. Periods paid before it have no time: a
// cancellation announced after their charges is stale, as before it.
func TestMigration051PeriodPaidAt(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	renewedSubscription(t, s, conn)
	m, v := migrator(t, conn, "_period_paid_at.sql")
	for _, version := range []int32{v - 1, v, v - 1, int32(len(m.Migrations))} {
		if err := m.MigrateTo(ctx, version); err != nil {
			t.Fatalf("migrating to %d: %v", version, err)
		}
	}
	wantCounts(t, conn, []countCheck{
		{"periods", `SELECT count(*) FROM subscription_periods`, 2},
		{"periods with a time", `SELECT count(*) FROM subscription_periods WHERE paid_at IS NOT NULL OR purchase`, 0},
	})
	cancel := subEvent("evt_cancel", "sub_1", fulfillment.EventSubscriptionCancelled, subJan1.AddDate(0, 0, 10), "")
	if got := deliver(t, s, cancel); got != "stale_ignored" {
		t.Errorf("a cancellation announced after charges paid before the migration: %s, want stale_ignored", got)
	}
}

// The same cancellation announced once the sweeper ended the access the
// charge after it paid: the subscription stays expired, the cancellation's
// time is kept, the charge has its item, and the next charge is an extra
// payment with its own, as if the cancellation had come first.
func TestSubscriptionFlowCancellationAnnouncedAfterTheSweep(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	id := renewedSubscription(t, s, conn)
	feb1 := subJan1.AddDate(0, 1, 0)
	if swept, err := s.SubscriptionSweep(ctx, id, subPlan, feb1.AddDate(0, 1, 5)); err != nil || !swept {
		t.Fatalf("sweep = %v, %v", swept, err)
	}
	if got := deliver(t, s, subEvent("evt_cancel", "sub_1", fulfillment.EventSubscriptionCancelled, subJan1.AddDate(0, 0, 10), "")); got != "subscription_cancelled" {
		t.Fatalf("the cancellation after the sweep: %s, want subscription_cancelled", got)
	}
	if got := deliver(t, s, subEvent("evt_3", "sub_1", fulfillment.EventPaymentConfirmed, feb1.AddDate(0, 2, 0), "inv_3")); got != "duplicate_payment" {
		t.Errorf("the next charge: %s, want duplicate_payment", got)
	}
	wantSub(t, conn, "sub_1", subRow{State: "expired", Periods: 2, End: feb1.AddDate(0, 1, 0), Renewed: 2, Ended: 1, Items: 2})
	wantCounts(t, conn, []countCheck{
		{"items naming each charge", `SELECT count(DISTINCT payment_id) FROM reconciliation_items
			WHERE kind = 'extra_payment' AND payment_id IN ('pay_inv_2', 'pay_inv_3')`, 2},
	})
}

// An order for the plan paid before the cancellation and announced after
// it is fulfilled and pays its period; the subscription stays cancelled
// (only a purchase after the cancellation buys the plan again). One paid
// after it subscribes the customer again.
func TestSubscriptionFlowPurchaseBeforeTheCancellationAnnouncedAfterIt(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	cancelledSubscription(t, s, conn, subJan1.AddDate(0, 0, 10))
	buy := func(merchantID, id, invoice string, at time.Time) string {
		t.Helper()
		planOrder(t, s, merchantID, subPlan.ID)
		ev := subEvent(id, "sub_1", fulfillment.EventPaymentConfirmed, at, invoice)
		ev.Payment.MerchantOrderID = merchantID
		return deliver(t, s, ev)
	}
	if got := buy("m-2", "evt_buy_before", "inv_2", subJan1.AddDate(0, 0, 5)); got != "fulfilled" {
		t.Fatalf("the order paid before the cancellation: %s", got)
	}
	wantSub(t, conn, "sub_1", subRow{State: "cancelled", Periods: 2, End: subJan1.AddDate(0, 2, 0), Renewed: 2})
	if got := buy("m-3", "evt_buy_after", "inv_3", subJan1.AddDate(0, 0, 20)); got != "fulfilled" {
		t.Fatalf("the order paid after the cancellation: %s", got)
	}
	wantSub(t, conn, "sub_1", subRow{State: "active", Periods: 3, End: subJan1.AddDate(0, 3, 0), Renewed: 3})
	if n := count(t, conn, `SELECT count(*) FROM subscriptions WHERE cancelled_at IS NULL`); n != 1 {
		t.Errorf("the cancellation is kept after the plan was bought again")
	}
}

// A subscription registered with CreateSubscription takes its first
// payment in place of an order, also when that payment names the
// storefront's own merchant order id, which no order of the service has.
func TestSubscriptionFlowRegisteredTakesItsFirstPayment(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	if _, _, err := s.SubscriptionCreate(context.Background(), subRef); err != nil {
		t.Fatal(err)
	}
	if got := deliver(t, s, firstPayment("evt_1", "sub_1", "storefront-1")); got != "renewed" {
		t.Fatalf("the first payment of a registered subscription: %s, want renewed", got)
	}
	want := subRow{State: "active", Periods: 1, End: subJan1.AddDate(0, 1, 0), Renewed: 1}
	wantSub(t, conn, "sub_1", want)
	if n := count(t, conn, `SELECT count(*) FROM inbox_work WHERE state = 'pending'`); n != 0 {
		t.Errorf("%d events queued again", n)
	}
}

// registeredPaidFirst is a store whose subscription sub_1, registered
// ahead (CreateSubscription), took its first payment (evt_1) as its first
// period, renewed: the payment names merchant order m-1, which no order
// has yet.
func registeredPaidFirst(t *testing.T) (*storage.Store, *pgx.Conn) {
	t.Helper()
	s, conn := newOutboxStore(t)
	if _, _, err := s.SubscriptionCreate(context.Background(), subRef); err != nil {
		t.Fatal(err)
	}
	if got := deliver(t, s, firstPayment("evt_1", "sub_1", "m-1")); got != "renewed" {
		t.Fatalf("the first payment before its order: %s, want renewed", got)
	}
	return s, conn
}

// lateOrder stores order merchantID of one period of pro-monthly for
// user_42 and a license, paid in 10 USDT, and returns its id and whether
// this call created it.
func lateOrder(t *testing.T, s *storage.Store, merchantID string) (string, bool) {
	t.Helper()
	return createOrder(t, s, merchantID, "10",
		fulfillment.LineDraft{SKU: "pro", Kind: "subscription", Quantity: 1, Currency: "USD", MinorUnits: 1000, AccountRef: "user_42", PlanID: subPlan.ID},
		fulfillment.LineDraft{SKU: "pro-license", Kind: "license", Quantity: 1, Currency: "USD", MinorUnits: 500})
}

// firstRefund is the full refund, at at, of firstPayment("…", "sub_1",
// merchantID), naming both.
func firstRefund(id, merchantID string, at time.Time) fulfillment.ProviderEvent {
	ev := subEvent(id, "sub_1", fulfillment.EventRefunded, at, "inv_sub_1_1")
	ev.Payment.PaymentID, ev.Payment.MerchantOrderID = "pay_inv_sub_1_1", merchantID
	return ev
}

// A subscription registered with CreateSubscription, whose first order
// the merchant creates after the order's payment came: the payment, naming
// the subscription and the order, is the subscription's first period (no
// order then). The order's creation queues it again for the order, which
// is paid and fulfilled by it: its license granted once, no second period,
// no item. The same payment announced again and the order created again
// change nothing; the refund of that payment afterwards refunds the order
// and the period, once (rows counted at each step).
func TestSubscriptionFlowRegisteredOrderCreatedAfterItsPayment(t *testing.T) {
	t.Parallel()
	s, conn := registeredPaidFirst(t)
	id, _ := lateOrder(t, s, "m-1")
	if got := processAll(t, s, 1); got != "fulfilled" {
		t.Fatalf("the first payment once its order is created: %s, want fulfilled", got)
	}
	// $1 is the order, $2 the subscription.
	sub := subscriptionID(t, conn, "sub_1")
	paid := []countCheck{
		{"fulfilled orders paid by the payment, recording the subscription", `SELECT count(*) FROM orders
			WHERE id = $1 AND state = 'fulfilled' AND paid_payment_id = 'pay_inv_sub_1_1' AND paid_subscription_id = $2`, 1},
		{"licenses", `SELECT count(*) FROM entitlements WHERE (order_id = $1 OR $2 = '') AND kind = 'license' AND revoked_at IS NULL`, 1},
		{"order.fulfilled events", `SELECT count(*) FROM order_events WHERE (order_id = $1 OR $2 = '') AND topic = 'order.fulfilled'`, 1},
		{"events of the order and the subscription", `SELECT count(*) FROM order_events WHERE order_id = $1 OR subscription_id = $2`, 2},
		{"crm messages", `SELECT count(*) FROM outbox_messages WHERE (order_id = $1 OR subscription_id = $2) AND destination_id = 'crm'`, 2},
		{"periods", `SELECT count(*) FROM subscription_periods WHERE (subscription_id = $2 OR $1 = '') AND refunded_at IS NULL`, 1},
		{"items", `SELECT count(*) FROM reconciliation_items WHERE order_id = $1 OR subscription_id = $2`, 0},
		{"the payment's decision, for the order, saying why", `SELECT count(*) FROM inbox_events WHERE event_id = 'evt_1'
			AND order_id = $1 AND applied_subscription_id = $2 AND decision = 'fulfilled'
			AND decision_reason LIKE '%(late match: order ' || $1 || ' was created after this event)'`, 1},
	}
	wantCounts(t, conn, paid, id, sub)
	queued := `SELECT count(*) FROM inbox_work WHERE state = 'pending'`
	if n := count(t, conn, queued); n != 0 {
		t.Errorf("%d events queued again", n)
	}
	wantSub(t, conn, "sub_1", subRow{State: "active", Periods: 1, End: subJan1.AddDate(0, 1, 0), Renewed: 1})

	if got := deliver(t, s, firstPayment("evt_1b", "sub_1", "m-1")); got != "already_applied" {
		t.Errorf("the payment announced again: %s, want already_applied", got)
	}
	if again, created := lateOrder(t, s, "m-1"); again != id || created {
		t.Errorf("the order created again: %s, created %v; want %s, not created", again, created, id)
	}
	wantCounts(t, conn, paid, id, sub)
	if n := count(t, conn, queued); n != 0 {
		t.Errorf("%d events queued again", n)
	}

	refundAt := subJan1.AddDate(0, 0, 9)
	if got := deliver(t, s, firstRefund("evt_r", "m-1", refundAt)); got != "refunded" {
		t.Fatalf("the refund: %s, want refunded", got)
	}
	wantCounts(t, conn, []countCheck{
		{"refunded orders", `SELECT count(*) FROM orders WHERE id = $1 AND state = 'refunded'`, 1},
		{"licenses left", `SELECT count(*) FROM entitlements WHERE order_id = $1 AND revoked_at IS NULL`, 0},
		{"the order's refund items", `SELECT count(*) FROM reconciliation_items WHERE order_id = $1 AND kind = 'refund_after_fulfillment'`, 1},
	}, id)
	if n := count(t, conn, `SELECT count(*) FROM subscription_periods WHERE subscription_id = $1 AND refunded_at IS NOT NULL`, sub); n != 1 {
		t.Errorf("%d refunded periods, want 1", n)
	}
	wantSub(t, conn, "sub_1", subRow{State: "expired", Periods: 1, End: refundAt, Renewed: 1, Ended: 1, Items: 1})
}

// orderTookNothing counts what an order ($1) created after its payment
// holds when that payment, refunded first, paid it nothing: unpaid, no
// license, no event, no item, nothing queued.
var orderTookNothing = []countCheck{
	{"unpaid orders", `SELECT count(*) FROM orders WHERE id = $1 AND state = 'pending_payment' AND paid_at IS NULL`, 1},
	{"licenses", `SELECT count(*) FROM entitlements WHERE order_id = $1`, 0},
	{"order events", `SELECT count(*) FROM order_events WHERE order_id = $1`, 0},
	{"the order's items", `SELECT count(*) FROM reconciliation_items WHERE order_id = $1`, 0},
	{"events queued", `SELECT count(*) FROM inbox_work WHERE state = 'pending' AND $1 <> ''`, 0},
}

// The same, with the payment refunded before the order is created: the
// refund takes the period back (the subscription's rules), and the
// payment, decided again for the order, pays nothing — the money went
// back — so the order stays unpaid, nothing granted, no second item.
func TestSubscriptionFlowRegisteredPaymentRefundedBeforeItsOrder(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	if _, _, err := s.SubscriptionCreate(context.Background(), subRef); err != nil {
		t.Fatal(err)
	}
	refundAt := subJan1.AddDate(0, 0, 9)
	if got := deliver(t, s, firstPayment("evt_1", "sub_1", "m-1")); got != "renewed" {
		t.Fatalf("the first payment before its order: %s, want renewed", got)
	}
	if got := deliver(t, s, firstRefund("evt_r", "m-1", refundAt)); got != "subscription_refunded" {
		t.Fatalf("its refund before the order: %s, want subscription_refunded", got)
	}
	id, _ := lateOrder(t, s, "m-1")
	if got := processAll(t, s, 1); got != "stale_ignored" {
		t.Fatalf("the refunded payment once its order is created: %s, want stale_ignored", got)
	}
	wantCounts(t, conn, orderTookNothing, id)
	wantSub(t, conn, "sub_1", subRow{State: "expired", Periods: 1, End: refundAt, Renewed: 1, Ended: 1, Items: 1})
}

// The same, with the refund decided after the order is created but before
// the payment queued again for it: the refund, the order's now (unpaid),
// has the subscription rules take the period back, and the payment then
// pays nothing (rows counted).
func TestSubscriptionFlowRegisteredPaymentRefundedOnceItsOrderIsCreated(t *testing.T) {
	t.Parallel()
	s, conn := registeredPaidFirst(t)
	ctx := context.Background()
	id, _ := lateOrder(t, s, "m-1")
	refundAt := subJan1.AddDate(0, 0, 9)
	r, err := s.InboxInsert(ctx, firstRefund("evt_r", "m-1", refundAt), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 10})
	if err != nil || len(claims) != 2 {
		t.Fatalf("claim = %v, %v; want the payment and its refund", claims, err)
	}
	payment := claims[0].ID
	if payment == r.ID {
		payment = claims[1].ID
	}
	for _, step := range []struct {
		id   int64
		want fulfillment.Decision
	}{{r.ID, fulfillment.DecisionRefundedBeforePayment}, {payment, fulfillment.DecisionStaleIgnored}} {
		outs, err := s.InboxProcess(ctx, []int64{step.id}, "w")
		if err != nil {
			t.Fatal(err)
		}
		if got := outs[step.id].Decision; got != step.want {
			t.Errorf("event %d: %s, want %s (%s)", step.id, got, step.want, outs[step.id].Reason)
		}
	}
	wantCounts(t, conn, orderTookNothing, id)
	wantSub(t, conn, "sub_1", subRow{State: "expired", Periods: 1, End: refundAt, Renewed: 1, Ended: 1, Items: 1})
}

// Migration 053 keeps, with a period paid for want of the order its
// payment named, that order's merchant id and the event that paid it, and
// rolls back keeping the periods. A period paid before it awaits no order:
// the order created after it stays unpaid, as before the migration.
func TestMigration053PeriodAwaitedOrder(t *testing.T) {
	t.Parallel()
	s, conn := registeredPaidFirst(t)
	ctx := context.Background()
	awaiting := `SELECT count(*) FROM subscription_periods p JOIN inbox_events e ON e.id = p.inbox_event_id
		WHERE p.awaited_merchant_order_id = 'm-1' AND e.event_id = 'evt_1'`
	if n := count(t, conn, awaiting); n != 1 {
		t.Fatalf("%d periods awaiting order m-1, paid by evt_1; want 1", n)
	}
	m, v := migrator(t, conn, "_period_awaited_order.sql")
	for _, version := range []int32{v - 1, v, v - 1, int32(len(m.Migrations))} {
		if err := m.MigrateTo(ctx, version); err != nil {
			t.Fatalf("migrating to %d: %v", version, err)
		}
	}
	wantCounts(t, conn, []countCheck{
		{"periods", `SELECT count(*) FROM subscription_periods`, 1},
		{"periods awaiting an order", `SELECT count(*) FROM subscription_periods WHERE awaited_merchant_order_id IS NOT NULL`, 0},
		{"the index of periods awaiting an order", `SELECT count(*) FROM pg_indexes WHERE indexname = 'subscription_periods_awaited_order_idx'`, 1},
	})
	lateOrder(t, s, "m-1")
	if n := count(t, conn, `SELECT count(*) FROM inbox_work WHERE state = 'pending'`); n != 0 {
		t.Errorf("%d events queued by the order of a period paid before the migration, want none", n)
	}
	// Only a first period awaits an order, and with the event that paid it.
	for _, bad := range []string{
		`UPDATE subscription_periods SET awaited_merchant_order_id = 'm-1'`,
		`UPDATE subscription_periods SET awaited_merchant_order_id = 'm-1', period = 2,
			inbox_event_id = (SELECT id FROM inbox_events WHERE event_id = 'evt_1')`,
	} {
		_, err := conn.Exec(ctx, bad)
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.ConstraintName != "subscription_periods_awaited_first" {
			t.Errorf("%s: %v, want a violation of subscription_periods_awaited_first", bad, err)
		}
	}
}

// raceOrderAndDecision claims payment id, the one event queued, then
// creates late order merchant while it decides the payment, and decides
// whatever either of them queued again.
func raceOrderAndDecision(t *testing.T, s *storage.Store, conn *pgx.Conn, id int64, merchant string) {
	t.Helper()
	ctx := context.Background()
	if claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 10}); err != nil ||
		len(claims) != 1 {
		t.Fatalf("claim = %v, %v; want the payment", claims, err)
	}
	jobs := make(chan func(), 2)
	jobs <- func() { lateOrder(t, s, merchant) }
	jobs <- func() {
		if _, err := s.InboxProcess(ctx, []int64{id}, "w"); err != nil {
			t.Error(err)
		}
	}
	concurrently(2, func() { (<-jobs)() })
	if n := count(t, conn, "SELECT count(*) FROM inbox_work WHERE state = 'pending'"); n > 0 {
		processAll(t, s, n)
	}
}

// The order's creation races the decision of its payment, which a
// registered subscription takes for want of the order: neither sees what
// the other has not committed, yet each order is paid by its payment,
// once — by the payment's own batch queueing it again when the order
// committed first, else by the order's creation (the late-match locks of
// the merchant order id). Each round counts what it leaves.
func TestSubscriptionFlowRegisteredOrderRacesItsPayment(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	const rounds = 20
	for i := range rounds {
		r, merchant := registeredPayment(t, s, "race", i)
		raceOrderAndDecision(t, s, conn, r.ID, merchant)
	}
	wantCounts(t, conn, []countCheck{
		{"events left unprocessed", `SELECT count(*) FROM inbox_events WHERE state <> 'processed'`, 0},
		{"payments decided for their order", `SELECT count(*) FROM inbox_events WHERE decision = 'fulfilled' AND order_id IS NOT NULL`, rounds},
		{"orders fulfilled", `SELECT count(*) FROM orders WHERE state = 'fulfilled' AND paid_subscription_id IS NOT NULL`, rounds},
		{"licenses", `SELECT count(*) FROM entitlements`, rounds},
		{"periods paid", `SELECT count(*) FROM subscription_periods`, rounds},
		{"subscriptions of one period", `SELECT count(*) FROM subscriptions WHERE periods = 1`, rounds},
		{"items", `SELECT count(*) FROM reconciliation_items`, 0},
	})
}

// An order created after the late-match window (inbox.late_match_window)
// of the payment that named it is left as before: the payment stays the
// subscription's, and the order unpaid.
func TestSubscriptionFlowRegisteredOrderCreatedAfterTheWindow(t *testing.T) {
	t.Parallel()
	s, conn := registeredPaidFirst(t)
	if _, err := conn.Exec(context.Background(), "UPDATE inbox_events SET received_at = now() - interval '8 days'"); err != nil {
		t.Fatal(err)
	}
	id, _ := lateOrder(t, s, "m-1")
	wantCounts(t, conn, []countCheck{
		{"events queued", `SELECT count(*) FROM inbox_work WHERE state = 'pending' AND $1 <> ''`, 0},
		{"unpaid orders", `SELECT count(*) FROM orders WHERE id = $1 AND state = 'pending_payment'`, 1},
	}, id)
	wantSub(t, conn, "sub_1", subRow{State: "active", Periods: 1, End: subJan1.AddDate(0, 1, 0), Renewed: 1})

	// What a person does for such an order (or one left unpaid before
	// migration 053, whose period keeps no order id): replay the payment.
	// Decided again, it finds the order and pays it, and no second period.
	if _, err := s.EventReplay(context.Background(), fulfillment.EventReplayRequest{ID: inboxID(t, conn, "evt_1"), Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 1); got != "fulfilled" {
		t.Fatalf("the payment replayed by a person: %s, want fulfilled", got)
	}
	wantCounts(t, conn, []countCheck{
		{"fulfilled orders", `SELECT count(*) FROM orders WHERE id = $1 AND state = 'fulfilled'`, 1},
		{"licenses", `SELECT count(*) FROM entitlements WHERE order_id = $1`, 1},
		{"items", `SELECT count(*) FROM reconciliation_items WHERE order_id = $1`, 0},
	}, id)
	wantSub(t, conn, "sub_1", subRow{State: "active", Periods: 1, End: subJan1.AddDate(0, 1, 0), Renewed: 1})
}

// lineOrder stores order merchantID of lines, paid in amount USDT, and
// returns its id.
func lineOrder(t *testing.T, s *storage.Store, merchantID, amount string, lines ...fulfillment.LineDraft) string {
	t.Helper()
	id, _ := createOrder(t, s, merchantID, amount, lines...)
	return id
}

// createOrder stores order merchantID of lines, paid in amount USDT, and
// returns its id and whether this call created it.
func createOrder(t *testing.T, s *storage.Store, merchantID, amount string, lines ...fulfillment.LineDraft) (string, bool) {
	t.Helper()
	spec, err := fulfillment.OrderDraft{
		OrgID: "org_a", Environment: "live", MerchantOrderID: merchantID, Lines: lines,
		Settlement: &fulfillment.SettlementDraft{Token: "USDT", Network: "TRON", Amount: amount},
	}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	o, created, err := s.OrderCreate(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return o.ID, created
}

// lateOrderUnfit is a registered subscription's first payment, followed by
// an order created after it whose subscription line pays that subscription
// but that the payment does not fit (create: another price, another plan).
// The payment, queued again for it, leaves the order unpaid with an item
// of kind item (decision) — never on hold and marked paid, which would let
// the payment's refund, then the order's, leave the period paid: the money
// back with the payer, the access kept. Announced again, it changes
// nothing; its full refund then is the period's (the subscription's
// rules), once, and the order stays unpaid (rows counted).
func lateOrderUnfit(t *testing.T, create func(*storage.Store) string, decision, item string) {
	t.Helper()
	s, conn := registeredPaidFirst(t)
	id := create(s)
	if got := processAll(t, s, 1); got != decision {
		t.Fatalf("the payment once its order is created: %s, want %s", got, decision)
	}
	sub := subscriptionID(t, conn, "sub_1")
	// $1 is the order, $2 the subscription.
	unpaid := []countCheck{
		{"unpaid orders", `SELECT count(*) FROM orders WHERE id = $1 AND state = 'pending_payment' AND paid_at IS NULL AND $2 <> ''`, 1},
		{"entitlements", `SELECT count(*) FROM entitlements WHERE order_id = $1 AND $2 <> ''`, 0},
		{"order events", `SELECT count(*) FROM order_events WHERE order_id = $1 AND $2 <> ''`, 0},
		{"the order's items", `SELECT count(*) FROM reconciliation_items WHERE order_id = $1 AND kind = '` + item + `' AND $2 <> ''`, 1},
		{"items", `SELECT count(*) FROM reconciliation_items WHERE order_id = $1 OR subscription_id = $2`, 1},
		{"events queued", `SELECT count(*) FROM inbox_work WHERE state = 'pending' AND $1 <> '' AND $2 <> ''`, 0},
	}
	wantCounts(t, conn, unpaid, id, sub)
	wantSub(t, conn, "sub_1", subRow{State: "active", Periods: 1, End: subJan1.AddDate(0, 1, 0), Renewed: 1})
	if got := deliver(t, s, firstPayment("evt_1b", "sub_1", "m-1")); got != decision {
		t.Errorf("the payment announced again: %s, want %s", got, decision)
	}
	wantCounts(t, conn, unpaid, id, sub)

	refundWhileUnpaid(t, s, conn, unpaid[:3], id, sub)
}

// refundWhileUnpaid delivers the full refund of the registered
// subscription's first payment, twice, while late order id is unpaid: the
// order's refunded_before_payment, then already_applied; unpaid ($1 the
// order, $2 the subscription sub) still holds; the subscription's rules
// take the period back, once, and end its access at the refund.
func refundWhileUnpaid(t *testing.T, s *storage.Store, conn *pgx.Conn, unpaid []countCheck, id, sub string) {
	t.Helper()
	refundAt := subJan1.AddDate(0, 0, 9)
	if got := deliver(t, s, firstRefund("evt_r", "m-1", refundAt)); got != "refunded_before_payment" {
		t.Fatalf("the refund: %s, want refunded_before_payment", got)
	}
	if got := deliver(t, s, firstRefund("evt_r2", "m-1", refundAt)); got != "already_applied" {
		t.Errorf("the refund announced again: %s, want already_applied", got)
	}
	wantCounts(t, conn, unpaid, id, sub)
	if n := count(t, conn, `SELECT count(*) FROM subscription_periods WHERE subscription_id = $1 AND refunded_at IS NOT NULL`, sub); n != 1 {
		t.Errorf("%d refunded periods, want 1", n)
	}
	wantSub(t, conn, "sub_1", subRow{State: "expired", Periods: 1, End: refundAt, Renewed: 1, Ended: 1, Items: 1})
}

// The late order priced higher than its payment (20 USDT, 10 paid):
// amount_mismatch, the order unpaid (lateOrderUnfit). The first version
// held it paid, and the payment's refund refunded the order, leaving the
// period paid and the subscription active.
func TestSubscriptionFlowRegisteredOrderOfAnotherPriceLeftUnpaid(t *testing.T) {
	t.Parallel()
	lateOrderUnfit(t, func(s *storage.Store) string {
		return lineOrder(t, s, "m-1", "20", fulfillment.LineDraft{SKU: "pro", Kind: "subscription", Quantity: 1, Currency: "USD",
			MinorUnits: 2000, AccountRef: "user_42", PlanID: subPlan.ID})
	}, "amount_mismatch", "amount_mismatch")
}

// The late order for another plan than the subscription's:
// plan_change_refused, the order unpaid (lateOrderUnfit); the first
// version held it paid, and the refund kept the period.
func TestSubscriptionFlowRegisteredOrderForAnotherPlanLeftUnpaid(t *testing.T) {
	t.Parallel()
	lateOrderUnfit(t, func(s *storage.Store) string { return planOrder(t, s, "m-1", yearPlan.ID) },
		"plan_change_refused", "plan_change")
}

// A late order with the merchant order id the first payment named but no
// subscription line (a license): the payment paid the subscription's
// period, and stays the subscription's — decided again for the order, it
// is already_applied: no license, the order unpaid, no item (the order
// awaits a payment of its own, as it did before late matching; had the
// order come first, the payment would have paid it and no period). The
// first version granted the license too: one payment, two entitlements.
// Its refund then takes the period back, as with no order (rows counted).
func TestSubscriptionFlowRegisteredOrderWithoutItsSubscription(t *testing.T) {
	t.Parallel()
	s, conn := registeredPaidFirst(t)
	license := fulfillment.LineDraft{SKU: "pro-license", Kind: "license", Quantity: 1, Currency: "USD", MinorUnits: 1000}
	id := lineOrder(t, s, "m-1", "10", license)
	if got := processAll(t, s, 1); got != "already_applied" {
		t.Fatalf("the payment once the order is created: %s, want already_applied", got)
	}
	lineOrder(t, s, "m-1", "10", license)
	sub := subscriptionID(t, conn, "sub_1")
	unpaid := []countCheck{
		{"unpaid orders", `SELECT count(*) FROM orders WHERE id = $1 AND state = 'pending_payment' AND paid_at IS NULL AND $2 <> ''`, 1},
		{"entitlements", `SELECT count(*) FROM entitlements WHERE order_id = $1 AND $2 <> ''`, 0},
		{"order events", `SELECT count(*) FROM order_events WHERE order_id = $1 AND $2 <> ''`, 0},
		{"items", `SELECT count(*) FROM reconciliation_items WHERE order_id = $1 OR subscription_id = $2`, 0},
		{"periods paid by the payment", `SELECT count(*) FROM subscription_periods
			WHERE subscription_id = $2 AND payment_id = 'pay_inv_sub_1_1' AND refunded_at IS NULL AND $1 <> ''`, 1},
		{"events queued", `SELECT count(*) FROM inbox_work WHERE state = 'pending' AND $1 <> '' AND $2 <> ''`, 0},
	}
	wantCounts(t, conn, unpaid, id, sub)
	refundWhileUnpaid(t, s, conn, unpaid[:3], id, sub)
}

// Two charges of a registered subscription name the same merchant order
// before it is created (its id kept in the subscription's metadata, say):
// only the first period's payment awaits the order — the second is a
// renewal, never the order's payment. The order's creation queues the
// first alone, which pays it; the second stays the subscription's, and its
// refund takes its period back as with no order (other_payment_refunded
// for the order). The first version queued both, flagged the second an
// extra payment and kept its period on refund (rows counted).
func TestSubscriptionFlowRegisteredSecondChargeNamingTheOrder(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	if _, _, err := s.SubscriptionCreate(context.Background(), subRef); err != nil {
		t.Fatal(err)
	}
	second := subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 0), "inv_sub_1_2")
	second.Payment.MerchantOrderID = "m-1"
	if got := deliver(t, s, firstPayment("evt_1", "sub_1", "m-1"), second); got != "renewed,renewed" {
		t.Fatalf("the charges before the order: %s, want renewed,renewed", got)
	}
	if n := count(t, conn, `SELECT count(*) FROM subscription_periods WHERE awaited_merchant_order_id IS NOT NULL`); n != 1 {
		t.Errorf("%d periods await the order, want 1 (the first)", n)
	}
	id, _ := lateOrder(t, s, "m-1")
	if got := processAll(t, s, 1); got != "fulfilled" {
		t.Fatalf("the first charge once the order is created: %s, want fulfilled", got)
	}
	sub := subscriptionID(t, conn, "sub_1")
	wantCounts(t, conn, []countCheck{
		{"orders fulfilled by the first charge", `SELECT count(*) FROM orders
			WHERE id = $1 AND state = 'fulfilled' AND paid_payment_id = 'pay_inv_sub_1_1' AND $2 <> ''`, 1},
		{"periods paid", `SELECT count(*) FROM subscription_periods WHERE subscription_id = $2 AND refunded_at IS NULL AND $1 <> ''`, 2},
		{"items", `SELECT count(*) FROM reconciliation_items WHERE order_id = $1 OR subscription_id = $2`, 0},
		{"events queued", `SELECT count(*) FROM inbox_work WHERE state = 'pending' AND $1 <> '' AND $2 <> ''`, 0},
	}, id, sub)
	if got := deliver(t, s, subEventNamed(second, "evt_2b")); got != "already_applied" {
		t.Errorf("the second charge announced again: %s, want already_applied", got)
	}
	if n := count(t, conn, `SELECT count(*) FROM reconciliation_items`); n != 0 {
		t.Errorf("%d items, want none", n)
	}
	refundAt := subJan1.AddDate(0, 1, 3)
	refund := subEvent("evt_r2", "sub_1", fulfillment.EventRefunded, refundAt, "inv_sub_1_2")
	refund.Payment.PaymentID, refund.Payment.MerchantOrderID = "pay_inv_sub_1_2", "m-1"
	if got := deliver(t, s, refund); got != "other_payment_refunded" {
		t.Fatalf("the second charge's refund: %s, want other_payment_refunded", got)
	}
	wantCounts(t, conn, []countCheck{
		{"orders still fulfilled", `SELECT count(*) FROM orders WHERE id = $1 AND state = 'fulfilled' AND $2 <> ''`, 1},
		{"periods refunded: the second", `SELECT count(*) FROM subscription_periods
			WHERE subscription_id = $2 AND refunded_at IS NOT NULL AND period = 2 AND $1 <> ''`, 1},
		{"periods paid", `SELECT count(*) FROM subscription_periods WHERE subscription_id = $2 AND refunded_at IS NULL AND $1 <> ''`, 1},
	}, id, sub)
}

// A charge of the subscription an order paid that names that order too
// (the provider copied the first checkout's merchant order id into its
// renewals) renews the subscription: delivered twice at once and replayed,
// it pays period 2 once — one subscription.renewed, no extra_payment item
// — and the order keeps what its own payment gave it, and nothing more
// (its license, its credit, its event, its one attempt). Its full refund,
// delivered twice, refunds period 2, once, and ends its access; the order
// keeps its grants. The first version decided the charge as the order's
// second payment: duplicate_payment, an extra_payment item, no period
// (rows counted).
func TestSubscriptionFlowChargeNamingItsPaidOrder(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	id := lineOrder(t, s, "m-1", "10",
		fulfillment.LineDraft{SKU: "pro", Kind: "subscription", Quantity: 1, Currency: "USD", MinorUnits: 1000, AccountRef: "user_42", PlanID: subPlan.ID},
		fulfillment.LineDraft{SKU: "pro-license", Kind: "license", Quantity: 1, Currency: "USD", MinorUnits: 500},
		fulfillment.LineDraft{SKU: "credits", Kind: "balance_credit", Quantity: 1, Currency: "USD", MinorUnits: 500, AccountRef: "acct_1"})
	if got := deliver(t, s, firstPayment("evt_1", "sub_1", "m-1")); got != "fulfilled" {
		t.Fatalf("the order's payment: %s, want fulfilled", got)
	}
	sub := subscriptionID(t, conn, "sub_1")
	feb1 := subJan1.AddDate(0, 1, 0)
	charge := subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, feb1, "inv_sub_1_2")
	charge.Payment.MerchantOrderID = "m-1"

	// $1 is the order, $2 the subscription.
	order := []countCheck{
		{"the order, fulfilled, paid by its own payment", `SELECT count(*) FROM orders WHERE id = $1 AND state = 'fulfilled'
			AND paid_payment_id = 'pay_inv_sub_1_1' AND paid_subscription_id = $2`, 1},
		{"licenses", `SELECT count(*) FROM entitlements WHERE order_id = $1 AND revoked_at IS NULL AND $2 <> ''`, 1},
		{"ledger entries", `SELECT count(*) FROM ledger_entries WHERE order_id = $1 AND movement = 'credit' AND $2 <> ''`, 1},
		{"all ledger entries", `SELECT count(*) FROM ledger_entries WHERE order_id = $1 AND $2 <> ''`, 1},
		{"order events", `SELECT count(*) FROM order_events WHERE order_id = $1 AND topic = 'order.fulfilled' AND $2 <> ''`, 1},
		{"all order events", `SELECT count(*) FROM order_events WHERE order_id = $1 AND $2 <> ''`, 1},
		{"the order's items", `SELECT count(*) FROM reconciliation_items WHERE order_id = $1 AND $2 <> ''`, 0},
	}
	renewed := append(slices.Clip(order), []countCheck{
		{"the order's attempts", `SELECT count(*) FROM payment_attempts WHERE order_id = $1 AND $2 <> ''`, 1},
		{"periods", `SELECT count(*) FROM subscription_periods WHERE subscription_id = $2 AND refunded_at IS NULL AND $1 <> ''`, 2},
		{"period 2, paid by the charge", `SELECT count(*) FROM subscription_periods
			WHERE subscription_id = $2 AND period = 2 AND payment_id = 'pay_inv_sub_1_2' AND $1 <> ''`, 1},
		{"extra_payment items", `SELECT count(*) FROM reconciliation_items WHERE kind = 'extra_payment' AND $1 <> '' AND $2 <> ''`, 0},
		{"items", `SELECT count(*) FROM reconciliation_items WHERE order_id = $1 OR subscription_id = $2`, 0},
		{"subscription.renewed of period 2", `SELECT count(*) FROM order_events
			WHERE subscription_id = $2 AND topic = 'subscription.renewed' AND period = 2 AND $1 <> ''`, 1},
		{"the charge's events, the subscription's, of no order", `SELECT count(*) FROM inbox_events
			WHERE event_id LIKE 'evt_2%' AND order_id IS NULL AND applied_subscription_id = $2 AND $1 <> ''`, 2},
		{"events queued", `SELECT count(*) FROM inbox_work WHERE state = 'pending' AND $1 <> '' AND $2 <> ''`, 0},
	}...)
	wantCounts(t, conn, order, id, sub)

	// The charge delivered twice (two event ids), decided at once.
	ids, decisions := decideAtOnce(t, s, subEventNamed(charge, "evt_2a"), subEventNamed(charge, "evt_2b"))
	if got := decisions; got != "already_applied,renewed" {
		t.Errorf("the charge delivered twice: %s, want renewed and already_applied", got)
	}
	wantCounts(t, conn, renewed, id, sub)
	want := subRow{State: "active", Periods: 2, End: feb1.AddDate(0, 1, 0), Renewed: 2}
	wantSub(t, conn, "sub_1", want)

	// Replayed by a person: nothing more.
	if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: ids[0], Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 1); got != "already_applied" {
		t.Errorf("the charge replayed: %s, want already_applied", got)
	}
	wantCounts(t, conn, renewed, id, sub)
	wantSub(t, conn, "sub_1", want)

	// Its full refund, naming the order and the subscription, delivered
	// twice: the period it paid is refunded once, its access ended once.
	refundAt := feb1.AddDate(0, 0, 3)
	refund := subEvent("evt_r2", "sub_1", fulfillment.EventRefunded, refundAt, "inv_sub_1_2")
	refund.Payment.PaymentID, refund.Payment.MerchantOrderID = "pay_inv_sub_1_2", "m-1"
	for _, eventID := range []string{"evt_r2a", "evt_r2b"} {
		if got := deliver(t, s, subEventNamed(refund, eventID)); got != "other_payment_refunded" {
			t.Errorf("the charge's refund (%s): %s, want other_payment_refunded (the order's), the period the subscription's", eventID, got)
		}
		wantCounts(t, conn, append(slices.Clip(order), []countCheck{
			{"period 2 refunded", `SELECT count(*) FROM subscription_periods
				WHERE subscription_id = $2 AND period = 2 AND refunded_at IS NOT NULL AND $1 <> ''`, 1},
			{"periods refunded", `SELECT count(*) FROM subscription_periods WHERE subscription_id = $2 AND refunded_at IS NOT NULL AND $1 <> ''`, 1},
			{"the refund's decisions applied to the subscription", `SELECT count(*) FROM inbox_events
				WHERE event_id = '` + eventID + `' AND applied_subscription_id = $2 AND $1 <> ''`, 1},
			{"refund items", `SELECT count(*) FROM reconciliation_items
				WHERE subscription_id = $2 AND kind = 'refund_after_fulfillment' AND $1 <> ''`, 1},
			{"extra_payment items", `SELECT count(*) FROM reconciliation_items WHERE kind = 'extra_payment' AND $1 <> '' AND $2 <> ''`, 0},
		}...), id, sub)
		wantSub(t, conn, "sub_1", subRow{State: "expired", Periods: 2, End: refundAt, Renewed: 2, Ended: 1, Items: 1})
	}
}

// subEventNamed is ev under another event id: the same payment announced
// again.
func subEventNamed(ev fulfillment.ProviderEvent, id string) fulfillment.ProviderEvent {
	ev.EventID = id
	return ev
}

// A payment a registered subscription took for want of its order, replayed
// by a person (EventReplay) while the order is being created: the replay,
// decided before the order committed, is already applied to the
// subscription, yet its transaction takes the order's late-match lock and
// queues it again once the order exists — else the order's creation,
// finding it pending, and the replay, not finding the order, would leave
// the order unpaid. Each order is paid once (rows counted).
func TestSubscriptionFlowRegisteredOrderRacesItsReplayedPayment(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	const rounds = 20
	for i := range rounds {
		r, merchant := registeredPayment(t, s, "replay", i)
		if got := processAll(t, s, 1); got != "renewed" {
			t.Fatalf("the payment before its order: %s, want renewed", got)
		}
		if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: r.ID, Actor: "admin"}); err != nil {
			t.Fatal(err)
		}
		raceOrderAndDecision(t, s, conn, r.ID, merchant)
	}
	wantCounts(t, conn, []countCheck{
		{"events left unprocessed", `SELECT count(*) FROM inbox_events WHERE state <> 'processed'`, 0},
		{"orders fulfilled", `SELECT count(*) FROM orders WHERE state = 'fulfilled' AND paid_subscription_id IS NOT NULL`, rounds},
		{"licenses", `SELECT count(*) FROM entitlements`, rounds},
		{"periods paid", `SELECT count(*) FROM subscription_periods`, rounds},
		{"items", `SELECT count(*) FROM reconciliation_items`, 0},
		{"events queued", `SELECT count(*) FROM inbox_work WHERE state = 'pending'`, 0},
	})
}

// A subscription.overdue older than a renewal applied before it is
// stale: the subscription stays active, nothing is announced.
func TestSubscriptionFlowStaleOverdue(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	subscriptionOrder(t, s, "m-1")
	deliver(t, s, firstPayment("evt_1", "sub_1", "m-1"))
	deliver(t, s, subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 2), "inv_2"))
	if got := deliver(t, s, subEvent("evt_od", "sub_1", fulfillment.EventSubscriptionOverdue, subJan1.AddDate(0, 1, 1), "")); got != "stale_ignored" {
		t.Errorf("stale overdue: %s", got)
	}
	want := subRow{State: "active", Periods: 2, End: subJan1.AddDate(0, 2, 0), Renewed: 2}
	wantSub(t, conn, "sub_1", want)
}

// The invoice.overdue of a renewal attempt, after that renewal was paid,
// changes nothing: one attempt expiring never cancels a subscription.
func TestSubscriptionFlowRenewalInvoiceOverdue(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	subscriptionOrder(t, s, "m-1")
	deliver(t, s, firstPayment("evt_1", "sub_1", "m-1"))
	deliver(t, s, subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 0), "inv_2"))
	before := readSub(t, conn, "sub_1")
	if got := deliver(t, s, subEvent("evt_3", "sub_1", fulfillment.EventAttemptExpired, subJan1.AddDate(0, 1, 3), "inv_2")); got != "ignored_type" {
		t.Errorf("invoice.overdue of the paid renewal: %s", got)
	}
	if after := readSub(t, conn, "sub_1"); after != before {
		t.Errorf("after the invoice's overdue %+v, before %+v", after, before)
	}
	if n := count(t, conn, `SELECT count(*) FROM reconciliation_items`); n != 0 {
		t.Errorf("%d items, want none", n)
	}
}

// A lifecycle event of a subscription the service does not know is
// recorded, unmatched, and creates nothing.
func TestSubscriptionFlowUnknownSubscription(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	if got := deliver(t, s, subEvent("evt_1", "sub_x", fulfillment.EventSubscriptionCancelled, subJan1, "")); got != "unmatched" {
		t.Errorf("cancel of an unknown subscription: %s", got)
	}
	if n := count(t, conn, `SELECT count(*) FROM subscriptions`); n != 0 {
		t.Errorf("%d subscriptions, want none", n)
	}
}

// Cancelled mid-period: access lasts until the paid period ends, never
// less, then ends exactly once — with the sweeper's clock under the test's
// control.
func TestSubscriptionFlowCancelMidPeriod(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	id := cancelledSubscription(t, s, conn, subJan1.AddDate(0, 0, 14))
	end := subJan1.AddDate(0, 1, 0)
	for _, now := range []time.Time{subJan1.AddDate(0, 0, 20), end.Add(-time.Second)} {
		if swept, err := s.SubscriptionSweep(ctx, id, subPlan, now); err != nil || swept {
			t.Errorf("sweep at %s, within the paid period = %v, %v; want nothing to do", now, swept, err)
		}
	}
	for i, want := range []bool{true, false} {
		if swept, err := s.SubscriptionSweep(ctx, id, subPlan, end.Add(time.Duration(i)*time.Hour)); err != nil || swept != want {
			t.Errorf("sweep %d at the period's end = %v, %v; want %v", i, swept, err, want)
		}
	}
	want := subRow{State: "expired", Periods: 1, End: end, Renewed: 1, Ended: 1}
	wantSub(t, conn, "sub_1", want)
}

// Two sweepers, each a leased queue under its own live owner, run at once
// over subscriptions whose access ran out: each access ends exactly once.
func TestSubscriptionSweepersRace(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const n = 30
	// Paid for one month, four months ago: period and grace are over.
	long := time.Now().AddDate(0, -4, 0)
	for i := range n {
		ref := subRef
		ref.ProviderSubscriptionID = fmt.Sprintf("sub_%d", i)
		pay := fulfillment.SubscriptionEvent{Kind: fulfillment.SubRenewalPaid, OccurredAt: long, InvoiceID: "inv_1"}
		if _, _, err := s.SubscriptionApply(ctx, ref, pay, "evt", subPlan); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	log := slog.New(slog.DiscardHandler)
	for range 2 {
		live := s.NewLiveness()
		wg.Go(func() { _ = live.Run(ctx) })
		q := worker.NewSweeper(s.SweepQueue(), s, live, worker.Config{Workers: 3, Batch: 4, Poll: 20 * time.Millisecond}, nil, log)
		wg.Go(func() { _ = q.Run(ctx) })
	}
	deadline := time.Now().Add(30 * time.Second)
	for count(t, conn, `SELECT count(*) FROM subscription_sweeps WHERE state = 'done'`) < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if got := count(t, conn, `SELECT count(*) FROM subscriptions WHERE state = 'expired' AND access_ended_at IS NOT NULL`); got != n {
		t.Errorf("%d subscriptions ended, want %d", got, n)
	}
	if got := count(t, conn, `SELECT count(*) FROM order_events WHERE topic = 'subscription.access_ended'`); got != n {
		t.Errorf("%d subscription.access_ended events, want %d (one each)", got, n)
	}
	if got := count(t, conn, `SELECT count(*) FROM outbox_messages WHERE topic = 'subscription.access_ended'`); got != n {
		t.Errorf("%d subscription.access_ended messages to crm, want %d", got, n)
	}
}

// T-Bank: the first payment of an order with a subscription line carries
// the card binding's RebillId, which names the subscription; a recurrent
// charge (a payment of its own, of a checkout no order knows) with that
// RebillId renews it, once however often it is notified. The bank sends no
// event time: the time of receipt stands in.
func TestSubscriptionFlowTBankRecurrent(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	spec, err := fulfillment.OrderDraft{
		OrgID: "org_a", Environment: "live", MerchantOrderID: "m-t", CheckoutSessionID: "m-t-1",
		Lines: []fulfillment.LineDraft{{SKU: "pro", Kind: "subscription", Quantity: 1, Currency: "RUB", MinorUnits: 99000,
			AccountRef: "user_7", PlanID: subPlan.ID}},
	}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.OrderCreate(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	confirmed := func(paymentID, orderID string) fulfillment.ProviderEvent {
		return fulfillment.ProviderEvent{
			Provider: fulfillment.ProviderTBank, EndpointID: "tbank-live", OrgID: "org_a", Environment: fulfillment.EnvLive,
			EventID: "T:" + paymentID + ":CONFIRMED", Type: "CONFIRMED", Kind: fulfillment.EventPaymentConfirmed,
			Payment: fulfillment.PaymentInfo{AttemptRef: paymentID, PaymentID: paymentID, CheckoutSessionID: orderID,
				SubscriptionID: "101709", Amount: fulfillment.MinorAmount(99000, "RUB")},
		}
	}
	if got := deliver(t, s, confirmed("700", "m-t-1")); got != "fulfilled" {
		t.Fatalf("first payment: %s", got)
	}
	charge := confirmed("701", "charge-2")
	if got := deliver(t, s, charge); got != "renewed" {
		t.Errorf("recurrent charge: %s", got)
	}
	charge.EventID += ":again" // the same charge, notified again under another id
	if got := deliver(t, s, charge); got != "already_applied" {
		t.Errorf("recurrent charge again: %s", got)
	}
	got := readSub(t, conn, "101709")
	if got.State != "active" || got.Periods != 2 || got.Renewed != 2 || got.Items != 0 {
		t.Errorf("%+v, want active with two periods", got)
	}
	if n := count(t, conn, `SELECT count(*) FROM subscriptions WHERE customer_ref = 'user_7' AND provider = 'tbank'`); n != 1 {
		t.Errorf("%d T-Bank subscriptions of user_7, want 1", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM subscription_periods WHERE period_key IN ('payment:700', 'payment:701')`); n != 2 {
		t.Errorf("%d periods paid by the two payments, want 2", n)
	}
}

// Orders whose payments name no provider subscription pay periods of the
// customer's subscription to the plan: the second order renews it.
func TestSubscriptionFlowOrdersWithoutProviderSubscription(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	for i, mid := range []string{"m-1", "m-2"} {
		subscriptionOrder(t, s, mid)
		ev := firstPayment(fmt.Sprintf("evt_%d", i), "", mid)
		ev.Payment.InvoiceID, ev.Payment.AttemptRef, ev.Payment.PaymentID = "inv_"+mid, "inv_"+mid, "pay_"+mid
		ev.OccurredAt = subJan1.AddDate(0, 0, 20*i)
		if got := deliver(t, s, ev); got != "fulfilled" {
			t.Fatalf("order %s: %s", mid, got)
		}
	}
	want := subRow{State: "active", Periods: 2, End: subJan1.AddDate(0, 2, 0), Renewed: 2}
	wantSub(t, conn, fulfillment.CustomerSubscriptionID(subPlan.ID, "user_42"), want)
}

// An order for another plan (pro-yearly) whose payment names the
// customer's subscription to pro-monthly is not a renewal of it: plan
// changes are refused. The order is paid and on hold with one plan_change
// item, and the subscription keeps its one period, its plan and its end —
// however often the payment is announced or replayed.
func TestSubscriptionFlowPlanChangeRefused(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	subscriptionOrder(t, s, "m-1")
	deliver(t, s, firstPayment("evt_1", "sub_1", "m-1"))
	orderID := planOrder(t, s, "m-2", yearPlan.ID)
	change := subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 0, 10), "inv_2")
	change.Payment.MerchantOrderID = "m-2"
	if got := deliver(t, s, change); got != "plan_change_refused" {
		t.Fatalf("the order for another plan: %s, want plan_change_refused", got)
	}
	check := func(when string) {
		t.Helper()
		want := subRow{State: "active", Periods: 1, End: subJan1.AddDate(0, 1, 0), Renewed: 1}
		if got := readSub(t, conn, "sub_1"); got != want {
			t.Errorf("%s: the subscription %+v, want %+v", when, got, want)
		}
		for what, q := range map[string]string{
			"plan_change items":    `SELECT count(*) FROM reconciliation_items WHERE kind = 'plan_change' AND order_id = $1`,
			"orders on hold":       `SELECT count(*) FROM orders WHERE id = $1 AND state = 'on_hold' AND paid_at IS NOT NULL`,
			"order.on_hold events": `SELECT count(*) FROM order_events WHERE order_id = $1 AND topic = 'order.on_hold'`,
		} {
			if n := count(t, conn, q, orderID); n != 1 {
				t.Errorf("%s: %d %s, want 1", when, n, what)
			}
		}
		if n := count(t, conn, `SELECT count(*) FROM subscription_periods`); n != 1 {
			t.Errorf("%s: %d periods in all, want the first order's only", when, n)
		}
		if n := count(t, conn, `SELECT count(*) FROM subscriptions WHERE plan_id = $1`, yearPlan.ID); n != 0 {
			t.Errorf("%s: %d subscriptions to %s, want none", when, n, yearPlan.ID)
		}
		if n := count(t, conn, `SELECT count(*) FROM entitlements WHERE order_id = $1`, orderID); n != 0 {
			t.Errorf("%s: %d entitlements of the refused order, want none", when, n)
		}
	}
	check("refused")
	change.EventID = "evt_2_again"
	if got := deliver(t, s, change); got != "already_applied" {
		t.Errorf("the payment announced again: %s, want already_applied", got)
	}
	check("announced again")
	var id int64
	if err := conn.QueryRow(ctx, `SELECT id FROM inbox_events WHERE event_id = 'evt_2'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: id, Actor: "admin"}); err != nil {
		t.Fatal(err)
	}
	processAll(t, s, 1)
	check("replayed")
	// A renewal of the subscription itself still pays its next period.
	if got := deliver(t, s, subEvent("evt_3", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 0), "inv_3")); got != "renewed" {
		t.Errorf("the subscription's own renewal: %s", got)
	}
}

// tbankSubscriptionOrder stores order m-t (checkout m-t-1) of one period
// of pro-monthly for user_7, 99000 kopecks, and returns a T-Bank
// notification about payment paymentID of checkout orderID naming the
// card binding 101709 (the subscription).
func tbankSubscriptionOrder(t *testing.T, s *storage.Store) func(status string, kind fulfillment.EventKind, paymentID, orderID string, at time.Time) fulfillment.ProviderEvent {
	t.Helper()
	return tbankSubscriptionOrderOf(t, s, "m-t", "user_7", "101709")
}

// tbankSubscriptionOrderOf is tbankSubscriptionOrder for order merchantID
// (checkout merchantID-1) of customer, its notifications naming binding.
func tbankSubscriptionOrderOf(t *testing.T, s *storage.Store, merchantID, customer, binding string) func(status string, kind fulfillment.EventKind, paymentID, orderID string, at time.Time) fulfillment.ProviderEvent {
	t.Helper()
	spec, err := fulfillment.OrderDraft{
		OrgID: "org_a", Environment: "live", MerchantOrderID: merchantID, CheckoutSessionID: merchantID + "-1",
		Lines: []fulfillment.LineDraft{{SKU: "pro", Kind: "subscription", Quantity: 1, Currency: "RUB", MinorUnits: 99000,
			AccountRef: customer, PlanID: subPlan.ID}},
	}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.OrderCreate(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
	return func(status string, kind fulfillment.EventKind, paymentID, orderID string, at time.Time) fulfillment.ProviderEvent {
		return fulfillment.ProviderEvent{
			Provider: fulfillment.ProviderTBank, EndpointID: "tbank-live", OrgID: "org_a", Environment: fulfillment.EnvLive,
			EventID: "T:" + paymentID + ":" + status, Type: status, Kind: kind, OccurredAt: at,
			Payment: fulfillment.PaymentInfo{AttemptRef: paymentID, PaymentID: paymentID, CheckoutSessionID: orderID,
				SubscriptionID: binding, Amount: fulfillment.MinorAmount(99000, "RUB")},
		}
	}
}

// payPolled delivers the confirmation of payment paymentID of checkout
// orderID as the status poller stores it (GetState names no card
// binding), which fulfills the order.
func payPolled(t *testing.T, s *storage.Store, notice func(string, fulfillment.EventKind, string, string, time.Time) fulfillment.ProviderEvent, paymentID, orderID string) {
	t.Helper()
	polled := notice("CONFIRMED", fulfillment.EventPaymentConfirmed, paymentID, orderID, subJan1)
	polled.EventID, polled.Payment.SubscriptionID = "poll:"+polled.EventID, ""
	if got := deliver(t, s, polled); got != "fulfilled" {
		t.Fatalf("the polled payment %s: %s", paymentID, got)
	}
}

// The refund of the order's payment that paid the first period, naming
// the subscription, is decided by both rules: the order is refunded, and
// the period's access ends at the refund, once — one access_ended event,
// an item for the order and one for the subscription (rows counted).
func TestSubscriptionFlowOrderPaymentRefunded(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	notice := tbankSubscriptionOrder(t, s)
	refundAt := subJan1.AddDate(0, 0, 9)
	if got := deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "700", "m-t-1", subJan1)); got != "fulfilled" {
		t.Fatalf("first payment: %s", got)
	}
	refund := notice("REFUNDED", fulfillment.EventRefunded, "700", "m-t-1", refundAt)
	if got := deliver(t, s, refund); got != "refunded" {
		t.Fatalf("the refund: %s, want refunded", got)
	}
	refund.EventID += ":again"
	if got := deliver(t, s, refund); got != "already_applied" {
		t.Errorf("the refund again: %s, want already_applied", got)
	}
	want := subRow{State: "expired", Periods: 1, End: refundAt, Renewed: 1, Ended: 1, Items: 1}
	wantSub(t, conn, "101709", want)
	for what, q := range map[string]string{
		"refunded orders":       `SELECT count(*) FROM orders WHERE merchant_order_id = 'm-t' AND state = 'refunded'`,
		"order.refunded events": `SELECT count(*) FROM order_events e JOIN orders o ON o.id = e.order_id WHERE o.merchant_order_id = 'm-t' AND e.topic = 'order.refunded'`,
		"the order's refund items": `SELECT count(*) FROM reconciliation_items i JOIN orders o ON o.id = i.order_id
			WHERE o.merchant_order_id = 'm-t' AND i.kind = 'refund_after_fulfillment'`,
		"refunded periods": `SELECT count(*) FROM subscription_periods WHERE refunded_at IS NOT NULL`,
	} {
		if n := count(t, conn, q); n != 1 {
			t.Errorf("%d %s, want 1", n, what)
		}
	}
}

// The payment named the card binding (the subscription goes by it); its
// refund notification names none. The order records the subscription it
// paid, so the period's access ends at the refund all the same, once
// (rows counted, after the named refund comes too).
func TestSubscriptionFlowRefundNamingNoBinding(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	notice := tbankSubscriptionOrder(t, s)
	refundAt := subJan1.AddDate(0, 0, 9)
	if got := deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "700", "m-t-1", subJan1)); got != "fulfilled" {
		t.Fatalf("first payment: %s", got)
	}
	refund := notice("REFUNDED", fulfillment.EventRefunded, "700", "m-t-1", refundAt)
	unnamed := refund
	unnamed.EventID, unnamed.Payment.SubscriptionID = refund.EventID+":unnamed", ""
	if got := deliver(t, s, unnamed); got != "refunded" {
		t.Fatalf("the refund naming no binding: %s, want refunded", got)
	}
	if got := deliver(t, s, refund); got != "already_applied" {
		t.Errorf("the refund naming it: %s, want already_applied", got)
	}
	want := subRow{State: "expired", Periods: 1, End: refundAt, Renewed: 1, Ended: 1, Items: 1}
	wantSub(t, conn, "101709", want)
	if n := count(t, conn, `SELECT count(*) FROM subscription_periods WHERE refunded_at IS NOT NULL`); n != 1 {
		t.Errorf("%d refunded periods, want 1", n)
	}
}

// The bank's refund of a recurrent charge names no card binding, and the
// charge has no order: the refund is the subscription's whose period the
// charge paid. A full refund of the period begun ends its access at the
// refund, once however often it is announced; a refund of a payment that
// paid no period is the order rules', which find no order.
func TestSubscriptionFlowChargeRefundNamingNoBinding(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	notice := tbankSubscriptionOrder(t, s)
	feb1 := subJan1.AddDate(0, 1, 0)
	refundAt := feb1.AddDate(0, 0, 9)
	deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "700", "m-t-1", subJan1))
	if got := deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "701", "charge-2", feb1)); got != "renewed" {
		t.Fatalf("the recurrent charge: %s", got)
	}
	unnamed := func(ev fulfillment.ProviderEvent) fulfillment.ProviderEvent {
		ev.Payment.SubscriptionID = "" // as the bank notifies a refund
		return ev
	}
	refund := unnamed(notice("REFUNDED", fulfillment.EventRefunded, "701", "charge-2", refundAt))
	again := refund
	again.EventID += ":again"
	if got := deliver(t, s, refund, again); got != "subscription_refunded,already_applied" {
		t.Fatalf("the charge's refund naming no binding, twice: %s", got)
	}
	want := subRow{State: "expired", Periods: 2, End: refundAt, Renewed: 2, Ended: 1, Items: 1}
	wantSub(t, conn, "101709", want)
	if n := count(t, conn, `SELECT count(*) FROM subscription_periods WHERE refunded_at IS NOT NULL AND payment_id = '701'`); n != 1 {
		t.Errorf("%d refunded periods paid by 701, want 1", n)
	}
	if got := deliver(t, s, unnamed(notice("REFUNDED", fulfillment.EventRefunded, "999", "charge-x", refundAt))); got != "unmatched" {
		t.Errorf("the refund of a payment that paid no period: %s, want unmatched", got)
	}
}

// The same refund of a charge, naming no binding, decided by two workers
// at once (two deliveries of it): the period is refunded once, its access
// ended once, one item — in each of 5 subscriptions.
func TestSubscriptionFlowChargeRefundDecidedTwiceAtOnce(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	feb1 := subJan1.AddDate(0, 1, 0)
	for i := range 5 {
		binding := fmt.Sprintf("10170%d", i)
		notice := tbankSubscriptionOrderOf(t, s, fmt.Sprintf("m-t%d", i), fmt.Sprintf("user_%d", i), binding)
		deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, fmt.Sprintf("70%d", i), fmt.Sprintf("m-t%d-1", i), subJan1))
		charge := fmt.Sprintf("80%d", i)
		if got := deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, charge, "charge-"+charge, feb1)); got != "renewed" {
			t.Fatalf("the recurrent charge: %s", got)
		}
		refund := notice("REFUNDED", fulfillment.EventRefunded, charge, "charge-"+charge, feb1.AddDate(0, 0, 9))
		refund.Payment.SubscriptionID = "" // as the bank notifies a refund
		again := refund
		again.EventID += ":again"
		decideTogether(t, s, conn, refund, again)
		wantSub(t, conn, binding, subRow{State: "expired", Periods: 2, End: feb1.AddDate(0, 0, 9), Renewed: 2, Ended: 1, Items: 1})
	}
	if n := count(t, conn, `SELECT count(*) FROM subscription_periods WHERE refunded_at IS NOT NULL`); n != 5 {
		t.Errorf("%d refunded periods, want 5", n)
	}
}

// A recurrent charge's refund delivered before the charge: the bank's
// refund names no card binding, and no period is paid by the payment yet,
// so it waits, unmatched. The charge pays its period and, in the same
// transaction, queues the refund again, which then refunds that period:
// access ends at the refund, once, one item (rows counted). The same when
// the refund names the binding. A refund of a payment that pays no period
// stays unmatched. The same again when the refund and then the charge are
// decided in one batch.
func TestSubscriptionFlowChargeRefundBeforeTheCharge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ named, oneBatch bool }{{false, false}, {true, false}, {false, true}} {
		t.Run(fmt.Sprintf("naming the binding %v, in one batch %v", tc.named, tc.oneBatch), func(t *testing.T) {
			t.Parallel()
			s, conn := newOutboxStore(t)
			notice := tbankSubscriptionOrder(t, s)
			feb1 := subJan1.AddDate(0, 1, 0)
			refundAt := feb1.AddDate(0, 0, 9)
			named := tc.named
			deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "700", "m-t-1", subJan1))
			refund := notice("REFUNDED", fulfillment.EventRefunded, "701", "charge-2", refundAt)
			if !named {
				refund.Payment.SubscriptionID = "" // as the bank notifies a refund
			}
			charge := notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "701", "charge-2", feb1)
			if tc.oneBatch {
				if got := deliver(t, s, refund, charge); got != "unmatched,renewed" {
					t.Fatalf("the refund, then its charge: %s, want unmatched,renewed", got)
				}
			} else {
				if got := deliver(t, s, refund); got != "unmatched" {
					t.Fatalf("the refund before its charge: %s, want unmatched", got)
				}
				if got := deliver(t, s, charge); got != "renewed" {
					t.Fatalf("the recurrent charge: %s", got)
				}
			}
			if got := processAll(t, s, 1); got != "subscription_refunded" {
				t.Fatalf("the refund queued again by its charge: %s, want subscription_refunded", got)
			}
			again := refund
			again.EventID += ":again"
			if got := deliver(t, s, again); got != "already_applied" {
				t.Errorf("the refund again: %s, want already_applied", got)
			}
			wantSub(t, conn, "101709", subRow{State: "expired", Periods: 2, End: refundAt, Renewed: 2, Ended: 1, Items: 1})
			wantCounts(t, conn, []countCheck{
				{"refunded periods paid by 701", `SELECT count(*) FROM subscription_periods WHERE refunded_at IS NOT NULL AND payment_id = '701'`, 1},
				{"events left unmatched", `SELECT count(*) FROM inbox_events WHERE state = 'unmatched'`, 0},
			})
			other := notice("REFUNDED", fulfillment.EventRefunded, "999", "charge-x", refundAt)
			if !named {
				other.Payment.SubscriptionID = ""
			}
			if got := deliver(t, s, other); got != "unmatched" {
				t.Errorf("the refund of a payment that paid no period: %s, want unmatched", got)
			}
			if n := count(t, conn, "SELECT count(*) FROM inbox_work WHERE state = 'pending'"); n != 0 {
				t.Errorf("%d events queued again after a refund that waits for its payment, want none", n)
			}
		})
	}
}

// Migration 049 gives the unmatched refunds stored before it their
// payment, which late matching finds them by: a charge's refund decided
// unmatched under the schema before it is queued again by the charge
// after it, and refunds the period once.
func TestMigration049LateMatchByPayment(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	notice := tbankSubscriptionOrder(t, s)
	feb1 := subJan1.AddDate(0, 1, 0)
	deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "700", "m-t-1", subJan1))
	refund := notice("REFUNDED", fulfillment.EventRefunded, "701", "charge-2", feb1.AddDate(0, 0, 9))
	refund.Payment.SubscriptionID = ""
	if got := deliver(t, s, refund); got != "unmatched" {
		t.Fatalf("the refund before its charge: %s, want unmatched", got)
	}
	m, v := migrator(t, conn, "_late_match_by_payment.sql")
	for _, version := range []int32{v - 1, v} {
		if err := m.MigrateTo(ctx, version); err != nil {
			t.Fatalf("migrating to %d: %v", version, err)
		}
	}
	if n := count(t, conn, `SELECT count(*) FROM inbox_unresolved WHERE state = 'unmatched' AND payment_id = '701'`); n != 1 {
		t.Fatalf("%d unmatched refunds of 701 after the migration, want 1", n)
	}
	if err := m.MigrateTo(ctx, int32(len(m.Migrations))); err != nil {
		t.Fatal(err)
	}
	deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "701", "charge-2", feb1))
	if got := processAll(t, s, 1); got != "subscription_refunded" {
		t.Fatalf("the refund queued again by its charge: %s, want subscription_refunded", got)
	}
	wantSub(t, conn, "101709", subRow{State: "expired", Periods: 2, End: feb1.AddDate(0, 0, 9), Renewed: 2, Ended: 1, Items: 1})
}

// A refund that names the card binding, and no order, of the payment that
// paid the customer's subscription while it went by the service's own id
// (the poller applied the payment): unmatched until the subscription takes
// the binding, which queues it again; it then refunds that period.
func TestSubscriptionFlowRefundNamingTheBindingBeforeIt(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	notice := tbankSubscriptionOrder(t, s)
	payPolled(t, s, notice, "700", "m-t-1")
	refundAt := subJan1.AddDate(0, 0, 9)
	if got := deliver(t, s, notice("REFUNDED", fulfillment.EventRefunded, "700", "", refundAt)); got != "unmatched" {
		t.Fatalf("the refund before the binding: %s, want unmatched", got)
	}
	if got := deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "700", "m-t-1", subJan1)); got != "already_applied" {
		t.Fatalf("the notification that binds: %s", got)
	}
	if got := processAll(t, s, 1); got != "subscription_refunded" {
		t.Fatalf("the refund queued again by the binding: %s, want subscription_refunded", got)
	}
	wantSub(t, conn, "101709", subRow{State: "expired", Periods: 1, End: refundAt, Renewed: 1, Ended: 1, Items: 1})
}

// Migration 052 puts back in the queue the refunds that the rules before
// migration 049 lost, decided before the period their payment paid was
// recorded: one unmatched (naming no binding), one other_payment_refunded
// (naming it). Decided again, each refunds its period once; a refund of a
// payment that paid no period stays unmatched; the migration run again
// puts nothing back.
func TestMigration052RefundsBeforeTheirCharge(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	notice := tbankSubscriptionOrder(t, s)
	feb1, mar1 := subJan1.AddDate(0, 1, 0), subJan1.AddDate(0, 2, 0)
	refundAt := mar1.AddDate(0, 0, 9)
	deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "700", "m-t-1", subJan1))
	unnamed := notice("REFUNDED", fulfillment.EventRefunded, "701", "charge-2", refundAt)
	unnamed.Payment.SubscriptionID = ""
	named := notice("REFUNDED", fulfillment.EventRefunded, "702", "charge-3", refundAt)
	none := notice("REFUNDED", fulfillment.EventRefunded, "999", "charge-x", refundAt)
	none.Payment.SubscriptionID = ""
	if got := deliver(t, s, unnamed, named, none); got != "unmatched,unmatched,unmatched" {
		t.Fatalf("the refunds before their charges: %s", got)
	}
	// As the rules before migration 049 left them.
	for _, q := range []string{
		`UPDATE inbox_unresolved SET payment_id = NULL`,
		`UPDATE inbox_events SET state = 'processed', decision = 'other_payment_refunded' WHERE payment_id = '702'`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []fulfillment.ProviderEvent{
		notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "701", "charge-2", feb1),
		notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "702", "charge-3", mar1),
	} {
		if got := deliver(t, s, c); got != "renewed" {
			t.Fatalf("the charge %s: %s", c.Payment.PaymentID, got)
		}
	}
	m, v := migrator(t, conn, "_refunds_before_their_charge.sql")
	for _, version := range []int32{v - 1, v, int32(len(m.Migrations))} {
		if err := m.MigrateTo(ctx, version); err != nil {
			t.Fatalf("migrating to %d: %v", version, err)
		}
	}
	if got := processAll(t, s, 2); got != "subscription_refunded,subscription_refunded" {
		t.Fatalf("the refunds put back: %s", got)
	}
	wantSub(t, conn, "101709", subRow{State: "expired", Periods: 3, End: refundAt, Renewed: 3, Ended: 1, Items: 2})
	if err := m.MigrateTo(ctx, v-1); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, int32(len(m.Migrations))); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, conn, []countCheck{
		{"refunded periods", `SELECT count(*) FROM subscription_periods WHERE refunded_at IS NOT NULL`, 2},
		{"events put back again", `SELECT count(*) FROM inbox_work WHERE state = 'pending'`, 0},
		{"replays by the migration", `SELECT count(*) FROM inbox_replays WHERE replayed_by_detail LIKE 'migration 052:%'`, 2},
		{"unmatched refunds", `SELECT count(*) FROM inbox_events WHERE state = 'unmatched' AND payment_id = '999'`, 1},
	})
}

// A charge and its refund (naming no binding) decided at the same time by
// two workers: neither sees what the other has not committed, yet the
// refund applies once — by its own batch when the charge committed first,
// else queued again by the charge (the payment's late-match lock). Each
// round counts what it leaves.
func TestSubscriptionFlowChargeRacesItsRefund(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	const rounds = 20
	feb1 := subJan1.AddDate(0, 1, 0)
	for i := range rounds {
		binding := fmt.Sprintf("%d", 800000+i)
		merchant := fmt.Sprintf("m-refund-race-%d", i)
		notice := tbankSubscriptionOrderOf(t, s, merchant, fmt.Sprintf("user_refund_race_%d", i), binding)
		deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, fmt.Sprintf("%d", 6000+2*i), merchant+"-1", subJan1))
		charge := fmt.Sprintf("%d", 6001+2*i)
		refund := notice("REFUNDED", fulfillment.EventRefunded, charge, "charge-"+charge, feb1.AddDate(0, 0, 9))
		refund.Payment.SubscriptionID = "" // as the bank notifies a refund
		decideTogether(t, s, conn, refund, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, charge, "charge-"+charge, feb1))
		wantSub(t, conn, binding, subRow{State: "expired", Periods: 2, End: feb1.AddDate(0, 0, 9), Renewed: 2, Ended: 1, Items: 1})
	}
	wantCounts(t, conn, []countCheck{
		{"refunded periods", `SELECT count(*) FROM subscription_periods WHERE refunded_at IS NOT NULL`, rounds},
		{"events not processed", `SELECT count(*) FROM inbox_events WHERE state <> 'processed'`, 0},
	})
}

// The first payment of a T-Bank subscription order is applied from the
// status poll (GetState names no card binding): it pays the customer's
// subscription under the service's own id. The bank's notification of
// that payment names the binding (RebillId): the subscription takes it,
// so the recurrent charges that name it renew that subscription, once
// each (rows counted, after the notification and a charge come again).
func TestSubscriptionFlowPolledPaymentTakesTheBinding(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	notice := tbankSubscriptionOrder(t, s)
	payPolled(t, s, notice, "700", "m-t-1")
	notified := notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "700", "m-t-1", subJan1)
	if got := deliver(t, s, notified); got != "already_applied" {
		t.Fatalf("the notification: %s, want already_applied", got)
	}
	notified.EventID += ":again"
	if got := deliver(t, s, notified); got != "already_applied" {
		t.Fatalf("the notification again: %s, want already_applied", got)
	}
	charge := notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "701", "charge-2", subJan1.AddDate(0, 1, 0))
	if got := deliver(t, s, charge); got != "renewed" {
		t.Fatalf("the recurrent charge naming the binding: %s, want renewed", got)
	}
	charge.EventID += ":again"
	if got := deliver(t, s, charge); got != "already_applied" {
		t.Errorf("the charge again: %s, want already_applied", got)
	}
	if got := readSub(t, conn, "101709"); got.Periods != 2 || got.Renewed != 2 || got.State != "active" {
		t.Errorf("the subscription by its binding: %+v, want active, 2 periods, 2 renewed events", got)
	}
	for what, q := range map[string]string{
		"subscriptions":                  `SELECT count(*) FROM subscriptions`,
		"subscriptions by the binding":   `SELECT count(*) FROM subscriptions WHERE provider_subscription_id = '101709'`,
		"orders recording it":            `SELECT count(*) FROM orders o JOIN subscriptions s ON s.id = o.paid_subscription_id WHERE s.provider_subscription_id = '101709'`,
		"events decided for it, applied": `SELECT count(*) FROM inbox_events e JOIN subscriptions s ON s.id = e.applied_subscription_id WHERE e.event_id = 'T:700:CONFIRMED'`,
	} {
		if n := count(t, conn, q); n != 1 {
			t.Errorf("%d %s, want 1", n, what)
		}
	}
	if n := count(t, conn, `SELECT count(*) FROM reconciliation_items`); n != 0 {
		t.Errorf("%d items, want none", n)
	}
}

// A recurrent charge naming the binding comes before the notification
// that gives the subscription that binding: unmatched then, it is queued
// again when the binding is taken, and renews the subscription once.
func TestSubscriptionFlowChargeBeforeTheBinding(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	notice := tbankSubscriptionOrder(t, s)
	payPolled(t, s, notice, "700", "m-t-1")
	charge := notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "701", "charge-2", subJan1.AddDate(0, 1, 0))
	if got := deliver(t, s, charge); got != "unmatched" {
		t.Fatalf("the charge before the binding: %s, want unmatched", got)
	}
	if got := deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "700", "m-t-1", subJan1)); got != "already_applied" {
		t.Fatalf("the notification: %s, want already_applied", got)
	}
	if got := processAll(t, s, 1); got != "renewed" {
		t.Fatalf("the charge queued again: %s, want renewed", got)
	}
	if got := readSub(t, conn, "101709"); got.Periods != 2 || got.Renewed != 2 {
		t.Errorf("the subscription by its binding: %+v, want 2 periods, 2 renewed events", got)
	}
}

// The notification that gives a subscription its card binding races a
// recurrent charge naming that binding, decided at the same time by two
// workers: neither sees what the other has not committed, yet the charge
// is applied once — by its own batch when the binding committed first,
// else queued again by the binding (the late-match locks). Each round
// counts the periods and subscriptions it leaves.
func TestSubscriptionBindingRacesItsCharge(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	const rounds = 20
	for i := range rounds {
		binding := fmt.Sprintf("%d", 900000+i)
		merchant := fmt.Sprintf("m-race-%d", i)
		notice := tbankSubscriptionOrderOf(t, s, merchant, fmt.Sprintf("user_race_%d", i), binding)
		payment, charge := fmt.Sprintf("%d", 7000+2*i), fmt.Sprintf("%d", 7001+2*i)
		payPolled(t, s, notice, payment, merchant+"-1")
		decideTogether(t, s, conn,
			notice("CONFIRMED", fulfillment.EventPaymentConfirmed, charge, "charge-"+binding, subJan1.AddDate(0, 1, 0)),
			notice("CONFIRMED", fulfillment.EventPaymentConfirmed, payment, merchant+"-1", subJan1))
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE state <> 'processed'"); n != 0 {
		t.Errorf("%d events left unmatched or unprocessed", n)
	}
	for what, q := range map[string]string{
		"periods paid":                 `SELECT count(*) FROM subscription_periods`,
		"subscriptions":                `SELECT count(*) FROM subscriptions`,
		"subscriptions by a binding":   `SELECT count(*) FROM subscriptions WHERE provider_subscription_id LIKE '9%'`,
		"subscriptions of two periods": `SELECT count(*) FROM subscriptions WHERE periods = 2`,
	} {
		want := rounds
		if what == "periods paid" {
			want = 2 * rounds
		}
		if n := count(t, conn, q); n != want {
			t.Errorf("%d %s, want %d", n, what, want)
		}
	}
}

// An order that paid the customer's subscription under the service's own
// id (its payment named no subscription at the bank): the refund of that
// payment names none either, yet the batch holds the order's subscription,
// so the period's access ends at the refund, once, as when the refund
// names the subscription (rows counted, after the refund is announced
// again and replayed).
func TestSubscriptionFlowRefundOfAnOrderWithoutProviderSubscription(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	withBinding := tbankSubscriptionOrder(t, s)
	notice := func(status string, kind fulfillment.EventKind, at time.Time) fulfillment.ProviderEvent {
		ev := withBinding(status, kind, "700", "m-t-1", at)
		ev.Payment.SubscriptionID = "" // no card binding: a one-off payment
		return ev
	}
	refundAt := subJan1.AddDate(0, 0, 9)
	if got := deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, subJan1)); got != "fulfilled" {
		t.Fatalf("the payment: %s", got)
	}
	refund := notice("REFUNDED", fulfillment.EventRefunded, refundAt)
	if got := deliver(t, s, refund); got != "refunded" {
		t.Fatalf("the refund: %s, want refunded", got)
	}
	customerSub := fulfillment.CustomerSubscriptionID(subPlan.ID, "user_7")
	check := func(when string) {
		t.Helper()
		want := subRow{State: "expired", Periods: 1, End: refundAt, Renewed: 1, Ended: 1, Items: 1}
		if got := readSub(t, conn, customerSub); got != want {
			t.Errorf("%s: %+v, want %+v", when, got, want)
		}
		for what, q := range map[string]string{
			"refunded orders":  `SELECT count(*) FROM orders WHERE merchant_order_id = 'm-t' AND state = 'refunded'`,
			"refunded periods": `SELECT count(*) FROM subscription_periods WHERE refunded_at IS NOT NULL`,
			"ends of access":   `SELECT count(*) FROM subscriptions WHERE access_ended_at IS NOT NULL`,
		} {
			if n := count(t, conn, q); n != 1 {
				t.Errorf("%s: %d %s, want 1", when, n, what)
			}
		}
		subs, err := s.SubscriptionsOf(ctx, "org_a", fulfillment.EnvLive, "user_7", subPlan.ID)
		if err != nil {
			t.Fatal(err)
		}
		if a, _ := fulfillment.CheckAccess(subs, subPlan, refundAt.Add(time.Hour)); a.Granted {
			t.Errorf("%s: CheckAccess an hour after the refund = %+v, want no access", when, a)
		}
	}
	refundAgainAndReplayed(t, s, conn, refund, check)
}

// refundAgainAndReplayed checks what a processed refund left (check), then
// announces it again and replays it by hand, checking after each.
func refundAgainAndReplayed(t *testing.T, s *storage.Store, conn *pgx.Conn, refund fulfillment.ProviderEvent, check func(when string)) {
	t.Helper()
	ctx := context.Background()
	check("refunded")
	again := refund
	again.EventID += ":again"
	if got := deliver(t, s, again); got != "already_applied" {
		t.Errorf("the refund announced again: %s, want already_applied", got)
	}
	check("announced again")
	var inboxID int64
	if err := conn.QueryRow(ctx, `SELECT id FROM inbox_events WHERE event_id = $1`, refund.EventID).Scan(&inboxID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: inboxID, Actor: "admin"}); err != nil {
		t.Fatal(err)
	}
	processAll(t, s, 1)
	check("replayed")
}

// A full refund of a recurrent charge's payment ends the access of the
// period it paid, once: the period had begun, so access ends at the
// refund — expired, one subscription.access_ended in the feed and in crm's
// outbox, one item (the refunded access was used) — and CheckAccess says
// why. The refund announced again, replayed, and the sweeper after it,
// end nothing more (rows counted).
func TestSubscriptionFlowRenewalRefunded(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	notice := tbankSubscriptionOrder(t, s)
	feb1 := subJan1.AddDate(0, 1, 0)
	refundAt := feb1.AddDate(0, 0, 9)
	if got := deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "700", "m-t-1", subJan1)); got != "fulfilled" {
		t.Fatalf("first payment: %s", got)
	}
	if got := deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "701", "charge-2", feb1)); got != "renewed" {
		t.Fatalf("recurrent charge: %s", got)
	}
	refund := notice("REFUNDED", fulfillment.EventRefunded, "701", "charge-2", refundAt)
	if got := deliver(t, s, refund); got != "subscription_refunded" {
		t.Fatalf("the charge's refund: %s, want subscription_refunded", got)
	}
	id := subscriptionID(t, conn, "101709")
	check := func(when string) {
		t.Helper()
		want := subRow{State: "expired", Periods: 2, End: refundAt, Renewed: 2, Ended: 1, Items: 1}
		if got := readSub(t, conn, "101709"); got != want {
			t.Errorf("%s: %+v, want %+v", when, got, want)
		}
		for what, q := range map[string]string{
			"access_ended messages to crm": `SELECT count(*) FROM outbox_messages WHERE subscription_id = $1 AND topic = 'subscription.access_ended'`,
			"ends of access":               `SELECT count(*) FROM subscriptions WHERE id = $1 AND access_ended_at IS NOT NULL`,
			"refunded periods":             `SELECT count(*) FROM subscription_periods WHERE subscription_id = $1 AND period = 2 AND refunded_at IS NOT NULL`,
			"refund items":                 `SELECT count(*) FROM reconciliation_items WHERE subscription_id = $1 AND kind = 'refund_after_fulfillment'`,
		} {
			if n := count(t, conn, q, id); n != 1 {
				t.Errorf("%s: %d %s, want 1", when, n, what)
			}
		}
		if n := count(t, conn, `SELECT count(*) FROM subscription_periods WHERE subscription_id = $1 AND refunded_at IS NOT NULL`, id); n != 1 {
			t.Errorf("%s: %d refunded periods in all, want the charge's only", when, n)
		}
		subs, err := s.SubscriptionsOf(ctx, "org_a", fulfillment.EnvLive, "user_7", subPlan.ID)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := fulfillment.CheckAccess(subs, subPlan, refundAt.Add(time.Hour))
		if a.Granted || a.Why != "access ended: the payment of period 2 was refunded" {
			t.Errorf("%s: CheckAccess an hour after the refund = %+v, want no access, because of the refund", when, a)
		}
		d, err := s.SubscriptionGet(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var refunded []int
		for _, p := range d.Periods {
			if !p.RefundedAt.IsZero() {
				refunded = append(refunded, p.Period)
			}
		}
		if len(d.Periods) != 2 || !slices.Equal(refunded, []int{2}) {
			t.Errorf("%s: GetSubscription's periods %+v; want 2, the second refunded", when, d.Periods)
		}
	}
	refundAgainAndReplayed(t, s, conn, refund, check)
	if swept, err := s.SubscriptionSweep(ctx, id, subPlan, subJan1.AddDate(0, 4, 0)); err != nil || swept {
		t.Errorf("the sweep after the refund = %v, %v; want nothing to end", swept, err)
	}
	check("swept")
}

// A renewal paid ahead is refunded before its period begins; then the
// payment of the period in use is refunded in full. That period is the
// latest in force: access ends at its refund, once, announced, and
// CheckAccess grants none — where the refund was taken for one of an
// earlier period, and access ran on to the end of the period refunded.
func TestSubscriptionFlowPeriodInUseRefundedAfterTheOneAheadOfIt(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	subscriptionOrder(t, s, "m-1")
	if got := deliver(t, s, firstPayment("evt_1", "sub_1", "m-1")); got != "fulfilled" {
		t.Fatalf("first payment: %s", got)
	}
	day := func(n int) time.Time { return subJan1.AddDate(0, 0, n) }
	if got := deliver(t, s, subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, day(20), "inv_2")); got != "renewed" {
		t.Fatalf("the renewal paid ahead: %s", got)
	}
	ahead := subEvent("evt_3", "sub_1", fulfillment.EventRefunded, day(25), "inv_2")
	ahead.Payment.PaymentID = "pay_inv_2"
	if got := deliver(t, s, ahead); got != "subscription_refunded" {
		t.Fatalf("its refund before its period: %s", got)
	}
	inUse := firstRefund("evt_4", "m-1", day(26))
	if got := deliver(t, s, inUse); got != "refunded" {
		t.Fatalf("the first payment's refund: %s", got)
	}
	id := subscriptionID(t, conn, "sub_1")
	check := func(when string) {
		t.Helper()
		if got := readSub(t, conn, "sub_1"); got.State != "expired" || !got.End.Equal(day(26)) || got.Ended != 1 {
			t.Errorf("%s: %+v, want expired at the refund, its access ended once", when, got)
		}
		if n := count(t, conn, `SELECT count(*) FROM outbox_messages WHERE subscription_id = $1 AND topic = 'subscription.access_ended'`, id); n != 1 {
			t.Errorf("%s: %d access_ended messages, want 1", when, n)
		}
		if n := count(t, conn, `SELECT count(*) FROM subscription_periods WHERE subscription_id = $1 AND refunded_at IS NOT NULL`, id); n != 2 {
			t.Errorf("%s: %d refunded periods, want both", when, n)
		}
		subs, err := s.SubscriptionsOf(ctx, "org_a", fulfillment.EnvLive, "user_42", subPlan.ID)
		if err != nil {
			t.Fatal(err)
		}
		if a, _ := fulfillment.CheckAccess(subs, subPlan, day(28)); a.Granted {
			t.Errorf("%s: both paid periods refunded, yet CheckAccess grants access until %s (%s)", when, a.Until, a.Why)
		}
	}
	refundAgainAndReplayed(t, s, conn, inUse, check)
	if swept, err := s.SubscriptionSweep(ctx, id, subPlan, subJan1.AddDate(0, 4, 0)); err != nil || swept {
		t.Errorf("the sweep after the refund = %v, %v; want nothing to end", swept, err)
	}
	check("swept")
}

// Migration 028 (plan_change items) rolls back only while no such item
// exists.
func TestMigration028PlanChange(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	subscriptionOrder(t, s, "m-1")
	deliver(t, s, firstPayment("evt_1", "sub_1", "m-1"))
	planOrder(t, s, "m-2", yearPlan.ID)
	change := subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 0, 10), "inv_2")
	change.Payment.MerchantOrderID = "m-2"
	if got := deliver(t, s, change); got != "plan_change_refused" {
		t.Fatalf("the order for another plan: %s", got)
	}
	m, v := migrator(t, conn, "_plan_change.sql")
	kindRollback(t, conn, m, v, "plan_change")
}

// Migration 029 (refunded periods) rolls back only while no period is
// refunded: the previous schema cannot record it, and a refund decided
// again would end access again.
func TestMigration029SubscriptionRefunds(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	notice := tbankSubscriptionOrder(t, s)
	deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "700", "m-t-1", subJan1))
	if got := deliver(t, s, notice("REFUNDED", fulfillment.EventRefunded, "700", "m-t-1", subJan1.AddDate(0, 0, 9))); got != "refunded" {
		t.Fatalf("the refund: %s", got)
	}
	m, v := migrator(t, conn, "_subscription_refunds.sql")
	if err := m.MigrateTo(ctx, v-1); err == nil || !strings.Contains(err.Error(), "refunded subscription periods exist") {
		t.Fatalf("migrating down with a refunded period: %v, want it refused", err)
	}
	if n := count(t, conn, "SELECT count(*) FROM subscription_periods WHERE refunded_at IS NOT NULL"); n != 1 {
		t.Fatalf("%d refunded periods after the refused rollback, want 1", n)
	}
	if _, err := conn.Exec(ctx, "UPDATE subscription_periods SET refunded_at = NULL"); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, v-1); err != nil {
		t.Fatalf("migrating down without refunded periods: %v", err)
	}
	if n := count(t, conn, "SELECT count(*) FROM information_schema.columns WHERE table_name = 'subscription_periods' AND column_name = 'refunded_at'"); n != 0 {
		t.Errorf("refunded_at still there at version %d", v-1)
	}
	if err := m.MigrateTo(ctx, v); err != nil {
		t.Fatalf("migrating up again: %v", err)
	}
	if n := count(t, conn, "SELECT count(*) FROM subscription_periods WHERE refunded_at IS NULL"); n != 1 {
		t.Errorf("%d periods after migrating up, want the one, not refunded", n)
	}
}

// A Yolfi customer pays the order's checkout twice, an hour apart: a second
// invoice of the same checkout session, which names the order
// (merchantOrderId) and the subscription the checkout is for
// (subscriptionId). That is the order's second payment, not a renewal: an
// extra_payment item for a refund review, and one period (rows counted; the
// first version of the renewal rule paid period 2 and opened no item). The
// first invoice paid twice (another payment id) is one extra_payment item
// too.
func TestSubscriptionFlowSecondCheckoutPaymentNamingItsSubscription(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	first := firstPayment("evt_1", "sub_1", "m-1")
	first.Payment.CheckoutSessionID = "cs_1"
	id, sub := paidSubscriptionOrder(t, s, conn, first)

	// The same checkout paid again: a second invoice, an hour later.
	again := subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.Add(time.Hour), "inv_sub_1_1b")
	again.Payment.MerchantOrderID, again.Payment.CheckoutSessionID = "m-1", "cs_1"
	if got := deliver(t, s, again); got != "duplicate_payment" {
		t.Errorf("second payment of the checkout: %s, want duplicate_payment", got)
	}
	wantCounts(t, conn, []countCheck{
		{"periods", `SELECT count(*) FROM subscription_periods WHERE subscription_id = $2 AND $1 <> ''`, 1},
		{"extra_payment items", `SELECT count(*) FROM reconciliation_items WHERE kind = 'extra_payment' AND (order_id = $1 OR subscription_id = $2)`, 1},
	}, id, sub)

	// The first invoice paid twice (another payment id): one item.
	twice := subEvent("evt_3", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.Add(2*time.Hour), "inv_sub_1_1")
	twice.Payment.PaymentID, twice.Payment.MerchantOrderID = "pay_other", "m-1"
	if got := deliver(t, s, twice); got != "duplicate_payment" {
		t.Errorf("the first invoice paid twice: %s, want duplicate_payment", got)
	}
	wantCounts(t, conn, []countCheck{
		{"extra_payment items of pay_other", `SELECT count(*) FROM reconciliation_items WHERE kind = 'extra_payment'
			AND payment_id = 'pay_other' AND (order_id = $1 OR subscription_id = $2)`, 1},
	}, id, sub)
}

// The events of a renewal's invoice that name the paid order go where the
// renewal goes: its invoice.created, applied before the charge, is the
// subscription rules' (ignored_type, as for a renewal naming no order) and
// records no attempt of the order, so the charge after it is renewed all
// the same. The order rules took it (stale_ignored) and recorded the
// invoice as the order's attempt; the charge was then the order's second
// payment: duplicate_payment, an extra_payment item, no period 2 (rows
// counted; a review's test). The charge replayed, its invoice's late
// invoice.overdue and the charge announced again change nothing.
func TestSubscriptionFlowRenewalAfterItsInvoiceCreated(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	id, sub := paidSubscriptionOrder(t, s, conn, firstPayment("evt_1", "sub_1", "m-1"))
	feb1 := subJan1.AddDate(0, 1, 0)
	invoiceEvent := func(eventID string, kind fulfillment.EventKind, at time.Time) fulfillment.ProviderEvent {
		ev := subEvent(eventID, "sub_1", kind, at, "inv_sub_1_2")
		ev.Payment.MerchantOrderID = "m-1"
		return ev
	}
	charge := invoiceEvent("evt_2", fulfillment.EventPaymentConfirmed, feb1)
	counts := []countCheck{
		{"periods", `SELECT count(*) FROM subscription_periods WHERE subscription_id = $2 AND $1 <> ''`, 2},
		{"period 2, paid by the charge", `SELECT count(*) FROM subscription_periods
			WHERE subscription_id = $2 AND period = 2 AND payment_id = 'pay_inv_sub_1_2' AND $1 <> ''`, 1},
		{"items", `SELECT count(*) FROM reconciliation_items WHERE order_id = $1 OR subscription_id = $2`, 0},
		{"the order's attempts", `SELECT count(*) FROM payment_attempts WHERE order_id = $1 AND $2 <> ''`, 1},
	}
	for _, step := range []struct {
		what string
		ev   fulfillment.ProviderEvent
		want string
	}{
		{"the renewal invoice's invoice.created", invoiceEvent("evt_2c", fulfillment.EventAttemptCreated, feb1.Add(-time.Minute)), "ignored_type"},
		{"the renewal after it", charge, "renewed"},
		{"its invoice.overdue, late", invoiceEvent("evt_2o", fulfillment.EventAttemptExpired, feb1.Add(time.Hour)), "ignored_type"},
		{"the renewal announced again", subEventNamed(charge, "evt_2again"), "already_applied"},
	} {
		if got := deliver(t, s, step.ev); got != step.want {
			t.Errorf("%s: %s, want %s", step.what, got, step.want)
		}
	}
	wantCounts(t, conn, counts, id, sub)
	if got := replayStored(t, s, conn, "evt_2"); got != "already_applied" {
		t.Errorf("the renewal replayed: %s, want already_applied", got)
	}
	wantCounts(t, conn, counts, id, sub)
}

// A renewal naming its order, then a cancellation that occurred before the
// charge: the charge keeps its period and gets the extra_payment item of a
// charge after the cancellation, once — also when it is replayed and
// announced again (a review's test).
func TestSubscriptionFlowRenewalNamingItsOrderBeforeALateCancellation(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	id, sub := paidSubscriptionOrder(t, s, conn, firstPayment("evt_1", "sub_1", "m-1"))
	feb1 := subJan1.AddDate(0, 1, 0)
	charge := subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, feb1, "inv_sub_1_2")
	charge.Payment.MerchantOrderID = "m-1"
	if got := deliver(t, s, charge); got != "renewed" {
		t.Fatalf("renewal: %s", got)
	}
	cancel := subEvent("evt_c", "sub_1", fulfillment.EventSubscriptionCancelled, feb1.AddDate(0, 0, -2), "")
	if got := deliver(t, s, cancel); got != "subscription_cancelled" {
		t.Errorf("the cancellation: %s, want subscription_cancelled", got)
	}
	if got := replayStored(t, s, conn, "evt_2"); got != "already_applied" {
		t.Errorf("the renewal replayed: %s, want already_applied", got)
	}
	if got := deliver(t, s, subEventNamed(charge, "evt_2again")); got != "already_applied" {
		t.Errorf("the renewal announced again: %s, want already_applied", got)
	}
	wantCounts(t, conn, []countCheck{
		{"periods", `SELECT count(*) FROM subscription_periods WHERE subscription_id = $2 AND $1 <> ''`, 2},
		{"extra_payment items", `SELECT count(*) FROM reconciliation_items WHERE kind = 'extra_payment' AND (order_id = $1 OR subscription_id = $2)`, 1},
		{"items", `SELECT count(*) FROM reconciliation_items WHERE (order_id = $1 OR subscription_id = $2)`, 1},
	}, id, sub)
}

// The order's payment named a payment id but no invoice: its renewal's
// invoice.created naming the order is the subscription rules' all the
// same (ignored_type), and the renewal after it renews (rows counted; a
// third review's test: the order rules had recorded the invoice as the
// order's attempt, and the renewal was duplicate_payment, no period 2).
func TestSubscriptionFlowRenewalInvoiceWhenTheOrdersPaymentNamedNoInvoice(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	first := firstPayment("evt_1", "sub_1", "m-1")
	first.Payment.InvoiceID = ""
	first.Payment.PaymentID = "pay_1"
	first.Payment.AttemptRef = first.Payment.Attempt()
	id, sub := paidSubscriptionOrder(t, s, conn, first)
	feb1 := subJan1.AddDate(0, 1, 0)
	created := subEvent("evt_2c", "sub_1", fulfillment.EventAttemptCreated, feb1, "inv_sub_1_2")
	created.Payment.MerchantOrderID = "m-1"
	charge := subEvent("evt_2", "sub_1", fulfillment.EventPaymentConfirmed, feb1, "inv_sub_1_2")
	charge.Payment.MerchantOrderID = "m-1"
	if got := deliver(t, s, created); got != "ignored_type" {
		t.Errorf("the renewal invoice's invoice.created: %s, want ignored_type", got)
	}
	if got := deliver(t, s, charge); got != "renewed" {
		t.Errorf("the renewal after it: %s, want renewed", got)
	}
	wantCounts(t, conn, []countCheck{
		{"periods", `SELECT count(*) FROM subscription_periods WHERE subscription_id = $2 AND $1 <> ''`, 2},
		{"items", `SELECT count(*) FROM reconciliation_items WHERE order_id = $1 OR subscription_id = $2`, 0},
	}, id, sub)
}

// paidSubscriptionOrder creates order m-1 of one subscription line (plan
// subPlan, customer user_42) and delivers first, its payment, which must
// fulfil it; it returns the order's id and that of the subscription the
// payment created, sub_1.
func paidSubscriptionOrder(t *testing.T, s *storage.Store, conn *pgx.Conn, first fulfillment.ProviderEvent) (orderID, subID string) {
	t.Helper()
	orderID = lineOrder(t, s, "m-1", "10",
		fulfillment.LineDraft{SKU: "pro", Kind: "subscription", Quantity: 1, Currency: "USD", MinorUnits: 1000, AccountRef: "user_42", PlanID: subPlan.ID})
	if got := deliver(t, s, first); got != "fulfilled" {
		t.Fatalf("the order's payment: %s", got)
	}
	return orderID, subscriptionID(t, conn, "sub_1")
}

// replayStored replays the stored event of provider event id eventID, as
// a person does, and returns its new decision.
func replayStored(t *testing.T, s *storage.Store, conn *pgx.Conn, eventID string) string {
	t.Helper()
	ctx := context.Background()
	var id int64
	if err := conn.QueryRow(ctx, `SELECT id FROM inbox_events WHERE event_id = $1`, eventID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: id, Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	return processAll(t, s, 1)
}

// registeredPayment registers subscription sub_<tag>_<i> and stores,
// queued, its first payment, evt_<tag>_<i>, naming merchant order
// m-<tag>-<i>, which no order has (yet); it returns the stored event and
// that merchant order id.
func registeredPayment(t *testing.T, s *storage.Store, tag string, i int) (stored fulfillment.InboxReceipt, merchant string) {
	t.Helper()
	ctx := context.Background()
	ref := subRef
	ref.ProviderSubscriptionID = fmt.Sprintf("sub_%s_%d", tag, i)
	if _, _, err := s.SubscriptionCreate(ctx, ref); err != nil {
		t.Fatal(err)
	}
	merchant = fmt.Sprintf("m-%s-%d", tag, i)
	stored, err := s.InboxInsert(ctx, firstPayment(fmt.Sprintf("evt_%s_%d", tag, i), ref.ProviderSubscriptionID, merchant), []byte(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	return stored, merchant
}

// decideAtOnce stores events, queued, then decides each in a transaction
// of its own, all at once, and returns their inbox ids and their decisions,
// sorted and joined with commas.
func decideAtOnce(t *testing.T, s *storage.Store, events ...fulfillment.ProviderEvent) (ids []int64, decisions string) {
	t.Helper()
	ctx := context.Background()
	ids = make([]int64, 0, len(events))
	for _, ev := range events {
		r, err := s.InboxInsert(ctx, ev, []byte(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, r.ID)
	}
	if _, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 100, Lease: time.Minute, MaxAttempts: 10}); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		decided []string
		next    = make(chan int64, len(ids))
	)
	for _, id := range ids {
		next <- id
	}
	concurrently(len(ids), func() {
		id := <-next
		outs, err := s.InboxProcess(ctx, []int64{id}, "w")
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		decided = append(decided, string(outs[id].Decision))
		mu.Unlock()
	})
	slices.Sort(decided)
	return ids, strings.Join(decided, ",")
}
