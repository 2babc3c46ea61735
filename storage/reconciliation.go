package storage

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.ReconStore = (*Store)(nil)

// reconColumns are what is read of an item (scanReconItem), from
// reconciliation_items r LEFT JOIN inbox_events e ON e.id = r.inbox_event_id.
const reconColumns = `r.id, r.kind, r.state, r.org_id, r.environment, r.order_id, coalesce(e.event_id, ''),
	coalesce(r.provider, ''), coalesce(r.attempt_ref, ''), coalesce(r.payment_id, ''),
	r.amount::text, r.expected_amount::text, r.token, r.network, r.currency,
	r.detail, r.created_at, r.resolved_at, coalesce(r.resolved_by, ''), coalesce(r.resolution_note, ''),
	coalesce(r.outbox_message_id, 0), coalesce(r.resolution, ''), coalesce(r.resolved_by_detail, ''),
	coalesce(r.inbox_event_id, 0), coalesce(r.payment_start_id, 0), r.subscription_id`

const reconFrom = ` FROM reconciliation_items r LEFT JOIN inbox_events e ON e.id = r.inbox_event_id`

func scanReconItem(r pgx.Row) (fulfillment.ReconItem, error) {
	var (
		it                                         fulfillment.ReconItem
		orderID, subID                             *uuid.UUID
		amount, expected, token, network, currency *string
	)
	err := r.Scan(&it.ID, &it.Kind, &it.State, &it.OrgID, &it.Environment, &orderID, &it.EventID,
		&it.Provider, &it.AttemptRef, &it.PaymentID, &amount, &expected, &token, &network, &currency,
		&it.Detail, &it.CreatedAt, &it.ResolvedAt, &it.ResolvedBy, &it.ResolutionNote, &it.MessageID,
		&it.Resolution, &it.ResolvedByDetail, &it.InboxID, &it.PaymentStartID, &subID)
	if err != nil {
		return it, err
	}
	if orderID != nil {
		it.OrderID = orderID.String()
	}
	if subID != nil {
		it.SubscriptionID = subID.String()
	}
	if it.Amount, err = amountOf(amount, token, network, currency); err != nil {
		return it, err
	}
	it.Expected, err = amountOf(expected, token, network, currency)
	return it, err
}

// reconWhere adds f's conditions to w.
func reconWhere(w *where, f fulfillment.ReconFilter) {
	w.among("r.org_id", f.VisibleOrgs)
	w.eq("r.org_id", f.OrgID)
	w.eq("r.environment", string(f.Environment))
	w.eq("r.kind", string(f.Kind))
	w.eq("r.state", string(f.State))
	w.uuidEq("r.order_id", f.OrderID)
	if !f.CreatedFrom.IsZero() {
		w.add("r.created_at >= " + w.arg(f.CreatedFrom))
	}
	if !f.CreatedBefore.IsZero() {
		w.add("r.created_at < " + w.arg(f.CreatedBefore))
	}
}

// ReconList implements fulfillment.ReconStore.
func (s *Store) ReconList(ctx context.Context, p fulfillment.ReconListParams) ([]fulfillment.ReconItem, error) {
	var w where
	reconWhere(&w, p.Filter)
	w.below("r.id", p.BeforeID)
	query := "SELECT " + reconColumns + reconFrom + w.sql() + " ORDER BY r.id DESC LIMIT " + w.arg(p.Limit)
	rows, _ := s.pool.Query(ctx, query, w.args...)
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.ReconItem, error) { return scanReconItem(r) })
	if err != nil {
		return nil, fmt.Errorf("listing reconciliation items: %w", interpret(err))
	}
	return items, nil
}
