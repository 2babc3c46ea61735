package storage

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// effectWriter is the one place where the rules' effects become SQL. It
// gathers the effects of many decisions (a batch of inbox events, a
// subscription's sweep, a delivery that completes an order) by kind, and
// writes them with one statement per kind — multi-row, from arrays — in
// this order:
//
//  1. payment attempts (one row per attempt: the batch's last state, with
//     the last amount reported; the new ones inserted, the others updated),
//     then the payments refunded in full under an invoice's attempt
//     (appended to its refunded_payment_ids);
//  2. partial refunds recorded;
//  3. orders (one row per order: its last state, the refs of the payment
//     that paid it);
//  4. licenses granted, 5. balances credited;
//  6. refund shares taken back — in rounds: an order's second share of the
//     batch in the second statement, which reads what the first took back;
//  7. whole credits taken back, 8. licenses revoked;
//  9. subscription periods, then the periods whose payment was refunded
//     in full, 10. subscriptions (one row each, as the last decision left
//     it), 11. their sweeps;
//  12. reconciliation items;
//  13. fulfillment.requested messages;
//  14. order and subscription events, each with the state the decision
//     that published it left, in decision order (the feed's order), with
//     their outbox messages;
//  15. order.refunded to the destinations of refunded orders (after 14,
//     which records it).
//
// Each kind's rows are written in the order they were decided; kinds
// depend only on kinds before them. Storage decides nothing here: which
// effects, and the state they leave, come from the rules.
type effectWriter struct {
	s *Store
	// at is the time of the messages' bodies.
	at time.Time
	// versions are the orders the decisions were made on, locked: only
	// those are updated, each at the version of its row that was locked.
	versions orderVersions

	attempts        orderedRows[attemptID, attemptRow]
	refundedPays    []refundedPayment
	refunds         []refundRow
	orders          orderedRows[string, orderRow]
	grants          orderedRows[string, []fulfillment.LicenseLine] // order → its license lines
	credits         orderedRows[string, []fulfillment.BalanceLine] // order → its balance lines
	shares          [][]shareRow                                   // by round
	sharesByOrder   orderedRows[string, int]                       // order → its shares so far
	reversals       idSet
	revokes         orderedRows[string, string] // order → reason; first wins
	periods         []periodRow
	refundedPeriods []periodRef
	subs            orderedRows[string, fulfillment.SubscriptionRecord]
	sweeps          orderedRows[string, time.Time] // subscription → next sweep
	items           []item
	lineRequests    []lineRequest
	requested       map[string]bool // orders whose lines are requested
	publishes       []publishRow
	withdrawals     idSet
}

type attemptID struct {
	order    string
	provider fulfillment.Provider
	ref      string
}

type attemptRow struct {
	attemptID
	state                           fulfillment.AttemptState
	value, token, network, currency *string
	// insert is set when the attempt has no row yet (the first step of
	// the batch that records it says it is new).
	insert bool
}

// attemptColumns are attempt rows as the arrays of a statement.
type attemptColumns struct {
	order, provider, ref, state     []string
	value, token, network, currency nulls[string]
}

func (c *attemptColumns) add(a attemptRow) {
	c.order, c.provider, c.ref, c.state = append(c.order, a.order), append(c.provider, string(a.provider)), append(c.ref, a.ref), append(c.state, string(a.state))
	c.value, c.token, c.network, c.currency = append(c.value, a.value), append(c.token, a.token), append(c.network, a.network), append(c.currency, a.currency)
}

func (c *attemptColumns) args() []any {
	return []any{c.order, c.provider, c.ref, c.state, c.value, c.token, c.network, c.currency}
}

// refundedPayment is a payment refunded in full under the attempt id, an
// invoice (fulfillment.RecordFullRefund).
type refundedPayment struct {
	attemptID
	payment string
}

type refundRow struct {
	order                           string
	provider                        fulfillment.Provider
	attemptRef, paymentID           string
	value, token, network, currency *string
	inboxID                         int64
}

type orderRow struct {
	id           string
	state        fulfillment.State // "": unchanged
	paid         bool
	refs         fulfillment.PaidRefs
	subscription string             // the subscription its payment paid; "": unchanged
	event        string             // with paid: fulfillment.PaidEventRef of the event that paid it
	amount       fulfillment.Amount // with paid: what the payment that paid it paid
}

type shareRow struct {
	order    string
	refunded int64
	ref      string
}

// periodRef names a subscription's period.
type periodRef struct {
	subscription string
	period       int
}

