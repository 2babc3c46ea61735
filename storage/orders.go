package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/internal/failpoint"
)

// orderColumns are the orders columns scanOrder reads, in its order.
const orderColumns = `id, org_id, environment, merchant_order_id, coalesce(checkout_session_id, ''),
	state, settlement_token, settlement_network, settlement_amount::text, settlement_tolerance::text,
	fingerprint, created_at, updated_at`

// OrderCreate implements fulfillment.OrderStore. The unique key on
// (org_id, environment, merchant_order_id) decides which of several
// concurrent identical requests creates the order; the others wait for its
// commit, insert nothing and return the committed order. The insert skips
// a conflict on any unique key: an identical request that waited on the
// winner's checkout session (the other key) must not take it for another
// order's; what it met is told from the stored order after.
func (s *Store) OrderCreate(ctx context.Context, spec fulfillment.OrderSpec) (fulfillment.Order, bool, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return fulfillment.Order{}, false, fmt.Errorf("generating order id: %w", err)
	}
	fingerprint := spec.Fingerprint()
	created := false
	late := 0 // events that came before the order, queued again
	var createdAt time.Time
	// Run again after a deadlock: the queueing of the events that came
	// first may meet a batch deciding one of them again (see lateMatches).
	err = s.withRetriedTx(ctx, func(tx pgx.Tx) error {
		created, late = false, 0
		total := spec.Total()
		var token, network, amount, tolerance *string
		if st := spec.Settlement; st != nil {
			a, t := st.Amount.String(), st.Tolerance.String()
			token, network, amount, tolerance = &st.Token, &st.Network, &a, &t
		}
		err := tx.QueryRow(ctx, `
			INSERT INTO orders (id, org_id, environment, merchant_order_id, checkout_session_id, state,
				total_currency, total_minor_units,
				settlement_token, settlement_network, settlement_amount, settlement_tolerance, fingerprint)
			VALUES ($1, $2, $3, $4, nullif($5, ''), $6, $7, $8, $9, $10, $11::numeric, $12::numeric, $13)
			ON CONFLICT DO NOTHING
			RETURNING created_at`,
			id, spec.OrgID, spec.Environment, spec.MerchantOrderID, spec.CheckoutSessionID,
			fulfillment.StatePendingPayment, total.Currency, total.MinorUnits,
			token, network, amount, tolerance, fingerprint).Scan(&createdAt)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // a key exists: compare content below
		}
		if err != nil {
			return fmt.Errorf("inserting order: %w", interpret(err))
		}
		rows := make([][]any, len(spec.Lines))
		for i, l := range spec.Lines {
			rows[i] = []any{id, i, l.SKU, string(l.Kind), l.Quantity, l.UnitPrice.Currency, l.UnitPrice.MinorUnits,
				opt(l.AccountRef), opt(l.Destination), opt(l.PlanID)}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"order_lines"},
			[]string{"order_id", "line_no", "sku", "kind", "quantity", "currency", "unit_minor_units", "account_ref", "destination", "plan_id"},
			pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("inserting order lines: %w", interpret(err))
		}
		created = true
		late, err = s.requeueLateEvents(ctx, tx, lateMatchSQL, id, spec.OrgID, spec.Environment, spec.MerchantOrderID, spec.CheckoutSessionID)
		return err
	})
	if err != nil {
		return fulfillment.Order{}, false, err
	}
	if late > 0 {
		// Committed with the order: a crash from here on leaves the
		// events queued, for any replica to process.
		failpoint.Inject("order-after-create")
		s.inboxSignal.committed()
	}
	if created {
		return fulfillment.Order{ID: id.String(), OrderSpec: spec, State: fulfillment.StatePendingPayment,
			CreatedAt: createdAt, UpdatedAt: createdAt}, true, nil
	}

	// A new statement sees the committed winner of the race.
	order, storedFingerprint, err := s.orderGetWhere(ctx,
		"org_id = $1 AND environment = $2 AND merchant_order_id = $3",
		spec.OrgID, spec.Environment, spec.MerchantOrderID)
	if errors.Is(err, fulfillment.ErrNotFound) && spec.CheckoutSessionID != "" {
		// No order of this merchant order id: the key the insert met
		// was the checkout session's, another order's.
		return fulfillment.Order{}, false, fmt.Errorf("%w: checkout session %q already pays another order",
			fulfillment.ErrConflict, spec.CheckoutSessionID)
	}
	if err != nil {
		return fulfillment.Order{}, false, err
	}
	if storedFingerprint != fingerprint {
		return fulfillment.Order{}, false, fmt.Errorf(
			"%w: order %s already exists for merchant_order_id %q with different content",
			fulfillment.ErrConflict, order.ID, spec.MerchantOrderID)
	}
	return order, false, nil
}

// OrderGet implements fulfillment.OrderStore.
func (s *Store) OrderGet(ctx context.Context, id string) (fulfillment.Order, error) {
	order, _, err := s.orderGetWhere(ctx, "id = $1", id)
	return order, err
}

