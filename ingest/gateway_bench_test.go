package ingest_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// countingRecorder is an ingest.Recorder that stores nothing: it counts.
type countingRecorder struct{ n atomic.Int64 }

func (r *countingRecorder) RecordEvent(context.Context, fulfillment.ProviderEvent, []byte) (fulfillment.InboxReceipt, error) {
	r.n.Add(1)
	return fulfillment.InboxReceipt{}, nil
}

func readFile(b *testing.B, parts ...string) []byte {
	b.Helper()
	data, err := os.ReadFile(filepath.Join(parts...))
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// benchGateway serves one endpoint with a counting recorder and a JSON log
// to io.Discard (the gateway logs a line per accepted webhook, as in
// production).
func benchGateway(b *testing.B, ep fulfillment.Endpoint, a ingest.Adapter) (http.Handler, *countingRecorder) {
	b.Helper()
	rec := &countingRecorder{}
	g := ingest.NewGateway([]ingest.Endpoint{{Endpoint: ep, Adapter: a}}, rec, ingest.Options{},
		slog.New(slog.NewJSONHandler(io.Discard, nil)))
	return g.Handler(), rec
}

// BenchmarkGateway is one webhook through the gateway's HTTP handler:
// read the body, verify, parse, record (a no-op), acknowledge, count and
// log — on the providers' published test vectors.
func BenchmarkGateway(b *testing.B) {
	b.Run("yolfi", func(b *testing.B) {
		// The published vector: its secret, org and signature.
		body := readFile(b, "yolfi", "testdata", "yolfi_payment_confirmed.json")
		sig := string(readFile(b, "yolfi", "testdata", "yolfi_payment_confirmed.sig"))
		ep := fulfillment.Endpoint{ID: "yolfi-live", Provider: fulfillment.ProviderYolfi, OrgID: "org_7Hc2Lq", Environment: fulfillment.EnvLive}
		a, err := yolfi.New(ep, [][]byte{[]byte("ywhsec_9f3Kq2LmV7xRt4Pz8NcB1dHs")}, nil)
		if err != nil {
			b.Fatal(err)
		}
		h, rec := benchGateway(b, ep, a)
		runWebhook(b, h, rec, "/webhooks/yolfi-live", body, func(hd http.Header) {
			hd.Set(yolfi.SignatureHeader, sig)
			hd.Set(yolfi.EventIDHeader, "evt_01JDV6Q8W3ZK7M2N4P5R6S7T8V")
		})
	})
	b.Run("tbank", func(b *testing.B) {
		// The bank's published notification and its terminal password.
		body := bytes.TrimSpace(readFile(b, "tbank", "testdata", "tbank_notification_authorized.json"))
		ep := fulfillment.Endpoint{ID: "tbank-live", Provider: fulfillment.ProviderTBank, OrgID: "org_a", Environment: fulfillment.EnvLive}
		var opts yaml.Node
		if err := yaml.Unmarshal([]byte("terminal_key: 1321054611234DEMO"), &opts); err != nil {
			b.Fatal(err)
		}
		a, err := tbank.New(ep, [][]byte{[]byte("Dfsfh56dgKl")}, opts.Content[0])
		if err != nil {
			b.Fatal(err)
		}
		h, rec := benchGateway(b, ep, a)
		runWebhook(b, h, rec, "/webhooks/tbank-live", body, func(hd http.Header) { hd.Set("Content-Type", "application/json") })
	})
}

func runWebhook(b *testing.B, h http.Handler, rec *countingRecorder, path string, body []byte, headers func(http.Header)) {
	b.Helper()
	b.ReportAllocs()
	rd := bytes.NewReader(body)
	for b.Loop() {
		rd.Reset(body)
		req := httptest.NewRequest(http.MethodPost, path, rd)
		headers(req.Header)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, strings.TrimSpace(w.Body.String()))
		}
	}
	if rec.n.Load() == 0 {
		b.Fatal("nothing reached the recorder")
	}
}
