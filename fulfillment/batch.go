package fulfillment

import (
	"maps"
	"slices"
	"time"
)

// A batch of stored events is decided in one step, without I/O: given what
// storage locked for it (a Snapshot) and the events in the order they are
// decided, DecideBatch routes each event to the rules that decide it,
// decides it against the state the events before it left, and returns per
// event a Step: the decision, its effects, and the state storage records.
// Storage then writes the steps; it decides nothing.

// BatchEvent is one stored event of a batch.
type BatchEvent struct {
	Event ProviderEvent
	// Received is when the event was stored: it stands in for an
	// occurrence time the provider did not send.
	Received time.Time
}

// LockedOrder is an order as a batch's snapshot holds it.
type LockedOrder struct {
	ID string
	PaidOrder
	OrgID           string
	Environment     Environment
	MerchantOrderID string
	// SubscriptionPlan and SubscriptionFor are the plan and the customer of
	// the order's subscription line, when it has one.
	SubscriptionPlan, SubscriptionFor string
	// PaidSubscription is the id (SubscriptionRecord.ID) of the
	// subscription whose period the order's payment paid, once it did: the
	// refund of that payment, and its later events, are about that
	// subscription whatever they name.
	PaidSubscription string
	// ExternalLines are the order's external lines that name a
	// destination: what RequestDeliveries asks for.
	ExternalLines []ExternalLine
	// LicenseLines and BalanceLines are what GrantLicenses and
	// CreditBalances grant: the order's license lines and its balance
	// credits, read with its lock (lines never change), so that granting
	// them reads nothing again.
	LicenseLines []LicenseLine
	BalanceLines []BalanceLine
}

// LicenseLine is an order line of licenses: one per unit of Quantity.
type LicenseLine struct {
	LineNo   int
	Quantity int64
}

// BalanceLine is an order line that credits Account with Amount (the
// line's unit price times its quantity).
type BalanceLine struct {
	LineNo  int
	Account string
	Amount  Money
}

// Ref is what messages about o say of it.
func (o *LockedOrder) Ref() OrderRef {
	return OrderRef{OrderID: o.ID, OrgID: o.OrgID, Environment: o.Environment, MerchantOrderID: o.MerchantOrderID}
}

// SubscriptionKey names a subscription at its provider.
type SubscriptionKey struct {
	OrgID       string
	Environment Environment
	Provider    Provider
	// ID is the provider's id of the subscription (or the one the service
	// gives a customer's subscription: CustomerSubscriptionID).
	ID string
}

// Key is the provider key of the subscription r names.
func (r SubscriptionRef) Key() SubscriptionKey {
	return SubscriptionKey{r.OrgID, r.Environment, r.Provider, r.ProviderSubscriptionID}
}

// SubscriptionKey is the provider key of the subscription ev names; its ID
// is "" when ev names none.
func (ev ProviderEvent) SubscriptionKey() SubscriptionKey {
	return SubscriptionKey{ev.OrgID, ev.Environment, ev.Provider, ev.Payment.SubscriptionID}
}

// Snapshot is what a batch is decided against, locked by storage for the
// batch: the orders its events name, by every key they name them with; the
// subscriptions they name, by provider key; and the configured plans.
type Snapshot struct {
	Orders        map[OrderKey]*LockedOrder
	Subscriptions map[SubscriptionKey]*SubscriptionRecord
	// Created are the subscriptions that an order's payment in the batch
	// pays and that storage created (or found) for it, after an earlier
	// DecideBatch asked for them. A created subscription exists for the
	// events after the one that pays it, not before.
	Created map[SubscriptionKey]*SubscriptionRecord
	Plans   Plans
}