type periodRow struct {
	subscription string
	period       int
	key          string
	paymentID    *string
	start, end   time.Time
	paidAt       time.Time
	purchase     bool
	// awaited, when set, is the merchant order id the payment named that
	// no order had (fulfillment.Step.AwaitedOrder), and inboxID the event
	// that paid it: the order's creation finds it by them.
	awaited *string
	inboxID *int64
}

// publishRow is an event to publish: about an order, or about a
// subscription's period, with its payload. derived says that the event is
// stored without its body: the feed renders it again from the event and
// its order (FeedRead). body is the payload rendered, when the event's row
// or a message holds it (renderBodies).
type publishRow struct {
	order, subscription string
	period              *int
	topic               fulfillment.Topic
	org                 string
	env                 fulfillment.Environment
	body                string
	derived             bool
	payload             fulfillment.Payload
}

// lineRequest is the fulfillment.requested message of an order's line.
type lineRequest struct {
	order       string
	line        int
	destination string
	org         string
	env         fulfillment.Environment
	body        string
}

// setSparse sets element i of *a, an array of n elements, to v: *a stays
// nil (a NULL array) until some element is not empty.
func setSparse(a *nulls[string], n, i int, v string) {
	if v == "" {
		return
	}
	if *a == nil {
		*a = make(nulls[string], n)
	}
	(*a)[i] = &v
}

// orderedRows is a batch's rows of one kind, one per key, in the order
// their keys were first added. The statements write the rows in that
// order — the order they were decided in — rather than in a map's, which
// changes from one run to the next: the rows a statement locks are locked
// in the same order every time the same batch is written. Its zero value
// is empty, ready to use.
type orderedRows[K comparable, V any] struct {
	index map[K]int // into order and rows
	order []K
	rows  []V
}

// at is the row of k, added last (zero) if k has none yet. It points into
// the rows until the next key is added: callers use it at once.
func (r *orderedRows[K, V]) at(k K) *V {
	i, ok := r.index[k]
	if !ok {
		if r.index == nil {
			r.index = map[K]int{}
		}
		i = len(r.rows)
		r.index[k] = i
		r.order = append(r.order, k)
		r.rows = append(r.rows, *new(V))
	}
	return &r.rows[i]
}

// add adds k, with a zero row, unless it has a row already.
func (r *orderedRows[K, V]) add(k K) { r.at(k) }

// has reports whether k has a row.
func (r *orderedRows[K, V]) has(k K) bool {
	_, ok := r.index[k]
	return ok
}

// keys are the keys, in the order they were added. The caller does not
// change them.
func (r *orderedRows[K, V]) keys() []K { return r.order }

// values are the rows, in the order of their keys. The caller does not
// change them.
func (r *orderedRows[K, V]) values() []V { return r.rows }

// orderVersions are the locked orders' row versions (ctid), by id.
type orderVersions map[string]pgtype.TID

// idSet is a set of ids that keeps the order they were added in.
type idSet = orderedRows[string, struct{}]

func (s *Store) newEffectWriter() *effectWriter {
	// In microseconds, what PostgreSQL keeps: the time of an event's body
	// is its row's created_at, from which the feed renders it again.
	return &effectWriter{s: s, at: time.Now().Truncate(time.Microsecond), versions: orderVersions{}, requested: map[string]bool{}}
}

