package storage_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
)

// live runs a liveness of s until stop is called (or the test ends) and
// returns its first owner.
func live(t *testing.T, s *storage.Store) (l *storage.Liveness, owner string, stop func()) {
	t.Helper()
	l = s.NewLiveness()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	run := l.Run
	go func() { defer close(done); _ = run(ctx) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return l, waitOwner(t, l, ""), stop
}

// waitOwner waits until l has a live owner other than not.
func waitOwner(t *testing.T, l *storage.Liveness, not string) string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		owner, changed := l.Owner()
		if owner != "" && owner != not {
			return owner
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no live owner (other than %q) after 10s", not)
		}
	}
}

// insertPaidOrder stores an order and a confirmation paying it.
func insertPaidOrder(t *testing.T, s *storage.Store, id string) {
	t.Helper()
	ctx := context.Background()
	if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-"+id)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.InboxInsert(ctx, confirmedEvent(id, "m-"+id), []byte("{}")); err != nil {
		t.Fatal(err)
	}
}

// A live worker keeps its claim past the lease, however long it holds the
// batch: no claim or reclaim takes it, and it completes the event.
func TestLiveOwnerKeepsClaimPastLease(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	insertPaidOrder(t, s, "evt_1")
	_, a, _ := live(t, s)
	claims, err := s.InboxClaim(ctx, a, 10, time.Second, 10, nil)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim A = %v, %v", claims, err)
	}
	time.Sleep(2 * time.Second) // the lease runs out; A is still alive
	_, b, _ := live(t, s)
	if got, err := s.InboxClaim(ctx, b, 10, time.Minute, 10, nil); err != nil || len(got) != 0 {
		t.Fatalf("B claims a live worker's event past its lease: %v, %v", got, err)
	}
	if n, err := s.InboxReclaim(ctx); err != nil || n != 0 {
		t.Fatalf("reclaim took %d events of a live worker (%v), want 0", n, err)
	}
	outs, err := s.InboxProcess(ctx, []int64{claims[0].ID}, a)
	if err != nil || outs[claims[0].ID].Decision != fulfillment.DecisionFulfilled {
		t.Fatalf("A completes past its lease: %+v, %v; want fulfilled", outs, err)
	}
	if got := count(t, conn, "SELECT count(*) FROM inbox_events WHERE state = 'processed' AND attempts = 1"); got != 1 {
		t.Errorf("processed at the first attempt: %d events, want 1", got)
	}
}

// A live owner takes back its own claim whose lease ran out when none of
// its workers holds it (a retry that failed to record, a claim whose answer
// was lost) — never one a worker still holds.
func TestLiveOwnerTakesBackWhatItLostTrackOf(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	insertPaidOrder(t, s, "evt_1")
	_, a, _ := live(t, s)
	claims, err := s.InboxClaim(ctx, a, 10, 200*time.Millisecond, 10, nil)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %v, %v", claims, err)
	}
	if got, err := s.InboxClaim(ctx, a, 10, time.Minute, 10, nil); err != nil || len(got) != 0 {
		t.Fatalf("its own claim taken back inside its lease: %v, %v", got, err)
	}
	time.Sleep(400 * time.Millisecond) // the lease runs out
	if got, err := s.InboxClaim(ctx, a, 10, time.Minute, 10, []int64{claims[0].ID}); err != nil || len(got) != 0 {
		t.Fatalf("a claim one of its workers holds taken back: %v, %v", got, err)
	}
	got, err := s.InboxClaim(ctx, a, 10, time.Minute, 10, nil)
	if err != nil || len(got) != 1 || got[0].ID != claims[0].ID || got[0].Attempts != 2 {
		t.Fatalf("a claim it lost track of: %v, %v; want it back at attempt 2", got, err)
	}
}

