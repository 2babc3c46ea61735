package logging

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

const interval = 10 * time.Second

// clock is a settable time source. Tests move it only while nothing logs.
type clock struct{ t time.Time }

func newClock() *clock { return &clock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// jsonHandler returns a handler on this clock writing JSON lines to w, all
// levels, with the interval of these tests.
func (c *clock) jsonHandler(w *bytes.Buffer) *Handler {
	h := NewJSONHandler(w, slog.LevelDebug, interval)
	h.lim.now = c.now
	return h
}

// letters spells i in base 26 with letters only: distinct numbers make
// distinct causes (digits would count as one placeholder).
func letters(i int) string {
	s := []byte{byte('a' + i%26)}
	for i /= 26; i > 0; i /= 26 {
		s = append(s, byte('a'+i%26))
	}
	return string(s)
}

// records decodes what a JSON handler wrote, one object per line.
func records(t *testing.T, out *bytes.Buffer) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(out.String()) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not one JSON object per line (%v): %q", err, line)
		}
		recs = append(recs, rec)
	}
	return recs
}

// summary is "LEVEL msg" and, when present, " suppressed=N".
func summary(rec map[string]any) string {
	s := fmt.Sprintf("%v %v", rec["level"], rec["msg"])
	if n, ok := rec[SuppressedKey]; ok {
		s += fmt.Sprintf(" suppressed=%v", n)
	}
	return s
}

func summaries(t *testing.T, out *bytes.Buffer) []string {
	t.Helper()
	var s []string
	for _, rec := range records(t, out) {
		s = append(s, summary(rec))
	}
	return s
}

// errPGConnect is how pgconn reports a failed connection to a host with
// two addresses: several lines, indented with tabs.
var errPGConnect = errors.New("failed to connect to `user=app database=fulfillment`:\n" +
	"\t127.0.0.1:5432 (localhost): dial error: dial tcp 127.0.0.1:5432: connect: connection refused\n" +
	"\t[::1]:5432 (localhost): dial error: dial tcp [::1]:5432: connect: connection refused")

