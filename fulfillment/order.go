package fulfillment

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"
)

// Environment separates real money from provider test mode.
type Environment string

// Environments.
const (
	EnvLive Environment = "live"
	EnvTest Environment = "test"
)

// Valid reports whether e is a known environment.
func (e Environment) Valid() bool { return e == EnvLive || e == EnvTest }

// LineKind says what fulfilling an order line grants.
type LineKind string

// Line kinds.
const (
	// KindLicense grants one unique license key per unit.
	KindLicense LineKind = "license"
	// KindBalanceCredit credits the line's account in the ledger.
	KindBalanceCredit LineKind = "balance_credit"
	// KindExternal is fulfilled by another service through the outbox.
	KindExternal LineKind = "external"
	// KindSubscription pays one period of the subscription of the line's
	// customer (AccountRef) to its plan (PlanID): the first paid order
	// creates the subscription, a later one renews it.
	KindSubscription LineKind = "subscription"
)

// Valid reports whether k is a known line kind.
func (k LineKind) Valid() bool {
	switch k {
	case KindLicense, KindBalanceCredit, KindExternal, KindSubscription:
		return true
	}
	return false
}

// State is where an order is in its life.
type State string

// Order states. Transitions are monotonic; see the state machine.
const (
	StatePendingPayment State = "pending_payment"
	StatePaid           State = "paid"
	StateFulfilling     State = "fulfilling"
	StateFulfilled      State = "fulfilled"
	StateOnHold         State = "on_hold"
	StateCancelled      State = "cancelled"
	StateExpired        State = "expired"
	StateRefunded       State = "refunded"
)

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	switch s {
	case StatePendingPayment, StatePaid, StateFulfilling, StateFulfilled,
		StateOnHold, StateCancelled, StateExpired, StateRefunded:
		return true
	}
	return false
}

// Money is a fiat amount in minor units of an ISO 4217 currency.
type Money struct {
	Currency   string
	MinorUnits int64
}

// Line is one thing the customer must receive.
type Line struct {
	SKU       string
	Kind      LineKind
	Quantity  int64
	UnitPrice Money
	// AccountRef is the account a balance_credit line credits, or the
	// customer a subscription line's subscription belongs to.
	AccountRef string
	// PlanID is the configured plan of a subscription line.
	PlanID string
	// Destination names the configured destination that fulfils an
	// external line; empty for other kinds.
	Destination string
}

// Settlement is what the merchant expects to receive from the payment
// provider, in the payment token. Provider payment amounts are compared with
// it and nothing else.
type Settlement struct {
	Token     string
	Network   string
	Amount    decimal.Decimal
	Tolerance decimal.Decimal
}

// OrderSpec is the validated, server-approved content of an order: what the
// merchant asked for. It is immutable once stored.
type OrderSpec struct {
	OrgID             string
	Environment       Environment
	MerchantOrderID   string
	CheckoutSessionID string
	Lines             []Line
	// Settlement is nil when the order states no expected settlement.
	Settlement *Settlement
}

// Order is a stored order.
type Order struct {
	ID string
	OrderSpec
	State     State
	CreatedAt time.Time
	UpdatedAt time.Time
}

// Total is the sum of the lines' prices. Validation guarantees one currency
// and no overflow.
func (s OrderSpec) Total() Money {
	var t Money
	for _, l := range s.Lines {
		t.Currency = l.UnitPrice.Currency
		t.MinorUnits += l.UnitPrice.MinorUnits * l.Quantity
	}
	return t
}

// SubscriptionCustomer is the customer (AccountRef) of the order's
// subscription line, "" when it has none (validation allows one at most).
func (s OrderSpec) SubscriptionCustomer() string {
	for _, l := range s.Lines {
		if l.Kind == KindSubscription {
			return l.AccountRef
		}
	}
	return ""
}

// Fingerprint identifies the content of the order: two specs with the same
// fingerprint ask for the same thing. It tells an idempotent repeat of
// CreateOrder from a conflicting reuse of the merchant order id.
func (s OrderSpec) Fingerprint() string {
	var b strings.Builder
	field := func(v string) {
		// Length-prefixed so that no two different specs encode alike.
		b.WriteString(strconv.Itoa(len(v)))
		b.WriteByte(':')
		b.WriteString(v)
	}
	// Orders keep the fingerprint they were stored with: without
	// destinations and plans v1; naming a destination v2, with every
	// line's; naming a plan v3, with every line's destination and plan.
	version := "order/v1"
	for _, l := range s.Lines {
		if l.Destination != "" && version == "order/v1" {
			version = "order/v2"
		}
		if l.PlanID != "" {
			version = "order/v3"
		}
	}
	field(version)
	field(s.OrgID)
	field(string(s.Environment))
	field(s.MerchantOrderID)
	field(s.CheckoutSessionID)
	field(strconv.Itoa(len(s.Lines)))
	for _, l := range s.Lines {
		field(l.SKU)
		field(string(l.Kind))
		field(strconv.FormatInt(l.Quantity, 10))
		field(l.UnitPrice.Currency)
		field(strconv.FormatInt(l.UnitPrice.MinorUnits, 10))
		field(l.AccountRef)
		if version != "order/v1" {
			field(l.Destination)
		}
		if version == "order/v3" {
			field(l.PlanID)
		}
	}
	if st := s.Settlement; st != nil {
		field(st.Token)
		field(st.Network)
		// Canonical decimal text: "25.0" and "25.000000" are the same amount.
		field(st.Amount.String())
		field(st.Tolerance.String())
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}
