package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fulfillplatform/fulfillment/internal/failpoint"
)

// querier is what the statements of a decision need of the transaction
// they run in: a pgx.Tx, or a pipelinedTx.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// A pipelinedTx is a transaction whose BEGIN goes out with its first
// statements, in one round trip, and whose COMMIT with its last ones
// (commitWith): two round trips fewer than a pgx.Tx, whose Begin and Commit
// each wait for their answer. The statements between run on its
// connection as in any transaction. Whether it is still open is the
// connection's: not idle (PostgreSQL's transaction status, as its last
// answer said).
type pipelinedTx struct {
	*pgxpool.Conn
	// beforeCommit, when set, runs right before the COMMIT is sent (a
	// failpoint: in a failpoints build, after the statements sent with it
	// have run).
	beforeCommit func()
	// unreadResults is the store's (set by tests only): a failure of
	// reading the batch sent with the COMMIT, after the COMMIT ran.
	unreadResults error
}

// withPipelinedTx runs fn in a pipelinedTx whose first round trip sends
// BEGIN, settings (batchSettings: how its statements are planned and how
// long each waits for a lock at most) and the statements first queues, and commits it unless fn did (commitWith); any error rolls
// it back. first's statements report their errors through their
// callbacks, as in any batch.
func (s *Store) withPipelinedTx(ctx context.Context, settings string, first func(*pgx.Batch), fn func(*pipelinedTx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", interpret(err))
	}
	defer conn.Release() // (a connection left in a transaction is closed, not pooled)
	tx := &pipelinedTx{Conn: conn, unreadResults: s.unreadResults}
	defer tx.rollback(ctx)

	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(settings)
	first(b)
	// BEGIN, the settings and the COMMIT report their own failures, which
	// no caller's callback reads: interpreted here (a broken connection is
	// ErrUnavailable, to be tried again), what the callbacks interpreted
	// kept as it is.
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		return interpret(err)
	}
	if err := fn(tx); err != nil {
		return err
	}
	if !tx.open() {
		return nil
	}
	return interpret(tx.commitWith(ctx, &pgx.Batch{}))
}

// batchSettings, sent right after a pipelinedTx's BEGIN, sets how PostgreSQL
// plans the transaction's statements — those that decide a batch and
// write its effects, and the first ones too (the look-up of stored
// events, the read of the leased ones), whose plans it chooses before any
// of them runs:
//   - generic plans (plan_cache_mode). The statements take arrays, one
//     element per event, and PostgreSQL plans a prepared statement anew at
//     each run while it expects a custom plan, made for the arrays' actual
//     lengths, to cost less than a generic one — always, for arrays.
//     Planning the order lock cost more than running it in the saturating
//     push, and planning the look-up of stored events 120 µs of a lone
//     webhook's batch. A generic plan is made once per connection, and
//     again after an ANALYZE of its tables.
//   - no sequential scans while an index serves (enable_seqscan). A
//     generic plan made on the statistics of a nearly empty table (a new
//     database, its first webhooks) scans it whole, cheapest then, and is
//     kept as the table grows, until the next ANALYZE: with a few thousand
//     events stored, the look-up of one webhook's event read 600 buffers
//     instead of 3. The look-ups of stored and leased events, attempts
//     and refunds probe their key's index by a lateral subquery, which no
//     statistics turn into a scan; the other statements' plans still
//     follow the statistics (without sequential scans, a stale plan scans
//     a whole index instead) until the next ANALYZE, which the queue
//     vacuum's pass runs on a young table about every doubling
//     (VacuumQueues).
//
// Under transaction pooling statements are described rather than
// prepared and planned at each run; both settings end with the
// transaction.
//
// It sets the transaction's lock wait (lock_timeout) too, before any of its
// statements waits for a lock: defaultDecideLockWait for a batch decided
// on receipt, Store.workLockWait for the inbox processor's. The wait is written in
// the statement, not passed as a parameter: a statement with parameters
// is planned for them at its first runs, and this one runs before the
// plans are generic. The Store keeps the statement of each wait
// (decideSettings, workSettings).
func batchSettings(lockWait string) string {
	return planSettings + `, set_config('lock_timeout', '` + strings.ReplaceAll(lockWait, "'", "''") + `', true)`
}

// planSettings is the planning part of batchSettings alone — generic
// plans, no sequential scans while an index serves — for a pipelinedTx
// whose lock waits stay as they are (the outbox's record: its requests
// were made, and its lock waits for a batch of the same messages'
// destination or orders, not for a person).
const planSettings = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true)`

// open says whether the transaction began and has not ended.
func (tx *pipelinedTx) open() bool { return tx.Conn.Conn().PgConn().TxStatus() != 'I' }

// errCommittedUnread is commitWith's failure to read the results of a
// batch whose statements all ran, its COMMIT too: the transaction
// committed, but what its callbacks were to record is not known.
var errCommittedUnread = errors.New("the transaction committed, but its results could not be read")

// errRolledBackAtCommit is commitWith's COMMIT answered ROLLBACK: an
// earlier statement's error had aborted the transaction, and nothing of
// it was committed.
var errRolledBackAtCommit = errors.New("the transaction was rolled back at its COMMIT: an earlier statement failed")

// commitWith sends b's statements and the COMMIT in one round trip. A
// statement that fails skips the rest, the COMMIT too, and the deferred
// rollback ends the transaction.
func (tx *pipelinedTx) commitWith(ctx context.Context, b *pgx.Batch) error {
	if failpoint.Enabled && tx.beforeCommit != nil && b.Len() > 0 {
		// A crash test's failpoint before the commit: b's statements run
		// first, so that the crash leaves them written and uncommitted.
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		b = &pgx.Batch{}
	}
	if tx.unreadResults != nil {
		b.Queue("SELECT 1").Exec(func(pgconn.CommandTag) error { return tx.unreadResults })
	}
	// A COMMIT of a transaction that an error aborted (one a caller went
	// on after) ends it with a ROLLBACK, and says so only in its tag.
	rolledBack := false
	b.Queue("COMMIT").Exec(func(tag pgconn.CommandTag) error {
		rolledBack = tag.String() != "COMMIT"
		return nil
	})
	if tx.beforeCommit != nil {
		tx.beforeCommit()
	}
	err := tx.SendBatch(ctx, b).Close()
	if rolledBack {
		if err != nil {
			return fmt.Errorf("%w: %w", errRolledBackAtCommit, err)
		}
		return errRolledBackAtCommit
	}
	// Idle once the COMMIT ran: the transaction committed, or the COMMIT
	// failed with an error of its own. An error PostgreSQL reports before
	// it skips it, and leaves the transaction open, failed.
	var pgErr *pgconn.PgError
	if err != nil && !tx.open() && !errors.As(err, &pgErr) {
		return fmt.Errorf("%w: %w", errCommittedUnread, err)
	}
	return err
}

// rollback ends the transaction if it is still open. When the connection
// cannot say ROLLBACK, its release closes it, which ends the transaction
// all the same.
func (tx *pipelinedTx) rollback(ctx context.Context) {
	if tx.open() && !tx.Conn.Conn().IsClosed() {
		_, _ = tx.Exec(ctx, "ROLLBACK")
	}
}
