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
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/tern/v2/migrate"
	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

func confirmedEvent(id, merchantOrderID string) fulfillment.ProviderEvent {
	return fulfillment.ProviderEvent{
		Provider: fulfillment.ProviderYolfi, EndpointID: "yolfi-live", OrgID: "org_a", Environment: fulfillment.EnvLive,
		EventID: id, Type: "payment.confirmed", Kind: fulfillment.EventPaymentConfirmed,
		Payment: fulfillment.PaymentInfo{
			AttemptRef: "inv_" + id, PaymentID: "pay_" + id, InvoiceID: "inv_" + id, MerchantOrderID: merchantOrderID,
			Amount: fulfillment.TokenAmount(decimal.RequireFromString("30"), "USDT", "TRON"),
		},
	}
}

func TestInboxInsertConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ev := confirmedEvent("evt_dup", "m-1")
	const n = 20
	receipts := make([]fulfillment.InboxReceipt, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			receipts[i], errs[i] = s.InboxInsert(context.Background(), ev, []byte(`{"id":"evt_dup"}`))
		}()
	}
	close(start)
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if receipts[i].ID != receipts[0].ID {
			t.Errorf("receipt %d names row %d, receipt 0 row %d", i, receipts[i].ID, receipts[0].ID)
		}
		if !receipts[i].Duplicate {
			fresh++
		}
	}
	if fresh != 1 {
		t.Errorf("%d inserts reported a new event, want 1", fresh)
	}
	if got := count(t, conn, "SELECT count(*) FROM inbox_events"); got != 1 {
		t.Errorf("inbox rows = %d, want 1", got)
	}
}

func TestInboxLeaseLost(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InboxInsert(ctx, confirmedEvent("evt_1", "m-1"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	a, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "worker-a", Limit: 10, Lease: 1500 * time.Millisecond, MaxAttempts: 10})
	if err != nil || len(a) != 1 {
		t.Fatalf("claim A = %v, %v", a, err)
	}
	if b, _ := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "worker-b", Limit: 10, Lease: time.Minute, MaxAttempts: 10}); len(b) != 0 {
		t.Fatalf("B claimed %v while A's lease held", b)
	}
	time.Sleep(1700 * time.Millisecond) // A's lease expires
	b, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "worker-b", Limit: 10, Lease: time.Minute, MaxAttempts: 10})
	if err != nil || len(b) != 1 || b[0].Attempts != 2 {
		t.Fatalf("claim B after expiry = %v, %v; want the event, attempt 2", b, err)
	}
	// A wakes up late: it can neither complete nor reschedule the event.
	if outs, err := s.InboxProcess(ctx, []int64{a[0].ID}, "worker-a"); err != nil || len(outs) != 0 {
		t.Errorf("A completes a taken event: %v, %v; want no outcome", outs, err)
	}
	if _, err := retryOne(ctx, s.InboxQueue(), "worker-a", worker.Claim{ID: a[0].ID}, "late", time.Now(), 10); !errors.Is(err, worker.ErrLeaseLost) {
		t.Errorf("A reschedules a taken event: %v, want ErrLeaseLost", err)
	}
	outs, err := s.InboxProcess(ctx, []int64{b[0].ID}, "worker-b")
	if err != nil || outs[b[0].ID].Decision != fulfillment.DecisionFulfilled {
		t.Fatalf("B processes = %+v, %v", outs, err)
	}
	// Once processed, nobody processes it again.
	if outs, err := s.InboxProcess(ctx, []int64{b[0].ID}, "worker-b"); err != nil || len(outs) != 0 {
		t.Errorf("processing twice: %v, %v; want no outcome", outs, err)
	}
	if got := count(t, conn, "SELECT count(*) FROM entitlements"); got != 2 {
		t.Errorf("entitlements = %d, want 2", got)
	}
	if got := count(t, conn, "SELECT count(*) FROM ledger_entries"); got != 1 {
		t.Errorf("ledger entries = %d, want 1", got)
	}
	if got := count(t, conn, "SELECT count(*) FROM inbox_events WHERE state = 'processed' AND attempts = 2"); got != 1 {
		t.Errorf("processed events that record both claims = %d, want 1", got)
	}
	if got := count(t, conn, "SELECT count(*) FROM inbox_work"); got != 0 {
		t.Errorf("work rows left = %d, want 0 (a decision takes its event off the queue)", got)
	}
}

