package fulfillment

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/shopspring/decimal"
)

// Decision names what a provider event did. It is recorded on the event and
// shown in the order's timeline.
type Decision string

// Decisions.
const (
	// DecisionFulfilled: a confirmed payment paid the order; its lines were granted.
	DecisionFulfilled Decision = "fulfilled"
	// DecisionAttemptRecorded: a payment attempt was recorded; nothing paid yet.
	DecisionAttemptRecorded Decision = "attempt_recorded"
	// DecisionAttemptExpired: an unpaid attempt expired; the order still awaits payment.
	DecisionAttemptExpired Decision = "attempt_expired"
	// DecisionAttemptCancelled: an unpaid attempt was cancelled; the order still awaits payment.
	DecisionAttemptCancelled Decision = "attempt_cancelled"
	// DecisionAlreadyApplied: something already applied to the order (the
	// payment that paid it, its refund), announced again under another
	// event id. No effect.
	DecisionAlreadyApplied Decision = "already_applied"
	// DecisionDuplicatePayment: another payment for an order already paid.
	// Nothing granted; an extra_payment item asks for a refund review.
	DecisionDuplicatePayment Decision = "duplicate_payment"
	// DecisionUnidentifiedPayment: a payment for an order already paid that
	// cannot be told apart from the one that paid it (PaidRefs.SamePayment):
	// it may be the same payment announced again, or money received twice.
	// Nothing granted; one unidentified_payment item per order asks for a
	// check at the provider.
	DecisionUnidentifiedPayment Decision = "unidentified_payment"
	// DecisionStaleIgnored: an event older than the order's state (an invoice
	// event after confirmation, a confirmation of a refunded payment). The
	// order does not move back.
	DecisionStaleIgnored Decision = "stale_ignored"
	// DecisionUnmatched: no order matches the event.
	DecisionUnmatched Decision = "unmatched"
	// DecisionAmountMismatch: the payment does not cover what the order
	// expects (or is in another unit); the order is on hold.
	DecisionAmountMismatch Decision = "amount_mismatch"
	// DecisionRefunded: the payment that paid the order was refunded in
	// full: the order is refunded, its balance credits reversed, and what
	// was delivered flagged for revoking.
	DecisionRefunded Decision = "refunded"
	// DecisionRefundedBeforePayment: a refund arrived before any
	// confirmation was applied to the order. Nothing was granted; the order
	// keeps waiting for payment, and a later confirmation of the refunded
	// payment does not fulfil it.
	DecisionRefundedBeforePayment Decision = "refunded_before_payment"
	// DecisionPartiallyRefunded: part of the payment was refunded; the order
	// keeps its state and a refund_after_fulfillment item asks what to
	// revoke.
	DecisionPartiallyRefunded Decision = "partially_refunded"
	// DecisionPlanChangeRefused: a payment of an order whose subscription
	// line is for another plan (or another customer) than the subscription
	// the payment names: plan changes are not applied, and one customer's
	// payment pays no other's subscription. The order is paid but on hold, nothing
	// granted, no period paid; a plan_change item hands the change (a
	// refund, or the switch by hand) to a person.
	DecisionPlanChangeRefused Decision = "plan_change_refused"
	// DecisionRefundNotApplicable: a partial refund that cannot apply to
	// the payment it names: that payment was refunded in full already, or
	// the refund is larger than what is left of the order's total (of what
	// the payment paid, when more) after the partial refunds recorded
	// before it. Nothing is recorded or taken back; a
	// refund_not_applicable item asks a person to look at the money at
	// the provider.
	DecisionRefundNotApplicable Decision = "refund_not_applicable"
	// DecisionOtherPaymentRefunded: a refund of a payment that did not pay
	// the order (an extra payment, say). The order is untouched.
	DecisionOtherPaymentRefunded Decision = "other_payment_refunded"
	// DecisionUnidentifiedRefund: a refund that cannot be told apart from
	// the payment that paid the order: a refund_after_fulfillment item asks
	// a person to check.
	DecisionUnidentifiedRefund Decision = "unidentified_refund"
	// DecisionTestModeIgnored: a provider test event on a live endpoint.
	DecisionTestModeIgnored Decision = "test_mode_ignored"
	// DecisionIgnoredType: an event type that does not concern orders.
	DecisionIgnoredType Decision = "ignored_type"
)

// AttemptState is what is known of one payment attempt.
type AttemptState string

// Attempt states.
const (
	AttemptCreated   AttemptState = "created"
	AttemptConfirmed AttemptState = "confirmed"
	AttemptExpired   AttemptState = "expired"
	AttemptCancelled AttemptState = "cancelled"
	AttemptRefunded  AttemptState = "refunded"
)

// NextAttemptState merges a reported attempt state into the stored one:
// refunded is final; a confirmed attempt stays confirmed until refunded; a
// created report never undoes an expiry or cancellation.
func NextAttemptState(stored, reported AttemptState) AttemptState {
	switch {
	case stored == "":
		return reported
	case stored == AttemptRefunded || reported == AttemptRefunded:
		return AttemptRefunded
	case stored == AttemptConfirmed || reported == AttemptConfirmed:
		return AttemptConfirmed
	case reported == AttemptCreated:
		return stored
	}
	return reported
}

// AttemptKey names a payment attempt of an order.
type AttemptKey struct {
	Provider Provider
	Ref      string
}

// PaymentKey names a payment at its provider, by the payment's own id.
type PaymentKey struct {
	Provider Provider
	ID       string
}

