package storage_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// newDecidingStore is newStore deciding events on receipt.
func newDecidingStore(t *testing.T) (*storage.Store, *pgx.Conn) {
	t.Helper()
	s, conn, _ := newDecidingStoreAt(t)
	return s, conn
}

// newDecidingStoreAt is newDecidingStore, with its database's URL.
func newDecidingStoreAt(t *testing.T) (*storage.Store, *pgx.Conn, string) {
	t.Helper()
	return openStore(t, storage.Options{MaxConns: 30, DecideOnReceipt: true})
}

// decidingStoreWithHolder is newDecidingStoreAt with an order for each
// merchant order id of orders, and a transaction begun on a connection
// of its own (rolled back at the end unless committed), to hold locks.
func decidingStoreWithHolder(t *testing.T, orders ...string) (*storage.Store, *pgx.Conn, pgx.Tx) {
	t.Helper()
	s, conn, url := newDecidingStoreAt(t)
	ctx := context.Background()
	for _, m := range orders {
		if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", m)); err != nil {
			t.Fatal(err)
		}
	}
	return s, conn, holderTx(ctx, t, url)
}

// holderTx begins a transaction on a connection of its own to the
// database at url; both end with the test (the transaction rolled back
// unless committed).
func holderTx(ctx context.Context, t *testing.T, url string) pgx.Tx {
	t.Helper()
	holder, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Close(context.Background()) })
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// receiptBatches is what s's collector says of its group commits, by
// outcome (fulfillment_inbox_receipt_batches_total).
func receiptBatches(t *testing.T, s *storage.Store) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s.MetricsCollector(0))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range families {
		if f.GetName() != "fulfillment_inbox_receipt_batches_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			got = append(got, fmt.Sprintf("%s=%v", m.GetLabel()[0].GetValue(), m.GetCounter().GetValue()))
		}
	}
	slices.Sort(got)
	return strings.Join(got, " ")
}