func TestHandlerRateLimitsByCause(t *testing.T) {
	t.Parallel()
	unavailable := fmt.Errorf("unavailable: %w", errPGConnect)
	cases := []struct {
		name string
		run  func(log *slog.Logger, c *clock)
		want []string
	}{
		{"same cause repeated: one line, then the count", func(log *slog.Logger, c *clock) {
			for i := range 5 {
				log.Warn("dependency unavailable", "error", unavailable, "request_id", fmt.Sprint("req-", i))
			}
			c.advance(interval)
			log.Warn("dependency unavailable", "error", unavailable, "request_id", "req-5")
			c.advance(interval)
			log.Warn("dependency unavailable", "error", unavailable, "request_id", "req-6")
		}, []string{"WARN dependency unavailable", "WARN dependency unavailable suppressed=4", "WARN dependency unavailable"}},

		{"not before the interval has passed", func(log *slog.Logger, c *clock) {
			log.Warn("claiming inbox events", "error", "conn refused")
			c.advance(interval - time.Millisecond)
			log.Warn("claiming inbox events", "error", "conn refused")
			c.advance(time.Millisecond)
			log.Warn("claiming inbox events", "error", "conn refused")
		}, []string{"WARN claiming inbox events", "WARN claiming inbox events suppressed=1"}},

		{"different causes each get their line", func(log *slog.Logger, _ *clock) {
			log.Warn("a", "error", "x")
			log.Warn("a", "error", "y")
			log.Warn("b", "error", "x")
			log.Error("a", "error", "x")
			log.Warn("rpc", "method", "/svc/A", "code", "Unavailable")
			log.Warn("rpc", "method", "/svc/B", "code", "Unavailable")
			log.Warn("rpc", "method", "/svc/A", "code", "DeadlineExceeded")
			log.Warn("webhook rejected", "endpoint", "e1", "outcome", "bad_signature", "status", 401)
			log.Warn("webhook rejected", "endpoint", "e1", "outcome", "bad_signature", "status", 403)
			log.Warn("webhook rejected", "endpoint", "e2", "outcome", "bad_signature", "status", 401)
			log.Warn("webhook rejected", "endpoint", "e1", "outcome", "unavailable", "status", 401)
			log.Warn("webhook rejected", "endpoint", "e1", "outcome", "bad_signature", "status", 401, "cause", "no")
			// Each queue that goes down with the database says so.
			for _, q := range []string{"inbox", "outbox", "status_poll"} {
				log.Error("queue cannot claim work", "queue", q, "cause", "database unreachable")
			}
			log.With("destination", "crm").Warn("processing failed", "error", "HTTP 503")
			log.With("destination", "erp").Warn("processing failed", "error", "HTTP 503")
		}, []string{"WARN a", "WARN a", "WARN b", "ERROR a", "WARN rpc", "WARN rpc", "WARN rpc",
			"WARN webhook rejected", "WARN webhook rejected", "WARN webhook rejected", "WARN webhook rejected", "WARN webhook rejected",
			"ERROR queue cannot claim work", "ERROR queue cannot claim work", "ERROR queue cannot claim work",
			"WARN processing failed", "WARN processing failed"}},

		{"per-request values are not causes", func(log *slog.Logger, _ *clock) {
			for i := range 4 {
				log.Warn("rpc", "method", "/svc/A", "code", "Unavailable", "request_id", fmt.Sprint(i),
					"remote", fmt.Sprintf("10.0.0.%d:4000", i), "inbox_id", i, "duration", time.Duration(i))
			}
		}, []string{"WARN rpc"}},

		{"digits in a text do not make a new cause", func(log *slog.Logger, _ *clock) {
			log.Warn("notifying", "error", "read tcp 127.0.0.1:34216->127.0.0.1:5432: read: connection reset by peer")
			log.Warn("notifying", "error", "read tcp 127.0.0.1:34222->127.0.0.1:5432: read: connection reset by peer")
			log.Warn("http: TLS handshake error from 10.1.2.3:5555: EOF")
			log.Warn("http: TLS handshake error from 10.9.8.7:6666: EOF")
			log.Warn("notifying", "error", "read tcp 127.0.0.1:34222->127.0.0.1:5432: i/o timeout")
			log.Warn("inbox event failed", "inbox_id", 12, "error", "event 12: lease lost")
			log.Warn("inbox event failed", "inbox_id", 13, "error", "event 13: lease lost")
			// names are exact
			log.Warn("webhook rejected", "endpoint", "shop1")
			log.Warn("webhook rejected", "endpoint", "shop2")
		}, []string{"WARN notifying", "WARN http: TLS handshake error from 10.1.2.3:5555: EOF", "WARN notifying",
			"WARN inbox event failed", "WARN webhook rejected", "WARN webhook rejected"}},

		{"info and debug are never dropped", func(log *slog.Logger, _ *clock) {
			for range 3 {
				log.Info("rpc", "method", "/svc/A", "code", "OK")
				log.Debug("poll")
			}
		}, []string{"INFO rpc", "DEBUG poll", "INFO rpc", "DEBUG poll", "INFO rpc", "DEBUG poll"}},

		{"attributes added with With count when they are causes", func(log *slog.Logger, _ *clock) {
			a, b := log.With("endpoint", "yolfi-live"), log.With("endpoint", "yolfi-test")
			a.Warn("webhook rejected")
			a.Warn("webhook rejected")
			b.Warn("webhook rejected")
			log.With("request_id", "1").Warn("webhook rejected", "endpoint", "yolfi-live")
			log.With("request_id", "2").Warn("webhook rejected", "endpoint", "yolfi-live")
			// the same cause through a derived logger: shared limits
			log.With("component", "gateway").Warn("webhook rejected", "endpoint", "yolfi-test")
		}, []string{"WARN webhook rejected", "WARN webhook rejected"}},

		{"groups", func(log *slog.Logger, _ *clock) {
			g := log.WithGroup("db")
			g.Warn("query", "error", "x")
			g.Warn("query", "error", "x")
			g.Warn("query", "error", "y")
			log.Warn("query", "error", "x") // not in the group: another cause
			log.Warn("query", slog.Group("pool", "error", "x"))
			log.Warn("query", slog.Group("pool", "error", "y"))
			log.Warn("query", slog.Group("pool", "error", "y", "request_id", "2"))
		}, []string{"WARN query", "WARN query", "WARN query", "WARN query", "WARN query"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClock()
			var out bytes.Buffer
			tc.run(slog.New(c.jsonHandler(&out)), c)
			got := summaries(t, &out)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("lines:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// multiLineValuer is a log valuer whose value spans lines.
type multiLineValuer struct{}

func (multiLineValuer) LogValue() slog.Value { return slog.StringValue("first\n\tsecond") }

// nilError is an error whose Error panics on a nil receiver.
type nilError struct{ msg string }

func (e *nilError) Error() string { return e.msg }

func TestHandlerWritesValuesOnOneLine(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		level slog.Level
		msg   string
		args  []any
		key   string // the attribute to check ("msg" for the message)
		want  any
	}{
		{"pgx connect error", slog.LevelWarn, "claiming inbox events", []any{"error", fmt.Errorf("claiming inbox events: unavailable: %w", errPGConnect)}, "error",
			"claiming inbox events: unavailable: failed to connect to `user=app database=fulfillment`: " +
				"127.0.0.1:5432 (localhost): dial error: dial tcp 127.0.0.1:5432: connect: connection refused; " +
				"[::1]:5432 (localhost): dial error: dial tcp [::1]:5432: connect: connection refused"},
		{"error text as a string", slog.LevelError, "webhook rejected", []any{"cause", "a\nb"}, "cause", "a; b"},
		{"tabs and runs of blanks", slog.LevelInfo, "m", []any{"detail", "a\t\tb   c"}, "detail", "a b c"},
		{"blank lines and CRLF", slog.LevelInfo, "m", []any{"detail", "one\r\n\r\n  two  \r\n"}, "detail", "one; two"},
		{"a stack at ERROR", slog.LevelError, "panic in handler", []any{"stack", "goroutine 7 [running]:\nmain.f()\n\t/src/x.go:3 +0x1d"}, "stack",
			"goroutine 7 [running]: main.f(); /src/x.go:3 +0x1d"},
		{"single-line values are kept as they are", slog.LevelInfo, "m", []any{"detail", "a  b "}, "detail", "a  b "},
		{"single-line error", slog.LevelWarn, "m", []any{"error", errors.New("boom")}, "error", "boom"},
		{"inside a group", slog.LevelInfo, "m", []any{slog.Group("g", "detail", "a\nb", "n", 1)}, "g", map[string]any{"detail": "a; b", "n": 1.0}},
		{"log valuer", slog.LevelInfo, "m", []any{"v", multiLineValuer{}}, "v", "first; second"},
		{"the message", slog.LevelWarn, "two\nlines", nil, "msg", "two; lines"},
		{"nil pointer error", slog.LevelWarn, "m", []any{"error", (*nilError)(nil)}, "msg", "m"},
		{"non-comparable values", slog.LevelInfo, "m", []any{"ids", []int{1, 2}}, "ids", []any{1.0, 2.0}},
		{"the ninth value, after eight on one line", slog.LevelInfo, "m", []any{"a1", "x", "a2", "x", "a3", "x", "a4", 4,
			"a5", "x", "a6", "x", "a7", "x", "a8", "x", "detail", "a\nb"}, "detail", "a; b"},
		{"the message and a value", slog.LevelWarn, "two\nlines", []any{"a1", "x", "detail", "a\nb"}, "detail", "a; b"},
		{"a value kept beside one rewritten", slog.LevelWarn, "m", []any{"a1", "x\ny", "a2", "kept"}, "a2", "kept"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newClock()
			var out bytes.Buffer
			slog.New(c.jsonHandler(&out)).Log(context.Background(), tc.level, tc.msg, tc.args...)
			if n := strings.Count(out.String(), "\n"); n != 1 {
				t.Fatalf("%d lines: %s", n, out.String())
			}
			recs := records(t, &out)
			if got := recs[0][tc.key]; fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("%s = %q, want %q", tc.key, got, tc.want)
			}
		})
	}
}

func TestHandlerWithAttrsOnOneLine(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log := slog.New(newClock().jsonHandler(&out)).With("err", errPGConnect).WithGroup("g").With("detail", "a\nb")
	log.Info("m")
	recs := records(t, &out)
	if got := recs[0]["err"]; strings.ContainsAny(fmt.Sprint(got), "\n\t") {
		t.Errorf("err = %q", got)
	}
	if got := recs[0]["g"]; fmt.Sprint(got) != "map[detail:a; b]" {
		t.Errorf("g = %v", got)
	}
}

func TestHandlerWithoutInterval(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	log := slog.New(NewJSONHandler(&out, slog.LevelInfo, 0))
	for range 3 {
		log.Warn("m", "error", "a\nb")
	}
	log.Debug("below the level")
	if got := summaries(t, &out); len(got) != 3 {
		t.Errorf("lines %v, want 3 warnings", got)
	}
	if strings.Contains(out.String(), `\n`) {
		t.Errorf("a value spans lines: %s", out.String())
	}
}

func TestHandlerConcurrentUse(t *testing.T) {
	t.Parallel()
	c := newClock()
	var out bytes.Buffer
	log := slog.New(c.jsonHandler(&out))
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			wl := log.With("worker", g)
			for i := range each {
				wl.Warn("claiming inbox events", "error", errPGConnect, "request_id", i)
				wl.Info("progress", "i", i)
				wl.Warn("distinct", "error", fmt.Sprintf("worker %c", 'a'+g)) // 8 causes
			}
		})
	}
	wg.Wait()
	c.advance(interval)
	log.Warn("claiming inbox events", "error", errPGConnect)

	counts := map[string]int{}
	for _, s := range summaries(t, &out) {
		counts[s]++
	}
	want := map[string]int{
		"WARN claiming inbox events": 1,
		"INFO progress":              goroutines * each,
		"WARN distinct":              goroutines,
		fmt.Sprintf("WARN claiming inbox events suppressed=%d", goroutines*each-1): 1,
	}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("lines %v, want %v", counts, want)
	}
}

