package fulfillment

import "fmt"

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
	// DecisionAlreadyApplied: the payment that paid the order, announced
	// again under another event id. No effect.
	DecisionAlreadyApplied Decision = "already_applied"
	// DecisionDuplicatePayment: another payment for an order already paid.
	// Nothing granted; an extra_payment item asks for a refund review.
	DecisionDuplicatePayment Decision = "duplicate_payment"
	// DecisionUnidentifiedPayment: a payment for an order already paid that
	// cannot be told apart from the one that paid it, because it or the
	// paying one names neither an invoice nor a payment (see
	// PaymentInfo.Identified): it may be the same payment announced again,
	// or money received twice. Nothing granted; one unidentified_payment
	// item per order asks for a check at the provider.
	DecisionUnidentifiedPayment Decision = "unidentified_payment"
	// DecisionStaleIgnored: an event older than the order's state (an invoice
	// event after confirmation). The order does not move back.
	DecisionStaleIgnored Decision = "stale_ignored"
	// DecisionUnmatched: no order matches the event.
	DecisionUnmatched Decision = "unmatched"
	// DecisionAmountMismatch: the payment does not cover the expected
	// settlement (or is in another token or network); the order is on hold.
	DecisionAmountMismatch Decision = "amount_mismatch"
	// DecisionTestModeIgnored: a provider test event on a live endpoint.
	DecisionTestModeIgnored Decision = "test_mode_ignored"
	// DecisionIgnoredType: an event type that does not concern orders.
	DecisionIgnoredType Decision = "ignored_type"
)

// AttemptState is what is known of one payment attempt.
type AttemptState string

// Attempt states. Confirmed is final: nothing moves an attempt out of it.
const (
	AttemptCreated   AttemptState = "created"
	AttemptConfirmed AttemptState = "confirmed"
	AttemptExpired   AttemptState = "expired"
	AttemptCancelled AttemptState = "cancelled"
)

// NextAttemptState merges a reported attempt state into the stored one:
// a confirmed attempt stays confirmed, a created report never undoes an
// expiry or cancellation.
func NextAttemptState(stored, reported AttemptState) AttemptState {
	switch {
	case stored == "":
		return reported
	case stored == AttemptConfirmed || reported == AttemptConfirmed:
		return AttemptConfirmed
	case reported == AttemptCreated:
		return stored
	}
	return reported
}

// ReconKind names a situation a person must look at.
type ReconKind string

// Reconciliation kinds.
const (
	ReconExtraPayment ReconKind = "extra_payment"
	// ReconUnidentifiedPayment: a paid order received a payment that cannot
	// be told apart from the one that paid it (DecisionUnidentifiedPayment).
	// At most one per order, however many such announcements.
	ReconUnidentifiedPayment ReconKind = "unidentified_payment"
	ReconAmountMismatch      ReconKind = "amount_mismatch"
	ReconOverpayment         ReconKind = "overpayment"
	ReconUnmatchedPayment    ReconKind = "unmatched_payment"
	ReconUncertainDelivery   ReconKind = "uncertain_delivery"
	ReconPaidNotFulfilled    ReconKind = "paid_not_fulfilled"
	ReconFailedEvent         ReconKind = "failed_event"
	ReconRefundAfterFulfill  ReconKind = "refund_after_fulfillment"
)

// Valid reports whether k is a known kind.
func (k ReconKind) Valid() bool {
	switch k {
	case ReconExtraPayment, ReconUnidentifiedPayment, ReconAmountMismatch, ReconOverpayment, ReconUnmatchedPayment,
		ReconUncertainDelivery, ReconPaidNotFulfilled, ReconFailedEvent, ReconRefundAfterFulfill:
		return true
	}
	return false
}

