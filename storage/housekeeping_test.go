package storage_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// Housekeeping at a clock the tests set: each test counts what the tasks
// left (items, bodies), not a status.

const testSLA = time.Hour

// paidItems counts the paid_not_fulfilled items, in all and of order id
// ("" for every order).
func paidItems(t *testing.T, conn *pgx.Conn, orderID string) int {
	t.Helper()
	if orderID == "" {
		return count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'paid_not_fulfilled'`)
	}
	return count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'paid_not_fulfilled' AND order_id = $1`, orderID)
}

// payOrder stores a payment of order merchantID (30 USDT) under event id
// and processes it, returning the decision.
func payOrder(t *testing.T, s *storage.Store, id, merchantID string) string {
	t.Helper()
	if _, err := s.InboxInsert(context.Background(), confirmedEvent(id, merchantID), []byte(`{"id":"`+id+`"}`)); err != nil {
		t.Fatal(err)
	}
	return processAll(t, s, 1)
}

// openOverdue runs the SLA task's batches at now until one comes back
// short, and returns the items opened.
func openOverdue(t *testing.T, s *storage.Store, now time.Time, batch int) int {
	t.Helper()
	opened := 0
	for {
		seen, n, err := s.OpenOverdueFulfillments(context.Background(), now, testSLA, batch)
		if err != nil {
			t.Fatal(err)
		}
		opened += n
		if seen < batch {
			return opened
		}
	}
}

// A paid order waiting for its external lines gets no item within the SLA,
// one once past it, and no second however often the task runs; a fulfilled
// order and an unpaid one never get one.
func TestHousekeepingFulfillmentSLA(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	waiting := externalOrder(t, s, "m-ext")
	if got := payOrder(t, s, "e1", "m-ext"); got != "fulfilled" {
		t.Fatalf("decision = %s", got)
	}
	licensed, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-lic"))
	if err != nil {
		t.Fatal(err)
	}
	if got := payOrder(t, s, "e2", "m-lic"); got != "fulfilled" {
		t.Fatalf("decision = %s", got)
	}
	unpaid, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-unpaid"))
	if err != nil {
		t.Fatal(err)
	}

	if n := openOverdue(t, s, time.Now().Add(testSLA/2), 10); n != 0 || paidItems(t, conn, "") != 0 {
		t.Fatalf("within the SLA: %d items opened, %d exist; want none", n, paidItems(t, conn, ""))
	}
	past := time.Now().Add(2 * testSLA)
	if n := openOverdue(t, s, past, 10); n != 1 {
		t.Fatalf("past the SLA: %d items opened, want 1", n)
	}
	for range 3 {
		if n := openOverdue(t, s, past.Add(time.Hour), 10); n != 0 {
			t.Fatalf("a later run opened %d items, want none", n)
		}
	}
	if got := paidItems(t, conn, waiting); got != 1 {
		t.Errorf("the waiting order has %d items, want 1", got)
	}
	if got := paidItems(t, conn, licensed.ID) + paidItems(t, conn, unpaid.ID); got != 0 {
		t.Errorf("the fulfilled and the unpaid orders have %d items, want none", got)
	}
	var key, attempt, detail string
	err = conn.QueryRow(ctx, `SELECT dedupe_key, attempt_ref, detail FROM reconciliation_items
		WHERE kind = 'paid_not_fulfilled'`).Scan(&key, &attempt, &detail)
	if err != nil {
		t.Fatal(err)
	}
	if want := fulfillment.ItemKey(fulfillment.ReconPaidNotFulfilled, fulfillment.ItemSubject{OrderID: waiting}); key != want {
		t.Errorf("item key %q, want %q", key, want)
	}
	if attempt != "inv_e1" || detail == "" {
		t.Errorf("item attempt_ref %q, detail %q", attempt, detail)
	}

	// Delivered at last: fulfilled, and still the one item.
	deliverNext(t, s, "licenses", fulfillment.OutcomeDelivered)
	deliverNext(t, s, "shipping", fulfillment.OutcomeDelivered)
	if n := openOverdue(t, s, past.Add(2*time.Hour), 10); n != 0 || paidItems(t, conn, "") != 1 {
		t.Errorf("after fulfillment: %d opened, %d items; want 0 and 1", n, paidItems(t, conn, ""))
	}
}

