package fulfillment

import (
	"time"
)

// Provider names a payment provider.
type Provider string

// Names of providers this code speaks of. The registry of providers with
// an adapter is package ingest/providers.
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
	// EventRefunded: the whole payment was returned to the payer (T-Bank
	// REFUNDED).
	EventRefunded EventKind = "refunded"
	// EventPartiallyRefunded: part of the payment was returned; the
	// event's amount says how much (T-Bank PARTIAL_REFUNDED).
	EventPartiallyRefunded EventKind = "partially_refunded"
	// EventSubscriptionOverdue: a renewal of the subscription the event
	// names is overdue (Yolfi subscription.overdue).
	EventSubscriptionOverdue EventKind = "subscription_overdue"
	// EventSubscriptionCancelled: the subscription the event names was
	// cancelled (Yolfi subscription.cancelled).
	EventSubscriptionCancelled EventKind = "subscription_cancelled"
	// EventOther: stored and acknowledged, no effect (unknown types).
	EventOther EventKind = "other"
)

// Valid reports whether k is a known event kind.
func (k EventKind) Valid() bool {
	switch k {
	case EventAttemptCreated, EventPaymentConfirmed, EventAttemptExpired, EventAttemptCancelled,
		EventRefunded, EventPartiallyRefunded, EventSubscriptionOverdue, EventSubscriptionCancelled, EventOther:
		return true
	}
	return false
}

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

	// Refs are the provider's own references that the neutral core has no
	// place for (a paylink, a transaction hash, a rebill id), by name. They
	// are kept as evidence; nothing matches or decides on them.
	Refs map[string]string
}

// PaymentInfo is the normalized payment content of an event: the neutral
// core every provider's events map onto. Empty strings mean "not in the
// event".
type PaymentInfo struct {
	// AttemptRef identifies the payment attempt at the provider: the
	// invoice, else the payment, else the checkout session (Attempt).
	AttemptRef string
	// InvoiceID is the provider's request for payment, when it has one.
	InvoiceID string
	// PaymentID is the provider's id of the payment itself.
	PaymentID         string
	CheckoutSessionID string
	MerchantOrderID   string
	// SubscriptionID names the subscription a payment or a subscription
	// event belongs to at the provider (Yolfi subscriptionId, T-Bank
	// RebillId): renewals find their subscription by it.
	SubscriptionID string
	// CustomerRef is the merchant's reference of the payer, when the
	// provider relays it (Yolfi customer.clientReferenceId). It may carry
	// personal data: it is stored, never logged.
	CustomerRef string
	// Amount is what the merchant receives (a confirmation) or what was
	// returned (a refund): token units, or a currency's minor units. The
	// zero Amount: the event carries none.
	Amount Amount
}

// Validate checks every field of a normalized event against the shared
// rules (limits.go) and returns a *ValidationError naming each bad field as
// RecordEventRequest does. An adapter's output passes it; RecordEvent calls
// it because its caller may be another process.
func (ev ProviderEvent) Validate() error {
	var vs violations
	text := func(field, v string, r TextRule, required bool) {
		switch v {
		case "":
			if required {
				vs.add(field, "is required")
			}
		default:
			if err := r.Check(v); err != nil {
				vs.add(field, "%v", err)
			}
		}
	}
	// Which providers exist is the registry's (ingest/providers) and the
	// endpoint configuration's to say; here a provider is only a name.
	text("provider", string(ev.Provider), RuleRefName, true)
	text("endpoint_id", ev.EndpointID, RuleEventID, true)
	checkOrgID(&vs, "org_id", ev.OrgID)
	if !ev.Environment.Valid() {
		vs.add("environment", "must be %q or %q", EnvLive, EnvTest)
	}
	text("event_id", ev.EventID, RuleEventID, true)
	text("type", ev.Type, RuleEventType, true)
	if !ev.Kind.Valid() {
		vs.add("kind", "must be a known event kind such as %q", EventPaymentConfirmed)
	}
	p := ev.Payment
	for _, f := range []struct {
		field, v string
	}{
		{"payment.attempt_ref", p.AttemptRef},
		{"payment.payment_id", p.PaymentID},
		{"payment.invoice_id", p.InvoiceID},
		{"payment.checkout_session_id", p.CheckoutSessionID},
		{"payment.merchant_order_id", p.MerchantOrderID},
		{"payment.subscription_id", p.SubscriptionID},
		{"payment.customer_ref", p.CustomerRef},
	} {
		text(f.field, f.v, RuleRef, false)
	}
	if a := p.Amount; a.Known() {
		if field, err := checkUnit(a.Unit); err != nil {
			vs.add("payment."+field, "%v", err)
		}
		if err := checkDecimal(a.Value); err != nil {
			vs.add("payment.amount", "%v", err)
		} else if a.Unit.IsCurrency() && !a.Value.IsInteger() {
			vs.add("payment.amount", "counts minor units of %s: a whole number", a.Unit.Currency)
		}
	}
	if p.AttemptRef != p.Attempt() {
		vs.add("payment.attempt_ref", "must be the invoice id, else the payment id, else the checkout session id")
	}
	switch ev.Kind {
	case EventPaymentConfirmed:
		if !p.Amount.Known() {
			vs.add("payment.amount", "is required for a confirmed payment")
		}
		if p.MerchantOrderID == "" && p.CheckoutSessionID == "" && p.InvoiceID == "" && p.PaymentID == "" {
			vs.add("payment", "a confirmed payment needs a merchant order, checkout session, invoice or payment id")
		}
	case EventPartiallyRefunded:
		// Its amount is how much was returned, when the announcement says
		// (a status poll's answer does not).
	case EventSubscriptionOverdue, EventSubscriptionCancelled:
		if p.SubscriptionID == "" {
			vs.add("payment.subscription_id", "is required for a subscription event: the subscription it concerns")
		}
	default:
		// The other kinds need only the checks above.
	}
	if len(ev.Refs) > MaxRefs {
		vs.add("refs", "at most %d provider references", MaxRefs)
	}
	for name, v := range ev.Refs {
		if err := RuleRefName.Check(name); name == "" || err != nil {
			vs.add("refs", "a reference name must be printable ASCII without spaces, %d bytes at most", RuleRefName.Max)
			continue
		}
		text("refs."+name, v, RuleRef, true)
	}
	return vs.err()
}

// Attempt is the payment attempt the event is about: its invoice, else its
// payment, else its checkout session ("" when it names none). AttemptRef
// holds it.
func (p PaymentInfo) Attempt() string {
	for _, ref := range []string{p.InvoiceID, p.PaymentID, p.CheckoutSessionID} {
		if ref != "" {
			return ref
		}
	}
	return ""
}

// EarliestOccurrence bounds, with MaxFutureSkew, the occurrence times a
// provider may claim. Its clock may be off by a little; an event dated
// before EarliestOccurrence, or more than MaxFutureSkew after it was
// received, is not believed.
var EarliestOccurrence = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// MaxFutureSkew is how far ahead of its receipt an event may be dated.
const MaxFutureSkew = 24 * time.Hour

// PlausibleOccurrence returns the time to record for an event that says it
// occurred at occurred and was received at received: occurred itself when
// it is plausible (or unknown, the zero time), else received — so that an
// absurd date can never make an event look newer (or older) than the events
// received around it. The raw body keeps the provider's own value.
func PlausibleOccurrence(occurred, received time.Time) time.Time {
	if occurred.IsZero() || (!occurred.Before(EarliestOccurrence) && !occurred.After(received.Add(MaxFutureSkew))) {
		return occurred
	}
	return received
}
