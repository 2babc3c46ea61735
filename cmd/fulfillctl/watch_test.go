package main

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// watching is a fulfillctl watch running in the background.
type watching struct {
	out, log  *lockedBuffer
	interrupt context.CancelFunc // what Ctrl-C does: main's context ends
	done      chan struct{}      // closed when watch returned
	err       error              // what it returned
}

// watch starts fulfillctl watch with args against the service at addr
// (s's, or a proxy's), as the admin. It is interrupted when the test ends.
func (s *service) watch(t *testing.T, addr string, args ...string) *watching {
	t.Helper()
	root := newRootCmd()
	root.SetArgs(append([]string{"--addr", addr, "--token-file", s.tokenFile, "watch"}, args...))
	w := &watching{out: &lockedBuffer{}, log: &lockedBuffer{}, done: make(chan struct{})}
	root.SetOut(w.out)
	root.SetErr(w.log)
	ctx, cancel := context.WithCancel(context.Background())
	w.interrupt = cancel
	go func() {
		defer close(w.done)
		w.err = root.ExecuteContext(ctx)
	}()
	t.Cleanup(func() { _ = w.stop() })
	return w
}

// stop interrupts watch and returns its error.
func (w *watching) stop() error {
	w.interrupt()
	<-w.done
	return w.err
}

// waitEvents waits until watch printed n lines and returns them.
func (w *watching) waitEvents(t *testing.T, n int) []string {
	t.Helper()
	w.waitUntil(t, fmt.Sprintf("%d events printed", n), func() bool { return len(w.out.lines()) >= n })
	return w.out.lines()
}

// waitSaid waits until watch said something containing text on stderr.
func (w *watching) waitSaid(t *testing.T, text string) {
	t.Helper()
	w.waitUntil(t, "said "+text, func() bool { return strings.Contains(strings.Join(w.log.lines(), "\n"), text) })
}

// waitUntil is waitUntil for a condition on watch's output. Watch ending
// first fails the test: it should run until interrupted.
func (w *watching) waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitUntil(t, what, func() bool {
		t.Helper()
		select {
		case <-w.done:
			t.Fatalf("watch ended (%v) before it %s; it printed %d lines, and said:\n%s",
				w.err, what, len(w.out.lines()), strings.Join(w.log.lines(), "\n"))
		default:
		}
		return cond()
	})
}

// feed reads the first n events of the feed from the service, as one
// uninterrupted stream: the sequence watch must print.
func (s *service) feed(t *testing.T, n int) []*fulfillmentv1.WatchOrderEventsResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(admin(t), 20*time.Second)
	defer cancel()
	stream, err := s.client.WatchOrderEvents(ctx, &fulfillmentv1.WatchOrderEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var events []*fulfillmentv1.WatchOrderEventsResponse
	for len(events) < n {
		e, err := stream.Recv()
		if err != nil {
			t.Fatalf("reading the feed, after %d of %d events: %v", len(events), n, err)
		}
		events = append(events, e)
	}
	return events
}

