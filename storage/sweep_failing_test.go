package storage_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// A sweep that keeps failing is never given up: each time it uses its
// attempts it is put back, and the first time it opens a sweep_failing
// item about its subscription (one per access end, however many rounds
// fail). Here its plan is no longer configured; a store that knows the
// plan again ends the access, once. Counted in items, access_ended events
// and sweeps.
func TestAFailingSweepOpensOneItemAndGoesOn(t *testing.T) {
	t.Parallel()
	// This store knows pro-monthly only: the subscription is on pro-yearly.
	s, conn, url := openStore(t, storage.Options{MaxConns: 4, Plans: fulfillment.Plans{subPlan.ID: subPlan}})
	ctx := context.Background()
	ref := subRef
	ref.PlanID = yearPlan.ID
	pay := fulfillment.SubscriptionEvent{Kind: fulfillment.SubRenewalPaid, OccurredAt: time.Now().AddDate(-2, 0, 0), InvoiceID: "inv_1"}
	if _, _, err := s.SubscriptionApply(ctx, ref, pay, "evt_1", yearPlan); err != nil {
		t.Fatal(err)
	}
	items := func() int {
		return count(t, conn, `SELECT count(*) FROM reconciliation_items i JOIN subscriptions s ON s.id = i.subscription_id
			WHERE i.kind = 'sweep_failing' AND i.state = 'open' AND i.org_id = 'org_a' AND s.provider_subscription_id = 'sub_1'`)
	}
	ended := func() int {
		return count(t, conn, `SELECT count(*) FROM order_events WHERE subscription_id IS NOT NULL AND topic = 'subscription.access_ended'`)
	}
	cfg := worker.Config{Workers: 1, Batch: 4, Poll: 20 * time.Millisecond, MaxAttempts: 3,
		BaseBackoff: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond}
	var failures atomic.Int64
	opts := worker.SweepOptions{OnSweep: func(o worker.SweepOutcome) {
		if o == worker.SweepFailed {
			failures.Add(1)
		}
	}}
	owners, _, _ := live(t, s)
	q := worker.NewSweeperWith(s.SweepQueue(), s, owners, cfg, nil, slog.New(slog.DiscardHandler), opts)
	qctx, stopQueue := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = q.Run(qctx) }()

	// Three rounds of three attempts: each round uses the attempts again.
	waitFor(t, "three rounds of failed attempts", func() bool { return failures.Load() >= 9 })
	stopQueue()
	<-done
	if n := items(); n != 1 {
		t.Fatalf("%d open sweep_failing items after %d failed attempts, want 1", n, failures.Load())
	}
	if n := count(t, conn, `SELECT count(*) FROM subscription_sweeps WHERE state = 'pending' AND attempts < 3`); n != 1 {
		t.Errorf("%d sweeps pending within their attempts, want the one, put back", n)
	}
	if n := ended(); n != 0 {
		t.Fatalf("access ended %d times without a plan", n)
	}
	var detail string
	if err := conn.QueryRow(ctx, `SELECT detail FROM reconciliation_items WHERE kind = 'sweep_failing'`).Scan(&detail); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"failed 3 times", `plan "pro-yearly", which is not configured`, "Its access has not ended"} {
		if !strings.Contains(detail, want) {
			t.Errorf("the item's detail %q does not say %q", detail, want)
		}
	}

	// The plan configured again (a store that knows it): the sweep ends the
	// access, once, and opens nothing more.
	s2, err := storage.Open(ctx, url, storage.Options{MaxConns: 4, Plans: fulfillment.Plans{subPlan.ID: subPlan, yearPlan.ID: yearPlan}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s2.Close)
	owners2, _, _ := live(t, s2)
	runQueue(t, worker.NewSweeper(s2.SweepQueue(), s2, owners2, cfg, nil, slog.New(slog.DiscardHandler)))
	waitFor(t, "the access ended", func() bool { return ended() == 1 })
	time.Sleep(200 * time.Millisecond) // anything done twice would show by now
	if n := ended(); n != 1 {
		t.Errorf("access ended %d times, want once", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM subscriptions WHERE state = 'expired' AND access_ended_at IS NOT NULL`); n != 1 {
		t.Errorf("%d subscriptions expired with their access ended, want 1", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM subscription_sweeps WHERE state = 'done'`); n != 1 {
		t.Errorf("%d sweeps done, want 1", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM reconciliation_items`); n != 1 {
		t.Errorf("%d items in all, want the sweep_failing one, left to a person", n)
	}
}

// Migration 046 puts back the sweeps the previous schema failed, and
// rolls back only while no sweep_failing item exists.
func TestMigration046SweepFailing(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	pay := fulfillment.SubscriptionEvent{Kind: fulfillment.SubRenewalPaid, OccurredAt: time.Now().AddDate(-2, 0, 0), InvoiceID: "inv_1"}
	if _, _, err := s.SubscriptionApply(ctx, subRef, pay, "evt_1", subPlan); err != nil {
		t.Fatal(err)
	}
	m, v := migratedBefore(t, conn, "_sweep_failing.sql")
	// As the previous schema left a sweep past its attempts.
	if _, err := conn.Exec(ctx, `UPDATE subscription_sweeps SET state = 'failed', attempts = 200, processed_at = now(),
		next_attempt_at = now() + interval '1 hour', last_error = 'failing'`); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, v); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, `SELECT count(*) FROM subscription_sweeps
		WHERE state = 'pending' AND attempts = 0 AND processed_at IS NULL AND next_attempt_at <= now()`); n != 1 {
		t.Fatalf("%d sweeps put back and due, want the failed one", n)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO reconciliation_items (kind, org_id, environment, subscription_id, detail, dedupe_key)
		SELECT 'sweep_failing', org_id, environment, id, 'failing', 'sweep|' || id || '|1' FROM subscriptions`); err != nil {
		t.Fatal(err)
	}
	kindRollback(t, conn, m, v, "sweep_failing")
}
