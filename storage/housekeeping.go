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

// overdueFulfillmentsSQL opens the items of one batch of orders past the
// SLA ($1 now, NULL for the database's; $2 the SLA; $3 the key prefix; $4
// the batch), and counts the orders looked at and the items opened.
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
	WITH due AS (
		SELECT o.id, o.org_id, o.environment, o.state, o.paid_at, o.paid_attempt_ref, o.paid_payment_id
		FROM orders_unsettled w JOIN orders o ON o.id = w.order_id
		WHERE w.state IN ('paid', 'fulfilling') AND w.paid_at < coalesce($1::timestamptz, now()) - $2::interval
			AND o.paid_at IS NOT NULL AND o.state IN ('paid', 'fulfilling')
			AND NOT EXISTS (SELECT 1 FROM reconciliation_items i
				WHERE i.kind = 'paid_not_fulfilled' AND i.dedupe_key = $3 || o.id::text)
		ORDER BY w.paid_at, w.order_id
		LIMIT $4
		FOR SHARE OF o SKIP LOCKED
	), opened AS (
		INSERT INTO reconciliation_items (kind, org_id, environment, order_id, attempt_ref, payment_id, detail, dedupe_key)
		SELECT 'paid_not_fulfilled', org_id, environment, id, paid_attempt_ref, paid_payment_id,
			format('paid at %s and still %s past the fulfillment SLA of %s',
				to_char(paid_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), state, $2::interval),
			$3 || id::text
		FROM due
		ON CONFLICT ON CONSTRAINT reconciliation_items_dedupe_key DO NOTHING
		RETURNING 1
	)
	SELECT (SELECT count(*) FROM due), (SELECT count(*) FROM opened)`

// OpenOverdueFulfillments implements fulfillment.HousekeepingWork, in one
// statement (its own transaction).
func (s *Store) OpenOverdueFulfillments(ctx context.Context, now time.Time, sla time.Duration, limit int) (seen, opened int, err error) {
	err = s.pool.QueryRow(ctx, overdueFulfillmentsSQL, optTime(now), sla, fulfillment.OrderKeyPrefix, limit).Scan(&seen, &opened)
	if err != nil {
		return 0, 0, fmt.Errorf("opening paid_not_fulfilled items: %w", interpret(err))
	}
	return seen, opened, nil
}

// purgeRawBodiesSQL drops the raw bodies of one batch ($3) of events
// received before $1 (NULL: the database's now) minus the retention $2.
// Only events that are no longer pending: a pending one (a replayed one
// too) is still to be processed. The rows are locked, skipping those a
// transaction holds (being processed, or purged by another replica), and
// the state is checked again on the locked row, so that an event put back
// in the queue meanwhile keeps its body. When the body went is the
// database's clock: it is a fact of the row, not of the decision.
const purgeRawBodiesSQL = `
	WITH old AS (
		SELECT id FROM inbox_events
		WHERE raw_body_purged_at IS NULL AND received_at < coalesce($1::timestamptz, now()) - $2::interval
			AND state <> 'pending'
		ORDER BY received_at, id
		LIMIT $3
		FOR UPDATE SKIP LOCKED
	)
	UPDATE inbox_events e SET raw_body = NULL, raw_body_purged_at = clock_timestamp()
	FROM old WHERE e.id = old.id`

// PurgeRawBodies implements fulfillment.HousekeepingWork, in one statement
// (its own transaction).
func (s *Store) PurgeRawBodies(ctx context.Context, now time.Time, retention time.Duration, limit int) (int, error) {
	tag, err := s.pool.Exec(ctx, purgeRawBodiesSQL, optTime(now), retention, limit)
	if err != nil {
		return 0, fmt.Errorf("purging raw bodies: %w", interpret(err))
	}
	return int(tag.RowsAffected()), nil
}

// optTime is t, or NULL for the zero time.
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
