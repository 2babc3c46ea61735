package storage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// claimScanBuffers is the shared buffers a claim's scan of outbox_work
// reads to find the first due rows of crm.
func claimScanBuffers(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var plan []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	var raw []byte
	if err := conn.QueryRow(context.Background(), `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON)
		SELECT id FROM outbox_work WHERE state = 'pending' AND destination_id = 'crm' AND next_attempt_at <= now()
		ORDER BY next_attempt_at, id LIMIT 16`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("reading the plan %s: %v", raw, err)
	}
	return plan[0].Plan.Hit + plan[0].Plan.Read
}

// churnOutbox queues messages for crm, then claims and delivers them all,
// which deletes their work rows.
func churnOutbox(t *testing.T, s *storage.Store, conn *pgx.Conn, messages int) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `INSERT INTO outbox_messages
		(destination_id, topic, idempotency_key, org_id, environment, required, payload)
		SELECT 'crm', 'order.fulfilled', 'k' || g, 'org_a', 'live', false, '{}' FROM generate_series(1, $1) g`, messages); err != nil {
		t.Fatal(err)
	}
	q := s.OutboxQueue("crm")
	for delivered := 0; delivered < messages; {
		claims, err := q.Claim(ctx, worker.ClaimParams{Owner: "w1", Limit: 100, Lease: time.Minute, MaxAttempts: 5})
		if err != nil || len(claims) == 0 {
			t.Fatalf("claim after %d delivered: %v, %d claimed", delivered, err, len(claims))
		}
		attempts := make([]fulfillment.MessageAttempt, len(claims))
		for i, c := range claims {
			attempts[i] = fulfillment.MessageAttempt{ID: c.ID, DeliveryAttempt: fulfillment.DeliveryAttempt{
				Outcome: fulfillment.OutcomeDelivered, Status: 200, StartedAt: time.Now()}}
		}
		if lost, err := s.OutboxRecord(ctx, "w1", attempts); err != nil || len(lost) != 0 {
			t.Fatalf("recording: %v, %d lost", err, len(lost))
		}
		delivered += len(claims)
	}
}

