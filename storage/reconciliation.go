package storage

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.ReconStore = (*Store)(nil)

// ReconList implements fulfillment.ReconStore.
func (s *Store) ReconList(ctx context.Context, p fulfillment.ReconListParams) ([]fulfillment.ReconItem, error) {
	var (
		conds []string
		args  []any
	)
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	f := p.Filter
	if f.VisibleOrgs != nil {
		conds = append(conds, "r.org_id = ANY("+arg(f.VisibleOrgs)+")")
	}
	if f.OrgID != "" {
		conds = append(conds, "r.org_id = "+arg(f.OrgID))
	}
	if f.Kind != "" {
		conds = append(conds, "r.kind = "+arg(string(f.Kind)))
	}
	if f.State != "" {
		conds = append(conds, "r.state = "+arg(string(f.State)))
	}
	if f.OrderID != "" {
		conds = append(conds, "r.order_id = "+arg(f.OrderID)+"::uuid")
	}
	if p.BeforeID != 0 {
		conds = append(conds, "r.id < "+arg(p.BeforeID))
	}
	query := `
		SELECT r.id, r.kind, r.state, r.org_id, r.environment, r.order_id, coalesce(e.event_id, ''),
			coalesce(r.provider, ''), coalesce(r.attempt_ref, ''), coalesce(r.payment_id, ''),
			r.amount::text, r.expected_amount::text, coalesce(r.token, ''), coalesce(r.network, ''),
			r.detail, r.created_at, r.resolved_at, coalesce(r.resolved_by, ''), coalesce(r.resolution_note, '')
		FROM reconciliation_items r LEFT JOIN inbox_events e ON e.id = r.inbox_event_id`
	if len(conds) > 0 {
		query += " WHERE " + strings.Join(conds, " AND ")
	}
	query += " ORDER BY r.id DESC LIMIT " + arg(p.Limit)

	rows, _ := s.pool.Query(ctx, query, args...)
	items, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.ReconItem, error) {
		var (
			it               fulfillment.ReconItem
			orderID          *uuid.UUID
			amount, expected *string
		)
		err := r.Scan(&it.ID, &it.Kind, &it.State, &it.OrgID, &it.Environment, &orderID, &it.EventID,
			&it.Provider, &it.AttemptRef, &it.PaymentID, &amount, &expected, &it.Token, &it.Network,
			&it.Detail, &it.CreatedAt, &it.ResolvedAt, &it.ResolvedBy, &it.ResolutionNote)
		if err != nil {
			return it, err
		}
		if orderID != nil {
			it.OrderID = orderID.String()
		}
		if it.Amount, err = optionalDecimal(amount); err != nil {
			return it, err
		}
		it.ExpectedAmount, err = optionalDecimal(expected)
		return it, err
	})
	if err != nil {
		return nil, fmt.Errorf("listing reconciliation items: %w", interpret(err))
	}
	return items, nil
}

func optionalDecimal(s *string) (*decimal.Decimal, error) {
	if s == nil {
		return nil, nil
	}
	d, err := decimal.NewFromString(*s)
	if err != nil {
		return nil, fmt.Errorf("parsing amount: %w", err)
	}
	return &d, nil
}
