package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.HousekeepingWork = (*Store)(nil)

// housekeepingTable is the housekeeper's queue (HousekeepingQueue): one row per task, due again
// an interval after each run (HousekeepingDone moves it).
var housekeepingTable = newLeasedTable(leasedTable{table: "housekeeping_tasks", noun: "housekeeping task"})

// HousekeepingTask implements fulfillment.HousekeepingWork.
func (s *Store) HousekeepingTask(ctx context.Context, id int64, owner string) (fulfillment.HousekeepingTask, error) {
	var task fulfillment.HousekeepingTask
	err := s.pool.QueryRow(ctx, `SELECT task FROM housekeeping_tasks WHERE `+leaseHeld("ARRAY[$1::bigint]", "$2"),
		id, owner).Scan(&task)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", housekeepingTable.lost(id)
	}
	if err != nil {
		return "", fmt.Errorf("reading housekeeping task: %w", interpret(err))
	}
	return task, nil
}

// HousekeepingDone implements fulfillment.HousekeepingWork. The next run
// is scheduled by the database's clock, which every replica shares.
func (s *Store) HousekeepingDone(ctx context.Context, id int64, owner string, n int, interval time.Duration) error {
	tag, err := s.pool.Exec(ctx, `
		UPDATE housekeeping_tasks SET next_attempt_at = clock_timestamp() + $3::interval, attempts = 0,
			lease_owner = NULL, lease_until = NULL, last_error = NULL, last_run_at = clock_timestamp(), last_count = $4
		WHERE `+leaseHeld("ARRAY[$1::bigint]", "$2"), id, owner, interval, n)
	if err != nil {
		return fmt.Errorf("completing housekeeping task: %w", interpret(err))
	}
	if tag.RowsAffected() == 0 {
		return housekeepingTable.lost(id)
	}
	return nil
}

// overdueFulfillmentsSQL reads one batch of orders past the SLA ($1 now,
// NULL for the database's; $2 the SLA; $3 the key prefix; $4 the batch)
// that have no item yet, for OpenOverdueFulfillments to open theirs.
//
// The condition on the orders is fulfillment.PastFulfillmentSLA's; the
// orders its states allow are the rows of orders_unsettled that its
// partial index orders_unsettled_awaiting_idx holds (the order is read
// again under its lock). Orders that have their item already are passed over,
// so that a batch makes progress and an order stuck for days costs nothing
// after its first item — but what makes an item once per order is its
// unique key (ON CONFLICT … DO NOTHING), whatever the sweepers racing. The
// orders are locked in share mode, skipping those a transaction holds (the
// inbox or the outbox is moving them on: the next run looks again), so
// that an order fulfilled meanwhile is read as it is now and none moves on
// before the item is committed.
const overdueFulfillmentsSQL = `
	SELECT o.id::text, o.org_id, o.environment, o.state, o.paid_at, o.paid_attempt_ref, o.paid_payment_id
	FROM orders_unsettled w JOIN orders o ON o.id = w.order_id
	WHERE w.state IN ('paid', 'fulfilling') AND w.paid_at < coalesce($1::timestamptz, now()) - $2::interval
		AND o.paid_at IS NOT NULL AND o.state IN ('paid', 'fulfilling')
		AND NOT EXISTS (SELECT 1 FROM reconciliation_items i
			WHERE i.kind = 'paid_not_fulfilled' AND i.dedupe_key = $3 || o.id::text)
	ORDER BY w.paid_at, w.order_id
	LIMIT $4
	FOR SHARE OF o SKIP LOCKED`

// OpenOverdueFulfillments implements fulfillment.HousekeepingWork, in one
// short transaction: the batch's orders read and locked, then their items
// opened by the one item builder.
func (s *Store) OpenOverdueFulfillments(ctx context.Context, now time.Time, sla time.Duration, limit int) (seen, opened int, err error) {
	err = s.withTx(ctx, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, overdueFulfillmentsSQL, optTime(now), sla, fulfillment.OrderKeyPrefix, limit)
		var (
			items            []item
			subject          fulfillment.ItemSubject
			state            fulfillment.State
			paidAt           time.Time
			attempt, payment *string
		)
		_, err := pgx.ForEachRow(rows, []any{&subject.OrderID, &subject.OrgID, &subject.Environment, &state, &paidAt, &attempt, &payment}, func() error {
			subject.AttemptRef, subject.PaymentID = str(attempt), str(payment)
			items = append(items, item{kind: fulfillment.ReconPaidNotFulfilled, subject: subject,
				detail: fulfillment.OverdueDetail(state, paidAt, sla)})
			return nil
		})
		if err != nil {
			return interpret(err)
		}
		seen = len(items)
		opened, err = openItems(ctx, tx, items)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("opening paid_not_fulfilled items: %w", err)
	}
	return seen, opened, nil
}

