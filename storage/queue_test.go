package storage_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
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

// queueCase is one leased table, for the tests every queue handle passes
// whatever its table.
type queueCase struct {
	name  string
	table string
	queue func(*storage.Store) *storage.Queue
	// seed makes one item due and returns its id.
	seed func(t *testing.T, s *storage.Store, conn *pgx.Conn) int64
	// complete does the item's work under owner, as its worker would, and
	// says whether owner still held it (the work's own lease check).
	complete func(ctx context.Context, s *storage.Store, id int64, owner string) (held bool, err error)
	// failedItem is the kind of reconciliation item an item failed past
	// its attempts opens; "" for none.
	failedItem string
	// rearms: an item past its attempts opens its item and is put back,
	// never failed (a sweep).
	rearms bool
}

// heldUnless is held, false, for a work that returns ErrLeaseLost when
// owner no longer holds its item.
func heldUnless(err error) (bool, error) {
	if errors.Is(err, worker.ErrLeaseLost) {
		return false, nil
	}
	return err == nil, err
}

// queueCases are the five leased tables.
var queueCases = []queueCase{
	{
		name: "inbox", table: "inbox_work", queue: (*storage.Store).InboxQueue, failedItem: "failed_event",
		seed: func(t *testing.T, s *storage.Store, conn *pgx.Conn) int64 {
			insertPaidOrder(t, s, "evt_1")
			return int64(count(t, conn, "SELECT id FROM inbox_events WHERE event_id = 'evt_1'"))
		},
		complete: func(ctx context.Context, s *storage.Store, id int64, owner string) (bool, error) {
			outs, err := s.InboxProcess(ctx, []int64{id}, owner)
			return len(outs) == 1, err
		},
	},
	{
		name: "outbox", table: "outbox_work", failedItem: "failed_delivery",
		queue: func(s *storage.Store) *storage.Queue { return s.OutboxQueue("crm") },
		seed:  func(t *testing.T, _ *storage.Store, conn *pgx.Conn) int64 { return crmMessage(t, conn, "k1") },
		complete: func(ctx context.Context, s *storage.Store, id int64, owner string) (bool, error) {
			lost, err := s.OutboxRecord(ctx, owner, []fulfillment.MessageAttempt{{ID: id,
				DeliveryAttempt: fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeDelivered, Status: 200, StartedAt: time.Now()}}})
			return err == nil && len(lost) == 0, err
		},
	},
	{
		name: "status poll", table: "payment_polls", queue: (*storage.Store).PollQueue, failedItem: "poll_failing",
		seed: func(t *testing.T, s *storage.Store, conn *pgx.Conn) int64 {
			st := startedPayment(t, s, "m-1", "501")
			// Polls are queued only by a store that polls; this one is told to.
			return int64(count(t, conn, `INSERT INTO payment_polls (start_id, next_attempt_at)
				VALUES ($1, now() - interval '1 second') RETURNING id`, st.ID))
		},
		complete: func(ctx context.Context, s *storage.Store, id int64, owner string) (bool, error) {
			return heldUnless(s.PollRecord(ctx, id, owner, fulfillment.PollAnswer{}, true))
		},
	},
	{
		name: "subscription sweep", table: "subscription_sweeps", queue: (*storage.Store).SweepQueue,
		failedItem: "sweep_failing", rearms: true,
		seed: func(t *testing.T, s *storage.Store, conn *pgx.Conn) int64 {
			// Paid for one month, four months ago: its access has ended.
			pay := fulfillment.SubscriptionEvent{Kind: fulfillment.SubRenewalPaid, OccurredAt: time.Now().AddDate(0, -4, 0), InvoiceID: "inv_1"}
			if _, _, err := s.SubscriptionApply(context.Background(), subRef, pay, "evt", subPlan); err != nil {
				t.Fatal(err)
			}
			return int64(count(t, conn, "SELECT id FROM subscription_sweeps"))
		},
		complete: func(ctx context.Context, s *storage.Store, id int64, owner string) (bool, error) {
			_, err := s.SweepProcess(ctx, id, owner, time.Time{})
			return heldUnless(err)
		},
	},
	{
		name: "housekeeping", table: "housekeeping_tasks", queue: (*storage.Store).HousekeepingQueue,
		seed: func(t *testing.T, _ *storage.Store, conn *pgx.Conn) int64 {
			return int64(count(t, conn, `
				WITH later AS (UPDATE housekeeping_tasks SET next_attempt_at = now() + interval '1 hour'
					WHERE task <> 'raw_body_purge')
				UPDATE housekeeping_tasks SET next_attempt_at = now() - interval '1 second'
				WHERE task = 'raw_body_purge' RETURNING id`))
		},
		complete: func(ctx context.Context, s *storage.Store, id int64, owner string) (bool, error) {
			return heldUnless(s.HousekeepingDone(ctx, id, owner, 0, time.Hour))
		},
	},
}

// eachQueue runs test, its subtests in parallel, for every leased table, on a store
// that has all of them, with one item due.
func eachQueue(t *testing.T, test func(t *testing.T, c queueCase, s *storage.Store, conn *pgx.Conn, q *storage.Queue, id int64)) {
	t.Helper()
	for _, c := range queueCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, conn := newOutboxStore(t)
			// Whatever the test did, a row is leased only while pending:
			// the lease check (leaseHeld) relies on it.
			t.Cleanup(func() {
				if n := count(t, conn, "SELECT count(*) FROM "+c.table+" WHERE lease_owner IS NOT NULL AND state <> 'pending'"); n != 0 {
					t.Errorf("%d rows of %s leased though no longer pending", n, c.table)
				}
			})
			test(t, c, s, conn, c.queue(s), c.seed(t, s, conn))
		})
	}
}

// claimed claims under owner for lease with a budget of maxAttempts.
func claimed(t *testing.T, q *storage.Queue, owner string, lease time.Duration, maxAttempts int, inFlight ...int64) []worker.Claim {
	t.Helper()
	got, err := q.Claim(context.Background(), worker.ClaimParams{Owner: owner, Limit: 10, Lease: lease, MaxAttempts: maxAttempts, InFlight: inFlight})
	if err != nil {
		t.Fatalf("claim by %s: %v", owner, err)
	}
	return got
}

