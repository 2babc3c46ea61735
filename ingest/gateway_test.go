package ingest_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// recorder is a hand-written fake of ingest.Recorder.
type recorder struct {
	record func(fulfillment.ProviderEvent) (fulfillment.InboxReceipt, error)
	mu     sync.Mutex
	calls  int
}

func (r *recorder) RecordEvent(_ context.Context, ev fulfillment.ProviderEvent, _ []byte) (fulfillment.InboxReceipt, error) {
	r.mu.Lock()
	r.calls++
	r.mu.Unlock()
	return r.record(ev)
}

const secret = "ywhsec_gateway_test_0123456789"

func newGateway(t *testing.T, rec ingest.Recorder) (http.Handler, *bytes.Buffer) {
	t.Helper()
	logs := &bytes.Buffer{}
	ep := fulfillment.Endpoint{ID: "ep", Provider: fulfillment.ProviderYolfi, OrgID: "org_a", Environment: fulfillment.EnvLive}
	adapter, err := yolfi.New(ep, [][]byte{[]byte(secret)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := ingest.NewGateway([]ingest.Endpoint{{Endpoint: ep, Adapter: adapter}},
		rec, ingest.Options{MaxBodyBytes: 4096}, slog.New(slog.NewJSONHandler(logs, nil)))
	return g.Handler(), logs
}

func post(h http.Handler, body []byte, sign string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", "/webhooks/ep", bytes.NewReader(body))
	req.Header.Set(yolfi.EventIDHeader, "evt_1")
	if sign != "" {
		req.Header.Set("X-Yolfi-Signature", yolfi.Sign([]byte(sign), body))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

const body = `{"id":"evt_1","type":"payment.confirmed","livemode":true,"data":{"merchantOrderId":"m-1","invoiceId":"inv_1","amount":"25.000000","token":"USDT","network":"TRON","customer":{"clientReferenceId":"personal-data-42"}}}`

func TestGatewayAcknowledgesOnlyCommittedEvents(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		result error
		dup    bool
		want   int
	}{
		{"committed", nil, false, http.StatusOK},
		{"duplicate", nil, true, http.StatusOK},
		{"storage down", fmt.Errorf("%w: database", fulfillment.ErrUnavailable), false, http.StatusServiceUnavailable},
		{"unexpected error", errors.New("boom"), false, http.StatusInternalServerError},
		{"refused event", &fulfillment.ValidationError{Violations: []fulfillment.FieldViolation{{Field: "event_id", Description: "bad"}}}, false, http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{record: func(ev fulfillment.ProviderEvent) (fulfillment.InboxReceipt, error) {
				if ev.OrgID != "org_a" || ev.EventID != "evt_1" {
					t.Errorf("recorded %+v", ev)
				}
				return fulfillment.InboxReceipt{Duplicate: tc.dup}, tc.result
			}}
			h, logs := newGateway(t, rec)
			w := post(h, []byte(body), secret)
			if w.Code != tc.want {
				t.Errorf("status %d, want %d (%s)", w.Code, tc.want, w.Body)
			}
			if tc.want == http.StatusServiceUnavailable && w.Header().Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
			if strings.Contains(logs.String(), "personal-data-42") || strings.Contains(logs.String(), secret) {
				t.Errorf("the log holds the body or the secret:\n%s", logs)
			}
		})
	}
}

// timeoutReader fails as a connection's body does when the server's read
// deadline passes (http.read_timeout).
type timeoutReader struct{}

func (timeoutReader) Read([]byte) (int, error) { return 0, os.ErrDeadlineExceeded }

func TestGatewayRejectsBeforeRecording(t *testing.T) {
	t.Parallel()
	rec := &recorder{record: func(fulfillment.ProviderEvent) (fulfillment.InboxReceipt, error) {
		return fulfillment.InboxReceipt{}, nil
	}}
	h, logs := newGateway(t, rec)
	cases := []struct {
		name string
		do   func() *httptest.ResponseRecorder
		want int
	}{
		{"unsigned", func() *httptest.ResponseRecorder { return post(h, []byte(body), "") }, 401},
		{"wrong secret", func() *httptest.ResponseRecorder { return post(h, []byte(body), "another-secret-0123456789") }, 401},
		{"too large", func() *httptest.ResponseRecorder { return post(h, bytes.Repeat([]byte("x"), 5000), secret) }, 413},
		{"declared too large", func() *httptest.ResponseRecorder {
			// A signed body whose declared length is past the limit:
			// refused as declared, before any of it is read.
			req := httptest.NewRequest("POST", "/webhooks/ep", strings.NewReader(body))
			req.Header.Set(yolfi.EventIDHeader, "evt_1")
			req.Header.Set("X-Yolfi-Signature", yolfi.Sign([]byte(secret), []byte(body)))
			req.ContentLength = 1 << 30
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w
		}, 413},
		{"not JSON", func() *httptest.ResponseRecorder { return post(h, []byte("nope"), secret) }, 400},
		{"gzipped, signed over what was sent", func() *httptest.ResponseRecorder {
			var gz bytes.Buffer
			zw := gzip.NewWriter(&gz)
			_, _ = zw.Write([]byte(body))
			_ = zw.Close()
			req := httptest.NewRequest("POST", "/webhooks/ep", bytes.NewReader(gz.Bytes()))
			req.Header.Set(yolfi.EventIDHeader, "evt_1")
			req.Header.Set("X-Yolfi-Signature", yolfi.Sign([]byte(secret), gz.Bytes()))
			req.Header.Set("Content-Encoding", "gzip")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w
		}, 415},
		{"a body that does not arrive in time", func() *httptest.ResponseRecorder {
			req := httptest.NewRequest("POST", "/webhooks/ep", io.MultiReader(strings.NewReader(body[:10]), timeoutReader{}))
			req.Header.Set(yolfi.EventIDHeader, "evt_1")
			req.Header.Set("X-Yolfi-Signature", yolfi.Sign([]byte(secret), []byte(body)))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			return w
		}, 408},
		{"org mismatch", func() *httptest.ResponseRecorder {
			return post(h, []byte(strings.Replace(body, `"livemode":true`, `"livemode":true,"orgId":"org_b"`, 1)), secret)
		}, 400},
		{"GET", func() *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("GET", "/webhooks/ep", http.NoBody))
			return w
		}, 405},
		{"unknown endpoint", func() *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, httptest.NewRequest("POST", "/webhooks/other", strings.NewReader(body)))
			return w
		}, 404},
	}
	for _, tc := range cases {
		if w := tc.do(); w.Code != tc.want {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, w.Code, tc.want, w.Body)
		}
	}
	if rec.calls != 0 {
		t.Errorf("%d rejected requests reached the recorder", rec.calls)
	}
	if strings.Contains(logs.String(), "personal-data-42") || strings.Contains(logs.String(), secret) {
		t.Errorf("the log holds the body or the secret:\n%s", logs)
	}
}

