package yolfi

import (
	"encoding/json"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// Yolfi event types (the payload's "type").
const (
	TypeInvoiceCreated        = "invoice.created"
	TypePaymentConfirmed      = "payment.confirmed"
	TypeInvoiceOverdue        = "invoice.overdue"
	TypeInvoiceCancelled      = "invoice.cancelled"
	TypeSubscriptionOverdue   = "subscription.overdue"
	TypeSubscriptionCancelled = "subscription.cancelled"
)

// TestEventIDPrefix starts the ids of the dashboard's test events. Such an
// event is a test event even when it says livemode:true.
const TestEventIDPrefix = "evt_test_"

// Payload is the native Yolfi webhook body as this service models it: the
// one definition of the wire shape, used by Parse to read deliveries and by
// fulfillctl (and tests) to build them. Empty strings and absent fields are
// the same thing ("not in the event").
//
// Fields the provider adds later are accepted and ignored.
type Payload struct {
	// ID is the signed event id; redeliveries share it.
	ID string `json:"id"`
	// Type is the event type, e.g. "payment.confirmed".
	Type string `json:"type"`
	// Livemode is false for test events; absent means true.
	Livemode *bool `json:"livemode,omitempty"`
	// OrgID, when present, must be the receiving endpoint's org.
	OrgID string `json:"orgId,omitempty"`
	// CreatedAt is when the event happened, RFC 3339.
	CreatedAt string      `json:"createdAt,omitempty"`
	Data      PayloadData `json:"data,omitzero"`
}

// envelope is a Payload whose data is not read: what Parse reads of an
// event of a type it does not know when its data is not shaped as
// PayloadData models it.
type envelope struct {
	ID        string          `json:"id"`
	Type      string          `json:"type"`
	Livemode  *bool           `json:"livemode,omitempty"`
	OrgID     string          `json:"orgId,omitempty"`
	CreatedAt string          `json:"createdAt,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
}

// PayloadData is the "data" object of a Payload.
//
// Of the documented "customer" member only clientReferenceId is read: the
// merchant's own reference of the customer, which names a subscription's
// customer. It may carry personal data, so it is stored and never logged.
// Payer-supplied "metadata" never decides tenant or entitlement, so it is
// not modeled.
type PayloadData struct {
	InvoiceID         string `json:"invoiceId,omitempty"`
	PaymentID         string `json:"paymentId,omitempty"`
	CheckoutSessionID string `json:"checkoutSessionId,omitempty"`
	MerchantOrderID   string `json:"merchantOrderId,omitempty"`
	// PaylinkID identifies a reusable link, never an order on its own.
	PaylinkID      string `json:"paylinkId,omitempty"`
	SubscriptionID string `json:"subscriptionId,omitempty"`
	// Amount is what the merchant receives in Token units on Network, as a
	// plain decimal string such as "25.000000".
	Amount  string `json:"amount,omitempty"`
	Token   string `json:"token,omitempty"`
	Network string `json:"network,omitempty"`
	// TxHash is informative: one transaction may hold several transfers.
	TxHash   string           `json:"txHash,omitempty"`
	Customer *PayloadCustomer `json:"customer,omitempty"`
}

// PayloadCustomer is the "customer" object of PayloadData.
type PayloadCustomer struct {
	ClientReferenceID string `json:"clientReferenceId,omitempty"`
}

// kinds maps a Yolfi event type onto what it means to the service. Any
// type not listed (types the provider adds later) is fulfillment.EventOther:
// stored, acknowledged, no effect.
var kinds = map[string]fulfillment.EventKind{
	TypeInvoiceCreated:        fulfillment.EventAttemptCreated,
	TypePaymentConfirmed:      fulfillment.EventPaymentConfirmed,
	TypeInvoiceOverdue:        fulfillment.EventAttemptExpired,
	TypeInvoiceCancelled:      fulfillment.EventAttemptCancelled,
	TypeSubscriptionOverdue:   fulfillment.EventSubscriptionOverdue,
	TypeSubscriptionCancelled: fulfillment.EventSubscriptionCancelled,
}

func kindOf(eventType string) fulfillment.EventKind {
	if k, ok := kinds[eventType]; ok {
		return k
	}
	return fulfillment.EventOther
}

// normalized is what Parse makes of "data": the event's neutral payment
// core, the unit of its amount, and the references only Yolfi has.
type normalized struct {
	payment        fulfillment.PaymentInfo
	token, network string
	refs           map[string]string
}

// dataField maps one string member of "data" onto its place in the
// normalized event, with the domain's rule for that place.
type dataField struct {
	path string // as named in error messages
	wire func(*PayloadData) string
	put  func(n *normalized, v string)
	rule fulfillment.TextRule
}

// ref keeps v as the provider reference name.
func ref(name string) func(*normalized, string) {
	return func(n *normalized, v string) {
		if v != "" {
			if n.refs == nil {
				n.refs = map[string]string{}
			}
			n.refs[name] = v
		}
	}
}

// dataFields is THE field→place mapping of the adapter (apart from
// data.amount, which becomes a decimal, and the attempt reference, which the
// domain derives): correct a field's position here and nowhere else. The
// limits are the domain's (fulfillment.Rule*), which RecordEvent checks too.
var dataFields = []dataField{
	{"data.invoiceId", func(d *PayloadData) string { return d.InvoiceID }, func(n *normalized, v string) { n.payment.InvoiceID = v }, fulfillment.RuleRef},
	{"data.paymentId", func(d *PayloadData) string { return d.PaymentID }, func(n *normalized, v string) { n.payment.PaymentID = v }, fulfillment.RuleRef},
	{"data.checkoutSessionId", func(d *PayloadData) string { return d.CheckoutSessionID }, func(n *normalized, v string) { n.payment.CheckoutSessionID = v }, fulfillment.RuleRef},
	{"data.merchantOrderId", func(d *PayloadData) string { return d.MerchantOrderID }, func(n *normalized, v string) { n.payment.MerchantOrderID = v }, fulfillment.RuleRef},
	{"data.subscriptionId", func(d *PayloadData) string { return d.SubscriptionID }, func(n *normalized, v string) { n.payment.SubscriptionID = v }, fulfillment.RuleRef},
	{"data.customer.clientReferenceId", func(d *PayloadData) string {
		if d.Customer == nil {
			return ""
		}
		return d.Customer.ClientReferenceID
	}, func(n *normalized, v string) { n.payment.CustomerRef = v }, fulfillment.RuleRef},
	{"data.token", func(d *PayloadData) string { return d.Token }, func(n *normalized, v string) { n.token = v }, fulfillment.RuleToken},
	{"data.network", func(d *PayloadData) string { return d.Network }, func(n *normalized, v string) { n.network = v }, fulfillment.RuleNetwork},
	// A paylink never identifies an order, and a transaction hash is no
	// payment's identity (one transaction may hold several transfers):
	// both are kept as evidence only.
	{"data.paylinkId", func(d *PayloadData) string { return d.PaylinkID }, ref(RefPaylinkID), fulfillment.RuleRef},
	{"data.txHash", func(d *PayloadData) string { return d.TxHash }, ref(RefTxHash), fulfillment.RuleRef},
}

// Names of the Yolfi references kept with an event (ProviderEvent.Refs).
const (
	RefPaylinkID = "paylink_id"
	RefTxHash    = "tx_hash"
)

// amountPath names data.amount in error messages.
const amountPath = "data.amount"

// amountOf returns the wire amount of data.
func amountOf(d *PayloadData) string { return d.Amount }

// orderRefs are the references of which a payment.confirmed needs at least
// one to be matched to an order.
func orderRefs(p *fulfillment.PaymentInfo) []string {
	return []string{p.MerchantOrderID, p.CheckoutSessionID, p.InvoiceID, p.PaymentID}
}

// orderRefNames names orderRefs in error messages.
const orderRefNames = "data.merchantOrderId, data.checkoutSessionId, data.invoiceId or data.paymentId"
