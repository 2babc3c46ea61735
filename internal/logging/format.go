package logging

import (
	"io"
	"log/slog"
	"math"
	"time"
)

// Formats of NewFormatHandler.
const (
	FormatJSON = "json"
	FormatText = "text"
)

// NewFormatHandler returns a Handler writing to w in format (FormatText:
// key=value lines for a terminal; anything else: JSON lines), records below
// level left out, each cause of warnings written once per interval.
// Durations are written in milliseconds under their key with "_ms"
// appended (duration → duration_ms), in both formats.
func NewFormatHandler(w io.Writer, format string, level slog.Leveler, interval time.Duration) *Handler {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: millis}
	if format == FormatText {
		return NewHandler(slog.NewTextHandler(w, opts), interval)
	}
	return NewHandler(slog.NewJSONHandler(w, opts), interval)
}

// millis writes a duration as a number of milliseconds (three decimals)
// under key_ms: JSON would write nanoseconds and text Go's notation.
//
// It also hands the record's level back as a string. A handler with a
// ReplaceAttr passes the level to it as a value of any kind, which the
// JSON handler then writes through encoding/json (Level.MarshalJSON): a
// reflection walk per line, 3% of the service's CPU at thousands of
// events a second, for the same text.
func millis(groups []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.Float64(a.Key+"_ms", Millis(a.Value.Duration()))
	}
	if a.Value.Kind() == slog.KindAny && len(groups) == 0 && a.Key == slog.LevelKey {
		if l, ok := a.Value.Any().(slog.Level); ok {
			return slog.String(a.Key, l.String())
		}
	}
	return a
}

// Millis is d in milliseconds, rounded to the microsecond.
func Millis(d time.Duration) float64 {
	return math.Round(float64(d)/1e3) / 1e3
}
