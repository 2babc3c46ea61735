package logging_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/internal/logging"
)

// log.format text writes key=value lines for a terminal, json one JSON
// object per line; both write durations in milliseconds as duration_ms.
func TestFormats(t *testing.T) {
	t.Parallel()
	write := func(format string) string {
		var buf bytes.Buffer
		log := slog.New(logging.NewFormatHandler(&buf, format, slog.LevelInfo, time.Second))
		log.Info("event processed", "event_id", "evt_1", "duration", 1500*time.Microsecond)
		return strings.TrimSpace(buf.String())
	}

	text := write(logging.FormatText)
	if json.Valid([]byte(text)) || strings.HasPrefix(text, "{") {
		t.Errorf("text format wrote JSON: %s", text)
	}
	for _, want := range []string{"level=INFO", `msg="event processed"`, "event_id=evt_1", "duration_ms=1.5"} {
		if !strings.Contains(text, want) {
			t.Errorf("text line lacks %q: %s", want, text)
		}
	}

	var rec map[string]any
	if err := json.Unmarshal([]byte(write(logging.FormatJSON)), &rec); err != nil {
		t.Fatalf("json format: %v", err)
	}
	if rec["duration_ms"] != 1.5 || rec["event_id"] != "evt_1" {
		t.Errorf("json line = %v, want duration_ms 1.5 and event_id evt_1", rec)
	}
	if _, ok := rec["duration"]; ok {
		t.Errorf("json line keeps duration in nanoseconds: %v", rec)
	}
}
