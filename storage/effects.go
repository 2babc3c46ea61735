package storage

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// queueEffects queues the writes of a step's effects on its order, in
// order: the one place where an order's decision becomes SQL. The step's
// order is nil when none matched the event. It reports what it queued for
// listeners.
func (s *Store) queueEffects(b *pgx.Batch, le leasedEvent, st fulfillment.Step) (q queued, err error) {
	ev, p, m, out := le.ev, le.ev.Payment, st.Order, st.Outcome
	var (
		moveTo   fulfillment.State
		markPaid bool
		publish  []fulfillment.Topic
		withdraw bool
	)
	for _, effect := range out.Effects {
		if m == nil {
			if _, ok := effect.(fulfillment.OpenItem); !ok {
				return q, fmt.Errorf("applying %T: the event matches no order", effect)
			}
		}
		switch e := effect.(type) {
		case fulfillment.RecordAttempt:
			value, token, network, currency := amountColumns(p.Amount)
			// The stored state was read under the order row lock, which
			// every event of the order takes; the unique key still
			// guarantees one row per attempt.
			b.Queue(`
				INSERT INTO payment_attempts (order_id, provider, attempt_ref, state, amount, token, network, currency)
				VALUES ($1, $2, $3, $4, $5::numeric, $6, $7, $8)
				ON CONFLICT ON CONSTRAINT payment_attempts_ref_key DO UPDATE SET
					state = EXCLUDED.state,
					amount = coalesce(EXCLUDED.amount, payment_attempts.amount),
					token = CASE WHEN EXCLUDED.amount IS NULL THEN payment_attempts.token ELSE EXCLUDED.token END,
					network = CASE WHEN EXCLUDED.amount IS NULL THEN payment_attempts.network ELSE EXCLUDED.network END,
					currency = CASE WHEN EXCLUDED.amount IS NULL THEN payment_attempts.currency ELSE EXCLUDED.currency END,
					updated_at = now()`,
				m.ID, ev.Provider, p.AttemptRef, st.Attempt,
				value, token, network, currency)
		case fulfillment.MoveOrder:
			moveTo = e.To
		case fulfillment.MarkPaid:
			markPaid = true
		case fulfillment.GrantLicenses:
			// One license per unit; the unique key makes a repeated grant
			// insert nothing.
			b.Queue(`
				INSERT INTO entitlements (order_id, line_no, unit, kind, value)
				SELECT l.order_id, l.line_no, u, 'license',
					'LIC-' || upper(replace(gen_random_uuid()::text, '-', ''))
				FROM order_lines l, generate_series(1, l.quantity) AS u
				WHERE l.order_id = $1 AND l.kind = 'license'
				ON CONFLICT ON CONSTRAINT entitlements_unit_key DO NOTHING`, m.ID)
		case fulfillment.CreditBalances:
			b.Queue(`
				INSERT INTO ledger_entries (order_id, line_no, account_ref, movement, currency, minor_units)
				SELECT l.order_id, l.line_no, l.account_ref, 'credit', l.currency, l.unit_minor_units * l.quantity
				FROM order_lines l
				WHERE l.order_id = $1 AND l.kind = 'balance_credit'
				ON CONFLICT ON CONSTRAINT ledger_entries_movement_key DO NOTHING`, m.ID)
		case fulfillment.ReverseCredits:
			// The opposite of what is left of each credit, once.
			b.Queue(`
				INSERT INTO ledger_entries (order_id, line_no, account_ref, movement, currency, minor_units)
				SELECT c.order_id, c.line_no, c.account_ref, 'refund_reversal', c.currency, -(c.minor_units + r.reversed)
				FROM ledger_entries c, LATERAL (`+reversedSoFar+`) r
				WHERE c.order_id = $1 AND c.movement = 'credit' AND c.minor_units + r.reversed > 0
				ON CONFLICT ON CONSTRAINT ledger_entries_movement_key DO NOTHING`, m.ID)
		case fulfillment.ReverseCreditShare:
			// Each credit's share of the refund, rounded down, within what
			// is left of it; once per refund.
			b.Queue(`
				INSERT INTO ledger_entries (order_id, line_no, account_ref, movement, currency, minor_units, refund_ref)
				SELECT c.order_id, c.line_no, c.account_ref, 'partial_reversal', c.currency, -s.minor_units, $3
				FROM ledger_entries c JOIN orders o ON o.id = c.order_id, LATERAL (`+reversedSoFar+`) r,
					LATERAL (SELECT least(floor(c.minor_units::numeric * $2 / o.total_minor_units)::bigint,
						c.minor_units + r.reversed) AS minor_units) s
				WHERE c.order_id = $1 AND c.movement = 'credit' AND o.total_minor_units > 0 AND s.minor_units > 0
				ON CONFLICT ON CONSTRAINT ledger_entries_movement_key DO NOTHING`,
				m.ID, e.Refunded.MinorUnits, e.Refund)
		case fulfillment.RecordRefund:
			value, token, network, currency := amountColumns(e.Refund.Amount)
			b.Queue(`
				INSERT INTO payment_refunds (order_id, provider, attempt_ref, amount, token, network, currency, inbox_event_id)
				VALUES ($1, $2, nullif($3, ''), $4::numeric, $5, $6, $7, $8)
				ON CONFLICT ON CONSTRAINT payment_refunds_once DO NOTHING`,
				m.ID, e.Refund.Attempt.Provider, e.Refund.Attempt.Ref, value, token, network, currency, le.id)
		case fulfillment.RevokeLicenses:
			b.Queue(`
				UPDATE entitlements SET revoked_at = now(), revoked_reason = $2
				WHERE order_id = $1 AND kind = 'license' AND revoked_at IS NULL`,
				m.ID, fmt.Sprintf("refunded: %s event %s", ev.Provider, ev.EventID))
		case fulfillment.OpenItem:
			queueItem(b, orderItem(e.Kind, le, m, out.Reason))
		case fulfillment.RequestDeliveries:
			queueLineRequests(b, m.ID)
			q.messages = true
		case fulfillment.WithdrawDeliveries:
			withdraw = true
		case fulfillment.PaySubscriptions:
			// Applied by InboxProcess (payOrderSubscription), which reads
			// and locks the subscription the rules decide on.
		case fulfillment.Publish:
			// After the order's update below: the event carries the state
			// the order is in.
			publish = append(publish, e.Topic)
		default:
			return q, fmt.Errorf("applying %T: unknown effect", e)
		}
	}
	if moveTo != "" || markPaid {
		// An absent ref is NULL, never '': a payment that does not identify
		// itself records none.
		paid := p.PaidRefs()
		b.Queue(`
			UPDATE orders SET
				state = coalesce(nullif($2, ''), state),
				paid_attempt_ref = CASE WHEN $3 THEN $4 ELSE paid_attempt_ref END,
				paid_invoice_id  = CASE WHEN $3 THEN $5 ELSE paid_invoice_id END,
				paid_payment_id  = CASE WHEN $3 THEN $6 ELSE paid_payment_id END,
				paid_at          = CASE WHEN $3 THEN now() ELSE paid_at END,
				updated_at = now()
			WHERE id = $1`, m.ID, moveTo, markPaid, opt(paid.AttemptRef), opt(paid.InvoiceID), opt(paid.PaymentID))
	}
	for _, t := range publish {
		q.add(s.queuePublish(b, m.ID, t))
	}
	if withdraw { // after order.refunded is recorded
		q.add(queueWithdrawals(b, m.ID))
	}
	return q, nil
}

