package fulfillment

// OrderField names an order identifier an event may carry.
type OrderField string

// Order identifiers, as their columns are named.
const (
	ByMerchantOrderID   OrderField = "merchant_order_id"
	ByCheckoutSessionID OrderField = "checkout_session_id"
)

// OrderKey names an order by one of its identifiers within a tenant.
type OrderKey struct {
	OrgID       string
	Environment Environment
	Field       OrderField
	Value       string
}

// OrderKeys lists the keys the event may name its order by, in order of
// preference: its merchant order id, then its checkout session. A paylink
// never names an order (one link serves many payments), nor does an
// invoice or payment id alone.
func (ev ProviderEvent) OrderKeys() []OrderKey {
	var keys []OrderKey
	for _, k := range []struct {
		field OrderField
		value string
	}{
		{ByMerchantOrderID, ev.Payment.MerchantOrderID},
		{ByCheckoutSessionID, ev.Payment.CheckoutSessionID},
	} {
		if k.value != "" {
			keys = append(keys, OrderKey{OrgID: ev.OrgID, Environment: ev.Environment, Field: k.field, Value: k.value})
		}
	}
	return keys
}

// MatchOrder returns the order of the first of ev's keys that find knows:
// the event's order, or false when no order matches it.
func MatchOrder[T any](ev ProviderEvent, find func(OrderKey) (T, bool)) (T, bool) {
	for _, k := range ev.OrderKeys() {
		if o, ok := find(k); ok {
			return o, true
		}
	}
	var none T
	return none, false
}
