package storage_test

import (
	"context"
	"encoding/json"
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
	return batchesUntilShort(t, batch, func() (int, int, error) {
		return s.OpenOverdueFulfillments(context.Background(), now, testSLA, batch)
	})
}

// batchesUntilShort runs a housekeeping task's batch until one goes through
// fewer rows than batch, as the housekeeper does, and returns what they did
// in all (run: the rows a batch went through, and what it did).
func batchesUntilShort(t *testing.T, batch int, run func() (seen, done int, err error)) int {
	t.Helper()
	total := 0
	for {
		seen, n, err := run()
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if seen < batch {
			return total
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
		return purgeAll(t, s, now, retention, 2)
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
				seen, k, err := s.PurgeRawBodies(ctx, now, 30*24*time.Hour, 3)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				purged += k
				mu.Unlock()
				if seen < 3 {
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

// The purge walks the events from a cursor, and an event it could not
// purge when it went past (pending, or locked by a transaction) is not
// left behind for good: it loses its body in a later run, once settled or
// released. Nor does it hold up the events after it: they lose theirs in
// the same run, whatever the batch.
func TestHousekeepingPurgeComesBack(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	const retention = 30 * 24 * time.Hour
	for i := 1; i <= 8; i++ {
		id := fmt.Sprintf("e%d", i)
		if _, err := s.InboxInsert(ctx, confirmedEvent(id, "m-none"), []byte(`{"id":"`+id+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, 8)
	// e2 is replayed (pending again), e3 is locked by a transaction.
	if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: inboxID(t, conn, "e2"), Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	holderConn, err := pgx.ConnectConfig(ctx, conn.Config().Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holderConn.Close(ctx) }()
	holder, err := holderConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT 1 FROM inbox_events WHERE event_id = 'e3' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	purge := func(now time.Time) int {
		t.Helper()
		return purgeAll(t, s, now, retention, 2)
	}
	withBody := func() []string {
		t.Helper()
		rows, err := conn.Query(ctx, `SELECT event_id FROM inbox_events WHERE raw_body IS NOT NULL ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	past := time.Now().Add(retention + time.Hour)
	if n := purge(past); n != 6 || !slices.Equal(withBody(), []string{"e2", "e3"}) {
		t.Fatalf("with e2 pending and e3 locked: %d purged, bodies left %v; want 6, [e2 e3]", n, withBody())
	}
	for range 3 {
		if n := purge(past.Add(time.Hour)); n != 0 {
			t.Fatalf("e2 still pending and e3 locked: a run purged %d, want none", n)
		}
	}
	// Later events lose theirs too, past the held ones.
	if _, err := s.InboxInsert(ctx, confirmedEvent("e9", "m-none"), []byte(`{"id":"e9"}`)); err != nil {
		t.Fatal(err)
	}
	processAll(t, s, 2) // e2, still pending, is claimed with e9
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := purge(past.Add(2 * time.Hour)); n != 3 || len(withBody()) != 0 {
		t.Errorf("e2 settled, e3 released, e9 stored: %d purged, bodies left %v; want 3 and none", n, withBody())
	}
}

// planRows is how many rows of inbox_events a plan (EXPLAIN's JSON, a
// node and its children) read: the rows each of its nodes on the table
// returned or removed by a filter, in all its loops.
func planRows(node map[string]any) float64 {
	n := 0.0
	if node["Relation Name"] == "inbox_events" {
		f := func(key string) float64 { v, _ := node[key].(float64); return v }
		n = (f("Actual Rows") + f("Rows Removed by Filter") + f("Rows Removed by Index Recheck")) * f("Actual Loops")
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		if child, ok := c.(map[string]any); ok {
			n += planRows(child)
		}
	}
	return n
}

// A purge never reads the history it purged: past a purged history of
// 5,000 events, a batch that purges three new ones reads them and little
// else, and one with nothing to purge reads nothing. (A batch that walked
// the history, or scanned the table, would read 5,000 rows at least.)
func TestHousekeepingPurgeSkipsHistory(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	const retention = 30 * 24 * time.Hour
	const history = 5000
	if _, err := conn.Exec(ctx, `
		INSERT INTO inbox_events (provider, endpoint_id, org_id, environment, event_id, event_type, kind, test_mode,
			received_at, raw_body, state, decision, processed_at)
		SELECT 'yolfi', 'yolfi-live', 'org_a', 'live', 'hist-' || g, 'payment.confirmed', 'payment_confirmed', false,
			now() - interval '90 days' + g * interval '1 second', '{}', 'processed', 'fulfilled', now()
		FROM generate_series(1, $1::int) g`, history); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(retention + time.Hour)
	if purged := purgeAll(t, s, past, retention, 1000); purged != history {
		t.Fatalf("the history: %d purged, want %d", purged, history)
	}
	for _, id := range []string{"e1", "e2", "e3"} {
		if _, err := s.InboxInsert(ctx, confirmedEvent(id, "m-none"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, 3)
	if _, err := conn.Exec(ctx, `ANALYZE inbox_events`); err != nil {
		t.Fatal(err)
	}

	// batch runs one batch of the purge at now, returning the rows of
	// inbox_events it read and the bodies it purged.
	batch := func(now time.Time) (read float64, purged int) {
		t.Helper()
		var raw []byte
		if err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+storage.PurgeRawBodiesSQL,
			now, retention, 1000).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var plan []struct {
			Plan map[string]any `json:"Plan"`
		}
		if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
			t.Fatalf("reading the plan %s: %v", raw, err)
		}
		return planRows(plan[0].Plan), count(t, conn, `SELECT count(*) FROM inbox_events WHERE raw_body IS NULL`) - history
	}
	// Each new event is read by the walk, by the lock and by the update
	// (three reads), and the update returns it (a fourth).
	if read, n := batch(past); n != 3 || read > 4*3 {
		t.Errorf("a batch past %d purged events: %d purged, read %.0f rows of inbox_events; want 3 purged, at most 12 read",
			history, n, read)
	}
	if read, n := batch(past.Add(time.Hour)); n != 3 || read != 0 {
		t.Errorf("a batch with nothing to purge read %.0f rows of inbox_events (%d purged in all); want none", read, n)
	}
}

// The migration of the purge's cursor (041) starts the cursor at the last
// purged event before the first one with a body, so that the walk neither
// reads the purged history nor misses an event; down, it gives the index
// back. Purged out of order before (e4, by the index's received_at), an
// event keeps its purge time.
func TestMigrationPurgeCursor(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	cursor := func() (last int64, held []int64) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT last_id, held_ids FROM inbox_purge_cursor`).Scan(&last, &held); err != nil {
			t.Fatal(err)
		}
		return last, held
	}
	if last, held := cursor(); last != 0 || len(held) != 0 {
		t.Fatalf("on an empty inbox the cursor is at %d, holding %v; want 0 and none", last, held)
	}
	// The events are processed at the latest version (processing reads
	// what later migrations add), then the database goes back.
	for i := 1; i <= 5; i++ {
		id := fmt.Sprintf("e%d", i)
		if _, err := s.InboxInsert(ctx, confirmedEvent(id, "m-none"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, 5)
	m, v := migrator(t, conn, "_purge_cursor.sql")
	index := func() int {
		return count(t, conn, `SELECT count(*) FROM pg_indexes WHERE indexname = 'inbox_events_raw_body_idx'`)
	}
	if err := m.MigrateTo(ctx, v-1); err != nil {
		t.Fatal(err)
	}
	if index() != 1 || count(t, conn, `SELECT count(*) FROM pg_tables WHERE tablename = 'inbox_purge_cursor'`) != 0 {
		t.Fatalf("at version %d: the index or the cursor's table is not as before", v-1)
	}
	if _, err := conn.Exec(ctx, `UPDATE inbox_events SET raw_body = NULL, raw_body_purged_at = '2026-01-02T03:04:05Z'
		WHERE event_id IN ('e1', 'e2', 'e4')`); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, v); err != nil {
		t.Fatal(err)
	}
	if last, held := cursor(); last != inboxID(t, conn, "e2") || len(held) != 0 || index() != 0 {
		t.Errorf("migrated: the cursor at %d holding %v, %d index; want e2's id %d, none held, no index",
			last, held, index(), inboxID(t, conn, "e2"))
	}
	if _, n, err := s.PurgeRawBodies(ctx, time.Now().Add(31*24*time.Hour), 30*24*time.Hour, 10); err != nil || n != 2 {
		t.Errorf("purged %d (%v), want 2: e3 and e5", n, err)
	}
	if n := count(t, conn, `SELECT count(*) FROM inbox_events WHERE raw_body_purged_at = '2026-01-02T03:04:05Z'`); n != 3 {
		t.Errorf("%d events keep their earlier purge time, want 3", n)
	}
	if err := m.MigrateTo(ctx, v-1); err != nil {
		t.Fatal(err)
	}
	if index() != 1 {
		t.Errorf("migrated down: %d index, want it back", index())
	}
	if err := m.MigrateTo(ctx, int32(len(m.Migrations))); err != nil {
		t.Fatal(err)
	}
	if last, _ := cursor(); last != inboxID(t, conn, "e5") {
		t.Errorf("every body purged: the cursor at %d, want the last event's id %d", last, inboxID(t, conn, "e5"))
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

// purgeAll runs the purge at now in batches of batch until one goes
// through fewer events than that, as the housekeeper does, and returns how
// many bodies it purged.
func purgeAll(t *testing.T, s *storage.Store, now time.Time, retention time.Duration, batch int) int {
	t.Helper()
	return batchesUntilShort(t, batch, func() (int, int, error) {
		return s.PurgeRawBodies(context.Background(), now, retention, batch)
	})
}
