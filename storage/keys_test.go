package storage_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/worker"
)

// Migration 037 makes the keys that entitlements, payment attempts and
// feed events are read by their primary keys, in place of the ids nothing
// read them by. From a database holding data of every kind (the one-batch
// scenario), migrating down, up, down and up again keeps every row; every
// event delivered again then writes nothing new (the attempts' ON CONFLICT
// names the new primary key); and each key still refuses a row recorded
// twice.
func TestMigration037KeepsEveryKindOfData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primaryKeys := func(conn *pgx.Conn) string {
		t.Helper()
		var keys string
		if err := conn.QueryRow(ctx, `SELECT string_agg(pg_get_constraintdef(oid), '; ' ORDER BY conrelid::regclass::text)
			FROM pg_constraint WHERE contype = 'p' AND conrelid::regclass::text IN ('entitlements', 'payment_attempts', 'order_events')`).
			Scan(&keys); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	conn := scenarioAcrossMigration(t, "_keys_read_by.sql", primaryKeys,
		"PRIMARY KEY (id); PRIMARY KEY (id); PRIMARY KEY (id)",
		"PRIMARY KEY (order_id, line_no, unit); PRIMARY KEY (xid, id); PRIMARY KEY (order_id, provider, attempt_ref)")
	for what, insert := range map[string]string{
		"a unit granted": `INSERT INTO entitlements (order_id, line_no, unit, kind, value)
			SELECT order_id, line_no, unit, kind, value || '-2' FROM entitlements LIMIT 1`,
		"an attempt": `INSERT INTO payment_attempts (order_id, provider, attempt_ref, state)
			SELECT order_id, provider, attempt_ref, state FROM payment_attempts LIMIT 1`,
		"a license key": `INSERT INTO entitlements (order_id, line_no, unit, kind, value)
			SELECT order_id, line_no, unit + 100, kind, value FROM entitlements LIMIT 1`,
	} {
		_, err := conn.Exec(ctx, insert)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			t.Errorf("%s recorded twice: %v, want a unique violation", what, err)
		}
	}
}

// Migration 038 drops the foreign keys of the rows a decision writes about
// an order (licenses, credits, attempts, feed events, the event's order),
// which the effect writer names only from rows it read under the order's
// lock, and that of a delivery attempt to its message. From a database
// whose every kind of row was written without them (the one-batch
// scenario at the latest version), migrating down adds them back and
// validates every row; up, down and up again keep every row; and the
// events delivered again write nothing.
func TestMigration038KeepsEveryKindOfData(t *testing.T) {
	t.Parallel()
	checks := func(conn *pgx.Conn) string {
		t.Helper()
		return fmt.Sprint(count(t, conn, `SELECT count(*)::int FROM pg_constraint WHERE contype = 'f' AND conname IN (
			'entitlements_order_id_line_no_fkey', 'ledger_entries_order_id_line_no_fkey', 'payment_attempts_order_id_fkey',
			'order_events_order_id_fkey', 'inbox_events_order_id_fkey', 'outbox_attempts_message_id_fkey')`), " foreign keys")
	}
	scenarioAcrossMigration(t, "_effect_rows_unchecked.sql", checks, "6 foreign keys", "0 foreign keys")
}

// scenarioAcrossMigration processes the one-batch scenario (data of every
// kind) at the latest version, then migrates to just below the migration
// named *suffix, to it, below it again and to the latest: at each step
// every row is as it was, and schema (what the migration changes) is
// before below it and after from it on. Every event delivered again then
// writes nothing. It returns the database's connection.
func scenarioAcrossMigration(t *testing.T, suffix string, schema func(*pgx.Conn) string, before, after string) *pgx.Conn {
	t.Helper()
	s, conn, events := processedScenario(t)
	ctx := context.Background()
	want := writtenRows(t, conn)
	m, v := migrator(t, conn, suffix)
	for _, step := range []struct {
		version int32
		schema  string
	}{{v - 1, before}, {v, after}, {v - 1, before}, {int32(len(m.Migrations)), after}} {
		if err := m.MigrateTo(ctx, step.version); err != nil {
			t.Fatalf("migrating to %d: %v", step.version, err)
		}
		if got := writtenRows(t, conn); got != want {
			t.Fatalf("at version %d the rows are:\n%s\nwant:\n%s", step.version, got, want)
		}
		if got := schema(conn); got != step.schema {
			t.Errorf("at version %d: %s, want %s", step.version, got, step.schema)
		}
	}
	deliveredAgainWriteNothing(t, s, conn, events)
	return conn
}

