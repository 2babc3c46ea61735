package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/tern/v2/migrate"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// Migration 025 moves the inbox's queue into inbox_work and makes "leased
// only while pending" a constraint of every leased table. From a version 24
// database holding a processed event, a pending one, one leased to a
// worker that is gone (with attempts and an error) and a delivered outbox
// message whose lease was never cleared: migrating up queues exactly the
// pending events with their leases, clears the stale lease, and the
// queued events are then processed once each by this version; migrating
// down puts a pending event's queue state back on its row, and up again
// queues it again.
func TestMigration025MovesTheInboxQueue(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	creditLicenseOrder(t, s, "m-a")
	creditLicenseOrder(t, s, "m-b")
	for _, ev := range []fulfillment.ProviderEvent{confirmedEvent("x1", "m-nobody")} {
		if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if got := processAll(t, s, 1); got != string(fulfillment.DecisionUnmatched) {
		t.Fatalf("x1: %s, want unmatched", got)
	}
	for _, ev := range []fulfillment.ProviderEvent{
		refundEvent("a1", "m-a", fulfillment.EventPaymentConfirmed, 20000),
		refundEvent("b1", "m-b", fulfillment.EventPaymentConfirmed, 20000),
	} {
		if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}

	m, err := migrate.NewMigrator(ctx, conn, "schema_version")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(storage.Migrations()); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 24); err != nil {
		t.Fatal(err)
	}
	// Version 24: the queue state is on the events' rows.
	if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE state = 'pending' AND lease_owner IS NULL AND attempts = 0"); n != 2 {
		t.Fatalf("migrating down: %d unleased pending events, want 2", n)
	}
	if _, err := conn.Exec(ctx, `
		UPDATE inbox_events SET lease_owner = 'gone-worker', lease_until = now() + interval '1 hour',
			next_attempt_at = now() + interval '1 hour', attempts = 3, last_error = 'boom'
		WHERE event_id = 'b1';
		INSERT INTO outbox_messages (destination_id, topic, idempotency_key, org_id, environment, required, payload,
			state, lease_owner, lease_until)
		VALUES ('crm', 'order.fulfilled', 'stale-lease', 'org_a', 'live', false, '{}', 'delivered', 'gone-worker', now())`); err != nil {
		t.Fatal(err)
	}

	if err := m.MigrateTo(ctx, 25); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_work WHERE state = 'pending'"); n != 2 {
		t.Errorf("queued events after migrating up = %d, want the 2 pending ones", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM inbox_work w JOIN inbox_events e USING (id)
		WHERE e.event_id = 'b1' AND w.lease_owner = 'gone-worker' AND w.attempts = 3 AND w.last_error = 'boom'
			AND w.next_attempt_at > now()`); n != 1 {
		t.Errorf("the leased event's work row lost its lease, attempts or error")
	}
	if n := count(t, conn, "SELECT count(*) FROM outbox_messages WHERE idempotency_key = 'stale-lease' AND lease_owner IS NULL"); n != 1 {
		t.Errorf("the delivered message kept its stale lease")
	}
	_, err = conn.Exec(ctx, "UPDATE outbox_messages SET lease_owner = 'w' WHERE idempotency_key = 'stale-lease'")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Errorf("leasing a delivered message: %v, want a check violation", err)
	}
	if err := m.Migrate(ctx); err != nil { // this version's schema, for its processor
		t.Fatal(err)
	}

	// This version processes what was queued: the lease of the worker
	// that is gone is reclaimed, and each event is applied once.
	if n, err := s.InboxQueue().Reclaim(ctx); err != nil || n != 1 {
		t.Fatalf("reclaim = %d, %v; want the dead worker's event", n, err)
	}
	claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 10})
	if err != nil || len(claims) != 2 {
		t.Fatalf("claim = %v, %v; want both events", claims, err)
	}
	outs, err := s.InboxProcess(ctx, []int64{claims[0].ID, claims[1].ID}, "w")
	if err != nil || len(outs) != 2 {
		t.Fatalf("process = %v, %v", outs, err)
	}
	for id, o := range outs {
		if o.Decision != fulfillment.DecisionFulfilled {
			t.Errorf("event %d: %s, want fulfilled", id, o.Decision)
		}
	}
	if n := count(t, conn, "SELECT count(*) FROM ledger_entries"); n != 2 {
		t.Errorf("ledger entries = %d, want one credit per order", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM entitlements"); n != 4 {
		t.Errorf("licenses = %d, want two per order", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE event_id = 'b1' AND attempts = 4 AND last_error IS NULL"); n != 1 {
		t.Errorf("b1 does not record its four claims")
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_work"); n != 0 {
		t.Errorf("%d work rows left after every event was decided", n)
	}

	// Down and up again with an event queued.
	if _, err := s.InboxInsert(ctx, refundEvent("a2", "m-a", fulfillment.EventPartiallyRefunded, 5000), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 24); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE event_id = 'a2' AND state = 'pending' AND lease_owner IS NULL"); n != 1 {
		t.Errorf("migrating down: the queued event is not pending on its row")
	}
	if n := count(t, conn, "SELECT count(*) FROM pg_indexes WHERE indexname = 'inbox_events_claim_idx'"); n != 1 {
		t.Errorf("migrating down: the events' claim index is missing")
	}
	if err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 1); got != string(fulfillment.DecisionPartiallyRefunded) {
		t.Errorf("a2 after migrating down and up: %s, want partially_refunded", got)
	}
}
