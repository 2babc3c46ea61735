package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/internal/logging"
)

// eventsInbox is a fakeInbox that tells each event's details, as storage
// does.
type eventsInbox struct {
	fakeInbox
	events map[int64]fulfillment.ProcessedEvent
}

func (e *eventsInbox) InboxProcessEvents(context.Context, []int64, string) (map[int64]fulfillment.ProcessedEvent, error) {
	return e.events, nil
}

// Each processed event writes one INFO line saying what was decided: its
// event id, its order, the decision — and never its body or the customer's
// reference, which the processor is never given.
func TestInboxDecisionLogLine(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(logging.NewJSONHandler(&buf, slog.LevelInfo, 0))
	var observed []fulfillment.ProcessedEvent
	work := &eventsInbox{events: map[int64]fulfillment.ProcessedEvent{
		7: {
			Outcome: fulfillment.Outcome{Decision: fulfillment.DecisionFulfilled, Reason: "paid in full"},
			EventID: "evt_123", Provider: "yolfi", EndpointID: "yolfi-live", Kind: fulfillment.EventPaymentConfirmed,
			OrderID: "0193-order", ReceivedAt: time.Now().Add(-1500 * time.Millisecond),
		},
	}}
	table := inboxWorker{work: work, log: log, opts: InboxOptions{
		OnProcessed: func(p fulfillment.ProcessedEvent) { observed = append(observed, p) },
	}}
	table.opts.Tracer = noop.NewTracerProvider().Tracer("") // as NewInboxWith sets it
	if err := table.Process(context.Background(), "w1", []Claim{{ID: 7, Attempts: 1}}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("want one line, got %d:\n%s", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"level": "INFO", "msg": "event processed", "event_id": "evt_123", "order_id": "0193-order",
		"decision": "fulfilled", "inbox_id": float64(7), "endpoint": "yolfi-live",
	} {
		if rec[k] != want {
			t.Errorf("%s = %v, want %v (line %s)", k, rec[k], want, lines[0])
		}
	}
	if ms, ok := rec["since_received_ms"].(float64); !ok || ms < 1500 || ms > 60_000 {
		t.Errorf("since_received_ms = %v, want about 1500 (milliseconds)", rec["since_received_ms"])
	}
	for _, k := range []string{"body", "raw_body", "payload", "customer_ref"} {
		if _, ok := rec[k]; ok {
			t.Errorf("the line carries %s: %s", k, lines[0])
		}
	}
	if len(observed) != 1 || observed[0].EventID != "evt_123" {
		t.Errorf("observed %+v, want the event once", observed)
	}
}
