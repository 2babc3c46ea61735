package yolfi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
)

// The published test vector of the integration guide (copied byte for byte
// from shared/providers/testdata).
const vectorSecret = "ywhsec_9f3Kq2LmV7xRt4Pz8NcB1dHs"

func readVector(t testing.TB) (body []byte, sig string) {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", "yolfi_payment_confirmed.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := os.ReadFile(filepath.Join("testdata", "yolfi_payment_confirmed.sig"))
	if err != nil {
		t.Fatal(err)
	}
	return body, string(s)
}

// vectorEndpoint is a live endpoint of the vector's org.
var vectorEndpoint = fulfillment.Endpoint{
	ID:          "yolfi-live",
	Provider:    fulfillment.ProviderYolfi,
	OrgID:       "org_7Hc2Lq",
	Environment: fulfillment.EnvLive,
}

func sigHeader(sig string) http.Header {
	h := http.Header{}
	h.Set(SignatureHeader, sig)
	return h
}

func TestSignVector(t *testing.T) {
	t.Parallel()
	body, sig := readVector(t)
	if got := Sign([]byte(vectorSecret), body); got != sig {
		t.Fatalf("Sign(vector) = %s, want %s", got, sig)
	}
}

func TestVerifyVector(t *testing.T) {
	t.Parallel()
	body, sig := readVector(t)
	secret := []byte(vectorSecret)
	wrong := []byte("ywhsec_old_rotated_out_00000000")
	flipped := append([]byte(nil), body...)
	flipped[len(flipped)/2] ^= 0x01
	otherBase64 := base64.StdEncoding.EncodeToString(make([]byte, 32))
	shortBase64 := base64.StdEncoding.EncodeToString(make([]byte, 31))

	cases := []struct {
		name    string
		header  http.Header
		body    []byte
		secrets [][]byte
		wantMsg string // "" = accepted
	}{
		{"vector", sigHeader(sig), body, [][]byte{secret}, ""},
		{"old wrong then new right", sigHeader(sig), body, [][]byte{wrong, secret}, ""},
		{"new right then old wrong", sigHeader(sig), body, [][]byte{secret, wrong}, ""},
		{"surrounding spaces", sigHeader(" " + sig + " "), body, [][]byte{secret}, ""},
		{"empty secret skipped", sigHeader(sig), body, [][]byte{{}, secret}, ""},
		{"one flipped body byte", sigHeader(sig), flipped, [][]byte{secret}, "signature does not match"},
		{"body with trailing newline", sigHeader(sig), append(append([]byte(nil), body...), '\n'), [][]byte{secret}, "signature does not match"},
		{"wrong secret", sigHeader(sig), body, [][]byte{wrong}, "signature does not match"},
		{"wrong secrets only", sigHeader(sig), body, [][]byte{wrong, []byte(vectorSecret + "x")}, "signature does not match"},
		{"other valid-looking signature", sigHeader(otherBase64), body, [][]byte{secret}, "signature does not match"},
		{"truncated signature", sigHeader(sig[:len(sig)-2]), body, [][]byte{secret}, "malformed signature"},
		{"signature without padding", sigHeader(strings.TrimRight(sig, "=")), body, [][]byte{secret}, "malformed signature"},
		{"signature of 31 bytes", sigHeader(shortBase64), body, [][]byte{secret}, "malformed signature"},
		{"not base64", sigHeader(strings.Repeat("!", len(sig))), body, [][]byte{secret}, "malformed signature"},
		{"url-safe alphabet", sigHeader(strings.NewReplacer("+", "-", "/", "_").Replace(sig)), body, [][]byte{secret}, "malformed signature"},
		{"hex instead of base64", sigHeader(strings.Repeat("ab", 32)), body, [][]byte{secret}, "malformed signature"},
		{"two signature headers", http.Header{"X-Yolfi-Signature": {sig, sig}}, body, [][]byte{secret}, "malformed signature"},
		{"missing header", http.Header{}, body, [][]byte{secret}, "missing X-Yolfi-Signature header"},
		{"nil header", nil, body, [][]byte{secret}, "missing X-Yolfi-Signature header"},
		{"empty header", sigHeader(""), body, [][]byte{secret}, "missing X-Yolfi-Signature header"},
		{"no secrets", sigHeader(sig), body, nil, "no signing secret"},
		{"only an empty secret", sigHeader(Sign(nil, body)), body, [][]byte{{}}, "no signing secret"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Verify(tc.header, tc.body, tc.secrets)
			if tc.wantMsg == "" {
				if err != nil {
					t.Fatalf("Verify: %v, want accepted", err)
				}
				return
			}
			if !errors.Is(err, ingest.ErrSignature) {
				t.Fatalf("Verify: %v, want an error wrapping ErrSignature", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.wantMsg) {
				t.Errorf("Verify: %q, want it to say %q", msg, tc.wantMsg)
			}
			for _, leak := range []string{vectorSecret, string(wrong), sig, "evt_01JDV6Q8W3ZK7M2N4P5R6S7T8V", "ORD-1001"} {
				if strings.Contains(msg, leak) {
					t.Errorf("Verify error %q quotes a secret, the signature or the body", msg)
				}
			}
		})
	}
}

