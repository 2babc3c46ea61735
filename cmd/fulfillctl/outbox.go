package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// defaultListLimit is how many items a list command shows unless --limit
// says otherwise.
const defaultListLimit = 100

func newOutboxCmd(c *conn) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "List, show, retry and confirm outbox messages (deliveries to destinations)",
	}
	cmd.AddCommand(newOutboxListCmd(c), newOutboxGetCmd(c), newOutboxRetryCmd(c), newOutboxConfirmCmd(c))
	return cmd
}

func newOutboxListCmd(c *conn) *cobra.Command {
	var (
		filter fulfillmentv1.ListOutboxMessagesRequest // the filters; paging is collectPages'
		limit  int
		token  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list [flags]",
		Short: "List outbox messages, newest first (without payload and attempts)",
		Long: `List shows outbox messages, newest first: one line per message with its state,
attempts, destination, topic, order (and the external line it fulfils), org,
environment, creation time and last error. It pages through the service's
pages until --limit messages (0: all); when more follow, stderr says how to
continue (--page-token). --json prints the messages and next_page_token as
a ListOutboxMessagesResponse. Needs the outbox:read scope; a token limited
to some orgs sees theirs only.`,
		Example: `  fulfillctl outbox list --state uncertain
  fulfillctl outbox list --destination crm --org org_demo --limit 0 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return fmt.Errorf("--limit %d: must not be negative (0 lists all)", limit)
			}
			resp := &fulfillmentv1.ListOutboxMessagesResponse{}
			err := c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				var err error
				resp.Messages, resp.NextPageToken, err = collectPages(limit, token,
					func(size int32, token string) ([]*fulfillmentv1.OutboxMessage, string, error) {
						page, err := client.ListOutboxMessages(ctx, &fulfillmentv1.ListOutboxMessagesRequest{
							State: filter.State, DestinationId: filter.DestinationId, OrderId: filter.OrderId,
							OrgId: filter.OrgId, Environment: filter.Environment, PageSize: size, PageToken: token,
						})
						return page.GetMessages(), page.GetNextPageToken(), err
					})
				return err
			})
			if err != nil {
				return err
			}
			if resp.NextPageToken != "" {
				moreFollow(cmd.ErrOrStderr(), "messages", resp.NextPageToken)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetMessages()) == 0 {
				return printNone(cmd.OutOrStdout(), "outbox messages", "")
			}
			return messageTable(cmd.OutOrStdout(), resp.GetMessages())
		},
	}
	f := cmd.Flags()
	f.StringVar(&filter.State, "state", "", "only messages in this state: pending, delivered, failed or uncertain")
	f.StringVar(&filter.DestinationId, "destination", "", "only messages to this destination id")
	f.StringVar(&filter.OrderId, "order", "", "only messages about this order id")
	f.StringVar(&filter.OrgId, "org", "", "only messages of this org")
	f.StringVar(&filter.Environment, "environment", "", "only live or test")
	f.IntVar(&limit, "limit", defaultListLimit, "show at most this many messages (0: all)")
	f.StringVar(&token, "page-token", "", "continue after a previous list (the token it printed), with the same filters")
	f.BoolVar(&asJSON, "json", false, "print JSON (a ListOutboxMessagesResponse) instead of a table")
	return cmd
}

func newOutboxGetCmd(c *conn) *cobra.Command {
	return newIDCmd(c, &cobra.Command{
		Use:   "get MESSAGE_ID",
		Short: "Show one outbox message with its payload and attempts",
		Long: `Get shows one outbox message: its state, destination, topic, idempotency key,
order, last answer, its attempts (start, duration, HTTP status, outcome,
reason; the newest 100, and how many older ones are not shown) and the JSON
payload as sent. --json prints the OutboxMessage. Needs the outbox:read
scope.`,
		Example: `  fulfillctl outbox get 1234
  fulfillctl outbox get 1234 --json`,
	}, func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (*fulfillmentv1.OutboxMessage, error) {
		resp, err := client.GetOutboxMessage(ctx, &fulfillmentv1.GetOutboxMessageRequest{MessageId: id})
		return resp.GetMessage(), err
	}, messageDetail, nil)
}

func newOutboxRetryCmd(c *conn) *cobra.Command {
	var resend bool
	cmd := newIDCmd(c, &cobra.Command{
		Use:   "retry MESSAGE_ID",
		Short: "Send a message again, under the same idempotency key",
		Long: `Retry makes a failed or uncertain message pending again: the dispatcher sends
it to the same destination again, with the same webhook-id and
Idempotency-Key, and its attempts count from 1 again. A pending message
waiting out its backoff is sent at once (its attempts kept). A delivered
message is sent again only with --resend, for a receiver that lost it. It
prints the message, pending, and asks no confirmation.

An uncertain message may have arrived: a destination that does not honour
idempotency keys then applies it twice. Check with the destination first.
Once it is delivered, the service resolves its reconciliation items; failed
or uncertain again, it opens a new one. A message being sent at that
moment, or a delivered one without --resend, is FAILED_PRECONDITION. Needs
the admin scope.`,
		Example: `  fulfillctl outbox list --state uncertain
  fulfillctl outbox get 1234          # then check with the destination
  fulfillctl outbox retry 1234
  fulfillctl outbox retry 1234 --resend   # delivered, and the receiver lost it`,
	}, func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (*fulfillmentv1.OutboxMessage, error) {
		resp, err := client.RetryOutboxMessage(ctx, &fulfillmentv1.RetryOutboxMessageRequest{MessageId: id, Resend: resend})
		return resp.GetMessage(), err
	}, messageDetail, func(m *fulfillmentv1.OutboxMessage) string {
		return fmt.Sprintf("message %s is %s again: it will be sent to %s again under the same idempotency key %s",
			m.GetId(), m.GetState(), m.GetDestinationId(), m.GetIdempotencyKey())
	})
	cmd.Flags().BoolVar(&resend, "resend", false, "also send a delivered message again (for a receiver that lost it)")
	return cmd
}

