package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// leasedTable describes a table drained as a leased queue, and holds the
// statements built from that description: every such table is claimed,
// retried, released and reclaimed by the same SQL, with its name in it.
//
// The table has the columns id (bigint), state ('pending' while queued,
// 'failed' past its attempts), attempts, next_attempt_at, lease_owner,
// lease_until, last_error and processed_at, and a partial index on
// (next_attempt_at, id) WHERE state = 'pending', which every statement here
// scans: their cost follows the queue, never the history.
//
// A claim leases rows to an owner: lease_owner names it, and next_attempt_at
// moves to the end of the lease, so that leased rows leave the claim scan.
// An owner is live while its process holds the owner's advisory lock (see
// Liveness): rows leased to an owner that is not live are free at once
// (reclaim), and a lease that ran out is taken only from an owner that is not
// live (claim) — a live owner keeps its rows whatever its lease.
type leasedTable struct {
	table string // the table's name
	noun  string // what a row is, in errors ("event")
	// failedSet assigns, besides state, processed_at and the lease columns,
	// the columns of a row failed past its attempts (column = value).
	failedSet [][2]string
	// abandoned is a data-modifying CTE of the claim, run on the rows
	// "abandoned" (id, attempts) it failed because their owners died during
	// every attempt; "" for none.
	abandoned string
	// releaseSet assigns, besides the lease columns and attempts, columns
	// of a row handed back (column = value, on the row's values before).
	releaseSet [][2]string
	// failed completes, in Retry's transaction, a row Retry failed.
	failed func(ctx context.Context, tx pgx.Tx, id int64, cause string, maxAttempts int) error
	// partition, when set, names the column that splits the table into
	// queues: one per value (a destination), each claiming and releasing
	// its own rows only. A claim takes the value as $6, a release as $2;
	// claimGate is a further condition of a claim on $6 (e.g. the
	// partition is not disabled).
	partition, claimGate string

	claimSQL, retrySQL, releaseSQL, reclaimSQL string
}

// ownerDead is an SQL condition true when the owner named by the text
// expression is not live: no session holds its advisory lock. It takes the
// lock until the end of the transaction, so that a concurrent check sees
// the owner as live and leaves its rows to this one.
func ownerDead(expr string) string {
	return "pg_try_advisory_xact_lock(" + ownerKey(expr) + ")"
}

// asyncCommit is a condition, always true, that turns synchronous_commit off
// for the rest of the statement's own transaction (an uncorrelated
// subquery: evaluated once, before the rows it filters are written). The
// lease statements use it instead of a session setting or a startup
// parameter, which a transaction pooler would not keep or would refuse:
// losing a lease in a crash only means its rows are claimed again.
const asyncCommit = "(SELECT set_config('synchronous_commit', 'off', true)) = 'off'"

// ownerKey is the advisory lock key (bigint) of the owner named by the text
// expression. The seed keeps owners' keys apart from other advisory locks.
func ownerKey(expr string) string {
	return "hashtextextended(" + expr + ", 7297428471)"
}

