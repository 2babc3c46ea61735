package tbank

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
)

// fuzzSeeds are bodies both fuzz targets start from: the vector and
// variants around the rules.
func fuzzSeeds(t testing.TB) [][]byte {
	return [][]byte{
		readVector(t),
		[]byte(status(StatusConfirmed, map[string]any{"PaymentId": "8742591"})),
		[]byte(status(StatusPartialRefunded, map[string]any{"Amount": raw("1000")})),
		[]byte(status(StatusConfirmed, map[string]any{"Success": false, "ErrorCode": "1051"})),
		[]byte(status("SOMETHING_NEW", map[string]any{"Amount": del, "RebillId": nil})),
		[]byte(edit(map[string]any{"TerminalKey": "OtherTerminal"})),
		[]byte(edit(map[string]any{"Amount": raw("9855.0")})),
		[]byte(edit(map[string]any{"Amount": raw("1e3"), "PaymentId": raw("123456789012345678901234567890")})),
		[]byte(edit(map[string]any{"DATA": map[string]any{"a": []any{1, "b", nil}}, "Receipt": nil})),
		[]byte(edit(map[string]any{"OrderId": "Заказ \u2028 №1"})),
		[]byte(`{"Token":"` + vectorToken + `","Token":"x"}`),
		[]byte(`{"Status":"CONFIRMED","Status":"NEW"}`),
		[]byte(`{"Password":"x"}`),
		[]byte(vectorJSON + " x"),
		[]byte(`{}`),
		[]byte(`[]`),
		[]byte(``),
	}
}

func FuzzParse(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	ep := vectorEndpoint
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := Parse(ep, vectorTerminal, body)
		if err != nil {
			inv, acct := errors.Is(err, ingest.ErrInvalidPayload), errors.Is(err, ingest.ErrAccountMismatch)
			if inv == acct {
				t.Fatalf("Parse error %v wraps neither or both of ErrInvalidPayload and ErrAccountMismatch", err)
			}
			if !reflect.DeepEqual(ev, fulfillment.ProviderEvent{}) {
				t.Fatalf("Parse returned an event with an error: %+v", ev)
			}
			return
		}
		checkInvariants(t, ep, ev)
		again, err := Parse(ep, vectorTerminal, body)
		if err != nil || eventString(again) != eventString(ev) {
			t.Fatalf("Parse is not deterministic: %v", err)
		}
	})
}

// checkInvariants holds for every event Parse accepts.
func checkInvariants(t *testing.T, ep fulfillment.Endpoint, ev fulfillment.ProviderEvent) {
	t.Helper()
	if ev.Provider != ep.Provider || ev.EndpointID != ep.ID || ev.OrgID != ep.OrgID || ev.Environment != ep.Environment {
		t.Fatalf("event names %s/%s/%s/%s, endpoint is %s/%s/%s/%s", ev.Provider, ev.EndpointID, ev.OrgID, ev.Environment, ep.Provider, ep.ID, ep.OrgID, ep.Environment)
	}
	// Whatever the adapter accepts, RecordEvent accepts: one set of rules.
	if err := ev.Validate(); err != nil {
		t.Fatalf("accepted an event RecordEvent refuses: %v", err)
	}
	if k := kindOf(ev.Type, false); ev.Kind != k && (ev.Kind != fulfillment.EventOther || !movesMoney(k)) {
		t.Fatalf("Kind %q for status %q", ev.Kind, ev.Type)
	}
	p := ev.Payment
	if !strings.HasPrefix(ev.EventID, vectorTerminal+":"+p.PaymentID+":"+ev.Type) || p.PaymentID == "" || p.AttemptRef != p.PaymentID {
		t.Fatalf("event id %q, payment %q, attempt %q", ev.EventID, p.PaymentID, p.AttemptRef)
	}
	if p.CheckoutSessionID == "" || p.InvoiceID != "" || p.MerchantOrderID != "" || p.CustomerRef != "" {
		t.Fatalf("payment refs %+v", p)
	}
	if a := p.Amount; a.Known() && (a.Unit != fulfillment.CurrencyUnit(Currency) || a.Value.IsNegative() || !a.Value.IsInteger()) {
		t.Fatalf("amount %s: a notification's amount is a whole number of kopecks", a)
	}
	if amountRequired[ev.Type] && !p.Amount.Known() {
		t.Fatalf("%s without an amount", ev.Type)
	}
	if !ev.OccurredAt.IsZero() || ev.TestMode {
		t.Fatalf("OccurredAt %v, TestMode %v", ev.OccurredAt, ev.TestMode)
	}
}

func FuzzVerify(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed, []byte(vectorPassword), uint(7), byte(1))
	}
	f.Add([]byte(strings.Replace(vectorJSON, `, "Token": "`+vectorToken+`"`, "", 1)), []byte(vectorPassword), uint(40), byte(0x20))
	f.Add([]byte(`{"A":{"B":[1,{"C":null}]},"D":1e400,"E":"\ud800"}`), []byte("pw"), uint(3), byte(0x80))
	f.Fuzz(func(t *testing.T, body, password []byte, pos uint, bit byte) {
		mustReject := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, ingest.ErrSignature) {
				t.Fatalf("%s: %v, want an error wrapping ErrSignature", what, err)
			}
		}

		// Arbitrary input: no panic, and acceptance only for a body whose
		// Token is its Token under the password.
		s, scanErr := scan(body)
		if err := Verify(body, [][]byte{password}); err == nil {
			tok, terr := Token(body, password)
			if len(password) == 0 || terr != nil || s.token == nil || *s.token != tok {
				t.Fatalf("accepted a body whose Token is not its own")
			}
		} else {
			mustReject("arbitrary body", err)
		}
		if scanErr != nil || s.token != nil || !strings.HasPrefix(string(body), "{") {
			return
		}

		// A body without a Token, signed: verifies under its password only.
		tok, err := Token(body, password)
		if err != nil {
			t.Fatalf("Token: %v after scan succeeded", err)
		}
		signed := withToken(string(body), tok)
		if len(password) == 0 {
			mustReject("empty password", Verify(signed, [][]byte{password}))
			return
		}
		if err := Verify(signed, [][]byte{password}); err != nil {
			t.Fatalf("own Token rejected: %v", err)
		}
		other := append([]byte("rotated:"), password...)
		if err := Verify(signed, [][]byte{other, password}); err != nil {
			t.Fatalf("own Token rejected with the old password first: %v", err)
		}
		mustReject("other password", Verify(signed, [][]byte{other}))

		// Any change to the Token is rejected.
		mutated := []byte(tok)
		i := pos % uint(len(mutated))
		mutated[i] = "0123456789abcdef"[(strings.IndexByte("0123456789abcdef", mutated[i])+1+int(bit)%15)%16]
		mustReject("mutated Token", Verify(withToken(string(body), string(mutated)), [][]byte{password}))
		if upper := strings.ToUpper(tok); upper != tok {
			mustReject("uppercase Token", Verify(withToken(string(body), upper), [][]byte{password}))
		}
	})
}
