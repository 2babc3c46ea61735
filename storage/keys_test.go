package storage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// Migration 037 makes the keys that entitlements, payment attempts and
// feed events are read by their primary keys, in place of the ids nothing
// read them by. From a database holding data of every kind (the one-batch
// scenario), migrating down, up, down and up again keeps every row; every
// event delivered again then writes nothing new (the statements' ON
// CONFLICT names the new primary keys); and each key still refuses a row
// recorded twice.
func TestMigration037KeepsEveryKindOfData(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	scenarioOrders(t, s)
	events := batchScenario()
	for _, ev := range events {
		if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, len(events))
	want := writtenRows(t, conn)
	primaryKeys := func() string {
		t.Helper()
		var keys string
		if err := conn.QueryRow(ctx, `SELECT string_agg(pg_get_constraintdef(oid), '; ' ORDER BY conrelid::regclass::text)
			FROM pg_constraint WHERE contype = 'p' AND conrelid::regclass::text IN ('entitlements', 'payment_attempts', 'order_events')`).
			Scan(&keys); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	const before = "PRIMARY KEY (id); PRIMARY KEY (id); PRIMARY KEY (id)"
	const after = "PRIMARY KEY (order_id, line_no, unit); PRIMARY KEY (xid, id); PRIMARY KEY (order_id, provider, attempt_ref)"
	m, v := migrator(t, conn, "_keys_read_by.sql")
	for _, step := range []struct {
		version int32
		keys    string
	}{{v - 1, before}, {v, after}, {v - 1, before}, {int32(len(m.Migrations)), after}} {
		if err := m.MigrateTo(ctx, step.version); err != nil {
			t.Fatalf("migrating to %d: %v", step.version, err)
		}
		if got := writtenRows(t, conn); got != want {
			t.Fatalf("at version %d the rows are:\n%s\nwant:\n%s", step.version, got, want)
		}
		if got := primaryKeys(); got != step.keys {
			t.Errorf("at version %d the primary keys are %s, want %s", step.version, got, step.keys)
		}
	}
	deliveredAgainWriteNothing(t, s, conn, events)
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