// orderStep adds the effects of an inbox event's decision (st, the step of
// the batch that decided le) on its order; st.Order is nil when no order
// matched the event.
func (w *effectWriter) orderStep(le leasedEvent, st fulfillment.Step) error {
	ev, p, m := le.ev, le.ev.Payment, st.Order
	for _, effect := range st.Outcome.Effects {
		if m == nil {
			if _, ok := effect.(fulfillment.OpenItem); !ok {
				return fmt.Errorf("applying %T: the event matches no order", effect)
			}
		}
		switch e := effect.(type) {
		case fulfillment.RecordAttempt:
			w.attempt(attemptID{m.ID, ev.Provider, p.AttemptRef}, st.Attempt, st.NewAttempt, p.Amount)
		case fulfillment.RecordFullRefund:
			w.refundedPays = append(w.refundedPays, refundedPayment{attemptID{m.ID, ev.Provider, p.AttemptRef}, p.PaymentID})
		case fulfillment.MoveOrder:
			w.order(m.ID).state = e.To
		case fulfillment.MarkPaid:
			o := w.order(m.ID)
			o.paid, o.refs, o.event, o.amount = true, p.PaidRefs(), fulfillment.PaidEventRef(ev), p.Amount
		case fulfillment.GrantLicenses:
			if len(m.LicenseLines) > 0 {
				*w.grants.at(m.ID) = m.LicenseLines
			}
		case fulfillment.CreditBalances:
			if len(m.BalanceLines) > 0 {
				*w.credits.at(m.ID) = m.BalanceLines
			}
		case fulfillment.ReverseCredits:
			w.reversals.add(m.ID)
		case fulfillment.ReverseCreditShare:
			// An order's nth share of the batch goes in round n.
			n := w.sharesByOrder.at(m.ID)
			round := *n
			*n++
			if round == len(w.shares) {
				w.shares = append(w.shares, nil)
			}
			w.shares[round] = append(w.shares[round], shareRow{m.ID, e.Refunded.MinorUnits, e.Refund})
		case fulfillment.RecordRefund:
			value, token, network, currency := amountColumns(e.Refund.Amount)
			w.refunds = append(w.refunds, refundRow{m.ID, e.Refund.Attempt.Provider, e.Refund.Attempt.Ref, e.Refund.PaymentID,
				value, token, network, currency, le.id})
		case fulfillment.RevokeLicenses:
			if !w.revokes.has(m.ID) {
				*w.revokes.at(m.ID) = fmt.Sprintf("refunded: %s event %s", ev.Provider, ev.EventID)
			}
		case fulfillment.OpenItem:
			w.items = append(w.items, orderItem(e.Kind, le, m, st.Outcome.Reason))
		case fulfillment.RequestDeliveries:
			if err := w.requestLines(m); err != nil {
				return err
			}
		case fulfillment.WithdrawDeliveries:
			w.withdrawals.add(m.ID)
		case fulfillment.Publish:
			w.publishOrder(m.Ref(), e.Topic, st.OrderState, m.Total)
		case fulfillment.PaySubscriptions:
			// The subscription rules decided the period it pays: their
			// step (st.Subscription) is added with subscriptionStep. The
			// order records which subscription it paid.
			if st.Subscription != nil {
				w.order(m.ID).subscription = st.Subscription.Record.ID
			}
		case fulfillment.RefundSubscriptions:
			// The subscription rules decided what its refund does: their
			// step is added with subscriptionStep.
		default:
			return fmt.Errorf("applying %T to an order: unknown effect", e)
		}
	}
	return nil
}

// orderDelivered adds the effects of fulfillment.DecideDelivered on order
// o, in state before them, of total.
func (w *effectWriter) orderDelivered(o fulfillment.OrderRef, state fulfillment.State, total fulfillment.Money, effects []fulfillment.Effect) error {
	for _, effect := range effects {
		switch e := effect.(type) {
		case fulfillment.MoveOrder:
			w.order(o.OrderID).state, state = e.To, e.To
		case fulfillment.Publish:
			w.publishOrder(o, e.Topic, state, total)
		default:
			return fmt.Errorf("applying %T after a delivery: not an effect of a delivery", e)
		}
	}
	return nil
}

// subscriptionCause is what a subscription decision was made about, for
// the items it opens: an inbox event, or the sweeper.
type subscriptionCause struct {
	eventRef string
	inboxID  int64 // 0: none
	// awaited is the merchant order id a payment that paid a period
	// named, waiting for that order (fulfillment.Step.AwaitedOrder); ""
	// for none.
	awaited string
}

