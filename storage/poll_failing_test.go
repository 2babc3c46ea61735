package storage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/tern/v2/migrate"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// refused is the cause the poller records when the bank cannot be reached.
const refused = "asking tbank-live for payment %s: connection refused"

// failPoll claims st's poll under owner and records a failed attempt; it
// returns whether the poll was failed.
func failPoll(t *testing.T, s *storage.Store, owner string, st fulfillment.PaymentStart, maxAttempts int) bool {
	t.Helper()
	ctx := context.Background()
	claims, err := s.PollQueue().Claim(ctx, worker.ClaimParams{Owner: owner, Limit: 10, Lease: time.Minute, MaxAttempts: maxAttempts})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %v, %v; want the poll of payment %s", claims, err, st.PaymentID)
	}
	failed, err := retryOne(ctx, s.PollQueue(), owner, worker.Claim{ID: claims[0].ID}, fmt.Sprintf(refused, st.PaymentID), time.Now(), maxAttempts)
	if err != nil {
		t.Fatal(err)
	}
	return failed
}

// answerPoll claims st's poll under owner, stores the bank's answer that
// the payment is still NEW, and records the attempt as not done yet.
func answerPoll(t *testing.T, s *storage.Store, owner string, st fulfillment.PaymentStart, maxAttempts int) bool {
	t.Helper()
	return answerPollWith(t, s, owner, st, maxAttempts, "NEW", false)
}

// answerPollWith is answerPoll with the bank answering status, which holds
// the payer's money when held.
func answerPollWith(t *testing.T, s *storage.Store, owner string, st fulfillment.PaymentStart, maxAttempts int, status string, held bool) bool {
	t.Helper()
	ctx := context.Background()
	claims, err := s.PollQueue().Claim(ctx, worker.ClaimParams{Owner: owner, Limit: 10, Lease: time.Minute, MaxAttempts: maxAttempts})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %v, %v; want the poll of payment %s", claims, err, st.PaymentID)
	}
	a := fulfillment.PollAnswer{Event: polled(st, status), Raw: []byte(`{"Status":"` + status + `"}`)}
	if held {
		a.Held = status
	}
	if err := s.PollRecord(ctx, claims[0].ID, owner, a, false); err != nil {
		t.Fatal(err)
	}
	failed, err := retryOne(ctx, s.PollQueue(), owner, worker.Claim{ID: claims[0].ID}, "not done yet: payment "+st.PaymentID+" is "+status, time.Now(), maxAttempts)
	if err != nil {
		t.Fatal(err)
	}
	return failed
}