// PaidOrder is the part of a stored order the state machine reads.
type PaidOrder struct {
	State State
	// Total is what the order costs: currency payments are compared with it.
	Total Money
	// Settlement is what the merchant expects in tokens: token payments are
	// compared with it; nil when the order states none.
	Settlement *Settlement
	// HasExternalLines: fulfilled by another service, so a paid order waits
	// in "fulfilling" for that delivery.
	HasExternalLines bool
	// HasSubscriptionLines: fulfilling it pays subscription periods.
	HasSubscriptionLines bool
	// PlanChange is set, for the payment being decided, when the
	// subscription that payment would pay a period of exists on another
	// plan than the order's subscription line: the batch sets it
	// (DecideBatch), nil otherwise.
	PlanChange *PlanChange
	// PeriodPaidBefore is set, for the payment or the full refund being
	// decided while the order is unpaid, when that payment paid the first
	// period of the very subscription the order's subscription line pays
	// already: the subscription rules took it as that period because the
	// order was created after it (Step.AwaitedOrder). The order may claim
	// it: it is paid by it when it fits the order as it is. The batch sets
	// it (DecideBatch), nil otherwise.
	PeriodPaidBefore *Renewal
	// PeriodOfAnother is set, for the payment or the full refund being
	// decided, when that payment paid a period of a subscription and is
	// not the order's: a later period, or one of a subscription the order
	// has no line for, or the order was paid by another payment. That
	// payment stays the subscription's: the order rules take nothing of it
	// (its refund is the subscription rules' too). The batch sets it
	// (DecideBatch), nil otherwise.
	PeriodOfAnother *Renewal
	// Paid is true once a confirmation was applied to the order (whether it
	// fulfilled it or put it on hold).
	Paid bool
	// PaidBy identifies the payment that paid the order: empty while unpaid,
	// and when that payment did not identify itself.
	PaidBy PaidRefs
	// PaidAmount is what the payment that paid the order paid (the zero
	// Amount while unpaid, or when not known): the partial refunds of a
	// payment larger than the order's total return that excess first
	// (excessOf).
	PaidAmount Amount
	// PaidByEvent names the event that paid the order (PaidEventRef) when
	// its payment names no payment id: PaidBy cannot tell that payment
	// from another of the same invoice, but that same event, processed
	// again, is already applied.
	PaidByEvent string
	// Attempts holds the recorded state of the order's payment attempts.
	Attempts map[AttemptKey]AttemptState
	// FullyRefunded are the payments refunded in full, by their ids, whose
	// refund named an attempt that is not the payment itself (an invoice):
	// a confirmation of one of them may name it by its id alone, another
	// attempt (RecordFullRefund; refundedInFull reads them).
	FullyRefunded map[PaymentKey]bool
	// PartialRefunds are the partial refunds recorded for the order, in
	// the order they were decided: a payment confirmed after some of its
	// partial refunds were processed takes their shares back when it
	// credits.
	PartialRefunds []RecordedRefund
}

// PlanChange is an order's subscription line for plan To paid for a
// subscription on plan From — or, OtherCustomer, for the subscription of
// another customer than the line's (on the line's plan, or not).
type PlanChange struct {
	From, To      string
	OtherCustomer bool
}

// String says what the payment is for against what the line is for. It
// names no customer: a customer's reference may be personal data, and
// the reason is logged.
func (c PlanChange) String() string {
	if c.OtherCustomer {
		return "the payment is for the subscription of another customer than the order's subscription line is for"
	}
	return fmt.Sprintf("the payment is for a subscription on plan %s, and the order's subscription line is for plan %s", c.From, c.To)
}

// RecordedRefund is a partial refund as recorded: of which attempt and
// which payment (its id, when the refund named one and the attempt is not
// that id), under which RefundRef, for how much.
type RecordedRefund struct {
	Attempt   AttemptKey
	PaymentID string
	Ref       string
	Amount    Amount
}

// of reports whether r is a refund of ev's payment: of its attempt, or, by
// the payment's id, of the payment however either named it (its invoice,
// or its id alone: then the attempt is the id).
func (r RecordedRefund) of(ev ProviderEvent) bool {
	p := ev.Payment
	if r.Attempt == (AttemptKey{ev.Provider, p.AttemptRef}) {
		return true
	}
	return p.PaymentID != "" && r.Attempt.Provider == ev.Provider && (r.PaymentID == p.PaymentID || r.Attempt.Ref == p.PaymentID)
}

// RefundRef names the refund ev announces, whatever announced it (a
// notification, an answer to a status poll): the payment and the amount
// returned. Two refunds of one payment for the same amount are one refund
// to these rules, as they are to a provider that keys refunds by amount.
func RefundRef(ev ProviderEvent) string {
	return RefundRefOf(ev.Provider, ev.Payment.AttemptRef, ev.Payment.Amount)
}

// ItemRefund is the refund an item opened by ev is about (its
// ItemSubject.Refund): RefundRef(ev) when ev announces a refund, else "".
func ItemRefund(ev ProviderEvent) string {
	if !ev.Kind.IsRefund() {
		return ""
	}
	return RefundRef(ev)
}

// RefundRefOf is RefundRef of a refund of attempt for amount.
func RefundRefOf(p Provider, attempt string, amount Amount) string {
	return fmt.Sprintf("%s:%s:%s %s", p, attempt, amount.Value.String(), amount.Unit)
}