// wantEvents checks that lines, printed by watch --json, are the events of
// feed: each once, in order, with their cursors.
func wantEvents(t *testing.T, lines []string, feed []*fulfillmentv1.WatchOrderEventsResponse) {
	t.Helper()
	if len(lines) != len(feed) {
		t.Fatalf("watch printed %d events, want %d:\n%s", len(lines), len(feed), strings.Join(lines, "\n"))
	}
	for i, line := range lines {
		var got struct {
			Cursor  string          `json:"cursor"`
			OrderID string          `json:"order_id"`
			Topic   string          `json:"topic"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("event %d: %v in %s", i, err, line)
		}
		want := feed[i]
		if got.Cursor != want.GetCursor() || got.OrderID != want.GetOrderId() || got.Topic != "order.fulfilled" ||
			!sameJSON(t, got.Payload, want.GetPayload()) {
			t.Errorf("event %d: watch printed %s, the feed has %v", i, line, want)
		}
	}
}

// sameJSON reports whether printed is the JSON object payload holds, the
// same members with the same values (not a string of it).
func sameJSON(t *testing.T, printed json.RawMessage, payload string) bool {
	t.Helper()
	var a, b map[string]any
	if err := json.Unmarshal(printed, &a); err != nil {
		t.Errorf("the payload printed is not a JSON object: %s", printed)
		return false
	}
	if err := json.Unmarshal([]byte(payload), &b); err != nil {
		t.Fatalf("the feed's payload is not JSON: %v", err)
	}
	return reflect.DeepEqual(a, b)
}

// resumeCursor reads the cursor watch said to resume with when it ended.
func resumeCursor(t *testing.T, log []string) string {
	t.Helper()
	last := log[len(log)-1]
	m := regexp.MustCompile(`^last cursor: (\S+) \(resume with --cursor (\S+)\)$`).FindStringSubmatch(last)
	if len(m) != 3 || m[1] != m[2] {
		t.Fatalf("watch ended with %q, want the last cursor", last)
	}
	return m[1]
}

// A person follows the feed, loses the service for a while, is back where
// they were, stops, and resumes later from the cursor watch gave them.
func TestWatch(t *testing.T) {
	t.Parallel()
	s := startService(t)
	link := startProxy(t, s.grpcAddr)

	// What was paid before watch starts, then what is paid while it runs.
	s.payOrder(t, "ctl-watch-1")
	s.payOrder(t, "ctl-watch-2")
	w := s.watch(t, link.addr, "--json")
	w.waitEvents(t, 2)
	s.payOrder(t, "ctl-watch-3")
	w.waitEvents(t, 3)

	// The service becomes unreachable; orders are paid meanwhile. Watch
	// gets them once back, from the last event it printed.
	link.down()
	w.waitSaid(t, "stream dropped")
	s.payOrder(t, "ctl-watch-4")
	s.payOrder(t, "ctl-watch-5")
	feed := s.feed(t, 5) // their events are in the feed before watch can be back
	link.up()
	w.waitEvents(t, 5)
	if err := w.stop(); err != nil {
		t.Fatalf("watch interrupted: %v", err)
	}
	wantEvents(t, w.out.lines(), feed)
	log := w.log.lines()
	if log[0] != "watching order events after the start of the feed; Ctrl-C stops" {
		t.Errorf("watch began with %q", log[0])
	}
	dropped := regexp.MustCompile(`^stream dropped \(UNAVAILABLE: .*\); reconnecting in \S+ after cursor ` + regexp.QuoteMeta(feed[2].GetCursor()) + `$`)
	for _, line := range log[1 : len(log)-1] {
		if !dropped.MatchString(line) {
			t.Errorf("while the service was away, watch said %q; want it to reconnect after the third event", line)
		}
	}
	cursor := resumeCursor(t, log)
	if cursor != feed[4].GetCursor() {
		t.Fatalf("watch ended at cursor %s, the fifth event's is %s", cursor, feed[4].GetCursor())
	}

	// Later: resume with the cursor it gave, as text.
	s.payOrder(t, "ctl-watch-6")
	s.payOrder(t, "ctl-watch-7")
	w = s.watch(t, s.grpcAddr, "--cursor", cursor)
	w.waitEvents(t, 2)
	if err := w.stop(); err != nil {
		t.Fatalf("watch interrupted: %v", err)
	}
	lines := w.out.lines()
	feed = s.feed(t, 7)
	if len(lines) != 2 {
		t.Fatalf("resumed after the fifth event, watch printed:\n%s", strings.Join(lines, "\n"))
	}
	for i, e := range feed[5:] {
		row := `^` + regexp.QuoteMeta(e.GetCursor()) + ` +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ +order\.fulfilled +` + e.GetOrderId() + ` +org_a +live$`
		if !regexp.MustCompile(row).MatchString(lines[i]) {
			t.Errorf("line %d: %q, want the event at %s of order %s", i, lines[i], e.GetCursor(), e.GetOrderId())
		}
	}
	log = w.log.lines()
	if log[0] != "watching order events after cursor "+cursor+"; Ctrl-C stops" || resumeCursor(t, log) != feed[6].GetCursor() {
		t.Errorf("watch --cursor said:\n%s", strings.Join(log, "\n"))
	}
}

// Before any event, watch says there is no cursor yet; a refused stream
// ends it with the service's error, and no cursor to resume from.
func TestWatchWithoutEvents(t *testing.T) {
	t.Parallel()
	s := startService(t)

	w := s.watch(t, s.grpcAddr)
	w.waitSaid(t, "watching order events")
	if err := w.stop(); err != nil {
		t.Fatalf("watch interrupted: %v", err)
	}
	if out, log := w.out.lines(), w.log.lines(); len(out) != 0 || len(log) != 2 || log[1] != "last cursor: none, no event yet (run watch again without --cursor)" {
		t.Errorf("watch on an empty feed printed %q, and said %q", out, log)
	}

	// No service at the address: watch retries, and says once what to
	// check, as the other commands say it with their error.
	w = s.watch(t, "127.0.0.1:1")
	w.waitUntil(t, "reconnected twice", func() bool { return len(w.log.lines()) >= 3 })
	_ = w.stop()
	hint := "; check that fulfillmentd is running and reachable at 127.0.0.1:1 (--addr, $FULFILLCTL_ADDR)); reconnecting in "
	if log := w.log.lines(); !strings.HasPrefix(log[1], "stream dropped (UNAVAILABLE: ") || !strings.Contains(log[1], hint) ||
		!strings.HasPrefix(log[2], "stream dropped (UNAVAILABLE: ") || strings.Contains(log[2], "check that") {
		t.Errorf("watch without a service said:\n%s\nwant the hint with the first drop only", strings.Join(log, "\n"))
	}

	out, errOut, err := s.ctl(t, "watch", "--cursor", "nonsense")
	wantAPIError(t, err, codes.InvalidArgument, "INVALID_ARGUMENT: cursor: ")
	if out != "" || errOut != "watching order events after cursor nonsense; Ctrl-C stops\n" {
		t.Errorf("watch --cursor nonsense printed %q, and said %q", out, errOut)
	}
}

// A subscription event names no order: its line shows the subscription in
// the order's column (it showed "-").
func TestWatchLineOfASubscriptionEvent(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	w := &watcher{out: &out}
	for _, e := range []*fulfillmentv1.WatchOrderEventsResponse{
		{Cursor: "7.1", Topic: "order.fulfilled", OrderId: "ord-1", OrgId: "org_a", Environment: "test"},
		{Cursor: "7.2", Topic: "subscription.renewed", SubscriptionId: "sub-1", OrgId: "org_a", Environment: "test"},
	} {
		if err := w.print(e); err != nil {
			t.Fatal(err)
		}
	}
	want := "7.1  -  order.fulfilled  ord-1  org_a  test\n7.2  -  subscription.renewed  sub-1  org_a  test\n"
	if out.String() != want {
		t.Errorf("watch printed\n%s\nwant\n%s", out.String(), want)
	}
}
