package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/internal/english"
)

func newReconCmd(c *conn) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "recon",
		Short: "Summarize, list, show and resolve reconciliation items (what needs a person)",
	}
	cmd.AddCommand(newReconSummaryCmd(c), newReconActivityCmd(c), newReconListCmd(c), newReconGetCmd(c), newReconResolveCmd(c))
	return cmd
}

func newReconSummaryCmd(c *conn) *cobra.Command {
	var (
		req    fulfillmentv1.GetReconciliationSummaryRequest
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "summary [flags]",
		Short: "Count what needs a person, per org and environment",
		Long: `Summary shows, per org and environment: open reconciliation items (in all,
and by kind), the age of the oldest open item, stored events pending and
failed, orders with a confirmed payment that are not fulfilled (paid,
fulfilling or on hold), and outbox messages failed or uncertain. When
nothing needs a person it says so. --json prints a
GetReconciliationSummaryResponse. Needs the reconciliation:read scope; a
token limited to some orgs sees theirs only.`,
		Example: `  fulfillctl recon summary
  fulfillctl recon summary --org org_demo --environment test --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *fulfillmentv1.GetReconciliationSummaryResponse
			err := c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				var err error
				resp, err = client.GetReconciliationSummary(ctx, &req)
				return err
			})
			if err != nil {
				return err
			}
			if resp.GetOmittedSummaries() > 0 {
				_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "%d more org and environment pairs not shown: add --org\n", resp.GetOmittedSummaries())
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			return summaryTable(cmd.OutOrStdout(), resp.GetSummaries())
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.OrgId, "org", "", "only this org")
	f.StringVar(&req.Environment, "environment", "", "only live or test")
	f.BoolVar(&asJSON, "json", false, "print JSON (a GetReconciliationSummaryResponse) instead of a table")
	return cmd
}

func newReconListCmd(c *conn) *cobra.Command {
	var (
		filter       fulfillmentv1.ListReconciliationItemsRequest // the filters; paging is collectPages'
		from, before string
		limit        int
		token        string
		asJSON       bool
	)
	cmd := &cobra.Command{
		Use:   "list [flags]",
		Short: "List reconciliation items, newest first",
		Long: `List shows reconciliation items, newest first: one line per item with its
kind, state, org, environment, order, the provider event that opened it, the
amount (and what was expected), when it was opened, and what happened. It
pages through the service's pages until --limit items (0: all); when more
follow, stderr says how to continue (--page-token). --from and --before
bound when items were opened: an RFC 3339 time, or a duration back from now
(24h). An empty list says so. --json prints a
ListReconciliationItemsResponse. Needs the reconciliation:read scope; a
token limited to some orgs sees theirs only.`,
		Example: `  fulfillctl recon list --state open
  fulfillctl recon list --kind extra_payment --org org_demo --from 168h
  fulfillctl recon list --order 019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return fmt.Errorf("--limit %d: must not be negative (0 lists all)", limit)
			}
			now := time.Now()
			var err error
			if filter.CreateTimeFrom, err = timeFlag("--from", from, now); err != nil {
				return err
			}
			if filter.CreateTimeBefore, err = timeFlag("--before", before, now); err != nil {
				return err
			}
			resp := &fulfillmentv1.ListReconciliationItemsResponse{}
			err = c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				var err error
				resp.Items, resp.NextPageToken, err = collectPages(limit, token,
					func(size int32, token string) ([]*fulfillmentv1.ReconciliationItem, string, error) {
						page, err := client.ListReconciliationItems(ctx, &fulfillmentv1.ListReconciliationItemsRequest{
							Kind: filter.Kind, State: filter.State, OrderId: filter.OrderId, OrgId: filter.OrgId,
							Environment: filter.Environment, CreateTimeFrom: filter.CreateTimeFrom,
							CreateTimeBefore: filter.CreateTimeBefore, PageSize: size, PageToken: token,
						})
						return page.GetItems(), page.GetNextPageToken(), err
					})
				return err
			})
			if err != nil {
				return err
			}
			if resp.NextPageToken != "" {
				moreFollow(cmd.ErrOrStderr(), "items", resp.NextPageToken,
					timeArg{"--from", from, filter.CreateTimeFrom}, timeArg{"--before", before, filter.CreateTimeBefore})
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetItems()) == 0 {
				return printNone(cmd.OutOrStdout(), "reconciliation items", "")
			}
			return itemTable(cmd.OutOrStdout(), resp.GetItems())
		},
	}
	f := cmd.Flags()
	f.StringVar(&filter.Kind, "kind", "", "only items of this kind, e.g. extra_payment or failed_delivery")
	f.StringVar(&filter.State, "state", "", "only open or resolved items")
	f.StringVar(&filter.OrgId, "org", "", "only items of this org")
	f.StringVar(&filter.Environment, "environment", "", "only live or test")
	f.StringVar(&filter.OrderId, "order", "", "only items about this order id")
	f.StringVar(&from, "from", "", "only items opened at or after this time (RFC 3339, or a duration back from now: 24h)")
	f.StringVar(&before, "before", "", "only items opened before this time (RFC 3339, or a duration back from now)")
	f.IntVar(&limit, "limit", defaultListLimit, "show at most this many items (0: all)")
	f.StringVar(&token, "page-token", "", "continue after a previous list (the token it printed), with the same filters")
	f.BoolVar(&asJSON, "json", false, "print JSON (a ListReconciliationItemsResponse) instead of a table")
	return cmd
}