// newLeasedTable builds the statements of t.
func newLeasedTable(t leasedTable) *leasedTable {
	var abandonSet, retrySet, releaseSet []string
	for _, kv := range t.failedSet {
		abandonSet = append(abandonSet, fmt.Sprintf("%s = %s,", kv[0], kv[1]))
		retrySet = append(retrySet, fmt.Sprintf("%s = CASE WHEN attempts >= $4 THEN %s END,", kv[0], kv[1]))
	}
	for _, kv := range t.releaseSet {
		releaseSet = append(releaseSet, fmt.Sprintf("%s = %s,", kv[0], kv[1]))
	}
	abandonedCTE := ""
	if t.abandoned != "" {
		abandonedCTE = ", abandoned_effects AS (" + t.abandoned + ")"
	}
	r := strings.NewReplacer(
		"{table}", t.table,
		"{abandon_set}", strings.Join(abandonSet, " "),
		"{retry_set}", strings.Join(retrySet, " "),
		"{release_set}", strings.Join(releaseSet, " "),
		"{abandoned_effects}", abandonedCTE,
		"{lease_owner_dead}", ownerDead("lease_owner"),
		"{owner_dead}", ownerDead("o.lease_owner"),
		"{partition}", partitionCond(t.partition, "$6", t.claimGate),
		"{release_partition}", partitionCond(t.partition, "$2", ""),
		"{async_commit}", asyncCommit,
	)

	// Due rows, oldest first (now(), the statement's start, is stable: the
	// scan ends at the first row that is not due, before the leased ones). A
	// due row that is still leased (its lease ran out) is taken only when
	// its owner is not live — or is the claimer itself and the row is not
	// among the ones it works on ($5): a claim it lost track of. A row that has used its
	// attempts without completing — its owner died during each, so Retry
	// never saw it — is failed instead of being leased again.
	t.claimSQL = r.Replace(`
		WITH due AS (
			SELECT id, attempts FROM {table}
			WHERE state = 'pending' AND next_attempt_at <= now(){partition}
				AND CASE WHEN lease_owner IS NULL THEN true
					WHEN lease_owner = $1 THEN id <> ALL($5::bigint[])
					ELSE {lease_owner_dead} END
			ORDER BY next_attempt_at, id
			LIMIT $3
			FOR UPDATE SKIP LOCKED
		), abandoned AS (
			UPDATE {table} t SET
				state = 'failed', {abandon_set} processed_at = clock_timestamp(),
				lease_owner = NULL, lease_until = NULL,
				last_error = coalesce(t.last_error || '; ', '') || 'abandoned: no attempt completed'
			FROM due WHERE t.id = due.id AND due.attempts >= $4
			RETURNING t.id, t.attempts
		){abandoned_effects}
		UPDATE {table} t SET
			lease_owner = $1,
			lease_until = clock_timestamp() + $2::interval,
			next_attempt_at = clock_timestamp() + $2::interval,
			attempts = t.attempts + 1
		FROM due WHERE t.id = due.id AND due.attempts < $4 AND {async_commit}
		RETURNING t.id, t.attempts`)

	t.retrySQL = r.Replace(`
		UPDATE {table} SET
			state = CASE WHEN attempts >= $4 THEN 'failed' ELSE 'pending' END, {retry_set}
			last_error = $3, next_attempt_at = $5, lease_owner = NULL, lease_until = NULL,
			processed_at = CASE WHEN attempts >= $4 THEN clock_timestamp() END
		WHERE id = $1 AND state = 'pending' AND lease_owner = $2
		RETURNING state = 'failed'`)

	t.releaseSQL = r.Replace(`
		UPDATE {table} SET {release_set} lease_owner = NULL, lease_until = NULL,
			next_attempt_at = clock_timestamp(), attempts = greatest(attempts - 1, 0)
		WHERE lease_owner = $1 AND state = 'pending'{release_partition} AND {async_commit}`)

	// The rows of unexpired leases (next_attempt_at in the future: the
	// index's far end, with the retries waiting for their backoff), the
	// liveness of each of their owners checked once, and the rows of the
	// owners that are not live made due now — unless a transaction holds
	// them: a worker that lost its liveness may still commit what it locked.
	// The attempt they used stays counted. now() rather than
	// clock_timestamp(): the bound must be stable to be an index condition;
	// the rows are then found by primary key, so that a backlog of due rows
	// is never read.
	t.reclaimSQL = r.Replace(`
		WITH leased AS MATERIALIZED (
			SELECT id, lease_owner FROM {table}
			WHERE state = 'pending' AND next_attempt_at > now() AND lease_owner IS NOT NULL
		), dead AS MATERIALIZED (
			SELECT o.lease_owner FROM (SELECT DISTINCT lease_owner FROM leased) o
			WHERE {owner_dead}
		), freed AS (
			SELECT id FROM {table}
			WHERE id = ANY (ARRAY(SELECT l.id FROM leased l JOIN dead d ON d.lease_owner = l.lease_owner))
				AND state = 'pending' AND lease_owner IN (SELECT lease_owner FROM dead)
			FOR UPDATE SKIP LOCKED
		)
		UPDATE {table} t SET lease_owner = NULL, lease_until = NULL, next_attempt_at = clock_timestamp()
		FROM freed WHERE t.id = freed.id AND {async_commit}`)
	return &t
}

// partitionCond is the condition that a row belongs to the partition
// given by param, and meets gate, or "" without partitions.
func partitionCond(column, param, gate string) string {
	if column == "" {
		return ""
	}
	cond := " AND " + column + " = " + param
	if gate != "" {
		cond += " AND " + gate
	}
	return cond
}

// claim leases up to limit due rows of t to owner for lease; partition
// is the value of t's partition parameter, when t has one.
func (s *Store) claim(ctx context.Context, t *leasedTable, owner string, limit int, lease time.Duration, maxAttempts int, inFlight []int64, partition ...any) ([]fulfillment.Claim, error) {
	if inFlight == nil {
		inFlight = []int64{}
	}
	args := append([]any{owner, lease, limit, maxAttempts, inFlight}, partition...)
	rows, _ := s.leasePool.Query(ctx, t.claimSQL, args...)
	claimed, err := pgx.CollectRows(rows, pgx.RowToStructByPos[fulfillment.Claim])
	if err != nil {
		err = interpret(err)
		s.unreachable(err)
		return nil, fmt.Errorf("claiming %ss: %w", t.noun, err)
	}
	return claimed, nil
}

// retry records a failed attempt at row id of t, leased to owner: it is due
// again at next, or failed (and t.failed run) once it has used maxAttempts.
func (s *Store) retry(ctx context.Context, t *leasedTable, id int64, owner, cause string, next time.Time, maxAttempts int) (bool, error) {
	failed := false
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, t.retrySQL, id, owner, cause, maxAttempts, next).Scan(&failed)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%s %d: %w", t.noun, id, fulfillment.ErrLeaseLost)
		}
		if err != nil {
			return fmt.Errorf("recording failed attempt: %w", interpret(err))
		}
		if failed && t.failed != nil {
			return t.failed(ctx, tx, id, cause, maxAttempts)
		}
		return nil
	})
	return failed, err
}

// release hands back the rows of t (of the partition, when t has them)
// leased to owner, without counting their claim as an attempt.
func (s *Store) release(ctx context.Context, t *leasedTable, owner string, partition ...any) (int, error) {
	tag, err := s.leasePool.Exec(ctx, t.releaseSQL, append([]any{owner}, partition...)...)
	if err != nil {
		return 0, fmt.Errorf("releasing %s leases: %w", t.noun, interpret(err))
	}
	return int(tag.RowsAffected()), nil
}

// reclaim makes the rows of t leased to owners that are not live due now.
func (s *Store) reclaim(ctx context.Context, t *leasedTable) (int, error) {
	tag, err := s.leasePool.Exec(ctx, t.reclaimSQL)
	if err != nil {
		err = interpret(err)
		s.unreachable(err)
		return 0, fmt.Errorf("reclaiming %ss: %w", t.noun, err)
	}
	return int(tag.RowsAffected()), nil
}
