package fulfillment

import (
	"context"
	"time"
)

// InboxState is where a stored provider event is in its processing.
type InboxState string

// Inbox states.
const (
	InboxPending   InboxState = "pending"
	InboxProcessed InboxState = "processed"
	InboxIgnored   InboxState = "ignored"
	InboxUnmatched InboxState = "unmatched"
	InboxFailed    InboxState = "failed"
)

// InboxStateFor is the state an event ends in after its decision.
func InboxStateFor(d Decision) InboxState {
	switch d {
	case DecisionTestModeIgnored, DecisionIgnoredType:
		return InboxIgnored
	case DecisionUnmatched:
		return InboxUnmatched
	default:
		return InboxProcessed
	}
}

// InboxReceipt is the answer to storing a provider event.
type InboxReceipt struct {
	ID    int64
	State InboxState
	// Duplicate is true when the event was stored before (a redelivery).
	Duplicate bool
}

// InboxStore durably records verified provider events.
type InboxStore interface {
	// InboxInsert stores ev with its raw body unless an event with the same
	// (provider, org, environment, event id) exists, and returns only once
	// the row is committed. Test-mode events on a live endpoint are stored
	// already ignored.
	InboxInsert(ctx context.Context, ev ProviderEvent, rawBody []byte) (InboxReceipt, error)
}

// InboxWork is what inbox workers need from storage besides the inbox's
// queue (claims, retries: the worker's Table).
type InboxWork interface {
	// InboxProcess decides and applies events in one transaction holding
	// their orders' row locks: attempts, state changes, grants,
	// reconciliation items and the events' decisions commit together, or
	// nothing does. Events of one order are applied in event order. The
	// result holds an outcome for each event owner still held; an event
	// missing from it was taken over by another worker (owner was not live).
	InboxProcess(ctx context.Context, ids []int64, owner string) (map[int64]Outcome, error)
}

// ProcessedEvent is an event InboxProcess decided, with what the
// processor's log line, metrics and trace tell about it — never its body or
// the customer's reference.
type ProcessedEvent struct {
	Outcome
	EventID    string
	Provider   Provider
	EndpointID string
	Kind       EventKind
	// OrderID is the order the event was matched to ("" when none).
	OrderID string
	// ReceivedAt is when the event was stored (the database's clock).
	ReceivedAt time.Time
	// TraceParent is the W3C traceparent of the call that stored the
	// event ("" when it was not traced).
	TraceParent string
}

// InboxEventsProcessor is an InboxWork that also tells what it decided
// about each event beyond its outcome (storage does).
type InboxEventsProcessor interface {
	// InboxProcessEvents is InboxProcess, with each event's ProcessedEvent.
	InboxProcessEvents(ctx context.Context, ids []int64, owner string) (map[int64]ProcessedEvent, error)
}

// PaymentAttempt is one attempt to pay an order, as last reported.
type PaymentAttempt struct {
	Provider   Provider
	AttemptRef string
	State      AttemptState
	// Amount is the last amount reported for it, if any.
	Amount    Amount
	CreatedAt time.Time
}

// Entitlement is something granted for one unit of an order line.
type Entitlement struct {
	ID        int64
	Kind      LineKind
	SKU       string
	Unit      int
	Value     string
	CreatedAt time.Time
	// RevokedAt is when a refund revoked it (nil: in force), and
	// RevokedReason why.
	RevokedAt     *time.Time
	RevokedReason string
}

// LedgerEntry is one balance movement caused by an order.
type LedgerEntry struct {
	ID         int64
	AccountRef string
	Movement   string
	Amount     Money
	CreatedAt  time.Time
}

// TimelineEvent is one processed provider event of an order.
type TimelineEvent struct {
	EventID    string
	Type       string
	ReceivedAt time.Time
	Decision   Decision
	Reason     string
	// MatchedLater: the event came before its order, and the service
	// queued it again when the order appeared (late matching).
	MatchedLater bool
}

// OrderDetail is an order with its history. Attempts and Events hold the
// newest MaxHistoryItems, Entitlements at most MaxLicensesPerOrder; the
// Omitted counts say how many older ones were left out.
type OrderDetail struct {
	Order
	Attempts            []PaymentAttempt
	OmittedAttempts     int
	Entitlements        []Entitlement
	OmittedEntitlements int
	// Ledger are its balance movements, oldest first: the newest
	// MaxLedgerItems.
	Ledger        []LedgerEntry
	OmittedLedger int
	Events        []TimelineEvent
	OmittedEvents int
	// Deliveries are its outbox messages, oldest first: the newest
	// MaxHistoryItems.
	Deliveries        []Delivery
	OmittedDeliveries int
	// Starts are the payments the service started for it (StartPayment),
	// by attempt: at most MaxPaymentStarts.
	Starts []PaymentStart
	// Feed are its events on the feed, in feed order, without payloads:
	// at most one per topic.
	Feed []OrderEvent
}
