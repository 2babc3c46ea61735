package storage

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/worker"
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
	// unfailable, when set, is an SQL condition on a row (its columns
	// unqualified) under which it is never failed past its attempts, by a
	// claim or a retry: it is claimed again, for its work to say what
	// became of it (an outbox message whose request may have been on the
	// wire is recorded uncertain, not failed).
	unfailable string
	// releaseSet assigns, besides the lease columns and attempts, columns
	// of a row handed back (column = value, on the row's values before).
	releaseSet [][2]string
	// failed completes the rows failed past their attempts, all of them at
	// once, in the transaction that failed them: by Retry (each with the
	// cause of its last attempt) or by a claim (abandoned: their worker
	// stopped during every attempt). It opens their items, through the
	// one item builder (queueItems).
	failed func(ctx context.Context, tx pgx.Tx, rows []failedRow, maxAttempts int) error
	// rearmAfter, when set, says that the table's rows are never failed:
	// a row that used its attempts is put back in the queue instead
	// (pending, its attempts from 0), due after the backoff of its last
	// attempt, or, abandoned, after rearmAfter (an SQL interval); failed
	// then opens its items, and Retry reports it scheduled.
	rearmAfter string
	// partition, when set, names the column that splits the table into
	// queues: one per value (a destination), each claiming and releasing
	// its own rows only. A claim takes the value as $6, a release as $2;
	// claimGate is a further condition of a claim on $6 (e.g. the
	// partition is not disabled).
	partition, claimGate string

	claimSQL, abandonSQL, retrySQL, releaseSQL, releaseClaimsSQL, reclaimSQL string
}

