package e2e_test

// No log floods (issue item): during a database outage, and when the service
// starts against a database that is not there, repeated warnings are written
// once per cause and interval, and every line is one JSON object whose values
// hold no line breaks. The service runs in-process with the logger
// fulfillmentd builds.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/internal/logging"
	"github.com/fulfillplatform/fulfillment/rig/pgcluster"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/server"
)

// logSink keeps what a logger writes, safe for concurrent use.
type logSink struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// lines returns every line written so far.
func (s *logSink) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	text := strings.TrimSuffix(s.buf.String(), "\n")
	if text == "" {
		return nil
	}
	return strings.Split(text, "\n")
}

// said returns whether a line with message msg, or one beginning with
// it, was written: a condition for waitFor.
func (s *logSink) said(msg string) func() bool {
	return func() bool {
		for _, l := range s.lines() {
			if strings.Contains(l, `"msg":"`+msg) {
				return true
			}
		}
		return false
	}
}

// floodLogger is the service's logger as fulfillmentd builds it (newLogger),
// writing to sink.
func floodLogger(sink *logSink) *slog.Logger {
	return slog.New(server.ContextHandler{Handler: logging.NewJSONHandler(sink, slog.LevelInfo, 10*time.Second)})
}

// runFloodApp runs the service on cfg, logging to sink, until the test ends.
func runFloodApp(t *testing.T, cfg *config.Config, sink *logSink) *stack {
	t.Helper()
	// This test checks what the service does while it runs, not how it stops.
	a := runApp(t, cfg, floodLogger(sink), true)
	return &stack{ingestURL: "http://" + a.IngestAddr()}
}

// checkLogLines requires each line to be one JSON object without a line
// break or tab in any of its values, and returns the decoded lines.
func checkLogLines(t *testing.T, lines []string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for i, line := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line %d is not one JSON object (%v): %s", i, err, line)
			continue
		}
		if k, ok := brokenValue(rec); ok {
			t.Errorf("log line %d: value of %q spans several lines: %s", i, k, line)
		}
		out = append(out, rec)
	}
	return out
}

// brokenValue finds a string value holding a line break or a tab.
func brokenValue(rec map[string]any) (string, bool) {
	for k, v := range rec {
		switch v := v.(type) {
		case string:
			if strings.ContainsAny(v, "\n\r\t") {
				return k, true
			}
		case map[string]any:
			if sub, ok := brokenValue(v); ok {
				return k + "." + sub, true
			}
		}
	}
	return "", false
}