// attempt is the recorded state of ev's payment attempt ("" when new).
func (o PaidOrder) attempt(ev ProviderEvent) AttemptState {
	return o.Attempts[AttemptKey{ev.Provider, ev.Payment.AttemptRef}]
}

// refundedInFull reports whether ev's payment, by its id, is known to have
// been refunded in full: under the attempt that is the payment itself
// (refunded), or under an invoice (FullyRefunded). A payment may be
// announced under its invoice once and by its own id alone another time,
// so its attempt ref does not tell. A refund that named no payment id
// cannot be matched so.
func (o PaidOrder) refundedInFull(ev ProviderEvent) bool {
	id := ev.Payment.PaymentID
	return id != "" && (o.FullyRefunded[PaymentKey{ev.Provider, id}] ||
		o.Attempts[AttemptKey{ev.Provider, id}] == AttemptRefunded)
}

// fullRefund is the effect that records ev's payment refunded in full by
// its id (RecordFullRefund), when the attempt ev names is not the payment
// itself and the payment is not known refunded; none otherwise (the
// attempt's own state says it then).
func (o PaidOrder) fullRefund(ev ProviderEvent) []Effect {
	p := ev.Payment
	if p.PaymentID == "" || p.PaymentID == p.AttemptRef || o.refundedInFull(ev) {
		return nil
	}
	return []Effect{RecordFullRefund{}}
}

// Apply records what out changed, for the next event of the order.
func (o *PaidOrder) Apply(ev ProviderEvent, out Outcome) {
	for _, e := range out.Effects {
		switch e := e.(type) {
		case MoveOrder:
			o.State = e.To
		case MarkPaid:
			o.Paid, o.PaidBy, o.PaidByEvent, o.PaidAmount = true, ev.Payment.PaidRefs(), PaidEventRef(ev), ev.Payment.Amount
		case RecordAttempt:
			if o.Attempts == nil {
				o.Attempts = map[AttemptKey]AttemptState{}
			}
			k := AttemptKey{ev.Provider, ev.Payment.AttemptRef}
			o.Attempts[k] = NextAttemptState(o.Attempts[k], e.State)
		case RecordFullRefund:
			if o.FullyRefunded == nil {
				o.FullyRefunded = map[PaymentKey]bool{}
			}
			o.FullyRefunded[PaymentKey{ev.Provider, ev.Payment.PaymentID}] = true
		case RecordRefund:
			o.PartialRefunds = append(o.PartialRefunds, e.Refund)
		}
	}
}

// PaidRefs identify a payment: the invoice it paid and its own id at the
// provider, either of which may be unknown. AttemptRef is the payment
// attempt they belong to, as recorded.
type PaidRefs struct {
	AttemptRef, InvoiceID, PaymentID string
}

// Identified reports whether a confirmation identifies its payment: it
// names an invoice or a payment. A checkout session or merchant order id
// alone does not (one checkout may be paid twice), so such a payment cannot
// be told apart from another payment of the same order.
func (p PaymentInfo) Identified() bool { return p.InvoiceID != "" || p.PaymentID != "" }

// PaidRefs are the refs to record as the ones that paid an order when this
// confirmation pays it: none at all when it does not identify its payment.
func (p PaymentInfo) PaidRefs() PaidRefs {
	if !p.Identified() {
		return PaidRefs{}
	}
	return PaidRefs{AttemptRef: p.AttemptRef, InvoiceID: p.InvoiceID, PaymentID: p.PaymentID}
}

// PaidEventRef is what an order that ev pays records of ev
// (PaidOrder.PaidByEvent): its provider and id when its payment names no
// payment id, "" otherwise (the payment id tells it apart).
func PaidEventRef(ev ProviderEvent) string {
	if ev.Payment.PaymentID != "" || ev.EventID == "" {
		return ""
	}
	return string(ev.Provider) + "/" + ev.EventID
}

// SamePayment compares the payment r with confirmation p. Two payment ids
// tell (equal: the same payment; different: two payments); otherwise two
// different invoices mean two payments. Anything else cannot be told apart
// — the same invoice without payment ids may have been paid twice — and
// known is false.
func (r PaidRefs) SamePayment(p PaymentInfo) (same, known bool) {
	switch {
	case r.PaymentID != "" && p.PaymentID != "":
		return r.PaymentID == p.PaymentID, true
	case r.InvoiceID != "" && p.InvoiceID != "" && r.InvoiceID != p.InvoiceID:
		return false, true
	}
	return false, false
}

