package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// LeasedEvents reads the events of ids leased to owner as processing reads
// them (for tests of the column mapping).
func (s *Store) LeasedEvents(ctx context.Context, ids []int64, owner string) ([]fulfillment.ProviderEvent, error) {
	var evs []fulfillment.ProviderEvent
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var les []leasedEvent
		b := &pgx.Batch{}
		queueLeasedEvents(b, ids, owner, &les)
		err := tx.SendBatch(ctx, b).Close()
		for _, le := range les {
			evs = append(evs, le.ev)
		}
		return err
	})
	return evs, err
}

// Statement is one SQL statement with arguments, and the number of rows it
// needs to handle.
type Statement struct {
	Name string
	SQL  string
	Args []any
	Need int
}

// QueueStatementsForTest returns the inbox's reclaim (of 40 leased events)
// and claim (a batch of 16) statements, which run all the time.
func QueueStatementsForTest() []Statement {
	return []Statement{
		{"reclaim", inboxTable.reclaimSQL, nil, 40},
		{"claim", inboxTable.claimSQL, []any{"owner", time.Minute, 16, 10, []int64{}}, 16},
	}
}

// ProbePooling tells what stands between url and PostgreSQL.
func ProbePooling(ctx context.Context, url string) (Pooling, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return 0, err
	}
	return probePooling(ctx, cfg)
}

// OrderLockKey is the text whose hash is the late-match lock of k, and
// LateMatchLock the first key of those locks (for tests that hold one).
func OrderLockKey(k fulfillment.OrderKey) string { return orderLockKey(k) }

const LateMatchLock = lateMatchLock

// InboxInsertBatch stores evs with one statement of the group commit, as
// one flush of its batch does (for tests of the statement's locking).
func (s *Store) InboxInsertBatch(ctx context.Context, evs []fulfillment.ProviderEvent) error {
	batch := make([]*insertRequest, len(evs))
	for i, ev := range evs {
		batch[i] = &insertRequest{ctx: ctx, ev: ev, raw: []byte("{}"), done: make(chan insertResult, 1)}
	}
	_, after, err := s.inboxInsertBatch(ctx, batch)
	after()
	return err
}

// SetDecideLockWait sets how long a batch decided on receipt waits for
// each lock (a PostgreSQL interval, such as "30s").
func (s *Store) SetDecideLockWait(d string) { s.decideSettings = batchSettings(d) }

// MoveLockedOrder moves order id to state to through the effect writer, in
// a transaction that locks the order first, as decisions do; touched
// updates the order once more between the lock and the writer, as no
// statement of a decision does.
func (s *Store) MoveLockedOrder(ctx context.Context, id string, to fulfillment.State, touched bool) error {
	w := s.newEffectWriter()
	var version pgtype.TID
	lock := func(b *pgx.Batch) {
		b.Queue(`SELECT ctid FROM orders WHERE id = $1 FOR UPDATE`, id).QueryRow(func(row pgx.Row) error {
			return row.Scan(&version)
		})
	}
	// As a decision's effects are written: in a pipelinedTx, with the
	// COMMIT in the round trip of the update.
	return s.withPipelinedTx(ctx, batchSettings(defaultWorkLockWait), lock, func(tx *pipelinedTx) error {
		w.versions[id] = version
		if touched {
			if _, err := tx.Exec(ctx, `UPDATE orders SET updated_at = '2000-01-01' WHERE id = $1`, id); err != nil {
				return err
			}
		}
		w.order(id).state = to
		b := &pgx.Batch{}
		if _, err := w.write(b); err != nil {
			return err
		}
		return tx.commitWith(ctx, b)
	})
}

// PurgeRawBodiesSQL is PurgeRawBodies' statement: $1 now (NULL: the
// database's), $2 the retention, $3 the batch (for tests that read its
// plan).
const PurgeRawBodiesSQL = purgeRawBodiesSQL

