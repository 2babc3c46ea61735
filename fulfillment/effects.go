package fulfillment

import (
	"fmt"
	"strconv"
	"strings"
)

// Outcome is everything an event does, decided without I/O: a decision,
// the words that explain it, and the list of its effects. Storage applies
// the effects in one transaction with the order row locked, in order, and
// nothing else.
type Outcome struct {
	Decision Decision
	// Reason explains the decision in words, for the timeline and reviewers.
	Reason string
	// Effects are what the decision changes; none for a decision that
	// only records itself.
	Effects []Effect
}

// Effect is one change a decision makes. The types below are all there
// are; storage applies each of them in one place.
type Effect interface{ effect() }

// RecordAttempt records the event's payment attempt as reported in State
// (merged into what is known with NextAttemptState).
type RecordAttempt struct{ State AttemptState }

// RecordFullRefund records the event's payment, by its id, as refunded in
// full (PaidOrder.FullyRefunded): of its attempt, an invoice, whose row
// exists or is recorded by the same outcome (RecordAttempt before it).
type RecordFullRefund struct{}

// MoveOrder moves the order to state To.
type MoveOrder struct{ To State }

// MarkPaid records the event's payment as the one that paid the order
// (PaymentInfo.PaidRefs).
type MarkPaid struct{}

// GrantLicenses creates one license per unit of the order's license lines,
// each under a unique (order, line, unit) key.
type GrantLicenses struct{}

// CreditBalances credits each balance-credit line's account with the
// line's total: one "credit" ledger movement per line, ever.
type CreditBalances struct{}

// ReverseCredits takes back what is left of each balance credit of the
// order (after partial refunds): one "refund_reversal" ledger movement per
// credited line, ever.
type ReverseCredits struct{}

// RevokeLicenses marks each license of the order revoked, with the time and
// the event that revoked it: the rows stay, visible. Each license once.
type RevokeLicenses struct{}

// ReverseCreditShare takes back from each balance credit of the order its
// share of Refunded, the part of the order's total that a partial refund
// returned: the credit times Refunded over the total, rounded down, and
// never more than what is left of the credit. One movement per credited
// line and refund (Refund, the refund event's RefundRef).
type ReverseCreditShare struct {
	Refunded Money
	Refund   string
}

// RecordRefund records a partial refund of the order, as a fact of its
// own: later events of the order read it (PaidOrder.PartialRefunds) to tell
// it from a new refund, and a confirmation processed after it takes its
// share of the credits back. Once per refund (Refund.Ref).
type RecordRefund struct{ Refund RecordedRefund }

// WithdrawDeliveries tells the destinations of the order's external lines
// that the order was refunded — its order.refunded event, whether or not
// they subscribe to it — so that what they delivered can be withdrawn.
type WithdrawDeliveries struct{}

// PaySubscriptions pays, with the event's payment, one period of the
// subscription of the order's subscription line: the subscription the
// payment names, else the line's customer's to the line's plan — created
// by its first payment. What the period is, and whether the payment pays
// one at all, the subscription rules decide (DecideSubscription on a
// renewal), in the same transaction.
type PaySubscriptions struct{}

// RefundSubscriptions hands the refund of the payment that paid the order
// to the subscription rules, for the period that payment paid of the
// subscription of the order's subscription line: what the refund does to
// that period's access they decide (DecideSubscription on a refund), in
// the same transaction — when the batch holds that subscription (the
// refund names it at its provider, or a payment before it in the batch
// paid it).
type RefundSubscriptions struct{}

// OpenItem opens a reconciliation item of Kind about the event and its
// order, unless the situation ItemKey names already has one.
type OpenItem struct{ Kind ReconKind }

// RequestDeliveries queues, in the same transaction, one outbox message per
// external line of the order: a fulfillment.requested message to the line's
// destination, under the line's key (LineKey). The order is fulfilled once
// they are all delivered.
type RequestDeliveries struct{}

// Publish queues, in the same transaction, the order event Topic for every
// destination subscribed to it, under the event's key (EventKey).
type Publish struct{ Topic Topic }

func (RecordAttempt) effect()       {}
func (MoveOrder) effect()           {}
func (MarkPaid) effect()            {}
func (GrantLicenses) effect()       {}
func (CreditBalances) effect()      {}
func (ReverseCredits) effect()      {}
func (RevokeLicenses) effect()      {}
func (ReverseCreditShare) effect()  {}
func (RecordRefund) effect()        {}
func (RecordFullRefund) effect()    {}
func (OpenItem) effect()            {}
func (RequestDeliveries) effect()   {}
func (WithdrawDeliveries) effect()  {}
func (Publish) effect()             {}
func (PaySubscriptions) effect()    {}
func (RefundSubscriptions) effect() {}

// grants are the effects of fulfilling an order's own lines.
var grants = []Effect{GrantLicenses{}, CreditBalances{}}

// Item returns the kind of the reconciliation item o opens, or "".
func (o Outcome) Item() ReconKind {
	for _, e := range o.Effects {
		if it, ok := e.(OpenItem); ok {
			return it.Kind
		}
	}
	return ""
}

// ItemSubject is what a reconciliation item is about.
type ItemSubject struct {
	Provider    Provider
	OrgID       string
	Environment Environment
	OrderID     string
	// AttemptRef and PaymentID name the payment, when known.
	AttemptRef, PaymentID string
	// EventID is the provider event that opened it, when any.
	EventID string
	// InboxID is the stored event that opened it, when any.
	InboxID int64
	// MessageID is the outbox message it is about, when any.
	MessageID int64
	// Round is, for an item about the failure of a stored event
	// (failed_event) or of a message's delivery (failed_delivery,
	// uncertain_delivery), how many times the event had been replayed, or
	// the message retried: each is a new round of attempts, and a round
	// that fails is a situation of its own.
	Round int
	// StartID is the payment start it is about, when any.
	StartID int64
	// SubscriptionID is the subscription it is about, when any.
	SubscriptionID string
	// Refund names the refund it is about (RefundRef), when any.
	Refund string
	// Periods is the number of periods the subscription had paid, for an
	// item about the end of its access (sweep_failing).
	Periods int
}

