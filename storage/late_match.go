package storage

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// maxLateMatches bounds the events one order's creation queues again (the
// oldest first); any beyond it stay unmatched, their items open.
const maxLateMatches = 1000

// LateMatchActor is who the service records as having queued again an
// event whose order was created after it (the replay's replayed_by, the
// item's resolved_by).
const LateMatchActor = "service"

// lateMatchSQL queues again, in the transaction that creates order $6, the
// events of its org ($1) and environment ($2) that were decided unmatched
// and name its merchant order id ($3) or checkout session ($4, NULL for
// none), received within the late match window ($5): each gets a replay
// record (the timeline shows that the payment came first), a fresh work
// row, and its unmatched_payment item resolved as matched_later, linked to
// the order (inboxReplay). At most $7 of them, the oldest. The events are
// found through the partial indexes of unmatched events, and locked: a
// concurrent replay of one waits, then finds it pending. It returns how
// many it queued.
var lateMatchSQL = `
	WITH late AS MATERIALIZED (
		SELECT id FROM inbox_events
		WHERE state = 'unmatched' AND org_id = $1 AND environment = $2 AND merchant_order_id = $3
			AND received_at > now() - $5::interval
		UNION
		SELECT id FROM inbox_events
		WHERE state = 'unmatched' AND org_id = $1 AND environment = $2 AND checkout_session_id = $4
			AND received_at > now() - $5::interval
	), locked AS MATERIALIZED (
		SELECT e.id FROM inbox_events e JOIN late USING (id)
		WHERE e.state = 'unmatched'
		ORDER BY e.id
		LIMIT $7
		FOR UPDATE OF e
	), ` + inboxReplay("SELECT id FROM locked", "'"+LateMatchActor+"'",
	"'late match: order ' || $6::text || ' was created after this event'") + `, items AS (
		UPDATE reconciliation_items SET state = 'resolved', resolution = '` + string(fulfillment.ResolutionMatchedLater) + `',
			resolved_at = clock_timestamp(), resolved_by = '` + LateMatchActor + `',
			resolution_note = 'the order was created after the payment; the payment is processed again against it',
			order_id = $6::uuid
		WHERE kind = '` + string(fulfillment.ReconUnmatchedPayment) + `' AND state = 'open'
			AND inbox_event_id IN (SELECT id FROM done)
	)
	SELECT count(*) FROM done`

// requeueLateEvents queues again, in tx, the unmatched events that the
// order spec (id) would have matched had it existed (lateMatchSQL), and
// tells the other replicas' inbox workers when there are any. It returns
// how many.
func (s *Store) requeueLateEvents(ctx context.Context, tx pgx.Tx, id uuid.UUID, spec fulfillment.OrderSpec) (int, error) {
	var n int
	err := tx.QueryRow(ctx, lateMatchSQL, spec.OrgID, spec.Environment, spec.MerchantOrderID,
		opt(spec.CheckoutSessionID), s.lateMatch, id, maxLateMatches).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("queueing the events that came before the order: %w", interpret(err))
	}
	if n > 0 {
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, '')`, inboxChannel); err != nil {
			return 0, fmt.Errorf("waking the inbox: %w", interpret(err))
		}
	}
	return n, nil
}
