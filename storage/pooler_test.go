package storage_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// The probe tells a transaction pooler from a session pooler and from a
// direct connection, with PgBouncer's default settings.
func TestProbePooling(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	db := pgtest.Database(url)
	ctx := context.Background()
	for _, c := range []struct {
		name, url string
		want      storage.Pooling
	}{
		{"direct", url, storage.PoolingSession},
		{"pgbouncer session", pgtest.Bouncer(t, "session").URL(db), storage.PoolingSession},
		{"pgbouncer transaction", pgtest.Bouncer(t, "transaction").URL(db), storage.PoolingTransaction},
	} {
		for range 5 {
			got, err := storage.ProbePooling(ctx, c.url)
			if err != nil || got != c.want {
				t.Errorf("%s: probe = %v, %v; want %v", c.name, got, err, c.want)
			}
		}
	}
}

// Behind a transaction pooler the store refuses to hold sessions there,
// migrations refuse to run there, and with a session URL of its own the
// store works: concurrent orders, events and claims through PgBouncer in
// transaction mode, with pgx's statement caching that would collide on
// named prepared statements.
func TestStoreBehindTransactionPooler(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	pooled := pgtest.Bouncer(t, "transaction").URL(pgtest.Database(url))
	ctx := context.Background()

	if _, err := storage.Open(ctx, pooled, storage.Options{}); !errors.Is(err, storage.ErrTransactionPooled) {
		t.Fatalf("Open through a transaction pooler without a session URL: %v, want ErrTransactionPooled", err)
	}
	if err := storage.Migrate(ctx, pooled, storage.LockWait{}); !errors.Is(err, storage.ErrTransactionPooled) {
		t.Fatalf("Migrate through a transaction pooler: %v, want ErrTransactionPooled", err)
	}

	s, err := storage.Open(ctx, pooled, storage.Options{SessionURL: url, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	// Readiness reads the schema version through the pool every few
	// seconds, replicas at once: it must leave no session lock behind on a
	// pooled server session (tern's migrator takes one even to read).
	var readers sync.WaitGroup
	for range 8 {
		readers.Go(func() {
			for range 5 {
				readCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				applied, latest, err := s.SchemaVersion(readCtx)
				cancel()
				if err != nil || applied != latest || latest == 0 {
					t.Errorf("SchemaVersion through the pooler = %d, %d, %v; want the latest version", applied, latest, err)
					return
				}
			}
		})
	}
	readers.Wait()
	// pg_locks covers the whole cluster: this database's locks only.
	if n := count(t, conn, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`); n != 0 {
		t.Fatalf("%d advisory locks held after reading the schema version through the pooler, want 0", n)
	}
	_, owner, _ := live(t, s)

	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("evt_%d", i)
			if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-"+id)); err != nil {
				errs <- fmt.Errorf("creating order %d: %w", i, err)
				return
			}
			if _, err := s.InboxInsert(ctx, confirmedEvent(id, "m-"+id), []byte("{}")); err != nil {
				errs <- fmt.Errorf("inserting event %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for count(t, conn, "SELECT count(*) FROM inbox_events WHERE state = 'pending'") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("events still pending after 20s")
		}
		claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: owner, Limit: 8, Lease: time.Minute, MaxAttempts: 10})
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int64, len(claims))
		for i, c := range claims {
			ids[i] = c.ID
		}
		if _, err := s.InboxProcess(ctx, ids, owner); err != nil {
			t.Fatal(err)
		}
	}
	if got := count(t, conn, "SELECT count(*) FROM orders WHERE state = 'fulfilled'"); got != n {
		t.Errorf("%d orders fulfilled, want %d", got, n)
	}
	if got := count(t, conn, "SELECT count(*) FROM entitlements"); got != 2*n {
		t.Errorf("%d licenses granted, want %d", got, 2*n)
	}
}
