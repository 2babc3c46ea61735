package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// Reconnection delays of watch: the first delay after a dropped stream, and
// the longest, reached by doubling. Each wait is drawn between half the
// delay and all of it (run). A stream that delivered an event starts over
// from watchMinBackoff.
const (
	watchMinBackoff = 250 * time.Millisecond
	watchMaxBackoff = 30 * time.Second
)

// watcher follows the order event feed for watch.
type watcher struct {
	req      *fulfillmentv1.WatchOrderEventsRequest // Cursor: the last event printed, else --cursor
	printed  int                                    // events printed, over all streams
	json     bool
	out, log io.Writer
	min, max time.Duration // reconnection delays
	// hint says what to do about a dropped stream's status (conn.hint):
	// said once, with the first drop that has one, as other commands say
	// it with their error; hinted is whether it was.
	hint   func(*status.Status) string
	hinted bool
}

func newWatchCmd(c *conn) *cobra.Command {
	w := &watcher{req: &fulfillmentv1.WatchOrderEventsRequest{}, min: watchMinBackoff, max: watchMaxBackoff, hint: c.hint}
	cmd := &cobra.Command{
		Use:   "watch [--cursor C] [--org O] [--environment E] [--json]",
		Short: "Follow the order event feed: order and subscription events",
		Long: `Watch prints the events of the order event feed the token may see, oldest
first, from after --cursor (the start of the feed when empty), then follows
new ones as they commit: order events (order.fulfilled, order.refunded,
order.on_hold) and subscription events (subscription.renewed,
subscription.past_due, subscription.access_ended). One line per event: its
cursor, time, topic, order (the subscription, for a subscription event),
org and environment; --json prints each event as one JSON object per line
(a WatchOrderEventsResponse, its payload the event's JSON object).

When the stream drops (UNAVAILABLE, a network error, the service stopping),
watch says so on stderr and reconnects from the cursor of the last event it
printed: no event is skipped or printed twice. The delay before each try
doubles from 0.25 s up to 30 s, and each wait is a random time between half
the delay and all of it (the first 125–250 ms, then 250–500 ms, …); a
stream that delivered an event starts the delays over. Other errors (a bad
cursor, a missing scope) end it.
Ctrl-C ends it cleanly. On exit it prints the last cursor on stderr; pass
it as --cursor to resume. Needs the orders:read scope.`,
		Example: `  fulfillctl watch --org org_demo --environment test
  fulfillctl watch --cursor 7412.318 --json | jq -r .order_id`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w.out, w.log = cmd.OutOrStdout(), cmd.ErrOrStderr()
			_, _ = fmt.Fprintf(w.log, "watching order events after %s; Ctrl-C stops\n", w.position())
			err := c.call(cmd.Context(), w.run)
			w.sayLastCursor(err)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&w.req.Cursor, "cursor", "", "start after this cursor (printed with each event); empty: the start of the feed")
	f.StringVar(&w.req.OrgId, "org", "", "only events of this org")
	f.StringVar(&w.req.Environment, "environment", "", "only events of this environment: live or test")
	f.BoolVar(&w.json, "json", false, "print each event as one JSON object per line")
	return cmd
}

// position says where the next stream starts, for people.
func (w *watcher) position() string {
	if w.req.GetCursor() == "" {
		return "the start of the feed"
	}
	return "cursor " + w.req.GetCursor()
}

// sayLastCursor tells on stderr where to resume, once watch ends with err.
// When the service refused the first stream before any event (a bad
// cursor, a missing scope), it says nothing: the error is the news, and
// the cursor passed may be what was wrong.
func (w *watcher) sayLastCursor(err error) {
	cursor := w.req.GetCursor()
	switch {
	case err != nil && w.printed == 0:
		return
	case cursor == "":
		_, _ = fmt.Fprintln(w.log, "last cursor: none, no event yet (run watch again without --cursor)")
	default:
		_, _ = fmt.Fprintf(w.log, "last cursor: %s (resume with --cursor %s)\n", cursor, cursor)
	}
}