// purgeRawBodiesSQL drops the raw bodies of one batch ($3) of events
// received before $1 (NULL: the database's now) minus the retention $2,
// and returns how many events the batch went through (fewer than $3: none
// are left for now) and how many bodies it dropped. Only events that are
// no longer pending: a pending one (a replayed one too) is still to be
// processed.
//
// No index finds the events that still have a body: every webhook stored
// would pay for its entry (migration 041). The purge walks the events in
// id order from a cursor instead (inbox_purge_cursor), so that it never
// reads the purged history behind it. Every event up to the cursor's
// last_id has lost its body or is one of its held_ids: events the walk
// went past while they could not lose it yet (pending, or locked by a
// transaction), which every batch looks at again until their bodies go.
// An event that settles days later still loses its body, and one stuck
// pending does not stop the walk.
//
// A batch reads the held events (held) and the next $3 events past the
// cursor (ahead), those up to the first one received after the cutoff
// (reached: ids follow time, the events after it are recent too). It
// locks up to $3 of them, held ones first, that are old, have their body
// and are not pending, skipping those a transaction holds (being
// processed, or replayed), the state checked again on the locked row so
// that an event put back in the queue meanwhile keeps its body (old), and
// purges them (purged). The cursor
// then moves past the reached events in id order, each purged or held from
// now on (went), up to one left unpurged because the batch was full
// (beyond), or one that would make more than $3 held events: that many
// stuck at once (a backlog older than the retention), and the walk waits
// for them to settle rather than grow the list. The cursor's row is
// written only when it moved; missing (never, but by hand), the statement
// returns no row.
//
// Ids are drawn when an event is stored (by its insert, or by the first
// statement of a decided batch, whose clock is the event's received_at),
// and a transaction that stores events lasts seconds (flushTimeout bounds
// it). So a lower id can become visible after a higher one, but only
// within those seconds. The walk goes past ids only up to an event
// received before the cutoff, and the ids below that event's that it sees
// no row for (rolled back, left unused, or not committed yet) were drawn
// before it was received, longer than the retention ago, by transactions
// that have ended since: the walk never steps over an event still on its
// way. This holds as long as the retention (hours, days) is longer than a
// transaction that stores events.
//
// Batches at once (two replicas, tests) run one after the other: each
// locks the cursor's row first, and one that waited reads the cursor the
// other left. Its snapshot is older than that cursor, which is harmless:
// an event purged since looks unpurged to it, the lock then finds it
// purged (the row rechecked) and leaves it alone, and the event is held or
// stays ahead of the cursor until a later batch sees it purged. Whatever a
// batch counts as purged is: a body never comes back.
//
// When the body went is the database's clock: it is a fact of the row, not
// of the decision.
const purgeRawBodiesSQL = `
	WITH cursor AS (
		SELECT last_id, held_ids FROM inbox_purge_cursor FOR UPDATE
	), ahead AS MATERIALIZED (
		SELECT id, purged, bool_and(old) OVER (ORDER BY id) AS reached
		FROM (
			SELECT id, received_at < coalesce($1::timestamptz, now()) - $2::interval AS old,
				raw_body_purged_at IS NOT NULL AS purged
			FROM inbox_events WHERE id > (SELECT last_id FROM cursor)
			ORDER BY id LIMIT $3
		) a
	), held AS MATERIALIZED (
		SELECT id, raw_body_purged_at IS NOT NULL AS purged
		FROM inbox_events WHERE id = ANY ((SELECT held_ids FROM cursor)::bigint[])
	), old AS (
		SELECT id FROM inbox_events
		WHERE id = ANY (ARRAY(SELECT id FROM held WHERE NOT purged
				UNION ALL SELECT id FROM ahead WHERE reached AND NOT purged))
			AND raw_body_purged_at IS NULL AND received_at < coalesce($1::timestamptz, now()) - $2::interval
			AND state <> 'pending'
		ORDER BY id
		LIMIT $3
		FOR UPDATE SKIP LOCKED
	), purged AS (
		UPDATE inbox_events e SET raw_body = NULL, raw_body_purged_at = clock_timestamp()
		FROM old WHERE e.id = old.id
		RETURNING e.id
	), filled AS (
		SELECT count(*) = $3 AS full, max(id) AS last FROM purged
	), kept AS (
		SELECT h.id FROM held h LEFT JOIN purged p USING (id) WHERE NOT h.purged AND p.id IS NULL
	), marked AS (
		SELECT a.id, a.stuck, a.stuck AND f.full AND a.id > f.last AS beyond,
			count(*) FILTER (WHERE a.stuck) OVER (ORDER BY a.id) AS stuck_so_far
		FROM (
			SELECT a.id, NOT a.purged AND p.id IS NULL AS stuck
			FROM ahead a LEFT JOIN purged p USING (id) WHERE a.reached
		) a, filled f
	), went AS MATERIALIZED (
		SELECT id, stuck FROM (
			SELECT id, stuck, bool_and(NOT beyond AND stuck_so_far + (SELECT count(*) FROM kept) <= $3)
				OVER (ORDER BY id) AS passed
			FROM marked
		) m
		WHERE passed
	), next AS MATERIALIZED (
		SELECT coalesce((SELECT max(id) FROM went), (SELECT last_id FROM cursor)) AS last_id,
			ARRAY(SELECT id FROM kept UNION ALL SELECT id FROM went WHERE stuck ORDER BY 1) AS held_ids
	), moved AS (
		UPDATE inbox_purge_cursor c SET last_id = n.last_id, held_ids = n.held_ids
		FROM next n WHERE (c.last_id, c.held_ids) IS DISTINCT FROM (n.last_id, n.held_ids)
	)
	SELECT (SELECT count(*) FROM went) + (SELECT count(*) FROM held JOIN purged USING (id)),
		(SELECT count(*) FROM purged)
	FROM cursor`

// PurgeRawBodies implements fulfillment.HousekeepingWork, in one statement
// (its own transaction).
func (s *Store) PurgeRawBodies(ctx context.Context, now time.Time, retention time.Duration, limit int) (seen, purged int, err error) {
	err = s.pool.QueryRow(ctx, purgeRawBodiesSQL, optTime(now), retention, limit).Scan(&seen, &purged)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, errors.New("purging raw bodies: the purge's cursor (inbox_purge_cursor) has no row")
	}
	if err != nil {
		return 0, 0, fmt.Errorf("purging raw bodies: %w", interpret(err))
	}
	return seen, purged, nil
}

// optTime is t, or NULL for the zero time.
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
