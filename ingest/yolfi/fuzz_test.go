package yolfi

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
)

// fuzzSeeds are bodies both fuzz targets start from: the test vector and
// variants around the rules.
func fuzzSeeds(t testing.TB) [][]byte {
	vector, err := os.ReadFile(filepath.Join("testdata", "yolfi_payment_confirmed.json"))
	if err != nil {
		t.Fatal(err)
	}
	return [][]byte{
		vector,
		[]byte(withTop(map[string]any{"livemode": false, "id": "evt_test_1"})),
		[]byte(withTop(map[string]any{"orgId": "org_other"})),
		[]byte(withData(map[string]any{"amount": "-1"})),
		[]byte(withData(map[string]any{"amount": 25})),
		[]byte(withData(map[string]any{"invoiceId": nil, "paymentId": nil, "checkoutSessionId": nil})),
		[]byte(minimal("invoice.overdue", map[string]any{"invoiceId": "inv_1"})),
		[]byte(minimal("subscription.cancelled", map[string]any{"subscriptionId": "sub_1", "metadata": map[string]any{"a": []any{1, "b", nil}}})),
		[]byte(`{"id":"evt_1","type":"x","id":"evt_2"}`),
		[]byte(`{"ID":"evt_1","type":"x"}`),
		[]byte(vectorJSON + " x"),
		[]byte(`[]`),
		[]byte(``),
	}
}

func FuzzParse(f *testing.F) {
	for i, seed := range fuzzSeeds(f) {
		f.Add(seed, "evt_01JDV6Q8W3ZK7M2N4P5R6S7T8V", i%2 == 0)
	}
	ep := vectorEndpoint
	f.Fuzz(func(t *testing.T, body []byte, headerID string, sendHeader bool) {
		h := http.Header{}
		if sendHeader {
			h.Set(EventIDHeader, headerID)
		}
		ev, err := Parse(ep, h, body)
		if err != nil {
			inv, org := errors.Is(err, ingest.ErrInvalidPayload), errors.Is(err, ingest.ErrOrgMismatch)
			if inv == org {
				t.Fatalf("Parse error %v wraps neither or both of ErrInvalidPayload and ErrOrgMismatch", err)
			}
			if !reflect.DeepEqual(ev, fulfillment.ProviderEvent{}) {
				t.Fatalf("Parse returned an event with an error: %+v", ev)
			}
			return
		}
		checkInvariants(t, ep, ev)
		if sendHeader && ev.EventID != headerID {
			t.Fatalf("accepted header id %q for event %q", headerID, ev.EventID)
		}
		again, err := Parse(ep, h, body)
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
	if ev.Kind != kindOf(ev.Type) {
		t.Fatalf("Kind %q for type %q", ev.Kind, ev.Type)
	}
	p := ev.Payment
	if a := p.Amount; a.Known() && (a.Value.IsNegative() || !a.Unit.IsToken()) {
		t.Fatalf("amount %s: Yolfi amounts are non-negative token amounts", a)
	}
	if ev.Kind == fulfillment.EventPaymentConfirmed && (!p.Amount.Known() || !anyNonEmpty(orderRefs(&p))) {
		t.Fatalf("payment.confirmed without amount or reference: %+v", p)
	}
	if strings.HasPrefix(ev.EventID, TestEventIDPrefix) && !ev.TestMode {
		t.Fatalf("%s is not test mode", ev.EventID)
	}
	if !ev.OccurredAt.IsZero() && ev.OccurredAt.Location() != time.UTC {
		t.Fatalf("OccurredAt %v is not UTC", ev.OccurredAt)
	}
}

func FuzzVerify(f *testing.F) {
	vector, sig := readVector(f)
	f.Add(sig, vector, []byte(vectorSecret), uint(7), byte(1))
	f.Add("", vector, []byte(vectorSecret), uint(0), byte(0x80))
	f.Add(sig[:40], vector, []byte(vectorSecret), uint(1), byte(2))
	f.Add(sig, vector, []byte("wrong"), uint(375), byte(0xff))
	f.Add("not base64 at all, but of length forty four!", []byte{}, []byte{}, uint(0), byte(0))
	for _, seed := range fuzzSeeds(f)[1:] {
		f.Add(Sign([]byte(vectorSecret), seed), seed, []byte(vectorSecret), uint(len(seed)), byte(0x20))
	}
	f.Fuzz(func(t *testing.T, header string, body, secret []byte, pos uint, bit byte) {
		verify := func(sig string, body []byte, secrets ...[]byte) error {
			h := http.Header{}
			h.Set(SignatureHeader, sig)
			return Verify(h, body, secrets)
		}
		mustReject := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, ingest.ErrSignature) {
				t.Fatalf("%s: %v, want an error wrapping ErrSignature", what, err)
			}
		}

		// Arbitrary input: no panic, and acceptance only for the real signature.
		if err := verify(header, body, secret); err == nil {
			if len(secret) == 0 || strings.TrimSpace(header) != Sign(secret, body) {
				t.Fatalf("accepted a signature that is not Sign(secret, body)")
			}
		} else {
			mustReject("arbitrary header", err)
		}
		mustReject("no header", Verify(http.Header{}, body, [][]byte{secret}))

		good := Sign(secret, body)
		if len(secret) == 0 {
			// Anyone can sign with an empty key: it never verifies.
			mustReject("empty secret", verify(good, body, secret))
			return
		}
		if err := verify(good, body, secret); err != nil {
			t.Fatalf("own signature rejected: %v", err)
		}
		other := append([]byte("rotated:"), secret...)
		if err := verify(good, body, other, secret); err != nil {
			t.Fatalf("own signature rejected with the old secret first: %v", err)
		}
		if err := verify(good, body, secret, other); err != nil {
			t.Fatalf("own signature rejected with the old secret last: %v", err)
		}
		mustReject("other secret", verify(good, body, other))

		// Any change to the signed bytes is rejected.
		if bit == 0 {
			bit = 1
		}
		mutated := append([]byte(nil), body...)
		if len(mutated) == 0 {
			mutated = []byte{bit}
		} else {
			mutated[pos%uint(len(mutated))] ^= bit
		}
		mustReject("mutated body", verify(good, mutated, secret))
		mustReject("extended body", verify(good, append(bytes.Clone(body), bit), secret))
		if len(body) > 0 {
			mustReject("truncated body", verify(good, body[:len(body)-1], secret))
		}
		// And so is any change to the signature.
		s := []byte(good)
		i := pos % uint(len(s)-1) // keep the padding
		s[i] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[(strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", s[i])+1+int(bit)%63)%64]
		mustReject("mutated signature", verify(string(s), body, secret))
		mustReject("truncated signature", verify(good[:len(good)-1-int(pos%8)], body, secret))
	})
}