// Decide applies one provider event to an order. order is nil when no order
// matches the event. Transitions are monotonic: no event moves an order back,
// and only a confirmed payment of what the order expects fulfills.
func Decide(ev ProviderEvent, order *PaidOrder) Outcome {
	if ev.TestMode && ev.Environment == EnvLive {
		return Outcome{Decision: DecisionTestModeIgnored, Reason: "provider test-mode event on a live endpoint"}
	}
	if ev.Kind == EventOther || ev.Kind == "" {
		return Outcome{Decision: DecisionIgnoredType, Reason: fmt.Sprintf("event type %q does not concern orders", ev.Type)}
	}
	if order == nil {
		out := Outcome{Decision: DecisionUnmatched, Reason: unmatchedReason(ev)}
		if ev.Kind == EventPaymentConfirmed {
			out.Effects = []Effect{OpenItem{ReconUnmatchedPayment}}
		}
		return out
	}

	switch ev.Kind {
	case EventAttemptCreated:
		if order.State != StatePendingPayment {
			return outcome(DecisionStaleIgnored, fmt.Sprintf("attempt created while the order is %s", order.State),
				recordAttempt(ev, AttemptCreated)...)
		}
		return outcome(DecisionAttemptRecorded, "payment attempt recorded", recordAttempt(ev, AttemptCreated)...)

	case EventAttemptExpired, EventAttemptCancelled:
		attempt, decision := AttemptExpired, DecisionAttemptExpired
		if ev.Kind == EventAttemptCancelled {
			attempt, decision = AttemptCancelled, DecisionAttemptCancelled
		}
		if order.State != StatePendingPayment {
			return outcome(DecisionStaleIgnored,
				fmt.Sprintf("attempt %s while the order is %s: the order does not move back", attempt, order.State),
				recordAttempt(ev, attempt)...)
		}
		return outcome(decision, "the order still awaits payment", recordAttempt(ev, attempt)...)

	case EventPaymentConfirmed:
		return decideConfirmed(ev, *order)
	case EventRefunded:
		return decideRefund(ev, *order)
	case EventPartiallyRefunded:
		return decidePartialRefund(ev, *order)
	case EventOther, EventSubscriptionOverdue, EventSubscriptionCancelled:
		// EventOther is answered above (it concerns no order); the
		// subscription's own events are the subscription rules' to decide,
		// and a kind this switch does not know is ignored below.
	}
	return Outcome{Decision: DecisionIgnoredType, Reason: fmt.Sprintf("event kind %q does not concern orders", ev.Kind)}
}

// unmatchedReason says what an event no order matches named its order by,
// for the person who looks for that order (the keys are the merchant's and
// the provider's identifiers, never the payer's).
func unmatchedReason(ev ProviderEvent) string {
	keys := ev.OrderKeys()
	if len(keys) == 0 {
		return "the event names no order (no merchant order id, no checkout session)"
	}
	named := make([]string, len(keys))
	for i, k := range keys {
		named[i] = fmt.Sprintf("%s %q", k.Field, k.Value)
	}
	return "no order matches " + strings.Join(named, " or ") + " (yet)"
}

func outcome(d Decision, reason string, effects ...Effect) Outcome {
	return Outcome{Decision: d, Reason: reason, Effects: effects}
}

// recordAttempt records ev's attempt in state, when the event names one.
func recordAttempt(ev ProviderEvent, state AttemptState) []Effect {
	if ev.Payment.AttemptRef == "" {
		return nil
	}
	return []Effect{RecordAttempt{state}}
}

// with returns effects followed by more, in a new slice.
func with(effects []Effect, more ...Effect) []Effect {
	return append(effects[:len(effects):len(effects)], more...)
}

