package tbank

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
)

// vectorTerminal is the vector's terminal; vectorEndpoint receives its
// notifications.
const vectorTerminal = "1321054611234DEMO"

var vectorEndpoint = fulfillment.Endpoint{
	ID:          "tbank-live",
	Provider:    fulfillment.ProviderTBank,
	OrgID:       "org_a",
	Environment: fulfillment.EnvLive,
}

// del removes a member in edit.
type deleteMarker struct{}

var del = deleteMarker{}

// raw is a JSON literal written into the body as it is (e.g. "9855.0").
type raw = json.RawMessage

// edit returns the vector with members set (or removed with del).
func edit(members map[string]any) string {
	m := map[string]any{}
	dec := json.NewDecoder(strings.NewReader(vectorJSON))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		panic(err)
	}
	for k, v := range members {
		if v == del {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// status is the vector in another status, with members set.
func status(s string, members map[string]any) string {
	m := map[string]any{"Status": s}
	for k, v := range members {
		m[k] = v
	}
	return edit(m)
}

func TestParseVector(t *testing.T) {
	t.Parallel()
	ev, err := Parse(vectorEndpoint, vectorTerminal, readVector(t))
	if err != nil {
		t.Fatalf("Parse(vector): %v", err)
	}
	want := fulfillment.ProviderEvent{
		Provider:    fulfillment.ProviderTBank,
		EndpointID:  "tbank-live",
		OrgID:       "org_a",
		Environment: fulfillment.EnvLive,
		EventID:     "1321054611234DEMO:8742591:AUTHORIZED",
		Type:        "AUTHORIZED",
		Kind:        fulfillment.EventAttemptCreated,
		Payment: fulfillment.PaymentInfo{
			AttemptRef:        "8742591",
			PaymentID:         "8742591",
			CheckoutSessionID: "201709",
			SubscriptionID:    "101709",
			Amount:            fulfillment.MinorAmount(9855, "RUB"),
		},
	}
	assertEvent(t, ev, want)
	if !ev.OccurredAt.IsZero() {
		t.Errorf("OccurredAt = %v: the bank sends no time", ev.OccurredAt)
	}
	s := eventString(ev)
	for _, card := range []string{"430000", "0777", "1122", "322264"} {
		if strings.Contains(s, card) {
			t.Errorf("card data %q reached the event: %s", card, s)
		}
	}
}

// assertEvent compares two events field by field (amounts by value).
func assertEvent(t *testing.T, got, want fulfillment.ProviderEvent) {
	t.Helper()
	if !got.Payment.Amount.Value.Equal(want.Payment.Amount.Value) || got.Payment.Amount.Unit != want.Payment.Amount.Unit {
		t.Errorf("Payment.Amount = %s, want %s", got.Payment.Amount, want.Payment.Amount)
	}
	got.Payment.Amount.Value, want.Payment.Amount.Value = decimal.Zero, decimal.Zero
	if eventString(got) != eventString(want) {
		t.Errorf("event\n got %s\nwant %s", eventString(got), eventString(want))
	}
}

func eventString(ev fulfillment.ProviderEvent) string {
	b, _ := json.Marshal(ev)
	return string(b)
}

// Every documented status maps as the adapter's documentation says, and
// only CONFIRMED fulfills.
func TestParseStatuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status string
		want   fulfillment.EventKind
	}{
		{StatusNew, fulfillment.EventAttemptCreated},
		{StatusFormShowed, fulfillment.EventAttemptCreated},
		{StatusAuthorizing, fulfillment.EventAttemptCreated},
		{Status3DSChecking, fulfillment.EventAttemptCreated},
		{Status3DSChecked, fulfillment.EventAttemptCreated},
		{StatusAuthorized, fulfillment.EventAttemptCreated},
		{StatusPayChecking, fulfillment.EventAttemptCreated},
		{StatusConfirming, fulfillment.EventAttemptCreated},
		{StatusConfirmed, fulfillment.EventPaymentConfirmed},
		{StatusReversing, fulfillment.EventOther},
		{StatusPartialReversed, fulfillment.EventAttemptCreated},
		{StatusReversed, fulfillment.EventAttemptCancelled},
		{StatusRefunding, fulfillment.EventOther},
		{StatusPartialRefunded, fulfillment.EventPartiallyRefunded},
		{StatusRefunded, fulfillment.EventRefunded},
		{StatusCanceled, fulfillment.EventAttemptCancelled},
		{StatusDeadlineExpired, fulfillment.EventAttemptExpired},
		{StatusRejected, fulfillment.EventAttemptCancelled},
		{StatusAuthFail, fulfillment.EventAttemptCancelled},
		{"PAYOUT_SENT", fulfillment.EventOther},
		{"confirmed", fulfillment.EventOther},
		{"Confirmed", fulfillment.EventOther},
	}
	if len(kinds) != 19 {
		t.Errorf("kinds maps %d statuses; the bank documents 19", len(kinds))
	}
	for _, tc := range cases {
		ev, err := Parse(vectorEndpoint, vectorTerminal, []byte(status(tc.status, nil)))
		if err != nil {
			t.Errorf("%s: %v", tc.status, err)
			continue
		}
		checkInvariants(t, vectorEndpoint, ev)
		if ev.Kind != tc.want || ev.Type != tc.status {
			t.Errorf("%s: kind %q type %q, want kind %q", tc.status, ev.Kind, ev.Type, tc.want)
		}
		wantID := "1321054611234DEMO:8742591:" + tc.status
		if partial[tc.status] {
			wantID += ":9855"
		}
		if ev.EventID != wantID {
			t.Errorf("%s: EventID %q, want %q", tc.status, ev.EventID, wantID)
		}
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		body    string
		wantErr error  // nil: accepted
		wantMsg string // part of the error message
		check   func(t *testing.T, ev fulfillment.ProviderEvent)
	}{
		// Accepted notifications.
		{name: "confirmed", body: status(StatusConfirmed, nil), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.Kind != fulfillment.EventPaymentConfirmed || ev.EventID != "1321054611234DEMO:8742591:CONFIRMED" || !ev.Payment.Amount.Value.Equal(decimal.NewFromInt(9855)) {
				t.Errorf("event %s", eventString(ev))
			}
		}},
		{name: "PaymentId as a string", body: edit(map[string]any{"PaymentId": "8742591"}), check: idIs("1321054611234DEMO:8742591:AUTHORIZED", "8742591")},
		{name: "PaymentId of 20 digits", body: edit(map[string]any{"PaymentId": raw("98765432109876543210")}), check: idIs("1321054611234DEMO:98765432109876543210:AUTHORIZED", "98765432109876543210")},
		{name: "PaymentId 0", body: edit(map[string]any{"PaymentId": raw("0")}), check: idIs("1321054611234DEMO:0:AUTHORIZED", "0")},
		{name: "partial refund id ends with the amount", body: status(StatusPartialRefunded, map[string]any{"Amount": raw("1000")}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.EventID != "1321054611234DEMO:8742591:PARTIAL_REFUNDED:1000" || ev.Kind != fulfillment.EventPartiallyRefunded || !ev.Payment.Amount.Value.Equal(decimal.NewFromInt(1000)) {
				t.Errorf("event %s", eventString(ev))
			}
		}},
		{name: "refund id does not end with the amount", body: status(StatusRefunded, nil), check: idIs("1321054611234DEMO:8742591:REFUNDED", "8742591")},
		{name: "refund without amount", body: status(StatusRefunded, map[string]any{"Amount": del}), check: noAmount},
		{name: "unknown status is stored", body: status("SOMETHING_NEW", map[string]any{"Amount": del}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.Kind != fulfillment.EventOther || ev.EventID != "1321054611234DEMO:8742591:SOMETHING_NEW" {
				t.Errorf("event %s", eventString(ev))
			}
		}},
		{name: "failed confirmation does not confirm", body: status(StatusConfirmed, map[string]any{"Success": false, "ErrorCode": "1051"}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.Kind != fulfillment.EventOther || ev.Refs[RefErrorCode] != "1051" {
				t.Errorf("event %s", eventString(ev))
			}
		}},
		{name: "Success false alone does not confirm", body: status(StatusConfirmed, map[string]any{"Success": false}), check: kindIs(fulfillment.EventOther)},
		{name: "ErrorCode alone does not confirm", body: status(StatusConfirmed, map[string]any{"ErrorCode": "99"}), check: kindIs(fulfillment.EventOther)},
		{name: "failed refund does not refund", body: status(StatusRefunded, map[string]any{"Success": false, "ErrorCode": "3"}), check: kindIs(fulfillment.EventOther)},
		{name: "failed partial refund does not refund", body: status(StatusPartialRefunded, map[string]any{"Success": false, "ErrorCode": "3"}), check: kindIs(fulfillment.EventOther)},
		{name: "rejection with its error code", body: status(StatusRejected, map[string]any{"Success": false, "ErrorCode": "1051"}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.Kind != fulfillment.EventAttemptCancelled || ev.Refs[RefErrorCode] != "1051" {
				t.Errorf("event %s", eventString(ev))
			}
		}},
		{name: "Success absent", body: status(StatusConfirmed, map[string]any{"Success": del}), check: kindIs(fulfillment.EventPaymentConfirmed)},
		{name: "Success null", body: status(StatusConfirmed, map[string]any{"Success": nil}), check: kindIs(fulfillment.EventPaymentConfirmed)},
		{name: "ErrorCode absent", body: status(StatusConfirmed, map[string]any{"ErrorCode": del}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.Kind != fulfillment.EventPaymentConfirmed || ev.Refs[RefErrorCode] != "" {
				t.Errorf("event %s", eventString(ev))
			}
		}},
		{name: "amount zero", body: status(StatusConfirmed, map[string]any{"Amount": raw("0")}), check: amountIs("0")},
		{name: "amount of 20 digits", body: status(StatusConfirmed, map[string]any{"Amount": raw(strings.Repeat("9", 20))}), check: amountIs(strings.Repeat("9", 20))},
		{name: "no amount on AUTHORIZED", body: edit(map[string]any{"Amount": del}), check: noAmount},
		{name: "null amount on AUTHORIZED", body: edit(map[string]any{"Amount": nil}), check: noAmount},
		{name: "RebillId as a string", body: edit(map[string]any{"RebillId": "101709"}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.Payment.SubscriptionID != "101709" {
				t.Errorf("SubscriptionID = %q, want the RebillId", ev.Payment.SubscriptionID)
			}
		}},
		{name: "no RebillId", body: edit(map[string]any{"RebillId": del}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.Refs != nil || ev.Payment.SubscriptionID != "" {
				t.Errorf("Refs = %v, SubscriptionID = %q", ev.Refs, ev.Payment.SubscriptionID)
			}
		}},
		{name: "Cyrillic OrderId", body: edit(map[string]any{"OrderId": "Заказ №1001"}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			if ev.Payment.CheckoutSessionID != "Заказ №1001" {
				t.Errorf("CheckoutSessionID = %q", ev.Payment.CheckoutSessionID)
			}
		}},
		{name: "DATA and Receipt are not read", body: status(StatusConfirmed, map[string]any{
			"DATA":    map[string]any{"OrgId": "org_evil", "OrderId": "ORD-EVIL", "Amount": -1},
			"Receipt": map[string]any{"Email": "a@example.com", "Items": []any{1}},
		}), check: func(t *testing.T, ev fulfillment.ProviderEvent) {
			s := eventString(ev)
			for _, leak := range []string{"org_evil", "ORD-EVIL", "a@example.com"} {
				if strings.Contains(s, leak) {
					t.Errorf("event carries %q: %s", leak, s)
				}
			}
		}},
		{name: "DATA as a string", body: edit(map[string]any{"DATA": "k=v"})},
		{name: "unknown members are accepted", body: edit(map[string]any{"Params": []any{map[string]any{"Key": "x"}}, "NewField": 1.5})},

		// Not a notification.
		{name: "empty body", body: "", wantErr: ingest.ErrInvalidPayload, wantMsg: "empty"},
		{name: "not JSON", body: "Status=CONFIRMED", wantErr: ingest.ErrInvalidPayload, wantMsg: "not valid JSON"},
		{name: "array", body: "[" + vectorJSON + "]", wantErr: ingest.ErrInvalidPayload, wantMsg: "must be a JSON object"},
		{name: "duplicate member", body: strings.Replace(vectorJSON, `"Status": "AUTHORIZED"`, `"Status": "AUTHORIZED", "Status": "CONFIRMED"`, 1), wantErr: ingest.ErrInvalidPayload, wantMsg: "appears twice"},
		{name: "near-miss member name", body: edit(map[string]any{"PaymentId": del, "paymentId": raw("8742591")}), wantErr: ingest.ErrInvalidPayload, wantMsg: `spelled exactly "PaymentId"`},
		{name: "trailing data", body: vectorJSON + "{}", wantErr: ingest.ErrInvalidPayload, wantMsg: "more data after"},

		// Terminal.
		{name: "another terminal", body: edit(map[string]any{"TerminalKey": "OtherTerminal"}), wantErr: ingest.ErrAccountMismatch, wantMsg: "not the terminal of endpoint"},
		{name: "terminal differing in case", body: edit(map[string]any{"TerminalKey": "1321054611234demo"}), wantErr: ingest.ErrAccountMismatch},
		{name: "another terminal with other problems", body: edit(map[string]any{"TerminalKey": "OtherTerminal", "PaymentId": del}), wantErr: ingest.ErrAccountMismatch},
		{name: "TerminalKey missing", body: edit(map[string]any{"TerminalKey": del}), wantErr: ingest.ErrInvalidPayload, wantMsg: "TerminalKey is required"},
		{name: "TerminalKey a number", body: edit(map[string]any{"TerminalKey": 1321054611234}), wantErr: ingest.ErrInvalidPayload, wantMsg: "TerminalKey must be a string"},

		// Status, OrderId, ErrorCode, Success.
		{name: "Status missing", body: edit(map[string]any{"Status": del}), wantErr: ingest.ErrInvalidPayload, wantMsg: "Status is required"},
		{name: "Status too long", body: status(strings.Repeat("S", 65), nil), wantErr: ingest.ErrInvalidPayload, wantMsg: "Status must be at most 64 bytes"},
		{name: "Status with a space", body: status("NEW STATUS", nil), wantErr: ingest.ErrInvalidPayload, wantMsg: "Status must be printable ASCII"},
		{name: "Status with a colon", body: status("PARTIAL_REFUNDED:1000", nil), wantErr: ingest.ErrInvalidPayload, wantMsg: "Status must not contain a colon"},
		{name: "OrderId missing", body: edit(map[string]any{"OrderId": del}), wantErr: ingest.ErrInvalidPayload, wantMsg: "OrderId is required"},
		{name: "OrderId a number", body: edit(map[string]any{"OrderId": 201709}), wantErr: ingest.ErrInvalidPayload, wantMsg: "OrderId must be a string"},
		{name: "OrderId too long", body: edit(map[string]any{"OrderId": strings.Repeat("o", 129)}), wantErr: ingest.ErrInvalidPayload, wantMsg: "OrderId must be at most 128 bytes"},
		{name: "OrderId with a newline", body: edit(map[string]any{"OrderId": "2017\n09"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "OrderId must not contain control"},
		{name: "ErrorCode a number", body: edit(map[string]any{"ErrorCode": 0}), wantErr: ingest.ErrInvalidPayload, wantMsg: "ErrorCode must be a string"},
		{name: "Success a string", body: edit(map[string]any{"Success": "true"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "Success must be true or false"},

		// PaymentId.
		{name: "PaymentId missing", body: edit(map[string]any{"PaymentId": del}), wantErr: ingest.ErrInvalidPayload, wantMsg: "PaymentId is required"},
		{name: "PaymentId null", body: edit(map[string]any{"PaymentId": nil}), wantErr: ingest.ErrInvalidPayload, wantMsg: "PaymentId is required"},
		{name: "PaymentId empty", body: edit(map[string]any{"PaymentId": ""}), wantErr: ingest.ErrInvalidPayload, wantMsg: "PaymentId must be a number or a string of digits"},
		{name: "PaymentId negative", body: edit(map[string]any{"PaymentId": raw("-8742591")}), wantErr: ingest.ErrInvalidPayload, wantMsg: "PaymentId must be a whole number"},
		{name: "PaymentId with a fraction", body: edit(map[string]any{"PaymentId": raw("8742591.0")}), wantErr: ingest.ErrInvalidPayload, wantMsg: "PaymentId must be a whole number"},
		{name: "PaymentId with an exponent", body: edit(map[string]any{"PaymentId": raw("8.742591e6")}), wantErr: ingest.ErrInvalidPayload, wantMsg: "PaymentId must be a whole number"},
		{name: "PaymentId string with a leading zero", body: edit(map[string]any{"PaymentId": "08742591"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "leading zero"},
		{name: "PaymentId string with letters", body: edit(map[string]any{"PaymentId": "pay_1"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "PaymentId must be a whole number"},
		{name: "PaymentId string with a space", body: edit(map[string]any{"PaymentId": " 8742591"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "PaymentId must be a whole number"},
		{name: "PaymentId in non-ASCII digits", body: edit(map[string]any{"PaymentId": "٨٧٤"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "PaymentId must be a whole number"},
		{name: "PaymentId an object", body: edit(map[string]any{"PaymentId": map[string]any{"id": 1}}), wantErr: ingest.ErrInvalidPayload, wantMsg: "PaymentId must be a whole number"},
		{name: "PaymentId a boolean", body: edit(map[string]any{"PaymentId": true}), wantErr: ingest.ErrInvalidPayload, wantMsg: "PaymentId must be a whole number"},
		{name: "PaymentId of 129 digits", body: edit(map[string]any{"PaymentId": raw("1" + strings.Repeat("0", 128))}), wantErr: ingest.ErrInvalidPayload, wantMsg: "PaymentId must have at most 128 digits"},
		{name: "event id too long", body: status(strings.Repeat("S", 64), map[string]any{"PaymentId": raw("1" + strings.Repeat("0", 60))}), wantErr: ingest.ErrInvalidPayload, wantMsg: "the event id TerminalKey:PaymentId:Status[:Amount] must be at most 128 bytes"},
		{name: "RebillId with a fraction", body: edit(map[string]any{"RebillId": raw("1.5")}), wantErr: ingest.ErrInvalidPayload, wantMsg: "RebillId must be a whole number"},

		// Amount.
		{name: "amount as a string", body: status(StatusConfirmed, map[string]any{"Amount": "9855"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "Amount must be a number of kopecks, not a string"},
		{name: "amount negative", body: status(StatusConfirmed, map[string]any{"Amount": raw("-9855")}), wantErr: ingest.ErrInvalidPayload, wantMsg: "Amount must not be negative"},
		{name: "amount with a fraction", body: status(StatusConfirmed, map[string]any{"Amount": raw("98.55")}), wantErr: ingest.ErrInvalidPayload, wantMsg: "Amount must be a whole number of kopecks"},
		{name: "amount 9855.0", body: status(StatusConfirmed, map[string]any{"Amount": raw("9855.0")}), wantErr: ingest.ErrInvalidPayload, wantMsg: "no fraction or exponent"},
		{name: "amount 1e3", body: status(StatusConfirmed, map[string]any{"Amount": raw("1e3")}), wantErr: ingest.ErrInvalidPayload, wantMsg: "no fraction or exponent"},
		{name: "amount of 21 digits", body: status(StatusConfirmed, map[string]any{"Amount": raw(strings.Repeat("9", 21))}), wantErr: ingest.ErrInvalidPayload, wantMsg: "at most 20 digits"},
		{name: "amount an object", body: status(StatusConfirmed, map[string]any{"Amount": map[string]any{"value": 1}}), wantErr: ingest.ErrInvalidPayload, wantMsg: "Amount must be a whole number"},
		{name: "bad amount on AUTHORIZED", body: edit(map[string]any{"Amount": raw("-1")}), wantErr: ingest.ErrInvalidPayload, wantMsg: "Amount must not be negative"},
		{name: "confirmed without amount", body: status(StatusConfirmed, map[string]any{"Amount": del}), wantErr: ingest.ErrInvalidPayload, wantMsg: "Amount is required for CONFIRMED"},
		{name: "confirmed with null amount", body: status(StatusConfirmed, map[string]any{"Amount": nil}), wantErr: ingest.ErrInvalidPayload, wantMsg: "Amount is required for CONFIRMED"},
		{name: "failed confirmation without amount", body: status(StatusConfirmed, map[string]any{"Amount": del, "Success": false}), wantErr: ingest.ErrInvalidPayload, wantMsg: "Amount is required for CONFIRMED"},
		{name: "partial refund without amount", body: status(StatusPartialRefunded, map[string]any{"Amount": del}), wantErr: ingest.ErrInvalidPayload, wantMsg: "Amount is required for PARTIAL_REFUNDED"},
		{name: "partial reversal without amount", body: status(StatusPartialReversed, map[string]any{"Amount": del}), wantErr: ingest.ErrInvalidPayload, wantMsg: "Amount is required for PARTIAL_REVERSED"},
		{name: "several problems are listed together", body: edit(map[string]any{"Status": del, "OrderId": del, "PaymentId": "x"}), wantErr: ingest.ErrInvalidPayload, wantMsg: "Status is required; OrderId is required; PaymentId must be"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ev, err := Parse(vectorEndpoint, vectorTerminal, []byte(tc.body))
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				checkInvariants(t, vectorEndpoint, ev)
				if tc.check != nil {
					tc.check(t, ev)
				}
				return
			}
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Parse: %v, want an error wrapping %v", err, tc.wantErr)
			}
			for _, other := range []error{ingest.ErrInvalidPayload, ingest.ErrAccountMismatch, ingest.ErrOrgMismatch, ingest.ErrSignature} {
				if other != tc.wantErr && errors.Is(err, other) { //nolint:errorlint // telling two sentinels apart by identity, not inspecting an error
					t.Errorf("Parse: %v also wraps %v", err, other)
				}
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("Parse: %q, want it to say %q", msg, tc.wantMsg)
			}
			// Messages never quote the payload.
			for _, leak := range []string{vectorTerminal, "OtherTerminal", "201709", "8742591", "430000", "9855"} {
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

// The two spellings of a PaymentId are one payment: one event id, one
// attempt.
func TestParsePaymentIDSpellings(t *testing.T) {
	t.Parallel()
	for _, s := range []string{StatusAuthorized, StatusConfirmed, StatusPartialRefunded} {
		asNumber, err1 := Parse(vectorEndpoint, vectorTerminal, []byte(status(s, nil)))
		asString, err2 := Parse(vectorEndpoint, vectorTerminal, []byte(status(s, map[string]any{"PaymentId": "8742591"})))
		if err1 != nil || err2 != nil || eventString(asNumber) != eventString(asString) {
			t.Errorf("%s: %v %v\n number %s\n string %s", s, err1, err2, eventString(asNumber), eventString(asString))
		}
	}
}

// Two partial refunds of one payment are two events; a redelivery of one
// is the same event.
func TestParsePartialRefundIDs(t *testing.T) {
	t.Parallel()
	id := func(amount string) string {
		ev, err := Parse(vectorEndpoint, vectorTerminal, []byte(status(StatusPartialRefunded, map[string]any{"Amount": raw(amount)})))
		if err != nil {
			t.Fatal(err)
		}
		return ev.EventID
	}
	first, again, second := id("1000"), id("1000"), id("2000")
	if first != again || first == second {
		t.Errorf("partial refund ids: %s, again %s, another %s", first, again, second)
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

func idIs(eventID, paymentID string) func(*testing.T, fulfillment.ProviderEvent) {
	return func(t *testing.T, ev fulfillment.ProviderEvent) {
		t.Helper()
		if ev.EventID != eventID || ev.Payment.PaymentID != paymentID || ev.Payment.AttemptRef != paymentID {
			t.Errorf("EventID %q, payment %q, attempt %q; want %q and %q", ev.EventID, ev.Payment.PaymentID, ev.Payment.AttemptRef, eventID, paymentID)
		}
	}
}

func amountIs(want string) func(*testing.T, fulfillment.ProviderEvent) {
	return func(t *testing.T, ev fulfillment.ProviderEvent) {
		t.Helper()
		a := ev.Payment.Amount
		if !a.Known() || !a.Value.Equal(decimal.RequireFromString(want)) || a.Unit != fulfillment.CurrencyUnit("RUB") {
			t.Errorf("Amount = %s, want %s RUB minor units", a, want)
		}
	}
}

func noAmount(t *testing.T, ev fulfillment.ProviderEvent) {
	t.Helper()
	if ev.Payment.Amount.Known() {
		t.Errorf("Amount = %s, want none", ev.Payment.Amount)
	}
}