// PipelinedForTest runs a pipelinedTx: first in the round trip of its
// BEGIN, mid on their own in between (their errors ignored with
// swallowMid, as a faulty caller would), and last with its COMMIT, the
// last of which reports failLast from its callback (nil: its result).
func (s *Store) PipelinedForTest(ctx context.Context, first, mid, last []string, failLast error, swallowMid bool) error {
	return s.withPipelinedTx(ctx, batchSettings(defaultWorkLockWait), func(b *pgx.Batch) {
		for _, q := range first {
			b.Queue(q)
		}
	}, func(tx *pipelinedTx) error {
		for _, q := range mid {
			if _, err := tx.Exec(ctx, q); err != nil && !swallowMid {
				return err
			}
		}
		if len(last) == 0 {
			return nil
		}
		b := &pgx.Batch{}
		for i, q := range last {
			qq := b.Queue(q)
			if i == len(last)-1 && failLast != nil {
				qq.Exec(func(pgconn.CommandTag) error { return failLast })
			}
		}
		return tx.commitWith(ctx, b)
	})
}

// ErrCommittedUnread is errCommittedUnread.
var ErrCommittedUnread = errCommittedUnread

// ErrRolledBackAtCommit is errRolledBackAtCommit.
var ErrRolledBackAtCommit = errRolledBackAtCommit

// FailBatchResults makes reading the results of the last batch of every
// pipelined transaction (a decided batch's, a processed batch's) fail
// with err after its COMMIT ran, as a callback's failure would: the batch
// committed, its results unread (errCommittedUnread). nil ends it.
func (s *Store) FailBatchResults(err error) { s.unreadResults = err }