func decideConfirmed(ev ProviderEvent, order PaidOrder) Outcome {
	p := ev.Payment
	confirmed := recordAttempt(ev, AttemptConfirmed)
	if r := order.PeriodOfAnother; r != nil {
		// A subscription's payment (period 1 of a subscription the order
		// does not pay, or a later period, or the order has a payment of
		// its own): the order was created after it, or named by a renewal.
		// Taking it for the order too would grant twice for one payment,
		// and leave a period its refund could not take back. Nothing to
		// look at: the order awaits a payment of its own, as it would had
		// the payment named no order.
		return outcome(DecisionAlreadyApplied,
			fmt.Sprintf("this payment paid period %d of a subscription the order does not pay with it (the order was created "+
				"after the payment, or is paid by another): it stays the subscription's, and the order is neither paid nor "+
				"granted anything by it", r.Period))
	}
	if order.Paid {
		if order.PaidByEvent != "" && order.PaidByEvent == PaidEventRef(ev) {
			return outcome(DecisionAlreadyApplied, "this event already paid the order", confirmed...)
		}
		switch same, known := order.PaidBy.SamePayment(p); {
		case !known:
			return unidentified(order.PaidBy, p, confirmed)
		case same:
			return outcome(DecisionAlreadyApplied, "this payment already paid the order", confirmed...)
		}
		if order.refundedInFull(ev) {
			// The provider returned this payment in full before its
			// confirmation came: nothing is owed for it, and an item
			// asking for its refund would have it refunded twice.
			return outcome(DecisionStaleIgnored, fmt.Sprintf("this payment was refunded before its confirmation was applied, "+
				"and the order was paid by %s: nothing is granted, nothing is owed", order.PaidBy.describe()))
		}
		return outcome(DecisionDuplicatePayment,
			fmt.Sprintf("the order was already paid by %s; this payment needs a refund review", order.PaidBy.describe()),
			with(confirmed, OpenItem{ReconExtraPayment})...)
	}
	if r := order.PeriodPaidBefore; r != nil && r.Refunded {
		// The payment paid a period before the order existed, and its
		// refund took that period back: the money went back to the payer.
		// The attempt is recorded refunded, as a refund announced now
		// would have it.
		return outcome(DecisionStaleIgnored,
			fmt.Sprintf("this payment paid period %d of the subscription before the order was created, and was refunded: "+
				"nothing is granted", r.Period),
			with(recordAttempt(ev, AttemptRefunded), order.fullRefund(ev)...)...)
	}
	if order.refundedInFull(ev) {
		// A refund of this payment came first, naming this attempt or
		// another (its invoice, or the payment alone where this names its
		// invoice): the money went back.
		return outcome(DecisionStaleIgnored, "this payment was refunded before its confirmation was applied: nothing is granted")
	}
	if order.attempt(ev) == AttemptRefunded {
		// A refund of another payment of this attempt, or of one that
		// named none, came first: this payment cannot be told from it.
		return outcome(DecisionUnidentifiedPayment,
			fmt.Sprintf("attempt %s was refunded before any confirmation was applied, and this confirmation (%s) cannot be told "+
				"apart from the refunded payment: nothing is granted; check at the provider whether money was kept",
				p.AttemptRef, p.PaidRefs().describe()),
			OpenItem{ReconUnidentifiedPayment})
	}
	if order.State != StatePendingPayment {
		// Cancelled, expired or refunded orders: money for an order that no
		// longer awaits it.
		return outcome(DecisionDuplicatePayment, fmt.Sprintf("payment for an order that is %s", order.State),
			with(confirmed, OpenItem{ReconExtraPayment})...)
	}

	// Unpaid: an unidentifiable payment pays like any other (PaidRefs then
	// records none).
	paid := with(confirmed, MarkPaid{})
	// claimed is the payment of a period of the order's subscription, paid
	// before the order was created (PeriodPaidBefore): the period is paid,
	// and stays the subscription's unless the order fits the payment.
	claimed := order.PeriodPaidBefore != nil
	hold := func(reason string) Outcome {
		if claimed {
			return unclaimed(DecisionAmountMismatch, reason, confirmed, ReconAmountMismatch)
		}
		return outcome(DecisionAmountMismatch, reason,
			with(with(paid, enter(StateOnHold)...), OpenItem{ReconAmountMismatch})...)
	}
	expected, tolerance, why := order.expected(p.Amount)
	switch {
	case why != "":
		return hold(why)
	case !p.Amount.Value.IsPositive():
		// Nothing paid pays nothing, whatever the tolerance.
		return hold(fmt.Sprintf("received %s: nothing was paid", p.Amount))
	case !tolerance.LessThan(expected) && p.Amount.Value.LessThan(expected):
		// A tolerance of the whole amount (an order created before it had
		// to be less) would take any speck for the order's price: such an
		// order accepts no shortfall.
		return hold(fmt.Sprintf("received %s, expected %s: the order's tolerance (%s) is its whole amount, "+
			"so no shortfall is accepted", p.Amount, Amount{expected, p.Amount.Unit}, tolerance))
	case p.Amount.Value.LessThan(expected.Sub(tolerance)):
		return hold(fmt.Sprintf("received %s, expected %s (tolerance %s)", p.Amount, Amount{expected, p.Amount.Unit}, tolerance))
	}

	if c := order.PlanChange; c != nil && order.HasSubscriptionLines {
		if claimed {
			return unclaimed(DecisionPlanChangeRefused, c.String(), confirmed, ReconPlanChange)
		}
		what := "a change of plan is not applied (how the periods paid are credited is the merchant's decision)"
		if c.OtherCustomer {
			what = "a customer's payment does not pay another's subscription (check at the provider whose payment it is)"
		}
		return outcome(DecisionPlanChangeRefused,
			c.String()+": "+what+"; the order is on hold, nothing granted, no period paid",
			with(with(paid, enter(StateOnHold)...), OpenItem{ReconPlanChange})...)
	}

	next, reason := StateFulfilled, "confirmed payment of what the order expects"
	if order.HasExternalLines {
		next, reason = StateFulfilling, reason+"; external lines await delivery"
	}
	effects := with(paid, enter(next)...)
	effects = append(effects, grants...)
	if order.HasSubscriptionLines {
		effects = append(effects, PaySubscriptions{})
	}
	// Partial refunds of this payment processed before it (their delivery
	// came first) take their shares of what it credits now — of what they
	// returned of the order's price, when it paid more than that. Their
	// items asked what to revoke while nothing was granted: this one asks
	// again.
	var refunded []string
	var before int64
	for _, r := range order.PartialRefunds {
		if !r.of(ev) {
			continue
		}
		refunded = append(refunded, r.Amount.String())
		if share, ok := order.refundShare(r.Amount, before, order.excessOf(p.Amount)); ok {
			effects = append(effects, ReverseCreditShare{share, r.Ref})
		}
		before = addCapped(before, order.minorUnits(r.Amount))
	}
	if len(refunded) > 0 {
		effects = append(effects, OpenItem{ReconRefundAfterFulfill})
	}
	if p.Amount.Value.GreaterThan(expected) {
		effects = append(effects, OpenItem{ReconOverpayment})
		reason = fmt.Sprintf("received %s, more than the expected %s: fulfilled, overpayment flagged",
			p.Amount, Amount{expected, p.Amount.Unit})
	}
	if r := order.PeriodPaidBefore; r != nil {
		// PaySubscriptions stays: the subscription rules find the period
		// paid by this payment (already applied), and the order records
		// the subscription it paid.
		reason += fmt.Sprintf("; this payment paid period %d of the subscription before the order was created: "+
			"no period is paid again", r.Period)
	}
	if len(refunded) > 0 {
		reason += fmt.Sprintf("; partial refunds of this payment were recorded before it (%s): balance credits are "+
			"granted less their shares, licenses and deliveries in full; decide what to revoke", strings.Join(refunded, ", "))
	}
	return outcome(DecisionFulfilled, reason, effects...)
}

