package storage_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/storage"
)

// A database that takes no writes (a standby, a primary fenced read-only)
// makes a write unavailable — to be retried, as for an unreachable one,
// never an internal error — while reads go on. Once it takes writes, the
// same write succeeds.
func TestReadOnlyDatabase(t *testing.T) {
	t.Parallel()
	s, _, url := openStore(t, storage.Options{MaxConns: 4})
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
	pgtest.SetDatabase(t, url, "default_transaction_read_only", "on") // and ends its sessions
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

	pgtest.SetDatabase(t, url, "default_transaction_read_only", "")
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