func TestInboxClaimsAreDisjoint(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	for i := range 40 {
		if _, err := s.InboxInsert(ctx, confirmedEvent(fmt.Sprintf("evt_%d", i), "m-1"), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[int64]string{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("w%d", w)
			for {
				claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: owner, Limit: 3, Lease: time.Minute, MaxAttempts: 10})
				if err != nil {
					t.Error(err)
					return
				}
				if len(claims) == 0 {
					return
				}
				mu.Lock()
				for _, c := range claims {
					if prev, dup := seen[c.ID]; dup {
						t.Errorf("event %d claimed by %s and %s", c.ID, prev, owner)
					}
					seen[c.ID] = owner
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != 40 {
		t.Errorf("claimed %d events, want 40", len(seen))
	}
}

// Group commit: many concurrent inserts, each event several times, some in
// the same batch. One row per event, exactly one "new" receipt per event,
// and every receipt of an event names its row.
func TestInboxInsertGroupCommit(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	const events, copies = 60, 4
	var (
		mu    sync.Mutex
		fresh = map[string]int{}
		rowOf = map[string]int64{}
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range events * copies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			id := fmt.Sprintf("evt_%d", i%events)
			r, err := s.InboxInsert(context.Background(), confirmedEvent(id, "m-1"), []byte(id))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if !r.Duplicate {
				fresh[id]++
			}
			if prev, ok := rowOf[id]; ok && prev != r.ID {
				t.Errorf("%s: receipts name rows %d and %d", id, prev, r.ID)
			}
			rowOf[id] = r.ID
		}()
	}
	close(start)
	wg.Wait()
	if got := count(t, conn, "SELECT count(*) FROM inbox_events"); got != events {
		t.Errorf("inbox rows = %d, want %d", got, events)
	}
	for i := range events {
		if id := fmt.Sprintf("evt_%d", i); fresh[id] != 1 {
			t.Errorf("%s: %d non-duplicate receipts, want 1", id, fresh[id])
		}
	}
	if got := count(t, conn, "SELECT count(*) FROM inbox_events WHERE convert_from(raw_body, 'UTF8') <> event_id"); got != 0 {
		t.Errorf("%d rows hold another event's body", got)
	}
}

// A group commit that finds a few requests while another group commit is
// in flight lingers (Options.InsertLinger): it gathers the requests that
// arrive meanwhile, and commits them together once it holds eight of them
// or the other commit ends — not at the end of the linger, here an hour.
// Requests arrive one at a time, each taken before the next is sent: a
// group commit that did not linger would commit each alone. The commit in
// flight is an insert waiting for a holder's transaction that stores the
// same event (holdACommit). Alone, a request does not linger at all.
func TestInboxInsertLingersWhileACommitIsInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		linger time.Duration
		// transactions storing the eight requests, and the three
		// requests sent after them
		eight, three string
	}{
		{"linger", time.Hour, "1", "1"},
		{"never", 0, "8", "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, conn, url := openStore(t, storage.Options{MaxConns: 10, InsertLinger: tc.linger})
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			if _, err := s.InboxInsert(ctx, confirmedEvent("evt_alone", "m-1"), []byte("{}")); err != nil {
				t.Fatal(err)
			}
			release := holdACommit(ctx, t, s, conn, url)

			transactions := func(ids []string) string {
				return fmt.Sprint(count(t, conn, `SELECT count(DISTINCT xmin::text) FROM inbox_events WHERE event_id = ANY($1)`, ids))
			}
			// Eight: committed together while the other commit still
			// waits.
			var eight []string
			for i := range 8 {
				eight = append(eight, fmt.Sprintf("evt_8_%d", i))
			}
			awaitInserts(t, sendOneByOne(ctx, t, s, eight), len(eight))
			if got := transactions(eight); got != tc.eight {
				t.Errorf("8 requests sent one at a time stored by %s transactions, want %s", got, tc.eight)
			}

			// Three: committed together once the other commit ends.
			three := []string{"evt_3_0", "evt_3_1", "evt_3_2"}
			done := sendOneByOne(ctx, t, s, three)
			release()
			awaitInserts(t, done, len(three))
			if got := transactions(three); got != tc.three {
				t.Errorf("3 requests sent one at a time stored by %s transactions, want %s", got, tc.three)
			}
			if got := count(t, conn, "SELECT count(*) FROM inbox_events"); got != 1+1+8+3 {
				t.Errorf("%d events stored, want 13", got)
			}
		})
	}
}

