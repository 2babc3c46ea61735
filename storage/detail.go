package storage

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// OrderDetail implements fulfillment.OrderStore: the order with its payment
// attempts, entitlements, ledger entries and event timeline.
func (s *Store) OrderDetail(ctx context.Context, id string) (fulfillment.OrderDetail, error) {
	order, err := s.OrderGet(ctx, id)
	if err != nil {
		return fulfillment.OrderDetail{}, err
	}
	d := fulfillment.OrderDetail{Order: order}

	// The order row is written once per event and these rows only ever
	// grow, so separate reads show a consistent prefix of its history.
	rows, _ := s.pool.Query(ctx, `
		SELECT provider, attempt_ref, state, amount::text, coalesce(token, ''), coalesce(network, ''), created_at
		FROM payment_attempts WHERE order_id = $1 ORDER BY id`, id)
	d.Attempts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.PaymentAttempt, error) {
		var (
			a      fulfillment.PaymentAttempt
			amount *string
		)
		if err := r.Scan(&a.Provider, &a.AttemptRef, &a.State, &amount, &a.Token, &a.Network, &a.CreatedAt); err != nil {
			return a, err
		}
		if amount != nil {
			a.HasAmount = true
			a.Amount, err = decimal.NewFromString(*amount)
		}
		return a, err
	})
	if err != nil {
		return fulfillment.OrderDetail{}, fmt.Errorf("reading payment attempts: %w", interpret(err))
	}

	rows, _ = s.pool.Query(ctx, `
		SELECT e.id, e.kind, l.sku, e.unit, e.value, e.created_at
		FROM entitlements e JOIN order_lines l USING (order_id, line_no)
		WHERE e.order_id = $1 ORDER BY e.line_no, e.unit`, id)
	d.Entitlements, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.Entitlement, error) {
		var e fulfillment.Entitlement
		err := r.Scan(&e.ID, &e.Kind, &e.SKU, &e.Unit, &e.Value, &e.CreatedAt)
		return e, err
	})
	if err != nil {
		return fulfillment.OrderDetail{}, fmt.Errorf("reading entitlements: %w", interpret(err))
	}

	rows, _ = s.pool.Query(ctx, `
		SELECT id, account_ref, movement, currency, minor_units, created_at
		FROM ledger_entries WHERE order_id = $1 ORDER BY id`, id)
	d.Ledger, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.LedgerEntry, error) {
		var e fulfillment.LedgerEntry
		err := r.Scan(&e.ID, &e.AccountRef, &e.Movement, &e.Amount.Currency, &e.Amount.MinorUnits, &e.CreatedAt)
		return e, err
	})
	if err != nil {
		return fulfillment.OrderDetail{}, fmt.Errorf("reading ledger entries: %w", interpret(err))
	}

	rows, _ = s.pool.Query(ctx, `
		SELECT event_id, event_type, received_at, coalesce(decision, '')
		FROM inbox_events WHERE order_id = $1 ORDER BY received_at, id`, id)
	d.Events, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.TimelineEvent, error) {
		var e fulfillment.TimelineEvent
		err := r.Scan(&e.EventID, &e.Type, &e.ReceivedAt, &e.Decision)
		return e, err
	})
	if err != nil {
		return fulfillment.OrderDetail{}, fmt.Errorf("reading order events: %w", interpret(err))
	}
	return d, nil
}