// InboxInsertTaken stores ev as InboxInsert does, and returns once a
// group commit has taken it and closed its batch, with the wait for its
// commit: a request sent after it cannot join that batch. It waits until
// no request is queued and the request is answered, or every flusher is
// flushing or lingering (none is between taking a request and closing its
// batch).
func (s *Store) InboxInsertTaken(ctx context.Context, ev fulfillment.ProviderEvent, rawBody []byte) (func() (fulfillment.InboxReceipt, error), error) {
	in := s.inserter
	req, err := in.enqueue(ctx, ev, rawBody)
	if err != nil {
		return nil, err
	}
	for {
		busy := int(in.inFlight.Load())
		if in.lingering.Load() {
			busy++
		}
		if len(in.requests) == 0 && (len(req.done) > 0 || busy == in.flushers) {
			return req.await, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}

// PreparedPlan is a statement prepared on a pooled connection, with how
// many times PostgreSQL ran it on a generic plan and on a custom one.
type PreparedPlan struct {
	Statement       string
	Generic, Custom int64
}

// eachConn runs f on every connection of the store's pool, once what ran
// on them (a notification sent after a commit) has released them all.
func (s *Store) eachConn(ctx context.Context, f func(*pgx.Conn) error) error {
	conns, err := s.allConns(ctx)
	if err != nil {
		return err
	}
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for _, c := range conns {
		if err := f(c.Conn()); err != nil {
			return err
		}
	}
	return nil
}

// allConns acquires every connection of the store's pool.
func (s *Store) allConns(ctx context.Context) ([]*pgxpool.Conn, error) {
	for range 200 {
		conns := s.pool.AcquireAllIdle(ctx)
		if len(conns) == int(s.pool.Stat().TotalConns()) {
			return conns, nil
		}
		for _, c := range conns {
			c.Release()
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, errors.New("the pool's connections stayed busy")
}

// PreparedPlans reads the statements prepared on the store's pooled
// connections.
func (s *Store) PreparedPlans(ctx context.Context) ([]PreparedPlan, error) {
	var plans []PreparedPlan
	err := s.eachConn(ctx, func(conn *pgx.Conn) error {
		rows, _ := conn.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`,
			pgx.QueryExecModeSimpleProtocol)
		some, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (PreparedPlan, error) {
			var p PreparedPlan
			err := r.Scan(&p.Statement, &p.Generic, &p.Custom)
			return p, err
		})
		plans = append(plans, some...)
		return err
	})
	return plans, err
}

// ExplainPrepared explains the statement prepared on the store's pooled
// connections whose text holds fragment, as it runs in a batch's
// transaction, on its cached generic plan, with args (SQL literals) as its
// parameters: the plan of each connection that prepared it, or none.
func (s *Store) ExplainPrepared(ctx context.Context, fragment, args string) ([]string, error) {
	var plans []string
	err := s.eachConn(ctx, func(conn *pgx.Conn) error {
		plan, err := explainPrepared(ctx, conn, fragment, args)
		if plan != "" {
			plans = append(plans, plan)
		}
		return err
	})
	return plans, err
}

func explainPrepared(ctx context.Context, conn *pgx.Conn, fragment, args string) (string, error) {
	rows, _ := conn.Query(ctx, `SELECT name FROM pg_prepared_statements WHERE strpos(statement, $1) > 0`,
		pgx.QueryExecModeSimpleProtocol, fragment)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	switch {
	case err != nil:
		return "", err
	case len(names) == 0:
		return "", nil
	case len(names) > 1:
		return "", fmt.Errorf("%d prepared statements hold %q", len(names), fragment)
	}
	name := names[0]
	tx, err := conn.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// As a batch's transaction plans (a plan made here, none being
	// cached, is made as there).
	if _, err := tx.Exec(ctx, batchSettings(defaultWorkLockWait), pgx.QueryExecModeSimpleProtocol); err != nil {
		return "", err
	}
	stmt := "EXPLAIN EXECUTE " + pgx.Identifier{name}.Sanitize()
	if args != "" {
		stmt += "(" + args + ")"
	}
	rows, _ = tx.Query(ctx, stmt, pgx.QueryExecModeSimpleProtocol)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return strings.Join(lines, "\n"), err
}

// FeedRow is one feed event for PublishForTest: an order's (Order set) or
// a subscription's period (Subscription and Period set).
type FeedRow struct {
	Order, Subscription string
	Period              int
	Topic               fulfillment.Topic
}

// PublishForTest stores rows, live events of org with an empty payload, as
// one statement of a batch's feed events (queuePublishes), in a
// transaction of its own.
func (s *Store) PublishForTest(ctx context.Context, org string, rows []FeedRow) error {
	prs := make([]publishRow, 0, len(rows))
	for _, r := range rows {
		pr := publishRow{order: r.Order, subscription: r.Subscription, topic: r.Topic, org: org, env: fulfillment.EnvLive, body: "{}"}
		if r.Subscription != "" {
			pr.period = &r.Period
		}
		prs = append(prs, pr)
	}
	return s.withTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		s.queuePublishes(b, prs, time.Now())
		return tx.SendBatch(ctx, b).Close()
	})
}

// SetWorkLockWait sets how long a queue's work (the inbox processor's
// batch, a sweep) waits for a lock (PostgreSQL's lock_timeout, e.g.
// "100ms").
func (s *Store) SetWorkLockWait(d string) { s.workLockWait, s.workSettings = d, batchSettings(d) }

// InsertQueuedAfterClose puts a request for ev straight into the group
// commit's queue of a closed store, as enqueue may when the stop and the
// queue are ready together, and returns its answer.
func (s *Store) InsertQueuedAfterClose(ctx context.Context, ev fulfillment.ProviderEvent) error {
	req := &insertRequest{ctx: ctx, ev: ev, raw: []byte(`{}`), done: make(chan insertResult, 1), stopped: s.inserter.stopped}
	s.inserter.requests <- req
	_, err := req.await()
	return err
}

// MigrationLock is the advisory lock a migrator holds while it migrates
// (for tests that hold migrations back).
const MigrationLock = migrationLock