func (s *Store) orderGetWhere(ctx context.Context, where string, args ...any) (fulfillment.Order, string, error) {
	row := s.pool.QueryRow(ctx, "SELECT "+orderColumns+" FROM orders WHERE "+where, args...)
	order, fingerprint, err := scanOrder(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return fulfillment.Order{}, "", fulfillment.ErrOrderNotFound
	}
	if err != nil {
		return fulfillment.Order{}, "", fmt.Errorf("reading order: %w", interpret(err))
	}
	orders := []*fulfillment.Order{&order}
	if err := s.loadLines(ctx, orders); err != nil {
		return fulfillment.Order{}, "", err
	}
	return order, fingerprint, nil
}

// OrderList implements fulfillment.OrderStore.
func (s *Store) OrderList(ctx context.Context, p fulfillment.OrderListParams) ([]fulfillment.Order, error) {
	var w where
	f := p.Filter
	w.among("org_id", f.VisibleOrgs)
	w.eq("org_id", f.OrgID)
	w.eq("environment", string(f.Environment))
	w.eq("state", string(f.State))
	w.eq("merchant_order_id", f.MerchantOrderID)
	if f.CustomerRef != "" {
		w.add("id IN (SELECT order_id FROM order_lines WHERE account_ref = " + w.arg(f.CustomerRef) + ")")
	}
	if f.PaymentRef != "" {
		w.add("id IN (SELECT order_id FROM payment_attempts WHERE attempt_ref = " + w.arg(f.PaymentRef) + ")")
	}
	if p.BeforeID != "" {
		w.add("id < " + w.arg(p.BeforeID))
	}
	query := "SELECT " + orderColumns + " FROM orders" + w.sql() + " ORDER BY id DESC LIMIT " + w.arg(p.Limit)

	rows, err := s.pool.Query(ctx, query, w.args...)
	if err != nil {
		return nil, fmt.Errorf("listing orders: %w", interpret(err))
	}
	defer rows.Close()
	var orders []fulfillment.Order
	for rows.Next() {
		order, _, err := scanOrder(rows)
		if err != nil {
			return nil, fmt.Errorf("reading order: %w", interpret(err))
		}
		orders = append(orders, order)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing orders: %w", interpret(err))
	}
	ptrs := make([]*fulfillment.Order, len(orders))
	for i := range orders {
		ptrs[i] = &orders[i]
	}
	if err := s.loadLines(ctx, ptrs); err != nil {
		return nil, err
	}
	return orders, nil
}

// loadLines fills in the lines of orders with one query.
func (s *Store) loadLines(ctx context.Context, orders []*fulfillment.Order) error {
	if len(orders) == 0 {
		return nil
	}
	byID := make(map[string]*fulfillment.Order, len(orders))
	ids := make([]string, len(orders))
	for i, o := range orders {
		byID[o.ID] = o
		ids[i] = o.ID
	}
	rows, err := s.pool.Query(ctx, `
		SELECT order_id, sku, kind, quantity, currency, unit_minor_units, coalesce(account_ref, ''),
			coalesce(destination, ''), coalesce(plan_id, '')
		FROM order_lines WHERE order_id = ANY($1::uuid[]) ORDER BY order_id, line_no`, ids)
	if err != nil {
		return fmt.Errorf("reading order lines: %w", interpret(err))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			orderID uuid.UUID
			l       fulfillment.Line
		)
		if err := rows.Scan(&orderID, &l.SKU, &l.Kind, &l.Quantity, &l.UnitPrice.Currency,
			&l.UnitPrice.MinorUnits, &l.AccountRef, &l.Destination, &l.PlanID); err != nil {
			return fmt.Errorf("reading order line: %w", interpret(err))
		}
		o := byID[orderID.String()]
		o.Lines = append(o.Lines, l)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("reading order lines: %w", interpret(err))
	}
	return nil
}

// scanOrder reads orderColumns; it returns the stored content fingerprint too.
func scanOrder(row pgx.Row) (fulfillment.Order, string, error) {
	var (
		o                                 fulfillment.Order
		id                                uuid.UUID
		token, network, amount, tolerance *string
		fingerprint                       string
	)
	err := row.Scan(&id, &o.OrgID, &o.Environment, &o.MerchantOrderID, &o.CheckoutSessionID,
		&o.State, &token, &network, &amount, &tolerance, &fingerprint, &o.CreatedAt, &o.UpdatedAt)
	if err != nil {
		return fulfillment.Order{}, "", err
	}
	o.ID = id.String()
	if o.Settlement, err = settlementFrom(token, network, amount, tolerance); err != nil {
		return fulfillment.Order{}, "", err
	}
	return o, fingerprint, nil
}

// settlementFrom reads the nullable settlement columns.
func settlementFrom(token, network, amount, tolerance *string) (*fulfillment.Settlement, error) {
	if token == nil {
		return nil, nil
	}
	st := &fulfillment.Settlement{Token: *token, Network: *network}
	var err error
	if st.Amount, err = decimal.NewFromString(*amount); err != nil {
		return nil, fmt.Errorf("parsing settlement amount: %w", err)
	}
	if st.Tolerance, err = decimal.NewFromString(*tolerance); err != nil {
		return nil, fmt.Errorf("parsing settlement tolerance: %w", err)
	}
	return st, nil
}