// failedOnce checks that item id of c is failed, its lease cleared and
// its last error like lastError, and that its table's item (if any) was
// opened once.
func failedOnce(t *testing.T, c queueCase, conn *pgx.Conn, id int64, lastError string) {
	t.Helper()
	state := "state = 'failed' AND lease_owner IS NULL"
	if c.rearms {
		state = "state = 'pending'" // put back; a claim may hold it again
	}
	if got := count(t, conn, "SELECT count(*) FROM "+c.table+
		" WHERE id = $1 AND "+state+" AND last_error LIKE $2", id, lastError); got != 1 {
		t.Errorf("items failed (or put back) = %d, want 1", got)
	}
	if got, want := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = $1", c.failedItem), min(len(c.failedItem), 1); got != want {
		t.Errorf("%q items = %d, want %d", c.failedItem, got, want)
	}
	switch c.table {
	case "inbox_work":
		// Its item names the event, its org, environment and provider, under
		// the event's key.
		if got := count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'failed_event'
			AND inbox_event_id = $1 AND org_id = 'org_a' AND environment = 'live' AND provider = 'yolfi'
			AND order_id IS NULL AND subscription_id IS NULL AND dedupe_key = $2`,
			id, fulfillment.ItemKey(fulfillment.ReconFailedEvent, fulfillment.ItemSubject{InboxID: id})); got != 1 {
			t.Errorf("the failed_event item does not name the event, its org, environment and provider under its key")
		}
		// The stored event says the same as its work row.
		if got := count(t, conn, `SELECT count(*) FROM inbox_events e JOIN inbox_work w USING (id)
			WHERE e.id = $1 AND e.state = 'failed' AND e.decision = 'failed' AND e.attempts = w.attempts
				AND e.last_error = w.last_error`, id); got != 1 {
			t.Errorf("the failed event's stored row does not record its attempts and last error as its work row does")
		}
	case "outbox_work":
		// So does the message.
		if got := count(t, conn, `SELECT count(*) FROM outbox_messages m JOIN outbox_work w USING (id)
			WHERE m.id = $1 AND m.state = 'failed' AND m.processed_at IS NOT NULL AND m.attempts = w.attempts
				AND m.last_error = w.last_error`, id); got != 1 {
			t.Errorf("the failed message does not record its attempts and last error as its work row does")
		}
	case "subscription_sweeps":
		// Its item names the subscription, under its key.
		if got := count(t, conn, `SELECT count(*) FROM reconciliation_items i JOIN subscriptions s ON s.id = i.subscription_id
			JOIN subscription_sweeps w ON w.subscription_id = s.id
			WHERE i.kind = 'sweep_failing' AND w.id = $1 AND i.org_id = 'org_a' AND i.provider = 'yolfi'
				AND i.dedupe_key = 'sweep|' || s.id || '|' || s.periods`, id); got != 1 {
			t.Errorf("the sweep_failing item does not name the subscription, its org and provider under its key")
		}
	}
}

// claimedAfterItsAttempts checks what a claim got after the item used its
// attempts: nothing, or, for a table that puts items back, the item at its
// first attempt again when it is due (abandoned, it is due an hour later).
func claimedAfterItsAttempts(t *testing.T, c queueCase, got []worker.Claim, id int64, due bool) {
	t.Helper()
	if c.rearms && due {
		if len(got) != 1 || got[0].ID != id || got[0].Attempts != 1 {
			t.Errorf("claim of an item put back = %v; want it at its first attempt", got)
		}
		return
	}
	if len(got) != 0 {
		t.Errorf("a failed item was claimed again: %v", got)
	}
}

// retryOne records one failed attempt at c, due again at next, and says
// whether it failed it; ErrLeaseLost when owner no longer held c.
func retryOne(ctx context.Context, q *storage.Queue, owner string, c worker.Claim, cause string, next time.Time, maxAttempts int) (bool, error) {
	outcomes, err := q.Retry(ctx, owner, []worker.Retry{{Claim: c, Cause: cause, Next: next}}, maxAttempts)
	switch {
	case err != nil:
		return false, err
	case len(outcomes) != 1:
		return false, fmt.Errorf("%d outcomes of one attempt", len(outcomes))
	case outcomes[0] == worker.RetryLost:
		return false, fmt.Errorf("item %d: %w", c.ID, worker.ErrLeaseLost)
	}
	return outcomes[0] == worker.RetryFailed, nil
}

// The failed attempts of a batch are recorded in one transaction, each
// with its own cause and due time: those still leased to the owner
// scheduled, or failed (with their item) past the budget; one another
// owner took left as it was. A destination that is down costs a commit per
// batch, not per message.
func TestQueueRetryRecordsABatchInOneTransaction(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	const n = 20
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = crmMessage(t, conn, fmt.Sprintf("k%d", i))
	}
	q := s.OutboxQueue("crm")
	claims, err := q.Claim(ctx, worker.ClaimParams{Owner: "w", Limit: n, Lease: time.Hour, MaxAttempts: 3})
	if err != nil || len(claims) != n {
		t.Fatalf("claim = %d, %v; want %d", len(claims), err, n)
	}
	// The first and the last have used their budget; the second was taken
	// by another owner.
	if _, err := conn.Exec(ctx, "UPDATE outbox_work SET attempts = 3 WHERE id IN ($1, $2)", claims[0].ID, claims[n-1].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "UPDATE outbox_work SET lease_owner = 'other' WHERE id = $1", claims[1].ID); err != nil {
		t.Fatal(err)
	}
	base := time.Now().Add(time.Hour).Truncate(time.Second)
	rs := make([]worker.Retry, n)
	for i, c := range claims {
		rs[i] = worker.Retry{Claim: c, Cause: fmt.Sprintf("HTTP 503 (%d)", i), Next: base.Add(time.Duration(i) * time.Second)}
	}
	// A cause a text column refuses (a NUL byte, invalid UTF-8) is stored
	// cleaned, not refused with the batch. The attempts come in any order.
	rs[3].Cause = "HTTP 503 \x00and \xff"
	slices.Reverse(rs)
	outcomes, err := q.Retry(ctx, "w", rs, 3)
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(rs)
	slices.Reverse(outcomes)
	rs[3].Cause = "HTTP 503 and \uFFFD"
	want := slices.Repeat([]worker.RetryOutcome{worker.RetryScheduled}, n)
	want[0], want[1], want[n-1] = worker.RetryFailed, worker.RetryLost, worker.RetryFailed
	if !slices.Equal(outcomes, want) {
		t.Fatalf("outcomes %v, want %v", outcomes, want)
	}
	for i, c := range claims[2 : n-1] {
		i += 2
		if got := count(t, conn, `SELECT count(*) FROM outbox_work WHERE id = $1 AND state = 'pending'
			AND lease_owner IS NULL AND last_error = $2 AND next_attempt_at = $3`, c.ID, rs[i].Cause, rs[i].Next); got != 1 {
			t.Errorf("item %d is not pending, unleased, with its own cause and due time", i)
		}
	}
	if got := count(t, conn, "SELECT count(*) FROM outbox_work WHERE id = $1 AND lease_owner = 'other' AND last_error IS NULL", claims[1].ID); got != 1 {
		t.Error("the item another owner took was changed")
	}
	// Each item past its budget is failed, its message too, with an item
	// of its own that gives its destination and its last cause.
	for _, i := range []int{0, n - 1} {
		detail := fmt.Sprintf("delivery to crm failed 3 times; last error: %s", rs[i].Cause)
		if got := count(t, conn, `SELECT count(*) FROM reconciliation_items r
			JOIN outbox_messages m ON m.id = r.outbox_message_id AND m.state = 'failed'
			JOIN outbox_work w ON w.id = m.id AND w.state = 'failed'
			WHERE r.kind = 'failed_delivery' AND r.outbox_message_id = $1 AND r.detail = $2
				AND r.org_id = 'org_a' AND r.environment = 'live'`, claims[i].ID, detail); got != 1 {
			t.Errorf("item %d past its budget: %d failed messages with a failed_delivery item %q, want 1", i, got, detail)
		}
	}
	// One transaction wrote them all: the items and the rows share their xmin.
	if got := count(t, conn, `SELECT count(DISTINCT x) FROM (
			SELECT xmin::text AS x FROM outbox_work WHERE id = ANY($1) AND id <> $2
			UNION ALL SELECT xmin::text FROM reconciliation_items WHERE outbox_message_id = ANY($3)) w`,
		ids, claims[1].ID, []int64{claims[0].ID, claims[n-1].ID}); got != 1 {
		t.Errorf("the batch's attempts were recorded by %d transactions, want 1", got)
	}
	// A claim given twice is refused.
	if _, err := q.Retry(ctx, "w", []worker.Retry{rs[2], rs[2]}, 3); err == nil {
		t.Error("a claim given twice was recorded")
	}
}

// A live worker keeps its claim past the lease, however long it holds the
// item: no claim or reclaim takes it, and it completes the item, which is
// then done.
func TestQueueLiveOwnerKeepsClaimPastLease(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, c queueCase, s *storage.Store, _ *pgx.Conn, q *storage.Queue, id int64) {
		ctx := context.Background()
		_, a, _ := live(t, s)
		if got := claimed(t, q, a, time.Second, 10); len(got) != 1 || got[0].ID != id {
			t.Fatalf("claim A = %v, want item %d", got, id)
		}
		time.Sleep(2 * time.Second) // the lease runs out; A is still alive
		_, b, _ := live(t, s)
		if got := claimed(t, q, b, time.Minute, 10); len(got) != 0 {
			t.Fatalf("B claims a live worker's item past its lease: %v", got)
		}
		if n, err := q.Reclaim(ctx); err != nil || n != 0 {
			t.Fatalf("reclaim took %d items of a live worker (%v), want 0", n, err)
		}
		if held, err := c.complete(ctx, s, id, a); err != nil || !held {
			t.Fatalf("A completes past its lease: held %v, %v", held, err)
		}
		if got := claimed(t, q, b, time.Minute, 10); len(got) != 0 {
			t.Errorf("a completed item claimed again: %v", got)
		}
	})
}

// A live owner takes back its own claim whose lease ran out when none of
// its workers holds it (a retry that failed to record, a claim whose answer
// was lost) — never one a worker still holds.
func TestQueueLiveOwnerTakesBackWhatItLostTrackOf(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, _ queueCase, s *storage.Store, _ *pgx.Conn, q *storage.Queue, id int64) {
		_, a, _ := live(t, s)
		if got := claimed(t, q, a, 200*time.Millisecond, 10); len(got) != 1 {
			t.Fatalf("claim = %v", got)
		}
		if got := claimed(t, q, a, time.Minute, 10); len(got) != 0 {
			t.Fatalf("its own claim taken back inside its lease: %v", got)
		}
		time.Sleep(400 * time.Millisecond) // the lease runs out
		if got := claimed(t, q, a, time.Minute, 10, id); len(got) != 0 {
			t.Fatalf("a claim one of its workers holds taken back: %v", got)
		}
		if got := claimed(t, q, a, time.Minute, 10); len(got) != 1 || got[0].ID != id || got[0].Attempts != 2 {
			t.Fatalf("a claim it lost track of: %v; want it back at attempt 2", got)
		}
	})
}

// When an owner stops being live, its claims are free at once, whatever
// the lease; it can then neither complete nor reschedule them, and the
// owner that claims them next completes them.
func TestQueueDeadOwnerReclaimedAtOnce(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, c queueCase, s *storage.Store, _ *pgx.Conn, q *storage.Queue, id int64) {
		ctx := context.Background()
		_, a, stopA := live(t, s)
		if got := claimed(t, q, a, time.Hour, 10); len(got) != 1 {
			t.Fatalf("claim A = %v", got)
		}
		_, b, _ := live(t, s)
		if n, err := q.Reclaim(ctx); err != nil || n != 0 {
			t.Fatalf("reclaim while A lives = %d, %v; want 0", n, err)
		}
		stopA() // A's session ends: its lock is gone as soon as the server sees it
		deadline := time.Now().Add(5 * time.Second)
		for {
			n, err := q.Reclaim(ctx)
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
		if got := claimed(t, q, b, time.Hour, 10); len(got) != 1 || got[0].Attempts != 2 {
			t.Fatalf("claim B = %v; want the item at attempt 2", got)
		}
		if held, err := c.complete(ctx, s, id, a); err != nil || held {
			t.Errorf("dead A completes: held %v, %v; want its lease lost", held, err)
		}
		if _, err := retryOne(ctx, q, a, worker.Claim{ID: id}, "late", time.Now(), 10); !errors.Is(err, worker.ErrLeaseLost) {
			t.Errorf("dead A reschedules: %v, want ErrLeaseLost", err)
		}
		if held, err := c.complete(ctx, s, id, b); err != nil || !held {
			t.Errorf("B completes: held %v, %v", held, err)
		}
	})
}

// A claim whose lease ran out is taken from an owner that never was live
// (or died) at the claim itself, without a reclaim.
func TestQueueClaimTakesExpiredLeaseOfDeadOwner(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, _ queueCase, s *storage.Store, _ *pgx.Conn, q *storage.Queue, _ int64) {
		if got := claimed(t, q, "gone", 10*time.Millisecond, 10); len(got) != 1 {
			t.Fatalf("claim = %v", got)
		}
		time.Sleep(20 * time.Millisecond)
		_, b, _ := live(t, s)
		if got := claimed(t, q, b, time.Hour, 10); len(got) != 1 || got[0].Attempts != 2 {
			t.Fatalf("claim B = %v; want the item at attempt 2", got)
		}
	})
}

// A worker that lost its liveness while it held its items locked in a
// transaction still commits them: reclaim skips locked rows.
func TestQueueReclaimSkipsItemsBeingProcessed(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, c queueCase, _ *storage.Store, conn *pgx.Conn, q *storage.Queue, _ int64) {
		ctx := context.Background()
		if got := claimed(t, q, "lost", time.Hour, 10); len(got) != 1 {
			t.Fatalf("claim = %v", got)
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, "SELECT id FROM "+c.table+" WHERE lease_owner = 'lost' FOR UPDATE"); err != nil {
			t.Fatal(err)
		}
		if n, err := q.Reclaim(ctx); err != nil || n != 0 {
			t.Fatalf("reclaim of a locked item = %d, %v; want 0, at once", n, err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := q.Reclaim(ctx); err != nil || n != 1 {
			t.Fatalf("reclaim after the transaction = %d, %v; want 1", n, err)
		}
	})
}

// An item that fails every attempt is retried until it has used its
// attempts, then failed — with its table's item, once — and never claimed
// again.
func TestQueueRetryBudget(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, c queueCase, _ *storage.Store, conn *pgx.Conn, q *storage.Queue, id int64) {
		ctx := context.Background()
		for attempt := 1; attempt <= 3; attempt++ {
			got := claimed(t, q, "w", time.Minute, 3)
			if len(got) != 1 || got[0].Attempts != attempt {
				t.Fatalf("attempt %d: claim = %v", attempt, got)
			}
			failed, err := retryOne(ctx, q, "w", got[0], fmt.Sprintf("boom %d", attempt), time.Now(), 3)
			if err != nil || failed != (attempt == 3 && !c.rearms) {
				t.Fatalf("attempt %d: failed = %v, %v", attempt, failed, err)
			}
		}
		failedOnce(t, c, conn, id, "boom 3")
		claimedAfterItsAttempts(t, c, claimed(t, q, "w", time.Minute, 3), id, true)
	})
}

// An attempt that failed for an outage of the database (Uncounted) does not
// use the item's budget: however many there are, the item is due again at
// its time, its claim not counted, never failed and with no item opened;
// the counted attempts after them fail it as before.
func TestQueueRetryUncounted(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, c queueCase, _ *storage.Store, conn *pgx.Conn, q *storage.Queue, id int64) {
		ctx := context.Background()
		for round := 1; round <= 5; round++ {
			got := claimed(t, q, "w", time.Minute, 2)
			if len(got) != 1 || got[0].Attempts != 1 {
				t.Fatalf("claim %d after uncounted attempts = %v; want the item at its first attempt", round, got)
			}
			next := time.Now().Add(-time.Second)
			if round == 5 {
				next = time.Now().Add(time.Hour)
			}
			outcomes, err := q.Retry(ctx, "w", []worker.Retry{{Claim: got[0], Cause: "database down", Next: next, Uncounted: true}}, 2)
			if err != nil || len(outcomes) != 1 || outcomes[0] != worker.RetryScheduled {
				t.Fatalf("uncounted attempt %d: %v, %v; want it scheduled", round, outcomes, err)
			}
		}
		if got := count(t, conn, "SELECT count(*) FROM "+c.table+` WHERE id = $1 AND state = 'pending' AND attempts = 0
			AND lease_owner IS NULL AND next_attempt_at > now() + interval '59 minutes' AND last_error = 'database down'`, id); got != 1 {
			t.Errorf("after uncounted attempts, the item is not pending at its due time with no attempt used")
		}
		if got := count(t, conn, "SELECT count(*) FROM reconciliation_items"); got != 0 {
			t.Errorf("%d items opened for uncounted attempts, want 0", got)
		}
		if len(claimed(t, q, "w", time.Minute, 2)) != 0 {
			t.Error("an item not due yet was claimed")
		}
		if _, err := conn.Exec(ctx, "UPDATE "+c.table+" SET next_attempt_at = now() WHERE id = $1", id); err != nil {
			t.Fatal(err)
		}
		// A counted attempt, then at its last attempt an uncounted one,
		// which leaves it one attempt; then the counted last.
		got := claimed(t, q, "w", time.Minute, 2)
		if failed, err := retryOne(ctx, q, "w", got[0], "boom 1", time.Now(), 2); len(got) != 1 || got[0].Attempts != 1 || failed || err != nil {
			t.Fatalf("counted attempt 1: claim %v, failed %v, %v", got, failed, err)
		}
		got = claimed(t, q, "w", time.Minute, 2)
		if len(got) != 1 || got[0].Attempts != 2 {
			t.Fatalf("claim at the last attempt = %v", got)
		}
		outcomes, err := q.Retry(ctx, "w", []worker.Retry{{Claim: got[0], Cause: "database down", Next: time.Now(), Uncounted: true}}, 2)
		if err != nil || len(outcomes) != 1 || outcomes[0] != worker.RetryScheduled {
			t.Fatalf("uncounted attempt at the last attempt: %v, %v; want it scheduled", outcomes, err)
		}
		got = claimed(t, q, "w", time.Minute, 2)
		if len(got) != 1 || got[0].Attempts != 2 {
			t.Fatalf("claim after an uncounted last attempt = %v; want its last attempt again", got)
		}
		if failed, err := retryOne(ctx, q, "w", got[0], "boom 2", time.Now(), 2); err != nil || failed != !c.rearms {
			t.Fatalf("counted last attempt: failed = %v, %v", failed, err)
		}
		failedOnce(t, c, conn, id, "boom 2")
	})
}

// An item whose worker dies during every attempt (Retry never runs) is
// reclaimed at once each time, and failed by the claim once it has used its
// attempts, with its table's item.
func TestQueueReclaimedItemFailsPastItsAttempts(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, c queueCase, _ *storage.Store, conn *pgx.Conn, q *storage.Queue, id int64) {
		ctx := context.Background()
		for attempt := 1; attempt <= 3; attempt++ {
			if got := claimed(t, q, fmt.Sprintf("dies-%d", attempt), time.Hour, 3); len(got) != 1 || got[0].Attempts != attempt {
				t.Fatalf("attempt %d: claim = %v", attempt, got)
			}
			if n, err := q.Reclaim(ctx); err != nil || n != 1 {
				t.Fatalf("attempt %d: reclaim = %d, %v; want 1", attempt, n, err)
			}
		}
		claimedAfterItsAttempts(t, c, claimed(t, q, "w", time.Hour, 3), id, false)
		failedOnce(t, c, conn, id, "abandoned%")
		if c.rearms {
			if n := count(t, conn, "SELECT count(*) FROM "+c.table+` WHERE id = $1 AND next_attempt_at > now() + interval '50 minutes'`, id); n != 1 {
				t.Errorf("the abandoned item put back is not due an hour later")
			}
		}
		if c.table == "inbox_work" || c.table == "outbox_work" {
			if got := count(t, conn, `SELECT count(*) FROM reconciliation_items
				WHERE detail LIKE '%did not complete in 3 attempts (the worker stopped during each)'`); got != 1 {
				t.Errorf("the %s item does not say that no attempt completed", c.failedItem)
			}
		}
	})
}

// Released claims are due again at once, their claim not counted as an
// attempt, and leased to nobody.
func TestQueueRelease(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, c queueCase, _ *storage.Store, conn *pgx.Conn, q *storage.Queue, _ int64) {
		if got := claimed(t, q, "leaving", time.Hour, 10); len(got) != 1 {
			t.Fatalf("claim = %v", got)
		}
		if n, err := q.Release(context.Background(), "leaving"); err != nil || n != 1 {
			t.Fatalf("released %d, %v; want 1", n, err)
		}
		if got := count(t, conn, "SELECT count(*) FROM "+c.table+" WHERE lease_owner = 'leaving'"); got != 0 {
			t.Errorf("%d items still leased to the released owner", got)
		}
		if got := claimed(t, q, "next", time.Hour, 10); len(got) != 1 || got[0].Attempts != 1 {
			t.Fatalf("claim after release = %v; want the item at attempt 1", got)
		}
	})
}

// Claims handed back by id are due again at once, their claim not counted,
// and leased to nobody; a claim another owner holds is left alone.
func TestQueueReleaseClaims(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, c queueCase, _ *storage.Store, conn *pgx.Conn, q *storage.Queue, id int64) {
		if got := claimed(t, q, "leaving", time.Hour, 10); len(got) != 1 {
			t.Fatalf("claim = %v", got)
		}
		if err := q.ReleaseClaims(context.Background(), "someone else", []int64{id}); err != nil {
			t.Fatal(err)
		}
		if got := count(t, conn, "SELECT count(*) FROM "+c.table+" WHERE lease_owner = 'leaving'"); got != 1 {
			t.Fatalf("%d items leased to their owner after another's hand-back, want 1", got)
		}
		if err := q.ReleaseClaims(context.Background(), "leaving", []int64{id}); err != nil {
			t.Fatal(err)
		}
		if got := count(t, conn, "SELECT count(*) FROM "+c.table+" WHERE lease_owner IS NOT NULL"); got != 0 {
			t.Errorf("%d items still leased after the hand-back", got)
		}
		if got := claimed(t, q, "next", time.Hour, 10); len(got) != 1 || got[0].Attempts != 1 {
			t.Fatalf("claim after the hand-back = %v; want the item at attempt 1", got)
		}
	})
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
	if got, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: a, Limit: 10, Lease: time.Hour, MaxAttempts: 10}); err != nil || len(got) != 1 {
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
	if n, err := s.InboxQueue().Reclaim(ctx); err != nil || n != 1 {
		t.Fatalf("reclaim of the lost owner's event = %d, %v; want 1", n, err)
	}
	if got, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: b, Limit: 10, Lease: time.Hour, MaxAttempts: 10}); err != nil || len(got) != 1 {
		t.Fatalf("claim under the new owner = %v, %v", got, err)
	}
}

// The claim and reclaim statements, which run all the time, read the rows
// they need, never the backlog of due events, the failed ones nor the
// processed history.
func TestQueueStatementsReadOnlyWhatTheyNeed(t *testing.T) {
	t.Parallel()
	_, conn := newStore(t)
	ctx := context.Background()
	// 10,000 processed events, 10,000 due, 40 leased to an owner that is
	// gone, and 500 the queue failed.
	_, err := conn.Exec(ctx, `
		INSERT INTO inbox_events (provider, endpoint_id, org_id, environment, event_id, event_type, kind, test_mode,
			raw_body, state, decision, processed_at)
		SELECT 'yolfi', 'ep', 'org_a', 'live', 'evt_' || i, 'payment.confirmed', 'payment_confirmed', false, '{}',
			CASE WHEN i <= 10000 THEN 'processed' WHEN i > 20040 THEN 'failed' ELSE 'pending' END,
			CASE WHEN i <= 10000 THEN 'fulfilled' WHEN i > 20040 THEN 'failed' END,
			CASE WHEN i <= 10000 OR i > 20040 THEN now() END
		FROM generate_series(1, 20540) i;
		INSERT INTO inbox_work (id, state, next_attempt_at, lease_owner, lease_until)
		SELECT id, CASE WHEN id > 20040 THEN 'failed' ELSE 'pending' END,
			CASE WHEN id BETWEEN 20001 AND 20040 THEN now() + interval '1 hour' ELSE now() - interval '1 minute' END,
			CASE WHEN id BETWEEN 20001 AND 20040 THEN 'gone' END,
			CASE WHEN id BETWEEN 20001 AND 20040 THEN now() + interval '1 hour' END
		FROM inbox_events WHERE state <> 'processed';
		ANALYZE inbox_events, inbox_work`)
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
			if m := actual.FindStringSubmatch(line); m != nil && (strings.Contains(line, " on inbox_events") || strings.Contains(line, " on inbox_work")) {
				n, _ := strconv.Atoi(m[1])
				loops, _ := strconv.Atoi(m[2])
				read = max(read, n*loops)
			}
		}
		if text := strings.Join(plan, "\n"); read > st.Need || strings.Contains(text, "Seq Scan on inbox_") {
			t.Errorf("%s: a step reads %d inbox rows, want at most %d:\n%s", st.Name, read, st.Need, text)
		}
	}
}

// A claim that finds an abandoned row leases nothing until the row is
// failed: when failing it errors (here a trigger refusing the message's
// update once), the claim returns the error and the healthy row behind it
// keeps its attempts, unleased; the next claim fails the abandoned row,
// with its item, and leases the healthy one.
func TestQueueClaimLosesNoLeaseWhenFailingAbandonedFails(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	abandoned, healthy := crmMessage(t, conn, "abandoned"), crmMessage(t, conn, "healthy")
	if _, err := conn.Exec(ctx, `UPDATE outbox_work SET attempts = 3, next_attempt_at = now() - interval '2 minutes' WHERE id = $1`, abandoned); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE outbox_work SET attempts = 2, last_error = 'HTTP 503', next_attempt_at = now() - interval '1 minute' WHERE id = $1`, healthy); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `
		CREATE TABLE refusals (n int); INSERT INTO refusals VALUES (1);
		CREATE FUNCTION refuse_once() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF (SELECT n FROM refusals) > 0 THEN RAISE EXCEPTION 'refused once'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_once BEFORE UPDATE ON outbox_messages FOR EACH ROW EXECUTE FUNCTION refuse_once()`); err != nil {
		t.Fatal(err)
	}
	q := s.OutboxQueue("crm")
	params := worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Hour, MaxAttempts: 3}
	if got, err := q.Claim(ctx, params); err == nil || len(got) != 0 {
		t.Fatalf("claim while failing the abandoned row errs = %v, %v; want no claims and the error", got, err)
	}
	if n := count(t, conn, `SELECT count(*) FROM outbox_work WHERE id = $1 AND lease_owner IS NULL AND attempts = 2`, healthy); n != 1 {
		t.Fatalf("the healthy row was leased (or its attempt counted) by a claim that returned an error")
	}
	if n := count(t, conn, `SELECT count(*) FROM outbox_work WHERE state = 'failed'`); n != 0 {
		t.Fatalf("%d rows failed by a claim that returned an error", n)
	}
	if _, err := conn.Exec(ctx, `UPDATE refusals SET n = 0`); err != nil {
		t.Fatal(err)
	}
	got, err := q.Claim(ctx, params)
	if err != nil || len(got) != 1 || got[0].ID != healthy || got[0].Attempts != 3 {
		t.Fatalf("claim = %v, %v; want the healthy message at its third attempt", got, err)
	}
	wantCounts(t, conn, []countCheck{
		{"failed abandoned rows", `SELECT count(*) FROM outbox_work WHERE state = 'failed' AND id = $1`, 1},
		{"its failed_delivery items", `SELECT count(*) FROM reconciliation_items WHERE kind = 'failed_delivery' AND outbox_message_id = $1`, 1},
	}, abandoned)
}