func TestGatewayRateLimitsRejectionLogs(t *testing.T) {
	t.Parallel()
	h, logs := newGateway(t, &recorder{})
	for range 500 {
		post(h, []byte(body), "forged-secret-0123456789")
	}
	if lines := strings.Count(logs.String(), "\n"); lines > 60 {
		t.Errorf("500 forged requests wrote %d log lines; the rejection log must be rate-limited", lines)
	}
}

// A GET on an endpoint's URL (a browser, a health check, fulfillctl
// trigger's probe) is refused 405 and counted, and logged at INFO: nothing
// a provider sent went wrong. A request for an unknown endpoint still warns.
func TestGatewayLogsAWrongMethodAtInfo(t *testing.T) {
	t.Parallel()
	h, logs := newGateway(t, &recorder{})
	for _, c := range []struct {
		method, path string
		code         int
		level        string
	}{
		{"GET", "/webhooks/ep", 405, "INFO"},
		{"HEAD", "/webhooks/ep", 405, "INFO"},
		{"GET", "/webhooks/other", 404, "WARN"},
	} {
		logs.Reset()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(c.method, c.path, http.NoBody))
		var line struct{ Level, Msg string }
		if err := json.Unmarshal([]byte(strings.TrimSpace(logs.String())), &line); err != nil || w.Code != c.code || line.Level != c.level {
			t.Errorf("%s %s: %d, logged %q (%v), want %d at %s", c.method, c.path, w.Code, logs, err, c.code, c.level)
		}
	}
}
