package e2e_test

// Observability (issue 12, items 4 and 5): the metrics a scrape finds after
// real traffic, one trace from the webhook gateway through RecordEvent to
// the event's processing, and the per-event log lines.

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// startObserved runs the service in-process with log and app options, on
// its own database.
func startObserved(t *testing.T, log *slog.Logger, configure func(*config.Config), opts ...app.Option) *stack {
	t.Helper()
	return startService(t, pgtest.DB(t), configure, log, opts...)
}

// After a paid order (a webhook, its processing, an order.fulfilled
// delivery, an extra payment's reconciliation item), /metrics holds every
// series the operations section names.
func TestMetricsAfterTraffic(t *testing.T) {
	t.Parallel()
	crm := startReceiver(t, true, nil)
	s := startObserved(t, slog.New(slog.NewJSONHandler(io.Discard, nil)),
		withDestinations(destination(t, "crm", crm, true, 5*time.Second, "order.fulfilled")))
	order := s.createOrder(t, "live", "obs-metrics")
	s.pay(t, "obs-metrics")
	s.sendOK(t, event(yolfi.TypePaymentConfirmed, "obs-metrics", "inv_second")) // an extra payment: an item
	// A test-mode event: decided by its storing, counted by its decision;
	// with no time of receipt read back, it adds no latency sample (a zero
	// time would add one of 292 years).
	off := false
	testMode := event(yolfi.TypePaymentConfirmed, "obs-metrics", "inv_test")
	testMode.Livemode = &off
	s.sendOK(t, testMode)
	s.settle(t)
	waitFor(t, "order.fulfilled delivered", func() bool { return crm.TotalEffects() >= 1 })
	if _, err := s.client.GetOrder(authed(orgAToken), &fulfillmentv1.GetOrderRequest{OrderId: order.GetId()}); err != nil {
		t.Fatal(err)
	}

	resp, err := http.Get(s.restURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d", resp.StatusCode)
	}
	text := string(body)
	for _, series := range []string{
		`fulfillment_webhook_requests_total{endpoint="yolfi-live",outcome="accepted"} 3`,
		`fulfillment_webhook_ack_duration_seconds_count{endpoint="yolfi-live"} 3`,
		`fulfillment_inbox_events_processed_total{decision="test_mode_ignored"} 1`,
		`fulfillment_inbox_processing_latency_seconds_bucket{le="+Inf"} 2`,
		`fulfillment_webhook_ack_duration_seconds_bucket{endpoint="yolfi-live",le="0.1"}`,
		`fulfillment_inbox_pending_events 0`,
		`fulfillment_inbox_oldest_pending_age_seconds 0`,
		`fulfillment_inbox_processing_latency_seconds_count 2`,
		`fulfillment_inbox_events_processed_total{decision="fulfilled"} 1`,
		`fulfillment_outbox_messages{destination="crm",state="pending"}`,
		`fulfillment_outbox_messages{destination="crm",state="failed"} 0`,
		`fulfillment_outbox_messages{destination="crm",state="uncertain"} 0`,
		`fulfillment_outbox_destination_disabled{destination="crm"} 0`,
		`fulfillment_outbox_attempts_total{destination="crm",outcome="delivered"}`,
		`fulfillment_outbox_attempt_duration_seconds_count{destination="crm"}`,
		`fulfillment_outbox_delivery_latency_seconds_count{destination="crm"}`,
		`fulfillment_reconciliation_open_items{kind="extra_payment"} 1`,
		`fulfillment_db_pool_acquired_connections{pool="main"}`,
		`fulfillment_db_pool_idle_connections{pool="main"}`,
		`fulfillment_db_pool_total_connections{pool="main"}`,
		`fulfillment_db_pool_max_connections{pool="main"} 20`,
		`fulfillment_db_pool_acquires_total{pool="main"}`,
		`fulfillment_db_pool_acquire_waits_total{pool="main"}`,
		`fulfillment_db_pool_acquire_wait_seconds_total{pool="main"}`,
		`fulfillment_db_scrape_success 1`,
		`fulfillment_queue_up{queue="inbox"} 1`,
		`fulfillment_build_info{built_at="unknown",commit=`,
		`fulfillment_queue_up{queue="housekeeping"} 1`,
		`fulfillment_db_scrape_duration_seconds`,
	} {
		if !strings.Contains(text, "\n"+series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	// TestMetricsOfEveryCallAndQueue, whose service runs every queue,
	// checks the series the alert rules name.
	if t.Failed() {
		t.Logf("/metrics:\n%s", grepLines(text, "fulfillment_"))
	}
	// Tracing is off here: nothing stores a trace context.
	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE trace_parent IS NOT NULL"); n != 0 {
		t.Errorf("%d events stored a trace context with tracing off", n)
	}
}

// grepLines keeps the lines of text holding s.
func grepLines(text, s string) string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.Contains(line, s) && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// One trace follows a webhook: the gateway's HTTP span, RecordEvent's span
// (in-process: the gateway calls it directly), the queries, and —
// later, in a worker — the event's processing span, a child of RecordEvent
// through the trace_parent stored with the event.
func TestTraceFollowsWebhook(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	queued := func(c *config.Config) { c.Inbox.QueueOnly = true }
	s := startObserved(t, slog.New(slog.NewJSONHandler(io.Discard, nil)), queued, app.WithTracerProvider(tp))
	s.createOrder(t, "live", "obs-trace")
	ev := event(yolfi.TypePaymentConfirmed, "obs-trace", "inv_obs-trace")
	s.sendOK(t, ev)
	s.settle(t)

	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE trace_parent LIKE '00-%'"); n != 1 {
		t.Errorf("events stored with a traceparent: %d, want 1", n)
	}
	var gateway, record, process tracetest.SpanStub
	waitFor(t, "the event's processing span", func() bool {
		for _, sp := range spans.GetSpans() {
			switch {
			case sp.SpanKind == trace.SpanKindServer && hasAttr(sp, "webhook.event_id", ev.ID):
				gateway = sp
			case strings.HasSuffix(sp.Name, "FulfillmentService/RecordEvent"):
				record = sp
			case sp.Name == "inbox.process_event" && hasAttr(sp, "webhook.event_id", ev.ID):
				process = sp
			}
		}
		return process.SpanContext.IsValid()
	})
	if !gateway.SpanContext.IsValid() || !record.SpanContext.IsValid() {
		t.Fatalf("gateway span %v, RecordEvent span %v: want both", gateway.Name, record.Name)
	}
	tid := gateway.SpanContext.TraceID()
	if record.SpanContext.TraceID() != tid || process.SpanContext.TraceID() != tid {
		t.Errorf("traces: gateway %s, RecordEvent %s, processing %s; want one", tid,
			record.SpanContext.TraceID(), process.SpanContext.TraceID())
	}
	if process.Parent.SpanID() != record.SpanContext.SpanID() {
		t.Errorf("processing span's parent = %s, want RecordEvent's span %s", process.Parent.SpanID(), record.SpanContext.SpanID())
	}
	if !hasAttr(process, "inbox.decision", "fulfilled") || len(process.Links) != 1 {
		t.Fatalf("processing span: attributes %v, links %v; want decision fulfilled and a link to its batch", process.Attributes, process.Links)
	}
	queries := 0
	for _, sp := range spans.GetSpans() {
		if sp.SpanKind == trace.SpanKindClient && hasAttrKey(sp, "db.query.text") && sp.SpanContext.TraceID() == process.Links[0].SpanContext.TraceID() {
			queries++
		}
	}
	if queries == 0 {
		t.Errorf("no query spans under the processing batch")
	}
}