func newReconGetCmd(c *conn) *cobra.Command {
	return newIDCmd(c, &cobra.Command{
		Use:   "get ITEM_ID",
		Short: "Show one reconciliation item with its evidence",
		Long: `Get shows one item: what happened, its amounts, its resolution once resolved,
and its evidence — what the item links, as it is now: the order (state,
payment attempts, events, deliveries), the provider event that opened it
(decision, payment fields; never its raw body), the outbox message (state,
attempts), the payment the service started, the subscription. --json prints
a GetReconciliationItemResponse with every part in full. Needs the
reconciliation:read scope.`,
		Example: `  fulfillctl recon get 42
  fulfillctl recon get 42 --json`,
	}, func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (*fulfillmentv1.GetReconciliationItemResponse, error) {
		return client.GetReconciliationItem(ctx, &fulfillmentv1.GetReconciliationItemRequest{ItemId: id})
	}, itemDetail, nil)
}

func newReconResolveCmd(c *conn) *cobra.Command {
	req := &fulfillmentv1.ResolveReconciliationItemRequest{}
	cmd := newIDCmd(c, &cobra.Command{
		Use:   "resolve ITEM_ID --resolution KIND --note TEXT",
		Short: "Record how an open item was resolved",
		Long: `Resolve records how a person resolved an open item: the resolution
(refunded, fulfilled_manually, confirmed_duplicate_delivery, revoked,
retried or no_action), a note saying what was done, and optionally
--actor-detail (your name, a ticket). The resolver recorded is the token's
name. The item and its evidence are kept. An item resolved already is
FAILED_PRECONDITION naming when and by whom, and keeps its first
resolution. Needs the reconciliation:write scope. docs/reconciliation.md
says which resolution fits each kind.`,
		Example: `  fulfillctl recon get 42      # look first
  fulfillctl recon resolve 42 --resolution refunded --note "refunded the second payment at Yolfi" \
    --actor-detail "Dana, ticket 4411"`,
	}, func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (*fulfillmentv1.ReconciliationItem, error) {
		req.ItemId = id
		resp, err := client.ResolveReconciliationItem(ctx, req)
		return resp.GetItem(), err
	}, itemFields, func(it *fulfillmentv1.ReconciliationItem) string {
		return fmt.Sprintf("item %s is resolved as %s by %s", it.GetId(), it.GetResolution(), it.GetResolvedBy())
	})
	f := cmd.Flags()
	f.StringVar(&req.Resolution, "resolution", "", "refunded, fulfilled_manually, confirmed_duplicate_delivery, revoked, retried or no_action")
	f.StringVar(&req.Note, "note", "", "what was done and why (required)")
	f.StringVar(&req.ActorDetail, "actor-detail", "", "who did it, or a ticket, beside the token's name")
	_ = cmd.MarkFlagRequired("resolution")
	_ = cmd.MarkFlagRequired("note")
	return cmd
}

