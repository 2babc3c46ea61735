package storage_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/worker"
)

// unresolved is inbox_unresolved: the failed and unmatched events, with
// what late matching looks them up by.
var unresolved = keptTable("inbox_unresolved",
	`SELECT e.event_id, u.state FROM inbox_unresolved u JOIN inbox_events e ON e.id = u.event_id ORDER BY 1`)

// eventOrders is inbox_event_orders: the events linked to an order.
var eventOrders = keptTable("inbox_event_orders", `SELECT o.merchant_order_id, e.event_id FROM inbox_event_orders l
	JOIN orders o ON o.id = l.order_id JOIN inbox_events e ON e.id = l.event_id ORDER BY 1, 2`)

// The failed and unmatched events, and the events of each order, are rows
// of their own, which triggers keep with the events, whoever changes them:
// processing, failing, a late match, a replay, a fix or a delete by hand.
// The readers that list events by state or by order, count the failed
// ones and show an order's timeline read them. Migration 035 builds the
// same rows from the events, and its down migration gives back the six
// indexes.
func TestInboxUnresolvedAndEventOrdersFollowTheEvents(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	orders := map[string]string{}
	for _, mo := range []string{"x-1", "x-2", "x-3"} {
		o, _, err := s.OrderCreate(ctx, spec(t, "org_a", mo))
		if err != nil {
			t.Fatal(err)
		}
		orders[mo] = o.ID
	}
	for _, ev := range []fulfillment.ProviderEvent{confirmedEvent("p1", "x-1"), confirmedEvent("p2", "x-3"),
		confirmedEvent("u1", "x-late")} {
		if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if got := processAll(t, s, 3); got != "fulfilled,fulfilled,unmatched" {
		t.Fatalf("decisions %s, want the two payments fulfilled and the third unmatched", got)
	}
	// f1 fails: its one attempt is used up.
	if _, err := s.InboxInsert(ctx, confirmedEvent("f1", "x-2"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	q := s.InboxQueue()
	claims, err := q.Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 1, Lease: time.Minute, MaxAttempts: 1})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %v, %v; want f1", claims, err)
	}
	if failed, err := retryOne(ctx, q, "w", claims[0], "boom", time.Now(), 1); err != nil || !failed {
		t.Fatalf("retry past its attempts = %v, %v; want failed", failed, err)
	}
	check := func(when, wantUnresolved, wantLinks string) {
		t.Helper()
		if got, wrong := unresolved.rows(t, conn); got != wantUnresolved || wrong != 0 {
			t.Errorf("%s: unresolved %q (%d wrong), want %q", when, got, wrong, wantUnresolved)
		}
		if got, wrong := eventOrders.rows(t, conn); got != wantLinks || wrong != 0 {
			t.Errorf("%s: links %q (%d wrong), want %q", when, got, wrong, wantLinks)
		}
	}
	check("after processing", "f1=failed u1=unmatched ", "x-1=p1 x-3=p2 ")

	list := func(f fulfillment.EventFilter) string {
		t.Helper()
		es, err := s.EventList(ctx, fulfillment.EventListParams{Filter: f, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range es {
			ids = append(ids, e.Event.EventID)
		}
		return strings.Join(ids, " ")
	}
	for _, c := range []struct {
		f    fulfillment.EventFilter
		want string
	}{
		{fulfillment.EventFilter{State: fulfillment.InboxFailed}, "f1"},
		{fulfillment.EventFilter{State: fulfillment.InboxUnmatched}, "u1"},
		{fulfillment.EventFilter{State: fulfillment.InboxProcessed}, "p2 p1"},
		{fulfillment.EventFilter{State: fulfillment.InboxPending}, ""},
		{fulfillment.EventFilter{OrderID: orders["x-1"]}, "p1"},
		{fulfillment.EventFilter{OrderID: orders["x-2"]}, ""},
		{fulfillment.EventFilter{OrderID: orders["x-1"], State: fulfillment.InboxFailed}, ""},
	} {
		if got := list(c.f); got != c.want {
			t.Errorf("events %+v: %q, want %q", c.f, got, c.want)
		}
	}
	summary, err := s.ReconSummary(ctx, fulfillment.ReconFilter{})
	if err != nil || len(summary) != 1 || summary[0].EventsFailed != 1 {
		t.Errorf("summary = %+v, %v; want one failed event", summary, err)
	}
	detail, err := s.OrderDetail(ctx, orders["x-1"])
	if err != nil || len(detail.Events) != 1 || detail.Events[0].EventID != "p1" {
		t.Errorf("x-1's timeline = %+v, %v; want p1", detail.Events, err)
	}

	// The order that u1 named comes: the late match queues u1 again.
	late, _, err := s.OrderCreate(ctx, spec(t, "org_a", "x-late"))
	if err != nil {
		t.Fatal(err)
	}
	orders["x-late"] = late.ID
	check("after the late order", "f1=failed ", "x-1=p1 x-3=p2 ")
	if got := processAll(t, s, 1); got != "fulfilled" {
		t.Fatalf("u1 matched late: %s, want fulfilled", got)
	}
	// A replay decides p1 again: already applied, still its order's.
	if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: inboxID(t, conn, "p1"), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 1); got != string(fulfillment.DecisionAlreadyApplied) {
		t.Fatalf("replayed p1: %s, want already applied", got)
	}
	check("after the late match and a replay", "f1=failed ", "x-1=p1 x-3=p2 x-late=u1 ")

	// Fixes by hand are followed too.
	for _, fix := range []string{
		`UPDATE inbox_events SET state = 'unmatched', order_id = NULL WHERE event_id = 'p1'`,
		`UPDATE inbox_events SET state = 'processed' WHERE event_id = 'f1'`,
		`DELETE FROM inbox_events WHERE event_id = 'p2'`,
	} {
		if _, err := conn.Exec(ctx, fix); err != nil {
			t.Fatalf("%s: %v", fix, err)
		}
	}
	const fixed, fixedLinks = "p1=unmatched ", "x-late=u1 "
	check("after the fixes by hand", fixed, fixedLinks)

	m, v := migratedBefore(t, conn, "_inbox_decision_hot.sql")
	if n := count(t, conn, `SELECT count(*) FROM pg_indexes WHERE indexname IN ('inbox_events_failed_idx',
		'inbox_events_unmatched_order_idx', 'inbox_events_unmatched_session_idx', 'inbox_events_unmatched_subscription_idx',
		'inbox_events_order_idx', 'inbox_events_subscription_idx')`); n != 6 {
		t.Errorf("at version %d: %d of the six indexes on inbox_events", v-1, n)
	}
	if n := count(t, conn, `SELECT count(*) FROM pg_tables WHERE tablename IN ('inbox_unresolved', 'inbox_event_orders')`); n != 0 {
		t.Errorf("at version %d: %d of the two tables exist", v-1, n)
	}
	if err := m.MigrateTo(ctx, int32(len(m.Migrations))); err != nil {
		t.Fatal(err)
	}
	check("migrated down and up again", fixed, fixedLinks)
}

// inboxID is the inbox row id of the stored event eventID.
func inboxID(t *testing.T, conn *pgx.Conn, eventID string) int64 {
	t.Helper()
	var id int64
	if err := conn.QueryRow(context.Background(), `SELECT id FROM inbox_events WHERE event_id = $1`, eventID).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// Recording an event's decision is a HOT update of the event: no index
// covers a column it changes, and its page has room (fillfactor). As for
// orders (TestOrderUpdateAtPaymentIsHOT), the count asks for some HOT
// updates, and no index may cover a column the decision changes.
func TestEventDecisionIsHOT(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	const events = 24
	queuePayments(t, s, events, "hot-%d", []byte(`{"a body":"of some size"}`))
	if got := processAll(t, s, events); strings.Count(got, string(fulfillment.DecisionFulfilled)) != events {
		t.Fatalf("decisions %s, want every payment fulfilled", got)
	}
	updates, hot := tableUpdates(t, s, conn, "inbox_events", events)
	if updates != events || hot == 0 {
		t.Errorf("inbox_events: %d updates, %d of them HOT; want %d, HOT", updates, hot, events)
	}
	noIndexCovers(t, conn, "inbox_events", "state", "decision", "decision_reason", "order_id", "applied_subscription_id",
		"processed_at", "attempts", "last_error")
}
