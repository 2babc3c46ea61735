package fulfillment

// Page size bounds for listings.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// OrderFilter selects orders. Empty fields match everything.
type OrderFilter struct {
	// VisibleOrgs restricts the result to these orgs; nil means every org.
	// It comes from the caller's credentials, never from the request.
	VisibleOrgs     []string
	OrgID           string
	Environment     Environment
	State           State
	MerchantOrderID string
	// CustomerRef keeps orders with a line for this customer (the account
	// a balance credit credits, the customer a subscription line pays for).
	CustomerRef string
	// PaymentRef keeps orders with a payment attempt of this provider
	// reference (an invoice, payment or checkout session id).
	PaymentRef string
}

// Validate checks the request-supplied filter values.
func (f OrderFilter) Validate() error {
	var vs violations
	if f.OrgID != "" {
		checkOrgID(&vs, "org_id", f.OrgID)
	}
	filterEnvironment(&vs, f.Environment)
	if f.State != "" && !f.State.Valid() {
		vs.add("state", "must be a known order state such as %q or %q", StatePendingPayment, StateFulfilled)
	}
	checkText(&vs, "merchant_order_id", f.MerchantOrderID, false)
	checkText(&vs, "customer_ref", f.CustomerRef, false)
	checkText(&vs, "payment_ref", f.PaymentRef, false)
	return vs.err()
}

// PageSize turns a requested page size into the one used: 0 means the
// default, and nothing exceeds the maximum. A negative size is an error.
func PageSize(requested int32) (int, error) {
	switch {
	case requested < 0:
		var vs violations
		vs.add("page_size", "must not be negative")
		return 0, vs.err()
	case requested == 0:
		return DefaultPageSize, nil
	case requested > MaxPageSize:
		return MaxPageSize, nil
	}
	return int(requested), nil
}
