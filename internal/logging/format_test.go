package logging_test

import (
	"bytes"
	"context"
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

// The level is written as slog writes it without a ReplaceAttr, custom
// levels included, in both formats: the handler's shortcut for it (a
// string, not a value encoding/json marshals) changes no line.
func TestFormatsWriteLevelsAsSlogDoes(t *testing.T) {
	t.Parallel()
	for _, format := range []string{logging.FormatJSON, logging.FormatText} {
		for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo, slog.LevelWarn, slog.LevelError, slog.LevelWarn + 2} {
			var got, want bytes.Buffer
			opts := &slog.HandlerOptions{Level: slog.LevelDebug}
			plain := slog.Handler(slog.NewJSONHandler(&want, opts))
			if format == logging.FormatText {
				plain = slog.NewTextHandler(&want, opts)
			}
			slog.New(logging.NewFormatHandler(&got, format, slog.LevelDebug, 0)).Log(context.Background(), level, "m", "k", "v")
			slog.New(plain).Log(context.Background(), level, "m", "k", "v")
			// The lines differ in their time only.
			strip := func(b *bytes.Buffer) string {
				line := b.String()
				if i := strings.Index(line, "level"); i > 0 {
					return line[i:]
				}
				return line
			}
			if strip(&got) != strip(&want) {
				t.Errorf("%s at %v: wrote %q, slog writes %q", format, level, got.String(), want.String())
			}
		}
	}
}