// PaidOrder is the part of a stored order the state machine reads.
type PaidOrder struct {
	State      State
	Settlement *Settlement
	// HasExternalLines: fulfilled by another service, so a paid order waits
	// in "fulfilling" for that delivery.
	HasExternalLines bool
	// Paid is true once a confirmation was applied to the order (whether it
	// fulfilled it or put it on hold).
	Paid bool
	// PaidBy identifies the payment that paid the order: empty while unpaid,
	// and when that payment did not identify itself.
	PaidBy PaidRefs
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

// Outcome is everything an event does, decided without I/O. Storage applies
// it in one transaction with the order row locked.
type Outcome struct {
	Decision Decision
	// Reason explains the decision in words, for the timeline and reviewers.
	Reason string
	// NewState is the order's next state; empty leaves it unchanged.
	NewState State
	// MarkPaid records the event's attempt and payment as the ones that paid
	// the order.
	MarkPaid bool
	// Grant creates the order's entitlements and ledger credits.
	Grant bool
	// Attempt is the state to record for the event's payment attempt; empty
	// records nothing.
	Attempt AttemptState
	// Item opens a reconciliation item of this kind; empty opens none.
	Item ReconKind
}

// Decide applies one provider event to an order. order is nil when no order
// matches the event. Transitions are monotonic: no event moves an order back,
// and only a confirmed payment of the expected settlement fulfills.
func Decide(ev ProviderEvent, order *PaidOrder) Outcome {
	if ev.TestMode && ev.Environment == EnvLive {
		return Outcome{Decision: DecisionTestModeIgnored, Reason: "provider test-mode event on a live endpoint"}
	}
	if ev.Kind == EventOther || ev.Kind == "" {
		return Outcome{Decision: DecisionIgnoredType, Reason: fmt.Sprintf("event type %q does not concern orders", ev.Type)}
	}
	if order == nil {
		out := Outcome{Decision: DecisionUnmatched, Reason: "no order matches the event's merchant order id or checkout session"}
		if ev.Kind == EventPaymentConfirmed {
			out.Item = ReconUnmatchedPayment
		}
		return out
	}

	switch ev.Kind {
	case EventAttemptCreated:
		if order.State != StatePendingPayment {
			return Outcome{Decision: DecisionStaleIgnored, Attempt: AttemptCreated,
				Reason: fmt.Sprintf("attempt created while the order is %s", order.State)}
		}
		return Outcome{Decision: DecisionAttemptRecorded, Attempt: AttemptCreated, Reason: "payment attempt recorded"}

	case EventAttemptExpired, EventAttemptCancelled:
		attempt, decision := AttemptExpired, DecisionAttemptExpired
		if ev.Kind == EventAttemptCancelled {
			attempt, decision = AttemptCancelled, DecisionAttemptCancelled
		}
		if order.State != StatePendingPayment {
			return Outcome{Decision: DecisionStaleIgnored, Attempt: attempt,
				Reason: fmt.Sprintf("attempt %s while the order is %s: the order does not move back", attempt, order.State)}
		}
		return Outcome{Decision: decision, Attempt: attempt, Reason: "the order still awaits payment"}

	case EventPaymentConfirmed:
		return decideConfirmed(ev.Payment, *order)
	}
	return Outcome{Decision: DecisionIgnoredType, Reason: fmt.Sprintf("event kind %q does not concern orders", ev.Kind)}
}

func decideConfirmed(p PaymentInfo, order PaidOrder) Outcome {
	if order.Paid {
		switch same, known := order.PaidBy.SamePayment(p); {
		case !known:
			return unidentified(order.PaidBy, p)
		case same:
			return Outcome{Decision: DecisionAlreadyApplied, Attempt: AttemptConfirmed,
				Reason: "this payment already paid the order"}
		}
		return Outcome{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment,
			Reason: fmt.Sprintf("the order was already paid by %s; this payment needs a refund review", order.PaidBy.describe())}
	}
	if order.State != StatePendingPayment {
		// Cancelled or expired orders (and anything not awaiting payment).
		return Outcome{Decision: DecisionDuplicatePayment, Attempt: AttemptConfirmed, Item: ReconExtraPayment,
			Reason: fmt.Sprintf("payment for an order that is %s", order.State)}
	}

	// Unpaid: an unidentifiable payment pays like any other (PaidRefs then
	// records none).
	hold := func(reason string) Outcome {
		return Outcome{Decision: DecisionAmountMismatch, NewState: StateOnHold, MarkPaid: true,
			Attempt: AttemptConfirmed, Item: ReconAmountMismatch, Reason: reason}
	}
	s := order.Settlement
	switch {
	case s == nil:
		return hold("the order states no expected settlement to compare the payment with")
	case !p.HasAmount:
		return hold("the confirmation carries no amount")
	case p.Token != s.Token || p.Network != s.Network:
		return hold(fmt.Sprintf("paid in %s on %s, expected %s on %s", p.Token, p.Network, s.Token, s.Network))
	case p.Amount.LessThan(s.Amount.Sub(s.Tolerance)):
		return hold(fmt.Sprintf("received %s %s, expected %s (tolerance %s)", p.Amount, p.Token, s.Amount, s.Tolerance))
	}

	out := Outcome{Decision: DecisionFulfilled, NewState: StateFulfilled, MarkPaid: true, Grant: true,
		Attempt: AttemptConfirmed, Reason: "confirmed payment of the expected settlement"}
	if order.HasExternalLines {
		out.NewState = StateFulfilling
		out.Reason += "; external lines await delivery"
	}
	if p.Amount.GreaterThan(s.Amount) {
		out.Item = ReconOverpayment
		out.Reason = fmt.Sprintf("received %s %s, more than the expected %s: fulfilled, overpayment flagged", p.Amount, p.Token, s.Amount)
	}
	return out
}

// unidentified is the outcome of a payment for a paid order that cannot be
// told apart from the payment that paid it.
func unidentified(paid PaidRefs, p PaymentInfo) Outcome {
	return Outcome{Decision: DecisionUnidentifiedPayment, Attempt: AttemptConfirmed, Item: ReconUnidentifiedPayment,
		Reason: fmt.Sprintf("the order was paid by %s and this confirmation names %s, so this payment cannot be told apart "+
			"from the one that paid the order: it may be the same payment announced again, or money received twice; "+
			"check at the provider", paid.describe(), p.PaidRefs().describe())}
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