// An event decided as it is stored has its processing span in the
// webhook's trace too: a child of RecordEvent, with no batch to link to.
func TestTraceOfEventDecidedOnReceipt(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := startObserved(t, slog.New(slog.NewJSONHandler(io.Discard, nil)), nil, app.WithTracerProvider(tp))
	s.createOrder(t, "live", "obs-trace-receipt")
	ev := event(yolfi.TypePaymentConfirmed, "obs-trace-receipt", "inv_obs-trace-receipt")
	s.sendOK(t, ev)
	if n := s.count(t, "SELECT count(*) FROM inbox_work"); n != 0 {
		t.Fatalf("%d events queued; want the payment decided as it was stored", n)
	}
	var record, process tracetest.SpanStub
	waitFor(t, "the event's processing span", func() bool {
		for _, sp := range spans.GetSpans() {
			switch {
			case strings.HasSuffix(sp.Name, "FulfillmentService/RecordEvent"):
				record = sp
			case sp.Name == "inbox.process_event" && hasAttr(sp, "webhook.event_id", ev.ID):
				process = sp
			}
		}
		return process.SpanContext.IsValid() && record.SpanContext.IsValid()
	})
	if process.SpanContext.TraceID() != record.SpanContext.TraceID() || process.Parent.SpanID() != record.SpanContext.SpanID() {
		t.Errorf("processing span in trace %s under %s; want a child of RecordEvent's span %s", process.SpanContext.TraceID(),
			process.Parent.SpanID(), record.SpanContext.SpanID())
	}
	if !hasAttr(process, "inbox.decision", "fulfilled") || len(process.Links) != 0 {
		t.Errorf("processing span: attributes %v, links %v; want decision fulfilled and no batch", process.Attributes, process.Links)
	}
}

