package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/internal/failpoint"
)

// InboxProcess implements fulfillment.InboxWork. A batch costs four round
// trips whatever its size: lock the events, lock their orders (in id order,
// so that concurrent batches cannot deadlock), read the orders' attempts,
// then send every write in one pipelined batch — and one commit. Events of
// one order are decided in event order against the order as the previous
// ones left it.
func (s *Store) InboxProcess(ctx context.Context, ids []int64, owner string) (map[int64]fulfillment.Outcome, error) {
	outcomes := make(map[int64]fulfillment.Outcome, len(ids))
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		events, err := lockLeasedEvents(ctx, tx, ids, owner)
		if err != nil || len(events) == 0 {
			return err
		}
		orders, err := lockOrders(ctx, tx, events)
		if err != nil {
			return err
		}
		b := &pgx.Batch{}
		for _, le := range events {
			m := orders.match(le.ev)
			out := fulfillment.Decide(le.ev, m.order)
			var linked *string
			if m.order != nil {
				queueOrderEffects(b, *m, le.ev, out)
				m.apply(le.ev, out)
				linked = &m.id
			}
			if out.Item != "" {
				queueItem(b, out.Item, le.id, *m, le.ev, out.Reason)
			}
			b.Queue(`
				UPDATE inbox_events SET state = $2, decision = $3, decision_reason = $4, order_id = $5,
					processed_at = clock_timestamp(), lease_owner = NULL, lease_until = NULL, last_error = NULL
				WHERE id = $1`,
				le.id, fulfillment.InboxStateFor(out.Decision), out.Decision, out.Reason, linked)
			outcomes[le.id] = out
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("applying decisions: %w", interpret(err))
		}
		failpoint.Inject("process-before-commit")
		return nil
	})
	if err != nil {
		return nil, err
	}
	failpoint.Inject("process-after-commit")
	return outcomes, nil
}

// leasedEvent is an inbox event locked for processing.
type leasedEvent struct {
	id int64
	ev fulfillment.ProviderEvent
}

// lockLeasedEvents reads, in id order, the events of ids that owner still
// holds, locking their rows. Events whose lease was lost are left out.
func lockLeasedEvents(ctx context.Context, tx pgx.Tx, ids []int64, owner string) ([]leasedEvent, error) {
	rows, _ := tx.Query(ctx, `
		SELECT id, provider, endpoint_id, org_id, environment, event_id, event_type, kind, test_mode, occurred_at,
			attempt_ref, payment_id, invoice_id, checkout_session_id, merchant_order_id, paylink_id,
			subscription_id, amount::text, token, network, tx_hash
		FROM inbox_events WHERE id = ANY($1) AND state = 'pending' AND lease_owner = $2
		ORDER BY id
		FOR UPDATE`, ids, owner)
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (leasedEvent, error) {
		var (
			le       leasedEvent
			ev       = &le.ev
			p        = &ev.Payment
			occurred *time.Time
			amount   *string
			texts    [10]*string
		)
		err := r.Scan(&le.id, &ev.Provider, &ev.EndpointID, &ev.OrgID, &ev.Environment, &ev.EventID, &ev.Type,
			&ev.Kind, &ev.TestMode, &occurred, &texts[0], &texts[1], &texts[2], &texts[3], &texts[4], &texts[5],
			&texts[6], &amount, &texts[7], &texts[8], &texts[9])
		if err != nil {
			return le, err
		}
		if occurred != nil {
			ev.OccurredAt = *occurred
		}
		for i, dst := range []*string{&p.AttemptRef, &p.PaymentID, &p.InvoiceID, &p.CheckoutSessionID,
			&p.MerchantOrderID, &p.PaylinkID, &p.SubscriptionID, &p.Token, &p.Network, &p.TxHash} {
			if texts[i] != nil {
				*dst = *texts[i]
			}
		}
		if amount != nil {
			if p.Amount, err = decimal.NewFromString(*amount); err != nil {
				return le, fmt.Errorf("parsing stored amount: %w", err)
			}
			p.HasAmount = true
		}
		return le, nil
	})
	if err != nil {
		return nil, fmt.Errorf("locking inbox events: %w", interpret(err))
	}
	return events, nil
}

// matchedOrder is a locked order as the events decided so far left it.
type matchedOrder struct {
	id    string
	order *fulfillment.PaidOrder // nil: no order matches
	// attempts holds the stored state of the order's payment attempts, by
	// provider and attempt ref.
	attempts map[[2]string]fulfillment.AttemptState
}

// attempt is the stored state of ev's payment attempt ("" when new).
func (m matchedOrder) attempt(ev fulfillment.ProviderEvent) fulfillment.AttemptState {
	return m.attempts[[2]string{string(ev.Provider), ev.Payment.AttemptRef}]
}

// apply records what an outcome changed, for the next event of the order.
func (m *matchedOrder) apply(ev fulfillment.ProviderEvent, out fulfillment.Outcome) {
	if out.NewState != "" {
		m.order.State = out.NewState
	}
	if out.MarkPaid {
		m.order.Paid = true
		m.order.PaidBy = ev.Payment.PaidRefs()
	}
	if out.Attempt != "" && ev.Payment.AttemptRef != "" {
		k := [2]string{string(ev.Provider), ev.Payment.AttemptRef}
		m.attempts[k] = fulfillment.NextAttemptState(m.attempts[k], out.Attempt)
	}
}

