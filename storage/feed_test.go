package storage_test

import (
	"context"
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