func TestHandlerBudget(t *testing.T) {
	t.Parallel()
	c := newClock()
	var out bytes.Buffer
	h := c.jsonHandler(&out)
	log := slog.New(h)
	text := func(i int) string { return "relation " + letters(i) + " does not exist" }
	for i := range 2 * Budget {
		log.Warn("query failed", "error", text(i))
	}
	if n := len(records(t, &out)); n != Budget {
		t.Fatalf("%d distinct causes in one interval wrote %d lines, want the budget %d", 2*Budget, n, Budget)
	}
	// The next interval: the causes dropped by the budget get their line,
	// with their count.
	out.Reset()
	c.advance(interval)
	for i := Budget; i < 2*Budget; i++ {
		log.Warn("query failed", "error", text(i))
	}
	for _, rec := range records(t, &out) {
		if rec[SuppressedKey] != 1.0 {
			t.Errorf("line %v, want suppressed=1", rec)
		}
	}
	// However many causes, each interval writes at most the budget.
	out.Reset()
	for round := range 5 {
		c.advance(interval)
		for i := range 500 {
			log.Error("query failed", "error", text(1000*round+i))
		}
	}
	if n := len(records(t, &out)); n != 5*Budget {
		t.Errorf("5 intervals of 500 new causes wrote %d lines, want %d", n, 5*Budget)
	}
	// Warnings spending their budget leave errors theirs.
	out.Reset()
	c.advance(interval)
	for i := range 2 * Budget {
		log.Warn("query failed", "error", text(10_000+i))
	}
	log.Error("internal error", "error", "a new failure")
	if got := summaries(t, &out); len(got) != Budget+1 || got[Budget] != "ERROR internal error" {
		t.Errorf("after a flood of warnings, an error wrote %d lines ending %v; want the budget, then the error", len(got), got[len(got)-1])
	}
}