// orderItem is the item of kind that the event le opens, about its order
// m (nil when none matched it).
func orderItem(kind fulfillment.ReconKind, le leasedEvent, m *fulfillment.LockedOrder, detail string) item {
	ev, p := le.ev, le.ev.Payment
	it := item{kind: kind, amount: p.Amount, detail: detail, subject: fulfillment.ItemSubject{
		Provider: ev.Provider, OrgID: ev.OrgID, Environment: ev.Environment,
		AttemptRef: p.AttemptRef, PaymentID: p.PaymentID, EventID: ev.EventID, InboxID: le.id,
	}}
	if m != nil {
		it.subject.OrderID = m.ID
		if e, ok := m.Expected(p.Amount.Unit); ok {
			it.expected = opt(e.Value.String())
		}
	}
	return it
}

// reversedSoFar is a lateral subquery of the credit row c: the (negative)
// sum of the reversals of its line so far.
const reversedSoFar = `SELECT coalesce(sum(x.minor_units), 0) AS reversed FROM ledger_entries x
	WHERE x.order_id = c.order_id AND x.line_no = c.line_no AND x.movement <> 'credit'`

// queued says what a transaction queued: outbox messages, order events.
// Their listeners are woken once it commits.
type queued struct{ messages, events bool }

func (q *queued) add(o queued) {
	q.messages = q.messages || o.messages
	q.events = q.events || o.events
}

// wake wakes the listeners of what a committed transaction queued.
func (s *Store) wake(q queued) {
	if q.messages {
		s.outboxSignal.committed()
	}
	if q.events {
		s.feedSignal.committed()
	}
}
