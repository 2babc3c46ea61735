package storage

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// OrderDetail implements fulfillment.OrderStore: the order with its payment
// attempts, entitlements, ledger entries and event timeline, each list
// bounded (count(*) OVER () counts the rows before the LIMIT).
func (s *Store) OrderDetail(ctx context.Context, id string) (fulfillment.OrderDetail, error) {
	order, err := s.OrderGet(ctx, id)
	if err != nil {
		return fulfillment.OrderDetail{}, err
	}
	d := fulfillment.OrderDetail{Order: order}

	// The order row is written once per event and these rows only ever
	// grow, so separate reads show a consistent prefix of its history.
	var total int
	rows, _ := s.pool.Query(ctx, `
		SELECT provider, attempt_ref, state, amount, token, network, currency, created_at, total FROM (
			SELECT id, provider, attempt_ref, state, amount::text, token, network, currency, created_at,
				count(*) OVER () AS total
			FROM payment_attempts WHERE order_id = $1 ORDER BY id DESC LIMIT $2) newest
		ORDER BY id`, id, fulfillment.MaxHistoryItems)
	d.Attempts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.PaymentAttempt, error) {
		var (
			a                                fulfillment.PaymentAttempt
			amount, token, network, currency *string
		)
		if err := r.Scan(&a.Provider, &a.AttemptRef, &a.State, &amount, &token, &network, &currency, &a.CreatedAt, &total); err != nil {
			return a, err
		}
		a.Amount, err = amountOf(amount, token, network, currency)
		return a, err
	})
	if err != nil {
		return fulfillment.OrderDetail{}, fmt.Errorf("reading payment attempts: %w", interpret(err))
	}
	d.OmittedAttempts = omitted(total, len(d.Attempts))

	rows, _ = s.pool.Query(ctx, `
		SELECT e.id, e.kind, l.sku, e.unit, e.value, e.created_at, e.revoked_at, coalesce(e.revoked_reason, ''), count(*) OVER ()
		FROM entitlements e JOIN order_lines l USING (order_id, line_no)
		WHERE e.order_id = $1 ORDER BY e.line_no, e.unit LIMIT $2`, id, fulfillment.MaxLicensesPerOrder)
	total = 0
	d.Entitlements, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.Entitlement, error) {
		var e fulfillment.Entitlement
		err := r.Scan(&e.ID, &e.Kind, &e.SKU, &e.Unit, &e.Value, &e.CreatedAt, &e.RevokedAt, &e.RevokedReason, &total)
		return e, err
	})
	if err != nil {
		return fulfillment.OrderDetail{}, fmt.Errorf("reading entitlements: %w", interpret(err))
	}
	d.OmittedEntitlements = omitted(total, len(d.Entitlements))

	rows, _ = s.pool.Query(ctx, `
		SELECT id, account_ref, movement, currency, minor_units, created_at, total FROM (
			SELECT *, count(*) OVER () AS total
			FROM ledger_entries WHERE order_id = $1 ORDER BY id DESC LIMIT $2) newest
		ORDER BY id`, id, fulfillment.MaxLedgerItems)
	total = 0
	d.Ledger, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.LedgerEntry, error) {
		var e fulfillment.LedgerEntry
		err := r.Scan(&e.ID, &e.AccountRef, &e.Movement, &e.Amount.Currency, &e.Amount.MinorUnits, &e.CreatedAt, &total)
		return e, err
	})
	if err != nil {
		return fulfillment.OrderDetail{}, fmt.Errorf("reading ledger entries: %w", interpret(err))
	}
	d.OmittedLedger = omitted(total, len(d.Ledger))

	rows, _ = s.pool.Query(ctx, `
		SELECT event_id, event_type, received_at, decision, decision_reason,
			EXISTS (SELECT 1 FROM inbox_replays r WHERE r.inbox_event_id = newest.id
				AND r.replayed_by = '`+LateMatchActor+`' AND r.replayed_by_detail LIKE '`+lateMatchDetail+`%'),
			total
		FROM (
			SELECT id, event_id, event_type, received_at, coalesce(decision, '') AS decision,
				coalesce(decision_reason, '') AS decision_reason, count(*) OVER () AS total
			FROM inbox_events WHERE id IN (SELECT event_id FROM inbox_event_orders WHERE order_id = $1)
			ORDER BY received_at DESC, id DESC LIMIT $2) newest
		ORDER BY received_at, id`, id, fulfillment.MaxHistoryItems)
	total = 0
	d.Events, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.TimelineEvent, error) {
		var e fulfillment.TimelineEvent
		err := r.Scan(&e.EventID, &e.Type, &e.ReceivedAt, &e.Decision, &e.Reason, &e.MatchedLater, &total)
		return e, err
	})
	if err != nil {
		return fulfillment.OrderDetail{}, fmt.Errorf("reading order events: %w", interpret(err))
	}
	d.OmittedEvents = omitted(total, len(d.Events))

	d.Deliveries, total, err = s.orderDeliveries(ctx, id)
	if err != nil {
		return fulfillment.OrderDetail{}, err
	}
	d.OmittedDeliveries = omitted(total, len(d.Deliveries))

	// Each start with what became of its payment: the start's own state
	// stays started once the provider created the payment.
	rows, _ = s.pool.Query(ctx, `SELECT `+startColumns+`, `+startPaymentState+`
		FROM payment_starts WHERE order_id = $1 ORDER BY attempt`, id)
	d.Starts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.PaymentStart, error) {
		var payment string
		st, err := scanStartWith(r, &payment)
		st.PaymentState = fulfillment.AttemptState(payment)
		return st, err
	})
	if err != nil {
		return fulfillment.OrderDetail{}, fmt.Errorf("reading payment starts: %w", interpret(err))
	}

	// One row per topic (order_events_order_once), so at most one per order topic.
	rows, _ = s.pool.Query(ctx, `
		SELECT xid::text, id, topic, created_at FROM order_events WHERE order_id = $1 ORDER BY xid, id`, id)
	d.Feed, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.OrderEvent, error) {
		var (
			e   fulfillment.OrderEvent
			xid string
		)
		if err := r.Scan(&xid, &e.Cursor.ID, &e.Topic, &e.CreatedAt); err != nil {
			return e, err
		}
		e.Cursor.XID, err = strconv.ParseUint(xid, 10, 64)
		return e, err
	})
	if err != nil {
		return fulfillment.OrderDetail{}, fmt.Errorf("reading the order's feed events: %w", interpret(err))
	}
	return d, nil
}

// omitted is how many of total rows a bounded read left out.
func omitted(total, read int) int { return max(total-read, 0) }
