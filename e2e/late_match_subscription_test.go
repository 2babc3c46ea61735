package e2e_test

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// lateSubPlan is the monthly plan of the late-matching subscription tests.
const lateSubPlan = "late-monthly"

// withLateSubPlan configures lateSubPlan (a month, a week's grace).
func withLateSubPlan(c *config.Config) {
	grace := 7 * 24 * time.Hour
	c.Plans = []config.Plan{{ID: lateSubPlan, Months: 1, Grace: &grace}}
}

// subscriptionOrderRequest is an order of one period of lateSubPlan for
// user_late, paid in 25 USDT.
func subscriptionOrderRequest(merchantOrderID string) *fulfillmentv1.CreateOrderRequest {
	return &fulfillmentv1.CreateOrderRequest{
		OrgId: orgA, Environment: "live", MerchantOrderId: merchantOrderID,
		Lines: []*fulfillmentv1.OrderLine{{Sku: "pro", Kind: "subscription", Quantity: 1,
			UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 2500}, AccountRef: "user_late", PlanId: lateSubPlan}},
		Settlement: &fulfillmentv1.Settlement{Token: "USDT", Network: "TRON", Amount: "25.000000", Tolerance: "0.5"},
	}
}

// subEvent is a Yolfi event about subscription subID, created at at,
// naming merchantOrderID ("" for none); a payment pays invoice.
func subEvent(typ, subID, merchantOrderID, invoice string, at time.Time) yolfi.Payload {
	p := event(typ, merchantOrderID, invoice)
	p.Data.SubscriptionID = subID
	p.CreatedAt = at.UTC().Format(time.RFC3339)
	return p
}

// subCounts is what a subscription holds, counted: its state, paid
// periods, the end of the last, its subscription.renewed events in the
// feed and its outbox messages.
type subCounts struct {
	State            string
	Periods, Renewed int
	End              time.Time
	Messages         int
}

func (s *stack) subCounts(t *testing.T, subID string) subCounts {
	t.Helper()
	var c subCounts
	err := s.db.QueryRow(context.Background(), `
		SELECT s.state, (SELECT count(*) FROM subscription_periods p WHERE p.subscription_id = s.id), s.period_end,
			(SELECT count(*) FROM order_events e WHERE e.subscription_id = s.id AND e.topic = 'subscription.renewed'),
			(SELECT count(*) FROM outbox_messages m WHERE m.subscription_id = s.id)
		FROM subscriptions s WHERE s.provider_subscription_id = $1`, subID).Scan(&c.State, &c.Periods, &c.End, &c.Renewed, &c.Messages)
	if err != nil {
		t.Fatalf("subscription %s: %v", subID, err)
	}
	c.End = c.End.UTC()
	return c
}