func TestParseVector(t *testing.T) {
	t.Parallel()
	body, sig := readVector(t)
	h := sigHeader(sig)
	h.Set(EventIDHeader, "evt_01JDV6Q8W3ZK7M2N4P5R6S7T8V")
	ev, err := Parse(vectorEndpoint, h, body)
	if err != nil {
		t.Fatalf("Parse(vector): %v", err)
	}
	want := fulfillment.ProviderEvent{
		Provider:    fulfillment.ProviderYolfi,
		EndpointID:  "yolfi-live",
		OrgID:       "org_7Hc2Lq",
		Environment: fulfillment.EnvLive,
		EventID:     "evt_01JDV6Q8W3ZK7M2N4P5R6S7T8V",
		Type:        "payment.confirmed",
		Kind:        fulfillment.EventPaymentConfirmed,
		TestMode:    false,
		OccurredAt:  time.Date(2026, 11, 29, 10, 15, 30, 0, time.UTC),
		Payment: fulfillment.PaymentInfo{
			AttemptRef:        "inv_3Mz8Rt",
			PaymentID:         "pay_5Xk9Qe",
			InvoiceID:         "inv_3Mz8Rt",
			CheckoutSessionID: "cs_2Lp7Wn",
			MerchantOrderID:   "ORD-1001",
			SubscriptionID:    "",
			CustomerRef:       "user_42",
			Amount:            fulfillment.TokenAmount(decimal.RequireFromString("25.000000"), "USDT", "TRON"),
		},
		Refs: map[string]string{RefTxHash: "a3f1c9e07b"},
	}
	assertEvent(t, ev, want)
	if got := ev.Payment.Amount.Value.StringFixed(6); got != "25.000000" {
		t.Errorf("Amount = %s, want 25.000000", got)
	}
}

// assertEvent compares two events field by field (decimals by value).
func assertEvent(t *testing.T, got, want fulfillment.ProviderEvent) {
	t.Helper()
	if !got.Payment.Amount.Value.Equal(want.Payment.Amount.Value) || got.Payment.Amount.Unit != want.Payment.Amount.Unit {
		t.Errorf("Payment.Amount = %s, want %s", got.Payment.Amount, want.Payment.Amount)
	}
	got.Payment.Amount.Value, want.Payment.Amount.Value = decimal.Zero, decimal.Zero
	if !got.OccurredAt.Equal(want.OccurredAt) {
		t.Errorf("OccurredAt = %v, want %v", got.OccurredAt, want.OccurredAt)
	}
	got.OccurredAt, want.OccurredAt = time.Time{}, time.Time{}
	if eventString(got) != eventString(want) {
		t.Errorf("event\n got %s\nwant %s", eventString(got), eventString(want))
	}
}

func eventString(ev fulfillment.ProviderEvent) string {
	b, _ := json.Marshal(ev)
	return string(b)
}