// Replicas whose workers die during every attempt race over one item: once
// it has used its attempts, several claims find it abandoned at once, and
// it is failed once, with its table's item once.
func TestQueueAbandonedItemFailedOnceByRacingClaims(t *testing.T) {
	t.Parallel()
	eachQueue(t, func(t *testing.T, c queueCase, _ *storage.Store, conn *pgx.Conn, q *storage.Queue, id int64) {
		ctx := context.Background()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 30 {
					// Each claim's owner is gone at once: its claims are due
					// again when their millisecond lease runs out.
					_, err := q.Claim(ctx, worker.ClaimParams{Owner: fmt.Sprintf("dies-%d-%d", g, i), Limit: 10,
						Lease: time.Millisecond, MaxAttempts: 3})
					if err != nil {
						t.Error(err)
						return
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
		wg.Wait()
		if got := claimed(t, q, "w", time.Hour, 3); len(got) != 0 && !c.rearms {
			t.Fatalf("claim after the race = %v; want nothing", got)
		}
		// Failed twice, its last error would say "abandoned" twice (put
		// back round after round, it says so once).
		failedOnce(t, c, conn, id, "abandoned: no attempt completed")
	})
}

// An event failed past its attempts opens a failed_event item; its
// attempts' retries open no second one. Replayed, it is a new round: failed
// again, it opens an item of its own — whether the first was resolved
// (the person replayed, resolved, and moved on: nothing else would tell
// them, the alert is on open items) or not.
func TestQueueEventFailedAgainAfterAReplayOpensAnItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := newOutboxStore(t)
	q := s.InboxQueue()
	id := queueCases[0].seed(t, s, conn)
	failRound := func(round int) { t.Helper(); failItemRound(t, q, id, round) }
	items := func() (open, all int) {
		t.Helper()
		return count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'failed_event' AND inbox_event_id = $1 AND state = 'open'`, id),
			count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'failed_event' AND inbox_event_id = $1`, id)
	}
	replay := func() {
		t.Helper()
		if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: id, Actor: "ops"}); err != nil {
			t.Fatal(err)
		}
	}

	failRound(1)
	if open, all := items(); open != 1 || all != 1 {
		t.Fatalf("failed once: %d open items of %d, want 1 of 1", open, all)
	}
	first := count(t, conn, `SELECT id FROM reconciliation_items WHERE kind = 'failed_event' AND inbox_event_id = $1`, id)
	if _, err := s.ReconResolve(ctx, fulfillment.ReconResolve{ID: int64(first), Resolution: fulfillment.ResolutionRetried,
		Note: "replayed", Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	replay()
	failRound(2)
	if open, all := items(); open != 1 || all != 2 {
		t.Fatalf("failed again after a replay, its first item resolved: %d open items of %d, want 1 of 2", open, all)
	}
	if got := count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'failed_event' AND inbox_event_id = $1
		AND state = 'open' AND detail LIKE '%boom 2.2%'`, id); got != 1 {
		t.Error("the new item does not say the new round's last error")
	}
	// Replayed again with its item still open, and failed: one more.
	replay()
	failRound(3)
	if open, all := items(); open != 2 || all != 3 {
		t.Fatalf("failed a third time, the second item open: %d open items of %d, want 2 of 3", open, all)
	}
}

// failItemRound fails item id's round of two attempts, whatever its queue q
// (round numbers its errors, "boom <round>.<attempt>").
func failItemRound(t *testing.T, q *storage.Queue, id int64, round int) {
	t.Helper()
	for attempt := 1; attempt <= 2; attempt++ {
		got := claimed(t, q, "w", time.Minute, 2)
		if len(got) != 1 || got[0].ID != id {
			t.Fatalf("round %d, attempt %d: claim = %v", round, attempt, got)
		}
		if _, err := retryOne(context.Background(), q, "w", got[0], fmt.Sprintf("boom %d.%d", round, attempt), time.Now(), 2); err != nil {
			t.Fatalf("round %d, attempt %d: %v", round, attempt, err)
		}
	}
}

// processInbox claims what the inbox has due and processes it, as its
// worker would, and returns the outcomes by event id.
func processInbox(t *testing.T, s *storage.Store) map[int64]fulfillment.Outcome {
	t.Helper()
	got := claimed(t, s.InboxQueue(), "w", time.Minute, 2)
	ids := make([]int64, len(got))
	for i, c := range got {
		ids[i] = c.ID
	}
	outs, err := s.InboxProcess(context.Background(), ids, "w")
	if err != nil {
		t.Fatal(err)
	}
	return outs
}

// A failed event that a person replays, once decided, answers its
// failed_event items: the service resolves every open one (the rounds
// before, resolved by hand or not) as retried, saying what the event was
// decided. It pays its order once, and a second replay changes nothing.
func TestQueueEventReplayedAndDecidedResolvesItsFailedItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := newOutboxStore(t)
	q := s.InboxQueue()
	id := queueCases[0].seed(t, s, conn)
	replay := func() {
		t.Helper()
		if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: id, Actor: "ops"}); err != nil {
			t.Fatal(err)
		}
	}
	failItemRound(t, q, id, 1)
	replay()
	failItemRound(t, q, id, 2)
	if got := count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'failed_event' AND inbox_event_id = $1 AND state = 'open'`, id); got != 2 {
		t.Fatalf("open failed_event items after two failed rounds = %d, want 2", got)
	}
	// An item of another kind about the event stays as it is.
	other := count(t, conn, `INSERT INTO reconciliation_items (kind, state, org_id, environment, provider, inbox_event_id, dedupe_key, detail)
		VALUES ('unidentified_payment', 'open', 'org_a', 'live', 'yolfi', $1, 'test|other', 'another question') RETURNING id`, id)
	replay()
	if outs := processInbox(t, s); outs[id].Decision != fulfillment.DecisionFulfilled {
		t.Fatalf("replayed event decided %+v, want fulfilled", outs[id])
	}
	wantCounts(t, conn, []countCheck{
		{"open failed_event items", `SELECT count(*) FROM reconciliation_items WHERE kind = 'failed_event' AND inbox_event_id = $1 AND state = 'open'`, 0},
		{"failed_event items resolved by the service as retried, naming the decision", `SELECT count(*) FROM reconciliation_items
			WHERE kind = 'failed_event' AND inbox_event_id = $1 AND state = 'resolved' AND resolution = 'retried'
				AND resolved_by = 'service' AND resolved_at IS NOT NULL AND resolution_note LIKE '%decided fulfilled%'`, 2},
		{"the other item, still open", `SELECT count(*) FROM reconciliation_items WHERE inbox_event_id = $1 AND state = 'open'
			AND kind = 'unidentified_payment'`, 1},
		{"attempts of its order", `SELECT count(*) FROM payment_attempts a JOIN orders o ON o.id = a.order_id
			WHERE o.merchant_order_id = 'm-evt_1' AND $1::bigint > 0`, 1},
	}, id)
	grants := count(t, conn, `SELECT count(*) FROM entitlements`)
	if grants == 0 {
		t.Fatal("the replayed payment granted nothing")
	}
	var resolvedAt time.Time
	if err := conn.QueryRow(ctx, `SELECT max(resolved_at) FROM reconciliation_items WHERE kind = 'failed_event'`).Scan(&resolvedAt); err != nil {
		t.Fatal(err)
	}
	// Replayed again: already applied, nothing granted, no item touched.
	replay()
	if outs := processInbox(t, s); outs[id].Decision != fulfillment.DecisionAlreadyApplied {
		t.Fatalf("second replay decided %+v, want already_applied", outs[id])
	}
	wantCounts(t, conn, []countCheck{
		{"grants after the second replay", `SELECT count(*) FROM entitlements WHERE $1::timestamptz IS NOT NULL`, grants},
		{"items resolved again", `SELECT count(*) FROM reconciliation_items WHERE resolved_at > $1`, 0},
	}, resolvedAt)
	if got := count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE id = $1 AND state = 'open'`, other); got != 1 {
		t.Error("the item of another kind about the event was resolved")
	}
}

// A failed event replayed after another event applied its payment is
// decided already_applied: the stored event says so (not "failed", the
// decision it had), and its failed_event item is resolved.
func TestQueueFailedEventReplayedFoundAppliedSaysSo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := newOutboxStore(t)
	q := s.InboxQueue()
	id := queueCases[0].seed(t, s, conn)
	failItemRound(t, q, id, 1)
	// The same payment, announced again under another event id.
	again := confirmedEvent("evt_1", "m-evt_1")
	again.EventID = "evt_1_again"
	if _, err := s.InboxInsert(ctx, again, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if outs := processInbox(t, s); len(outs) != 1 {
		t.Fatalf("processed %v, want the second announcement alone", outs)
	}
	if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: id, Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	if outs := processInbox(t, s); outs[id].Decision != fulfillment.DecisionAlreadyApplied {
		t.Fatalf("replayed event decided %+v, want already_applied", outs[id])
	}
	wantCounts(t, conn, []countCheck{
		{"the replayed event, processed and already applied", `SELECT count(*) FROM inbox_events
			WHERE id = $1 AND state = 'processed' AND decision = 'already_applied' AND last_error IS NULL`, 1},
		{"its open failed_event items", `SELECT count(*) FROM reconciliation_items WHERE inbox_event_id = $1 AND state = 'open'`, 0},
		{"attempts", `SELECT count(*) FROM payment_attempts WHERE $1::bigint > 0`, 1},
	}, id)
}

// A payment decided unmatched that a person replays once its order exists
// (created too late for the late match to queue it again) and that
// matches now answers its unmatched_payment item: the service resolves it
// as retried. Decided unmatched again, the item would stay open.
func TestQueueUnmatchedPaymentReplayedAndMatchedResolvesItsItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn, id, replay := paymentBeforeItsOrder(t)
	open := func() int {
		t.Helper()
		return count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment'
			AND inbox_event_id = $1 AND state = 'open'`, id)
	}
	if outs := processInbox(t, s); outs[id].Decision != fulfillment.DecisionUnmatched {
		t.Fatalf("decided %+v, want unmatched", outs[id])
	}
	// Replayed before its order exists: unmatched again, its item open.
	replay()
	if outs := processInbox(t, s); outs[id].Decision != fulfillment.DecisionUnmatched || open() != 1 {
		t.Fatalf("replayed without its order: decided %+v with %d open items, want unmatched with its item", outs[id], open())
	}
	if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-late")); err != nil {
		t.Fatal(err)
	}
	if got := count(t, conn, "SELECT count(*) FROM inbox_work WHERE id = $1", id); got != 0 || open() != 1 {
		t.Fatalf("queued by the order's creation (%d) or its item resolved (%d open): the late match window should have passed", got, open())
	}
	replay()
	if outs := processInbox(t, s); outs[id].Decision != fulfillment.DecisionFulfilled {
		t.Fatalf("replayed with its order: decided %+v, want fulfilled", outs[id])
	}
	wantCounts(t, conn, []countCheck{
		{"open items", `SELECT count(*) FROM reconciliation_items WHERE state = 'open' AND $1::bigint > 0`, 0},
		{"its item, resolved by the service as retried", `SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment'
			AND inbox_event_id = $1 AND state = 'resolved' AND resolution = 'retried' AND resolved_by = 'service'
			AND resolution_note LIKE '%decided fulfilled%'`, 1},
		{"its order's attempts", `SELECT count(*) FROM payment_attempts a JOIN orders o ON o.id = a.order_id
			WHERE o.merchant_order_id = 'm-late' AND $1::bigint > 0`, 1},
	}, id)
}