// failedEventKeyPrefix starts the key of a failed_event item; the stored
// event's id follows.
const failedEventKeyPrefix = "inbox|"

// OrderKeyPrefix starts the key of an item about an order as a whole; the
// order's id follows. Housekeeping looks for the orders past the SLA that
// have no paid_not_fulfilled item yet by the keys it makes from it.
const OrderKeyPrefix = "order|"

// deliveryKeyPrefix starts the key of an item about an outbox message; the
// message's id follows.
const deliveryKeyPrefix = "outbox|"

// startKeyPrefix starts the key of an item about a payment the service
// started; the payment start's id follows.
const startKeyPrefix = "start|"

// ItemKey names the situation an item is about, so that a redelivery, a
// retry or a replay never opens a second item for it (reconciliation items
// are unique on kind and key). It is the only place such keys are made:
//   - failed_event: the stored event ("inbox|<id>"), and after a replay
//     the round of attempts too ("inbox|<id>|<replays>") — retries never
//     open a second item, a failure after a replay does;
//   - failed_delivery, uncertain_delivery: the outbox message
//     ("outbox|<id>"), and after a person's retry the round too
//     ("outbox|<id>|<retries>") — the dispatcher's own retries never open
//     a second item, a failure after a person's retry does;
//   - unidentified_payment: the order ("order|<id>") — one per order,
//     however many announcements;
//   - paid_not_fulfilled: the order ("order|<id>") — one per order,
//     however many housekeeping runs;
//   - duplicate_order_id, poll_failing: the payment start ("start|<id>")
//     — one per attempt the service started, however many polls failed;
//   - refund_after_fulfillment: the refund event (or the confirmation
//     granting after partial refunds) — every refund is money
//     moving, a partial refund may follow another;
//   - refund_not_applicable: the refund ("refund|<order>|<RefundRef>") —
//     one per refund, also when a notification and a status poll both
//     announce it;
//   - sweep_failing: the subscription and its paid periods
//     ("sweep|<subscription>|<periods>") — one per access end, however
//     many rounds of attempts fail;
//   - anything else about a subscription's payment: the subscription, the
//     kind and the payment id — one however many events announce the
//     payment; the event too when it names no payment, or for a refund;
//   - anything else about a payment: the payment (provider, tenant, order,
//     attempt, payment id), or the event when it names no payment.
//
// The parts are joined with "|", each escaped when it holds one (keyOf).
func ItemKey(kind ReconKind, s ItemSubject) string {
	if kind == ReconSweepFailing {
		return fmt.Sprintf("sweep|%s|%d", s.SubscriptionID, s.Periods)
	}
	if s.SubscriptionID != "" {
		// A subscription's payment once per kind, however many events
		// announce it; the event, when it names no payment. Every refund
		// is money moving: one per refund event.
		if s.PaymentID != "" && kind != ReconRefundAfterFulfill && kind != ReconRefundNotApplicable {
			return keyOf("subscription", s.SubscriptionID, string(kind), s.PaymentID, "")
		}
		return keyOf("subscription", s.SubscriptionID, string(kind), s.PaymentID, s.EventID)
	}
	switch kind {
	case ReconFailedEvent:
		return roundKey(failedEventKeyPrefix, s.InboxID, s.Round)
	case ReconFailedDelivery, ReconUncertainDelivery:
		return roundKey(deliveryKeyPrefix, s.MessageID, s.Round)
	case ReconUnidentifiedPayment, ReconPaidNotFulfilled:
		return OrderKeyPrefix + s.OrderID
	case ReconDuplicateOrderID, ReconPollFailing:
		return startKeyPrefix + strconv.FormatInt(s.StartID, 10)
	case ReconRefundNotApplicable:
		if s.Refund != "" {
			return keyOf("refund", s.OrgID, string(s.Environment), s.OrderID, s.Refund)
		}
		return keyOf("event", string(s.Provider), s.OrgID, string(s.Environment), s.EventID)
	case ReconRefundAfterFulfill:
		return keyOf("event", string(s.Provider), s.OrgID, string(s.Environment), s.EventID)
	default:
		if s.AttemptRef == "" && s.PaymentID == "" {
			return keyOf(string(s.Provider), s.OrgID, string(s.Environment), s.OrderID, "", "", s.EventID)
		}
		return keyOf(string(s.Provider), s.OrgID, string(s.Environment), s.OrderID, s.AttemptRef, s.PaymentID)
	}
}

// keyEscaper escapes the key separator in a key's parts, and the escape
// itself, so that no two lists of parts make one key.
var keyEscaper = strings.NewReplacer(`\`, `\\`, "|", `\|`)

// keyOf joins parts into an item key with "|". A part that holds neither
// "|" nor a backslash is as it is: the keys of such parts are the ones stored
// before parts were escaped.
func keyOf(parts ...string) string {
	for i, p := range parts {
		if strings.ContainsAny(p, `|\`) {
			parts[i] = keyEscaper.Replace(p)
		}
	}
	return strings.Join(parts, "|")
}

// roundKey is the key of an item about round of attempts at id (prefix
// names what id is): the first round's key names id alone, as keys did
// before rounds were told apart.
func roundKey(prefix string, id int64, round int) string {
	key := prefix + strconv.FormatInt(id, 10)
	if round > 0 {
		key += "|" + strconv.Itoa(round)
	}
	return key
}
