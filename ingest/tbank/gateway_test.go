package tbank

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
)

// recorder is a hand-written fake of ingest.Recorder.
type recorder struct {
	record func(fulfillment.ProviderEvent) (fulfillment.InboxReceipt, error)
	mu     sync.Mutex
	events []fulfillment.ProviderEvent
}

func (r *recorder) RecordEvent(_ context.Context, ev fulfillment.ProviderEvent, _ []byte) (fulfillment.InboxReceipt, error) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	return r.record(ev)
}

func stored(fulfillment.ProviderEvent) (fulfillment.InboxReceipt, error) {
	return fulfillment.InboxReceipt{}, nil
}

// newGateway serves the vector's terminal on /webhooks/tbank-live, with the
// vector's password after an older one (a rotation).
func newGateway(t *testing.T, rec ingest.Recorder) (http.Handler, *bytes.Buffer) {
	t.Helper()
	a, err := New(vectorEndpoint, [][]byte{[]byte("OldTerminalPassword"), []byte(vectorPassword)},
		options(t, "terminal_key: "+vectorTerminal))
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	g := ingest.NewGateway([]ingest.Endpoint{{Endpoint: vectorEndpoint, Adapter: a}}, rec,
		ingest.Options{MaxBodyBytes: 4096}, slog.New(slog.NewJSONHandler(logs, nil)))
	return g.Handler(), logs
}

func post(h http.Handler, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "/webhooks/tbank-live", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// unsignedVector is the vector without its Token.
func unsignedVector() string {
	return strings.Replace(vectorJSON, `, "Token": "`+vectorToken+`"`, "", 1)
}

func TestGatewayAcknowledgesWithOK(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		result error
		dup    bool
		want   int
	}{
		{"stored", nil, false, http.StatusOK},
		{"duplicate", nil, true, http.StatusOK},
		{"storage down", fmt.Errorf("%w: database", fulfillment.ErrUnavailable), false, http.StatusServiceUnavailable},
		{"refused event", &fulfillment.ValidationError{Violations: []fulfillment.FieldViolation{{Field: "event_id", Description: "bad"}}}, false, http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{record: func(fulfillment.ProviderEvent) (fulfillment.InboxReceipt, error) {
				return fulfillment.InboxReceipt{Duplicate: tc.dup}, tc.result
			}}
			h, logs := newGateway(t, rec)
			w := post(h, readVector(t))
			if w.Code != tc.want {
				t.Errorf("status %d, want %d (%s)", w.Code, tc.want, w.Body)
			}
			if ok := w.Body.String() == "OK"; ok != (tc.want == http.StatusOK) {
				t.Errorf("status %d with body %q: OK means stored, and only that", w.Code, w.Body)
			}
			if len(rec.events) != 1 || rec.events[0].EventID != "1321054611234DEMO:8742591:AUTHORIZED" || rec.events[0].OrgID != "org_a" {
				t.Errorf("recorded %+v", rec.events)
			}
			for _, leak := range []string{vectorPassword, "430000", vectorToken} {
				if strings.Contains(logs.String(), leak) {
					t.Errorf("the log holds the password, the Token or card data:\n%s", logs)
				}
			}
		})
	}
}

func TestGatewayRejectsBeforeRecording(t *testing.T) {
	t.Parallel()
	rec := &recorder{record: stored}
	h, logs := newGateway(t, rec)
	cases := []struct {
		name    string
		body    []byte
		want    int
		outcome string
	}{
		{"unsigned", []byte(unsignedVector()), http.StatusUnauthorized, "bad_signature"},
		{"tampered amount", []byte(strings.Replace(vectorJSON, `"Amount": 9855`, `"Amount": 985500`, 1)), http.StatusUnauthorized, "bad_signature"},
		{"signed with another password", signedBody(t, unsignedVector(), "AnotherPassword0"), http.StatusUnauthorized, "bad_signature"},
		{"not JSON", []byte("TerminalKey=1321054611234DEMO"), http.StatusUnauthorized, "bad_signature"},
		{"another terminal", signedBody(t, strings.Replace(unsignedVector(), vectorTerminal, "OtherTerminal", 1), vectorPassword), http.StatusBadRequest, "account_mismatch"},
		{"signed but invalid", signedBody(t, strings.Replace(unsignedVector(), `"Amount": 9855`, `"Amount": -1`, 1), vectorPassword), http.StatusBadRequest, "invalid_payload"},
		{"too large", bytes.Repeat([]byte(" "), 5000), http.StatusRequestEntityTooLarge, "too_large"},
	}
	for _, tc := range cases {
		w := post(h, tc.body)
		if w.Code != tc.want || w.Body.String() == "OK" {
			t.Errorf("%s: %d %q, want %d and a body other than OK", tc.name, w.Code, w.Body, tc.want)
		}
		if !strings.Contains(logs.String(), `"outcome":"`+tc.outcome+`"`) {
			t.Errorf("%s: no %s in the log:\n%s", tc.name, tc.outcome, logs)
		}
	}
	if len(rec.events) != 0 {
		t.Errorf("%d rejected requests reached the recorder", len(rec.events))
	}
	for _, leak := range []string{vectorPassword, "AnotherPassword0", "430000", "OtherTerminal"} {
		if strings.Contains(logs.String(), leak) {
			t.Errorf("the log holds a password or the body (%q):\n%s", leak, logs)
		}
	}
}

// A confirmation, delivered again and with PaymentId spelled as a string,
// is one event.
func TestGatewayRedeliveries(t *testing.T) {
	t.Parallel()
	rec := &recorder{record: stored}
	h, _ := newGateway(t, rec)
	confirmed := strings.Replace(unsignedVector(), "AUTHORIZED", "CONFIRMED", 1)
	for _, body := range [][]byte{
		signedBody(t, confirmed, vectorPassword),
		signedBody(t, confirmed, vectorPassword),
		signedBody(t, strings.Replace(confirmed, "8742591", `"8742591"`, 1), vectorPassword),
	} {
		if w := post(h, body); w.Code != http.StatusOK || w.Body.String() != "OK" {
			t.Fatalf("%d %q", w.Code, w.Body)
		}
	}
	if len(rec.events) != 3 {
		t.Fatalf("%d events recorded", len(rec.events))
	}
	for _, ev := range rec.events {
		if ev.EventID != "1321054611234DEMO:8742591:CONFIRMED" || ev.Kind != fulfillment.EventPaymentConfirmed {
			t.Errorf("event %s", eventString(ev))
		}
	}
}