// run follows the feed until ctx ends (nil) or the service refuses the
// stream (the error), reconnecting after a dropped stream.
func (w *watcher) run(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
	delay := w.min
	for {
		n, err := w.follow(ctx, client)
		w.printed += n
		if ctx.Err() != nil {
			return nil
		}
		if !dropped(err) {
			return err
		}
		if n > 0 {
			delay = w.min // the service was back: start the delays over
		}
		// Jitter, so that watchers cut off together do not come back
		// together: from half the delay to all of it.
		wait := delay/2 + rand.N(delay/2+1)
		_, _ = fmt.Fprintf(w.log, "stream dropped (%v); reconnecting in %s after %s\n",
			w.hintOnce(apiError(err)), wait.Round(time.Millisecond), w.position())
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		delay = min(2*delay, w.max)
	}
}

// hintOnce adds to err, when it is the first error of watch that has a
// hint, the hint (a service that cannot be reached: check --addr); a watch
// that cannot reach the service retries forever, and says it once.
func (w *watcher) hintOnce(err error) error {
	e, ok := errors.AsType[*rpcError](err)
	if !ok || w.hinted || w.hint == nil || e.hint != "" {
		return err
	}
	if e.hint = w.hint(e.st); e.hint != "" {
		w.hinted = true
	}
	return err
}

// follow opens one stream after w.req.Cursor and prints its events,
// moving the cursor past each one printed, until the stream ends. It
// returns how many it printed and why the stream ended.
func (w *watcher) follow(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream when printing fails
	stream, err := client.WatchOrderEvents(ctx, w.req)
	if err != nil {
		return 0, err
	}
	for printed := 0; ; printed++ {
		e, err := stream.Recv()
		if err != nil {
			return printed, err
		}
		if err := w.print(e); err != nil {
			return printed, fmt.Errorf("writing: %w", err)
		}
		w.req.Cursor = e.GetCursor()
	}
}

// print writes one event, e.g.
//
//	7412.318  2025-06-01T14:03:07Z  order.fulfilled  019a2b3c-…  org_demo  test
//
// A subscription event has no order: its subscription takes the column.
func (w *watcher) print(e *fulfillmentv1.WatchOrderEventsResponse) error {
	if w.json {
		return printEventJSON(w.out, e)
	}
	subject := e.GetOrderId()
	if subject == "" {
		subject = e.GetSubscriptionId()
	}
	t := newTable(w.out)
	t.row(e.GetCursor(), timeText(e.GetCreateTime()), e.GetTopic(), subject, e.GetOrgId(), e.GetEnvironment())
	return t.flush()
}

// dropped tells a stream that ended on its way (the network, the service
// stopping or too busy) from one the service refused: after the first,
// watch reconnects.
func dropped(err error) bool {
	if errors.Is(err, io.EOF) {
		return true // the service ended the stream without a status
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.Canceled, codes.DeadlineExceeded:
		// Canceled and DeadlineExceeded: by the service, as it stopped
		// (the caller's own are told apart before).
		return true
	default:
		return false
	}
}

// printEventJSON writes e as one line of JSON, its fields as printJSON
// writes them (every one, named as in the proto), with its payload as the JSON object it is (the API carries it as a
// string): what jq and scripts read without decoding twice. A payload that
// is not JSON stays a string.
func printEventJSON(out io.Writer, e *fulfillmentv1.WatchOrderEventsResponse) error {
	b, err := jsonOptions.Marshal(e)
	if err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return err
	}
	if p := []byte(e.GetPayload()); json.Valid(p) {
		var compact bytes.Buffer
		if err := json.Compact(&compact, p); err == nil {
			fields["payload"] = compact.Bytes()
		}
	}
	line, err := json.Marshal(fields) // sorted keys: the same line for the same event
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, string(line))
	return err
}