func TestHandlerCauseCap(t *testing.T) {
	t.Parallel()
	t.Run("small table", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		var out bytes.Buffer
		h := c.jsonHandler(&out)
		h.lim.maxCauses = 4
		log := slog.New(h)
		for i := range 10 {
			log.Warn("m", "error", "e"+letters(i))
		}
		// 4 causes in the table, then one line for all that did not fit.
		want := []string{"WARN m", "WARN m", "WARN m", "WARN m", "WARN m"}
		if got := summaries(t, &out); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("first interval: %v, want %v", got, want)
		}
		// Once their interval has passed, old causes make room for new ones;
		// the overflow line reports what the overflow suppressed.
		out.Reset()
		c.advance(interval)
		for i := range 5 {
			log.Warn("m", "error", "n"+letters(i))
		}
		want = []string{"WARN m", "WARN m", "WARN m", "WARN m", "WARN m suppressed=5"}
		if got := summaries(t, &out); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("second interval: %v, want %v", got, want)
		}
		if n := len(h.lim.causes); n > 4 {
			t.Errorf("%d causes tracked, cap 4", n)
		}
	})
	t.Run("MaxCauses", func(t *testing.T) {
		t.Parallel()
		c := newClock()
		var out bytes.Buffer
		h := c.jsonHandler(&out)
		h.lim.budget = 1 << 30 // only the cap limits
		log := slog.New(h)
		for i := range 3 * MaxCauses {
			log.Warn("m", "error", letters(i))
		}
		if n := len(h.lim.causes); n != MaxCauses {
			t.Errorf("%d causes tracked, want the cap %d", n, MaxCauses)
		}
		if n := len(records(t, &out)); n > MaxCauses+1 {
			t.Errorf("%d lines, want at most %d", n, MaxCauses+1)
		}
	})
}
