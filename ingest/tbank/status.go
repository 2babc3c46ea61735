package tbank

import "github.com/fulfillplatform/fulfillment/fulfillment"

// Payment statuses the bank notifies (the notification's Status).
const (
	StatusNew             = "NEW"
	StatusFormShowed      = "FORM_SHOWED"
	StatusAuthorizing     = "AUTHORIZING"
	Status3DSChecking     = "3DS_CHECKING"
	Status3DSChecked      = "3DS_CHECKED"
	StatusAuthorized      = "AUTHORIZED"
	StatusPayChecking     = "PAY_CHECKING"
	StatusConfirming      = "CONFIRMING"
	StatusConfirmed       = "CONFIRMED"
	StatusReversing       = "REVERSING"
	StatusPartialReversed = "PARTIAL_REVERSED"
	StatusReversed        = "REVERSED"
	StatusRefunding       = "REFUNDING"
	StatusPartialRefunded = "PARTIAL_REFUNDED"
	StatusRefunded        = "REFUNDED"
	StatusCanceled        = "CANCELED"
	StatusDeadlineExpired = "DEADLINE_EXPIRED"
	StatusRejected        = "REJECTED"
	StatusAuthFail        = "AUTH_FAIL"
)

// kinds maps a status onto what it means to an order. Only CONFIRMED
// fulfills: a one-stage payment passes AUTHORIZED on its way to CONFIRMED,
// and a two-stage one waits in AUTHORIZED for its confirmation.
//
//   - Statuses before the payment is confirmed (PARTIAL_REVERSED included:
//     part of an authorized amount released, the rest still awaiting
//     confirmation) record the attempt.
//   - REVERSED, REJECTED, CANCELED and AUTH_FAIL end the attempt unpaid;
//     DEADLINE_EXPIRED lets it expire.
//   - REVERSING and REFUNDING announce an outcome the bank notifies on its
//     own: no effect.
//
// Any status not listed (the bank may add some) is fulfillment.EventOther:
// stored, acknowledged, no effect.
var kinds = map[string]fulfillment.EventKind{
	StatusNew:             fulfillment.EventAttemptCreated,
	StatusFormShowed:      fulfillment.EventAttemptCreated,
	StatusAuthorizing:     fulfillment.EventAttemptCreated,
	Status3DSChecking:     fulfillment.EventAttemptCreated,
	Status3DSChecked:      fulfillment.EventAttemptCreated,
	StatusAuthorized:      fulfillment.EventAttemptCreated,
	StatusPayChecking:     fulfillment.EventAttemptCreated,
	StatusConfirming:      fulfillment.EventAttemptCreated,
	StatusPartialReversed: fulfillment.EventAttemptCreated,
	StatusConfirmed:       fulfillment.EventPaymentConfirmed,
	StatusReversing:       fulfillment.EventOther,
	StatusReversed:        fulfillment.EventAttemptCancelled,
	StatusRefunding:       fulfillment.EventOther,
	StatusPartialRefunded: fulfillment.EventPartiallyRefunded,
	StatusRefunded:        fulfillment.EventRefunded,
	StatusCanceled:        fulfillment.EventAttemptCancelled,
	StatusDeadlineExpired: fulfillment.EventAttemptExpired,
	StatusRejected:        fulfillment.EventAttemptCancelled,
	StatusAuthFail:        fulfillment.EventAttemptCancelled,
}

// held are the statuses of a payment whose money the bank holds on the
// payer's card, neither taken nor released: authorized, being confirmed,
// or authorized with part of it released. A one-stage payment passes
// through them; a two-stage one stays until the merchant confirms or
// cancels it.
var held = map[string]bool{
	StatusAuthorized:      true,
	StatusConfirming:      true,
	StatusPartialReversed: true,
}

// kindOf is the kind of a notification of status; failed says the bank
// marked it as failed (Success false or a non-zero ErrorCode), which takes
// away any movement of money it would report.
func kindOf(status string, failed bool) fulfillment.EventKind {
	k, ok := kinds[status]
	if !ok {
		return fulfillment.EventOther
	}
	if failed && movesMoney(k) {
		return fulfillment.EventOther
	}
	return k
}

// movesMoney reports whether k says money arrived or went back.
func movesMoney(k fulfillment.EventKind) bool {
	return k == fulfillment.EventPaymentConfirmed || k == fulfillment.EventRefunded || k == fulfillment.EventPartiallyRefunded
}

// partial are the statuses a payment may be notified in more than once,
// each time for another amount: their event id ends with the amount.
var partial = map[string]bool{
	StatusPartialRefunded: true,
	StatusPartialReversed: true,
}

// amountRequired are the statuses whose notification must carry Amount: a
// confirmation is compared with what the order costs, and the partial
// statuses are told apart by it.
var amountRequired = map[string]bool{
	StatusConfirmed:       true,
	StatusPartialRefunded: true,
	StatusPartialReversed: true,
}