// SubscriptionKeys are the subscriptions to lock for a batch of events,
// once their orders are locked: each one an event names at its provider,
// and the subscription of the order an event matches when the order has a
// subscription line (the one its payment pays a period of, and its refund
// may end the access of), even when the event names none: the customer's
// subscription under the id the service gave it. Each key once, in the
// events' order. ids are the subscriptions the matched orders' payments
// paid (LockedOrder.PaidSubscription), by id: whatever key they are known
// by now.
func SubscriptionKeys(events []ProviderEvent, orders map[OrderKey]*LockedOrder) (keys []SubscriptionKey, ids []string) {
	seen := map[SubscriptionKey]bool{}
	add := func(k SubscriptionKey) {
		if k.ID != "" && !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, ev := range events {
		add(ev.SubscriptionKey())
		o, ok := MatchOrder(ev, lookupIn(orders))
		if ok && o.HasSubscriptionLines && o.SubscriptionPlan != "" {
			add(OrderSubscriptionRef(ev, o.SubscriptionPlan, o.SubscriptionFor).Key())
		}
		if ok && o.PaidSubscription != "" && !slices.Contains(ids, o.PaidSubscription) {
			ids = append(ids, o.PaidSubscription)
		}
	}
	return keys, ids
}

// lookupIn finds orders by key in orders, for MatchOrder.
func lookupIn(orders map[OrderKey]*LockedOrder) func(OrderKey) (*LockedOrder, bool) {
	return func(k OrderKey) (*LockedOrder, bool) {
		o, ok := orders[k]
		return o, ok
	}
}

// OfSubscriptionAlone reports whether ev is a subscription's lifecycle
// event (cancelled, overdue) naming its subscription: it is about the
// subscription whatever else it names — an order it also names has no rule
// for it — and, unmatched, waits for that subscription, not for an order.
func (ev ProviderEvent) OfSubscriptionAlone() bool {
	return ForSubscription(ev) && ev.Kind.IsSubscriptionLifecycle()
}

// RefundedPayment names a payment at its provider whose refund a batch
// decides without an order or a subscription to go by: the subscription
// whose period that payment paid is the one to lock (a T-Bank refund of a
// recurrent charge names no card binding).
type RefundedPayment struct {
	OrgID       string
	Environment Environment
	Provider    Provider
	PaymentID   string
}

// RefundedPayments are the payments whose subscriptions to lock for a
// batch, besides SubscriptionKeys: those of the refunds that match no
// order of orders and name no subscription (refundOfAPeriod). Each once,
// in the events' order.
func RefundedPayments(events []ProviderEvent, orders map[OrderKey]*LockedOrder) []RefundedPayment {
	var out []RefundedPayment
	for _, ev := range events {
		if !refundOfAPeriod(ev) {
			continue
		}
		if _, ok := MatchOrder(ev, lookupIn(orders)); ok {
			continue
		}
		p := ev.refundedPayment()
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// refundOfAPeriod reports whether ev is a refund that, matching no order,
// is looked up as the refund of a subscription's period by its payment:
// it names a payment and no subscription.
func refundOfAPeriod(ev ProviderEvent) bool {
	_, waits := ev.WaitsForItsPayment()
	return waits && ev.Payment.SubscriptionID == "" && (!ev.TestMode || ev.Environment != EnvLive)
}

func (ev ProviderEvent) refundedPayment() RefundedPayment {
	return RefundedPayment{ev.OrgID, ev.Environment, ev.Provider, ev.Payment.PaymentID}
}

// WaitsForItsPayment is the payment a refund ev, decided unmatched, waits
// for: a period paid by it, recorded after the refund was decided, has the
// refund decided again (a charge may be announced after its refund). ok is
// false for any other event, and for a refund that names no payment.
func (ev ProviderEvent) WaitsForItsPayment() (p RefundedPayment, ok bool) {
	if !ev.Kind.IsRefund() || ev.Payment.PaymentID == "" {
		return RefundedPayment{}, false
	}
	return ev.refundedPayment(), true
}

// Step is what the batch made of one event.
type Step struct {
	// Outcome is the decision of the event and the effects on its order
	// (the order rules'), or, for an event that concerns a subscription
	// alone, the subscription rules' outcome.
	Outcome Outcome
	// Order is the event's order (its state as the whole batch leaves it);
	// nil when no order matches the event, and when the event is about a
	// renewal the subscription rules took though it names its paid order
	// (renewsPaidSubscription).
	Order *LockedOrder
	// OrderState is the state the event left its order in (what the
	// order events it publishes say), when an order matches it.
	OrderState State
	// Attempt is the state the event's payment attempt is recorded in
	// after it (with a RecordAttempt effect): what was known, merged with
	// what the event reports.
	Attempt AttemptState
	// NewAttempt is set when the event records an attempt (Attempt is
	// set) that was not recorded before it, in the snapshot or by an
	// earlier event of the batch: its record is a new row.
	NewAttempt bool
	// Subscription is set when the subscription rules decided the event:
	// an event about a subscription no order matches (or a renewal, or its
	// invoice's event, that names its paid order: renewsPaidSubscription),
	// or the payment of an order's subscription line (the order's Outcome
	// has PaySubscriptions).
	Subscription *SubscriptionStep
	// AwaitedOrder is set when the subscription rules took a payment that
	// names a merchant order no order matches as a renewal, and it paid a
	// period: the order may be created after its payment (a subscription
	// registered ahead with CreateSubscription, its first order created
	// late), or never (the storefront's own order id). Storage decides the
	// payment again for that order if it is created (late matching); the
	// order rules then find the period paid (PaidOrder.PeriodPaidBefore).
	AwaitedOrder *OrderKey
}

// SubscriptionStep is what the subscription rules made of an event.
type SubscriptionStep struct {
	// Record is the subscription as the event left it.
	Record SubscriptionRecord
	Plan   Plan
	// Event is the event as the subscription rules saw it.
	Event   SubscriptionEvent
	Outcome Outcome
}

// DecideBatch decides the events in order against snap, threading the state
// each leaves to the next. It does not change snap. When an order's payment
// pays a subscription the snapshot does not hold, it returns no steps and
// that subscription, to create (or find) and lock: storage adds it to
// snap.Created and calls again (the events before it are decided the same
// way again). It fails when a subscription's plan is not configured (its
// events wait until it is).
func DecideBatch(snap *Snapshot, events []BatchEvent) ([]Step, *SubscriptionRef, error) {
	b := newBatch(snap)
	steps := make([]Step, len(events))
	for i, be := range events {
		st, need, err := b.decide(be)
		if err != nil || need != nil {
			return nil, need, err
		}
		steps[i] = st
	}
	return steps, nil, nil
}

// batch is the state a batch's events thread through: copies of the
// snapshot's orders and subscriptions.
type batch struct {
	orders  map[OrderKey]*LockedOrder
	subs    map[SubscriptionKey]*SubscriptionRecord
	created map[SubscriptionKey]*SubscriptionRecord
	plans   Plans
}

func newBatch(snap *Snapshot) *batch {
	b := &batch{
		orders:  make(map[OrderKey]*LockedOrder, len(snap.Orders)),
		subs:    make(map[SubscriptionKey]*SubscriptionRecord, len(snap.Subscriptions)),
		created: make(map[SubscriptionKey]*SubscriptionRecord, len(snap.Created)),
		plans:   snap.Plans,
	}
	copies := map[*LockedOrder]*LockedOrder{} // an order is held under each of its keys
	for k, o := range snap.Orders {
		c, ok := copies[o]
		if !ok {
			c = o.clone()
			copies[o] = c
		}
		b.orders[k] = c
	}
	for k, s := range snap.Subscriptions {
		b.subs[k] = s.clone()
	}
	for k, s := range snap.Created {
		b.created[k] = s.clone()
	}
	return b
}

func (o *LockedOrder) clone() *LockedOrder {
	c := *o
	c.Attempts = maps.Clone(o.Attempts)
	c.FullyRefunded = maps.Clone(o.FullyRefunded)
	c.PartialRefunds = slices.Clone(o.PartialRefunds)
	return &c
}

func (s *SubscriptionRecord) clone() *SubscriptionRecord {
	c := *s
	c.Renewals = maps.Clone(s.Renewals)
	return &c
}

func (b *batch) findOrder(k OrderKey) (*LockedOrder, bool) {
	o, ok := b.orders[k]
	return o, ok
}

// decide routes and decides one event: a subscription's lifecycle event
// (cancelled, overdue) to the subscription rules, unmatched when it names
// a subscription this service does not know, whatever order it names too;
// a charge of the subscription a paid order's payment paid, naming that
// order as well, to the subscription rules as a renewal, the order
// untouched, and so the events of that charge's invoice
// (renewsPaidSubscription): a provider may copy the first checkout's
// merchant order id into the charges that renew it, and such a charge pays
// the next period, not the order a second time; any other
// event to the order rules when an order matches it; else to the
// subscription rules when it names a subscription this service knows, or
// is the refund of a payment that paid one of its periods; else to the
// order rules, which decide events of no order. A payment of an order's
// subscription line is decided by both: the order rules for the order,
// the subscription rules for the period it pays; so is its refund, when
// the batch holds the subscription (the order's, whatever the refund
// names), and the refund of a payment that paid a period and is not the
// order's (PaidOrder.PeriodOfAnother); and a later event of the order's
// payment that names the subscription at its provider gives it that id,
// when it had the service's own (bindSubscription). A payment the
// subscription rules took as a renewal for want of the merchant order it
// names says so (Step.AwaitedOrder). need is the subscription to create
// first, when that payment's subscription is not in the snapshot.
func (b *batch) decide(be BatchEvent) (st Step, need *SubscriptionRef, err error) {
	ev := be.Event
	order, matched := MatchOrder(ev, b.findOrder)
	sub, named := b.subs[ev.SubscriptionKey()]
	lifecycle := ev.OfSubscriptionAlone()
	switch {
	case (!matched || lifecycle || renewsPaidSubscription(ev, be.Received, order, sub)) && named && ForSubscription(ev):
		st.Subscription, err = b.decideSubscription(ev, be.Received, sub, false)
		if err != nil {
			return st, nil, err
		}
		st.Outcome = st.Subscription.Outcome
		if !matched {
			st.AwaitedOrder = awaitedOrder(ev, be.Received, sub)
		}
		return st, nil, nil
	case !matched && refundOfAPeriod(ev):
		// The refund of a payment that paid a period, naming no
		// subscription: the subscription rules, when the batch holds the
		// subscription that payment paid. Else it waits for an order, or
		// for a period paid by its payment: a charge's refund may be
		// announced before the charge.
		if rec, ok := b.periodPaidBy(ev.refundedPayment()); ok {
			if st.Subscription, err = b.decideSubscription(ev, be.Received, rec, false); err != nil {
				return st, nil, err
			}
			st.Outcome = st.Subscription.Outcome
			return st, nil, nil
		}
		st.Outcome = Outcome{Decision: DecisionUnmatched, Reason: "no order matches the refund, and no period of a " +
			"subscription is paid by the refunded payment (yet): nothing is applied; the refund is decided again when " +
			"its order or such a period is recorded"}
		return st, nil, nil
	case lifecycle:
		st.Outcome = Outcome{Decision: DecisionUnmatched,
			Reason: "the event names a subscription this service does not know (yet): nothing is applied"}
		return st, nil, nil
	}
	var view *PaidOrder
	var periodOf *SubscriptionRecord // the subscription of PaidOrder.PeriodOfAnother
	if matched {
		v := order.PaidOrder
		v.PlanChange = b.planChange(ev, order)
		v.PeriodPaidBefore, v.PeriodOfAnother, periodOf = b.periodPaidBefore(ev, be.Received, order)
		view = &v
	}
	st.Outcome = Decide(ev, view)
	if slices.Contains(st.Outcome.Effects, Effect(PaySubscriptions{})) {
		ref := OrderSubscriptionRef(ev, order.SubscriptionPlan, order.SubscriptionFor)
		rec, known := b.subs[ref.Key()]
		if !known {
			if rec, known = b.created[ref.Key()]; !known {
				return st, &ref, nil
			}
			// From this event on, the subscription exists for the batch.
			delete(b.created, ref.Key())
			b.subs[ref.Key()] = rec
		}
		if st.Subscription, err = b.decideSubscription(ev, be.Received, rec, true); err != nil {
			return st, nil, err
		}
		order.PaidSubscription = rec.ID
	}
	if slices.Contains(st.Outcome.Effects, Effect(RefundSubscriptions{})) {
		// The refund of a payment that paid a period: the subscription
		// rules decide what it does to that period's access, when the batch
		// holds the subscription.
		if rec, known := b.orderSubscription(ev, order); known {
			if st.Subscription, err = b.decideSubscription(ev, be.Received, rec, false); err != nil {
				return st, nil, err
			}
		}
	}
	if periodOf != nil && ev.Kind == EventRefunded && st.Subscription == nil && (!ev.TestMode || ev.Environment != EnvLive) {
		// The refund of a payment that stays a subscription's (its
		// PeriodOfAnother): the subscription rules decide what it does to
		// the period it paid, as they would had no order matched — and,
		// as then, not a provider's test event on a live endpoint
		// (refundOfAPeriod), which the order rules ignored.
		if st.Subscription, err = b.decideSubscription(ev, be.Received, periodOf, false); err != nil {
			return st, nil, err
		}
	}
	if matched && st.Subscription == nil {
		if st.Subscription, err = b.bindSubscription(ev, be.Received, order, &st.Outcome); err != nil {
			return st, nil, err
		}
	}
	if matched {
		if a := recordedAttempt(st.Outcome); a != "" {
			_, known := order.Attempts[AttemptKey{ev.Provider, ev.Payment.AttemptRef}]
			st.Attempt, st.NewAttempt = NextAttemptState(order.attempt(ev), a), !known
		}
		order.Apply(ev, st.Outcome)
		st.Order, st.OrderState = order, order.State
	}
	return st, nil, nil
}

// renewsPaidSubscription reports whether ev, received at received, which
// matches order o and names subscription sub at its provider (either may
// be nil), is about a renewal of sub: a confirmed payment that is not o's,
// or the creation, expiry or cancellation of that payment's invoice, when
// o is paid and its payment paid a period of sub (o's PaidSubscription).
// Decided by the order rules, the payment would be o's second payment,
// duplicate_payment, and pay no period; its invoice's events would record
// that invoice as an attempt of o, and so make its payment o's.
//
// Where ev may be o's own, the order rules keep it, and their
// extra_payment item asks a person to look. A renewal is charged by the
// provider without a checkout, so an event naming a checkout session
// (every T-Bank event, whose OrderId is its checkout session; a second
// payment of a Yolfi checkout) is o's. So is an event of an attempt o
// recorded (its own invoice, paid again), and a payment that cannot be
// told from o's (PaidRefs.SamePayment): taking it for a renewal could pay
// a period for a payment announced again. An invoice's event names no
// payment: it is o's own when it names no attempt, or is of the attempt
// or the invoice that paid o; and, when o's payment named no invoice, when
// it occurred no later than that payment (o's own invoice, announced late:
// a renewal's invoice is created long after the purchase), or when that
// time is not known.
func renewsPaidSubscription(ev ProviderEvent, received time.Time, o *LockedOrder, sub *SubscriptionRecord) bool {
	if o == nil || sub == nil || !o.Paid || o.PaidSubscription == "" || o.PaidSubscription != sub.ID {
		return false
	}
	switch ev.Kind {
	case EventPaymentConfirmed, EventAttemptCreated, EventAttemptExpired, EventAttemptCancelled:
	default:
		return false
	}
	if ev.Payment.CheckoutSessionID != "" {
		return false
	}
	if _, recorded := o.Attempts[AttemptKey{ev.Provider, ev.Payment.AttemptRef}]; recorded {
		return false
	}
	if o.refundedInFull(ev) {
		// A payment the order's refunds named (under its invoice, or by
		// its own id) is the order's, refunded: the order rules ignore it.
		return false
	}
	if ev.Kind == EventPaymentConfirmed {
		same, known := o.PaidBy.SamePayment(ev.Payment)
		return known && !same
	}
	if ev.Payment.AttemptRef == "" || ev.Payment.AttemptRef == o.PaidBy.AttemptRef {
		return false
	}
	if o.PaidBy.InvoiceID != "" {
		return ev.Payment.InvoiceID != o.PaidBy.InvoiceID
	}
	// Both times as the subscription rules record them (Renewal.PaidAt).
	paid, ok := sub.renewalPaidBy(o.PaidBy.PaymentID)
	return ok && !paid.PaidAt.IsZero() && SubscriptionEventOf(ev, received).OccurredAt.After(paid.PaidAt)
}

// orderSubscription is the subscription order's payment paid a period of,
// when the batch holds it: the one the order records (its
// PaidSubscription), else — an order paid before orders recorded it —
// the one ev would pay (OrderSubscriptionRef).
func (b *batch) orderSubscription(ev ProviderEvent, o *LockedOrder) (*SubscriptionRecord, bool) {
	if o.PaidSubscription != "" {
		_, rec, ok := b.subscriptionByID(o.PaidSubscription)
		return rec, ok
	}
	rec, ok := b.subs[OrderSubscriptionRef(ev, o.SubscriptionPlan, o.SubscriptionFor).Key()]
	return rec, ok
}

// periodPaidBy is the subscription the batch holds one of whose periods
// payment paid.
func (b *batch) periodPaidBy(p RefundedPayment) (*SubscriptionRecord, bool) {
	for _, rec := range b.subs {
		if rec.OrgID != p.OrgID || rec.Environment != p.Environment || rec.Provider != p.Provider {
			continue
		}
		if _, ok := rec.renewalPaidBy(p.PaymentID); ok {
			return rec, true
		}
	}
	return nil, false
}

// subscriptionByID is the subscription of id the batch holds, and its key.
func (b *batch) subscriptionByID(id string) (SubscriptionKey, *SubscriptionRecord, bool) {
	for k, rec := range b.subs {
		if rec.ID == id {
			return k, rec, true
		}
	}
	return SubscriptionKey{}, nil, false
}

// bindSubscription is the step that gives the subscription order's
// payment paid the id at its provider that a later event of that same
// payment names, when the payment was applied from an event that named
// none and the subscription is still under the id the service gave it
// (CustomerSubscriptionID). A T-Bank status poll's answer names no card
// binding, the bank's notification of the same payment does
// (RebillId): the recurrent charges name the subscription by it, so it
// must be found by it. Nothing (nil) when there is nothing to bind, or
// when another subscription already goes by that id. out, the order's
// outcome, says so in its reason.
func (b *batch) bindSubscription(ev ProviderEvent, received time.Time, o *LockedOrder, out *Outcome) (*SubscriptionStep, error) {
	id := ev.Payment.SubscriptionID
	if id == "" || o.PaidSubscription == "" || ev.Kind != EventPaymentConfirmed || out.Decision != DecisionAlreadyApplied {
		return nil, nil
	}
	if same, known := o.PaidBy.SamePayment(ev.Payment); !same || !known {
		return nil, nil
	}
	key, rec, ok := b.subscriptionByID(o.PaidSubscription)
	if !ok || rec.Provider != ev.Provider || rec.ProviderSubscriptionID != CustomerSubscriptionID(o.SubscriptionPlan, o.SubscriptionFor) {
		return nil, nil
	}
	bound := SubscriptionKey{rec.OrgID, rec.Environment, rec.Provider, id}
	if _, taken := b.subs[bound]; taken {
		return nil, nil
	}
	plan, err := b.plans.For(rec)
	if err != nil {
		return nil, err
	}
	delete(b.subs, key)
	rec.ProviderSubscriptionID = id
	b.subs[bound] = rec
	out.Reason += "; the subscription it paid is now known at " + string(ev.Provider) + " by " + id
	return &SubscriptionStep{Record: *rec, Plan: plan, Event: SubscriptionEventOf(ev, received),
		Outcome: Outcome{Decision: DecisionAlreadyApplied, Reason: "the payment that paid the subscription names it " + id,
			Effects: []Effect{BindSubscription{ProviderSubscriptionID: id}}}}, nil
}

// awaitedOrder is the order a payment ev, decided by the subscription
// rules for rec, waits for (Step.AwaitedOrder): the merchant order it
// names, when it is the payment of rec's first period, not refunded —
// whether it paid that period now or an earlier decision did (the payment
// announced again, or replayed while the order was being created: its
// transaction must take the order's late-match lock all the same, or the
// order, committed meanwhile, may not see it processed and never queue
// it). Only the first period's payment may be an order's that comes late:
// a later charge naming that order is the subscription's renewal. A
// renewal names no merchant order; a T-Bank charge's own order id is its
// checkout session, never awaited.
func awaitedOrder(ev ProviderEvent, received time.Time, rec *SubscriptionRecord) *OrderKey {
	if ev.Kind != EventPaymentConfirmed || ev.Payment.MerchantOrderID == "" {
		return nil
	}
	if r, paid := rec.periodPaidBy(SubscriptionEventOf(ev, received)); !paid || r.Period != 1 || r.Refunded {
		return nil
	}
	return &OrderKey{OrgID: ev.OrgID, Environment: ev.Environment, Field: ByMerchantOrderID, Value: ev.Payment.MerchantOrderID}
}

// periodPaidBefore tells what the payment ev confirms or refunds in full
// paid already, for order o, when that payment paid a period of a
// subscription the batch holds and did not pay o: before is that period
// when it is the first period of the very subscription unpaid o's
// subscription line pays — the order came after its payment, and may
// claim it (PaidOrder.PeriodPaidBefore); else another is that period, and
// rec its subscription — the payment stays that subscription's, whatever
// o is (PaidOrder.PeriodOfAnother). All nil when the payment paid no
// period the batch knows of, or paid o, or cannot be told from the one
// that did.
func (b *batch) periodPaidBefore(ev ProviderEvent, received time.Time, o *LockedOrder) (before, another *Renewal, rec *SubscriptionRecord) {
	if ev.Kind != EventPaymentConfirmed && ev.Kind != EventRefunded {
		return nil, nil, nil
	}
	if same, known := o.PaidBy.SamePayment(ev.Payment); o.Paid && (same || !known) {
		return nil, nil, nil
	}
	rec, r, paid := b.periodOf(ev, received)
	if !paid {
		return nil, nil, nil
	}
	if !o.Paid && o.HasSubscriptionLines && r.Period == 1 &&
		b.subs[OrderSubscriptionRef(ev, o.SubscriptionPlan, o.SubscriptionFor).Key()] == rec {
		return &r, nil, nil
	}
	return nil, &r, rec
}

// periodOf is the subscription the batch holds that ev's payment paid a
// period of, and that period: the subscription ev names, else the one
// whose period its payment id paid. A batch that holds no subscription
// (an order's payments alone, the common batch) has nothing to look up.
func (b *batch) periodOf(ev ProviderEvent, received time.Time) (*SubscriptionRecord, Renewal, bool) {
	if len(b.subs) == 0 {
		return nil, Renewal{}, false
	}
	sev := SubscriptionEventOf(ev, received)
	if rec, ok := b.subs[ev.SubscriptionKey()]; ok {
		if r, paid := rec.periodPaidBy(sev); paid {
			return rec, r, true
		}
	}
	if ev.Payment.PaymentID == "" {
		return nil, Renewal{}, false
	}
	if rec, ok := b.periodPaidBy(ev.refundedPayment()); ok {
		if r, paid := rec.periodPaidBy(sev); paid {
			return rec, r, true
		}
	}
	return nil, Renewal{}, false
}

// planChange is the change a payment ev of order o would make to the
// subscription it would pay a period of, which exists already: its plan
// is not the plan of the order's subscription line, or its customer is
// another than the line's (possible only when the payment names the
// subscription: otherwise the customer is in its key). nil otherwise.
func (b *batch) planChange(ev ProviderEvent, o *LockedOrder) *PlanChange {
	if !o.HasSubscriptionLines || ev.Kind != EventPaymentConfirmed {
		return nil
	}
	key := OrderSubscriptionRef(ev, o.SubscriptionPlan, o.SubscriptionFor).Key()
	rec, known := b.subs[key]
	if !known {
		rec, known = b.created[key]
	}
	switch {
	case !known:
		return nil
	case rec.CustomerRef != "" && o.SubscriptionFor != "" && rec.CustomerRef != o.SubscriptionFor:
		return &PlanChange{From: rec.PlanID, To: o.SubscriptionPlan, OtherCustomer: true}
	case rec.PlanID != o.SubscriptionPlan:
		return &PlanChange{From: rec.PlanID, To: o.SubscriptionPlan}
	}
	return nil
}

// decideSubscription decides ev for rec with the subscription rules (a
// purchase: the payment of an order's subscription line) and applies the
// outcome to rec.
func (b *batch) decideSubscription(ev ProviderEvent, received time.Time, rec *SubscriptionRecord, purchase bool) (*SubscriptionStep, error) {
	plan, err := b.plans.For(rec)
	if err != nil {
		return nil, err
	}
	sev := SubscriptionEventOf(ev, received)
	sev.Purchase = purchase
	out := DecideSubscription(sev, rec.Subscription, plan)
	rec.Apply(sev, out)
	return &SubscriptionStep{Record: *rec.clone(), Plan: plan, Event: sev, Outcome: out}, nil
}

// recordedAttempt is the attempt state out records, or "".
func recordedAttempt(out Outcome) AttemptState {
	for _, e := range out.Effects {
		if r, ok := e.(RecordAttempt); ok {
			return r.State
		}
	}
	return ""
}

// IsRefund reports whether k announces money returned to the payer, all
// of a payment or part of it.
func (k EventKind) IsRefund() bool { return k == EventRefunded || k == EventPartiallyRefunded }

// IsSubscriptionLifecycle reports whether k is a provider's event about a
// subscription itself (not a payment).
func (k EventKind) IsSubscriptionLifecycle() bool {
	return k == EventSubscriptionOverdue || k == EventSubscriptionCancelled
}