// The SQL applies fulfillment.PastFulfillmentSLA: for every state, paid or
// not, just within or just past the SLA, an item exists exactly when the
// rule says so.
func TestHousekeepingSLARule(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	now := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	states := []fulfillment.State{
		fulfillment.StatePendingPayment, fulfillment.StatePaid, fulfillment.StateFulfilling, fulfillment.StateFulfilled,
		fulfillment.StateOnHold, fulfillment.StateCancelled, fulfillment.StateExpired, fulfillment.StateRefunded,
	}
	paidAts := map[string]time.Time{
		"never":  {},
		"within": now.Add(-testSLA + time.Minute),
		"past":   now.Add(-testSLA - time.Minute),
	}
	want := map[string]bool{}
	for _, st := range states {
		for name, paidAt := range paidAts {
			o, _, err := s.OrderCreate(ctx, spec(t, "org_a", fmt.Sprintf("m-%s-%s", st, name)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx, `UPDATE orders SET state = $2, paid_at = $3 WHERE id = $1`,
				o.ID, st, map[bool]any{true: nil, false: paidAt}[paidAt.IsZero()]); err != nil {
				t.Fatal(err)
			}
			want[o.ID] = fulfillment.PastFulfillmentSLA(st, paidAt, now, testSLA)
		}
	}
	openOverdue(t, s, now, 2)
	wanted := 0
	for id, w := range want {
		if got := paidItems(t, conn, id); got != map[bool]int{true: 1, false: 0}[w] {
			t.Errorf("order %s: %d items, the rule says %v", id, got, w)
		}
		if w {
			wanted++
		}
	}
	if wanted != 2 { // paid and fulfilling, past the SLA
		t.Errorf("the rule wants %d items, want 2", wanted)
	}
}

// Two housekeepers, each a leased queue under its own live owner, run every
// few milliseconds over orders past the SLA, while bare batches race them:
// one item per order, however many runs.
func TestHousekeepersRace(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	const n = 20
	for i := range n {
		externalOrder(t, s, fmt.Sprintf("m-%d", i))
		if got := payOrder(t, s, fmt.Sprintf("e%d", i), fmt.Sprintf("m-%d", i)); got != "fulfilled" {
			t.Fatalf("decision = %s", got)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := func() time.Time { return time.Now().Add(2 * testSLA) }
	var wg sync.WaitGroup
	log := slog.New(slog.DiscardHandler)
	for range 2 {
		live := s.NewLiveness()
		wg.Go(func() { _ = live.Run(ctx) })
		q := worker.NewHousekeeper(s.HousekeepingQueue(), s, live, worker.HousekeepingConfig{Interval: 5 * time.Millisecond, FulfillmentSLA: testSLA, Batch: 3}, clock, log)
		wg.Go(func() { _ = q.Run(ctx) })
	}
	start := make(chan struct{})
	var mu sync.Mutex
	bare := 0
	// The bare batches stop once every item is open: six tight loops can
	// starve the housekeepers' own runs on a busy machine.
	bareCtx, stopBare := context.WithCancel(ctx)
	defer stopBare()
	var bareWG sync.WaitGroup
	for range 6 {
		bareWG.Go(func() {
			<-start
			for bareCtx.Err() == nil {
				_, k, err := s.OpenOverdueFulfillments(bareCtx, clock(), testSLA, 4)
				if err != nil && bareCtx.Err() == nil {
					t.Error(err)
					return
				}
				mu.Lock()
				bare += k
				mu.Unlock()
			}
		})
	}
	close(start)
	deadline := time.Now().Add(30 * time.Second)
	for paidItems(t, conn, "") < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stopBare()
	bareWG.Wait()
	// The housekeepers keep running a while past the last item, at least
	// until one of their runs completed.
	runs := 0
	for deadline := time.Now().Add(10 * time.Second); runs == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		runs = count(t, conn, `SELECT count(*) FROM housekeeping_tasks WHERE last_run_at IS NOT NULL`)
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	wg.Wait()
	if got := paidItems(t, conn, ""); got != n {
		t.Errorf("%d paid_not_fulfilled items, want %d (one per order)", got, n)
	}
	if got := count(t, conn, `SELECT count(DISTINCT order_id) FROM reconciliation_items WHERE kind = 'paid_not_fulfilled'`); got != n {
		t.Errorf("items about %d orders, want %d", got, n)
	}
	if bare > n {
		t.Errorf("the bare batches report %d items opened, more than the %d orders", bare, n)
	}
	if runs == 0 && count(t, conn, `SELECT count(*) FROM housekeeping_tasks WHERE last_run_at IS NOT NULL`) == 0 {
		t.Error("no housekeeping task ever completed a run")
	}
}

// eventRow is what an event keeps besides its raw body: every column, as
// JSON, but the body's two.
func eventRow(t *testing.T, conn *pgx.Conn, eventID string) string {
	t.Helper()
	var row string
	err := conn.QueryRow(context.Background(), `SELECT (to_jsonb(e) - 'raw_body' - 'raw_body_purged_at')::text
		FROM inbox_events e WHERE event_id = $1`, eventID).Scan(&row)
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// The purge drops the raw bodies of settled events past the retention, in
// batches, and nothing else: an event inside the retention keeps its body,
// a pending one keeps it whatever its age, a purged one keeps its
// normalized fields and decision (its order's timeline still shows it).
func TestHousekeepingPurgeRawBodies(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	const retention = 30 * 24 * time.Hour
	order, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-1"))
	if err != nil {
		t.Fatal(err)
	}
	// Two payments of the order, and one of an unknown order.
	for _, ev := range []fulfillment.ProviderEvent{confirmedEvent("e1", "m-1"), confirmedEvent("e2", "m-1"), confirmedEvent("e3", "m-none")} {
		if _, err := s.InboxInsert(ctx, ev, []byte(`{"id":"`+ev.EventID+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, 3)
	// Stored after the others were processed: pending.
	if _, err := s.InboxInsert(ctx, confirmedEvent("e4", "m-1"), []byte(`{"id":"e4"}`)); err != nil {
		t.Fatal(err)
	}
	before := map[string]string{}
	for _, id := range []string{"e1", "e2", "e3", "e4"} {
		before[id] = eventRow(t, conn, id)
	}
	timeline := func() []fulfillment.TimelineEvent {
		t.Helper()
		d, err := s.OrderDetail(ctx, order.ID)
		if err != nil {
			t.Fatal(err)
		}
		return d.Events
	}
	shown := timeline()
	if len(shown) != 2 || shown[0].EventID != "e1" || shown[0].Decision != "fulfilled" {
		t.Fatalf("the order's timeline = %+v", shown)
	}
	bodies := func() int { return count(t, conn, `SELECT count(*) FROM inbox_events WHERE raw_body IS NOT NULL`) }

	purge := func(now time.Time) int {
		t.Helper()
		total := 0
		for {
			n, err := s.PurgeRawBodies(ctx, now, retention, 2)
			if err != nil {
				t.Fatal(err)
			}
			total += n
			if n < 2 {
				return total
			}
		}
	}
	if n := purge(time.Now().Add(retention - time.Hour)); n != 0 || bodies() != 4 {
		t.Fatalf("inside the retention: %d purged, %d bodies left; want 0 and 4", n, bodies())
	}
	if n := purge(time.Now().Add(retention + time.Hour)); n != 3 {
		t.Fatalf("past the retention: %d purged, want 3 (the pending event keeps its body)", n)
	}
	if n := purge(time.Now().Add(retention + 2*time.Hour)); n != 0 {
		t.Fatalf("again: %d purged, want 0", n)
	}
	if got := count(t, conn, `SELECT count(*) FROM inbox_events WHERE raw_body IS NULL AND raw_body_purged_at IS NOT NULL
		AND state <> 'pending'`); got != 3 {
		t.Errorf("%d settled events purged with the time recorded, want 3", got)
	}
	if got := count(t, conn, `SELECT count(*) FROM inbox_events WHERE event_id = 'e4' AND raw_body = '{"id":"e4"}'`); got != 1 {
		t.Error("the pending event lost its body")
	}
	for id, row := range before {
		if got := eventRow(t, conn, id); got != row {
			t.Errorf("event %s changed:\nbefore %s\nafter  %s", id, row, got)
		}
	}
	// Read as the events API reads it, with its body: purged, same decision.
	var e1 int64
	if err := conn.QueryRow(ctx, `SELECT id FROM inbox_events WHERE event_id = 'e1'`).Scan(&e1); err != nil {
		t.Fatal(err)
	}
	if se, err := s.EventGet(ctx, e1, true); err != nil || !se.RawBodyPurged || se.RawBody != nil || se.Decision != "fulfilled" {
		t.Errorf("EventGet(e1) = purged %v, body %q, decision %q, %v; want purged, no body, fulfilled",
			se.RawBodyPurged, se.RawBody, se.Decision, err)
	}
	if got := timeline(); !slices.Equal(got, shown) {
		t.Errorf("the order's timeline after the purge = %+v, before %+v", got, shown)
	}

	// Processed at last, the fourth event's body goes at the next purge.
	processAll(t, s, 1)
	if n := purge(time.Now().Add(retention + time.Hour)); n != 1 || bodies() != 0 {
		t.Errorf("after processing: %d purged, %d bodies left; want 1 and 0", n, bodies())
	}
}

// Purges racing each other purge each body once.
func TestHousekeepingPurgesRace(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	const n = 50
	for i := range n {
		if _, err := s.InboxInsert(ctx, confirmedEvent(fmt.Sprintf("e%d", i), "m-none"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, n)
	now := time.Now().Add(31 * 24 * time.Hour)
	var wg sync.WaitGroup
	var mu sync.Mutex
	purged := 0
	start := make(chan struct{})
	for range 6 {
		wg.Go(func() {
			<-start
			for {
				k, err := s.PurgeRawBodies(ctx, now, 30*24*time.Hour, 3)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				purged += k
				mu.Unlock()
				if k == 0 {
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if purged != n || count(t, conn, `SELECT count(*) FROM inbox_events WHERE raw_body IS NULL`) != n {
		t.Errorf("%d purges reported, %d bodies purged; want %d each", purged,
			count(t, conn, `SELECT count(*) FROM inbox_events WHERE raw_body IS NULL`), n)
	}
}

// Migration 022 renames the SLA task to the one spelling, and back: the
// task keeps its schedule and its last run.
func TestMigration022OneSpelling(t *testing.T) {
	t.Parallel()
	_, conn := newStore(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `UPDATE housekeeping_tasks SET last_run_at = '2026-01-02T03:04:05Z', last_count = 7`); err != nil {
		t.Fatal(err)
	}
	m, err := migrate.NewMigrator(ctx, conn, "schema_version")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(storage.Migrations()); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		version int32
		task    string
	}{{21, "fulfilment_sla"}, {22, string(fulfillment.TaskFulfillmentSLA)}} {
		if err := m.MigrateTo(ctx, step.version); err != nil {
			t.Fatalf("migrating to %d: %v", step.version, err)
		}
		if n := count(t, conn, `SELECT count(*) FROM housekeeping_tasks WHERE task = $1 AND last_count = 7`, step.task); n != 1 {
			t.Errorf("at version %d: %d tasks named %s with their last run, want 1", step.version, n, step.task)
		}
		if n := count(t, conn, `SELECT count(*) FROM housekeeping_tasks`); n != 2 {
			t.Errorf("at version %d: %d tasks, want 2", step.version, n)
		}
	}
	if _, err := conn.Exec(ctx, `INSERT INTO housekeeping_tasks (task) VALUES ('fulfilment_sla')`); err == nil {
		t.Error("version 22 took a task of the old spelling")
	}
}