// The licenses and credits of an order, and its events, are inserted
// without a conflict clause: the rules grant an order's lines once, on the
// payment that moves it out of pending_payment, and enter each announced
// state once. Should an order be granted or announce a state again all the
// same (here: its state and payment put back by hand, and a second payment
// decided as the first), the unique keys refuse it — the batch fails,
// nothing of it is written — rather than let it grant or announce twice.
func TestASecondGrantOrAnnouncementIsRefusedByTheKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		kopecks  int64
		decision fulfillment.Decision
	}{
		{"granted again", 20000, fulfillment.DecisionFulfilled},
		{"on hold again", 100, fulfillment.DecisionAmountMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, conn := newStore(t)
			ctx := context.Background()
			creditLicenseOrder(t, s, "m-a")
			if _, err := s.InboxInsert(ctx, refundEvent("a1", "m-a", fulfillment.EventPaymentConfirmed, tc.kopecks), []byte("{}")); err != nil {
				t.Fatal(err)
			}
			if got := processAll(t, s, 1); got != string(tc.decision) {
				t.Fatalf("first payment: %s, want %s", got, tc.decision)
			}
			first := effectRows(t, conn)
			if _, err := conn.Exec(ctx, `UPDATE orders SET state = 'pending_payment', paid_attempt_ref = NULL,
				paid_invoice_id = NULL, paid_payment_id = NULL, paid_amount = NULL, paid_at = NULL WHERE merchant_order_id = 'm-a'`); err != nil {
				t.Fatal(err)
			}
			again := refundEvent("a2", "m-a", fulfillment.EventPaymentConfirmed, tc.kopecks)
			again.Payment.AttemptRef, again.Payment.PaymentID = "att-again", "pay-again"
			stored, err := s.InboxInsert(ctx, again, []byte("{}"))
			if err != nil {
				t.Fatal(err)
			}
			claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 10})
			if err != nil || len(claims) != 1 || claims[0].ID != stored.ID {
				t.Fatalf("claim = %v, %v; want event %d", claims, err, stored.ID)
			}
			_, err = s.InboxProcess(ctx, []int64{stored.ID}, "w")
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
				t.Fatalf("deciding the second payment as the first: %v, want a unique violation", err)
			}
			if got := effectRows(t, conn); got != first {
				t.Errorf("after the second payment the effects are %s, want those of the first: %s", got, first)
			}
		})
	}
}

// Migration 044 records on each order the subscription its payment paid.
// From a database holding data of every kind (the one-batch scenario),
// migrating down, up, down and up again keeps every row, and up records
// it on every paid order whose events were applied to a subscription, as
// processing records it: the same subscription.
func TestMigration044OrderPaidSubscription(t *testing.T) {
	t.Parallel()
	recorded := func(conn *pgx.Conn) string {
		t.Helper()
		if count(t, conn, `SELECT count(*) FROM information_schema.columns
			WHERE table_name = 'orders' AND column_name = 'paid_subscription_id'`) == 0 {
			return "no column"
		}
		return fmt.Sprint(count(t, conn, `SELECT count(*) FROM orders o WHERE o.paid_subscription_id IS NOT NULL`), " recorded, ",
			count(t, conn, `SELECT count(*) FROM orders o WHERE o.paid_subscription_id IS DISTINCT FROM (
				SELECT e.applied_subscription_id FROM inbox_event_orders l JOIN inbox_events e ON e.id = l.event_id
				WHERE l.order_id = o.id AND e.applied_subscription_id IS NOT NULL ORDER BY e.id LIMIT 1)`), " otherwise")
	}
	scenarioAcrossMigration(t, "_order_paid_subscription.sql", recorded, "no column", "1 recorded, 0 otherwise")
}

// Migration 045 records on each order paid by a payment that named no
// payment id the event that paid it. Processing records it; migrating
// down and up again finds the same event for the same order (and none for
// an order whose payment named its id), and every row of the one-batch
// scenario is kept.
func TestMigration045OrderPaidEvent(t *testing.T) {
	t.Parallel()
	s, conn, _ := processedScenario(t)
	ctx := context.Background()
	if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-invoice-only")); err != nil {
		t.Fatal(err)
	}
	ev := confirmedEvent("evt_invoice_only", "m-invoice-only")
	ev.Payment.PaymentID = ""
	if got := deliver(t, s, ev); got != "fulfilled" {
		t.Fatalf("the invoice-only payment: %s", got)
	}
	recorded := func() string {
		t.Helper()
		var refs string
		if err := conn.QueryRow(ctx, `SELECT coalesce(string_agg(merchant_order_id || '=' || paid_event, ', '
			ORDER BY merchant_order_id), 'none') FROM orders WHERE paid_event IS NOT NULL`).Scan(&refs); err != nil {
			t.Fatal(err)
		}
		return refs
	}
	const want = "m-invoice-only=yolfi/evt_invoice_only"
	if got := recorded(); got != want {
		t.Fatalf("processed: %s, want %s", got, want)
	}
	rows := writtenRows(t, conn)
	m, v := migrator(t, conn, "_order_paid_event.sql")
	for _, version := range []int32{v - 1, v, v - 1, int32(len(m.Migrations))} {
		if err := m.MigrateTo(ctx, version); err != nil {
			t.Fatalf("migrating to %d: %v", version, err)
		}
		if got := writtenRows(t, conn); got != rows {
			t.Fatalf("at version %d the rows are:\n%s\nwant:\n%s", version, got, rows)
		}
	}
	if got := recorded(); got != want {
		t.Errorf("migrated down and up: %s, want %s", got, want)
	}
}
