package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/tern/v2/migrate"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// outboxWorkVersion is the migration that moves the outbox's queue into
// outbox_work.
const outboxWorkVersion = 31

// The outbox's queue moves into outbox_work. From a database of the
// version before holding two paid orders' messages — one leased to a worker
// that is gone in the middle of a request (attempts, an error, a send under
// way), one pending, one delivered, one failed — migrating up queues
// exactly the pending messages with their leases; this version then
// reclaims, sends and records them, the interrupted send said so, each
// delivered once, and the failed message retried is queued again.
// Migrating down puts the queued message back on its row; up again queues
// it again.
func TestMigrationMovesTheOutboxQueue(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	for _, mo := range []string{"m-1", "m-2"} {
		externalOrder(t, s, mo)
		if _, err := s.InboxInsert(ctx, confirmedEvent("e-"+mo, mo), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, 2)
	m, err := migrate.NewMigrator(ctx, conn, "schema_version")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(storage.Migrations()); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, outboxWorkVersion-1); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count(*) FROM outbox_messages WHERE state = 'pending'"); n != 4 {
		t.Fatalf("%d messages queued, want two per order", n)
	}
	if _, err := conn.Exec(ctx, `
		UPDATE outbox_messages SET lease_owner = 'gone-worker', lease_until = now() + interval '1 hour',
			next_attempt_at = now() + interval '1 hour', sending_since = now(), attempts = 2, last_error = 'timeout'
		WHERE id = (SELECT min(id) FROM outbox_messages WHERE destination_id = 'licenses');
		UPDATE outbox_messages SET state = 'failed', attempts = 5, last_error = 'refused', processed_at = now()
		WHERE id = (SELECT min(id) FROM outbox_messages WHERE destination_id = 'shipping');
		UPDATE outbox_messages SET state = 'delivered', attempts = 1, last_status = 200, processed_at = now()
		WHERE id = (SELECT max(id) FROM outbox_messages WHERE destination_id = 'shipping')`); err != nil {
		t.Fatal(err)
	}

	if err := m.MigrateTo(ctx, outboxWorkVersion); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, `SELECT count(*) FROM outbox_work w JOIN outbox_messages m USING (id)
		WHERE w.state = 'pending' AND m.state = 'pending' AND m.destination_id = 'licenses'`); n != 2 {
		t.Errorf("queued messages after migrating up = %d, want the 2 pending ones", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM outbox_work"); n != 2 {
		t.Errorf("work rows after migrating up = %d, want the 2 pending messages'", n)
	}
	leased := int64(count(t, conn, `SELECT w.id FROM outbox_work w
		WHERE w.lease_owner = 'gone-worker' AND w.attempts = 2 AND w.last_error = 'timeout'
			AND w.sending_since IS NOT NULL AND w.next_attempt_at > now()`))
	if leased == 0 {
		t.Fatal("the leased message's work row lost its lease, attempts, error or send under way")
	}
	if d, err := s.DeliveryGet(ctx, leased); err != nil || d.Attempts != 2 || d.LastError != "timeout" || d.NextAttemptAt == nil {
		t.Errorf("the leased message reads %+v, %v; want its work row's attempts, error and next attempt", d, err)
	}
	if err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}

	// This version sends what was queued: the gone worker's message is
	// reclaimed, loaded as interrupted, and recorded once.
	if n, err := s.OutboxQueue("licenses").Reclaim(ctx); err != nil || n != 1 {
		t.Fatalf("reclaim = %d, %v; want the gone worker's message", n, err)
	}
	claims, err := s.OutboxQueue("licenses").Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 10})
	if err != nil || len(claims) != 2 {
		t.Fatalf("claim = %+v, %v; want both licenses messages", claims, err)
	}
	ids := []int64{claims[0].ID, claims[1].ID}
	msgs, err := s.OutboxLoad(ctx, ids, "w")
	if err != nil || len(msgs) != 2 {
		t.Fatalf("load = %+v, %v; want both messages", msgs, err)
	}
	for i, msg := range msgs {
		if interrupted := msg.ID == leased; msg.Interrupted != interrupted {
			t.Errorf("message %d loaded interrupted = %v, want %v", msg.ID, msg.Interrupted, interrupted)
		}
		if err := recordOne(s, msg.ID, "w", fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeDelivered, Status: 204, StartedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if claims[i].ID == leased && claims[i].Attempts != 3 {
			t.Errorf("the reclaimed message's claim is attempt %d, want 3", claims[i].Attempts)
		}
	}
	if n := count(t, conn, `SELECT count(*) FROM outbox_messages WHERE id = $1 AND state = 'delivered' AND attempts = 3`, leased); n != 1 {
		t.Error("the reclaimed message, delivered, does not record its three attempts")
	}
	if n := count(t, conn, "SELECT count(*) FROM outbox_attempts"); n != 2 {
		t.Errorf("%d attempts recorded, want one per licenses message", n)
	}

	// The failed message, retried, is queued again from its first attempt.
	failed := int64(count(t, conn, "SELECT id FROM outbox_messages WHERE state = 'failed'"))
	if _, err := s.DeliveryRetry(ctx, failed, "ops", false); err != nil {
		t.Fatal(err)
	}

	// Down and up again with it queued.
	if err := m.MigrateTo(ctx, outboxWorkVersion-1); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count(*) FROM outbox_messages WHERE id = $1 AND state = 'pending' AND attempts = 0 AND lease_owner IS NULL", failed); n != 1 {
		t.Errorf("migrating down: the retried message is not pending on its row")
	}
	if n := count(t, conn, "SELECT count(*) FROM pg_indexes WHERE indexname = 'outbox_messages_due_idx'"); n != 1 {
		t.Errorf("migrating down: the messages' claim index is missing")
	}
	if err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if got := deliverNext(t, s, "shipping", fulfillment.OutcomeDelivered); got.ID != failed {
		t.Errorf("shipping delivered message %d, want the retried %d", got.ID, failed)
	}
	if n := count(t, conn, "SELECT count(*) FROM orders WHERE state = 'fulfilled'"); n != 2 {
		t.Errorf("%d orders fulfilled, want both (every line delivered)", n)
	}
	// What is left is what this version queued since: the orders'
	// order.fulfilled for crm, each with its work row.
	if n := count(t, conn, `SELECT count(*) FROM outbox_messages m JOIN outbox_work w USING (id)
		WHERE m.state = 'pending' AND w.state = 'pending' AND m.destination_id = 'crm' AND m.topic = 'order.fulfilled'`); n != 2 {
		t.Errorf("%d order.fulfilled messages queued for crm, want one per order", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM outbox_messages WHERE state <> 'delivered'"); n != 2 {
		t.Errorf("%d messages not delivered, want crm's two", n)
	}
}