// failedRow is a row failed past its attempts: its id, the cause of its
// last attempt (for an abandoned row, the last error recorded before), and
// whether a claim failed it abandoned — no attempt completed, its worker
// stopped during each — rather than Retry after a failed attempt.
type failedRow struct {
	id        int64
	cause     string
	abandoned bool
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

// claimable is the condition that a pending row may be taken by the
// claimer named by owner (a text parameter) working on the rows of
// inFlight (a bigint array parameter): it is leased to nobody, or to an
// owner that is not live, or to the claimer itself but not among its rows
// in flight (a claim it lost track of).
func claimable(owner, inFlight string) string {
	return `CASE WHEN lease_owner IS NULL THEN true
		WHEN lease_owner = ` + owner + ` THEN id <> ALL(` + inFlight + `::bigint[])
		ELSE ` + ownerDead("lease_owner") + ` END`
}

// newLeasedTable builds the statements of t.
func newLeasedTable(t leasedTable) *leasedTable {
	failable := "true"
	if t.unfailable != "" {
		failable = "NOT (" + t.unfailable + ")"
	}
	// A row that used its attempts ($4) is failed, unless it may not be;
	// in a retry, unless its attempt failed for an outage of the database
	// (f.uncounted), which gives it back instead.
	exhausted := "(attempts >= $4 AND " + failable + ")"
	retryExhausted := "(NOT f.uncounted AND " + exhausted + ")"
	uncount := "greatest(attempts - 1, 0)"
	var abandonSet, retrySet, releaseSet []string
	for _, kv := range t.failedSet {
		abandonSet = append(abandonSet, fmt.Sprintf("%s = %s,", kv[0], kv[1]))
		retrySet = append(retrySet, fmt.Sprintf("%s = CASE WHEN %s THEN %s END,", kv[0], retryExhausted, kv[1]))
	}
	for _, kv := range t.releaseSet {
		releaseSet = append(releaseSet, fmt.Sprintf("%s = %s,", kv[0], kv[1]))
	}
	// What becomes of a row that used its attempts: failed, or, in a table
	// that puts its rows back, pending again with its attempts from 0 (so
	// that a row returned with none used them: attempts = 0).
	const abandonedError = "abandoned: no attempt completed"
	retryState := "state = CASE WHEN " + retryExhausted + " THEN 'failed' ELSE 'pending' END, " + strings.Join(retrySet, " ") + `
			attempts = CASE WHEN f.uncounted THEN ` + uncount + ` ELSE attempts END,
			processed_at = CASE WHEN ` + retryExhausted + " THEN clock_timestamp() END,"
	retryFailed := "state = 'failed'"
	abandonState := "state = 'failed', " + strings.Join(abandonSet, " ") + " processed_at = clock_timestamp(),"
	abandonError := "coalesce(t.last_error || '; ', '') || '" + abandonedError + "'"
	if t.rearmAfter != "" {
		retryState = "state = 'pending', attempts = CASE WHEN f.uncounted THEN " + uncount + " WHEN " + exhausted +
			" THEN 0 ELSE attempts END, processed_at = NULL,"
		retryFailed = "(NOT f.uncounted AND attempts = 0)"
		abandonState = "state = 'pending', attempts = 0, next_attempt_at = clock_timestamp() + interval '" + t.rearmAfter +
			"', processed_at = NULL,"
		// Put back round after round, it says so once.
		abandonError = "CASE WHEN t.last_error LIKE '%" + abandonedError + "' THEN t.last_error ELSE " + abandonError + " END"
	}
	r := strings.NewReplacer(
		"{table}", t.table,
		"{abandon_state}", abandonState,
		"{abandon_error}", abandonError,
		"{retry_state}", retryState,
		"{retry_failed}", retryFailed,
		"{release_set}", strings.Join(releaseSet, " "),
		"{owner_dead}", ownerDead("o.lease_owner"),
		"{partition}", partitionCond(t.partition, "$6", t.claimGate),
		"{release_partition}", partitionCond(t.partition, "$2", ""),
		"{async_commit}", asyncCommit,
		"{failable}", failable,
		"{exhausted}", exhausted,
	)

	// Due rows, oldest first (now(), the statement's start, is stable: the
	// scan ends at the first row that is not due, before the leased ones). A
	// due row that is still leased (its lease ran out) is taken only when
	// its owner is not live — or is the claimer itself and the row is not
	// among the ones it works on ($5): a claim it lost track of. A row that
	// has used its attempts without completing — its owner died during
	// each, so Retry never saw it — is not leased again (unless it may not
	// be failed: unfailable) but returned as abandoned (the third column),
	// for Claim to fail (abandonSQL); a claim that finds any leases nothing,
	// so that a failure to fail them loses no lease (Claim claims again once
	// they are failed). The update finds the rows due locked by their ids
	// (an init plan, then the primary key), not through a join with due:
	// the planner hashed due and scanned the whole table for it, every
	// claim — in the bench's outbox drain of 4,000 messages, 62 claims of 64
	// took a median 0.95 to 0.99 ms each that way, 0.77 to 0.82 ms by id,
	// and the scan grows with the table (its backlog and dead rows).
	t.claimSQL = r.Replace(`
		WITH due AS (
			SELECT id, attempts, attempts >= $4 AND {failable} AS abandoned FROM {table}
			WHERE state = 'pending' AND next_attempt_at <= now(){partition}
				AND ` + claimable("$1", "$5") + `
			ORDER BY next_attempt_at, id
			LIMIT $3
			FOR UPDATE SKIP LOCKED
		), claimed AS (
			UPDATE {table} t SET
				lease_owner = $1,
				lease_until = clock_timestamp() + $2::interval,
				next_attempt_at = clock_timestamp() + $2::interval,
				attempts = t.attempts + 1
			WHERE t.id = ANY (ARRAY(SELECT id FROM due WHERE NOT abandoned))
				AND NOT EXISTS (SELECT 1 FROM due a WHERE a.abandoned) AND {async_commit}
			RETURNING t.id, t.attempts
		)
		SELECT id, attempts, false FROM claimed
		UNION ALL
		SELECT id, attempts, true FROM due WHERE abandoned`)

	// The abandoned rows of a claim ($1), locked in id order (skipping any
	// a transaction holds: the next claim finds them again) and failed, each
	// if it still is abandoned (pending, claimable by the claimer $3 with
	// its rows in flight $4, its attempts $2 used, failable), with the last
	// error recorded before (a subquery reads the statement's snapshot: the
	// row as it was).
	t.abandonSQL = r.Replace(`
		WITH locked AS (
			SELECT id AS locked_id FROM {table} WHERE id = ANY($1) ORDER BY id FOR UPDATE SKIP LOCKED
		)
		UPDATE {table} t SET
			{abandon_state}
			lease_owner = NULL, lease_until = NULL,
			last_error = {abandon_error}
		FROM locked WHERE t.id = locked.locked_id AND state = 'pending' AND attempts >= $2 AND {failable}
			AND ` + claimable("$3", "$4") + `
		RETURNING t.id, coalesce((SELECT b.last_error FROM {table} b WHERE b.id = t.id), '')`)

	// The failed attempts of a batch, one row of unnest each ($1 ids, $3
	// causes, $5 due times, $6 whether uncounted), owner $2, budget $4; the
	// rows still leased to the owner are returned, failed or not. Each row
	// is found by its own id: with the ids as an array condition too, a
	// generic plan (made for an array of ten) joined every row leased to
	// the owner with every attempt, quadratic in the batch.
	t.retrySQL = r.Replace(`
		UPDATE {table} SET
			{retry_state}
			last_error = f.cause, next_attempt_at = f.due, lease_owner = NULL, lease_until = NULL
		FROM unnest($1::bigint[], $3::text[], $5::timestamptz[], $6::boolean[]) AS f(failed_id, cause, due, uncounted)
		WHERE ` + leaseHeld("ARRAY[f.failed_id]", "$2") + `
		RETURNING id, {retry_failed}`)

	// A hand-back: due at once, its claim not counted. Of every row
	// leased to owner $1 (in the partition), or of the claims $2 only (by
	// primary key: their partition follows).
	release := `UPDATE {table} SET {release_set} lease_owner = NULL, lease_until = NULL,
			next_attempt_at = clock_timestamp(), attempts = greatest(attempts - 1, 0)
		WHERE `
	t.releaseSQL = r.Replace(release + `lease_owner = $1 AND state = 'pending'{release_partition} AND {async_commit}`)
	t.releaseClaimsSQL = r.Replace(release + `id = ANY($2) AND lease_owner = $1 AND state = 'pending' AND {async_commit}`)

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

// Queue is a leased table as the queue a worker.Queue drains: claims,
// retries, releases, reclaims, wake-ups. The work the claims are for is
// the queue's own (the worker's process function); its statements check
// that the lease is still theirs with leaseHeld.
type Queue struct {
	store *Store
	table *leasedTable
	// partition is the queue's value of the table's partition column
	// (a destination), when the table has one.
	partition string
	// signal wakes its listeners when rows were inserted; nil when items
	// fall due with time only (the worker's poll finds them).
	signal *queueSignal
}

var (
	_ worker.Table        = (*Queue)(nil)
	_ worker.OutageTeller = (*Queue)(nil)
)

// InboxQueue is the inbox: stored provider events, processed by
// InboxProcess.
func (s *Store) InboxQueue() *Queue {
	return &Queue{store: s, table: inboxTable, signal: s.inboxSignal}
}

// OutboxQueue is the outbox messages to destination (none while it is
// disabled), delivered by the dispatcher and recorded by OutboxRecord.
func (s *Store) OutboxQueue(destination string) *Queue {
	return &Queue{store: s, table: outboxTable, partition: destination, signal: s.outboxSignal}
}

// PollQueue is the status polls of started payments (PollLoad,
// PollRecord).
func (s *Store) PollQueue() *Queue { return &Queue{store: s, table: pollTable} }

// SweepQueue is the subscription sweeps (SweepProcess).
func (s *Store) SweepQueue() *Queue { return &Queue{store: s, table: sweepTable} }

// HousekeepingQueue is the housekeeping tasks (HousekeepingTask,
// HousekeepingDone).
func (s *Store) HousekeepingQueue() *Queue { return &Queue{store: s, table: housekeepingTable} }

// partitionArgs are the statements' partition parameter, when q has one.
func (q *Queue) partitionArgs() []any {
	if q.table.partition == "" {
		return nil
	}
	return []any{q.partition}
}

// Claim implements worker.Table. Claiming pushes next_attempt_at to the
// end of the lease, so leased rows drop out of the claim scan; the partial
// index holds pending rows only, so a claim never scans the history. A row
// whose lease ran out is claimed only when its owner is not live (its
// process died or lost its liveness lock): a live worker keeps its rows
// however long it takes, and a live owner takes back its own whose lease
// ran out when they are not in flight. A due row that has used its
// attempts without completing — its worker died each time, which Retry
// never saw — is failed instead of being leased again, by the table's own
// rule as Retry fails one (failAbandoned).
func (q *Queue) Claim(ctx context.Context, p worker.ClaimParams) ([]worker.Claim, error) {
	inFlight := p.InFlight
	if inFlight == nil {
		inFlight = []int64{}
	}
	args := append([]any{p.Owner, p.Lease, p.Limit, p.MaxAttempts, inFlight}, q.partitionArgs()...)
	for round := 1; ; round++ {
		claimed, abandoned, err := q.claim(ctx, args)
		failed := 0
		if err == nil && len(abandoned) > 0 {
			failed, err = q.failAbandoned(ctx, p.Owner, inFlight, abandoned, p.MaxAttempts)
		}
		if err != nil {
			q.store.unreachable(err)
			return nil, fmt.Errorf("claiming %ss: %w", q.table.noun, err)
		}
		// A claim that found abandoned rows leased nothing: claim again
		// once they are failed — while failing them goes on (a row a
		// transaction holds is failed by a later claim), and a bounded
		// number of times (each round fails up to the claim's limit).
		if len(abandoned) == 0 || failed == 0 || round == maxAbandonRounds {
			return claimed, nil
		}
	}
}

// maxAbandonRounds bounds the claims of one Claim that find abandoned rows
// and fail them before claiming again.
const maxAbandonRounds = 16

// claim runs the claim statement with args and returns the rows it leased
// and the abandoned rows it found (and did not lease).
func (q *Queue) claim(ctx context.Context, args []any) (claimed []worker.Claim, abandoned []int64, err error) {
	rows, _ := q.store.leasePool.Query(ctx, q.table.claimSQL, args...)
	var (
		c           worker.Claim
		isAbandoned bool
	)
	_, err = pgx.ForEachRow(rows, []any{&c.ID, &c.Attempts, &isAbandoned}, func() error {
		if isAbandoned {
			abandoned = append(abandoned, c.ID)
		} else {
			claimed = append(claimed, c)
		}
		return nil
	})
	return claimed, abandoned, interpret(err)
}

// failAbandoned fails the rows of ids, which a claim by owner (with the
// rows of inFlight in flight) found abandoned, and completes them as the
// table does the rows Retry fails, in one transaction. A row that another
// claim failed meanwhile is left as it is.
func (q *Queue) failAbandoned(ctx context.Context, owner string, inFlight, ids []int64, maxAttempts int) (int, error) {
	var failed []failedRow
	err := q.store.withRetriedTx(ctx, func(tx pgx.Tx) error {
		failed = failed[:0]
		rows, _ := tx.Query(ctx, q.table.abandonSQL, ids, maxAttempts, owner, inFlight)
		r := failedRow{abandoned: true}
		if _, err := pgx.ForEachRow(rows, []any{&r.id, &r.cause}, func() error {
			failed = append(failed, r)
			return nil
		}); err != nil {
			return fmt.Errorf("failing abandoned %ss: %w", q.table.noun, interpret(err))
		}
		if q.table.failed == nil || len(failed) == 0 {
			return nil
		}
		slices.SortFunc(failed, func(a, b failedRow) int { return cmp.Compare(a.id, b.id) })
		return q.table.failed(ctx, tx, failed, maxAttempts)
	})
	return len(failed), err
}

// TellOutage implements worker.OutageTeller: the store says it once.
func (q *Queue) TellOutage(err error) { q.store.unreachable(err) }

// Retry implements worker.Table, in one statement whatever the number of
// attempts; a row failed is also failed by the table's own rule (an item
// opened), in the same transaction. The rows are written in id order, as
// every batch statement of a queue locks them, and the transaction runs
// again when PostgreSQL broke a deadlock by rolling it back. A cause is
// stored as valid UTF-8 without NUL bytes, which a text column refuses:
// one attempt's cause cannot fail its batch.
func (q *Queue) Retry(ctx context.Context, owner string, rs []worker.Retry, maxAttempts int) ([]worker.RetryOutcome, error) {
	if len(rs) == 0 {
		return nil, nil
	}
	t := q.table
	at := make(map[int64]int, len(rs))
	for i, r := range rs {
		if _, twice := at[r.Claim.ID]; twice {
			return nil, fmt.Errorf("recording failed attempts: %s %d is given twice", t.noun, r.Claim.ID)
		}
		at[r.Claim.ID] = i
	}
	clean := make([]worker.Retry, len(rs)) // rs with storable causes
	for i, r := range rs {
		r.Cause = storableText(r.Cause)
		clean[i] = r
	}
	ids, causes, due, uncounted := make([]int64, len(rs)), make([]string, len(rs)), make([]time.Time, len(rs)), make([]bool, len(rs))
	for i, r := range slices.SortedFunc(slices.Values(clean), func(a, b worker.Retry) int { return cmp.Compare(a.Claim.ID, b.Claim.ID) }) {
		ids[i], causes[i], due[i], uncounted[i] = r.Claim.ID, r.Cause, r.Next, r.Uncounted
	}
	var outcomes []worker.RetryOutcome
	err := q.store.withRetriedTx(ctx, func(tx pgx.Tx) error {
		outcomes = make([]worker.RetryOutcome, len(rs))
		for i := range outcomes {
			outcomes[i] = worker.RetryLost // unless the statement returns its row
		}
		var failed []failedRow
		rows, _ := tx.Query(ctx, t.retrySQL, ids, owner, causes, maxAttempts, due, uncounted)
		var (
			id       int64
			isFailed bool
		)
		_, err := pgx.ForEachRow(rows, []any{&id, &isFailed}, func() error {
			outcomes[at[id]] = worker.RetryScheduled
			if isFailed {
				if t.rearmAfter == "" {
					outcomes[at[id]] = worker.RetryFailed
				}
				failed = append(failed, failedRow{id: id, cause: clean[at[id]].Cause})
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("recording failed attempts: %w", interpret(err))
		}
		if t.failed == nil || len(failed) == 0 {
			return nil
		}
		return t.failed(ctx, tx, failed, maxAttempts)
	})
	if err != nil {
		q.store.unreachable(err)
		return nil, err
	}
	return outcomes, nil
}

// storableText is s as a text column takes it: valid UTF-8, without NUL.
func storableText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// Release implements worker.Table, for q's partition only: each
// destination's dispatcher stops on its own, and must not hand back what
// another one is still sending.
func (q *Queue) Release(ctx context.Context, owner string) (int, error) {
	tag, err := q.store.leasePool.Exec(ctx, q.table.releaseSQL, append([]any{owner}, q.partitionArgs()...)...)
	if err != nil {
		return 0, fmt.Errorf("releasing %s leases: %w", q.table.noun, interpret(err))
	}
	return int(tag.RowsAffected()), nil
}

// ReleaseClaims implements worker.Table.
func (q *Queue) ReleaseClaims(ctx context.Context, owner string, ids []int64) error {
	if _, err := q.store.leasePool.Exec(ctx, q.table.releaseClaimsSQL, owner, ids); err != nil {
		return fmt.Errorf("handing back %ss: %w", q.table.noun, interpret(err))
	}
	return nil
}

// Reclaim implements worker.Table: the rows leased to owners that are not
// live are due at once, whatever their lease (in every partition).
func (q *Queue) Reclaim(ctx context.Context) (int, error) {
	tag, err := q.store.leasePool.Exec(ctx, q.table.reclaimSQL)
	if err != nil {
		err = interpret(err)
		q.store.unreachable(err)
		return 0, fmt.Errorf("reclaiming %ss: %w", q.table.noun, err)
	}
	return int(tag.RowsAffected()), nil
}

// Listen implements worker.Table. Inserts committed by this store wake
// in-process listeners directly; inserts by other replicas arrive as a
// NOTIFY. A queue without a signal waits for ctx: its rows fall due with
// time, never by a commit, so the worker's poll finds them.
func (q *Queue) Listen(ctx context.Context, wake func()) error {
	if q.signal == nil {
		<-ctx.Done()
		return nil
	}
	q.signal.listen(ctx, wake)
	return nil
}

// leaseHeld is the condition that the rows of ids (the SQL expression of
// a bigint array) are still leased to owner (of a text): the check of
// every statement completing or moving a claimed row. Its rows are found
// by primary key: the condition does not name state, so a plan can never
// take the partial index of pending rows (a scan of the whole queue) for
// it. A row leaves 'pending' only with its lease cleared (every statement
// that changes state sets lease_owner to NULL), so a lease held means a
// pending row.
func leaseHeld(ids, owner string) string {
	return "id = ANY(" + ids + ") AND lease_owner = " + owner
}

// lost is the error of a claim of t that its owner no longer holds.
func (t *leasedTable) lost(id int64) error {
	return fmt.Errorf("%s %d: %w", t.noun, id, worker.ErrLeaseLost)
}
