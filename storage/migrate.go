package storage

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// versionTable records the applied migration version.
const versionTable = "schema_version"

// Migrations returns the embedded migration files (for tests that build a
// template database from them).
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embedded folder always exists
	}
	return sub
}

// parseConnConfig parses the connection string url, named what in the
// error. The string may hold a password, and pgx's error quotes it (its
// redaction misses some forms, such as "password = x"): the error never
// does.
func parseConnConfig(what, url string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parsing %s: malformed connection string", what)
	}
	return cfg, nil
}

// Migrate applies every pending migration to the database at url. Tern holds
// a session advisory lock while it migrates, so replicas starting together
// apply each migration once: url must keep sessions (a direct or
// session-pooled URL), else Migrate fails with ErrTransactionPooled — a
// lock taken under transaction pooling could stay held on a pooled server
// session for good.
//
// A database whose schema is newer than this binary's migrations (an older
// binary during an upgrade, or after a rollback of the binary) is left as
// it is: Migrate returns a *SchemaAheadError, which says so.
//
// w bounds how long each migration holds up the tables it changes while it
// waits for their locks (a *LockTimeoutError when it gave way every time).
func Migrate(ctx context.Context, url string, w LockWait) error {
	return withMigrator(ctx, url, func(conn *pgx.Conn, m *migrate.Migrator) error {
		if err := migrateWaiting(ctx, conn, m, w, func() error { return m.Migrate(ctx) }); err != nil {
			return fmt.Errorf("migrating: %w", err)
		}
		return nil
	})
}

// MigrateTo brings the database at url to version: it applies the
// migrations up to it, or undoes (their down sections) those after it,
// newest first. version is one of this binary's: 0 to its latest. As
// Migrate, it needs a URL that keeps sessions, and w bounds its lock waits.
func MigrateTo(ctx context.Context, url string, version int32, w LockWait) error {
	return withMigrator(ctx, url, func(conn *pgx.Conn, m *migrate.Migrator) error {
		if latest := int32(len(m.Migrations)); version < 0 || version > latest {
			return fmt.Errorf("version %d is not one of this binary's: 0 to %d", version, latest)
		}
		if err := migrateWaiting(ctx, conn, m, w, func() error { return m.MigrateTo(ctx, version) }); err != nil {
			return fmt.Errorf("migrating to version %d: %w", version, err)
		}
		return nil
	})
}

// SchemaAheadError is a database whose schema is at a version newer than
// the latest this binary has: nothing was changed.
type SchemaAheadError struct{ Applied, Latest int32 }

func (e *SchemaAheadError) Error() string {
	return fmt.Sprintf("the database schema is at version %d, newer than this binary's latest (%d): nothing applied. "+
		"This binary runs on it (each release's migrations keep the release before it working); to take the schema "+
		"back, run the newer binary's `fulfillmentd migrate --to %d`", e.Applied, e.Latest, e.Latest)
}

// migrationLock is tern's advisory lock: the one its migrator takes (and
// takes again, from the session that holds it, at once).
const migrationLock = 9628173550095224

// migrationLockPoll is how often a migrator asks for the lock while
// another holds it.
const migrationLockPoll = 200 * time.Millisecond

// withMigrator runs fn with a migrator on a connection of its own to the
// database at url, which must keep sessions, holding the migrations' lock,
// unless the schema is newer than this binary's (a *SchemaAheadError).
func withMigrator(ctx context.Context, url string, fn func(conn *pgx.Conn, m *migrate.Migrator) error) error {
	cfg, err := parseConnConfig("database URL", url)
	if err != nil {
		return err
	}
	pooling, err := probePooling(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connecting to migrate: %w", err)
	}
	if pooling == PoolingTransaction {
		return fmt.Errorf("migrating: %w", ErrTransactionPooled)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connecting to migrate: %w", interpret(err))
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	// Wait for tern's lock without a statement (and its snapshot) open:
	// a CREATE INDEX CONCURRENTLY of the holder waits for older snapshots.
	for {
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(migrationLock)).Scan(&got); err != nil {
			return fmt.Errorf("locking migrations: %w", interpret(err))
		}
		if got {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(migrationLockPoll):
		}
	}
	defer func() {
		_, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLock))
	}()
	m, err := newMigrator(ctx, conn)
	if err != nil {
		return err
	}
	applied, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return fmt.Errorf("reading schema version: %w", interpret(err))
	}
	if latest := int32(len(m.Migrations)); applied > latest {
		return &SchemaAheadError{Applied: applied, Latest: latest}
	}
	return fn(conn, m)
}

// SchemaVersion reports the applied and the embedded (latest) migration
// versions. The schema is current when they are equal. It reads tern's
// version table directly: tern's migrator takes a session advisory lock
// even to read it, which readiness checks must not (they run through the
// pool, which may be transaction pooled, and every few seconds).
func (s *Store) SchemaVersion(ctx context.Context) (applied, latest int32, err error) {
	files, err := fs.Glob(Migrations(), "*.sql")
	if err != nil {
		return 0, 0, fmt.Errorf("listing migrations: %w", err)
	}
	latest = int32(len(files))
	err = s.pool.QueryRow(ctx, "SELECT version FROM "+versionTable).Scan(&applied)
	if sqlstateOf(err) == sqlstateUndefinedTable {
		return 0, latest, nil // nothing migrated yet
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading schema version: %w", interpret(err))
	}
	return applied, latest, nil
}

func newMigrator(ctx context.Context, conn *pgx.Conn) (*migrate.Migrator, error) {
	m, err := migrate.NewMigrator(ctx, conn, versionTable)
	if err != nil {
		return nil, fmt.Errorf("preparing migrator: %w", interpret(err))
	}
	if err := m.LoadMigrations(Migrations()); err != nil {
		return nil, fmt.Errorf("loading migrations: %w", err)
	}
	return m, nil
}

// MigrationStatus is what MigrationStatusOf found: the applied version, and
// the embedded migrations not applied yet, by file name.
type MigrationStatus struct {
	Applied int32
	Latest  int32
	Pending []string
}

// MigrationStatusOf reads which migrations the database at url has applied,
// without taking the migrations' lock and without changing anything.
func MigrationStatusOf(ctx context.Context, url string) (MigrationStatus, error) {
	var st MigrationStatus
	files, err := fs.Glob(Migrations(), "*.sql")
	if err != nil {
		return st, fmt.Errorf("listing migrations: %w", err)
	}
	st.Latest = int32(len(files))
	cfg, err := parseConnConfig("database URL", url)
	if err != nil {
		return st, err
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return st, fmt.Errorf("connecting: %w", interpret(err))
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	err = conn.QueryRow(ctx, "SELECT version FROM "+versionTable, pgx.QueryExecModeSimpleProtocol).Scan(&st.Applied)
	if err != nil && sqlstateOf(err) != sqlstateUndefinedTable {
		return st, fmt.Errorf("reading schema version: %w", interpret(err))
	}
	for i, f := range files {
		if int32(i) >= st.Applied {
			st.Pending = append(st.Pending, f)
		}
	}
	return st, nil
}