// A payment decided unmatched, replayed by a person, whose round of
// attempts then failed ("failed" is the decision it records now), and
// replayed again once its order exists, answers its unmatched_payment item
// too once it matches: the item is about the payment, which is paid now,
// not about the decision the round before it recorded.
func TestQueueUnmatchedPaymentFailedThenMatchedResolvesItsItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn, id, replay := paymentBeforeItsOrder(t)
	if outs := processInbox(t, s); outs[id].Decision != fulfillment.DecisionUnmatched {
		t.Fatalf("decided %+v, want unmatched", outs[id])
	}
	replay()
	failItemRound(t, s.InboxQueue(), id, 1)
	if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-late")); err != nil {
		t.Fatal(err)
	}
	replay()
	if outs := processInbox(t, s); outs[id].Decision != fulfillment.DecisionFulfilled {
		t.Fatalf("replayed with its order: decided %+v, want fulfilled", outs[id])
	}
	wantCounts(t, conn, []countCheck{
		{"open items", `SELECT count(*) FROM reconciliation_items WHERE state = 'open' AND $1::bigint > 0`, 0},
		{"its unmatched_payment item, resolved by the service as retried", `SELECT count(*) FROM reconciliation_items
			WHERE kind = 'unmatched_payment' AND inbox_event_id = $1 AND state = 'resolved' AND resolution = 'retried'
				AND resolved_by = 'service' AND resolution_note LIKE '%decided fulfilled%'`, 1},
		{"its failed_event item, resolved by the service as retried", `SELECT count(*) FROM reconciliation_items
			WHERE kind = 'failed_event' AND inbox_event_id = $1 AND state = 'resolved' AND resolution = 'retried'
				AND resolved_by = 'service'`, 1},
		{"its order's attempts", `SELECT count(*) FROM payment_attempts a JOIN orders o ON o.id = a.order_id
			WHERE o.merchant_order_id = 'm-late' AND $1::bigint > 0`, 1},
	}, id)
}