// unclaimed is the outcome d of a payment that paid the first period of
// the order's subscription before the order was created (its
// PeriodPaidBefore) and does not fit the order (why): the order stays
// unpaid — holding it paid would leave behind it a period that the
// payment's refund, then the order's, could not take back — and a person
// decides, with item kind: refund the payment (its refund takes the period
// back, the subscription's rules), or settle the order by hand. The
// period stays paid meanwhile.
func unclaimed(d Decision, why string, confirmed []Effect, kind ReconKind) Outcome {
	return outcome(d, why+": this payment paid period 1 of the subscription before the order was created, and does not fit "+
		"the order; the order stays unpaid, the period paid, nothing granted: a person decides",
		with(confirmed, OpenItem{kind})...)
}

// periodOfAnotherNote is what a refund's reason adds when the refunded
// payment paid a period of a subscription and is not the order's
// (PeriodOfAnother): the subscription's rules decide that period too.
func (o PaidOrder) periodOfAnotherNote() string {
	if r := o.PeriodOfAnother; r != nil {
		return fmt.Sprintf("; the payment paid period %d of a subscription, whose rules decide what its refund does to "+
			"that period", r.Period)
	}
	return ""
}

// Expected is what the order expects of a payment in unit u — its
// settlement for that token on that network, its total for that currency —
// and false when it expects nothing in u.
func (o PaidOrder) Expected(u Unit) (Amount, bool) {
	switch {
	case u.IsCurrency() && u.Currency == o.Total.Currency:
		return MinorAmount(o.Total.MinorUnits, u.Currency), true
	case u.IsToken() && o.Settlement != nil && u == TokenUnit(o.Settlement.Token, o.Settlement.Network):
		return Amount{Value: o.Settlement.Amount, Unit: u}, true
	}
	return Amount{}, false
}

// expected returns what the order expects of a payment of amount's unit —
// the settlement for a token, the total for a currency — with the shortfall
// it tolerates, or why the payment cannot be compared with it.
func (o PaidOrder) expected(a Amount) (value, tolerance decimal.Decimal, why string) {
	u := a.Unit
	if !a.Known() {
		return decimal.Zero, decimal.Zero, "the confirmation carries no amount"
	}
	if e, ok := o.Expected(u); ok {
		if u.IsToken() {
			tolerance = o.Settlement.Tolerance
		}
		return e.Value, tolerance, ""
	}
	switch {
	case u.IsCurrency():
		return decimal.Zero, decimal.Zero, fmt.Sprintf("paid in %s, the order is priced in %s", u.Currency, o.Total.Currency)
	case o.Settlement == nil:
		return decimal.Zero, decimal.Zero, "the order states no expected settlement in tokens to compare the payment with"
	}
	return decimal.Zero, decimal.Zero, fmt.Sprintf("paid in %s, expected %s", u, TokenUnit(o.Settlement.Token, o.Settlement.Network))
}

func decideRefund(ev ProviderEvent, order PaidOrder) Outcome {
	refunded := with(recordAttempt(ev, AttemptRefunded), order.fullRefund(ev)...)
	if !order.Paid {
		// The payment is known refunded (under either name), or a refund
		// naming no payment came for its refunded attempt. A refund of
		// another payment of a refunded invoice is a refund of its own.
		if order.refundedInFull(ev) || (order.attempt(ev) == AttemptRefunded && ev.Payment.PaymentID == "") {
			return outcome(DecisionAlreadyApplied, "this refund was already recorded")
		}
		reason := "refunded before any confirmation was applied: nothing was granted, and a confirmation of this payment will not fulfil the order"
		if r := order.PeriodPaidBefore; r != nil {
			// The payment paid a period before the order existed: the
			// subscription rules take that period back.
			return outcome(DecisionRefundedBeforePayment,
				reason+fmt.Sprintf("; the payment paid period %d of the subscription before the order was created: "+
					"the subscription's rules decide what its refund does to that period", r.Period),
				with(refunded, RefundSubscriptions{})...)
		}
		return outcome(DecisionRefundedBeforePayment, reason+order.periodOfAnotherNote(), refunded...)
	}
	switch same, known := order.PaidBy.SamePayment(ev.Payment); {
	case known && !same:
		reason := fmt.Sprintf("the refunded payment is not %s, which paid the order", order.PaidBy.describe()) +
			order.periodOfAnotherNote()
		if ev.Payment.AttemptRef == order.PaidBy.AttemptRef {
			// Another payment of the paying attempt: the attempt as a whole
			// is not refunded, the payment is.
			return outcome(DecisionOtherPaymentRefunded, reason, order.fullRefund(ev)...)
		}
		return outcome(DecisionOtherPaymentRefunded, reason, refunded...)
	case !known:
		return outcome(DecisionUnidentifiedRefund,
			fmt.Sprintf("the order was paid by %s and this refund names %s: check at the provider whether the refunded "+
				"payment is the one that paid the order, and revoke what was granted if it is", order.PaidBy.describe(), ev.Payment.PaidRefs().describe()),
			OpenItem{ReconRefundAfterFulfill})
	case order.State == StateRefunded:
		return outcome(DecisionAlreadyApplied, "the order was already refunded", refunded...)
	}
	effects := with(refunded, enter(StateRefunded)...)
	reason := "the payment that paid the order was refunded; nothing had been granted (the order was " + string(order.State) + ")"
	if order.State == StateFulfilled || order.State == StateFulfilling {
		effects = append(effects, RevokeLicenses{}, ReverseCredits{})
		if order.HasExternalLines {
			effects = append(effects, WithdrawDeliveries{})
		}
		if order.HasSubscriptionLines {
			effects = append(effects, RefundSubscriptions{})
		}
		effects = append(effects, OpenItem{ReconRefundAfterFulfill})
		reason = "the payment that paid the order was refunded: licenses revoked, balance credits reversed, order.refunded " +
			"sent; check that the deliveries it requested were withdrawn"
	}
	return outcome(DecisionRefunded, reason, effects...)
}