func hasAttr(sp tracetest.SpanStub, key, value string) bool {
	for _, a := range sp.Attributes {
		if string(a.Key) == key && a.Value.String() == value {
			return true
		}
	}
	return false
}

func hasAttrKey(sp tracetest.SpanStub, key string) bool {
	for _, a := range sp.Attributes {
		if string(a.Key) == key {
			return true
		}
	}
	return false
}

// The log of a busy service: one line per new event, its outcome (event
// id, order, decision; the gateway's acceptance is at DEBUG), one per
// redelivered webhook, no line per successful hot call (RecordEvent,
// GetOrder, CheckAccess: DEBUG), never a body. The bytes written per paid
// order are reported.
func TestLogLinesPerEvent(t *testing.T) {
	t.Parallel()
	sink := &logSink{}
	s := startObserved(t, floodLogger(sink), nil)
	const orders = 40
	var (
		ids  []string
		last yolfi.Payload
	)
	for i := range orders {
		mo := "obs-log-" + strconv.Itoa(i)
		o := s.createOrder(t, "live", mo)
		ids = append(ids, o.GetId())
		last = event(yolfi.TypePaymentConfirmed, mo, "inv_"+mo)
		s.sendOK(t, last)
	}
	s.sendOK(t, last) // a redelivery
	// A test-mode event on the live endpoint is decided by its storing
	// (test_mode_ignored): it writes its line as the others do.
	off := false
	testMode := event(yolfi.TypePaymentConfirmed, "obs-log-0", "inv_obs-log-test")
	testMode.Livemode = &off
	s.sendOK(t, testMode)
	s.settle(t)
	before := len(sink.lines())
	reads := 0
	for _, id := range ids {
		for range 5 {
			if _, err := s.client.GetOrder(authed(orgAToken), &fulfillmentv1.GetOrderRequest{OrderId: id}); err != nil {
				t.Fatal(err)
			}
			reads++
		}
	}
	waitFor(t, "the log to settle", func() bool { time.Sleep(50 * time.Millisecond); return true })
	if n := len(sink.lines()) - before; n != 0 {
		t.Errorf("%d successful GetOrder calls wrote %d lines at INFO, want none", reads, n)
	}

	lines := checkLogLines(t, sink.lines())
	var accepted, duplicates []any
	processed := map[string]map[string]any{}
	bytes := 0
	for i, rec := range lines {
		bytes += len(sink.lines()[i]) + 1
		switch rec["msg"] {
		case "webhook accepted":
			accepted = append(accepted, rec["event_id"])
		case "webhook duplicate":
			duplicates = append(duplicates, rec["event_id"])
			if _, ok := rec["duration_ms"].(float64); !ok {
				t.Errorf("duplicate line without duration_ms: %v", rec)
			}
		case "event processed":
			processed[rec["event_id"].(string)] = rec
		case "rpc":
			if rec["method"] != "/fulfillment.v1.FulfillmentService/CreateOrder" {
				t.Errorf("rpc line at INFO for a hot method: %v", rec)
			}
		}
		for _, secretish := range []string{"0xabc", "25.000000", "acct_", liveSecret, orgAToken} {
			if strings.Contains(sink.lines()[i], secretish) {
				t.Errorf("a log line holds %q (a body's value or a secret): %s", secretish, sink.lines()[i])
			}
		}
	}
	if rec := processed[testMode.ID]; rec["decision"] != "test_mode_ignored" || rec["endpoint"] != liveEP {
		t.Errorf("processed line of the test-mode event: %v, want decision test_mode_ignored", rec)
	}
	delete(processed, testMode.ID)
	// A new event's one line at INFO is its outcome; a redelivery, which
	// has none, writes its own.
	if len(accepted) != 0 || len(processed) != orders {
		t.Errorf("accepted lines for %v, processed lines for %d events; want none and %d", accepted, len(processed), orders)
	}
	if len(duplicates) != 1 || duplicates[0] != last.ID {
		t.Errorf("duplicate lines for %v, want one for %s", duplicates, last.ID)
	}
	orderIDs := map[string]bool{}
	for _, id := range ids {
		orderIDs[id] = true
	}
	for ev, rec := range processed {
		if rec["decision"] != "fulfilled" || !orderIDs[rec["order_id"].(string)] {
			t.Errorf("processed line %v of %s: want decision fulfilled, one of the orders", rec, ev)
		}
	}
	t.Logf("log volume: %d lines, %d bytes for %d orders (create, pay, process) and %d GetOrder calls: %.0f bytes per paid order",
		len(lines), bytes, orders, reads, float64(bytes)/orders)
}