func newOutboxConfirmCmd(c *conn) *cobra.Command {
	req := &fulfillmentv1.ConfirmOutboxDeliveryRequest{}
	cmd := newIDCmd(c, &cobra.Command{
		Use:   "confirm MESSAGE_ID --note TEXT",
		Short: "Record that a failed or uncertain message reached its destination",
		Long: `Confirm records what a person learnt from the destination: it has a failed
or uncertain message (once). Nothing is sent. The message is delivered, its
order is fulfilled when it was the last message the order awaited, and the
message's open failed_delivery and uncertain_delivery items (of every
round) are resolved as confirmed_delivered, with the note (required: how the destination
confirmed it) and --actor-detail (your name, a ticket). The resolver
recorded is the token's name. It prints the message, delivered.

If the destination does not have the message, retry it instead (outbox
retry). A message that is pending, being sent or delivered is
FAILED_PRECONDITION, and nothing changes. Needs the admin scope.`,
		Example: `  fulfillctl outbox list --state uncertain
  fulfillctl outbox get 1234          # then check with the destination
  fulfillctl outbox confirm 1234 --note "shipping's on-call sees it applied once (INC-7)" --actor-detail Dana`,
	}, func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (*fulfillmentv1.OutboxMessage, error) {
		req.MessageId = id
		resp, err := client.ConfirmOutboxDelivery(ctx, req)
		return resp.GetMessage(), err
	}, messageDetail, func(m *fulfillmentv1.OutboxMessage) string {
		return fmt.Sprintf("message %s is %s: nothing was sent; its open items, if any, are resolved as confirmed_delivered", m.GetId(), m.GetState())
	})
	f := cmd.Flags()
	f.StringVar(&req.Note, "note", "", "how the destination confirmed it has the message (required)")
	f.StringVar(&req.ActorDetail, "actor-detail", "", "who confirmed it, or a ticket, beside the token's name")
	_ = cmd.MarkFlagRequired("note")
	return cmd
}

