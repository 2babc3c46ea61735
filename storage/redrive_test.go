package storage_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// failedMessages stores n failed messages to crm of org_a, and returns
// their ids, oldest first.
func failedMessages(t *testing.T, conn *pgx.Conn, n int) []int64 {
	t.Helper()
	var ids []int64
	for i := range n {
		var id int64
		if err := conn.QueryRow(context.Background(), `INSERT INTO outbox_messages
			(destination_id, topic, idempotency_key, org_id, environment, required, payload, state, attempts, last_error)
			VALUES ('crm', 'order.fulfilled', $1, 'org_a', 'live', false, '{}', 'failed', 3, 'HTTP 503')
			RETURNING id`, "redrive-"+strconv.Itoa(i)).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

// A run applies its items in batches, skips an item no longer failed,
// and stops when cancelled: the items not applied stay as they were.
func TestRedriveBatchesSkipAndCancel(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	ids := failedMessages(t, conn, 5)
	f := fulfillment.RedriveFilter{Target: fulfillment.RedriveOutbox, OrgID: "org_a", State: "failed", DestinationID: "crm"}
	plan, err := s.RedrivePlan(ctx, f)
	if err != nil || plan.Matched != 5 || len(plan.Sample) != 5 || plan.Sample[0].ID != ids[0] {
		t.Fatalf("plan: %+v, %v", plan, err)
	}
	run, err := s.RedriveStart(ctx, f, "admin", "test")
	if err != nil || run.Total != 5 || run.State != fulfillment.RedriveRunning {
		t.Fatalf("start: %+v, %v", run, err)
	}
	// The oldest item is delivered meanwhile (by an earlier retry): skipped.
	if _, err := conn.Exec(ctx, `UPDATE outbox_messages SET state = 'delivered' WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	if found, err := s.RedriveStep(ctx, 2); !found || err != nil {
		t.Fatalf("step: %v, %v", found, err)
	}
	run, err = s.RedriveGet(ctx, run.ID)
	if err != nil || run.Applied != 1 || run.Skipped != 1 || run.State != fulfillment.RedriveRunning {
		t.Fatalf("after one batch: %+v, %v", run, err)
	}
	if run, err = s.RedriveCancel(ctx, run.ID, "admin"); err != nil || run.State != fulfillment.RedriveCancelled || run.CancelledBy != "admin" {
		t.Fatalf("cancel: %+v, %v", run, err)
	}
	if found, err := s.RedriveStep(ctx, 2); found || err != nil {
		t.Fatalf("a step after the cancel found a run: %v, %v", found, err)
	}
	var pending, failed int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'failed')
		FROM outbox_messages`).Scan(&pending, &failed); err != nil {
		t.Fatal(err)
	}
	if pending != 1 || failed != 3 {
		t.Fatalf("after the cancel: %d pending, %d failed; want 1 retried, 3 left failed", pending, failed)
	}
	if _, err := s.RedriveCancel(ctx, run.ID, "admin"); !errors.Is(err, fulfillment.ErrFailedPrecondition) {
		t.Fatalf("cancelling twice: %v, want ErrFailedPrecondition", err)
	}
	// The org may start another run now; it records the 3 still failed.
	run2, err := s.RedriveStart(ctx, f, "admin", "")
	if err != nil || run2.Total != 3 {
		t.Fatalf("second run: %+v, %v", run2, err)
	}
	for {
		found, err := s.RedriveStep(ctx, 2)
		if err != nil {
			t.Fatal(err)
		}
		if !found {
			break
		}
	}
	if run2, err = s.RedriveGet(ctx, run2.ID); err != nil || run2.State != fulfillment.RedriveDone || run2.Applied != 3 || run2.FinishedAt.IsZero() {
		t.Fatalf("second run: %+v, %v", run2, err)
	}
}

// Two runs started at once for one org: one starts, the other is refused
// by the database, and each item is recorded once.
func TestRedriveConcurrentStartsOneRun(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	failedMessages(t, conn, 20)
	f := fulfillment.RedriveFilter{Target: fulfillment.RedriveOutbox, OrgID: "org_a", State: "failed"}
	const n = 8
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, errs[i] = s.RedriveStart(ctx, f, "admin", "")
		})
	}
	close(start)
	wg.Wait()
	var ok int
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, fulfillment.ErrFailedPrecondition):
			t.Errorf("a refused start: %v, want ErrFailedPrecondition", err)
		}
	}
	var runs, items, distinct int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM redrive_runs), count(*), count(DISTINCT item_id) FROM redrive_items`).
		Scan(&runs, &items, &distinct); err != nil {
		t.Fatal(err)
	}
	if ok != 1 || runs != 1 || items != 20 || distinct != 20 {
		t.Fatalf("%d starts succeeded, %d runs, %d items (%d distinct); want 1, 1, 20, 20", ok, runs, items, distinct)
	}
}

// An events re-drive selects by provider and by when the events were
// received, and a run keeps that filter as it was given.
func TestRedrivePlanEventsByProviderAndTime(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	for i, p := range []fulfillment.Provider{fulfillment.ProviderYolfi, fulfillment.ProviderYolfi, fulfillment.ProviderTBank} {
		ev := fulfillment.ProviderEvent{Provider: p, EndpointID: string(p) + "-a", OrgID: "org_a", Environment: fulfillment.EnvLive,
			EventID: "evt_" + strconv.Itoa(i), Type: "payment.confirmed", Kind: fulfillment.EventPaymentConfirmed}
		if _, err := s.InboxInsert(ctx, ev, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, `UPDATE inbox_events SET state = 'processed',
		received_at = CASE event_id WHEN 'evt_0' THEN now() - interval '2 hours' ELSE received_at END`); err != nil {
		t.Fatal(err)
	}
	hourAgo := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	base := fulfillment.RedriveFilter{Target: fulfillment.RedriveEvents, OrgID: "org_a", State: "processed"}
	for _, tc := range []struct {
		name string
		f    func(*fulfillment.RedriveFilter)
		want int64
	}{
		{"every provider", func(*fulfillment.RedriveFilter) {}, 3},
		{"yolfi", func(f *fulfillment.RedriveFilter) { f.Provider = fulfillment.ProviderYolfi }, 2},
		{"tbank", func(f *fulfillment.RedriveFilter) { f.Provider = fulfillment.ProviderTBank }, 1},
		{"yolfi, the last hour", func(f *fulfillment.RedriveFilter) { f.Provider, f.ReceivedAfter = fulfillment.ProviderYolfi, hourAgo }, 1},
		{"before the last hour", func(f *fulfillment.RedriveFilter) { f.ReceivedBefore = hourAgo }, 1},
	} {
		f := base
		tc.f(&f)
		if err := f.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		plan, err := s.RedrivePlan(ctx, f)
		if err != nil || plan.Matched != tc.want {
			t.Errorf("%s: plan matched %d, %v; want %d", tc.name, plan.Matched, err, tc.want)
		}
	}
	f := base
	f.Provider, f.ReceivedAfter = fulfillment.ProviderYolfi, hourAgo
	run, err := s.RedriveStart(ctx, f, "admin", "")
	if err != nil || run.Total != 1 {
		t.Fatalf("start: %+v, %v", run, err)
	}
	got, err := s.RedriveGet(ctx, run.ID)
	if err != nil || got.Filter.Provider != f.Provider || !got.Filter.ReceivedAfter.Equal(hourAgo) || !got.Filter.ReceivedBefore.IsZero() {
		t.Errorf("the run's filter = %+v, %v; want %+v", got.Filter, err, f)
	}
}

// A cancel goes before the run's next batch and waits for the batch being
// applied within a bound. While a cancel holds the run's turn, no batch of
// the run starts; a cancel whose turn does not come (a batch held up for
// longer than the bound) says so and changes nothing.
func TestRedriveCancelTurn(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	failedMessages(t, conn, 3)
	f := fulfillment.RedriveFilter{Target: fulfillment.RedriveOutbox, OrgID: "org_a", State: "failed", DestinationID: "crm"}
	run, err := s.RedriveStart(ctx, f, "admin", "")
	if err != nil {
		t.Fatal(err)
	}
	// Another session holds the run's turn, as a waiting cancel does.
	turn, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = turn.Rollback(ctx) }()
	if _, err := turn.Exec(ctx, `SELECT pg_advisory_xact_lock(1380209238, ($1::bigint & 2147483647)::int)`, run.ID); err != nil {
		t.Fatal(err)
	}
	if found, err := s.RedriveStep(ctx, 2); found || err != nil {
		t.Errorf("a step while a cancel holds the run's turn: found %v, %v; want nothing applied", found, err)
	}
	if n := count(t, conn, `SELECT count(*) FROM redrive_items WHERE run_id = $1 AND state = 'pending'`, run.ID); n != 3 {
		t.Errorf("%d items pending after that step, want all 3", n)
	}
	// A cancel that cannot get the turn gives up after its bound.
	started := time.Now()
	if _, err := s.RedriveCancel(ctx, run.ID, "admin"); !errors.Is(err, fulfillment.ErrFailedPrecondition) {
		t.Errorf("a cancel kept waiting: %v, want FAILED_PRECONDITION saying to try again", err)
	}
	t.Logf("the cancel gave up after %v", time.Since(started).Round(time.Millisecond))
	if err := turn.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := s.RedriveGet(ctx, run.ID); err != nil || got.State != fulfillment.RedriveRunning {
		t.Errorf("after the refused cancel the run is %+v, %v; want running", got, err)
	}
	// Once the turn is free, the cancel comes before any further batch.
	if got, err := s.RedriveCancel(ctx, run.ID, "admin"); err != nil || got.State != fulfillment.RedriveCancelled || got.Applied != 0 {
		t.Errorf("cancel: %+v, %v; want cancelled with nothing applied", got, err)
	}
}
