package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/storage"
)

// openReport is a session, named report, that has read orders in a
// transaction it leaves open: the long transaction a migration that alters
// orders must wait for.
func openReport(t *testing.T, url string) (tx pgx.Tx, pid uint32) {
	t.Helper()
	ctx := context.Background()
	conn := pgtest.Conn(t, url)
	if _, err := conn.Exec(ctx, "SET application_name = 'report'"); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM orders"); err != nil {
		t.Fatal(err)
	}
	return tx, conn.PgConn().PID()
}

// A migration that alters orders (060) while a transaction that read
// orders stays open: each attempt waits the lock timeout and gives way,
// so that a writer of orders queued behind it goes on while the long
// transaction is still open; the error names the session waited for and
// the migration, and nothing of that migration is applied. Once the
// transaction ends, the migration applies.
func TestMigrationGivesWayToALongTransaction(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	ctx := context.Background()
	conn := pgtest.Conn(t, url)
	m, v := migratedBefore(t, conn, "_order_paid_amount.sql")
	report, reportPID := openReport(t, url)

	var retried []*storage.LockTimeoutError
	wait := storage.LockWait{Timeout: 500 * time.Millisecond, Attempts: 2, Pause: 50 * time.Millisecond,
		Retrying: func(lt *storage.LockTimeoutError) { retried = append(retried, lt) }}
	done := make(chan error, 1)
	go func() { done <- storage.Migrate(ctx, url, wait) }()

	// A writer of orders arrives while the migration waits for its lock,
	// and so queues behind it: it must not wait for the report.
	waitForLockWait(t, conn, "orders")
	writer := pgtest.Conn(t, url)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second) // a guard: the migration gives way within a second
	defer cancel()
	if _, err := writer.Exec(wctx, "UPDATE orders SET updated_at = updated_at WHERE false"); err != nil {
		t.Fatalf("a writer of orders while the migration waited: %v", err)
	}
	if _, err := report.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("the report's transaction: %v", err)
	}

	err := <-done
	lt, ok := errors.AsType[*storage.LockTimeoutError](err)
	if !ok {
		t.Fatalf("Migrate: %v, want a *LockTimeoutError", err)
	}
	if lt.Migration != "060_order_paid_amount.sql" || lt.Attempt != 2 || lt.Attempts != 2 || lt.Timeout != wait.Timeout {
		t.Errorf("the error: %+v", lt)
	}
	if len(lt.Blockers) != 1 || lt.Blockers[0].PID != int32(reportPID) || lt.Blockers[0].Application != "report" ||
		lt.Blockers[0].State != "idle in transaction" || lt.Blockers[0].Open <= 0 {
		t.Errorf("the sessions waited for: %+v, want the report (pid %d)", lt.Blockers, reportPID)
	}
	if len(retried) != 1 || retried[0].Attempt != 1 || retried[0].Next != wait.Pause {
		t.Errorf("told of %d retries: %+v", len(retried), retried)
	}
	if applied := schemaVersion(t, conn); applied != v-1 {
		t.Errorf("schema at %d after giving way, want %d", applied, v-1)
	}

	// The report ends between two attempts: the next one applies.
	wait.Attempts, wait.Retrying = 3, func(*storage.LockTimeoutError) { _ = report.Rollback(ctx) }
	if err := storage.Migrate(ctx, url, wait); err != nil {
		t.Fatalf("Migrate once the report ended: %v", err)
	}
	if applied := schemaVersion(t, conn); applied != int32(len(m.Migrations)) {
		t.Errorf("schema at %d, want %d", applied, len(m.Migrations))
	}
}

// waitForLockWait returns once a session waits for a lock on table, in
// conn's database (other tests' databases, clones of one template, have
// tables of the same oids).
func waitForLockWait(t *testing.T, conn *pgx.Conn, table string) {
	t.Helper()
	for range 500 {
		var waiting bool
		if err := conn.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_locks
			WHERE relation = $1::regclass AND NOT granted
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`, table).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("no session waited for a lock on %s", table)
}

func schemaVersion(t *testing.T, conn *pgx.Conn) int32 {
	t.Helper()
	var v int32
	if err := conn.QueryRow(context.Background(), "SELECT version FROM schema_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// A migration outside a transaction (059, an index built CONCURRENTLY)
// that fails on a lock timeout the database sets for every session is not
// tried again as one that gave way: nothing rolled it back (a build
// stopped halfway leaves an invalid index), so a second run is not the
// harmless repeat a rolled back transaction's is, and the error must not
// say that nothing of it was applied. Its error is the database's.
func TestMigrationOutsideATransactionIsNotTriedAgain(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	ctx := context.Background()
	conn := pgtest.Conn(t, url)
	_, v := migratedBefore(t, conn, "_period_payment_once_index.sql")
	if _, err := conn.Exec(ctx, `DO $$ BEGIN
		EXECUTE format('ALTER DATABASE %I SET lock_timeout = %L', current_database(), '200ms'); END $$`); err != nil {
		t.Fatal(err)
	}
	writer := pgtest.Conn(t, url)
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE subscription_periods IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	var retried []*storage.LockTimeoutError
	wait := storage.LockWait{Timeout: 5 * time.Second, Attempts: 3, Pause: 10 * time.Millisecond,
		Retrying: func(lt *storage.LockTimeoutError) { retried = append(retried, lt) }}
	err = storage.Migrate(ctx, url, wait)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("Migrate: %v, want the database's lock timeout", err)
	}
	if lt, ok := errors.AsType[*storage.LockTimeoutError](err); ok {
		t.Errorf("Migrate: %v, want no *LockTimeoutError (it says nothing was applied)", lt)
	}
	if len(retried) != 0 {
		t.Errorf("a migration outside a transaction was tried again %d times: %+v", len(retried), retried)
	}
	if applied := schemaVersion(t, conn); applied != v-1 {
		t.Errorf("schema at %d, want %d", applied, v-1)
	}
}

// Through a session pooler, the sessions a migration waited for are named
// too: the pid the pooler gives its client is not the server's.
func TestMigrationNamesBlockersBehindASessionPooler(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	pooled := pgtest.Bouncer(t, "session").URL(pgtest.Database(url))
	ctx := context.Background()
	conn := pgtest.Conn(t, url)
	migratedBefore(t, conn, "_order_paid_amount.sql")
	_, reportPID := openReport(t, url)

	err := storage.Migrate(ctx, pooled, storage.LockWait{Timeout: 500 * time.Millisecond, Attempts: 1})
	lt, ok := errors.AsType[*storage.LockTimeoutError](err)
	if !ok {
		t.Fatalf("Migrate: %v, want a *LockTimeoutError", err)
	}
	if len(lt.Blockers) != 1 || lt.Blockers[0].PID != int32(reportPID) || lt.Blockers[0].Application != "report" {
		t.Errorf("the sessions waited for: %+v, want the report (pid %d)", lt.Blockers, reportPID)
	}
}
