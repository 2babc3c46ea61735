package storage

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// queueOrderEffects queues the attempt, the order's move and its grants.
func queueOrderEffects(b *pgx.Batch, m matchedOrder, ev fulfillment.ProviderEvent, out fulfillment.Outcome) {
	p := ev.Payment
	if out.Attempt != "" && p.AttemptRef != "" {
		var amount *string
		if p.HasAmount {
			a := p.Amount.String()
			amount = &a
		}
		// The stored state was read under the order row lock, which every
		// event of the order takes; the unique key still guarantees one row
		// per attempt.
		b.Queue(`
			INSERT INTO payment_attempts (order_id, provider, attempt_ref, state, amount, token, network)
			VALUES ($1, $2, $3, $4, $5::numeric, nullif($6, ''), nullif($7, ''))
			ON CONFLICT ON CONSTRAINT payment_attempts_ref_key DO UPDATE SET
				state = EXCLUDED.state,
				amount = coalesce(EXCLUDED.amount, payment_attempts.amount),
				token = coalesce(EXCLUDED.token, payment_attempts.token),
				network = coalesce(EXCLUDED.network, payment_attempts.network),
				updated_at = now()`,
			m.id, ev.Provider, p.AttemptRef, fulfillment.NextAttemptState(m.attempt(ev), out.Attempt),
			amount, p.Token, p.Network)
	}
	if out.NewState != "" || out.MarkPaid {
		// An absent ref is NULL, never '': a payment that does not identify
		// itself records none.
		paid := p.PaidRefs()
		b.Queue(`
			UPDATE orders SET
				state = coalesce(nullif($2, ''), state),
				paid_attempt_ref = CASE WHEN $3 THEN nullif($4, '') ELSE paid_attempt_ref END,
				paid_invoice_id  = CASE WHEN $3 THEN nullif($5, '') ELSE paid_invoice_id END,
				paid_payment_id  = CASE WHEN $3 THEN nullif($6, '') ELSE paid_payment_id END,
				paid_at          = CASE WHEN $3 THEN now() ELSE paid_at END,
				updated_at = now()
			WHERE id = $1`, m.id, out.NewState, out.MarkPaid, paid.AttemptRef, paid.InvoiceID, paid.PaymentID)
	}
	if !out.Grant {
		return
	}
	// One license per unit and one credit per balance line; the unique keys
	// make a repeated grant insert nothing.
	b.Queue(`
		INSERT INTO entitlements (order_id, line_no, unit, kind, value)
		SELECT l.order_id, l.line_no, u, 'license',
			'LIC-' || upper(replace(gen_random_uuid()::text, '-', ''))
		FROM order_lines l, generate_series(1, l.quantity) AS u
		WHERE l.order_id = $1 AND l.kind = 'license'
		ON CONFLICT ON CONSTRAINT entitlements_unit_key DO NOTHING`, m.id)
	b.Queue(`
		INSERT INTO ledger_entries (order_id, line_no, account_ref, movement, currency, minor_units)
		SELECT l.order_id, l.line_no, l.account_ref, 'credit', l.currency, l.unit_minor_units * l.quantity
		FROM order_lines l
		WHERE l.order_id = $1 AND l.kind = 'balance_credit'
		ON CONFLICT ON CONSTRAINT ledger_entries_movement_key DO NOTHING`, m.id)
}

// queueItem opens a reconciliation item unless the same situation already
// has one (the dedupe key names it).
func queueItem(b *pgx.Batch, kind fulfillment.ReconKind, inboxID int64, m matchedOrder,
	ev fulfillment.ProviderEvent, detail string) {
	p := ev.Payment
	dedupe := fmt.Sprintf("%s|%s|%s|%s|%s|%s", ev.Provider, ev.OrgID, ev.Environment, m.id, p.AttemptRef, p.PaymentID)
	switch {
	case kind == fulfillment.ReconUnidentifiedPayment:
		// Such payments cannot be told apart from one another: one item
		// per order, however many announcements.
		dedupe = "order|" + m.id
	case p.AttemptRef == "" && p.PaymentID == "":
		dedupe += "|" + ev.EventID
	}
	var amount, expected, linked *string
	if p.HasAmount {
		a := p.Amount.String()
		amount = &a
	}
	if m.order != nil {
		linked = &m.id
		if st := m.order.Settlement; st != nil {
			e := st.Amount.String()
			expected = &e
		}
	}
	b.Queue(`
		INSERT INTO reconciliation_items (kind, org_id, environment, order_id, inbox_event_id, provider,
			attempt_ref, payment_id, amount, expected_amount, token, network, detail, dedupe_key)
		VALUES ($1, $2, $3, $4, $5, $6, nullif($7, ''), nullif($8, ''), $9::numeric, $10::numeric,
			nullif($11, ''), nullif($12, ''), $13, $14)
		ON CONFLICT ON CONSTRAINT reconciliation_items_dedupe_key DO NOTHING`,
		kind, ev.OrgID, ev.Environment, linked, inboxID, ev.Provider, p.AttemptRef, p.PaymentID,
		amount, expected, p.Token, p.Network, detail, dedupe)
}