// pollItems lists the poll_failing items, newest first.
func pollItems(t *testing.T, s *storage.Store) []fulfillment.ReconItem {
	t.Helper()
	items, err := s.ReconList(context.Background(), fulfillment.ReconListParams{
		Filter: fulfillment.ReconFilter{Kind: fulfillment.ReconPollFailing}, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// A poll that used its attempts without an answer opens one poll_failing
// item about its payment start, in the transaction that fails it; nothing
// after it opens another — a notification that pays the order leaves the
// item open.
func TestPollFailingOpensOneItem(t *testing.T) {
	t.Parallel()
	s, conn := newPollStore(t)
	ctx := context.Background()
	st := startedPayment(t, s, "m-1", "701")

	for attempt := 1; attempt <= 3; attempt++ {
		if n := count(t, conn, "SELECT count(*) FROM reconciliation_items"); n != 0 {
			t.Fatalf("%d items before attempt %d, want none until the poll has used its attempts", n, attempt)
		}
		if failed := failPoll(t, s, "w", st, 3); failed != (attempt == 3) {
			t.Fatalf("attempt %d: failed %v", attempt, failed)
		}
	}
	other := startedPayment(t, s, "m-2", "702") // polled fine: no item
	if n := count(t, conn, "SELECT count(*) FROM payment_polls WHERE start_id = $1 AND state = 'failed'", st.ID); n != 1 {
		t.Fatalf("%d failed polls of start %d, want 1", n, st.ID)
	}
	items := pollItems(t, s)
	if len(items) != 1 {
		t.Fatalf("%d poll_failing items, want 1", len(items))
	}
	it, err := s.ReconGet(ctx, items[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if it.State != fulfillment.ReconOpen || it.OrderID != st.OrderID || it.PaymentStartID != st.ID || it.PaymentID != "701" ||
		it.AttemptRef != "701" || it.Provider != fulfillment.ProviderTBank || it.OrgID != "org_a" || it.Environment != fulfillment.EnvLive {
		t.Errorf("item %+v; want it open, about order %s, start %d, payment 701", it, st.OrderID, st.ID)
	}
	if it.Amount.String() != "19200 RUB minor units" {
		t.Errorf("item amount %s, want the start's 19200 RUB", it.Amount)
	}
	for _, want := range []string{"payment 701 at endpoint tbank-live gave up after 3 attempts, none of them answered",
		"last error: asking tbank-live for payment 701: connection refused", "stays open until a person resolves it"} {
		if !strings.Contains(it.Detail, want) {
			t.Errorf("detail %q does not say %q", it.Detail, want)
		}
	}

	// Nothing further: the poll is not claimed again, a late retry of the
	// failed attempt finds it failed, and the other payment's poll goes on.
	if claims, err := s.PollQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 3}); err != nil || len(claims) != 1 {
		t.Fatalf("claim after failing = %v, %v; want only the other payment's poll", claims, err)
	} else {
		if err := s.PollRecord(ctx, claims[0].ID, "w", fulfillment.PollAnswer{Event: polled(other, "CONFIRMED"), Raw: []byte(`{"Status":"CONFIRMED"}`)}, true); err != nil {
			t.Fatal(err)
		}
	}
	var pollID int64
	if err := conn.QueryRow(ctx, "SELECT id FROM payment_polls WHERE start_id = $1", st.ID).Scan(&pollID); err != nil {
		t.Fatal(err)
	}
	if _, err := retryOne(ctx, s.PollQueue(), "w", worker.Claim{ID: pollID}, "again", time.Now(), 3); !errors.Is(err, worker.ErrLeaseLost) {
		t.Errorf("retry of a failed poll = %v, want ErrLeaseLost", err)
	}
	// The notification comes at last: the order is paid, the item stays.
	if _, err := s.InboxInsert(ctx, confirmedRUB("late", "", st.ProviderOrderID, "701"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	processAll(t, s, 2) // the other payment's polled confirmation, and the late notification
	if n := count(t, conn, "SELECT count(*) FROM entitlements WHERE order_id = $1::uuid", st.OrderID); n != 1 {
		t.Errorf("%d licenses after the notification, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'poll_failing' AND state = 'open' AND payment_start_id = $1", st.ID); n != 1 {
		t.Errorf("%d open poll_failing items after the order was paid, want the 1 it had", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items"); n != 1 {
		t.Errorf("%d items in all, want the one poll_failing item", n)
	}
	// It resolves like any other.
	res, err := s.ReconResolve(ctx, fulfillment.ReconResolve{ID: it.ID, Resolution: fulfillment.ResolutionNoAction,
		Note: "the bank confirmed it; the notification paid the order", Actor: "ops"})
	if err != nil || res.State != fulfillment.ReconResolved {
		t.Errorf("resolve = %+v, %v", res, err)
	}
}

// The bank answering the last attempt ("not paid yet") means a payer who
// never paid: no item. A poll answered earlier and failing since opens one
// that says so.
func TestPollFailingOnlyWithoutAnAnswer(t *testing.T) {
	t.Parallel()
	s, conn := newPollStore(t)
	unpaid := startedPayment(t, s, "m-1", "801")
	failPoll(t, s, "w", unpaid, 3)
	failPoll(t, s, "w", unpaid, 3)
	if failed := answerPoll(t, s, "w", unpaid, 3); !failed {
		t.Fatal("the poll answered on its last attempt was not failed")
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items"); n != 0 {
		t.Errorf("%d items for a poll whose last attempt was answered, want none", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM payment_polls WHERE state = 'failed'"); n != 1 {
		t.Errorf("%d failed polls, want 1", n)
	}

	silent := startedPayment(t, s, "m-2", "802")
	answerPoll(t, s, "w", silent, 3)
	failPoll(t, s, "w", silent, 3)
	failPoll(t, s, "w", silent, 3)
	items := pollItems(t, s)
	if len(items) != 1 || items[0].PaymentStartID != silent.ID {
		t.Fatalf("items %+v; want one about start %d", items, silent.ID)
	}
	if want := "gave up after 3 attempts, the last 2 unanswered (the provider last answered attempt 1)"; !strings.Contains(items[0].Detail, want) {
		t.Errorf("detail %q does not say %q", items[0].Detail, want)
	}
}

// A poll that used its attempts with the bank answering, the last time,
// that the payer's money is held (authorized, not taken) opens the item:
// nothing in the service takes or releases that money. One whose last
// answer no longer says so opens none; one that stopped getting answers
// after a held one opens the item of a poll that gets none, which says
// the money may be held.
func TestPollLeftHeldOpensAnItem(t *testing.T) {
	t.Parallel()
	// Each payment's poll in a store of its own (a claim takes every poll
	// due), answered on each of its three attempts as answers says: a
	// status, held or not, or "" for no answer.
	type answer struct {
		status string
		held   bool
	}
	authorized, fresh, none := answer{"AUTHORIZED", true}, answer{"NEW", false}, answer{}
	cases := []struct {
		name    string
		answers []answer
		item    bool
		says    []string
	}{
		{"held to the end", []answer{authorized, authorized, authorized}, true,
			[]string{"payment 801 at endpoint tbank-live stopped after 3 attempts with the payment AUTHORIZED",
				"the payer's money is held there", "release it to the payer", "stays open until a person resolves it"}},
		// Not what a bank does; what matters is that the last answer holds nothing.
		{"held, then not", []answer{authorized, authorized, fresh}, false, nil},
		{"held, then unanswered", []answer{authorized, authorized, none}, true,
			[]string{"gave up after 3 attempts, the last 1 unanswered (the provider last answered attempt 2)",
				"Its last answer had the payment AUTHORIZED: the payer's money may be held there.", "look it up at the provider"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, conn := newPollStore(t)
			st := startedPayment(t, s, "m-1", "801")
			for i, a := range tc.answers {
				last := i == len(tc.answers)-1
				var failed bool
				if a.status == "" {
					failed = failPoll(t, s, "w", st, len(tc.answers))
				} else {
					failed = answerPollWith(t, s, "w", st, len(tc.answers), a.status, a.held)
				}
				if failed != last {
					t.Fatalf("attempt %d: failed %v", i+1, failed)
				}
			}
			items := pollItems(t, s)
			if n := count(t, conn, "SELECT count(*) FROM reconciliation_items"); len(items) != n || tc.item != (n == 1) || n > 1 {
				t.Fatalf("%d items, %d of them poll_failing; want an item: %v", n, len(items), tc.item)
			}
			if !tc.item {
				return
			}
			it, err := s.ReconGet(context.Background(), items[0].ID)
			if err != nil {
				t.Fatal(err)
			}
			if it.PaymentStartID != st.ID || it.PaymentID != "801" {
				t.Errorf("item about start %d, payment %s; want %d, 801", it.PaymentStartID, it.PaymentID, st.ID)
			}
			for _, want := range tc.says {
				if !strings.Contains(it.Detail, want) {
					t.Errorf("detail %q does not say %q", it.Detail, want)
				}
			}
		})
	}
}

// An attempt handed back on shutdown is not counted, nor is its answer:
// the next attempt, unanswered, is the poll's last, and opens the item.
func TestPollFailingAfterARelease(t *testing.T) {
	t.Parallel()
	s, conn := newPollStore(t)
	ctx := context.Background()
	st := startedPayment(t, s, "m-1", "901")
	claims, err := s.PollQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 1})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %v, %v", claims, err)
	}
	if err := s.PollRecord(ctx, claims[0].ID, "w", fulfillment.PollAnswer{Event: polled(st, "NEW"), Raw: []byte(`{"Status":"NEW"}`)}, false); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PollQueue().Release(ctx, "w"); err != nil || n != 1 {
		t.Fatalf("release = %d, %v", n, err)
	}
	if failed := failPoll(t, s, "w", st, 1); !failed {
		t.Fatal("the poll's one attempt did not fail it")
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'poll_failing' AND payment_start_id = $1", st.ID); n != 1 {
		t.Errorf("%d poll_failing items, want 1: the answered attempt was handed back, the counted one got no answer", n)
	}
}

// A poll whose workers stopped during its last attempt is failed by the
// next claim, with the same item — unless that attempt's answer was
// stored before its worker stopped.
func TestPollFailingAbandoned(t *testing.T) {
	t.Parallel()
	s, conn := newPollStore(t)
	ctx := context.Background()
	lost := startedPayment(t, s, "m-1", "1001")
	failPoll(t, s, "w", lost, 2)
	answered := startedPayment(t, s, "m-2", "1002")
	// The last attempts: one worker stops asking, the other after storing
	// the answer. Their leases (1 ms) run out; the owners hold no
	// liveness, so they are dead.
	claims, err := s.PollQueue().Claim(ctx, worker.ClaimParams{Owner: "dead", Limit: 10, Lease: time.Millisecond, MaxAttempts: 2})
	if err != nil || len(claims) != 2 {
		t.Fatalf("claim = %v, %v; want both polls", claims, err)
	}
	for _, c := range claims {
		if c.Attempts == 1 { // the answered payment's first attempt
			if err := s.PollRecord(ctx, c.ID, "dead", fulfillment.PollAnswer{Event: polled(answered, "NEW"), Raw: []byte(`{"Status":"NEW"}`)}, false); err != nil {
				t.Fatal(err)
			}
			if _, err := retryOne(ctx, s.PollQueue(), "dead", worker.Claim{ID: c.ID}, "not done yet", time.Now(), 2); err != nil {
				t.Fatal(err)
			}
		}
	}
	claims, err = s.PollQueue().Claim(ctx, worker.ClaimParams{Owner: "dead2", Limit: 10, Lease: time.Millisecond, MaxAttempts: 2})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %v, %v; want the answered payment's second attempt (the other is abandoned)", claims, err)
	}
	if err := s.PollRecord(ctx, claims[0].ID, "dead2", fulfillment.PollAnswer{Event: polled(answered, "NEW"), Raw: []byte(`{"Status":"NEW"}`)}, false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if claims, err := s.PollQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 2}); err != nil || len(claims) != 0 {
		t.Fatalf("claim = %v, %v; want both polls failed as abandoned", claims, err)
	}
	if n := count(t, conn, "SELECT count(*) FROM payment_polls WHERE state = 'failed'"); n != 2 {
		t.Fatalf("%d failed polls, want 2", n)
	}
	items := pollItems(t, s)
	if len(items) != 1 || items[0].PaymentStartID != lost.ID || items[0].OrderID != lost.OrderID {
		t.Fatalf("items %+v; want one, about start %d", items, lost.ID)
	}
	for _, want := range []string{"payment 1001 at endpoint tbank-live gave up after 2 attempts, none of them answered, the last never completing",
		"last recorded error: asking tbank-live for payment 1001: connection refused.", fulfillment.PollFailingAdvice} {
		if !strings.Contains(items[0].Detail, want) {
			t.Errorf("detail %q does not say %q", items[0].Detail, want)
		}
	}
}

// Replicas race over failing polls — claims taken over as leases run out,
// retries of lost claims, abandoned polls failed by claims: each poll is
// failed once and opens exactly one item, about its own payment.
func TestPollFailingRace(t *testing.T) {
	t.Parallel()
	s, conn := newPollStore(t)
	ctx := context.Background()
	const payments, workers, maxAttempts = 6, 8, 4
	starts := map[int64]fulfillment.PaymentStart{}
	for i := range payments {
		st := startedPayment(t, s, fmt.Sprintf("m-%d", i), fmt.Sprint(2000+i))
		starts[st.ID] = st
	}
	deadline := time.Now().Add(20 * time.Second)
	var (
		wg     sync.WaitGroup
		connMu sync.Mutex // conn is one connection
	)
	pending := func() int {
		connMu.Lock()
		defer connMu.Unlock()
		return count(t, conn, "SELECT count(*) FROM payment_polls WHERE state = 'pending'")
	}
	for w := range workers {
		wg.Go(func() {
			owner := fmt.Sprintf("replica-%d", w)
			for time.Now().Before(deadline) {
				// Leases as short as an attempt: other replicas take over
				// claims whose owner (holding no liveness) looks dead.
				claims, err := s.PollQueue().Claim(ctx, worker.ClaimParams{Owner: owner, Limit: 2, Lease: time.Millisecond, MaxAttempts: maxAttempts})
				if err != nil {
					t.Error(err)
					return
				}
				if len(claims) == 0 {
					if pending() == 0 {
						return
					}
					time.Sleep(time.Millisecond)
					continue
				}
				for _, c := range claims {
					if w%3 == 0 {
						continue // this replica stops during its attempts
					}
					_, err := retryOne(ctx, s.PollQueue(), owner, worker.Claim{ID: c.ID}, "asking tbank-live for payment: HTTP 503", time.Now(), maxAttempts)
					if err != nil && !errors.Is(err, worker.ErrLeaseLost) {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := count(t, conn, "SELECT count(*) FROM payment_polls WHERE state = 'failed'"); n != payments {
		t.Fatalf("%d polls failed, want %d", n, payments)
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items"); n != payments {
		t.Errorf("%d items, want one per payment (%d)", n, payments)
	}
	t.Logf("%d items opened by a claim failing an abandoned poll, the others by a retry",
		count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE detail LIKE '%the last never completing%'"))
	rows, err := conn.Query(ctx, `SELECT payment_start_id, order_id::text, payment_id, count(*) OVER (PARTITION BY payment_start_id)
		FROM reconciliation_items WHERE kind = 'poll_failing'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			start      int64
			order, pay string
			n          int
		)
		if err := rows.Scan(&start, &order, &pay, &n); err != nil {
			t.Fatal(err)
		}
		if st, ok := starts[start]; !ok || n != 1 || order != st.OrderID || pay != st.PaymentID {
			t.Errorf("item about start %d (order %s, payment %s) ×%d; want one per start, naming its order and payment", start, order, pay, n)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

// Migration 020 rolls back only while no poll_failing item exists: items
// are evidence, and the previous schema has no kind for them.
func TestMigration020PollFailing(t *testing.T) {
	t.Parallel()
	s, conn := newPollStore(t)
	ctx := context.Background()
	st := startedPayment(t, s, "m-1", "3001")
	failPoll(t, s, "w", st, 1)
	m, err := migrate.NewMigrator(ctx, conn, "schema_version")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(storage.Migrations()); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 19); err == nil || !strings.Contains(err.Error(), "poll_failing reconciliation items exist") {
		t.Fatalf("migrating down with a poll_failing item: %v, want it refused", err)
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'poll_failing'"); n != 1 {
		t.Fatalf("%d poll_failing items after the refused rollback, want 1", n)
	}
	if _, err := conn.Exec(ctx, "DELETE FROM reconciliation_items"); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 19); err != nil {
		t.Fatalf("migrating down without items: %v", err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO reconciliation_items (kind, org_id, environment, detail, dedupe_key)
		VALUES ('poll_failing', 'org_a', 'live', 'd', 'k')`); err == nil {
		t.Error("version 19 took a poll_failing item")
	}
	if err := m.MigrateTo(ctx, 20); err != nil {
		t.Fatalf("migrating up again: %v", err)
	}
	if n := count(t, conn, "SELECT count(*) FROM payment_polls WHERE answered_attempt = 0"); n != 1 {
		t.Errorf("%d polls with answered_attempt 0 after migrating up, want the one poll", n)
	}
}
