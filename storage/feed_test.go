package storage_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/storage"
)

// An event whose transaction started first but commits last is not
// skipped: while it is running, the feed holds back the events of younger
// transactions, so no cursor can pass it before it is read.
func TestFeedNeverSkipsAnEventCommittedLate(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	ctx := context.Background()
	s, err := storage.Open(ctx, url, storage.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	conns := make([]*pgx.Conn, 2)
	for i := range conns {
		if conns[i], err = pgx.Connect(ctx, url); err != nil {
			t.Fatal(err)
		}
		c := conns[i]
		t.Cleanup(func() { _ = c.Close(context.Background()) })
	}
	var ids []string
	for _, mid := range []string{"m-slow", "m-fast"} {
		o, _, err := s.OrderCreate(ctx, spec(t, "org_a", mid))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, o.ID)
	}
	const insert = `INSERT INTO order_events (org_id, environment, order_id, topic, payload)
		VALUES ('org_a', 'live', $1, 'order.fulfilled', '{}')`
	slow, err := conns[0].Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = slow.Rollback(ctx) }()
	if _, err := slow.Exec(ctx, insert, ids[0]); err != nil { // its transaction id is taken here
		t.Fatal(err)
	}
	if _, err := conns[1].Exec(ctx, insert, ids[1]); err != nil { // a younger transaction commits first
		t.Fatal(err)
	}
	read := func() []string {
		t.Helper()
		events, err := s.FeedRead(ctx, fulfillment.FeedParams{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range events {
			got = append(got, e.OrderID)
		}
		return got
	}
	if got := read(); len(got) != 0 {
		t.Fatalf("read %v while an older transaction is running: a reader's cursor would pass its event", got)
	}
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Transactions of other tests, in other databases of the cluster, may
	// hold the horizon back a while (transaction ids are cluster-wide).
	deadline := time.Now().Add(30 * time.Second)
	got := read()
	for len(got) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		got = read()
	}
	if len(got) != 2 || got[0] != ids[0] || got[1] != ids[1] {
		t.Fatalf("read %v, want %v: the older transaction's event first", got, ids)
	}
}

// An order event is stored without its body (migration 040): the feed
// renders it from the order, the topic and the event's time. What it
// renders is the body its outbox messages carry, and what the down
// migration stores again; a subscription event keeps its own.
func TestFeedRendersTheBodiesOfOrderEvents(t *testing.T) {
	t.Parallel()
	s, conn, _ := processedScenario(t)
	ctx := context.Background()

	var stored, rendered, subscriptions int
	err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE payload IS NOT NULL AND order_id IS NOT NULL),
		count(*) FILTER (WHERE payload IS NULL), count(*) FILTER (WHERE payload IS NOT NULL AND subscription_id IS NOT NULL)
		FROM order_events`).Scan(&stored, &rendered, &subscriptions)
	if err != nil {
		t.Fatal(err)
	}
	if stored != 0 || rendered == 0 || subscriptions == 0 {
		t.Fatalf("order events with a stored body %d, without %d; subscription events with one %d: want 0, some, some",
			stored, rendered, subscriptions)
	}

	// Every event is announced to crm: the feed's body is its message's.
	feed := readWholeFeed(t, s, rendered+subscriptions)
	for _, e := range feed {
		var messages int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox_messages
			WHERE destination_id = 'crm' AND topic = $1 AND coalesce(order_id::text, subscription_id::text) = $2
				AND payload = $3::jsonb`,
			e.Topic, e.OrderID+e.SubscriptionID, string(e.Payload)).Scan(&messages)
		if err != nil || messages != 1 {
			t.Errorf("%d messages (%v) announce %s of %s%s with the feed's body\n%s", messages, err, e.Topic, e.OrderID,
				e.SubscriptionID, e.Payload)
		}
	}

	// The version before stores every body; the feed reads the same.
	m, v := migratedBefore(t, conn, "_order_events_rendered.sql")
	var missing int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM order_events WHERE payload IS NULL`).Scan(&missing); err != nil || missing != 0 {
		t.Fatalf("%d events without a body at version %d (%v)", missing, v-1, err)
	}
	before := readWholeFeed(t, s, len(feed))
	for i, e := range before {
		if !sameJSON(t, string(e.Payload), string(feed[i].Payload)) {
			t.Errorf("at version %d the body of %s of %s%s is\n%s\nwant\n%s", v-1, e.Topic, e.OrderID, e.SubscriptionID,
				e.Payload, feed[i].Payload)
		}
	}
	if err := m.MigrateTo(ctx, int32(len(m.Migrations))); err != nil {
		t.Fatal(err)
	}
}

// readWholeFeed reads the feed from its start until it holds n events:
// transactions of other tests, in other databases of the cluster, may hold
// the horizon back a while (transaction ids are cluster-wide).
func readWholeFeed(t *testing.T, s *storage.Store, n int) []fulfillment.OrderEvent {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		events, err := s.FeedRead(context.Background(), fulfillment.FeedParams{Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(events) >= n || time.Now().After(deadline) {
			if len(events) != n {
				t.Fatalf("the feed holds %d events, want %d", len(events), n)
			}
			return events
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sameJSON reports whether a and b are the same JSON value.
func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

// With no destination subscribed to anything, an order event's body is
// rendered only for the messages that carry it: the order.refunded that
// withdraws a refunded order's deliveries from the destinations of its
// lines, which is the body the feed renders.
func TestWithdrawalsCarryTheRenderedBody(t *testing.T) {
	t.Parallel()
	s, conn, _ := openStore(t, storage.Options{MaxConns: 10})
	ctx := context.Background()
	externalOrder(t, s, "m-w")
	refund := confirmedEvent("w2", "m-w")
	refund.Kind, refund.Type = fulfillment.EventRefunded, "payment.refunded"
	refund.Payment = confirmedEvent("w1", "m-w").Payment
	for _, ev := range []fulfillment.ProviderEvent{confirmedEvent("w1", "m-w"), refund} {
		if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, 2)
	if n := count(t, conn, `SELECT count(*) FROM order_events WHERE topic = 'order.refunded' AND payload IS NULL`); n != 1 {
		t.Fatalf("%d order.refunded events stored without a body, want 1", n)
	}
	feed := readWholeFeed(t, s, 1)
	var withdrawals int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox_messages
		WHERE topic = 'order.refunded' AND destination_id IN ('licenses', 'shipping') AND payload = $1::jsonb`,
		string(feed[0].Payload)).Scan(&withdrawals)
	if err != nil || withdrawals != 2 {
		t.Errorf("%d withdrawals (%v) carry the feed's body\n%s\nwant 2: licenses and shipping", withdrawals, err, feed[0].Payload)
	}
	if n := count(t, conn, `SELECT count(*) FROM outbox_messages WHERE NOT required`); n != 2 {
		t.Errorf("%d messages besides the lines' requests, want the 2 withdrawals", n)
	}
}