// recordOutcome claims message id and records outcome for it.
func recordOutcome(t *testing.T, s *storage.Store, q *storage.Queue, id int64, outcome fulfillment.DeliveryOutcome, status int) {
	t.Helper()
	got := claimed(t, q, "w", time.Minute, 2)
	if len(got) != 1 || got[0].ID != id {
		t.Fatalf("claim = %v, want message %d", got, id)
	}
	lost, err := s.OutboxRecord(context.Background(), "w", []fulfillment.MessageAttempt{{ID: id,
		DeliveryAttempt: fulfillment.DeliveryAttempt{Outcome: outcome, Status: status, Reason: "test", StartedAt: time.Now()}}})
	if err != nil || len(lost) != 0 {
		t.Fatalf("recording %s: lost %v, %v", outcome, lost, err)
	}
}

// A message a person retries is a new round: failed again (or uncertain
// again), it opens an item of its own, whether the one before was resolved
// or not; delivered, it answers every open item about it, which the
// service resolves as retried. A retry that only hurries a pending message
// is no new round.
func TestOutboxRetriedMessageRoundsAndItsItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := newOutboxStore(t)
	q := s.OutboxQueue("crm")
	id := queueCases[1].seed(t, s, conn)
	retry := func() {
		t.Helper()
		if _, err := s.DeliveryRetry(ctx, id, "ops", false); err != nil {
			t.Fatal(err)
		}
	}
	items := func() (open, all int) {
		t.Helper()
		return count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE outbox_message_id = $1 AND state = 'open'`, id),
			count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE outbox_message_id = $1`, id)
	}
	failItemRound(t, q, id, 1)
	first := count(t, conn, `SELECT id FROM reconciliation_items WHERE kind = 'failed_delivery' AND outbox_message_id = $1`, id)
	if _, err := s.ReconResolve(ctx, fulfillment.ReconResolve{ID: int64(first), Resolution: fulfillment.ResolutionRetried,
		Note: "retried", Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	retry()
	failItemRound(t, q, id, 2)
	if open, all := items(); open != 1 || all != 2 {
		t.Fatalf("failed again after a retry, its first item resolved: %d open items of %d, want 1 of 2", open, all)
	}
	retry()
	recordOutcome(t, s, q, id, fulfillment.OutcomeUncertain, 0)
	if open, all := items(); open != 2 || all != 3 {
		t.Fatalf("uncertain after a second retry: %d open items of %d, want 2 of 3", open, all)
	}
	retry()
	// Hurried while pending: the same round.
	retry()
	recordOutcome(t, s, q, id, fulfillment.OutcomeDelivered, 200)
	wantCounts(t, conn, []countCheck{
		{"open items", `SELECT count(*) FROM reconciliation_items WHERE outbox_message_id = $1 AND state = 'open'`, 0},
		{"items resolved by the service as retried", `SELECT count(*) FROM reconciliation_items WHERE outbox_message_id = $1
			AND state = 'resolved' AND resolution = 'retried' AND resolved_by = 'service' AND resolution_note LIKE '%delivered%'`, 2},
		{"the item a person resolved, as they did", `SELECT count(*) FROM reconciliation_items WHERE outbox_message_id = $1
			AND resolved_by = 'ops'`, 1},
		{"delivered", `SELECT count(*) FROM outbox_messages WHERE id = $1 AND state = 'delivered'`, 1},
		{"attempts recorded", `SELECT count(*) FROM outbox_attempts WHERE message_id = $1`, 2},
	}, id)
	// Sent again after it was delivered, and failed: a round of its own.
	if _, err := s.DeliveryRetry(ctx, id, "ops", true); err != nil {
		t.Fatal(err)
	}
	failItemRound(t, q, id, 4)
	if open, all := items(); open != 1 || all != 4 {
		t.Fatalf("failed after a resend: %d open items of %d, want 1 of 4", open, all)
	}
}

// A person's confirmation that a message was delivered resolves every open
// item about it, whatever round opened it.
func TestOutboxConfirmedResolvesEveryRoundsItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := newOutboxStore(t)
	q := s.OutboxQueue("crm")
	id := queueCases[1].seed(t, s, conn)
	failItemRound(t, q, id, 1)
	if _, err := s.DeliveryRetry(ctx, id, "ops", false); err != nil {
		t.Fatal(err)
	}
	failItemRound(t, q, id, 2)
	if _, err := s.DeliveryConfirm(ctx, fulfillment.DeliveryConfirmation{MessageID: id, Note: "it has it", Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, conn, []countCheck{
		{"items", `SELECT count(*) FROM reconciliation_items WHERE outbox_message_id = $1`, 2},
		{"items resolved as confirmed delivered", `SELECT count(*) FROM reconciliation_items WHERE outbox_message_id = $1
			AND state = 'resolved' AND resolution = 'confirmed_delivered' AND resolved_by = 'ops'`, 2},
	}, id)
}

// Migration 054 counts the retry of a message that a person retried before
// it and that is still pending: its first round's item (key outbox|<id>)
// is there already, so the round it is in opens an item of its own when it
// fails, and answers that item when it is delivered. Uncounted, it opened
// none (the key of the first round's item) and answered none.
func TestMigration054RetriedBeforeIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := newOutboxStore(t)
	q := s.OutboxQueue("crm")
	failing := queueCases[1].seed(t, s, conn)
	failItemRound(t, q, failing, 1)
	delivered := crmMessage(t, conn, "k2")
	failItemRound(t, q, delivered, 1)
	m, _ := migratedBefore(t, conn, "_outbox_retries.sql")
	// Retried as the service did before the migration; the second message
	// is due later, so that the first is claimed alone.
	for _, id := range []int64{failing, delivered} {
		if _, err := conn.Exec(ctx, `
			WITH requeued AS (
				UPDATE outbox_messages SET attempts = 0, processed_at = NULL, state = 'pending', last_error = 'retried by ops'
				WHERE id = $1 AND state = 'failed' RETURNING id
			)
			UPDATE outbox_work w SET state = 'pending', attempts = 0, last_error = NULL, processed_at = NULL,
				next_attempt_at = clock_timestamp() + CASE WHEN w.id = $2 THEN interval '1 hour' ELSE interval '0' END
			FROM requeued r WHERE w.id = r.id`, id, delivered); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.MigrateTo(ctx, int32(len(m.Migrations))); err != nil {
		t.Fatal(err)
	}
	failItemRound(t, q, failing, 2)
	if _, err := conn.Exec(ctx, `UPDATE outbox_work SET next_attempt_at = clock_timestamp() WHERE id = $1`, delivered); err != nil {
		t.Fatal(err)
	}
	recordOutcome(t, s, q, delivered, fulfillment.OutcomeDelivered, 200)
	wantCounts(t, conn, []countCheck{
		{"items of the message failed again", `SELECT count(*) FROM reconciliation_items WHERE outbox_message_id = $1`, 2},
		{"its open items", `SELECT count(*) FROM reconciliation_items WHERE outbox_message_id = $1 AND state = 'open'`, 2},
	}, failing)
	wantCounts(t, conn, []countCheck{
		{"items of the message delivered", `SELECT count(*) FROM reconciliation_items WHERE outbox_message_id = $1`, 1},
		{"its item, resolved by the service as retried", `SELECT count(*) FROM reconciliation_items
			WHERE outbox_message_id = $1 AND state = 'resolved' AND resolution = 'retried' AND resolved_by = 'service'`, 1},
	}, delivered)
}

// Migration 056 resolves the delivery items of messages that were retried
// and delivered before migration 054, whose deliveries left them open: as
// retried by the service, as a delivery does today. The items of messages
// that are not delivered stay open, and an item a person resolved stays as
// the person left it.
func TestMigration056ResolvesItemsOfMessagesDeliveredBeforeIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := newOutboxStore(t)
	q := s.OutboxQueue("crm")
	// One message at a time, so that each claim finds only its own.
	failed := crmMessage(t, conn, "k-failed")
	failItemRound(t, q, failed, 1)
	uncertain := crmMessage(t, conn, "k-uncertain")
	recordOutcome(t, s, q, uncertain, fulfillment.OutcomeUncertain, 0)
	byHand := crmMessage(t, conn, "k-by-hand")
	failItemRound(t, q, byHand, 1)
	stillFailed := crmMessage(t, conn, "k-still-failed")
	failItemRound(t, q, stillFailed, 1)

	m, _ := migratedBefore(t, conn, "_delivered_items_answered.sql")
	// Retried and delivered as the service did before migration 054: the
	// message delivered, its round not counted, its items left open. A
	// person had resolved byHand's item meanwhile.
	if _, err := conn.Exec(ctx, `UPDATE outbox_messages SET state = 'delivered', attempts = 1, last_status = 204,
		last_error = NULL, processed_at = clock_timestamp() WHERE id = ANY ($1::bigint[])`,
		[]int64{failed, uncertain, byHand}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE reconciliation_items SET state = 'resolved', resolution = 'no_action',
		resolved_at = now(), resolved_by = 'ops', resolution_note = 'checked' WHERE outbox_message_id = $1`, byHand); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, conn, []countCheck{
		{"open delivery items before the migration", `SELECT count(*) FROM reconciliation_items
			WHERE state = 'open' AND kind IN ('failed_delivery', 'uncertain_delivery')`, 3},
	})
	if err := m.MigrateTo(ctx, int32(len(m.Migrations))); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   int64
		kind string
	}{{failed, "failed_delivery"}, {uncertain, "uncertain_delivery"}} {
		wantCounts(t, conn, []countCheck{
			{"items of the message delivered", `SELECT count(*) FROM reconciliation_items WHERE outbox_message_id = $1 AND kind = $2`, 1},
			{"its item, resolved by the service as retried", `SELECT count(*) FROM reconciliation_items
				WHERE outbox_message_id = $1 AND kind = $2 AND state = 'resolved' AND resolution = 'retried'
				AND resolved_by = 'service' AND resolved_at IS NOT NULL
				AND starts_with(resolution_note, 'the message was retried and delivered to crm (HTTP 204); ')`, 1},
		}, c.id, c.kind)
	}
	wantCounts(t, conn, []countCheck{
		{"the item a person resolved, as the person left it", `SELECT count(*) FROM reconciliation_items
			WHERE outbox_message_id = $1 AND resolution = 'no_action' AND resolved_by = 'ops' AND resolution_note = 'checked'`, 1},
	}, byHand)
	wantCounts(t, conn, []countCheck{
		{"the item of the message still failed, open", `SELECT count(*) FROM reconciliation_items
			WHERE outbox_message_id = $1 AND state = 'open'`, 1},
	}, stillFailed)
}

// Two people retry one uncertain message at the same moment, and a
// dispatcher claims it between the first retry's commit and the second's
// write: the second finds it being sent and leaves its lease alone. Wiped,
// another claim would send it while the first send is under way — twice,
// to a destination that does not honour idempotency keys.
func TestOutboxRetryRacingAClaimLeavesTheLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn, url := openStore(t, storage.Options{MaxConns: 10, Subscriptions: map[fulfillment.Topic][]string{}})
	q := s.OutboxQueue("crm")
	id := queueCases[1].seed(t, s, conn)
	recordOutcome(t, s, q, id, fulfillment.OutcomeUncertain, 0)
	// The first retry and the claim right after it, committed together
	// once the second retry waits for the message.
	first := holderTx(ctx, t, url)
	if _, err := first.Exec(ctx, `UPDATE outbox_messages SET state = 'pending', attempts = 0, retries = retries + 1 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Exec(ctx, `INSERT INTO outbox_work (id, destination_id, attempts, lease_owner, lease_until)
		VALUES ($1, 'crm', 1, 'sender', now() + interval '1 minute')`, id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.DeliveryRetry(ctx, id, "ops", false); done <- err }()
	waitFor(t, "the second retry waiting for the message", func() bool {
		return count(t, conn, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database() AND query LIKE '%outbox_messages%'`) == 1
	})
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil && !errors.Is(err, fulfillment.ErrFailedPrecondition) {
		t.Fatalf("second retry: %v, want success or FailedPrecondition", err)
	}
	wantCounts(t, conn, []countCheck{
		{"the claim's lease, kept", `SELECT count(*) FROM outbox_work WHERE id = $1 AND lease_owner = 'sender' AND attempts = 1`, 1},
		{"rounds counted", `SELECT retries FROM outbox_messages WHERE id = $1`, 1},
	}, id)
}

// paymentBeforeItsOrder stores a confirmation naming order m-late, which
// does not exist, on a store whose late match window is over at once (an
// order created later does not queue it again), and returns its id and a
// replay of it by a person.
func paymentBeforeItsOrder(t *testing.T) (s *storage.Store, conn *pgx.Conn, id int64, replay func()) {
	t.Helper()
	ctx := context.Background()
	s, conn, _ = openStore(t, storage.Options{MaxConns: 10, LateMatchWindow: time.Microsecond})
	if _, err := s.InboxInsert(ctx, confirmedEvent("evt_late", "m-late"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	id = int64(count(t, conn, "SELECT id FROM inbox_events WHERE event_id = 'evt_late'"))
	return s, conn, id, func() {
		t.Helper()
		if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: id, Actor: "ops"}); err != nil {
			t.Fatal(err)
		}
	}
}

// A payment announced twice, both announcements decided unmatched, has
// one unmatched_payment item, opened by the first. The second, replayed by
// a person once the order exists, matches and answers it: the item is
// about the payment, whichever announcement opened it.
func TestQueueSecondAnnouncementReplayedAndMatchedResolvesThePaymentsItem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn, first, _ := paymentBeforeItsOrder(t)
	again := confirmedEvent("evt_late", "m-late")
	again.EventID = "evt_late_again"
	if _, err := s.InboxInsert(ctx, again, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	second := int64(count(t, conn, "SELECT id FROM inbox_events WHERE event_id = 'evt_late_again'"))
	if outs := processInbox(t, s); outs[first].Decision != fulfillment.DecisionUnmatched || outs[second].Decision != fulfillment.DecisionUnmatched {
		t.Fatalf("decided %+v, want both unmatched", outs)
	}
	if got := count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment' AND state = 'open'
		AND inbox_event_id = $1`, first); got != 1 {
		t.Fatalf("%d open unmatched_payment items opened by the first announcement, want 1", got)
	}
	if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-late")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: second, Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	if outs := processInbox(t, s); outs[second].Decision != fulfillment.DecisionFulfilled {
		t.Fatalf("the second announcement, replayed with its order: decided %+v, want fulfilled", outs[second])
	}
	wantCounts(t, conn, []countCheck{
		{"open items", `SELECT count(*) FROM reconciliation_items WHERE state = 'open' AND $1::bigint > 0`, 0},
		{"the payment's item, resolved by the service", `SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment'
			AND inbox_event_id = $1 AND resolution = 'retried' AND resolved_by = 'service'`, 1},
	}, first)
}

// A re-drive that replays a failed event which a person replayed, and a
// processor claimed, after the re-drive's statement began: it finds the
// event pending once it holds its lock, and leaves it — no second replay
// recorded, the claim's lease kept (wiped, another worker would claim the
// event while the first processes it).
func TestRedriveRacingAReplayAndAClaimLeavesTheEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn, url := openStore(t, storage.Options{MaxConns: 10})
	insertPaidOrder(t, s, "evt_1")
	id := int64(count(t, conn, "SELECT id FROM inbox_events WHERE event_id = 'evt_1'"))
	failItemRound(t, s.InboxQueue(), id, 1)
	run, err := s.RedriveStart(ctx, fulfillment.RedriveFilter{Target: fulfillment.RedriveEvents, OrgID: "org_a", State: "failed"}, "admin", "")
	if err != nil || run.Total != 1 {
		t.Fatalf("start: %+v, %v", run, err)
	}
	// A person's replay and the claim right after it, committed together
	// once the re-drive waits for them.
	replayed := holderTx(ctx, t, url)
	if _, err := replayed.Exec(ctx, `UPDATE inbox_events SET state = 'pending', attempts = 0 WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := replayed.Exec(ctx, `UPDATE inbox_work SET state = 'pending', attempts = 1, last_error = NULL,
		lease_owner = 'processor', lease_until = now() + interval '1 minute' WHERE id = $1`, id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := s.RedriveStep(ctx, 10); done <- err }()
	waitFor(t, "the re-drive waiting for the event", func() bool {
		return count(t, conn, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND datname = current_database() AND query LIKE '%inbox_replays%'`) == 1
	})
	if err := replayed.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	wantCounts(t, conn, []countCheck{
		{"the claim's lease, kept", `SELECT count(*) FROM inbox_work WHERE id = $1 AND lease_owner = 'processor' AND attempts = 1`, 1},
		{"replays recorded by the re-drive", `SELECT count(*) FROM inbox_replays WHERE inbox_event_id = $1`, 0},
		{"the re-drive's item, skipped", `SELECT count(*) FROM redrive_items WHERE item_id = $1 AND state = 'skipped'`, 1},
	}, id)
}