func decidePartialRefund(ev ProviderEvent, order PaidOrder) Outcome {
	ref := RefundRef(ev)
	// One refund of a payment per amount (as RefundRef keys it), however
	// it named the payment.
	if slices.ContainsFunc(order.PartialRefunds, func(r RecordedRefund) bool { return r.of(ev) && r.Amount.Equal(ev.Payment.Amount) }) {
		return outcome(DecisionAlreadyApplied, "this refund was already recorded (announced again, or found by a status poll)")
	}
	switch same, known := order.PaidBy.SamePayment(ev.Payment); {
	case !order.Paid:
	case known && !same:
		return outcome(DecisionOtherPaymentRefunded,
			fmt.Sprintf("part of a payment other than %s, which paid the order, was refunded", order.PaidBy.describe()))
	case !known:
		// As a full refund that cannot be told apart: the same invoice may
		// have been paid twice, so the refunded money may not be the
		// order's. Nothing is recorded or taken back.
		return outcome(DecisionUnidentifiedRefund,
			fmt.Sprintf("the order was paid by %s and this partial refund of %s names %s: nothing is recorded or taken back; "+
				"check at the provider whether the refunded payment is the one that paid the order, and take back what it "+
				"covers if it is", order.PaidBy.describe(), ev.Payment.Amount, ev.Payment.PaidRefs().describe()),
			OpenItem{ReconRefundAfterFulfill})
	}
	attempt := AttemptKey{ev.Provider, ev.Payment.AttemptRef}
	if !ev.Payment.Amount.Known() {
		// A status poll's answer says the payment is partly refunded, not
		// by how much: nothing can be recorded or taken back from it.
		if slices.ContainsFunc(order.PartialRefunds, func(r RecordedRefund) bool { return r.of(ev) }) {
			return outcome(DecisionAlreadyApplied,
				"a partial refund of this payment is recorded already; this announcement gives no amount to tell another one apart")
		}
		return outcome(DecisionRefundNotApplicable,
			fmt.Sprintf("part of the payment was refunded by an amount this announcement does not give (a status poll's answer), "+
				"while the order is %s: nothing is recorded or taken back; the refund's notification records it when it comes; "+
				"look the payment's refunds up at the provider", order.State),
			OpenItem{ReconRefundNotApplicable})
	}
	if order.State == StateRefunded || order.attempt(ev) == AttemptRefunded || order.refundedInFull(ev) {
		return outcome(DecisionRefundNotApplicable,
			fmt.Sprintf("%s refunded of a payment that was refunded in full already: nothing more can be refunded of it, "+
				"so nothing is recorded or taken back; check at the provider what was returned", ev.Payment.Amount),
			OpenItem{ReconRefundNotApplicable})
	}
	// A payment that paid more than the order's total (its own, once it
	// paid the order) has that much more to refund, the excess first.
	var excess int64
	if order.Paid {
		excess = order.excessOf(order.PaidAmount)
	}
	refundedBefore := order.refunded(ev)
	// Before the order is paid, what the payment paid is not known (it may
	// have paid more than the total): the refund is recorded, and the
	// confirmation takes the shares back, the excess first.
	left, inUnit := order.refundLeft(refundedBefore, excess, ev.Payment.Amount)
	if inUnit && order.Paid && ev.Payment.Amount.Value.GreaterThan(decimal.NewFromInt(left)) {
		paid := "the order's total " + MinorAmount(order.Total.MinorUnits, order.Total.Currency).String()
		if excess > 0 {
			paid = "the payment's " + order.PaidAmount.String()
		}
		return outcome(DecisionRefundNotApplicable,
			fmt.Sprintf("%s refunded, more than the %s left of %s after the partial refunds recorded: "+
				"nothing is recorded or taken back; check at the provider what was returned",
				ev.Payment.Amount, MinorAmount(left, order.Total.Currency), paid),
			OpenItem{ReconRefundNotApplicable})
	}
	recorded := RecordRefund{RecordedRefund{Attempt: attempt, Ref: ref, Amount: ev.Payment.Amount}}
	if id := ev.Payment.PaymentID; id != attempt.Ref {
		recorded.Refund.PaymentID = id // the attempt, an invoice, does not say which payment
	}
	granted := order.State == StateFulfilled || order.State == StateFulfilling
	if granted && inUnit && excess > 0 && addCapped(refundedBefore, order.minorUnits(ev.Payment.Amount)) <= excess {
		return outcome(DecisionPartiallyRefunded,
			fmt.Sprintf("%s of the payment was refunded: it returns what the payment paid beyond the order's total "+
				"(%s of %s), so nothing is taken back; check that nothing else is owed",
				ev.Payment.Amount, MinorAmount(excess, order.Total.Currency), order.PaidAmount),
			recorded, OpenItem{ReconRefundAfterFulfill})
	}
	if share, ok := order.refundShare(ev.Payment.Amount, refundedBefore, excess); ok && granted {
		effects := []Effect{recorded, ReverseCreditShare{share, ref}}
		if order.HasSubscriptionLines {
			effects = append(effects, RefundSubscriptions{})
		}
		return outcome(DecisionPartiallyRefunded,
			fmt.Sprintf("%s of the payment was refunded: balance credits reversed in proportion; decide what to revoke of "+
				"the licenses and deliveries, which cannot be split", ev.Payment.Amount),
			append(effects, OpenItem{ReconRefundAfterFulfill})...)
	}
	return outcome(DecisionPartiallyRefunded,
		fmt.Sprintf("%s of the payment was refunded while the order is %s: decide what to revoke", ev.Payment.Amount, order.State),
		recorded, OpenItem{ReconRefundAfterFulfill})
}