// When an owner stops being live, its claims are free at once, whatever
// the lease; it can then neither complete nor reschedule them.
func TestDeadOwnerReclaimedAtOnce(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	insertPaidOrder(t, s, "evt_1")
	_, a, stopA := live(t, s)
	claims, err := s.InboxClaim(ctx, a, 10, time.Hour, 10, nil)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim A = %v, %v", claims, err)
	}
	_, b, _ := live(t, s)
	if n, err := s.InboxReclaim(ctx); err != nil || n != 0 {
		t.Fatalf("reclaim while A lives = %d, %v; want 0", n, err)
	}
	stopA() // A's session ends: its lock is gone as soon as the server sees it
	deadline := time.Now().Add(5 * time.Second)
	for {
		n, err := s.InboxReclaim(ctx)
		if err != nil || n > 1 {
			t.Fatalf("reclaim after A stopped = %d, %v; want 1", n, err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's claim was not reclaimed within 5s of its session's end")
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, err := s.InboxClaim(ctx, b, 10, time.Hour, 10, nil)
	if err != nil || len(got) != 1 || got[0].Attempts != 2 {
		t.Fatalf("claim B = %v, %v; want the event at attempt 2", got, err)
	}
	if outs, err := s.InboxProcess(ctx, []int64{claims[0].ID}, a); err != nil || len(outs) != 0 {
		t.Errorf("dead A completes: %v, %v; want no outcome", outs, err)
	}
	if _, err := s.InboxRetry(ctx, claims[0].ID, a, "late", time.Now(), 10); !errors.Is(err, fulfillment.ErrLeaseLost) {
		t.Errorf("dead A reschedules: %v, want ErrLeaseLost", err)
	}
	if outs, err := s.InboxProcess(ctx, []int64{got[0].ID}, b); err != nil || len(outs) != 1 {
		t.Fatalf("B processes = %v, %v", outs, err)
	}
	if got := count(t, conn, "SELECT count(*) FROM entitlements"); got != 2 {
		t.Errorf("entitlements = %d, want 2", got)
	}
}

// A claim whose lease ran out is taken from an owner that never was live
// (or died) at the claim itself, without a reclaim.
func TestClaimTakesExpiredLeaseOfDeadOwner(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	insertPaidOrder(t, s, "evt_1")
	if got, err := s.InboxClaim(ctx, "gone", 10, 10*time.Millisecond, 10, nil); err != nil || len(got) != 1 {
		t.Fatalf("claim = %v, %v", got, err)
	}
	time.Sleep(20 * time.Millisecond)
	_, b, _ := live(t, s)
	if got, err := s.InboxClaim(ctx, b, 10, time.Hour, 10, nil); err != nil || len(got) != 1 || got[0].Attempts != 2 {
		t.Fatalf("claim B = %v, %v; want the event at attempt 2", got, err)
	}
}

// A worker that lost its liveness while it held its events locked in a
// processing transaction still commits them: reclaim skips locked rows.
func TestReclaimSkipsEventsBeingProcessed(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	insertPaidOrder(t, s, "evt_1")
	if got, err := s.InboxClaim(ctx, "lost", 10, time.Hour, 10, nil); err != nil || len(got) != 1 {
		t.Fatalf("claim = %v, %v", got, err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT id FROM inbox_events WHERE lease_owner = 'lost' FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.InboxReclaim(ctx); err != nil || n != 0 {
		t.Fatalf("reclaim of a locked event = %d, %v; want 0, at once", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := s.InboxReclaim(ctx); err != nil || n != 1 {
		t.Fatalf("reclaim after the transaction = %d, %v; want 1", n, err)
	}
}

// When the liveness connection breaks, the owner is lost for good: its
// claims are reclaimable, and the liveness takes a new owner.
func TestLivenessConnectionLost(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	insertPaidOrder(t, s, "evt_1")
	l, a, _ := live(t, s)
	_, lost := l.Owner()
	if got, err := s.InboxClaim(ctx, a, 10, time.Hour, 10, nil); err != nil || len(got) != 1 {
		t.Fatalf("claim = %v, %v", got, err)
	}
	var killed int
	err := conn.QueryRow(ctx, `
		SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'fulfillmentd liveness'`).Scan(&killed)
	if err != nil || killed != 1 {
		t.Fatalf("terminating the liveness session: %d, %v; want 1", killed, err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("the owner is still reported live 10s after its session ended")
	}
	b := waitOwner(t, l, a)
	if n, err := s.InboxReclaim(ctx); err != nil || n != 1 {
		t.Fatalf("reclaim of the lost owner's event = %d, %v; want 1", n, err)
	}
	if got, err := s.InboxClaim(ctx, b, 10, time.Hour, 10, nil); err != nil || len(got) != 1 {
		t.Fatalf("claim under the new owner = %v, %v", got, err)
	}
}

// An event whose worker dies during every attempt is reclaimed at once each
// time, and failed once it has used its attempts, with a failed_event item.
func TestReclaimedEventFailsPastItsAttempts(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	insertPaidOrder(t, s, "evt_1")
	for attempt := 1; attempt <= 3; attempt++ {
		got, err := s.InboxClaim(ctx, fmt.Sprintf("dies-%d", attempt), 10, time.Hour, 3, nil)
		if err != nil || len(got) != 1 || got[0].Attempts != attempt {
			t.Fatalf("attempt %d: claim = %v, %v", attempt, got, err)
		}
		if n, err := s.InboxReclaim(ctx); err != nil || n != 1 {
			t.Fatalf("attempt %d: reclaim = %d, %v; want 1", attempt, n, err)
		}
	}
	if got, err := s.InboxClaim(ctx, "w", 10, time.Hour, 3, nil); err != nil || len(got) != 0 {
		t.Fatalf("claim past the attempts = %v, %v; want nothing", got, err)
	}
	if got := count(t, conn, `SELECT count(*) FROM inbox_events
		WHERE state = 'failed' AND decision = 'failed' AND lease_owner IS NULL AND last_error LIKE 'abandoned%'`); got != 1 {
		t.Errorf("failed events = %d, want 1", got)
	}
	if got := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'failed_event'"); got != 1 {
		t.Errorf("failed_event items = %d, want 1", got)
	}
}

// The claim and reclaim statements, which run all the time, read the rows
// they need, never the backlog of due events nor the processed history.
func TestQueueStatementsReadOnlyWhatTheyNeed(t *testing.T) {
	t.Parallel()
	_, conn := newStore(t)
	ctx := context.Background()
	// 10,000 processed events, 10,000 due, 40 leased to an owner that is gone.
	_, err := conn.Exec(ctx, `
		INSERT INTO inbox_events (provider, endpoint_id, org_id, environment, event_id, event_type, kind, test_mode,
			raw_body, state, decision, processed_at, next_attempt_at, lease_owner, lease_until)
		SELECT 'yolfi', 'ep', 'org_a', 'live', 'evt_' || i, 'payment.confirmed', 'payment_confirmed', false, '{}',
			CASE WHEN i <= 10000 THEN 'processed' ELSE 'pending' END,
			CASE WHEN i <= 10000 THEN 'fulfilled' END,
			CASE WHEN i <= 10000 THEN now() END,
			CASE WHEN i > 20000 THEN now() + interval '1 hour' ELSE now() - interval '1 minute' END,
			CASE WHEN i > 20000 THEN 'gone' END,
			CASE WHEN i > 20000 THEN now() + interval '1 hour' END
		FROM generate_series(1, 20040) i;
		ANALYZE inbox_events`)
	if err != nil {
		t.Fatal(err)
	}
	actual := regexp.MustCompile(`actual time=\S+ rows=(\d+) loops=(\d+)`)
	for _, st := range storage.QueueStatementsForTest() {
		rows, err := conn.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF) "+st.SQL, st.Args...)
		if err != nil {
			t.Fatalf("%s: %v", st.Name, err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", st.Name, err)
		}
		read := 0
		for _, line := range plan {
			if m := actual.FindStringSubmatch(line); m != nil && strings.Contains(line, " on inbox_events") {
				n, _ := strconv.Atoi(m[1])
				loops, _ := strconv.Atoi(m[2])
				read = max(read, n*loops)
			}
		}
		if text := strings.Join(plan, "\n"); read > st.Need || strings.Contains(text, "Seq Scan on inbox_events") {
			t.Errorf("%s: a step reads %d inbox rows, want at most %d:\n%s", st.Name, read, st.Need, text)
		}
	}
}
