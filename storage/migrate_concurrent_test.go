package storage_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/storage"
)

// Two replicas migrate together while 059 (an index built CONCURRENTLY)
// is pending and a writer of subscription_periods holds a transaction
// open for a while, so that the build takes longer than deadlock_timeout.
// Both succeed and the index is valid: the one waiting for the migrations'
// lock waits without a statement open, whose snapshot the build would
// otherwise wait for while it waits for the build (PostgreSQL then broke
// the cycle by aborting the build).
func TestConcurrentMigrateOverAConcurrentIndex(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	ctx := context.Background()
	conn := pgtest.Conn(t, url)
	migratedBefore(t, conn, "_period_payment_once_index.sql")
	writer := pgtest.Conn(t, url)
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE subscription_periods IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Go(func() { errs[0] = storage.Migrate(ctx, url, storage.LockWait{}) })
	time.Sleep(300 * time.Millisecond)
	wg.Go(func() { errs[1] = storage.Migrate(ctx, url, storage.LockWait{}) })
	time.Sleep(2500 * time.Millisecond)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("replica %d: %v", i, err)
		}
	}
	var valid bool
	if err := conn.QueryRow(ctx, `SELECT indisvalid FROM pg_index
		WHERE indexrelid = 'subscription_periods_payment_once'::regclass`).Scan(&valid); err != nil || !valid {
		t.Errorf("the index: valid %v, %v", valid, err)
	}
}
