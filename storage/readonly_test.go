package storage_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
)

// setReadOnly sets the database conn is connected to read-only (or back)
// for new sessions, from a connection to the cluster's admin database, and
// ends the sessions open on it, as a failover or a fenced primary would.
func setReadOnly(t *testing.T, conn *pgx.Conn, on bool) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = admin.Close(ctx) }()
	name := conn.Config().Database
	stmt := "ALTER DATABASE " + pgx.Identifier{name}.Sanitize() + " RESET default_transaction_read_only"
	if on {
		stmt = "ALTER DATABASE " + pgx.Identifier{name}.Sanitize() + " SET default_transaction_read_only = on"
	}
	if _, err := admin.Exec(ctx, stmt); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name); err != nil {
		t.Fatal(err)
	}
}

// A database that takes no writes (a standby, a primary fenced read-only)
// makes a write unavailable — to be retried, as for an unreachable one,
// never an internal error — while reads go on. Once it takes writes, the
// same write succeeds.
func TestReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	s, conn, url := openStore(t, storage.Options{MaxConns: 4})
	ctx := context.Background()
	// A write, tried again on a connection the switch below ended (as a
	// caller retries what was unavailable).
	create := func(merchantID string) error {
		_, _, err := s.OrderCreate(ctx, spec(t, "org_a", merchantID))
		for i := 0; err != nil && !strings.Contains(err.Error(), "SQLSTATE 25006") && i < 3; i++ {
			_, _, err = s.OrderCreate(ctx, spec(t, "org_a", merchantID))
		}
		return err
	}
	first, _, err := s.OrderCreate(ctx, spec(t, "org_a", "ro-0"))
	if err != nil {
		t.Fatal(err)
	}
	setReadOnly(t, conn, true)
	_, err = s.OrderGet(ctx, first.ID)
	for i := 0; err != nil && i < 3; i++ { // the first may meet a connection the switch ended
		_, err = s.OrderGet(ctx, first.ID)
	}
	if err != nil {
		t.Fatalf("a read from the read-only database: %v", err)
	}
	if err := create("ro-1"); !errors.Is(err, fulfillment.ErrUnavailable) || !strings.Contains(err.Error(), "SQLSTATE 25006") {
		t.Fatalf("a write to a read-only database: %v, want it unavailable, saying why", err)
	}

	setReadOnly(t, conn, false)
	if err := create("ro-1"); err != nil {
		t.Fatalf("the write once the database takes writes again: %v", err)
	}
	fresh, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = fresh.Close(ctx) }()
	if n := count(t, fresh, "SELECT count(*) FROM orders WHERE merchant_order_id = 'ro-1'"); n != 1 {
		t.Errorf("orders ro-1: %d, want 1", n)
	}
}