// subscriptionStep adds the effects of out, the decision of ev about rec;
// rec is the subscription as the decision left it (Subscription.Apply).
// The subscription's sweep moves to when its access now ends.
func (w *effectWriter) subscriptionStep(rec *fulfillment.SubscriptionRecord, plan fulfillment.Plan, ev fulfillment.SubscriptionEvent, cause subscriptionCause, out fulfillment.Outcome) error {
	for _, effect := range out.Effects {
		switch e := effect.(type) {
		case fulfillment.GrantPeriod:
			p := periodRow{subscription: rec.ID, period: e.Period, key: ev.PeriodKey(), paymentID: opt(ev.PaymentID),
				start: e.Start, end: e.End, paidAt: ev.OccurredAt, purchase: ev.Purchase}
			if cause.awaited != "" {
				p.awaited, p.inboxID = &cause.awaited, optID(cause.inboxID)
			}
			w.periods = append(w.periods, p)
		case fulfillment.RefundPeriod:
			w.refundedPeriods = append(w.refundedPeriods, periodRef{rec.ID, e.Period})
		case fulfillment.MoveSubscription, fulfillment.EndAccess, fulfillment.BindSubscription, fulfillment.RecordCancellation:
			// Recorded with the subscription's row.
		case fulfillment.Publish:
			// Stored with its body: it holds the subscription as this
			// decision leaves it, which later ones change.
			period := rec.Periods
			w.publishes = append(w.publishes, publishRow{subscription: rec.ID, period: &period, topic: e.Topic,
				org: rec.OrgID, env: rec.Environment, payload: fulfillment.SubscriptionEventBody(e.Topic, rec, w.at)})
		case fulfillment.OpenItem:
			w.items = append(w.items, item{kind: e.Kind, detail: out.Reason, subject: fulfillment.ItemSubject{
				OrgID: rec.OrgID, Environment: rec.Environment, Provider: rec.Provider, SubscriptionID: rec.ID,
				PaymentID: ev.PaymentID, EventID: cause.eventRef, InboxID: cause.inboxID}})
		case fulfillment.OpenChargeItem:
			w.items = append(w.items, item{kind: e.Kind, detail: out.Reason, subject: fulfillment.ItemSubject{
				OrgID: rec.OrgID, Environment: rec.Environment, Provider: rec.Provider, SubscriptionID: rec.ID,
				PaymentID: e.PaymentID, EventID: cause.eventRef, InboxID: cause.inboxID}})
		default:
			return fmt.Errorf("applying %T to a subscription: not an effect of the subscription rules", effect)
		}
	}
	*w.subs.at(rec.ID) = *rec
	// The sweeper looks at the subscription when its access ends, unless
	// an event extends it first: this moves its sweep (and takes it from a
	// sweeper that holds it, which then finds it gone).
	if ends := rec.AccessEnds(plan); !rec.AccessEnded && !ends.IsZero() {
		*w.sweeps.at(rec.ID) = ends
	}
	return nil
}

// publishOrder adds the order event topic of o, in state. Its body is all
// facts the feed has without it — the order (whose ref and total never
// change), the state its topic announces, the event's time — so the event
// is stored without it, unless state is not its topic's.
func (w *effectWriter) publishOrder(o fulfillment.OrderRef, topic fulfillment.Topic, state fulfillment.State, total fulfillment.Money) {
	w.publishes = append(w.publishes, publishRow{order: o.OrderID, topic: topic, org: o.OrgID, env: o.Environment,
		payload: fulfillment.OrderEventBody(topic, o, state, total, w.at), derived: state == fulfillment.TopicState(topic)})
}

// renderBodies renders the bodies that are stored or sent: those of the
// events stored with theirs, of the events a destination subscribes to,
// and the order.refunded of the orders whose deliveries are withdrawn.
// Nothing reads the others.
func (w *effectWriter) renderBodies() error {
	for i := range w.publishes {
		p := &w.publishes[i]
		withdrawn := p.topic == fulfillment.TopicOrderRefunded && w.withdrawals.has(p.order)
		if p.derived && len(w.s.subscriptions[p.topic]) == 0 && !withdrawn {
			continue
		}
		body, err := p.payload.Render()
		if err != nil {
			return fmt.Errorf("rendering %s: %w", p.topic, err)
		}
		p.body = body
	}
	return nil
}

// requestLines adds a fulfillment.requested message for each external line
// of m, to the line's destination, once. (Lines stored before
// destinations existed name none and get none: their order stays
// fulfilling.)
func (w *effectWriter) requestLines(m *fulfillment.LockedOrder) error {
	if w.requested[m.ID] {
		return nil
	}
	w.requested[m.ID] = true
	for _, l := range m.ExternalLines {
		body, err := fulfillment.LineRequestBody(m.Ref(), l, w.at).Render()
		if err != nil {
			return fmt.Errorf("rendering %s: %w", fulfillment.TopicFulfillmentRequested, err)
		}
		w.lineRequests = append(w.lineRequests, lineRequest{m.ID, l.LineNo, l.Destination, m.OrgID, m.Environment, body})
	}
	return nil
}

func (w *effectWriter) attempt(id attemptID, state fulfillment.AttemptState, isNew bool, amount fulfillment.Amount) {
	value, token, network, currency := amountColumns(amount)
	if !w.attempts.has(id) {
		w.attempts.at(id).insert = isNew
	}
	a := w.attempts.at(id)
	a.attemptID, a.state = id, state
	if value != nil { // an amount reported replaces the one known (none, for a new attempt)
		a.value, a.token, a.network, a.currency = value, token, network, currency
	}
}

func (w *effectWriter) order(id string) *orderRow {
	o := w.orders.at(id)
	o.id = id
	return o
}

