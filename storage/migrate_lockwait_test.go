package storage_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
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

// refuseConnections makes the database at url refuse new connections
// (its sessions stay), until the test ends. A database cannot refuse
// connections from a session of its own: a session of the server's
// (pgtest's) database does it.
func refuseConnections(t *testing.T, url string) {
	t.Helper()
	admin := pgtest.Conn(t, os.Getenv("DATABASE_URL"))
	allow := func(allow bool) error {
		_, err := admin.Exec(context.Background(), fmt.Sprintf("ALTER DATABASE %s ALLOW_CONNECTIONS %t",
			pgx.Identifier{pgtest.Database(url)}.Sanitize(), allow))
		return err
	}
	if err := allow(false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = allow(true) })
}

// The sessions a migration waits for are watched from a connection opened
// before it starts, not once it waits: on a loaded server an attempt could
// end before a connection opened then had looked. Here the database takes
// no new connection once the migration waits (a connection that takes
// longer than the attempt), and both attempts still name the report.
func TestMigrationWatchesFromBeforeItWaits(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	ctx := context.Background()
	conn := pgtest.Conn(t, url)
	migratedBefore(t, conn, "_order_paid_amount.sql")
	_, reportPID := openReport(t, url)

	var retried []*storage.LockTimeoutError
	wait := storage.LockWait{Timeout: time.Second, Attempts: 2, Pause: 10 * time.Millisecond,
		Retrying: func(lt *storage.LockTimeoutError) { retried = append(retried, lt) }}
	done := make(chan error, 1)
	go func() { done <- storage.Migrate(ctx, url, wait) }()
	waitForLockWait(t, conn, "orders")
	refuseConnections(t, url)

	err := <-done
	lt, ok := errors.AsType[*storage.LockTimeoutError](err)
	if !ok {
		t.Fatalf("Migrate: %v, want a *LockTimeoutError", err)
	}
	if len(retried) != 1 {
		t.Fatalf("told of %d retries, want 1: %+v", len(retried), retried)
	}
	for _, lt := range []*storage.LockTimeoutError{retried[0], lt} {
		if len(lt.Blockers) != 1 || lt.Blockers[0].PID != int32(reportPID) || lt.WatchErr != nil {
			t.Errorf("attempt %d: the sessions waited for: %+v (%v), want the report (pid %d)",
				lt.Attempt, lt.Blockers, lt.WatchErr, reportPID)
		}
	}
}

// A watcher that cannot connect does not stop the migrations: they wait
// and give way as they would, and then apply; an attempt that gave way
// says why it names no session (not that none was seen).
func TestMigrationSaysWhyItCannotNameBlockers(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	ctx := context.Background()
	conn := pgtest.Conn(t, url)
	m, _ := migratedBefore(t, conn, "_order_paid_amount.sql")
	report, _ := openReport(t, url)
	// Migrations held back (their lock taken) until the migrator's own
	// connection is open: then the database refuses new connections, the
	// watcher's among them.
	holder := pgtest.Conn(t, url)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(storage.MigrationLock)); err != nil {
		t.Fatal(err)
	}

	var retried []*storage.LockTimeoutError
	wait := storage.LockWait{Timeout: 200 * time.Millisecond, Attempts: 2, Pause: 10 * time.Millisecond,
		Retrying: func(lt *storage.LockTimeoutError) {
			retried = append(retried, lt)
			_ = report.Rollback(ctx)
		}}
	done := make(chan error, 1)
	go func() { done <- storage.Migrate(ctx, url, wait) }()
	for i := 0; ; i++ {
		var asking bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()
			AND pid <> pg_backend_pid() AND query LIKE '%pg_try_advisory_lock%')`).Scan(&asking); err != nil {
			t.Fatal(err)
		}
		if asking {
			break
		}
		if i == 1000 {
			t.Fatal("the migrator never asked for the migrations' lock")
		}
		time.Sleep(5 * time.Millisecond)
	}
	refuseConnections(t, url)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(storage.MigrationLock)); err != nil {
		t.Fatal(err)
	}

	if err := <-done; err != nil {
		t.Fatalf("Migrate without a watcher: %v", err)
	}
	if applied := schemaVersion(t, conn); applied != int32(len(m.Migrations)) {
		t.Errorf("schema at %d, want %d", applied, len(m.Migrations))
	}
	if len(retried) != 1 {
		t.Fatalf("told of %d retries, want 1: %+v", len(retried), retried)
	}
	lt := retried[0]
	if len(lt.Blockers) != 0 || lt.WatchErr == nil ||
		!strings.Contains(lt.Error(), "the sessions it waited for could not be named, watching them failed: ") ||
		!strings.Contains(lt.Error(), "is not currently accepting connections") {
		t.Errorf("the attempt that gave way: %v (blockers %+v)", lt, lt.Blockers)
	}
}

// An attempt names only the sessions seen while it waited: here migration
// 058 waits for a session (periods) that ends while it waits, and 060 then
// waits for the report and gives way, unseen (the watcher's connection is
// gone, as a wait shorter than a look or a blocker the watcher cannot see
// would be unseen). 060's error must not name periods, 058's blocker.
func TestMigrationNamesOnlyItsOwnBlockers(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	ctx := context.Background()
	conn := pgtest.Conn(t, url)
	migratedBefore(t, conn, "_period_payment_once.sql")
	periods := pgtest.Conn(t, url)
	if _, err := periods.Exec(ctx, "SET application_name = 'periods'"); err != nil {
		t.Fatal(err)
	}
	periodsTx, err := periods.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = periodsTx.Rollback(ctx) }()
	if _, err := periodsTx.Exec(ctx, "SELECT count(*) FROM subscription_periods"); err != nil {
		t.Fatal(err)
	}
	openReport(t, url)

	// 058 waits the timeout at most: the test ends periods well before.
	wait := storage.LockWait{Timeout: 3 * time.Second, Attempts: 1}
	done := make(chan error, 1)
	go func() { done <- storage.Migrate(ctx, url, wait) }()
	waitForLockWait(t, conn, "subscription_periods")
	// Once the watcher has looked (and seen periods) during 058's wait,
	// its connection ends, then periods.
	var watcher int32
	for i := 0; ; i++ {
		err := conn.QueryRow(ctx, `SELECT a.pid FROM pg_stat_activity a, pg_locks l
			WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.query LIKE '%pg_blocking_pids%'
				AND a.state = 'idle' AND l.database = a.datid AND l.relation = 'subscription_periods'::regclass AND NOT l.granted
				AND a.query_start > l.waitstart`).Scan(&watcher)
		if err == nil {
			break
		}
		if !errors.Is(err, pgx.ErrNoRows) || i == 1000 {
			t.Fatalf("the watcher's look during 058's wait: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_terminate_backend($1)", watcher); err != nil {
		t.Fatal(err)
	}
	if err := periodsTx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	err = <-done
	lt, ok := errors.AsType[*storage.LockTimeoutError](err)
	if !ok || lt.Migration != "060_order_paid_amount.sql" {
		t.Fatalf("Migrate: %v, want 060 to give way", err)
	}
	if len(lt.Blockers) != 0 || strings.Contains(lt.Error(), "periods") {
		t.Errorf("060 gave way naming %+v: %v, want none of 058's", lt.Blockers, lt)
	}
}
