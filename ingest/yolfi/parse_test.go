package yolfi

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
)

// vectorJSON is the test vector's body, inlined so table cases can be built
// from it without reading files.
const vectorJSON = `{"id":"evt_01JDV6Q8W3ZK7M2N4P5R6S7T8V","type":"payment.confirmed","livemode":true,"orgId":"org_7Hc2Lq","createdAt":"2026-11-29T10:15:30Z","data":{"paymentId":"pay_5Xk9Qe","invoiceId":"inv_3Mz8Rt","checkoutSessionId":"cs_2Lp7Wn","merchantOrderId":"ORD-1001","amount":"25.000000","token":"USDT","network":"TRON","txHash":"a3f1c9e07b","customer":{"clientReferenceId":"user_42"}}}`

// del removes a member in edit.
type deleteMarker struct{}

var del = deleteMarker{}

// edit returns the vector with top-level members set (or removed with del)
// from top, and members of data from data.
func edit(top, data map[string]any) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(vectorJSON), &m); err != nil {
		panic(err)
	}
	d := m["data"].(map[string]any)
	apply := func(dst, src map[string]any) {
		for k, v := range src {
			if v == del {
				delete(dst, k)
			} else {
				dst[k] = v
			}
		}
	}
	apply(m, top)
	apply(d, data)
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func withData(data map[string]any) string { return edit(nil, data) }

func withTop(top map[string]any) string { return edit(top, nil) }