// write queues the statements, in the order the writer's comment gives,
// and reports what they queue for listeners.
func (w *effectWriter) write(b *pgx.Batch) (queued, error) {
	var q queued
	if rows := w.attempts.values(); len(rows) > 0 {
		var ins, upd attemptColumns
		for _, a := range rows {
			if a.insert {
				ins.add(a)
			} else {
				upd.add(a)
			}
		}
		// The stored attempts were read under the order row locks, which
		// every writer of an order's attempts takes (a payment start
		// too): a new one is a plain insert, a known one an update. No row
		// pays for a conflict check: the unique key makes a second row an
		// error, never a second attempt.
		if len(ins.order) > 0 {
			b.Queue(`
				INSERT INTO payment_attempts (order_id, provider, attempt_ref, state, amount, token, network, currency)
				SELECT order_id::uuid, provider, attempt_ref, state, amount::numeric, token, network, currency
				FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
					AS a (order_id, provider, attempt_ref, state, amount, token, network, currency)`, ins.args()...)
		}
		if len(upd.order) > 0 {
			b.Queue(`
				UPDATE payment_attempts p SET
					state = a.state,
					amount = coalesce(a.amount::numeric, p.amount),
					token = CASE WHEN a.amount IS NULL THEN p.token ELSE a.token END,
					network = CASE WHEN a.amount IS NULL THEN p.network ELSE a.network END,
					currency = CASE WHEN a.amount IS NULL THEN p.currency ELSE a.currency END,
					updated_at = now()
				FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
					AS a (order_id, provider, attempt_ref, state, amount, token, network, currency)
				WHERE p.order_id = a.order_id::uuid AND p.provider = a.provider AND p.attempt_ref = a.attempt_ref`, upd.args()...)
		}
	}
	if rows := w.refundedPays; len(rows) > 0 {
		var order, provider, ref, payment []string
		for _, r := range rows {
			order, provider, ref = append(order, r.order), append(provider, string(r.provider)), append(ref, r.ref)
			payment = append(payment, r.payment)
		}
		// The rules record each payment once (PaidOrder.FullyRefunded),
		// after its attempt's row (statement 1 above, or before the batch):
		// nothing here checks for one recorded already.
		b.Queue(`
			UPDATE payment_attempts p SET refunded_payment_ids = coalesce(p.refunded_payment_ids, '{}') || r.ids
			FROM (
				SELECT order_id, provider, attempt_ref, array_agg(payment_id ORDER BY n) AS ids
				FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY
					AS r (order_id, provider, attempt_ref, payment_id, n)
				GROUP BY order_id, provider, attempt_ref) r
			WHERE p.order_id = r.order_id::uuid AND p.provider = r.provider AND p.attempt_ref = r.attempt_ref`,
			order, provider, ref, payment)
	}
	if rows := w.refunds; len(rows) > 0 {
		var order, provider, ref, payment []string
		var value, token, network, currency nulls[string]
		var inbox []int64
		for _, r := range rows {
			order, provider, ref = append(order, r.order), append(provider, string(r.provider)), append(ref, r.attemptRef)
			payment = append(payment, r.paymentID)
			value, token, network, currency = append(value, r.value), append(token, r.token), append(network, r.network), append(currency, r.currency)
			inbox = append(inbox, r.inboxID)
		}
		// In decision order: the snapshot reads an order's refunds by id.
		b.Queue(`
			INSERT INTO payment_refunds (order_id, provider, attempt_ref, payment_id, amount, token, network, currency, inbox_event_id)
			SELECT order_id::uuid, provider, nullif(attempt_ref, ''), nullif(payment_id, ''), amount::numeric, token, network, currency, inbox_event_id
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::bigint[])
				WITH ORDINALITY AS r (order_id, provider, attempt_ref, payment_id, amount, token, network, currency, inbox_event_id, n)
			ORDER BY n
			ON CONFLICT ON CONSTRAINT payment_refunds_once DO NOTHING`, order, provider, ref, payment, value, token, network, currency, inbox)
	}
	if rows := w.orders.values(); len(rows) > 0 {
		var id, state []string
		var version []pgtype.TID
		var paid []bool
		var attemptRef, invoiceID, paymentID, subscription, event nulls[string]
		var amount, token, network, currency nulls[string]
		for i, o := range rows {
			v, ok := w.versions[o.id]
			if !ok {
				return q, fmt.Errorf("updating order %s: it was not locked", o.id)
			}
			// An absent ref is NULL, never '': a payment that does not
			// identify itself records none.
			id, version, state, paid = append(id, o.id), append(version, v), append(state, string(o.state)), append(paid, o.paid)
			attemptRef, invoiceID, paymentID = append(attemptRef, opt(o.refs.AttemptRef)), append(invoiceID, opt(o.refs.InvoiceID)), append(paymentID, opt(o.refs.PaymentID))
			// Most batches pay no subscription and name every payment: those
			// columns go as one NULL each (unnest reads it as NULLs), not as
			// arrays of NULLs built and encoded element by element.
			setSparse(&subscription, len(rows), i, o.subscription)
			setSparse(&event, len(rows), i, o.event)
			a, t, n, c := amountColumns(o.amount)
			setSparse(&amount, len(rows), i, str(a))
			setSparse(&token, len(rows), i, str(t))
			setSparse(&network, len(rows), i, str(n))
			setSparse(&currency, len(rows), i, str(c))
		}
		// Each order is found at the row version its lock read (a TID
		// scan: no descent of the primary key), which no one can have
		// replaced since: the lock is held, and nothing before this
		// statement updates an order. Should one have, its row is not
		// found, and the count below fails the batch rather than lose
		// the update. PostgreSQL checks the count, not a callback: the
		// COMMIT goes in the same round trip, and only a statement's error
		// stops it. (A cast of the message to an integer is an error that
		// carries it, with no function of the schema's.)
		want := len(rows)
		b.Queue(`
			WITH updated AS (UPDATE orders o SET
				state = coalesce(nullif(u.state, ''), o.state),
				paid_attempt_ref = CASE WHEN u.paid THEN u.attempt_ref ELSE o.paid_attempt_ref END,
				paid_invoice_id  = CASE WHEN u.paid THEN u.invoice_id ELSE o.paid_invoice_id END,
				paid_payment_id  = CASE WHEN u.paid THEN u.payment_id ELSE o.paid_payment_id END,
				paid_at          = CASE WHEN u.paid THEN now() ELSE o.paid_at END,
				paid_event       = CASE WHEN u.paid THEN u.event ELSE o.paid_event END,
				paid_amount      = CASE WHEN u.paid THEN u.amount::numeric ELSE o.paid_amount END,
				paid_token       = CASE WHEN u.paid THEN u.token ELSE o.paid_token END,
				paid_network     = CASE WHEN u.paid THEN u.network ELSE o.paid_network END,
				paid_currency    = CASE WHEN u.paid THEN u.currency ELSE o.paid_currency END,
				paid_subscription_id = coalesce(u.subscription, o.paid_subscription_id),
				updated_at = now()
			FROM unnest($1::text[], $2::text[], $3::bool[], $4::text[], $5::text[], $6::text[], $7::tid[], $9::uuid[], $10::text[],
				$11::text[], $12::text[], $13::text[], $14::text[])
				AS u (id, state, paid, attempt_ref, invoice_id, payment_id, version, subscription, event, amount, token, network, currency)
			WHERE o.ctid = u.version AND o.id = u.id::uuid
			RETURNING 1)
			SELECT CASE WHEN count(*) = $8 THEN count(*)
				ELSE ('updating orders: ' || count(*) || ' of ' || $8 || ' found at the version locked')::bigint END
			FROM updated`, id, state, paid, attemptRef, invoiceID, paymentID, version, want, subscription, event,
			amount, token, network, currency)
	}
	if len(w.grants.keys()) > 0 {
		// One license per unit, of the lines read with the order's lock.
		// The rules grant an order's lines once, when its payment moves it
		// out of pending_payment under that lock: the unique key makes a
		// second grant an error (the batch fails and its events are tried
		// alone), never a second license, and a plain insert spares each
		// row the conflict check and its WAL record.
		var order []string
		var line []int
		var quantity []int64
		for i, id := range w.grants.keys() {
			for _, l := range w.grants.values()[i] {
				order, line, quantity = append(order, id), append(line, l.LineNo), append(quantity, l.Quantity)
			}
		}
		b.Queue(`
			INSERT INTO entitlements (order_id, line_no, unit, kind, value)
			SELECT g.order_id, g.line_no, u, 'license', `+licenseKeySQL+`
			FROM unnest($1::uuid[], $2::int[], $3::bigint[]) AS g (order_id, line_no, quantity),
				generate_series(1, g.quantity) AS u`, order, line, quantity)
	}
	if len(w.credits.keys()) > 0 {
		// One credit per line, ever, as the licenses.
		var order, account, currency []string
		var line []int
		var minor []int64
		for i, id := range w.credits.keys() {
			for _, l := range w.credits.values()[i] {
				order, line, account = append(order, id), append(line, l.LineNo), append(account, l.Account)
				currency, minor = append(currency, l.Amount.Currency), append(minor, l.Amount.MinorUnits)
			}
		}
		b.Queue(`
			INSERT INTO ledger_entries (order_id, line_no, account_ref, movement, currency, minor_units)
			SELECT c.order_id, c.line_no, c.account_ref, 'credit', c.currency, c.minor_units
			FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::bigint[])
				AS c (order_id, line_no, account_ref, currency, minor_units)`, order, line, account, currency, minor)
	}
	for _, round := range w.shares {
		var order, ref []string
		var refunded []int64
		for _, r := range round {
			order, refunded, ref = append(order, r.order), append(refunded, r.refunded), append(ref, r.ref)
		}
		// Each credit's share of the refund, rounded down, within what is
		// left of it; once per refund.
		b.Queue(`
			INSERT INTO ledger_entries (order_id, line_no, account_ref, movement, currency, minor_units, refund_ref)
			SELECT c.order_id, c.line_no, c.account_ref, 'partial_reversal', c.currency, -s.minor_units, f.refund_ref
			FROM unnest($1::uuid[], $2::bigint[], $3::text[]) AS f (order_id, refunded, refund_ref)
				JOIN ledger_entries c ON c.order_id = f.order_id AND c.movement = 'credit'
				JOIN orders o ON o.id = c.order_id, LATERAL (`+reversedSoFar+`) r,
				LATERAL (SELECT least(floor(c.minor_units::numeric * f.refunded / o.total_minor_units)::bigint,
					c.minor_units + r.reversed) AS minor_units) s
			WHERE o.total_minor_units > 0 AND s.minor_units > 0
			ON CONFLICT ON CONSTRAINT ledger_entries_movement_key DO NOTHING`, order, refunded, ref)
	}
	if ids := w.reversals.keys(); len(ids) > 0 {
		// The opposite of what is left of each credit, once.
		b.Queue(`
			INSERT INTO ledger_entries (order_id, line_no, account_ref, movement, currency, minor_units)
			SELECT c.order_id, c.line_no, c.account_ref, 'refund_reversal', c.currency, -(c.minor_units + r.reversed)
			FROM ledger_entries c, LATERAL (`+reversedSoFar+`) r
			WHERE c.order_id = ANY($1::uuid[]) AND c.movement = 'credit' AND c.minor_units + r.reversed > 0
			ON CONFLICT ON CONSTRAINT ledger_entries_movement_key DO NOTHING`, ids)
	}
	if ids := w.revokes.keys(); len(ids) > 0 {
		b.Queue(`
			UPDATE entitlements e SET revoked_at = now(), revoked_reason = r.reason
			FROM unnest($1::uuid[], $2::text[]) AS r (order_id, reason)
			WHERE e.order_id = r.order_id AND e.kind = 'license' AND e.revoked_at IS NULL`, ids, w.revokes.values())
	}
	if rows := w.periods; len(rows) > 0 {
		var sub, key []string
		var period []int
		var paymentID, awaited nulls[string]
		var inbox nulls[int64]
		var start, end, paidAt []time.Time
		var purchase []bool
		for _, p := range rows {
			sub, period, key, paymentID = append(sub, p.subscription), append(period, p.period), append(key, p.key), append(paymentID, p.paymentID)
			start, end, paidAt, purchase = append(start, p.start), append(end, p.end), append(paidAt, p.paidAt), append(purchase, p.purchase)
			awaited, inbox = append(awaited, p.awaited), append(inbox, p.inboxID)
		}
		// The unique keys make a repeated grant an error, never a second
		// period: the decisions were made under the subscriptions' locks.
		b.Queue(`
			INSERT INTO subscription_periods (subscription_id, period, period_key, payment_id, starts_at, ends_at, paid_at, purchase,
				awaited_merchant_order_id, inbox_event_id)
			SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[],
				$7::timestamptz[], $8::bool[], $9::text[], $10::bigint[])`,
			sub, period, key, paymentID, start, end, paidAt, purchase, awaited, inbox)
	}
	if rows := w.refundedPeriods; len(rows) > 0 {
		var sub []string
		var period []int
		for _, p := range rows {
			sub, period = append(sub, p.subscription), append(period, p.period)
		}
		// Once: the first refund's time stays (the rules decide a refund
		// of a refunded period already applied).
		b.Queue(`
			UPDATE subscription_periods p SET refunded_at = coalesce(p.refunded_at, now())
			FROM unnest($1::uuid[], $2::int[]) AS r (subscription_id, period)
			WHERE p.subscription_id = r.subscription_id AND p.period = r.period`, sub, period)
	}
	if rows := w.subs.values(); len(rows) > 0 {
		var id, state []string
		var periods []int
		var start, end, last, cancelled nulls[time.Time]
		var ended []bool
		var providerID []string
		for _, rec := range rows {
			id, state, periods = append(id, rec.ID), append(state, string(rec.State)), append(periods, rec.Periods)
			start, end, last = append(start, nullTime(rec.PeriodStart)), append(end, nullTime(rec.PeriodEnd)), append(last, nullTime(rec.LastEventAt))
			ended, providerID = append(ended, rec.AccessEnded), append(providerID, rec.ProviderSubscriptionID)
			cancelled = append(cancelled, nullTime(rec.CancelledAt))
		}
		b.Queue(`
			UPDATE subscriptions s SET state = u.state, periods = u.periods, period_start = u.period_start,
				period_end = u.period_end, last_event_at = u.last_event_at,
				access_ended_at = CASE WHEN u.ended THEN coalesce(s.access_ended_at, now()) END,
				provider_subscription_id = u.provider_subscription_id, cancelled_at = u.cancelled_at, updated_at = now()
			FROM unnest($1::uuid[], $2::text[], $3::int[], $4::timestamptz[], $5::timestamptz[], $6::timestamptz[], $7::bool[], $8::text[],
				$9::timestamptz[])
				AS u (id, state, periods, period_start, period_end, last_event_at, ended, provider_subscription_id, cancelled_at)
			WHERE s.id = u.id`, id, state, periods, start, end, last, ended, providerID, cancelled)
	}
	if ids := w.sweeps.keys(); len(ids) > 0 {
		b.Queue(`
			INSERT INTO subscription_sweeps (subscription_id, next_attempt_at)
			SELECT * FROM unnest($1::uuid[], $2::timestamptz[])
			ON CONFLICT (subscription_id) DO UPDATE SET next_attempt_at = EXCLUDED.next_attempt_at, state = 'pending',
				attempts = 0, lease_owner = NULL, lease_until = NULL, last_error = NULL, processed_at = NULL`, ids, w.sweeps.values())
	}
	queueItems(b, w.items)
	if len(w.lineRequests) > 0 {
		queueLineRequests(b, w.lineRequests)
		q.messages = true
	}
	if len(w.publishes) > 0 {
		if err := w.renderBodies(); err != nil {
			return q, err
		}
		q.add(w.s.queuePublishes(b, w.publishes, w.at))
	}
	if ids := w.withdrawals.keys(); len(ids) > 0 {
		withdrawn, err := w.withdrawn(ids)
		if err != nil {
			return q, err
		}
		q.add(queueWithdrawals(b, withdrawn))
	}
	return q, nil
}