// A REST call is a server span continuing the caller's traceparent, and the
// gRPC call the gateway makes of it is in the same trace.
func TestTraceFollowsRESTCall(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := startObserved(t, slog.New(slog.NewJSONHandler(io.Discard, nil)), nil, app.WithTracerProvider(tp))
	order := s.createOrder(t, "live", "obs-rest")
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, err := http.NewRequest(http.MethodGet, s.restURL+"/v1/orders/"+order.GetId(), http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+orgAToken)
	req.Header.Set("traceparent", "00-"+traceID+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET order = %d", resp.StatusCode)
	}
	var rest, grpcCall tracetest.SpanStub
	waitFor(t, "the REST and gRPC spans", func() bool {
		for _, sp := range spans.GetSpans() {
			switch {
			case sp.SpanKind == trace.SpanKindServer && sp.Name == "REST GET":
				rest = sp
			case sp.SpanKind == trace.SpanKindServer && strings.HasSuffix(sp.Name, "FulfillmentService/GetOrder"):
				grpcCall = sp
			}
		}
		return rest.SpanContext.IsValid() && grpcCall.SpanContext.IsValid()
	})
	if got := rest.SpanContext.TraceID().String(); got != traceID {
		t.Errorf("REST span's trace %s, want the caller's %s", got, traceID)
	}
	if got := grpcCall.SpanContext.TraceID().String(); got != traceID {
		t.Errorf("GetOrder span's trace %s, want the caller's %s", got, traceID)
	}
}
