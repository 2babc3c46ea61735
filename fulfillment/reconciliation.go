package fulfillment

import (
	"context"
	"time"
)

// ReconState is where a reconciliation item is.
type ReconState string

// Reconciliation item states.
const (
	ReconOpen     ReconState = "open"
	ReconResolved ReconState = "resolved"
)

// ReconItem is a situation a person must look at. Resolving it records
// who and why; nothing is ever deleted.
type ReconItem struct {
	ID          int64
	Kind        ReconKind
	State       ReconState
	OrgID       string
	Environment Environment
	OrderID     string
	EventID     string
	// MessageID is the outbox message a delivery item is about.
	MessageID  int64
	Provider   Provider
	AttemptRef string
	PaymentID  string
	// Amount is the amount of the event that opened the item, if any;
	// Expected is what the order expected in the same unit, if known.
	Amount         Amount
	Expected       Amount
	Detail         string
	CreatedAt      time.Time
	ResolvedAt     *time.Time
	ResolvedBy     string
	ResolutionNote string
	// Resolution is how a resolved item was resolved; ResolvedByDetail is
	// what the resolver added about themselves (a name, a ticket).
	Resolution       ReconResolution
	ResolvedByDetail string
	// What else the item links: the stored event (its inbox row), the
	// payment the service started, the subscription.
	InboxID        int64
	PaymentStartID int64
	SubscriptionID string
}

// ReconFilter selects reconciliation items. Empty fields match everything.
type ReconFilter struct {
	// VisibleOrgs restricts the result to these orgs; nil means every org.
	VisibleOrgs []string
	OrgID       string
	Environment Environment
	Kind        ReconKind
	State       ReconState
	OrderID     string
	// CreatedFrom and CreatedBefore bound the items' creation time
	// (inclusive, exclusive); zero means unbounded.
	CreatedFrom, CreatedBefore time.Time
}

// Validate checks the request-supplied filter values.
func (f ReconFilter) Validate() error {
	var vs violations
	if f.OrgID != "" {
		checkOrgID(&vs, "org_id", f.OrgID)
	}
	if f.Kind != "" && !f.Kind.Valid() {
		vs.add("kind", "must be a reconciliation kind such as %q or %q", ReconExtraPayment, ReconAmountMismatch)
	}
	filterEnvironment(&vs, f.Environment)
	if !f.CreatedFrom.IsZero() && !f.CreatedBefore.IsZero() && !f.CreatedFrom.Before(f.CreatedBefore) {
		vs.add("create_time_before", "must be after create_time_from")
	}
	if f.State != "" && f.State != ReconOpen && f.State != ReconResolved {
		vs.add("state", "must be %q or %q", ReconOpen, ReconResolved)
	}
	if f.OrderID != "" {
		if err := ValidateOrderID("order_id", f.OrderID); err != nil {
			return err
		}
	}
	return vs.err()
}

// ReconListParams selects one page of items.
type ReconListParams struct {
	Filter ReconFilter
	// BeforeID continues a listing after the item with this id.
	BeforeID int64
	Limit    int
}

// ReconStore keeps reconciliation items, and reads and replays the stored
// events they point at.
type ReconStore interface {
	EventStore
	// ReconList returns up to p.Limit items matching p.Filter, newest first.
	ReconList(ctx context.Context, p ReconListParams) ([]ReconItem, error)
	// ReconGet returns one item, or an error wrapping ErrNotFound.
	ReconGet(ctx context.Context, id int64) (ReconItem, error)
	// ReconResolve resolves an open item as r says and returns it. An item
	// resolved already is left as it is: the error wraps
	// ErrFailedPrecondition and names when and by whom it was resolved.
	ReconResolve(ctx context.Context, r ReconResolve) (ReconItem, error)
	// ReconSummary counts what needs a person, per org and environment,
	// for the orgs f selects (VisibleOrgs, OrgID, Environment).
	ReconSummary(ctx context.Context, f ReconFilter) ([]ReconSummaryRow, error)
	// ReconActivity counts, per minute from since on, the events stored,
	// orders fulfilled and messages delivered in the orgs f selects.
	ReconActivity(ctx context.Context, f ReconFilter, since time.Time) ([]ActivityCount, error)
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
	// ReconUncertainDelivery: a destination that does not honour
	// idempotency keys may or may not have received a message.
	ReconUncertainDelivery ReconKind = "uncertain_delivery"
	// ReconFailedDelivery: a message used its destination's attempts
	// without being accepted.
	ReconFailedDelivery     ReconKind = "failed_delivery"
	ReconPaidNotFulfilled   ReconKind = "paid_not_fulfilled"
	ReconFailedEvent        ReconKind = "failed_event"
	ReconRefundAfterFulfill ReconKind = "refund_after_fulfillment"
	// ReconRefundNotApplicable: a refund that cannot apply to the payment
	// it names (DecisionRefundNotApplicable): nothing was recorded or
	// taken back. One per refund (its RefundRef), however often announced.
	ReconRefundNotApplicable ReconKind = "refund_not_applicable"
	// ReconDuplicateOrderID: a provider already had a payment under the id
	// of an attempt the service started, and it could not be linked.
	ReconDuplicateOrderID ReconKind = "duplicate_order_id"
	// ReconPollFailing: the status poll of a payment the service started
	// used its attempts, and its last question got no answer (the provider
	// unreachable, or answering errors): the service stopped asking
	// without learning the payment's outcome (FailedPoll). One per payment
	// start; a later notification settles the order as usual and leaves
	// the item open for a person.
	ReconPollFailing ReconKind = "poll_failing"
	// ReconPlanChange: an order's subscription line is for another plan,
	// or another customer, than the subscription its payment names
	// (DecisionPlanChangeRefused):
	// the order is on hold, nothing granted. One per payment.
	ReconPlanChange ReconKind = "plan_change"
	// ReconSweepFailing: the sweep that ends a subscription's access used
	// its attempts without completing (its plan is no longer configured,
	// or the database kept failing it): the access has not ended. The
	// sweep is never given up: it is due again after its backoff, and ends
	// the access once what failed it is fixed. One per subscription and
	// paid period (ItemSubject.Periods).
	ReconSweepFailing ReconKind = "sweep_failing"
)

// Valid reports whether k is a known kind.
func (k ReconKind) Valid() bool {
	switch k {
	case ReconExtraPayment, ReconUnidentifiedPayment, ReconAmountMismatch, ReconOverpayment, ReconUnmatchedPayment,
		ReconUncertainDelivery, ReconFailedDelivery, ReconPaidNotFulfilled, ReconFailedEvent, ReconRefundAfterFulfill,
		ReconRefundNotApplicable, ReconDuplicateOrderID, ReconPollFailing, ReconPlanChange, ReconSweepFailing:
		return true
	}
	return false
}

// ReconKinds lists every kind, in the order summaries show them.
var ReconKinds = []ReconKind{
	ReconUnmatchedPayment, ReconAmountMismatch, ReconOverpayment, ReconExtraPayment, ReconUnidentifiedPayment, ReconPlanChange,
	ReconDuplicateOrderID, ReconPollFailing, ReconSweepFailing, ReconPaidNotFulfilled, ReconRefundAfterFulfill, ReconRefundNotApplicable, ReconFailedEvent,
	ReconFailedDelivery, ReconUncertainDelivery,
}