// withdrawn is the order.refunded event of each order of ids: the rules
// withdraw an order's deliveries in the decision that refunds it, which
// publishes that event.
func (w *effectWriter) withdrawn(ids []string) ([]publishRow, error) {
	refunded := map[string]publishRow{}
	for _, p := range w.publishes {
		if p.topic == fulfillment.TopicOrderRefunded && p.order != "" {
			refunded[p.order] = p
		}
	}
	rows := make([]publishRow, 0, len(ids))
	for _, id := range ids {
		p, ok := refunded[id]
		if !ok {
			return nil, fmt.Errorf("withdrawing the deliveries of order %s: it publishes no %s", id, fulfillment.TopicOrderRefunded)
		}
		rows = append(rows, p)
	}
	return rows, nil
}

// orderItem is the item of kind that the event le opens, about its order
// m (nil when none matched it).
func orderItem(kind fulfillment.ReconKind, le leasedEvent, m *fulfillment.LockedOrder, detail string) item {
	ev, p := le.ev, le.ev.Payment
	it := item{kind: kind, amount: p.Amount, detail: detail, subject: fulfillment.ItemSubject{
		Provider: ev.Provider, OrgID: ev.OrgID, Environment: ev.Environment,
		AttemptRef: p.AttemptRef, PaymentID: p.PaymentID, EventID: ev.EventID, InboxID: le.id,
		Refund: fulfillment.ItemRefund(ev),
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

// licenseKeySQL makes a license key: "LIC-", then 32 hexadecimal digits,
// the first 12 the time of issue in milliseconds since 1970, the other 20
// (80 bits) random (the leading bits of a SHA-256 of a random UUID, from
// PostgreSQL's strong random source). The time first makes new keys go to
// the end of the keys' unique index, as time-ordered ids do: random keys
// went all over it, and after each checkpoint nearly every insert was the
// first change of its page, written whole to the WAL (1,043 against 214 B
// per key with 300,000 keys stored; 0.14 full-page images per insert
// against 0.0002). 80 bits keep a key unguessable; its time of issue is no
// secret from its holder.
const licenseKeySQL = `'LIC-' || upper(lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
	|| left(encode(sha256(uuid_send(gen_random_uuid())), 'hex'), 20))`
