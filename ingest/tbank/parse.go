package tbank

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
)

// Currency is the currency of a terminal's amounts, which count its minor
// units (kopecks).
const Currency = "RUB"

// Names of the T-Bank references kept with an event (ProviderEvent.Refs).
const (
	// RefErrorCode is the bank's ErrorCode, when it is not "0".
	RefErrorCode = "error_code"
)

// notification is a T-Bank notification body as this service reads it. The
// card members (Pan, ExpDate, CardId), DATA and Receipt are deliberately
// not modeled: card data is never read or kept outside the raw body, and
// what the payer or merchant put in DATA never decides anything. Members
// the bank adds later are accepted and ignored.
type notification struct {
	TerminalKey string `json:"TerminalKey"`
	// OrderID is the id the service gave the payment attempt at Init.
	OrderID string `json:"OrderId"`
	// Success is false when the operation the notification reports failed.
	Success *bool  `json:"Success"`
	Status  string `json:"Status"`
	// PaymentID is the bank's id of the payment: a number, or a string of
	// its digits.
	PaymentID json.RawMessage `json:"PaymentId"`
	// ErrorCode is "0" when the operation succeeded.
	ErrorCode string `json:"ErrorCode"`
	// Amount is in kopecks: a whole number.
	Amount   json.RawMessage `json:"Amount"`
	RebillID json.RawMessage `json:"RebillId"`
}

// Parse validates a verified notification body and normalizes it for the
// endpoint ep, whose terminal is terminalKey. Provider, endpoint, org and
// environment come from ep. The bank sends no time of the event:
// OccurredAt stays zero (unknown), and the time of receipt is what is
// recorded.
//
// The event id is TerminalKey:PaymentId:Status, followed by :Amount for the
// partial statuses, whose repeats differ by amount only. OrderId becomes
// the checkout session (the attempt the service started), PaymentId the
// payment and the attempt reference.
//
// Status decides the kind (see kinds); a notification the bank marks as
// failed (Success false, or an ErrorCode other than "0") never confirms or
// refunds: such a CONFIRMED, REFUNDED or PARTIAL_REFUNDED is stored with
// no effect, its ErrorCode kept in Refs.
//
// It returns an error wrapping ingest.ErrInvalidPayload when the body is not
// a valid notification, and one wrapping ingest.ErrAccountMismatch when it
// names another terminal than terminalKey. Error messages never quote the
// body.
func Parse(ep fulfillment.Endpoint, terminalKey string, body []byte) (fulfillment.ProviderEvent, error) {
	var n notification
	if err := ingest.DecodePayload(body, &n, typeMessage); err != nil {
		return fulfillment.ProviderEvent{}, err
	}
	if n.TerminalKey == "" {
		return fulfillment.ProviderEvent{}, ingest.Invalid("TerminalKey is required")
	}
	if n.TerminalKey != terminalKey {
		return fulfillment.ProviderEvent{}, fmt.Errorf("%w: the notification's TerminalKey is not the terminal of endpoint %q",
			ingest.ErrAccountMismatch, ep.ID)
	}

	var bad problems
	bad.Text("Status", n.Status, fulfillment.RuleEventType, true)
	if strings.Contains(n.Status, ":") {
		bad.Add("Status must not contain a colon")
	}
	bad.Text("OrderId", n.OrderID, fulfillment.RuleRef, true)
	bad.Text("ErrorCode", n.ErrorCode, fulfillment.RuleRef, false)
	paymentID := bad.id("PaymentId", n.PaymentID, true)
	rebillID := bad.id("RebillId", n.RebillID, false)
	amount, kopecks := bad.amount(n.Amount)
	if absent(n.Amount) && amountRequired[n.Status] {
		bad.Add("Amount is required for " + n.Status)
	}
	if err := bad.Err(); err != nil {
		return fulfillment.ProviderEvent{}, err
	}

	failed := (n.Success != nil && !*n.Success) || (n.ErrorCode != "" && n.ErrorCode != "0")
	refs := map[string]string{}
	if n.ErrorCode != "" && n.ErrorCode != "0" {
		refs[RefErrorCode] = n.ErrorCode
	}
	return event(ep, "", paymentState{terminalKey: n.TerminalKey, orderID: n.OrderID, paymentID: paymentID,
		status: n.Status, amount: amount, kopecks: kopecks, failed: failed, rebillID: rebillID}, refs)
}

