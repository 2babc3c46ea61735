package fulfillment

import (
	"time"

	"github.com/shopspring/decimal"
)

// Provider names a payment provider.
type Provider string

// Providers.
const (
	ProviderYolfi Provider = "yolfi"
	ProviderTBank Provider = "tbank"
)

// EventKind is what a provider event means to an order, whatever the
// provider calls it. Adapters map their event types onto these.
type EventKind string

// Event kinds.
const (
	// EventAttemptCreated: a payment attempt exists (Yolfi invoice.created,
	// T-Bank NEW/AUTHORIZED). Never a reason to fulfill.
	EventAttemptCreated EventKind = "attempt_created"
	// EventPaymentConfirmed: money arrived (Yolfi payment.confirmed, T-Bank
	// CONFIRMED). The only fulfillment trigger.
	EventPaymentConfirmed EventKind = "payment_confirmed"
	// EventAttemptExpired: one attempt expired (Yolfi invoice.overdue).
	EventAttemptExpired EventKind = "attempt_expired"
	// EventAttemptCancelled: one attempt was cancelled (Yolfi invoice.cancelled).
	EventAttemptCancelled EventKind = "attempt_cancelled"
	// EventOther: stored and acknowledged, no effect on orders
	// (subscription events until subscriptions are built, unknown types).
	EventOther EventKind = "other"
)

// Endpoint is a configured webhook receiver: it fixes the provider, the
// tenant and the environment of everything it receives. Nothing in a payload
// can change them.
type Endpoint struct {
	ID          string
	Provider    Provider
	OrgID       string
	Environment Environment
}

// ProviderEvent is a verified provider event, normalized by its adapter.
type ProviderEvent struct {
	// Provider, OrgID and Environment come from the endpoint, never from the
	// payload.
	Provider    Provider
	EndpointID  string
	OrgID       string
	Environment Environment

	// EventID is the provider's signed event id: redeliveries share it.
	EventID string
	// Type is the provider's own event type, e.g. "payment.confirmed".
	Type string
	// Kind is what Type means to an order.
	Kind EventKind
	// TestMode is true for provider test events (Yolfi livemode:false or an
	// evt_test_ id). On a live endpoint they are stored and ignored.
	TestMode   bool
	OccurredAt time.Time

	// Payment is what the event says about a payment, for the order matcher
	// and the state machine.
	Payment PaymentInfo
}

// PaymentInfo is the normalized payment content of an event. Empty strings
// mean "not in the event".
type PaymentInfo struct {
	// AttemptRef identifies the payment attempt at the provider (Yolfi
	// invoice id, else payment id, else checkout session id).
	AttemptRef        string
	PaymentID         string
	InvoiceID         string
	CheckoutSessionID string
	MerchantOrderID   string
	// PaylinkID is recorded but never identifies an order on its own.
	PaylinkID      string
	SubscriptionID string
	// Amount is what the merchant receives, in Token units on Network. Zero
	// with HasAmount false when the event carries no amount.
	Amount    decimal.Decimal
	HasAmount bool
	Token     string
	Network   string
	// TxHash is informative only: one transaction may hold several transfers.
	TxHash string
}