// The items a replayed decision (or a retried delivery) answers are found
// by probes of their subject's index — the open items of the stored event,
// of the message, and the item under its key — not among every open item
// of their kind, which a backlog of failed deliveries makes thousands.
func TestAnsweredItemsAreFoundByTheirSubject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := newOutboxStore(t)
	id := queueCases[0].seed(t, s, conn)
	failItemRound(t, s.InboxQueue(), id, 1)
	// Many open items of the same kind, about other things.
	if _, err := conn.Exec(ctx, `INSERT INTO reconciliation_items (kind, state, org_id, environment, provider, dedupe_key, detail)
		SELECT 'failed_event', 'open', 'org_a', 'live', 'yolfi', 'test|' || n, 'another event' FROM generate_series(1, 2000) n;
		ANALYZE reconciliation_items`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: id, Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	if outs := processInbox(t, s); outs[id].Decision != fulfillment.DecisionFulfilled {
		t.Fatalf("replayed event decided %+v, want fulfilled", outs[id])
	}
	wantCounts(t, conn, []countCheck{
		{"the event's item, resolved", `SELECT count(*) FROM reconciliation_items WHERE inbox_event_id = $1 AND resolution = 'retried'`, 1},
		{"open items", `SELECT count(*) FROM reconciliation_items WHERE state = 'open' AND $1::bigint > 0`, 2000},
	}, id)
	plans, err := s.ExplainPrepared(ctx, "answered AS (", `'{failed_event}', '{1}', '{2}', '{k}', '{n}'`)
	if err != nil || len(plans) == 0 {
		t.Fatalf("the answering statement's plans: %v, %v", plans, err)
	}
	for _, plan := range plans {
		lines := strings.Split(plan, "\n")
		probed := map[string]bool{}
		for i, l := range lines {
			if strings.Contains(l, "Seq Scan on reconciliation_items") {
				t.Fatalf("reconciliation_items read by a scan of the table:\n%s", plan)
			}
			if !strings.Contains(l, "using reconciliation_items_") && !strings.Contains(l, "Bitmap Index Scan on reconciliation_items_") {
				continue
			}
			if i+1 == len(lines) || !strings.Contains(lines[i+1], "Index Cond") {
				t.Fatalf("an index of reconciliation_items read whole, not probed:\n%s", plan)
			}
			cond, by := strings.TrimSpace(lines[i+1]), ""
			for _, key := range []string{"inbox_event_id =", "outbox_message_id =", "dedupe_key =", "(id = "} {
				if strings.Contains(cond, key) {
					by = key
				}
			}
			if by == "" {
				t.Fatalf("reconciliation_items probed by neither an item's subject nor its key (%s):\n%s", cond, plan)
			}
			probed[by] = true
		}
		for _, subject := range []string{"inbox_event_id =", "outbox_message_id =", "dedupe_key ="} {
			if !probed[subject] {
				t.Errorf("no probe by %s:\n%s", subject, plan)
			}
		}
	}
}

// crmMessage stores a pending message to crm under idempotency key key
// (queued by the table's trigger) and returns its id.
func crmMessage(t *testing.T, conn *pgx.Conn, key string) int64 {
	t.Helper()
	return int64(count(t, conn, `INSERT INTO outbox_messages
		(destination_id, topic, idempotency_key, org_id, environment, required, payload)
		VALUES ('crm', 'order.fulfilled', $1, 'org_a', 'live', false, '{}') RETURNING id`, key))
}