// paymentState is what the bank says of a payment, in a notification or a
// GetState answer.
type paymentState struct {
	terminalKey, orderID, paymentID, status string
	amount                                  fulfillment.Amount
	kopecks                                 string // the amount as sent, "" for none
	failed                                  bool   // Success false or a non-zero ErrorCode
	// rebillID names the card binding a recurrent payment is charged
	// again with: the subscription its charges renew.
	rebillID string
}

// event is the normalized event of p for endpoint ep, its id
// TerminalKey:PaymentId:Status (plus the amount of a partial status) after
// prefix.
func event(ep fulfillment.Endpoint, prefix string, p paymentState, refs map[string]string) (fulfillment.ProviderEvent, error) {
	eventID := prefix + p.terminalKey + ":" + p.paymentID + ":" + p.status
	if partial[p.status] {
		eventID += ":" + p.kopecks
	}
	if fulfillment.RuleEventID.Check(eventID) != nil {
		return fulfillment.ProviderEvent{}, ingest.Invalid(fmt.Sprintf(
			"the event id TerminalKey:PaymentId:Status[:Amount] must be at most %d bytes long", fulfillment.MaxIDLen))
	}
	if len(refs) == 0 {
		refs = nil
	}
	payment := fulfillment.PaymentInfo{
		PaymentID:         p.paymentID,
		CheckoutSessionID: p.orderID,
		SubscriptionID:    p.rebillID,
		Amount:            p.amount,
	}
	payment.AttemptRef = payment.Attempt()
	return fulfillment.ProviderEvent{
		Provider:    ep.Provider,
		EndpointID:  ep.ID,
		OrgID:       ep.OrgID,
		Environment: ep.Environment,
		EventID:     eventID,
		Type:        p.status,
		Kind:        kindOf(p.status, p.failed),
		Payment:     payment,
		Refs:        refs,
	}, nil
}

// problems collects what is wrong with a notification or an answer of the
// bank, with the bank's own kinds of members.
type problems struct{ ingest.Problems }

// id reads a bank id written as a number or as a string of its digits, and
// returns its digits ("" when absent or null). Both spellings of one id give
// the same digits: a string with leading zeros, which a number cannot have,
// is refused.
func (ps *problems) id(name string, raw json.RawMessage, required bool) string {
	var digits string
	switch {
	case absent(raw):
		if required {
			ps.Add(name + " is required")
		}
		return ""
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &digits); err != nil || digits == "" {
			ps.Add(name + " must be a number or a string of digits")
			return ""
		}
	default:
		digits = string(raw)
	}
	switch {
	case !allDigits(digits) || (len(digits) > 1 && digits[0] == '0'):
		ps.Add(name + " must be a whole number: digits only, no sign, fraction, exponent or leading zero")
	case fulfillment.RuleRef.Check(digits) != nil:
		ps.Add(fmt.Sprintf("%s must have at most %d digits", name, fulfillment.MaxIDLen))
	default:
		return digits
	}
	return ""
}

// amount reads Amount, a whole number of kopecks written as a JSON number,
// and returns it with its digits (a zero Amount and "" when absent or
// null). The bounds are the domain's decimal bounds.
func (ps *problems) amount(raw json.RawMessage) (amount fulfillment.Amount, digits string) {
	lit := string(raw)
	switch {
	case absent(raw):
		return fulfillment.Amount{}, ""
	case raw[0] == '"':
		ps.Add("Amount must be a number of kopecks, not a string")
		return fulfillment.Amount{}, ""
	case raw[0] == '-':
		ps.Add("Amount must not be negative")
		return fulfillment.Amount{}, ""
	case !allDigits(lit):
		ps.Add("Amount must be a whole number of kopecks: digits only, no fraction or exponent")
		return fulfillment.Amount{}, ""
	}
	d, err := fulfillment.ParseDecimal(lit)
	if err != nil {
		ps.Add("Amount must be a whole number of kopecks (" + err.Error() + ")")
		return fulfillment.Amount{}, ""
	}
	return fulfillment.Amount{Value: d, Unit: fulfillment.CurrencyUnit(Currency)}, lit
}

// absent reports whether a member read raw is absent or null.
func absent(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// typeMessage says what a member of the wrong JSON type should be.
func typeMessage(name string) string {
	switch name {
	case "Success":
		return "Success must be true or false"
	case "":
		return "the body must be a JSON object"
	}
	return name + " must be a string"
}