// messageTable writes messages as a table, one row each.
func messageTable(w io.Writer, msgs []*fulfillmentv1.OutboxMessage) error {
	t := newTable(w, "ID", "STATE", "ATTEMPTS", "DESTINATION", "TOPIC", "ORDER", "LINE", "ORG", "ENV", "CREATED", "LAST ERROR")
	for _, m := range msgs {
		t.row(m.GetId(), m.GetState(), strconv.Itoa(int(m.GetAttempts())), m.GetDestinationId(), m.GetTopic(),
			m.GetOrderId(), lineText(m), m.GetOrgId(), m.GetEnvironment(), timeText(m.GetCreateTime()), m.GetLastError())
	}
	return t.flush()
}

// messageDetail writes one message: its fields, one a line, then its
// attempts as a table, then its payload, indented.
func messageDetail(w io.Writer, m *fulfillmentv1.OutboxMessage) error {
	f := newTable(w)
	f.row("id", m.GetId())
	f.row("state", m.GetState())
	f.row("destination", m.GetDestinationId())
	f.row("topic", m.GetTopic())
	f.row("idempotency key", m.GetIdempotencyKey())
	f.row("order", m.GetOrderId())
	f.row("line", lineText(m))
	f.row("required", yesNo(m.GetRequired()))
	f.row("org", m.GetOrgId())
	f.row("environment", m.GetEnvironment())
	f.row("attempts", strconv.Itoa(int(m.GetAttempts())))
	f.row("created", timeText(m.GetCreateTime()))
	f.row("next attempt", timeText(m.GetNextAttemptTime()))
	f.row("processed", timeText(m.GetProcessTime()))
	f.row("last status", statusText(m.GetLastStatus()))
	f.row("last error", m.GetLastError())
	if err := f.flush(); err != nil {
		return err
	}

	if _, err := fmt.Fprintf(w, "\nattempt history (%s):\n", historyCount(m)); err != nil {
		return err
	}
	if len(m.GetAttemptHistory()) > 0 {
		a := newTable(w, "ATTEMPT", "STARTED", "TOOK", "STATUS", "OUTCOME", "REASON")
		for _, h := range m.GetAttemptHistory() {
			took := ""
			if h.GetStartTime() != nil && h.GetFinishTime() != nil {
				took = h.GetFinishTime().AsTime().Sub(h.GetStartTime().AsTime()).Round(time.Millisecond).String()
			}
			a.row(strconv.Itoa(int(h.GetAttempt())), timeText(h.GetStartTime()), took,
				statusText(h.GetStatus()), h.GetOutcome(), h.GetReason())
		}
		if err := a.flush(); err != nil {
			return err
		}
	}

	_, err := fmt.Fprintf(w, "\npayload:\n%s\n", payloadText(m.GetPayload()))
	return err
}

// historyCount says how many attempts the history shows, and how many
// older ones the service left out (it sends the newest 100), e.g. "100,
// and 23 older not shown".
func historyCount(m *fulfillmentv1.OutboxMessage) string {
	n := strconv.Itoa(len(m.GetAttemptHistory()))
	if m.GetOmittedAttempts() > 0 {
		n += fmt.Sprintf(", and %d older not shown", m.GetOmittedAttempts())
	}
	return n
}

// lineText is the external line a message fulfils (from 0), or "" for an
// order event.
func lineText(m *fulfillmentv1.OutboxMessage) string {
	if m.LineNo == nil {
		return ""
	}
	return strconv.Itoa(int(m.GetLineNo()))
}

// statusText is an HTTP status, or "" for 0 (no answer came).
func statusText(code int32) string {
	if code == 0 {
		return ""
	}
	return strconv.Itoa(int(code))
}

// payloadText is a JSON payload indented, or quoted when it is not JSON.
func payloadText(payload string) string {
	if payload == "" {
		return "-"
	}
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(payload), "", "  "); err != nil {
		return strconv.Quote(payload)
	}
	return b.String()
}
