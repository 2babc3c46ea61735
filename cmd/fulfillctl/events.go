package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

func newEventsCmd(c *conn) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "events",
		Short: "List, show and replay stored provider events (the inbox)",
	}
	cmd.AddCommand(newEventsListCmd(c), newEventsGetCmd(c), newEventsReplayCmd(c))
	return cmd
}

func newEventsListCmd(c *conn) *cobra.Command {
	var (
		filter        fulfillmentv1.ListInboxEventsRequest // the filters; paging is collectPages'
		limit         int
		token         string
		asJSON        bool
		after, before string
	)
	cmd := &cobra.Command{
		Use:   "list [flags]",
		Short: "List stored provider events, newest first (without raw bodies)",
		Long: `List shows stored provider events, newest first: one line per event with its
stored id (what events get and replay take), state, decision, type, the
provider's event id, org, endpoint, order, receive time, processing
attempts and replays. It pages through the service's pages until --limit
events (0: all); when more follow, stderr says how to continue
(--page-token). An empty list says so. --json prints a
ListInboxEventsResponse. Needs the admin scope; a token limited to some
orgs sees theirs only.`,
		Example: `  fulfillctl events list --state failed
  fulfillctl events list --order 019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b
  fulfillctl events list --decision duplicate_payment --org org_demo --json
  fulfillctl events list --provider tbank --from 1h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return fmt.Errorf("--limit %d: must not be negative (0 lists all)", limit)
			}
			now := time.Now()
			var err error
			if filter.ReceivedAfter, err = timeFlag("--from", after, now); err != nil {
				return err
			}
			if filter.ReceivedBefore, err = timeFlag("--before", before, now); err != nil {
				return err
			}
			resp := &fulfillmentv1.ListInboxEventsResponse{}
			err = c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				var err error
				resp.Events, resp.NextPageToken, err = collectPages(limit, token,
					func(size int32, token string) ([]*fulfillmentv1.InboxEvent, string, error) {
						page, err := client.ListInboxEvents(ctx, &fulfillmentv1.ListInboxEventsRequest{
							State: filter.State, Decision: filter.Decision, Type: filter.Type, OrgId: filter.OrgId,
							Environment: filter.Environment, EndpointId: filter.EndpointId, OrderId: filter.OrderId, Provider: filter.Provider,
							ReceivedAfter: filter.ReceivedAfter, ReceivedBefore: filter.ReceivedBefore, PageSize: size, PageToken: token,
						})
						return page.GetEvents(), page.GetNextPageToken(), err
					})
				return err
			})
			if err != nil {
				return err
			}
			if resp.NextPageToken != "" {
				moreFollow(cmd.ErrOrStderr(), "events", resp.NextPageToken,
					timeArg{"--from", after, filter.ReceivedAfter}, timeArg{"--before", before, filter.ReceivedBefore})
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetEvents()) == 0 {
				return printNone(cmd.OutOrStdout(), "events", "")
			}
			return eventTable(cmd.OutOrStdout(), resp.GetEvents())
		},
	}
	f := cmd.Flags()
	f.StringVar(&filter.State, "state", "", "only events in this state: pending, processed, ignored, unmatched or failed")
	f.StringVar(&filter.Decision, "decision", "", "only events with this decision, e.g. duplicate_payment")
	f.StringVar(&filter.Type, "type", "", "only events of this provider type, e.g. payment.confirmed")
	f.StringVar(&filter.OrgId, "org", "", "only events of this org")
	f.StringVar(&filter.Environment, "environment", "", "only live or test")
	f.StringVar(&filter.EndpointId, "endpoint", "", "only events received at this endpoint")
	f.StringVar(&filter.OrderId, "order", "", "only events applied to this order id")
	f.StringVar(&filter.Provider, "provider", "", "only events of this provider: yolfi or tbank")
	f.StringVar(&after, "from", "", "only events received at or after this time: RFC 3339, or a duration back from now (1h)")
	f.StringVar(&before, "before", "", "only events received before this time: RFC 3339, or a duration back from now")
	f.IntVar(&limit, "limit", defaultListLimit, "show at most this many events (0: all)")
	f.StringVar(&token, "page-token", "", "continue after a previous list (the token it printed), with the same filters")
	f.BoolVar(&asJSON, "json", false, "print JSON (a ListInboxEventsResponse) instead of a table")
	return cmd
}

func newEventsGetCmd(c *conn) *cobra.Command {
	return newIDCmd(c, &cobra.Command{
		Use:   "get STORED_EVENT_ID",
		Short: "Show one stored event: normalized fields, decision, processing, replays, raw body",
		Long: `Get shows one stored event by its stored id (events list's ID, not the
provider's event id): the fields processing reads, its decision and reason,
its attempts and last error, when it was decided, its replays (the newest
20), and its raw body as received — to tokens with the admin scope, until
the retention period purges it. --json prints the InboxEvent (raw_body in
base64). Needs the admin scope.`,
		Example: `  fulfillctl events get 1234
  fulfillctl events get 1234 --json`,
	}, func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (*fulfillmentv1.InboxEvent, error) {
		resp, err := client.GetInboxEvent(ctx, &fulfillmentv1.GetInboxEventRequest{InboxEventId: id})
		return resp.GetEvent(), err
	}, eventDetail, nil)
}

func newEventsReplayCmd(c *conn) *cobra.Command {
	req := &fulfillmentv1.ReplayInboxEventRequest{}
	cmd := newIDCmd(c, &cobra.Command{
		Use:   "replay STORED_EVENT_ID",
		Short: "Decide a stored event again against the current state",
		Long: `Replay puts a decided event back in the inbox queue: pending, due now, its
attempts from 0. The processor decides it again against the order (or
subscription) as it is now, as if it had just arrived. It never duplicates
an effect: each grant, ledger movement, message and item is unique in the
database, and the rules never move an order back — an event that paid an
order decides "already_applied" the second time. Use it after a failed
event's cause was fixed, or after an order it could not match was created.
The replay is recorded (the token's name, --actor-detail, and what the
event's processing said before); a purged raw body does not matter. An event
pending already is FAILED_PRECONDITION and nothing changes. Once the event
is decided, the service resolves its open failed_event items as retried, and
its unmatched_payment item once it matches; failed again, or unmatched
again, they stay open. Needs the admin scope.`,
		Example: `  fulfillctl events list --state failed
  fulfillctl events replay 1234 --actor-detail "ticket 4411"
  fulfillctl events get 1234          # its new decision, once processed
  fulfillctl recon list --kind failed_event --state open   # what is still open`,
	}, func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (*fulfillmentv1.InboxEvent, error) {
		req.InboxEventId = id
		resp, err := client.ReplayInboxEvent(ctx, req)
		return resp.GetEvent(), err
	}, eventDetail, replayNote)
	cmd.Flags().StringVar(&req.ActorDetail, "actor-detail", "", "who asked, or a ticket, beside the token's name")
	return cmd
}

// replayNote is what events replay says of the replayed event e: that it is
// pending again, and what the service resolves once it is decided.
func replayNote(e *fulfillmentv1.InboxEvent) string {
	note := fmt.Sprintf("event %s is pending again (replay %d): the processor decides it again against the current state",
		e.GetId(), e.GetReplayCount())
	if r := e.GetReplays(); len(r) > 0 {
		switch {
		case r[0].GetPreviousState() == "failed":
			note += fmt.Sprintf("; its failed_event items are resolved once it is decided (events get %s)", e.GetId())
		case r[0].GetPreviousState() == "unmatched" && e.GetKind() == "payment_confirmed":
			// Only a confirmed payment decided unmatched opened an
			// unmatched_payment item; another event (a refund, an attempt)
			// opened none, and the note says nothing of one.
			note += fmt.Sprintf("; an unmatched_payment item of it is resolved once it matches (events get %s)", e.GetId())
		}
	}
	return note
}

// eventTable writes events as a table, one row each.
func eventTable(w io.Writer, events []*fulfillmentv1.InboxEvent) error {
	t := newTable(w, "ID", "STATE", "DECISION", "TYPE", "EVENT", "ORG", "ENDPOINT", "ORDER", "RECEIVED", "ATTEMPTS", "REPLAYS")
	for _, e := range events {
		t.row(e.GetId(), e.GetState(), e.GetDecision(), e.GetType(), e.GetEventId(), e.GetOrgId(), e.GetEndpointId(),
			e.GetOrderId(), timeText(e.GetReceiveTime()), strconv.Itoa(int(e.GetAttempts())), strconv.Itoa(int(e.GetReplayCount())))
	}
	return t.flush()
}

// eventFields writes an event's fields, one a line.
func eventFields(w io.Writer, e *fulfillmentv1.InboxEvent) error {
	f := newTable(w)
	f.row("id", e.GetId())
	f.row("event", e.GetEventId())
	f.row("type", e.GetType()+" ("+e.GetKind()+")")
	f.row("provider", e.GetProvider())
	f.row("endpoint", e.GetEndpointId())
	f.row("org", e.GetOrgId())
	f.row("environment", e.GetEnvironment())
	f.row("test mode", yesNo(e.GetTestMode()))
	f.row("occurred", timeText(e.GetOccurTime()))
	f.row("received", timeText(e.GetReceiveTime()))
	p := e.GetPayment()
	f.row("attempt", p.GetAttemptRef())
	f.row("invoice", p.GetInvoiceId())
	f.row("payment", p.GetPaymentId())
	f.row("checkout session", p.GetCheckoutSessionId())
	f.row("merchant order", p.GetMerchantOrderId())
	f.row("subscription ref", p.GetSubscriptionId())
	amount := p.GetAmount()
	if amount != "" {
		if p.GetCurrency() != "" {
			amount += " " + p.GetCurrency() + " minor units"
		} else {
			amount += " " + p.GetToken() + "/" + p.GetNetwork()
		}
	}
	f.row("amount", amount)
	keys := make([]string, 0, len(e.GetRefs()))
	for k := range e.GetRefs() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var refs []string
	for _, k := range keys {
		refs = append(refs, k+"="+e.GetRefs()[k])
	}
	f.row("refs", strings.Join(refs, " "))
	f.row("state", e.GetState())
	f.row("decision", e.GetDecision())
	f.row("reason", e.GetDecisionReason())
	f.row("order", e.GetOrderId())
	f.row("applied to subscription", e.GetSubscriptionId())
	f.row("attempts", strconv.Itoa(int(e.GetAttempts())))
	f.row("next attempt", timeText(e.GetNextAttemptTime()))
	f.row("last error", e.GetLastError())
	f.row("processed", timeText(e.GetProcessTime()))
	f.row("replays", strconv.Itoa(int(e.GetReplayCount())))
	return f.flush()
}

// eventDetail writes an event's fields, its replays, and its raw body.
func eventDetail(w io.Writer, e *fulfillmentv1.InboxEvent) error {
	if err := eventFields(w, e); err != nil {
		return err
	}
	if len(e.GetReplays()) > 0 {
		if _, err := fmt.Fprintf(w, "\nreplays (newest first, %d of %d):\n", len(e.GetReplays()), e.GetReplayCount()); err != nil {
			return err
		}
		t := newTable(w, "REPLAYED", "BY", "DETAIL", "BEFORE: STATE", "DECISION", "ATTEMPTS", "LAST ERROR")
		for _, r := range e.GetReplays() {
			t.row(timeText(r.GetReplayTime()), r.GetReplayedBy(), r.GetReplayedByDetail(), r.GetPreviousState(),
				r.GetPreviousDecision(), strconv.Itoa(int(r.GetPreviousAttempts())), r.GetPreviousLastError())
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	var body string
	switch e.GetRawBodyStatus() {
	case "included":
		body = rawBodyText(e.GetRawBody())
	case "purged":
		body = "- (purged after the retention period)"
	case "withheld":
		body = "- (this token may not see raw bodies)"
	default:
		return nil
	}
	_, err := fmt.Fprintf(w, "\nraw body:\n%s\n", body)
	return err
}

// rawBodyText is a body indented when JSON, as text when UTF-8, else
// quoted.
func rawBodyText(b []byte) string {
	if !utf8.Valid(b) {
		return strconv.Quote(string(b))
	}
	return payloadText(string(b))
}