// startQueueVacuum runs the queue vacuum (every 20 ms, past 1,000 dead
// rows) until the stop it returns is called, once it has vacuumed
// outbox_work.
func startQueueVacuum(t *testing.T, s *storage.Store, conn *pgx.Conn) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- s.VacuumQueues(ctx, storage.QueueVacuum{Interval: 20 * time.Millisecond, DeadRows: 1000})
	}()
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for count(t, conn, "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'outbox_work'") == 0 {
		if time.Now().After(deadline) {
			stop()
			t.Fatal("outbox_work was not vacuumed within 20s of the queue vacuum's start")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return stop
}

// settledDeadRows waits until the dead rows the statistics count for table
// stay the same for 2.5 s: every backend has reported its own (within
// about a second of its last transaction, later when it could not lock
// the statistics at once).
func settledDeadRows(t *testing.T, conn *pgx.Conn, table string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last, same := -1, 0
	for same < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("the dead rows of %s still change after 30 s", table)
		}
		n := count(t, conn, "SELECT n_dead_tup::int FROM pg_stat_user_tables WHERE relname = $1", table)
		if n == last {
			same++
		} else {
			last, same = n, 0
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestVacuumQueuesKeepsClaimsShort churns 6,000 messages through the
// outbox's queue (claimed, delivered: their work rows deleted), which
// leaves the head of its claim index full of dead entries, and counts the
// buffers a claim's scan reads before and after the queue vacuum runs.
func TestVacuumQueuesKeepsClaimsShort(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	// Autovacuum would do, a minute later, what this test waits for.
	if _, err := conn.Exec(ctx, "ALTER TABLE outbox_work SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	const messages = 6000
	churnOutbox(t, s, conn, messages)
	if n := count(t, conn, "SELECT count(*) FROM outbox_work"); n != 0 {
		t.Fatalf("%d work rows left after every message was delivered", n)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO outbox_messages
		(destination_id, topic, idempotency_key, org_id, environment, required, payload)
		VALUES ('crm', 'order.fulfilled', 'last', 'org_a', 'live', false, '{}')`); err != nil {
		t.Fatal(err)
	}
	claimScanBuffers(t, conn) // marks the dead entries, as claims would
	before := claimScanBuffers(t, conn)
	if before < 20 {
		t.Fatalf("the claim scan read %d buffers over %d dead entries: the test no longer sets up the churn it measures", before, 2*messages)
	}

	// The store's connections report their dead rows to the statistics
	// a moment after their transactions (PostgreSQL batches them): counted
	// from here, one vacuum is due, not a second for rows reported late.
	settledDeadRows(t, conn, "outbox_work")
	stop := startQueueVacuum(t, s, conn)
	after := claimScanBuffers(t, conn)
	// A table under the threshold is left alone.
	time.Sleep(200 * time.Millisecond)
	stop()
	t.Logf("claim scan: %d buffers before the queue vacuum, %d after", before, after)
	if after > 8 || after*5 > before {
		t.Errorf("the claim scan read %d buffers before the queue vacuum and %d after; want at most 8 after, and a fifth of before", before, after)
	}
	if n := count(t, conn, "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'outbox_work'"); n != 1 {
		t.Errorf("outbox_work vacuumed %d times, want once: its dead rows were under the threshold after the first", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM outbox_work WHERE state = 'pending'"); n != 1 {
		t.Errorf("%d pending work rows after the vacuum, want the last message's only", n)
	}
}

// TestVacuumQueuesWaitsOutAnOldSnapshot holds a snapshot older than the
// deletions of 3,000 work rows, so that no VACUUM may remove them: the
// queue vacuum must try once, and then leave the table alone until it has
// as many more dead rows again, rather than vacuum it every interval.
func TestVacuumQueuesWaitsOutAnOldSnapshot(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "ALTER TABLE outbox_work SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	old, err := pgx.Connect(ctx, conn.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Close(ctx) }()
	tx, err := old.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM outbox_work"); err != nil { // takes the snapshot
		t.Fatal(err)
	}
	const messages = 3000
	churnOutbox(t, s, conn, messages)
	// The pool's sessions report their deletions within seconds; the
	// vacuum starts once they have, so that its count is final.
	deadline := time.Now().Add(30 * time.Second)
	for count(t, conn, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outbox_work'") < 2*messages {
		if time.Now().After(deadline) {
			t.Fatal("outbox_work's dead rows were not reported within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}

	stop := startQueueVacuum(t, s, conn)
	time.Sleep(500 * time.Millisecond) // some 25 intervals
	stop()
	if n := count(t, conn, "SELECT vacuum_count FROM pg_stat_user_tables WHERE relname = 'outbox_work'"); n != 1 {
		t.Errorf("outbox_work vacuumed %d times in 25 intervals while a snapshot kept its dead rows; want once", n)
	}
	if n := count(t, conn, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outbox_work'"); n < 2*messages {
		t.Errorf("outbox_work has %d dead rows after the vacuum; the held snapshot should have kept %d: the test no longer sets up what it means to", n, 2*messages)
	}
}

// The pass analyzes a table a batch reads by key once it has changed by
// more rows than its statistics counted (a young table), so that the
// generic plans made on them are made again; an old table, changed by
// less than it holds, is left to autovacuum.
func TestVacuumQueuesAnalyzesYoungTables(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "ANALYZE inbox_events, orders"); err != nil { // both empty: 0 rows counted
		t.Fatal(err)
	}
	analyzed := func(table string) int {
		return count(t, conn, "SELECT analyze_count::int FROM pg_stat_user_tables WHERE relname = $1", table)
	}
	before := analyzed("orders")
	evs := make([]fulfillment.ProviderEvent, 300)
	for i := range evs {
		evs[i] = confirmedEvent(fmt.Sprintf("evt_%d", i), "m-none")
	}
	if err := s.InboxInsertBatch(ctx, evs); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- s.VacuumQueues(runCtx, storage.QueueVacuum{Interval: 20 * time.Millisecond, StaleRows: 100})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// The inserts' counts reach pg_stat_user_tables within 10 s of their
	// backend going idle.
	deadline := time.Now().Add(20 * time.Second)
	for analyzed("inbox_events") == 1 {
		if time.Now().After(deadline) {
			t.Fatal("inbox_events, 300 rows inserted since it was analyzed empty, was not analyzed within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := count(t, conn, "SELECT reltuples::int FROM pg_class WHERE relname = 'inbox_events'"); n != 300 {
		t.Errorf("inbox_events' statistics count %d rows, want 300", n)
	}
	if after := analyzed("orders"); after != before {
		t.Errorf("orders, unchanged, analyzed %d times more", after-before)
	}
}