// timeFlag reads a time flag: RFC 3339, or a duration back from now; ""
// is unset (nil).
func timeFlag(name, v string, now time.Time) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return timestamppb.New(t), nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return nil, fmt.Errorf("%s %q: want an RFC 3339 time (2025-06-01T00:00:00Z) or a duration back from now (24h)", name, v)
	}
	return timestamppb.New(now.Add(-d)), nil
}

// summaryTable writes the summary, one row per org and environment; with
// no row, it says nothing needs a person.
func summaryTable(w io.Writer, rows []*fulfillmentv1.ReconciliationSummary) error {
	if len(rows) == 0 {
		return printNone(w, "org and environment pairs",
			"nothing needs a person: no open items, no pending or failed events, no paid orders awaiting fulfillment, no failed or uncertain messages")
	}
	t := newTable(w, "ORG", "ENV", "OPEN", "OLDEST OPEN", "EVENTS PENDING", "EVENTS FAILED", "PAID NOT FULFILLED",
		"OUTBOX FAILED", "OUTBOX UNCERTAIN", "OPEN BY KIND")
	for _, r := range rows {
		var kinds []string
		for _, k := range r.GetOpenByKind() {
			kinds = append(kinds, fmt.Sprintf("%s=%d", k.GetKind(), k.GetOpen()))
		}
		oldest := ""
		if r.GetOldestOpenAge() != nil {
			oldest = ageText(r.GetOldestOpenAge().AsDuration())
		}
		t.row(r.GetOrgId(), r.GetEnvironment(), count64(r.GetOpenItems()), oldest, count64(r.GetEventsPending()),
			count64(r.GetEventsFailed()), count64(r.GetPaidNotFulfilled()), count64(r.GetOutboxFailed()),
			count64(r.GetOutboxUncertain()), strings.Join(kinds, " "))
	}
	return t.flush()
}

func count64(n int64) string { return strconv.FormatInt(n, 10) }

// ageText is an age in its largest units: "3d4h", "5h12m", "42s".
func ageText(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d >= 24*time.Hour:
		return fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d >= time.Hour:
		return fmt.Sprintf("%dh%dm", d/time.Hour, d%time.Hour/time.Minute)
	}
	return d.String()
}

// itemTable writes items as a table, one row each.
func itemTable(w io.Writer, items []*fulfillmentv1.ReconciliationItem) error {
	t := newTable(w, "ID", "KIND", "STATE", "ORG", "ENV", "ORDER", "EVENT", "AMOUNT", "CREATED", "DETAIL")
	for _, it := range items {
		t.row(it.GetId(), it.GetKind(), it.GetState(), it.GetOrgId(), it.GetEnvironment(), it.GetOrderId(),
			it.GetEventId(), itemAmount(it), timeText(it.GetCreateTime()), it.GetDetail())
	}
	return t.flush()
}

// itemAmount is an item's amount with its unit, and what was expected:
// "25.5 USDT/TRON (expected 30)".
func itemAmount(it *fulfillmentv1.ReconciliationItem) string {
	unit := it.GetCurrency()
	if unit == "" && it.GetToken() != "" {
		unit = it.GetToken() + "/" + it.GetNetwork()
	} else if unit != "" {
		unit += " minor units"
	}
	s := ""
	if it.GetAmount() != "" {
		s = it.GetAmount() + " " + unit
	}
	if it.GetExpectedAmount() != "" {
		if s == "" {
			return "expected " + it.GetExpectedAmount() + " " + unit
		}
		s += " (expected " + it.GetExpectedAmount() + ")"
	}
	return s
}