// minimal is an event of type t with nothing else.
func minimal(t string, data map[string]any) string {
	m := map[string]any{"id": "evt_min", "type": t}
	if data != nil {
		m["data"] = data
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func TestParse(t *testing.T) {
	t.Parallel()
	nested := strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70)
	cases := []struct {
		name    string
		body    string
		header  http.Header           // nil: X-Yolfi-Event-ID with the body's id
		ep      *fulfillment.Endpoint // nil: vectorEndpoint
		wantErr error                 // nil: accepted
		wantMsg string                // part of the error message
		check   func(t *testing.T, ev fulfillment.ProviderEvent)
	}{
		// Accepted events.
		{name: "vector", body: vectorJSON, check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.Kind != fulfillment.EventPaymentConfirmed || ev.TestMode || ev.Payment.AttemptRef != "inv_3Mz8Rt" {
				t.Errorf("event %+v", ev)
			}
		}},
		{name: "matching event id header", body: vectorJSON, header: http.Header{"X-Yolfi-Event-Id": {"evt_01JDV6Q8W3ZK7M2N4P5R6S7T8V"}}},
		// The header is a convenience copy, which Yolfi may leave out.
		{name: "no event id header", body: vectorJSON, header: http.Header{}},
		{name: "invoice.created", body: minimal("invoice.created", map[string]any{"invoiceId": "inv_1"}), check: kindIs(fulfillment.EventAttemptCreated)},
		{name: "invoice.overdue", body: minimal("invoice.overdue", map[string]any{"invoiceId": "inv_1"}), check: kindIs(fulfillment.EventAttemptExpired)},
		{name: "invoice.cancelled", body: minimal("invoice.cancelled", map[string]any{"invoiceId": "inv_1"}), check: kindIs(fulfillment.EventAttemptCancelled)},
		{name: "subscription.overdue", body: minimal("subscription.overdue", map[string]any{"subscriptionId": "sub_1",
			"customer": map[string]any{"clientReferenceId": "user_42", "email": "a@example.com"}, "metadata": map[string]any{"note": "x"}}),
			check: func(t *testing.T, ev fulfillment.ProviderEvent) {
				kindIs(fulfillment.EventSubscriptionOverdue)(t, ev)
				if ev.Payment.SubscriptionID != "sub_1" || ev.Payment.CustomerRef != "user_42" {
					t.Errorf("SubscriptionID, CustomerRef = %q, %q", ev.Payment.SubscriptionID, ev.Payment.CustomerRef)
				}
				// Only the merchant's reference of the customer is read.
				if s := eventString(ev); strings.Contains(s, "example.com") || strings.Contains(s, "note") {
					t.Errorf("customer data or metadata reached the event: %s", s)
				}
			}},
		{name: "subscription.cancelled", body: minimal("subscription.cancelled", map[string]any{"subscriptionId": "sub_1"}), check: kindIs(fulfillment.EventSubscriptionCancelled)},
		{name: "subscription.cancelled without its subscription", body: minimal("subscription.cancelled", nil), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.subscriptionId is required"},
		{name: "unknown type is other", body: minimal("payout.sent", nil), check: kindIs(fulfillment.EventOther)},
		// A type this adapter does not know may shape its data otherwise:
		// stored and ignored, its envelope read.
		{name: "unknown type with data of other shapes", body: minimal("payout.sent", map[string]any{"amount": 25, "customer": "c_1", "paymentId": []int{1}}),
			check: func(t *testing.T, ev fulfillment.ProviderEvent) {
				kindIs(fulfillment.EventOther)(t, ev)
				if ev.EventID == "" || ev.Type != "payout.sent" || ev.Payment.PaymentID != "" {
					t.Errorf("event %+v", ev)
				}
			}},
		{name: "known type with data of another shape", body: minimal("payment.confirmed", map[string]any{"amount": 25}),
			wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount must be a decimal string"},
		{name: "type that only looks like a known one", body: minimal("Payment.Confirmed", nil), check: kindIs(fulfillment.EventOther)},
		{name: "no data at all", body: `{"id":"evt_1","type":"invoice.created"}`, check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.Payment != (fulfillment.PaymentInfo{}) || !ev.OccurredAt.IsZero() || ev.TestMode {
				t.Errorf("event %+v", ev)
			}
		}},
		{name: "null data", body: `{"id":"evt_1","type":"invoice.created","data":null}`},
		{name: "livemode false is test mode", body: withTop(map[string]any{"livemode": false}), check: testMode(true)},
		{name: "livemode absent is live", body: withTop(map[string]any{"livemode": del}), check: testMode(false)},
		{name: "livemode null is live", body: withTop(map[string]any{"livemode": nil}), check: testMode(false)},
		{name: "evt_test_ id is test mode even when live", body: withTop(map[string]any{"id": "evt_test_1", "livemode": true}), check: testMode(true)},
		{name: "evt_test_ id without livemode", body: withTop(map[string]any{"id": "evt_test_1", "livemode": del}), check: testMode(true)},
		{name: "test event reaching a live endpoint is still parsed", body: withTop(map[string]any{"livemode": false}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.Environment != fulfillment.EnvLive || !ev.TestMode {
				t.Errorf("Environment %q TestMode %v", ev.Environment, ev.TestMode)
			}
		}},
		{name: "createdAt absent", body: withTop(map[string]any{"createdAt": del}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if !ev.OccurredAt.IsZero() {
				t.Errorf("OccurredAt = %v", ev.OccurredAt)
			}
		}},
		{name: "createdAt with offset and fraction", body: withTop(map[string]any{"createdAt": "2026-11-29T13:15:30.25+03:00"}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			want := time.Date(2026, 11, 29, 10, 15, 30, 250e6, time.UTC)
			if !ev.OccurredAt.Equal(want) || ev.OccurredAt.Location() != time.UTC {
				t.Errorf("OccurredAt = %v, want %v", ev.OccurredAt, want)
			}
		}},
		{name: "orgId absent", body: withTop(map[string]any{"orgId": del})},
		{name: "orgId empty", body: withTop(map[string]any{"orgId": ""})},
		{name: "attempt ref falls back to payment id", body: withData(map[string]any{"invoiceId": del}), check: refIs("pay_5Xk9Qe")},
		{name: "attempt ref falls back to checkout session", body: withData(map[string]any{"invoiceId": del, "paymentId": del}), check: refIs("cs_2Lp7Wn")},
		{name: "confirmed with only merchant order id", body: withData(map[string]any{"invoiceId": del, "paymentId": del, "checkoutSessionId": del}), check: refIs("")},
		{name: "confirmed with only checkout session, no paylink", body: withData(map[string]any{"invoiceId": del, "paymentId": del, "merchantOrderId": del}), check: refIs("cs_2Lp7Wn")},
		{name: "amount zero", body: withData(map[string]any{"amount": "0"}), check: amountIs("0")},
		{name: "amount without fraction", body: withData(map[string]any{"amount": "25"}), check: amountIs("25")},
		{name: "amount at its limits", body: withData(map[string]any{"amount": strings.Repeat("9", 20) + "." + strings.Repeat("9", 18)}), check: amountIs(strings.Repeat("9", 20) + "." + strings.Repeat("9", 18))},
		{name: "amount with leading zeros", body: withData(map[string]any{"amount": "007.50"}), check: amountIs("7.5")},
		{name: "no amount on invoice.created", body: minimal("invoice.created", map[string]any{"invoiceId": "inv_1"}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.Payment.Amount.Known() {
				t.Errorf("Amount %s", ev.Payment.Amount)
			}
		}},
		{name: "unknown members are accepted", body: `{"id":"evt_1","type":"payment.confirmed","apiVersion":"2027-01-01","extra":[1,{"x":null}],"data":{"invoiceId":"inv_1","amount":"1.5","token":"USDT","network":"TRON","fee":{"amount":"-3"},"memo":"x"}}`},
		{name: "payer metadata and customer are ignored", body: withData(map[string]any{"metadata": map[string]any{"orgId": "org_evil", "merchantOrderId": "ORD-EVIL", "amount": "-1"}, "customer": map[string]any{"email": "a@example.com"}}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			s := eventString(ev)
			for _, leak := range []string{"org_evil", "ORD-EVIL", "a@example.com", "user_42"} {
				if strings.Contains(s, leak) {
					t.Errorf("event carries payer data %q: %s", leak, s)
				}
			}
			if ev.OrgID != "org_7Hc2Lq" || ev.Payment.MerchantOrderID != "ORD-1001" {
				t.Errorf("event %s", s)
			}
		}},
		{name: "the same member name in different objects", body: withData(map[string]any{"metadata": map[string]any{"id": "x", "data": map[string]any{"id": "y"}}})},
		{name: "id of 128 bytes", body: withTop(map[string]any{"id": "evt_" + strings.Repeat("a", 124)})},
		{name: "type of 64 bytes", body: minimal(strings.Repeat("t", 64), nil), check: kindIs(fulfillment.EventOther)},
		{name: "token of 16 and network of 32", body: withData(map[string]any{"token": strings.Repeat("T", 16), "network": strings.Repeat("N", 32)})},
		{name: "unicode merchant order id", body: withData(map[string]any{"merchantOrderId": "Заказ №1001"})},
		{name: "merchant order id of 128 bytes", body: withData(map[string]any{"merchantOrderId": strings.Repeat("m", 128)})},
		{name: "escaped strings", body: `{"id":"evt_\u0031","type":"payment.confirmed","data":{"invoiceId":"inv\/1","amount":"\u0032","token":"USDT","network":"TRON"}}`, check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.EventID != "evt_1" || ev.Payment.InvoiceID != "inv/1" || !ev.Payment.Amount.Value.Equal(decimal.NewFromInt(2)) {
				t.Errorf("event %s", eventString(ev))
			}
		}},
		{name: "whitespace around the object", body: " \n\t" + vectorJSON + "\r\n "},

		// Not JSON, or not one object.
		{name: "empty body", body: "", wantErr: ingest.ErrInvalidPayload, wantMsg: "empty"},
		{name: "not JSON", body: "id=evt_1&type=payment.confirmed", wantErr: ingest.ErrInvalidPayload, wantMsg: "not valid JSON"},
		{name: "truncated", body: vectorJSON[:len(vectorJSON)-1], wantErr: ingest.ErrInvalidPayload, wantMsg: "before the JSON object is complete"},
		{name: "trailing comma", body: `{"id":"evt_1","type":"x",}`, wantErr: ingest.ErrInvalidPayload, wantMsg: "not valid JSON"},
		{name: "trailing garbage", body: vectorJSON + "x", wantErr: ingest.ErrInvalidPayload, wantMsg: "more data after the JSON object"},
		{name: "two objects", body: vectorJSON + vectorJSON, wantErr: ingest.ErrInvalidPayload, wantMsg: "more data after the JSON object"},
		{name: "top-level array", body: "[" + vectorJSON + "]", wantErr: ingest.ErrInvalidPayload, wantMsg: "must be a JSON object"},
		{name: "top-level string", body: `"evt_1"`, wantErr: ingest.ErrInvalidPayload, wantMsg: "must be a JSON object"},
		{name: "top-level null", body: `null`, wantErr: ingest.ErrInvalidPayload, wantMsg: "must be a JSON object"},
		{name: "top-level number", body: `42`, wantErr: ingest.ErrInvalidPayload, wantMsg: "must be a JSON object"},
		{name: "invalid UTF-8", body: `{"id":"evt_1","type":"x","data":{"merchantOrderId":"` + "\xff\xfe" + `"}}`, wantErr: ingest.ErrInvalidPayload, wantMsg: "UTF-8"},
		{name: "duplicate top-level member", body: `{"id":"evt_1","type":"invoice.created","id":"evt_2"}`, wantErr: ingest.ErrInvalidPayload, wantMsg: "appears twice"},
		{name: "duplicate data member", body: `{"id":"evt_1","type":"payment.confirmed","data":{"invoiceId":"inv_1","amount":"1","amount":"1000","token":"USDT","network":"TRON"}}`, wantErr: ingest.ErrInvalidPayload, wantMsg: "appears twice"},
		{name: "duplicate nested member", body: `{"id":"evt_1","type":"x","data":{"metadata":{"k":1,"k":2}}}`, wantErr: ingest.ErrInvalidPayload, wantMsg: "appears twice"},
		{name: "case variant of id", body: `{"ID":"evt_1","type":"x"}`, wantErr: ingest.ErrInvalidPayload, wantMsg: `spelled exactly "id"`},
		{name: "case variant of orgId next to orgId", body: `{"id":"evt_1","type":"x","orgId":"org_7Hc2Lq","ORGID":"org_other"}`, wantErr: ingest.ErrInvalidPayload, wantMsg: `spelled exactly "orgId"`},
		{name: "case variant of data.amount", body: `{"id":"evt_1","type":"payment.confirmed","data":{"Amount":"1"}}`, wantErr: ingest.ErrInvalidPayload, wantMsg: `spelled exactly "data.amount"`},
		{name: "nesting too deep", body: `{"id":"evt_1","type":"x","data":{"metadata":` + nested + `}}`, wantErr: ingest.ErrInvalidPayload, wantMsg: "nests deeper"},

		// Envelope fields.
		{name: "id missing", body: withTop(map[string]any{"id": del}), wantErr: ingest.ErrInvalidPayload, wantMsg: "id is required"},
		{name: "id empty", body: withTop(map[string]any{"id": ""}), wantErr: ingest.ErrInvalidPayload, wantMsg: "id is required"},
		{name: "id null", body: withTop(map[string]any{"id": nil}), wantErr: ingest.ErrInvalidPayload, wantMsg: "id is required"},
		{name: "id not a string", body: withTop(map[string]any{"id": 12345}), wantErr: ingest.ErrInvalidPayload, wantMsg: "id must be a string"},
		{name: "id too long", body: withTop(map[string]any{"id": "evt_" + strings.Repeat("a", 125)}), wantErr: ingest.ErrInvalidPayload, wantMsg: "id must be at most 128 bytes"},
		{name: "id with a space", body: withTop(map[string]any{"id": "evt 1"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "id must be printable ASCII"},
		{name: "id with a control character", body: withTop(map[string]any{"id": "evt_1\n"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "id must be printable ASCII"},
		{name: "id not ASCII", body: withTop(map[string]any{"id": "evt_é"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "id must be printable ASCII"},
		{name: "type missing", body: withTop(map[string]any{"type": del}), wantErr: ingest.ErrInvalidPayload, wantMsg: "type is required"},
		{name: "type too long", body: minimal(strings.Repeat("t", 65), nil), wantErr: ingest.ErrInvalidPayload, wantMsg: "type must be at most 64 bytes"},
		{name: "type not a string", body: withTop(map[string]any{"type": []string{"payment.confirmed"}}), wantErr: ingest.ErrInvalidPayload, wantMsg: "type must be a string"},
		{name: "livemode as a string", body: withTop(map[string]any{"livemode": "false"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "livemode must be true or false"},
		{name: "livemode as a number", body: withTop(map[string]any{"livemode": 0}), wantErr: ingest.ErrInvalidPayload, wantMsg: "livemode must be true or false"},
		{name: "createdAt not RFC 3339", body: withTop(map[string]any{"createdAt": "2026-11-29 10:15:30"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "createdAt must be an RFC 3339 time"},
		{name: "createdAt as a number", body: withTop(map[string]any{"createdAt": 1764411330}), wantErr: ingest.ErrInvalidPayload, wantMsg: "createdAt must be a string"},
		{name: "createdAt out of range", body: withTop(map[string]any{"createdAt": "2026-13-40T10:15:30Z"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "createdAt must be an RFC 3339 time"},
		{name: "data not an object", body: withTop(map[string]any{"data": "inv_1"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data must be an object"},
		{name: "data an array", body: withTop(map[string]any{"data": []any{}}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data must be an object"},
		{name: "data.customer a string", body: withData(map[string]any{"customer": "user_7"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.customer must be an object"},
		{name: "several problems are listed together", body: `{"type":"payment.confirmed","createdAt":"now"}`, wantErr: ingest.ErrInvalidPayload, wantMsg: "id is required; createdAt must be"},

		// The event id header.
		{name: "event id header differs", body: vectorJSON, header: http.Header{"X-Yolfi-Event-Id": {"evt_forged_123"}}, wantErr: ingest.ErrInvalidPayload, wantMsg: "X-Yolfi-Event-ID header does not match"},
		{name: "event id header empty", body: vectorJSON, header: http.Header{"X-Yolfi-Event-Id": {""}}, wantErr: ingest.ErrInvalidPayload, wantMsg: "X-Yolfi-Event-ID header does not match"},
		{name: "event id header twice", body: vectorJSON, header: http.Header{"X-Yolfi-Event-Id": {"evt_01JDV6Q8W3ZK7M2N4P5R6S7T8V", "evt_01JDV6Q8W3ZK7M2N4P5R6S7T8V"}}, wantErr: ingest.ErrInvalidPayload, wantMsg: "more than one X-Yolfi-Event-ID"},
		{name: "event id header differs only in case", body: vectorJSON, header: http.Header{"X-Yolfi-Event-Id": {"EVT_01JDV6Q8W3ZK7M2N4P5R6S7T8V"}}, wantErr: ingest.ErrInvalidPayload, wantMsg: "does not match"},

		// Org.
		{name: "another org", body: withTop(map[string]any{"orgId": "org_other"}), wantErr: ingest.ErrOrgMismatch, wantMsg: "not the org of endpoint"},
		{name: "org differing only in case", body: withTop(map[string]any{"orgId": "ORG_7HC2LQ"}), wantErr: ingest.ErrOrgMismatch},
		{name: "org named on an endpoint without org", body: vectorJSON, ep: &fulfillment.Endpoint{ID: "x", Provider: fulfillment.ProviderYolfi, Environment: fulfillment.EnvLive}, wantErr: ingest.ErrOrgMismatch},
		{name: "org of an unknown type's event", body: `{"id":"evt_1","type":"subscription.overdue","orgId":"org_other"}`, wantErr: ingest.ErrOrgMismatch},
		{name: "orgId not a string", body: withTop(map[string]any{"orgId": 7}), wantErr: ingest.ErrInvalidPayload, wantMsg: "orgId must be a string"},

		// Amount.
		{name: "amount as a number", body: withData(map[string]any{"amount": 25.0}), wantErr: ingest.ErrInvalidPayload, wantMsg: `data.amount must be a decimal string such as "25.000000"`},
		{name: "amount empty on payment.confirmed", body: withData(map[string]any{"amount": ""}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount is required for payment.confirmed"},
		{name: "amount negative", body: withData(map[string]any{"amount": "-25.000000"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "no sign"},
		{name: "amount with plus sign", body: withData(map[string]any{"amount": "+25"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount must be a plain decimal"},
		{name: "amount with exponent", body: withData(map[string]any{"amount": "2.5e1"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "exponent"},
		{name: "amount with spaces", body: withData(map[string]any{"amount": " 25"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount"},
		{name: "amount with trailing space", body: withData(map[string]any{"amount": "25 "}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount"},
		{name: "amount with thousands separator", body: withData(map[string]any{"amount": "1,000.00"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount"},
		{name: "amount with decimal comma", body: withData(map[string]any{"amount": "25,5"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount"},
		{name: "amount with two points", body: withData(map[string]any{"amount": "1.2.3"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount"},
		{name: "amount starting with a point", body: withData(map[string]any{"amount": ".5"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "a digit is needed before the decimal point"},
		{name: "amount ending with a point", body: withData(map[string]any{"amount": "5."}), wantErr: ingest.ErrInvalidPayload, wantMsg: "a digit is needed after the decimal point"},
		{name: "amount just a point", body: withData(map[string]any{"amount": "."}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount"},
		{name: "amount hexadecimal", body: withData(map[string]any{"amount": "0x19"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount"},
		{name: "amount NaN", body: withData(map[string]any{"amount": "NaN"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount"},
		{name: "amount in non-ASCII digits", body: withData(map[string]any{"amount": "٢٥"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount"},
		{name: "amount with 21 integer digits", body: withData(map[string]any{"amount": strings.Repeat("1", 21)}), wantErr: ingest.ErrInvalidPayload, wantMsg: "at most 20 digits are allowed before"},
		{name: "amount with 19 fraction digits", body: withData(map[string]any{"amount": "1." + strings.Repeat("1", 19)}), wantErr: ingest.ErrInvalidPayload, wantMsg: "at most 18 digits are allowed after"},
		{name: "bad amount on a non-payment event", body: minimal("invoice.created", map[string]any{"invoiceId": "inv_1", "amount": "-1"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount"},

		// Other data fields.
		{name: "token too long", body: withData(map[string]any{"token": strings.Repeat("T", 17)}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.token must be at most 16 bytes"},
		{name: "token with a space", body: withData(map[string]any{"token": "US DT"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.token must be printable ASCII"},
		{name: "token not a string", body: withData(map[string]any{"token": 1}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.token must be a string"},
		{name: "network too long", body: withData(map[string]any{"network": strings.Repeat("N", 33)}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.network must be at most 32 bytes"},
		{name: "merchant order id too long", body: withData(map[string]any{"merchantOrderId": strings.Repeat("m", 129)}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.merchantOrderId must be at most 128 bytes"},
		{name: "merchant order id with a newline", body: withData(map[string]any{"merchantOrderId": "ORD\n1001"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.merchantOrderId must not contain control"},
		{name: "invoice id with a zero-width space", body: withData(map[string]any{"invoiceId": "inv\u200b1"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.invoiceId must not contain"},
		{name: "payment id too long", body: withData(map[string]any{"paymentId": strings.Repeat("p", 129)}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.paymentId"},
		{name: "checkout session id too long", body: withData(map[string]any{"checkoutSessionId": strings.Repeat("c", 129)}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.checkoutSessionId"},
		{name: "paylink id too long", body: withData(map[string]any{"paylinkId": strings.Repeat("l", 129)}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.paylinkId"},
		{name: "subscription id too long", body: withData(map[string]any{"subscriptionId": strings.Repeat("s", 129)}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.subscriptionId"},
		{name: "tx hash too long", body: withData(map[string]any{"txHash": strings.Repeat("0", 129)}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.txHash"},
		{name: "orgId too long", body: withTop(map[string]any{"orgId": strings.Repeat("o", 129)}), wantErr: ingest.ErrInvalidPayload, wantMsg: "orgId must be at most 128 bytes"},

		// What payment.confirmed must carry.
		{name: "confirmed without amount", body: withData(map[string]any{"amount": del}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount is required for payment.confirmed"},
		{name: "confirmed without token", body: withData(map[string]any{"token": del}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.token is required for payment.confirmed"},
		{name: "confirmed without network", body: withData(map[string]any{"network": del}), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.network is required for payment.confirmed"},
		{name: "confirmed with no order or attempt reference", body: withData(map[string]any{"invoiceId": del, "paymentId": del, "checkoutSessionId": del, "merchantOrderId": del}), wantErr: ingest.ErrInvalidPayload, wantMsg: "needs at least one of data.merchantOrderId"},
		{name: "confirmed with only a paylink", body: withData(map[string]any{"invoiceId": del, "paymentId": del, "checkoutSessionId": del, "merchantOrderId": del, "paylinkId": "pl_1"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "needs at least one of"},
		{name: "confirmed with only a tx hash", body: minimal("payment.confirmed", map[string]any{"txHash": "0xabc", "amount": "1", "token": "USDT", "network": "TRON"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "needs at least one of"},
		{name: "confirmed with no data", body: minimal("payment.confirmed", nil), wantErr: ingest.ErrInvalidPayload, wantMsg: "data.amount is required for payment.confirmed; data.token is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ep := vectorEndpoint
			if tc.ep != nil {
				ep = *tc.ep
			}
			h := tc.header
			if h == nil {
				h = http.Header{}
				var top struct {
					ID string `json:"id"`
				}
				if json.Unmarshal([]byte(tc.body), &top) == nil && top.ID != "" {
					h.Set(EventIDHeader, top.ID)
				}
			}
			ev, err := Parse(ep, h, []byte(tc.body))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				checkInvariants(t, ep, ev)
				if tc.check != nil {
					tc.check(t, ev)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Parse: %v, want an error wrapping %v", err, tc.wantErr)
			}
			for _, other := range []error{ingest.ErrInvalidPayload, ingest.ErrOrgMismatch, ingest.ErrSignature} {
				if other != tc.wantErr && errors.Is(err, other) { //nolint:errorlint // telling two sentinels apart by identity, not inspecting an error
					t.Errorf("Parse: %v also wraps %v", err, other)
				}
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("Parse: %q, want it to say %q", msg, tc.wantMsg)
			}
			// Messages never quote the payload.
			for _, leak := range []string{"evt_01JDV6Q8W3ZK7M2N4P5R6S7T8V", "ORD-1001", "org_7Hc2Lq", "org_other", "evt_forged_123", "user_42", "pay_5Xk9Qe", "US DT"} {
				if strings.Contains(msg, leak) {
					t.Errorf("Parse error %q quotes the payload (%q)", msg, leak)
				}
			}
			if !reflect.DeepEqual(ev, fulfillment.ProviderEvent{}) {
				t.Errorf("Parse returned an event with an error: %+v", ev)
			}
		})
	}
}

func kindIs(k fulfillment.EventKind) func(*testing.T, fulfillment.ProviderEvent) {
	return func(t *testing.T, ev fulfillment.ProviderEvent) {
		t.Helper()
		if ev.Kind != k {
			t.Errorf("Kind = %q, want %q", ev.Kind, k)
		}
	}
}

func testMode(want bool) func(*testing.T, fulfillment.ProviderEvent) {
	return func(t *testing.T, ev fulfillment.ProviderEvent) {
		t.Helper()
		if ev.TestMode != want {
			t.Errorf("TestMode = %v, want %v", ev.TestMode, want)
		}
	}
}

func refIs(want string) func(*testing.T, fulfillment.ProviderEvent) {
	return func(t *testing.T, ev fulfillment.ProviderEvent) {
		t.Helper()
		if ev.Payment.AttemptRef != want {
			t.Errorf("AttemptRef = %q, want %q", ev.Payment.AttemptRef, want)
		}
	}
}

func amountIs(want string) func(*testing.T, fulfillment.ProviderEvent) {
	return func(t *testing.T, ev fulfillment.ProviderEvent) {
		t.Helper()
		if !ev.Payment.Amount.Known() || !ev.Payment.Amount.Value.Equal(decimal.RequireFromString(want)) {
			t.Errorf("Amount = %s, want %s", ev.Payment.Amount, want)
		}
	}
}

// Every kind maps from exactly one place; the documented types map as the
// design says.
func TestKinds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		typ  string
		want fulfillment.EventKind
	}{
		{TypeInvoiceCreated, fulfillment.EventAttemptCreated},
		{TypePaymentConfirmed, fulfillment.EventPaymentConfirmed},
		{TypeInvoiceOverdue, fulfillment.EventAttemptExpired},
		{TypeInvoiceCancelled, fulfillment.EventAttemptCancelled},
		{TypeSubscriptionOverdue, fulfillment.EventSubscriptionOverdue},
		{TypeSubscriptionCancelled, fulfillment.EventSubscriptionCancelled},
		{"invoice.paid", fulfillment.EventOther},
		{"", fulfillment.EventOther},
	}
	for _, tc := range cases {
		if got := kindOf(tc.typ); got != tc.want {
			t.Errorf("kindOf(%q) = %q, want %q", tc.typ, got, tc.want)
		}
	}
}

// An amount without its token or network tells nothing: a confirmation
// needs them; another event keeps the amount in its raw body only.
func TestAmountWithoutUnit(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Set(EventIDHeader, "evt_1")
	body := `{"id":"evt_1","type":"invoice.created","data":{"invoiceId":"inv_1","merchantOrderId":"m","amount":"25"}}`
	ev, err := Parse(vectorEndpoint, h, []byte(body))
	if err != nil || ev.Payment.Amount.Known() {
		t.Errorf("invoice.created with a bare amount: %+v, %v; want accepted without an amount", ev.Payment, err)
	}
	body = `{"id":"evt_1","type":"payment.confirmed","data":{"invoiceId":"inv_1","merchantOrderId":"m","amount":"25","network":"TRON"}}`
	if _, err := Parse(vectorEndpoint, h, []byte(body)); err == nil || !strings.Contains(err.Error(), "data.token is required") {
		t.Errorf("payment.confirmed without a token: %v, want an error naming data.token", err)
	}
}
