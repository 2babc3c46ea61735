package fulfillment

import (
	"encoding/json"
	"strconv"
	"time"
)

// The bodies of outbox messages and of the event feed's events: the
// service's public contract with the systems it tells. Every body is a
// Payload; its Data is one of the types below, by Type. They are rendered
// here and nowhere else (storage stores what Payload.Render returns); their
// schemas are in docs/openapi/webhooks.yaml, whose tests hold the bodies
// the outbox delivers to them.

// Payload is the body of a message: {"type", "timestamp", "data"}.
type Payload struct {
	Type Topic `json:"type"`
	// Timestamp is when the decision that caused it was written.
	Timestamp PayloadTime `json:"timestamp"`
	Data      any         `json:"data"`
}

// PayloadTime renders a time as RFC 3339 in UTC with microseconds, the
// precision PostgreSQL keeps: 2027-01-01T10:00:00.000000Z.
type PayloadTime time.Time

// MarshalJSON implements json.Marshaler.
func (t PayloadTime) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format("2006-01-02T15:04:05.000000Z") + `"`), nil
}

// PeriodTime renders a time as RFC 3339 with its UTC offset and as many
// fractional digits as it has: 2027-02-01T10:00:00+00:00.
type PeriodTime time.Time

// MarshalJSON implements json.Marshaler.
func (t PeriodTime) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format("2006-01-02T15:04:05.999999-07:00") + `"`), nil
}

// Price is an amount of a currency in its minor units, a decimal string
// (minor units of some orders exceed what a JSON number holds exactly).
type Price struct {
	Currency   string `json:"currency"`
	MinorUnits string `json:"minor_units"`
}

// PriceOf is m as a Price.
func PriceOf(m Money) Price {
	return Price{Currency: m.Currency, MinorUnits: strconv.FormatInt(m.MinorUnits, 10)}
}

// OrderRef is what every message about an order says of it.
type OrderRef struct {
	OrderID         string      `json:"order_id"`
	OrgID           string      `json:"org_id"`
	Environment     Environment `json:"environment"`
	MerchantOrderID string      `json:"merchant_order_id"`
}

// OrderEventData is the data of an order event (order.fulfilled,
// order.refunded, order.on_hold): the order, the state the decision left
// it in, and its total.
type OrderEventData struct {
	OrderRef
	State State `json:"state"`
	Total Price `json:"total"`
}

// LineRequestData is the data of a fulfillment.requested message:
// the order and the external line to fulfil.
type LineRequestData struct {
	OrderRef
	Line RequestedLine `json:"line"`
}

// RequestedLine is an external line as its destination is asked to
// fulfil it.
type RequestedLine struct {
	LineNo    int    `json:"line_no"`
	SKU       string `json:"sku"`
	Quantity  int    `json:"quantity"`
	UnitPrice Price  `json:"unit_price"`
}

// SubscriptionEventData is the data of a subscription event
// (subscription.renewed, subscription.past_due, subscription.access_ended):
// the subscription as the decision left it.
type SubscriptionEventData struct {
	SubscriptionID         string            `json:"subscription_id"`
	OrgID                  string            `json:"org_id"`
	Environment            Environment       `json:"environment"`
	Provider               Provider          `json:"provider"`
	ProviderSubscriptionID string            `json:"provider_subscription_id"`
	CustomerRef            string            `json:"customer_ref"`
	PlanID                 string            `json:"plan_id"`
	State                  SubscriptionState `json:"state"`
	Periods                int               `json:"periods"`
	// PeriodEnd is when the last paid period ends; null before any.
	PeriodEnd *PeriodTime `json:"period_end"`
}

// OrderEventBody is the body of the order event topic of order o (as o's
// decision left it), at.
func OrderEventBody(topic Topic, o OrderRef, state State, total Money, at time.Time) Payload {
	return Payload{Type: topic, Timestamp: PayloadTime(at), Data: OrderEventData{OrderRef: o, State: state, Total: PriceOf(total)}}
}

// LineRequestBody is the body of the fulfillment.requested message of
// line l of order o, at.
func LineRequestBody(o OrderRef, l ExternalLine, at time.Time) Payload {
	return Payload{Type: TopicFulfillmentRequested, Timestamp: PayloadTime(at), Data: LineRequestData{OrderRef: o,
		Line: RequestedLine{LineNo: l.LineNo, SKU: l.SKU, Quantity: l.Quantity, UnitPrice: PriceOf(l.UnitPrice)}}}
}

// SubscriptionEventBody is the body of the subscription event topic of rec
// (as its decision left it), at.
func SubscriptionEventBody(topic Topic, rec *SubscriptionRecord, at time.Time) Payload {
	d := SubscriptionEventData{SubscriptionID: rec.ID, OrgID: rec.OrgID, Environment: rec.Environment,
		Provider: rec.Provider, ProviderSubscriptionID: rec.ProviderSubscriptionID, CustomerRef: rec.CustomerRef,
		PlanID: rec.PlanID, State: rec.State, Periods: rec.Periods}
	if !rec.PeriodEnd.IsZero() {
		end := PeriodTime(rec.PeriodEnd)
		d.PeriodEnd = &end
	}
	return Payload{Type: topic, Timestamp: PayloadTime(at), Data: d}
}

// Render is p as JSON.
func (p Payload) Render() (string, error) {
	b, err := json.Marshal(p)
	return string(b), err
}

// ExternalLine is an order line fulfilled by another service: the
// destination it is requested from.
type ExternalLine struct {
	LineNo      int
	SKU         string
	Quantity    int
	UnitPrice   Money
	Destination string
}