// itemFields writes an item's fields, one a line.
func itemFields(w io.Writer, it *fulfillmentv1.ReconciliationItem) error {
	f := newTable(w)
	f.row("id", it.GetId())
	f.row("kind", it.GetKind())
	f.row("state", it.GetState())
	f.row("org", it.GetOrgId())
	f.row("environment", it.GetEnvironment())
	f.row("detail", it.GetDetail())
	f.row("created", timeText(it.GetCreateTime()))
	f.row("order", it.GetOrderId())
	f.row("event", it.GetEventId())
	f.row("stored event", it.GetInboxEventId())
	f.row("provider", it.GetProvider())
	f.row("attempt", it.GetAttemptRef())
	f.row("payment", it.GetPaymentId())
	f.row("amount", itemAmount(it))
	f.row("outbox message", it.GetOutboxMessageId())
	f.row("payment start", it.GetPaymentStartId())
	f.row("subscription", it.GetSubscriptionId())
	f.row("resolution", it.GetResolution())
	f.row("resolved", timeText(it.GetResolveTime()))
	resolver := it.GetResolvedBy()
	if it.GetResolvedByDetail() != "" {
		resolver += " (" + it.GetResolvedByDetail() + ")"
	}
	f.row("resolved by", resolver)
	f.row("note", it.GetResolutionNote())
	return f.flush()
}

// itemDetail writes an item, then each part of its evidence.
func itemDetail(w io.Writer, r *fulfillmentv1.GetReconciliationItemResponse) error {
	if err := itemFields(w, r.GetItem()); err != nil {
		return err
	}
	ev := r.GetEvidence()
	if o := ev.GetOrder(); o != nil {
		h := o.GetHistory()
		if _, err := fmt.Fprintf(w, "\norder %s (%s), %s %s, merchant order %s:\n", o.GetId(), o.GetState(),
			o.GetOrgId(), o.GetEnvironment(), o.GetMerchantOrderId()); err != nil {
			return err
		}
		a := newTable(w, "ATTEMPT", "PROVIDER", "STATE", "AMOUNT", "CREATED")
		for _, p := range h.GetPaymentAttempts() {
			a.row(p.GetProviderRef(), p.GetProvider(), p.GetState(), strings.TrimSpace(p.GetAmount()+" "+p.GetToken()+p.GetCurrency()),
				timeText(p.GetCreateTime()))
		}
		if err := a.flush(); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "\norder events (%d, %d older not shown):\n", len(h.GetEvents()), h.GetOmittedEvents()); err != nil {
			return err
		}
		e := newTable(w, "EVENT", "TYPE", "RECEIVED", "DECISION")
		for _, x := range h.GetEvents() {
			e.row(x.GetEventId(), x.GetType(), timeText(x.GetReceiveTime()), x.GetDecision())
		}
		if err := e.flush(); err != nil {
			return err
		}
		if _, err := fmt.Fprintf(w, "\nentitlements %d, ledger entries %d, deliveries %d\n", len(h.GetEntitlements())+int(h.GetOmittedEntitlements()),
			len(h.GetLedgerEntries())+int(h.GetOmittedLedgerEntries()), len(h.GetDeliveries())+int(h.GetOmittedDeliveries())); err != nil {
			return err
		}
	}
	if e := ev.GetEvent(); e != nil {
		if _, err := fmt.Fprintf(w, "\nstored event %s:\n", e.GetId()); err != nil {
			return err
		}
		if err := eventFields(w, e); err != nil {
			return err
		}
	}
	if m := ev.GetDelivery(); m != nil {
		if _, err := fmt.Fprintf(w, "\noutbox message %s: %s to %s, %s, last error %q\n", m.GetId(), m.GetState(),
			m.GetDestinationId(), english.Plural(m.GetAttempts(), "attempt"), m.GetLastError()); err != nil {
			return err
		}
	}
	if p := ev.GetPaymentStart(); p != nil {
		if _, err := fmt.Fprintf(w, "\npayment start %s: attempt %d at %s, %s, provider order %s, payment %s\n", r.GetItem().GetPaymentStartId(), p.GetAttempt(),
			p.GetEndpointId(), p.GetState(), p.GetProviderOrderId(), p.GetPaymentId()); err != nil {
			return err
		}
	}
	if s := ev.GetSubscription(); s != nil {
		if _, err := fmt.Fprintf(w, "\nsubscription %s: %s, plan %s, %s\n", s.GetId(), s.GetState(), s.GetPlanId(), english.Plural(s.GetPeriods(), "period")); err != nil {
			return err
		}
	}
	return nil
}