// Ten orders' confirmations, each delivered five times at once: every
// event is stored once and every order is granted once. A batch that met
// another batch's lock on its order past the lock wait (a slow machine)
// was stored queued instead: it is processed, and the counts are taken
// after.
func TestDecidedOnReceiptGrantsOnce(t *testing.T) {
	t.Parallel()
	s, conn := newDecidingStore(t)
	ctx := context.Background()
	const orders, deliveries = 10, 5
	for i := range orders {
		if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", fmt.Sprintf("m-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	receipts := make([]fulfillment.InboxReceipt, orders*deliveries)
	errs := make([]error, len(receipts))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range receipts {
		wg.Go(func() {
			<-start
			o := i % orders
			receipts[i], errs[i] = s.InboxInsert(ctx, confirmedEvent(fmt.Sprintf("evt_%d", o), fmt.Sprintf("m-%d", o)), []byte(`{}`))
		})
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i, r := range receipts {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !r.Duplicate {
			fresh++
			if r.State != fulfillment.InboxProcessed && r.State != fulfillment.InboxPending {
				t.Errorf("receipt %d: state %s; want the event acknowledged processed, or pending (queued)", i, r.State)
			}
		}
	}
	if fresh != orders {
		t.Errorf("%d receipts of a new event, want %d", fresh, orders)
	}
	if queued := count(t, conn, "SELECT count(*) FROM inbox_work"); queued > 0 {
		t.Logf("%d of %d events queued (their batch met a lock)", queued, orders)
		processAll(t, s, queued)
	}
	wantCounts(t, conn, []countCheck{
		{"events stored", "SELECT count(*) FROM inbox_events", orders},
		{"events decided fulfilled on their first attempt",
			"SELECT count(*) FROM inbox_events WHERE state = 'processed' AND decision = 'fulfilled' AND attempts = 1 AND order_id IS NOT NULL", orders},
		{"events still queued", "SELECT count(*) FROM inbox_work", 0},
		{"licenses", "SELECT count(*) FROM entitlements", 2 * orders},
		{"credits", "SELECT count(*) FROM ledger_entries", orders},
		{"orders fulfilled", "SELECT count(*) FROM orders WHERE state = 'fulfilled'", orders},
		{"order.fulfilled events", "SELECT count(*) FROM order_events WHERE topic = 'order.fulfilled'", orders},
	})
}

// A batch holding a redelivery: the events stored before are left out and
// the others decided, in the same flush; the redelivery grants nothing.
func TestDecidedBatchWithRedelivery(t *testing.T) {
	t.Parallel()
	s, conn := newDecidingStore(t)
	ctx := context.Background()
	for _, m := range []string{"m-a", "m-b"} {
		if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", m)); err != nil {
			t.Fatal(err)
		}
	}
	a, b := confirmedEvent("evt_a", "m-a"), confirmedEvent("evt_b", "m-b")
	first, err := s.InboxInsert(ctx, a, []byte(`{}`))
	if err != nil || first.State != fulfillment.InboxProcessed {
		t.Fatalf("first delivery: %+v, %v; want processed", first, err)
	}
	if err := s.InboxInsertBatch(ctx, []fulfillment.ProviderEvent{a, b}); err != nil {
		t.Fatal(err)
	}
	if got := count(t, conn, "SELECT count(*) FROM inbox_events WHERE state = 'processed' AND decision = 'fulfilled'"); got != 2 {
		t.Errorf("%d events decided fulfilled, want 2", got)
	}
	// The redelivery was found before anything was inserted, in one try:
	// the batch drew an id for each of its two events, in key order, and
	// b has the second. (A try rolled back on a's conflict would have
	// drawn two more, never given back.)
	if gap := count(t, conn, `SELECT (SELECT id FROM inbox_events WHERE event_id = 'evt_b') - (SELECT id FROM inbox_events WHERE event_id = 'evt_a')`); gap != 2 {
		t.Errorf("evt_b's id is evt_a's + %d; want + 2, the redelivery left out before the insert", gap)
	}
	if q, l := count(t, conn, "SELECT count(*) FROM inbox_work"), count(t, conn, "SELECT count(*) FROM entitlements"); q != 0 || l != 4 {
		t.Errorf("%d events queued, %d licenses; want none queued, 4 licenses (2 per order)", q, l)
	}
	if got, want := receiptBatches(t, s), "decided=2 failed=0 locked=0 redelivered=0"; got != want {
		t.Errorf("group commits: %s, want %s", got, want)
	}
	// A batch of a redelivery alone stores nothing: it is not counted.
	if again, err := s.InboxInsert(ctx, b, []byte(`{}`)); err != nil || !again.Duplicate {
		t.Fatalf("redelivery of evt_b: %+v, %v; want a duplicate", again, err)
	}
	if got, want := receiptBatches(t, s), "decided=2 failed=0 locked=0 redelivered=0"; got != want {
		t.Errorf("group commits after a redelivery alone: %s, want %s", got, want)
	}
	// Delivered again alone: its receipt is the stored row's, a duplicate,
	// read by the batch's look-up.
	if r, err := s.InboxInsert(ctx, a, []byte(`{}`)); err != nil || !r.Duplicate || r.ID != first.ID || r.State != fulfillment.InboxProcessed {
		t.Errorf("third delivery: %+v, %v; want a duplicate of %+v", r, err, first)
	}
}

// A redelivery does not lock the order it names: with that order held
// locked by another transaction, a batch of the redelivery and a new event
// of another order is decided at once, not queued after the lock wait,
// and so is the redelivery alone.
func TestDecidedBatchDoesNotLockARedeliveredOrder(t *testing.T) {
	t.Parallel()
	s, conn, tx := decidingStoreWithHolder(t, "m-held", "m-free")
	ctx := context.Background()
	held := confirmedEvent("evt_held", "m-held")
	if first, err := s.InboxInsert(ctx, held, []byte(`{}`)); err != nil || first.State != fulfillment.InboxProcessed {
		t.Fatalf("first delivery: %+v, %v; want processed", first, err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1 FROM orders WHERE merchant_order_id = 'm-held' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	if err := s.InboxInsertBatch(ctx, []fulfillment.ProviderEvent{held, confirmedEvent("evt_free", "m-free")}); err != nil {
		t.Fatal(err)
	}
	if again, err := s.InboxInsert(ctx, held, []byte(`{}`)); err != nil || !again.Duplicate {
		t.Fatalf("redelivery alone: %+v, %v; want a duplicate", again, err)
	}
	if got, want := receiptBatches(t, s), "decided=2 failed=0 locked=0 redelivered=0"; got != want {
		t.Errorf("group commits: %s, want %s (a batch locked was one that waited for the redelivered order)", got, want)
	}
	if queued, granted := count(t, conn, "SELECT count(*) FROM inbox_work"), count(t, conn, "SELECT count(*) FROM entitlements"); queued != 0 || granted != 4 {
		t.Errorf("%d events queued, %d licenses; want none queued, 4 licenses (2 per order)", queued, granted)
	}
}

// An order held locked by another transaction past the wait: the batch
// naming it is stored queued, whole, and the inbox processor decides it
// once the lock is gone.
func TestDecidedOnReceiptQueuesWhatIsLocked(t *testing.T) {
	t.Parallel()
	s, conn, tx := decidingStoreWithHolder(t, "m-locked", "m-free")
	ctx := context.Background()
	if _, err := tx.Exec(ctx, "SELECT 1 FROM orders WHERE merchant_order_id = 'm-locked' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	evs := []fulfillment.ProviderEvent{confirmedEvent("evt_locked", "m-locked"), confirmedEvent("evt_free", "m-free")}
	if err := s.InboxInsertBatch(ctx, evs); err != nil {
		t.Fatal(err)
	}
	pending := "SELECT count(*) FROM inbox_events JOIN inbox_work USING (id) WHERE inbox_events.state = 'pending'"
	if queued, granted := count(t, conn, pending), count(t, conn, "SELECT count(*) FROM entitlements"); queued != 2 || granted != 0 {
		t.Fatalf("with the order locked: %d events queued, %d licenses; want both queued, nothing granted", queued, granted)
	}
	if got, want := receiptBatches(t, s), "decided=0 failed=0 locked=1 redelivered=0"; got != want {
		t.Errorf("group commits: %s, want %s", got, want)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 2); got != "fulfilled,fulfilled" {
		t.Errorf("decisions = %s, want fulfilled,fulfilled", got)
	}
	if got := count(t, conn, "SELECT count(*) FROM entitlements"); got != 4 {
		t.Errorf("%d licenses, want 4", got)
	}
}

// A payment decided unmatched as it is stored opens its item, and is
// queued again when its order is created.
func TestDecidedUnmatchedIsMatchedLater(t *testing.T) {
	t.Parallel()
	s, conn := newDecidingStore(t)
	ctx := context.Background()
	r, err := s.InboxInsert(ctx, confirmedEvent("evt_early", "m-late"), []byte(`{}`))
	if err != nil || r.State != fulfillment.InboxUnmatched {
		t.Fatalf("early payment: %+v, %v; want unmatched", r, err)
	}
	if got := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment' AND state = 'open'"); got != 1 {
		t.Fatalf("%d unmatched_payment items open, want 1", got)
	}
	if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-late")); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 1); got != "fulfilled" {
		t.Errorf("decision after the order came = %s, want fulfilled", got)
	}
	if l, open := count(t, conn, "SELECT count(*) FROM entitlements"),
		count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE state = 'open'"); l != 2 || open != 0 {
		t.Errorf("%d licenses, %d items open; want 2 licenses, the item resolved", l, open)
	}
}

// An event that another transaction stores while a decided batch holding
// it waits for that transaction's insert: the batch's insert finds it
// stored, the batch is rolled back and decided again without it, and
// nothing of the first try remains — its order is granted only when the
// other transaction's (queued) event is processed.
func TestDecidedBatchMeetsAnEventStoredMeanwhile(t *testing.T) {
	t.Parallel()
	s, conn, tx := decidingStoreWithHolder(t, "m-x", "m-y")
	s.SetDecideLockWait("30s") // so that the insert waits for the holder's commit, however slow the machine
	ctx := context.Background()
	x, y := confirmedEvent("evt_x", "m-x"), confirmedEvent("evt_y", "m-y")
	sql, args := storage.InboxInsertStatement(x, []byte(`{}`))
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.InboxInsertBatch(ctx, []fulfillment.ProviderEvent{x, y}) }()
	// The batch's insert waits for the holder's transaction (the look-up
	// before it could not see the uncommitted row).
	waitFor(t, "the batch's insert to wait for the holder", func() bool {
		return count(t, conn, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND wait_event = 'transactionid' AND datname = current_database()
				AND query LIKE '%INSERT INTO inbox_events%'`) == 1
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantCounts(t, conn, []countCheck{
		{"events stored", "SELECT count(*) FROM inbox_events", 2},
		{"evt_y decided fulfilled on receipt", "SELECT count(*) FROM inbox_events WHERE event_id = 'evt_y' AND decision = 'fulfilled'", 1},
		{"evt_x queued by the holder", "SELECT count(*) FROM inbox_events JOIN inbox_work USING (id) WHERE event_id = 'evt_x' AND inbox_events.state = 'pending'", 1},
		{"licenses of m-x", "SELECT count(*) FROM entitlements e JOIN orders o ON o.id = e.order_id WHERE o.merchant_order_id = 'm-x'", 0},
		{"licenses of m-y", "SELECT count(*) FROM entitlements e JOIN orders o ON o.id = e.order_id WHERE o.merchant_order_id = 'm-y'", 2},
	})
	if got, want := receiptBatches(t, s), "decided=1 failed=0 locked=0 redelivered=0"; got != want {
		t.Errorf("group commits: %s, want %s", got, want)
	}
	if got := processAll(t, s, 1); got != "fulfilled" {
		t.Errorf("the holder's event: %s, want fulfilled", got)
	}
	if got := count(t, conn, "SELECT count(*) FROM entitlements"); got != 4 {
		t.Errorf("%d licenses, want 4 (2 per order)", got)
	}
}

// A decided batch whose COMMIT ran but whose results could not be read
// back (a callback's failure after the commit, errCommittedUnread) stands
// decided: its events are answered as stored, not as refused or queued
// again, and each is decided and granted once; a redelivery then grants
// nothing more.
func TestDecidedBatchCommittedButUnreadStandsDecided(t *testing.T) {
	t.Parallel()
	s, conn, _ := decidingStoreWithHolder(t, "m-1", "m-2")
	ctx := context.Background()
	s.FailBatchResults(errors.New("results lost after the commit"))
	evs := []fulfillment.ProviderEvent{confirmedEvent("evt_1", "m-1"), confirmedEvent("evt_2", "m-2")}
	if err := s.InboxInsertBatch(ctx, evs); err != nil {
		t.Fatalf("a committed batch whose results were not read: %v; want its events answered as stored", err)
	}
	if got, want := receiptBatches(t, s), "decided=1 failed=0 locked=0 redelivered=0"; got != want {
		t.Errorf("group commits: %s, want %s", got, want)
	}
	s.FailBatchResults(nil)
	for _, ev := range evs {
		if again, err := s.InboxInsert(ctx, ev, []byte(`{}`)); err != nil || !again.Duplicate || again.State != fulfillment.InboxProcessed {
			t.Errorf("%s again: %+v, %v; want a duplicate of a processed event", ev.EventID, again, err)
		}
	}
	const decided = `SELECT count(*) FROM inbox_events WHERE state = 'processed' AND decision = 'fulfilled'`
	if stored, queued, granted := count(t, conn, decided), count(t, conn, "SELECT count(*) FROM inbox_work"),
		count(t, conn, "SELECT count(*) FROM entitlements"); stored != 2 || queued != 0 || granted != 4 {
		t.Errorf("%d events decided fulfilled, %d queued, %d licenses; want 2, none, 4 (2 per order)", stored, queued, granted)
	}
}

// The same for the inbox processor's batch: committed, its effects'
// results unread, it returns the outcomes it decided, and the event is
// processed once — its work row gone, so no claim takes it again.
func TestProcessedBatchCommittedButUnreadStandsProcessed(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t) // not deciding on receipt: the event is queued
	ctx := context.Background()
	insertPaidOrder(t, s, "evt_1")
	claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 5})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %v, %v; want the queued event", claims, err)
	}
	s.FailBatchResults(errors.New("results lost after the commit"))
	outs, err := s.InboxProcessEvents(ctx, []int64{claims[0].ID}, "w")
	if err != nil || len(outs) != 1 || outs[claims[0].ID].Decision != fulfillment.DecisionFulfilled {
		t.Fatalf("process = %v, %v; want the event's fulfilled outcome", outs, err)
	}
	s.FailBatchResults(nil)
	if again, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w2", Limit: 10, Lease: time.Minute, MaxAttempts: 5}); err != nil || len(again) != 0 {
		t.Errorf("claim after = %v, %v; want nothing left to process", again, err)
	}
	const processed = `SELECT count(*) FROM inbox_events WHERE state = 'processed' AND decision = 'fulfilled'`
	if stored, queued, granted := count(t, conn, processed), count(t, conn, "SELECT count(*) FROM inbox_work"),
		count(t, conn, "SELECT count(*) FROM entitlements"); stored != 1 || queued != 0 || granted != 2 {
		t.Errorf("%d events processed, %d work rows, %d licenses; want 1, none, 2", stored, queued, granted)
	}
}