// A lingering group commit waits no longer than the linger: a request that
// arrives while another commit stays in flight is committed after the
// linger, not when that commit ends.
func TestInboxInsertLingersNoLongerThanTheLinger(t *testing.T) {
	t.Parallel()
	linger := 100 * time.Millisecond
	s, conn, url := openStore(t, storage.Options{MaxConns: 10, InsertLinger: linger})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	release := holdACommit(ctx, t, s, conn, url)
	start := time.Now()
	awaitInserts(t, sendOneByOne(ctx, t, s, []string{"evt_late"}), 1)
	if waited := time.Since(start); waited < linger {
		t.Errorf("committed after %s, while another commit was in flight: it did not linger (%s)", waited, linger)
	}
	if got := count(t, conn, `SELECT count(*) FROM inbox_events WHERE event_id = 'evt_held'`); got != 0 {
		t.Errorf("the held event is stored: the commit in flight ended first")
	}
	release()
}

// holdACommit puts a group commit of s in flight and keeps it there: it
// stores an event in a transaction of its own, left open, then has s store
// the same event, whose insert waits for that transaction. release commits
// the transaction, and waits for s's commit to end.
func holdACommit(ctx context.Context, t *testing.T, s *storage.Store, conn *pgx.Conn, url string) (release func()) {
	t.Helper()
	tx := holderTx(ctx, t, url)
	held := confirmedEvent("evt_held", "m-1")
	sql, args := storage.InboxInsertStatement(held, []byte("{}"))
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		t.Fatal(err)
	}
	inFlight := make(chan error, 1)
	go func() {
		_, err := s.InboxInsert(ctx, held, []byte("{}"))
		inFlight <- err
	}()
	waitFor(t, "the group commit in flight to wait for the holder", func() bool {
		return count(t, conn, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database() AND query LIKE '%INSERT INTO inbox_events%'`) == 1
	})
	return func() {
		t.Helper()
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-inFlight; err != nil {
			t.Fatal(err)
		}
	}
}

// sendOneByOne stores an event of each of ids through s, sending the next
// only once a group commit took the one before; each insert's error goes
// to the channel it returns.
func sendOneByOne(ctx context.Context, t *testing.T, s *storage.Store, ids []string) <-chan error {
	t.Helper()
	done := make(chan error, len(ids))
	for _, id := range ids {
		await, err := s.InboxInsertTaken(ctx, confirmedEvent(id, "m-1"), []byte("{}"))
		if err != nil {
			t.Fatalf("a group commit to take %s: %v", id, err)
		}
		go func() {
			_, err := await()
			done <- err
		}()
	}
	return done
}

// awaitInserts waits for n inserts' results on done, and fails on an error.
func awaitInserts(t *testing.T, done <-chan error, n int) {
	t.Helper()
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// Several events of one order in one batch are decided in event order,
// each against the order as the previous one left it.
func TestInboxProcessBatchOfOneOrder(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-1")); err != nil {
		t.Fatal(err)
	}
	created := confirmedEvent("evt_0", "m-1")
	created.Kind, created.Type, created.Payment.Amount = fulfillment.EventAttemptCreated, "invoice.created", fulfillment.Amount{}
	created.Payment.AttemptRef, created.Payment.InvoiceID, created.Payment.PaymentID = "inv_evt_1", "inv_evt_1", ""
	evs := []fulfillment.ProviderEvent{created, confirmedEvent("evt_1", "m-1"), confirmedEvent("evt_2", "m-1"), confirmedEvent("evt_1b", "m-1")}
	evs[3].EventID = "evt_1_again" // the first payment again, under another event id
	evs[3].Payment = evs[1].Payment
	for _, ev := range evs {
		if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 10})
	if err != nil || len(claims) != 4 {
		t.Fatalf("claim = %v, %v", claims, err)
	}
	ids := make([]int64, len(claims))
	for i, c := range claims {
		ids[i] = c.ID
	}
	outs, err := s.InboxProcess(ctx, ids, "w")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, id := range ids {
		got = append(got, string(outs[id].Decision))
	}
	if want := "attempt_recorded,fulfilled,duplicate_payment,already_applied"; strings.Join(got, ",") != want {
		t.Errorf("decisions = %v, want %s", got, want)
	}
	if n := count(t, conn, "SELECT count(*) FROM entitlements"); n != 2 {
		t.Errorf("entitlements = %d, want 2", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'extra_payment'"); n != 1 {
		t.Errorf("extra_payment items = %d, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM payment_attempts WHERE state = 'confirmed'"); n != 2 {
		t.Errorf("confirmed attempts = %d, want 2", n)
	}
	// Readers replay an order's events in processed_at order: it is the
	// order they were decided in, though one statement recorded them all.
	rows, _ := conn.Query(ctx, "SELECT decision FROM inbox_events ORDER BY processed_at")
	stored, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := "attempt_recorded,fulfilled,duplicate_payment,already_applied"; strings.Join(stored, ",") != want {
		t.Errorf("stored decisions by processed_at = %v, want %s", stored, want)
	}
}

// A committed insert wakes listeners in the same process directly and
// listeners of other replicas (another Store on the same database) through
// NOTIFY.
func TestInboxListenWakesReplicas(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func() *storage.Store {
		s, err := storage.Open(ctx, url, storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	a, b := open(), open()
	wakes := func(s *storage.Store) chan struct{} {
		ch := make(chan struct{}, 100)
		go func() { _ = s.InboxQueue().Listen(ctx, func() { ch <- struct{}{} }) }()
		<-ch // the listener's first catch-up wake: it is subscribed now
		return ch
	}
	local, remote := wakes(a), wakes(b)
	if _, err := a.InboxInsert(ctx, confirmedEvent("evt_1", "m-1"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan struct{}{"same process": local, "other replica": remote} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Errorf("%s: no wake-up within 5s of a committed insert", name)
		}
	}
}

// unidentifiedEvent is a confirmation for merchantOrderID that names neither
// an invoice nor a payment.
func unidentifiedEvent(id, merchantOrderID string) fulfillment.ProviderEvent {
	ev := confirmedEvent(id, merchantOrderID)
	ev.Payment.AttemptRef, ev.Payment.InvoiceID, ev.Payment.PaymentID = "", "", ""
	return ev
}

// processAll claims and processes every pending event in one batch and
// returns their decisions in event order.
func processAll(t *testing.T, s *storage.Store, want int) string {
	t.Helper()
	ctx := context.Background()
	claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 100, Lease: time.Minute, MaxAttempts: 10})
	if err != nil || len(claims) != want {
		t.Fatalf("claim = %v, %v; want %d events", claims, err, want)
	}
	ids := make([]int64, len(claims))
	for i, c := range claims {
		ids[i] = c.ID
	}
	slices.Sort(ids)
	outs, err := s.InboxProcess(ctx, ids, "w")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, id := range ids {
		got = append(got, string(outs[id].Decision))
	}
	return strings.Join(got, ",")
}

// A payment that names neither invoice nor payment pays the order with NULL
// refs; every later payment of the order, identified or not, in the same
// batch or a later one, cannot be told apart from it: one
// unidentified_payment item for the order, no extra_payment.
func TestInboxProcessUnidentifiedPayments(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	order, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range []fulfillment.ProviderEvent{
		unidentifiedEvent("evt_u1", "m-1"), unidentifiedEvent("evt_u2", "m-1"),
		confirmedEvent("evt_i", "m-1"), unidentifiedEvent("evt_u3", "m-1"),
	} {
		if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := processAll(t, s, 4), "fulfilled,unidentified_payment,unidentified_payment,unidentified_payment"; got != want {
		t.Errorf("decisions = %s, want %s", got, want)
	}
	// Another transaction, another announcement: still the one item.
	if _, err := s.InboxInsert(ctx, unidentifiedEvent("evt_u4", "m-1"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 1); got != "unidentified_payment" {
		t.Errorf("decision = %s, want unidentified_payment", got)
	}

	if n := count(t, conn, "SELECT count(*) FROM entitlements"); n != 2 {
		t.Errorf("entitlements = %d, want 2", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM ledger_entries"); n != 1 {
		t.Errorf("ledger entries = %d, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'extra_payment'"); n != 0 {
		t.Errorf("extra_payment items = %d, want 0", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'unidentified_payment'
		AND order_id = $1 AND dedupe_key = 'order|' || $1 AND detail LIKE '%cannot be told apart%'`, order.ID); n != 1 {
		t.Errorf("unidentified_payment items for the order = %d, want 1", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM orders
		WHERE id = $1 AND paid_at IS NOT NULL AND paid_attempt_ref IS NULL AND paid_payment_id IS NULL`, order.ID); n != 1 {
		t.Error("the order is not paid with NULL refs")
	}
}

// Paid refs are NULL when absent, never empty: a confirmation naming only its
// invoice stores a NULL payment id, and the schema refuses empty refs and
// refs on an unpaid order.
func TestPaidRefsNeverEmpty(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	paid, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-1"))
	if err != nil {
		t.Fatal(err)
	}
	unpaid, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-2"))
	if err != nil {
		t.Fatal(err)
	}
	ev := confirmedEvent("evt_1", "m-1")
	ev.Payment.PaymentID = ""
	if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 1); got != "fulfilled" {
		t.Fatalf("decision = %s, want fulfilled", got)
	}
	if n := count(t, conn, `SELECT count(*) FROM orders
		WHERE id = $1 AND paid_attempt_ref = 'inv_evt_1' AND paid_payment_id IS NULL`, paid.ID); n != 1 {
		t.Error("want paid_attempt_ref inv_evt_1 and a NULL paid_payment_id")
	}
	for _, bad := range []struct{ query, id string }{
		{"UPDATE orders SET paid_attempt_ref = '' WHERE id = $1", paid.ID},
		{"UPDATE orders SET paid_payment_id = '' WHERE id = $1", paid.ID},
		{"UPDATE orders SET paid_attempt_ref = 'inv_x' WHERE id = $1", unpaid.ID},
	} {
		_, err := conn.Exec(ctx, bad.query, bad.id)
		if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "23514" {
			t.Errorf("%s: %v, want a check violation", bad.query, err)
		}
	}
}

// Migration 004 turns stored empty refs into NULL, drops the refs of orders
// paid by a confirmation that identified nothing (a checkout session alone),
// keeps identified refs, and migrates down again.
func TestMigration004PaidRefs(t *testing.T) {
	t.Parallel()
	url := pgtest.DB(t)
	ctx := context.Background()
	conn := pgtest.Conn(t, url)
	m, err := migrate.NewMigrator(ctx, conn, "schema_version")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(storage.Migrations()); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 3); err != nil {
		t.Fatalf("migrating down to 3: %v", err)
	}
	// As the previous code stored them: '' for absent refs, the checkout
	// session as the attempt of a session-only confirmation.
	_, err = conn.Exec(ctx, `
		INSERT INTO orders (id, org_id, environment, merchant_order_id, state, total_currency, total_minor_units,
			fingerprint, paid_attempt_ref, paid_payment_id, paid_at)
		VALUES
			('00000000-0000-7000-8000-000000000001', 'org_a', 'live', 'empty', 'fulfilled', 'USD', 100, 'f', '', '', now()),
			('00000000-0000-7000-8000-000000000002', 'org_a', 'live', 'session', 'fulfilled', 'USD', 100, 'f', 'cs_1', '', now()),
			('00000000-0000-7000-8000-000000000003', 'org_a', 'live', 'invoice', 'fulfilled', 'USD', 100, 'f', 'inv_1', '', now()),
			('00000000-0000-7000-8000-000000000004', 'org_a', 'live', 'unpaid', 'pending_payment', 'USD', 100, 'f', NULL, NULL, NULL);
		INSERT INTO inbox_events (provider, endpoint_id, org_id, environment, event_id, event_type, kind, test_mode,
			attempt_ref, invoice_id, checkout_session_id, merchant_order_id, raw_body, state, decision, order_id)
		VALUES
			('yolfi', 'ep', 'org_a', 'live', 'evt_1', 'payment.confirmed', 'payment_confirmed', false,
				'cs_1', NULL, 'cs_1', 'session', '{}', 'processed', 'fulfilled', '00000000-0000-7000-8000-000000000002'),
			('yolfi', 'ep', 'org_a', 'live', 'evt_2', 'payment.confirmed', 'payment_confirmed', false,
				'inv_1', 'inv_1', NULL, 'invoice', '{}', 'processed', 'fulfilled', '00000000-0000-7000-8000-000000000003');
		INSERT INTO reconciliation_items (kind, org_id, environment, detail, dedupe_key)
		VALUES ('extra_payment', 'org_a', 'live', 'old', 'old|1')`)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 4); err != nil {
		t.Fatalf("migrating up to 4: %v", err)
	}
	rows, err := conn.Query(ctx, `
		SELECT merchant_order_id || ':' || coalesce(paid_attempt_ref, 'NULL') || ',' || coalesce(paid_invoice_id, 'NULL') ||
			',' || coalesce(paid_payment_id, 'NULL')
		FROM orders ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if want := "empty:NULL,NULL,NULL session:NULL,NULL,NULL invoice:inv_1,inv_1,NULL unpaid:NULL,NULL,NULL"; strings.Join(got, " ") != want {
		t.Errorf("paid refs after 004 = %v, want %s", got, want)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO reconciliation_items (kind, org_id, environment, detail, dedupe_key)
		VALUES ('unidentified_payment', 'org_a', 'live', 'new', 'order|00000000-0000-7000-8000-000000000001')`); err != nil {
		t.Fatalf("an unidentified_payment item after 004: %v", err)
	}

	if err := m.MigrateTo(ctx, 3); err != nil {
		t.Fatalf("migrating 004 down: %v", err)
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'extra_payment'"); n != 2 {
		t.Errorf("extra_payment items after 004 down = %d, want 2 (the unidentified one kept as extra_payment)", n)
	}
	if err := m.MigrateTo(ctx, 4); err != nil {
		t.Fatalf("migrating up to 4 again: %v", err)
	}
}

// Two replicas' group commits holding the same redelivered events, in
// opposite orders, at the same moment: neither waits on the other in a
// cycle (PostgreSQL counts no deadlock), and each event is stored once.
func TestInboxInsertBatchesOfTwoReplicasDoNotDeadlock(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	other, err := storage.Open(ctx, conn.Config().ConnString(), storage.Options{MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	deadlocks := func() int {
		return count(t, conn, "SELECT deadlocks::int FROM pg_stat_database WHERE datname = current_database()")
	}
	before := deadlocks()
	const rounds, events = 20, 16
	for r := range rounds {
		evs := make([]fulfillment.ProviderEvent, events)
		for i := range evs {
			evs[i] = refundEvent(fmt.Sprintf("r%d-e%d", r, i), fmt.Sprintf("m-%d", i), fulfillment.EventPaymentConfirmed, 20000)
		}
		reversed := slices.Clone(evs)
		slices.Reverse(reversed)
		var wg sync.WaitGroup
		for _, st := range []struct {
			s   *storage.Store
			evs []fulfillment.ProviderEvent
		}{{s, evs}, {other, reversed}} {
			wg.Go(func() {
				if err := st.s.InboxInsertBatch(ctx, st.evs); err != nil {
					t.Errorf("round %d: %v", r, err)
				}
			})
		}
		wg.Wait()
	}
	// The statistics are the server's view, flushed within a second.
	time.Sleep(1100 * time.Millisecond)
	if n := deadlocks() - before; n != 0 {
		t.Errorf("%d deadlocks between the two replicas' inserts, want none", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_events"); n != rounds*events {
		t.Errorf("%d events stored, want %d", n, rounds*events)
	}
}

// A webhook whose request reached the group commit's queue as the store
// closed, which no flusher takes any more, is answered unavailable at
// once (its caller answers 503, the provider retries), not left waiting
// for its caller's deadline.
func TestARequestQueuedAsTheStoreClosesIsAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	err := s.InsertQueuedAfterClose(ctx, confirmedEvent("e-late", "m-late"))
	if !errors.Is(err, fulfillment.ErrUnavailable) || ctx.Err() != nil {
		t.Fatalf("after %v: %v, want unavailable before the deadline", time.Since(start).Round(time.Millisecond), err)
	}
}
