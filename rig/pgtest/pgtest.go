// Package pgtest gives tests a real PostgreSQL database of their own: a
// fresh database cloned from a template that has every migration applied.
//
// The server comes from DATABASE_URL (make test starts a throwaway cluster
// and sets it); when it is unset, Main starts a throwaway cluster for the
// test binary itself.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/rig/pgcluster"
	"github.com/fulfillplatform/fulfillment/storage"
)

// Main runs the tests of a package that uses DB. Call it from TestMain.
func Main(m *testing.M) {
	os.Exit(run(m)) //nolint:revive // deep-exit: Main stands in for TestMain, whose job is to exit with the tests' code
}

func run(m *testing.M) int {
	if os.Getenv("DATABASE_URL") != "" {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	defer func() { _ = os.RemoveAll(dir) }() // a temporary folder: best effort
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: dir})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	defer func() {
		if err := c.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "pgtest: stopping PostgreSQL:", err)
		}
	}()
	if err := os.Setenv("DATABASE_URL", c.URL("fulfillment")); err != nil {
		fmt.Fprintln(os.Stderr, "pgtest:", err)
		return 1
	}
	return m.Run()
}

// Conn connects to the database at dbURL for one test, and closes the
// connection when the test ends (before a database of DB is dropped).
func Conn(t testing.TB, dbURL string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbURL)
	if err != nil {
		t.Fatalf("pgtest: connecting: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.WithoutCancel(context.Background())) })
	return conn
}

// SetDatabase sets name to value for the sessions of the database of dbURL
// (ALTER DATABASE … SET; RESET when value is ""), as an operator would, from
// a session on the cluster's admin database, and ends the database's
// sessions, so that none goes on with the value it began with.
func SetDatabase(t testing.TB, dbURL, name, value string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		t.Fatalf("pgtest: connecting: %v", err)
	}
	defer func() { _ = admin.Close(ctx) }()
	db := pgx.Identifier{Database(dbURL)}.Sanitize()
	stmt := "ALTER DATABASE " + db + " RESET " + pgx.Identifier{name}.Sanitize()
	if value != "" {
		stmt = "ALTER DATABASE " + db + " SET " + pgx.Identifier{name}.Sanitize() + " = " + pgx.Identifier{value}.Sanitize()
	}
	if _, err := admin.Exec(ctx, stmt); err != nil {
		t.Fatalf("pgtest: %s: %v", stmt, err)
	}
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", Database(dbURL)); err != nil {
		t.Fatalf("pgtest: ending the sessions of %s: %v", Database(dbURL), err)
	}
}

// DB creates a migrated database for one test, dropped when the test ends,
// and returns its URL.
func DB(t testing.TB) string {
	t.Helper()
	admin := os.Getenv("DATABASE_URL")
	if admin == "" {
		t.Fatal("pgtest: DATABASE_URL is not set: run tests with make test, or call pgtest.Main from TestMain")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		t.Fatalf("pgtest: connecting to %s: %v", redact(admin), err)
	}
	defer func() { _ = conn.Close(ctx) }()

	tpl, err := ensureTemplate(ctx, conn, admin)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	name := "test_" + randomHex(8)
	// Concurrent clones of one template can collide on its lock; retry.
	for attempt := 0; ; attempt++ {
		_, err = conn.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, tpl))
		if err == nil || attempt == 20 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("pgtest: creating database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Errorf("pgtest: dropping %s: %v", name, err)
			return
		}
		defer func() { _ = conn.Close(ctx) }()
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: dropping %s: %v", name, err)
		}
	})
	return withDatabase(admin, name)
}

// ensureTemplate creates, once per migration set, a template database with
// every migration applied. An advisory lock serializes test binaries that
// race to create it.
func ensureTemplate(ctx context.Context, conn *pgx.Conn, admin string) (string, error) {
	name := "tpl_" + migrationsDigest()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(7310001)"); err != nil {
		return "", fmt.Errorf("locking template creation: %w", err)
	}
	// A failed unlock is harmless: closing the connection releases the lock.
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(7310001)") }()
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("looking up template: %w", err)
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+building+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("dropping half-built template: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+building); err != nil {
		return "", fmt.Errorf("creating template: %w", err)
	}
	if err := storage.Migrate(ctx, withDatabase(admin, building), storage.LockWait{}); err != nil {
		return "", fmt.Errorf("migrating template: %w", err)
	}
	// Renamed only once complete, so that a crash never leaves a template
	// that looks finished but is not.
	if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER DATABASE %s RENAME TO %s", building, name)); err != nil {
		return "", fmt.Errorf("finishing template: %w", err)
	}
	return name, nil
}

// migrationsDigest names the template after the migrations it holds.
func migrationsDigest() string {
	h := sha256.New()
	files, _ := fs.Glob(storage.Migrations(), "*.sql")
	sort.Strings(files)
	for _, f := range files {
		b, _ := fs.ReadFile(storage.Migrations(), f)
		_, _ = fmt.Fprintf(h, "%s\x00%d\x00", f, len(b)) // a hash's Write never fails
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

func withDatabase(rawURL, db string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(fmt.Sprintf("pgtest: DATABASE_URL is not a URL: %v", err))
	}
	u.Path = "/" + db
	return u.String()
}

func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Bouncer starts a PgBouncer in pool mode mode ("session" or "transaction")
// in front of the server of DATABASE_URL, with PgBouncer's default settings
// apart from the listen address, the port and trust authentication, stopped
// when the test ends. Without PgBouncer installed the test is skipped,
// unless $CI is set (CI installs it): then it fails.
func Bouncer(t testing.TB, mode string) *pgcluster.Bouncer {
	t.Helper()
	u, err := url.Parse(os.Getenv("DATABASE_URL"))
	if err != nil || u.Host == "" {
		t.Fatal("pgtest: DATABASE_URL is not set: run tests with make test, or call pgtest.Main from TestMain")
	}
	dir := ServerDir(t, "pgbouncer-")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := pgcluster.StartBouncer(ctx, pgcluster.BouncerOptions{Dir: dir, Upstream: u.Host, Mode: mode})
	if errors.Is(err, pgcluster.ErrNoPgBouncer) && os.Getenv("CI") == "" {
		t.Skip("pgtest:", err)
	}
	if err != nil {
		t.Fatal("pgtest:", err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	return b
}

// ServerDir returns a new folder for a server of the test (a PostgreSQL
// cluster, a PgBouncer) that the server's OS user can enter, removed when
// the test ends.
func ServerDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", prefix)
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Database returns the name of the database of a URL DB returned.
func Database(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		panic(fmt.Sprintf("pgtest: not a URL: %v", err))
	}
	return u.Path[1:]
}