// waitPeriods waits, up to lateMatchWithin after since, until subscription
// subID has want paid periods, and returns how long after since that was.
func (s *stack) waitPeriods(t *testing.T, subID string, want int, since time.Time) time.Duration {
	t.Helper()
	for {
		if s.count(t, `SELECT count(*) FROM subscription_periods p JOIN subscriptions s ON s.id = p.subscription_id
			WHERE s.provider_subscription_id = $1`, subID) == want && s.count(t, "SELECT count(*) FROM inbox_events WHERE state = 'pending'") == 0 {
			return time.Since(since)
		}
		if time.Since(since) > lateMatchWithin {
			t.Fatalf("subscription %s has not %d periods %v after its first payment", subID, want, lateMatchWithin)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// decisionsOf is the decisions of the events ids, in the order they were
// processed.
func (s *stack) decisionsOf(t *testing.T, ids ...string) string {
	t.Helper()
	var d string
	if err := s.db.QueryRow(context.Background(), `SELECT string_agg(decision, ',' ORDER BY processed_at)
		FROM inbox_events WHERE event_id = ANY($1)`, ids).Scan(&d); err != nil {
		t.Fatal(err)
	}
	return d
}

// A renewal and a cancellation of a subscription delivered over real HTTP
// before its first payment: both are stored unmatched (the renewal with an
// item). The first payment creates the subscription, and within seconds
// both apply, in the order they came: two periods paid, the subscription
// cancelled at the end of the second — counted in periods, feed events
// and outbox messages (one per renewed period). Their decisions say they
// came first; the renewal's item is resolved matched_later. Delivered
// again and replayed by hand, they change nothing. A renewal received
// before the late match window stays unmatched, its item open, for a
// person.
func TestLateMatchSubscriptionEventsBeforeTheFirstPayment(t *testing.T) {
	t.Parallel()
	crm := startReceiver(t, true, nil)
	s := startReplicaWith(t, pgtest.DB(t), func(c *config.Config) {
		withLateSubPlan(c)
		withDestinations(destination(t, "crm", crm, true, 5*time.Second, "subscription.renewed"))(c)
	})
	start := monthAndDaysAgo()
	renewal := subEvent(yolfi.TypePaymentConfirmed, "sub_late", "", "inv_late_2", start.AddDate(0, 1, 0))
	cancel := subEvent(yolfi.TypeSubscriptionCancelled, "sub_late", "", "", start.AddDate(0, 1, 2))
	old := subEvent(yolfi.TypePaymentConfirmed, "sub_late", "", "inv_late_old", start.AddDate(0, 0, 3))
	for _, p := range []yolfi.Payload{old, renewal, cancel} {
		s.sendOK(t, p)
		s.settle(t)
	}
	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE state = 'unmatched'"); n != 3 {
		t.Fatalf("%d unmatched events before the subscription exists, want 3", n)
	}
	if _, err := s.db.Exec(context.Background(), "UPDATE inbox_events SET received_at = now() - interval '8 days' WHERE event_id = $1", old.ID); err != nil {
		t.Fatal(err)
	}

	if _, err := s.client.CreateOrder(authed(orgAToken), subscriptionOrderRequest("m-sub-late")); err != nil {
		t.Fatal(err)
	}
	first := subEvent(yolfi.TypePaymentConfirmed, "sub_late", "m-sub-late", "inv_late_1", start)
	paid := time.Now()
	s.sendOK(t, first)
	took := s.waitPeriods(t, "sub_late", 2, paid)
	t.Logf("the early events applied %v after the first payment was delivered", took.Round(time.Millisecond))

	// Each period follows the end of the one before (start + 1 month, + 1
	// month): on a run whose start falls on a 31st, not start + 2 months.
	want := subCounts{State: "cancelled", Periods: 2, Renewed: 2, End: start.AddDate(0, 1, 0).AddDate(0, 1, 0), Messages: 2}
	if got := s.subCounts(t, "sub_late"); got != want {
		t.Fatalf("after the early events: %+v, want %+v", got, want)
	}
	if n := s.count(t, `SELECT count(*) FROM inbox_events WHERE event_id = ANY($1) AND state = 'processed'
		AND decision_reason LIKE '%(late match: subscription sub_late was created after this event)'`,
		[]string{renewal.ID, cancel.ID}); n != 2 {
		t.Errorf("%d of the early events' decisions say they came first, want 2", n)
	}
	// Each early event's decision, whichever was applied first: applied in
	// the order they occurred, in one batch, the renewal renews and the
	// cancellation cancels; when a batch failed and they were retried
	// apart (a lock wait on a loaded machine), the cancellation may come
	// first, and the renewal, which occurred before it, still pays its
	// period (the rules' "paid before the cancellation, announced after").
	if got := s.decisionsOf(t, renewal.ID) + " " + s.decisionsOf(t, cancel.ID); got != "renewed subscription_cancelled" {
		t.Errorf("the early events decided %s, want renewed and subscription_cancelled", got)
	}
	if n := s.count(t, `SELECT count(*) FROM reconciliation_items i JOIN inbox_events e ON e.id = i.inbox_event_id
		WHERE i.kind = 'unmatched_payment' AND i.state = 'resolved' AND i.resolution = 'matched_later' AND i.resolved_by = 'service'
			AND i.subscription_id IS NOT NULL AND e.event_id = $1`, renewal.ID); n != 1 {
		t.Errorf("the renewal's item is not resolved as matched_later with the subscription")
	}

	// Delivered again, and replayed by hand: nothing more.
	for _, p := range []yolfi.Payload{renewal, cancel} {
		s.sendOK(t, p)
		var id int64
		if err := s.db.QueryRow(context.Background(), "SELECT id FROM inbox_events WHERE event_id = $1", p.ID).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := s.client.ReplayInboxEvent(authed(adminToken),
			&fulfillmentv1.ReplayInboxEventRequest{InboxEventId: strconv.FormatInt(id, 10), ActorDetail: "test"}); err != nil {
			t.Fatalf("replaying %s: %v", p.Type, err)
		}
	}
	s.settle(t)
	waitFor(t, "the renewals delivered to crm", func() bool {
		return s.count(t, "SELECT count(*) FROM outbox_messages WHERE destination_id = 'crm' AND state = 'delivered'") == 2
	})
	if got := s.subCounts(t, "sub_late"); got != want {
		t.Errorf("after redeliveries and replays: %+v, want %+v", got, want)
	}
	if n := crm.TotalEffects(); n != 2 {
		t.Errorf("crm applied %d messages, want the two renewals'", n)
	}

	// The one received before the window stays for a person.
	if row := inboxEvent(t, s, old.ID); row.State != "unmatched" {
		t.Errorf("the event older than the window is %+v, want unmatched", row)
	}
	if n := s.count(t, "SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment' AND state = 'open'"); n != 1 {
		t.Errorf("%d unmatched_payment items open, want the old renewal's", n)
	}
}

// A crash right after the batch that created the subscription, and queued
// its early renewal again, committed (real processes, SIGKILL at the
// failpoint late-match-after-commit): the restarted service applies the
// renewal within seconds, once.
func TestLateMatchSubscriptionSurvivesACrash(t *testing.T) {
	t.Parallel()
	ps := newProcService(t, procFailpointBuild.binary(t))
	ps.configure = withLateSubPlan
	ps.queueOnly = true // (the inbox processor's batch queues the renewal again)
	p := ps.start(t, "late-match-after-commit")
	start := monthAndDaysAgo()
	renewal := subEvent(yolfi.TypePaymentConfirmed, "sub_crash", "", "inv_crash_2", start.AddDate(0, 1, 0))
	if code, err := p.deliver(renewal); err != nil || code != http.StatusOK {
		t.Fatalf("renewal: %d, %v; want 200", code, err)
	}
	waitEventState(t, p.stack, renewal.ID, "unmatched")
	if _, err := p.client.CreateOrder(authed(orgAToken), subscriptionOrderRequest("m-sub-crash")); err != nil {
		t.Fatal(err)
	}
	if code, err := p.deliver(subEvent(yolfi.TypePaymentConfirmed, "sub_crash", "m-sub-crash", "inv_crash_1", start)); err != nil ||
		code != http.StatusOK {
		t.Fatalf("first payment: %d, %v; want 200", code, err)
	}
	st := p.waitExit(t, 20*time.Second)
	if !daemon.Killed(st) || !strings.Contains(p.output.String(), "failpoint: killing the process at late-match-after-commit") {
		t.Fatalf("fulfillmentd exited with %v; want killed at late-match-after-commit", st)
	}
	if row := inboxEvent(t, p.stack, renewal.ID); row.State == "unmatched" {
		t.Fatalf("the renewal is %+v after the crash: its re-drive did not commit with the subscription", row)
	}

	p2 := ps.start(t, "")
	took := p2.waitPeriods(t, "sub_crash", 2, time.Now())
	t.Logf("applied %v after the restart", took.Round(time.Millisecond))
	p2.sendOK(t, renewal)
	p2.settle(t)
	want := subCounts{State: "active", Periods: 2, Renewed: 2, End: start.AddDate(0, 1, 0).AddDate(0, 1, 0)} // (period after period)
	if got := p2.subCounts(t, "sub_crash"); got != want {
		t.Errorf("after the restart and a redelivery: %+v, want %+v", got, want)
	}
}

// monthAndDaysAgo is a time about a month and five days ago, on a day of
// the month no later than the 28th: a month later is then on the same
// day, as the tests' expected period ends take it (a run of periods from
// the 29th to the 31st ends on shorter months' last days:
// fulfillment.TestPeriodEnds).
func monthAndDaysAgo() time.Time {
	t := time.Now().AddDate(0, -1, -5).UTC().Truncate(time.Second)
	if t.Day() > 28 {
		t = t.AddDate(0, 0, 28-t.Day())
	}
	return t
}

// A replica started without a plan that live subscriptions are on says so
// at once, naming the plan and how many subscriptions: their events would
// fail only later, after their retries, once one came. Subscriptions whose
// access ended, and plans still configured, are not named.
func TestStartWarnsOfPlansSubscriptionsStillUse(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.DB(t)
	first := startReplicaWith(t, dbURL, withLateSubPlan)
	if _, err := first.db.Exec(context.Background(), `
		INSERT INTO subscriptions (id, org_id, environment, provider, provider_subscription_id, customer_ref, plan_id, access_ended_at)
		VALUES (gen_random_uuid(), 'org_a', 'live', 'yolfi', 'sub_w1', 'user_1', 'gone-monthly', NULL),
			(gen_random_uuid(), 'org_a', 'live', 'yolfi', 'sub_w2', 'user_2', 'gone-monthly', NULL),
			(gen_random_uuid(), 'org_a', 'live', 'yolfi', 'sub_w3', 'user_3', 'ended-monthly', now()),
			(gen_random_uuid(), 'org_a', 'live', 'yolfi', 'sub_w4', 'user_4', $1, NULL)`, lateSubPlan); err != nil {
		t.Fatal(err)
	}
	sink := &logSink{}
	startService(t, dbURL, withLateSubPlan, slog.New(slog.NewJSONHandler(sink, nil)))
	var warning string
	waitFor(t, "the warning about plans no longer configured", func() bool {
		for _, l := range sink.lines() {
			if strings.Contains(l, "plans that the configuration does not have") {
				warning = l
				return true
			}
		}
		return false
	})
	if !strings.Contains(warning, `"gone-monthly":2`) || strings.Contains(warning, "ended-monthly") || strings.Contains(warning, lateSubPlan) {
		t.Errorf("warning %s; want gone-monthly with 2 subscriptions, and neither ended-monthly nor %s", warning, lateSubPlan)
	}
}