// orderKey finds an order by one of its identifiers within a tenant.
type orderKey struct{ org, env, column, value string }

// lockedOrders are the orders of a batch, by the keys events name them with.
type lockedOrders map[orderKey]*matchedOrder

// match finds the event's order by merchant order id, else by checkout
// session — never by paylink. The zero matchedOrder means none.
func (lo lockedOrders) match(ev fulfillment.ProviderEvent) *matchedOrder {
	for _, k := range []orderKey{
		{ev.OrgID, string(ev.Environment), "merchant_order_id", ev.Payment.MerchantOrderID},
		{ev.OrgID, string(ev.Environment), "checkout_session_id", ev.Payment.CheckoutSessionID},
	} {
		if m, ok := lo[k]; ok && k.value != "" {
			return m
		}
	}
	return &matchedOrder{}
}

// lockOrders locks every order the events name, in id order, and reads
// their payment attempts. (Each key set is looked up through its own
// unique index; an OR of the two would scan the table.)
func lockOrders(ctx context.Context, tx pgx.Tx, events []leasedEvent) (lockedOrders, error) {
	var mOrg, mEnv, mID, cOrg, cEnv, cID []string
	for _, le := range events {
		ev := le.ev
		if v := ev.Payment.MerchantOrderID; v != "" {
			mOrg, mEnv, mID = append(mOrg, ev.OrgID), append(mEnv, string(ev.Environment)), append(mID, v)
		}
		if v := ev.Payment.CheckoutSessionID; v != "" {
			cOrg, cEnv, cID = append(cOrg, ev.OrgID), append(cEnv, string(ev.Environment)), append(cID, v)
		}
	}
	lo := lockedOrders{}
	if len(mID)+len(cID) == 0 {
		return lo, nil
	}
	// Absent paid refs are NULL and read as "", as PaymentInfo has them.
	rows, _ := tx.Query(ctx, `
		SELECT id, org_id, environment, merchant_order_id, coalesce(checkout_session_id, ''), state,
			settlement_token, settlement_network, settlement_amount::text, settlement_tolerance::text,
			paid_at IS NOT NULL, coalesce(paid_attempt_ref, ''), coalesce(paid_invoice_id, ''), coalesce(paid_payment_id, ''),
			EXISTS (SELECT 1 FROM order_lines l WHERE l.order_id = o.id AND l.kind = 'external')
		FROM orders o
		WHERE id IN (
			SELECT id FROM orders WHERE (org_id, environment, merchant_order_id) IN (
				SELECT * FROM unnest($1::text[], $2::text[], $3::text[]))
			UNION
			SELECT id FROM orders WHERE (org_id, environment, checkout_session_id) IN (
				SELECT * FROM unnest($4::text[], $5::text[], $6::text[])))
		ORDER BY id
		FOR UPDATE`, mOrg, mEnv, mID, cOrg, cEnv, cID)
	byID := map[string]*matchedOrder{}
	var ids []string
	err := forEachRow(rows, func(r pgx.Rows) error {
		var (
			id                                uuid.UUID
			org, env, merchantID, sessionID   string
			o                                 fulfillment.PaidOrder
			token, network, amount, tolerance *string
		)
		if err := r.Scan(&id, &org, &env, &merchantID, &sessionID, &o.State, &token, &network, &amount,
			&tolerance, &o.Paid, &o.PaidBy.AttemptRef, &o.PaidBy.InvoiceID, &o.PaidBy.PaymentID, &o.HasExternalLines); err != nil {
			return err
		}
		var err error
		if o.Settlement, err = settlementFrom(token, network, amount, tolerance); err != nil {
			return err
		}
		m := &matchedOrder{id: id.String(), order: &o, attempts: map[[2]string]fulfillment.AttemptState{}}
		byID[m.id] = m
		ids = append(ids, m.id)
		lo[orderKey{org, env, "merchant_order_id", merchantID}] = m
		if sessionID != "" {
			lo[orderKey{org, env, "checkout_session_id", sessionID}] = m
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("locking orders: %w", interpret(err))
	}
	if len(ids) == 0 {
		return lo, nil
	}
	// The order locks protect the attempts: every writer of an order's
	// attempts holds its order row.
	rows, _ = tx.Query(ctx, `
		SELECT order_id, provider, attempt_ref, state FROM payment_attempts WHERE order_id = ANY($1::uuid[])`, ids)
	err = forEachRow(rows, func(r pgx.Rows) error {
		var (
			orderID       uuid.UUID
			provider, ref string
			state         fulfillment.AttemptState
		)
		if err := r.Scan(&orderID, &provider, &ref, &state); err != nil {
			return err
		}
		byID[orderID.String()].attempts[[2]string{provider, ref}] = state
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading payment attempts: %w", interpret(err))
	}
	return lo, nil
}

// forEachRow calls fn for every row and closes rows.
func forEachRow(rows pgx.Rows, fn func(pgx.Rows) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