func TestAcknowledge(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	(&Adapter{}).Acknowledge(w)
	if w.Code != http.StatusOK || w.Body.String() != `{"ok":true}` || w.Header().Get("Content-Type") != "application/json" {
		t.Fatalf("Acknowledge: %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
}

func TestReject(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		status     int
		reason     string
		wantStatus int
	}{
		{"unauthorized", http.StatusUnauthorized, "invalid signature", http.StatusUnauthorized},
		{"bad request with quotes", http.StatusBadRequest, `data.amount must be a decimal string such as "25.000000"`, http.StatusBadRequest},
		{"unavailable", http.StatusServiceUnavailable, "try again", http.StatusServiceUnavailable},
		{"2xx never acknowledges", http.StatusOK, "oops", http.StatusInternalServerError},
		{"out of range", 42, "oops", http.StatusInternalServerError},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			(&Adapter{}).Reject(w, tc.status, tc.reason)
			if w.Code != tc.wantStatus {
				t.Errorf("status %d, want %d", w.Code, tc.wantStatus)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
			var got struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &got); err != nil || got.Error != tc.reason {
				t.Errorf("body %q (%v), want {\"error\": %q}", w.Body.String(), err, tc.reason)
			}
		})
	}
}

// A delivery built with NewRequest from a Payload verifies and parses back
// to what was built: the builder and Parse share one wire shape.
func TestNewRequestRoundTrip(t *testing.T) {
	t.Parallel()
	secret := []byte("ywhsec_roundtrip")
	live := false
	p := Payload{
		ID:        NewID(TestEventIDPrefix),
		Type:      TypePaymentConfirmed,
		Livemode:  &live,
		OrgID:     "org_demo",
		CreatedAt: "2026-11-29T10:15:30+03:00",
		Data: PayloadData{
			InvoiceID:         NewID("inv_"),
			PaymentID:         NewID("pay_"),
			CheckoutSessionID: "cs_1",
			MerchantOrderID:   "demo-1",
			PaylinkID:         "pl_1",
			SubscriptionID:    "sub_1",
			Amount:            "25.000000",
			Token:             "USDT",
			Network:           "TRON",
			TxHash:            "0xabc",
		},
	}
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	req, err := NewRequest(context.Background(), "http://127.0.0.1:8081/webhooks/yolfi-test", secret, body, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("request %s %q", req.Method, req.Header.Get("Content-Type"))
	}
	sent, err := io.ReadAll(req.Body)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(req.Header, sent, [][]byte{secret}); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	ep := fulfillment.Endpoint{ID: "yolfi-test", Provider: fulfillment.ProviderYolfi, OrgID: "org_demo", Environment: fulfillment.EnvTest}
	ev, err := Parse(ep, req.Header, sent)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := fulfillment.ProviderEvent{
		Provider: fulfillment.ProviderYolfi, EndpointID: "yolfi-test", OrgID: "org_demo", Environment: fulfillment.EnvTest,
		EventID: p.ID, Type: TypePaymentConfirmed, Kind: fulfillment.EventPaymentConfirmed, TestMode: true,
		OccurredAt: time.Date(2026, 11, 29, 7, 15, 30, 0, time.UTC),
		Payment: fulfillment.PaymentInfo{
			AttemptRef: p.Data.InvoiceID, PaymentID: p.Data.PaymentID, InvoiceID: p.Data.InvoiceID,
			CheckoutSessionID: "cs_1", MerchantOrderID: "demo-1", SubscriptionID: "sub_1",
			Amount: fulfillment.TokenAmount(decimal.RequireFromString("25"), "USDT", "TRON"),
		},
		Refs: map[string]string{RefPaylinkID: "pl_1", RefTxHash: "0xabc"},
	}
	assertEvent(t, ev, want)
}

func TestPayloadOmitsEmpty(t *testing.T) {
	t.Parallel()
	b, err := json.Marshal(Payload{ID: "evt_1", Type: TypeInvoiceCreated})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"id":"evt_1","type":"invoice.created"}`; got != want {
		t.Fatalf("Marshal = %s, want %s", got, want)
	}
}

func TestNewID(t *testing.T) {
	t.Parallel()
	a, b := NewID("evt_"), NewID("evt_")
	if a == b || !strings.HasPrefix(a, "evt_") || len(a) != len("evt_")+24 {
		t.Fatalf("NewID: %q, %q", a, b)
	}
}