// inTotalUnit says whether amount counts whole minor units of the order's
// currency: whether it can be compared with the order's total.
func (o PaidOrder) inTotalUnit(amount Amount) bool {
	u := amount.Unit
	return u.IsCurrency() && u.Currency == o.Total.Currency && amount.Value.IsInteger()
}

// minorUnits is amount in minor units of the order's currency: 0 when it
// is in another unit, or not a whole number of them.
func (o PaidOrder) minorUnits(amount Amount) int64 {
	if !o.inTotalUnit(amount) {
		return 0
	}
	return amount.Value.IntPart()
}

// refunded is what the partial refunds of ev's payment recorded returned
// (RecordedRefund.of), in minor units of the order's currency.
func (o PaidOrder) refunded(ev ProviderEvent) int64 {
	var sum int64
	for _, r := range o.PartialRefunds {
		if r.of(ev) {
			sum = addCapped(sum, o.minorUnits(r.Amount))
		}
	}
	return sum
}

// addCapped is a + b for a, b ≥ 0, at most a quarter of the int64 range: sums
// of refunds recorded before their payment (unbounded by the order's total)
// stay far from overflowing wherever they are added to.
func addCapped(a, b int64) int64 {
	const ceiling = math.MaxInt64 / 4
	return min(min(a, ceiling)+min(b, ceiling), ceiling)
}

// excessOf is what a payment of amount paid beyond the order's total, in
// minor units of the order's currency: 0 when it paid no more, or in
// another unit (bounded so that the total and the excess still count in
// an int64).
func (o PaidOrder) excessOf(amount Amount) int64 {
	if !o.inTotalUnit(amount) {
		return 0
	}
	excess := amount.Value.Sub(decimal.NewFromInt(o.Total.MinorUnits))
	if !excess.IsPositive() {
		return 0
	}
	return decimal.Min(excess, decimal.NewFromInt(math.MaxInt64-o.Total.MinorUnits)).IntPart()
}

// refundLeft is what is left to refund, in minor units of the order's
// currency, of a payment that paid the order's total and excess more
// (0 for a payment that did not pay the order, or is unpaid), for a
// refund of amount after partial refunds of that payment that returned
// before: the total and the excess less before. ok is false when amount is
// not a whole number of minor units of the order's currency (it cannot be
// compared).
func (o PaidOrder) refundLeft(before, excess int64, amount Amount) (left int64, ok bool) {
	if !o.inTotalUnit(amount) {
		return 0, false
	}
	return max(o.Total.MinorUnits+excess-before, 0), true
}

// refundShare is what a refund of amount returned of the order's price, as
// a part of the order's total, after partial refunds of the same payment
// that returned before, of a payment that paid excess more than the total:
// refunds return the excess first, and no more than the total counts.
// Known when the refund is in the order's currency, a whole number of
// minor units, more than nothing, and returns some of the price. (A refund
// larger than what is left is refused before it is recorded, once the
// order is paid; one recorded before, while what the payment paid was not
// known, counts for what is left of the price.)
func (o PaidOrder) refundShare(amount Amount, before, excess int64) (Money, bool) {
	if !o.inTotalUnit(amount) || !amount.Value.IsPositive() {
		return Money{}, false
	}
	// In decimals: the sums need not fit an int64; the share does (at
	// most the total).
	zero, b, x := decimal.Zero, decimal.NewFromInt(before), decimal.NewFromInt(excess)
	price := decimal.Max(b.Add(amount.Value).Sub(x), zero).Sub(decimal.Max(b.Sub(x), zero))
	if !price.IsPositive() {
		return Money{}, false
	}
	return Money{Currency: o.Total.Currency, MinorUnits: decimal.Min(price, decimal.NewFromInt(o.Total.MinorUnits)).IntPart()}, true
}

// unidentified is the outcome of a payment for a paid order that cannot be
// told apart from the payment that paid it.
func unidentified(paid PaidRefs, p PaymentInfo, effects []Effect) Outcome {
	return outcome(DecisionUnidentifiedPayment,
		fmt.Sprintf("the order was paid by %s and this confirmation names %s, so this payment cannot be told apart "+
			"from the one that paid the order: it may be the same payment announced again, or money received twice; "+
			"check at the provider", paid.describe(), p.PaidRefs().describe()),
		with(effects, OpenItem{ReconUnidentifiedPayment})...)
}

// describe names the refs for a reason.
func (r PaidRefs) describe() string {
	switch {
	case r.InvoiceID != "" && r.PaymentID != "":
		return fmt.Sprintf("payment %s of invoice %s", r.PaymentID, r.InvoiceID)
	case r.PaymentID != "":
		return "payment " + r.PaymentID
	case r.InvoiceID != "":
		return "a payment of invoice " + r.InvoiceID + " (no payment id)"
	}
	return "a payment naming neither invoice nor payment id"
}