// webhook posts a signed event to the live endpoint and returns the status.
// Unlike stack.send it may run outside the test's goroutine.
func (s *stack) webhook(p yolfi.Payload) (int, error) {
	body, err := json.Marshal(p)
	if err != nil {
		return 0, err
	}
	req, err := yolfi.NewRequest(context.Background(), s.ingestURL+"/webhooks/"+liveEP, []byte(liveSecret), body, p.ID)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// summarize lists the lines by level and message, for failure reports.
func summarize(recs []map[string]any) string {
	counts := map[string]int{}
	var order []string
	for _, r := range recs {
		k := fmt.Sprintf("%v %q", r["level"], r["msg"])
		if counts[k] == 0 {
			order = append(order, k)
		}
		counts[k]++
	}
	var b strings.Builder
	for _, k := range order {
		fmt.Fprintf(&b, "\n  %4d × %s", counts[k], k)
	}
	return b.String()
}

// While PostgreSQL is down, 150 webhooks over about 3 seconds all get 503 and
// the service writes a bounded number of lines: not two or three per request,
// nor one per worker poll.
func TestLogFloodDuringOutage(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "logflood-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cluster, err := pgcluster.Start(context.Background(), pgcluster.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })

	cfg := testConfig(cluster.URL("fulfillment"))
	cfg.Database.Migrate = true
	sink := &logSink{}
	s := runFloodApp(t, cfg, sink)
	s.sendOK(t, event(yolfi.TypeInvoiceCreated, "flood-0", "inv_f0"))

	before := len(sink.lines())
	if err := cluster.Kill(); err != nil {
		t.Fatal(err)
	}
	// 10 senders, 15 webhooks each, one every 200ms: 150 in about 3s.
	const senders, each = 10, 15
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		answers = map[string]int{}
	)
	start := time.Now()
	for w := range senders {
		wg.Go(func() {
			for i := range each {
				code, err := s.webhook(event(yolfi.TypeInvoiceCreated, fmt.Sprintf("flood-%d-%d", w, i), "inv_f"))
				answer := fmt.Sprint(code)
				if err != nil {
					answer = err.Error()
				}
				mu.Lock()
				answers[answer]++
				mu.Unlock()
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	lines := sink.lines()[before:]

	if answers["503"] != senders*each {
		t.Errorf("answers during the outage: %v, want %d × 503", answers, senders*each)
	}
	recs := checkLogLines(t, lines)
	t.Logf("%d webhooks in %v during the outage: %d log lines%s", senders*each, took.Round(time.Millisecond), len(lines), summarize(recs))
	if len(lines) == 0 {
		t.Errorf("nothing logged during the outage")
	}
	// One line per cause and 10s interval: on a slow machine the window may
	// span more than one interval.
	if bound := 25 * (1 + int(took/(10*time.Second))); len(lines) > bound {
		t.Errorf("%d log lines during the outage, want at most %d", len(lines), bound)
	}
}

// Started against a database where nothing listens, the service runs, its
// workers retry, and it warns a bounded number of times, not every
// poll of every worker. The database URL names two hosts, so that pgconn's
// connect error spans several lines.
func TestLogFloodUnreachableDatabase(t *testing.T) {
	t.Parallel()
	var hosts []string
	for range 2 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, lis.Addr().String())
		_ = lis.Close() // nothing listens there now
	}
	cfg := testConfig("postgres://fulfillment@" + strings.Join(hosts, ",") + "/fulfillment?sslmode=disable")
	cfg.Database.ConnectTimeout = time.Second
	sink := &logSink{}
	runFloodApp(t, cfg, sink)
	time.Sleep(3 * time.Second)

	recs := checkLogLines(t, sink.lines())
	warnings, refused := 0, 0
	for _, r := range recs {
		if r["level"] == "WARN" || r["level"] == "ERROR" {
			warnings++
			if strings.Contains(fmt.Sprint(r["error"]), hosts[1]) {
				refused++
			}
		}
	}
	t.Logf("3s against an unreachable database: %d lines, %d at WARN or above%s", len(recs), warnings, summarize(recs))
	if refused == 0 {
		t.Errorf("no warning names the unreachable database")
	}
	if warnings > 10 {
		t.Errorf("%d lines at WARN or above in 3s, want at most 10", warnings)
	}
}

// With database.exit_after_unreachable set, a service whose database does
// not answer gives up once it has not answered that long: Run returns an
// error naming the key (fulfillmentd then exits 1, for its supervisor).
// A server that answers but refuses the connection (here: the database
// does not exist; a refused login, during a password rotation, alike) is
// as unavailable as one that does not answer: meanwhile a webhook is
// answered 503, for its provider to deliver it again, not 500.
func TestExitAfterUnreachable(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := lis.Addr().String()
	_ = lis.Close() // nothing listens there now
	missing, err := url.Parse(pgtest.DB(t))
	if err != nil {
		t.Fatal(err)
	}
	missing.Path = "/no_such_database"
	const unreachable = "database unreachable for too long: giving up"
	for _, tc := range []struct{ name, url, line string }{
		{"nothing listens", "postgres://fulfillment@" + host + "/fulfillment?sslmode=disable", unreachable},
		{"the database does not exist", missing.String(), unreachable},
		// A database that answers and takes no writes (a primary fenced,
		// a standby): its spell is named as such.
		{"the database takes no writes", readOnlyDB(t), "database unreachable or read-only for too long: giving up"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			exitAfterUnreachable(t, tc.url, tc.line)
		})
	}
}

// readOnlyDB is a database of the test's own whose transactions are
// read-only by default (default_transaction_read_only), as a fenced primary's.
func readOnlyDB(t *testing.T) string {
	t.Helper()
	dbURL := pgtest.DB(t)
	setReadOnly(t, dbURL, true)
	return dbURL
}

func exitAfterUnreachable(t *testing.T, dbURL, line string) {
	t.Helper()
	cfg := testConfig(dbURL)
	cfg.Database.ConnectTimeout = time.Second
	cfg.Database.ExitAfterUnreachable = 5 * time.Second
	sink := &logSink{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := app.New(ctx, cfg, floodLogger(sink))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- a.Run(ctx) }()
	<-a.Ready()
	s := &stack{ingestURL: "http://" + a.IngestAddr()}
	if code := s.send(t, liveEP, liveSecret, event(yolfi.TypePaymentConfirmed, "gone-db-1", "inv_gone-db-1")); code != http.StatusServiceUnavailable {
		t.Errorf("a webhook while the database is unavailable answered %d, want 503", code)
	}
	select {
	case err := <-done:
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "database.exit_after_unreachable") {
			t.Fatalf("Run returned %v, want the give-up naming database.exit_after_unreachable", err)
		}
		if took < 5*time.Second {
			t.Errorf("gave up after %s, before the 5s configured", took)
		}
		t.Logf("gave up after %s", took.Round(100*time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatal("still running 20s after the database stopped answering, with exit_after_unreachable 5s")
	}
	gaveUp := 0
	for _, r := range checkLogLines(t, sink.lines()) {
		if r["msg"] == line {
			gaveUp++
		}
	}
	if gaveUp != 1 {
		t.Errorf("%d give-up lines %q, want 1", gaveUp, line)
	}
}
