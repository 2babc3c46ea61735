package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/internal/english"
)

func newRedriveCmd(c *conn) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "redrive",
		Short: "Replay events or retry outbox messages in bulk, by filter: plan, start, get, list, cancel",
		Long: `A re-drive replays every stored event, or retries every outbox message, that a
filter matches in one org. Plan it first (plan: how many match, a sample,
what it does; nothing changes), then start it with the same filter (start
--yes): the items matching then, at most 10,000 and oldest first, are
recorded and applied by the service in batches, each once. One re-drive at
a time per org. Follow it with get, stop it with cancel. Needs the admin
scope.`,
	}
	cmd.AddCommand(newRedrivePlanCmd(c), newRedriveStartCmd(c), newRedriveGetCmd(c), newRedriveListCmd(c), newRedriveCancelCmd(c))
	return cmd
}

// redriveFlags adds the filter's flags to cmd; its times are read before
// the command runs.
func redriveFlags(cmd *cobra.Command, f *fulfillmentv1.RedriveFilter) {
	var from, before string
	cmd.PreRunE = func(*cobra.Command, []string) error {
		now := time.Now()
		var err error
		if f.ReceivedAfter, err = timeFlag("--from", from, now); err != nil {
			return err
		}
		f.ReceivedBefore, err = timeFlag("--before", before, now)
		return err
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Target, "target", "", "events (replay stored events) or outbox (retry messages); required")
	fl.StringVar(&f.OrgId, "org", "", "the org of the items; required")
	fl.StringVar(&f.State, "state", "", "events: processed, ignored, unmatched or failed; outbox: failed or uncertain; required")
	fl.StringVar(&f.Environment, "environment", "", "only live or test")
	// --env was this flag's first name; the other commands say --environment.
	deprecatedName(cmd, "env", "environment")
	fl.StringVar(&f.Type, "type", "", "events only: only this event type")
	fl.StringVar(&f.Decision, "decision", "", "events only: only events with this decision")
	fl.StringVar(&f.EndpointId, "endpoint", "", "events only: only events of this endpoint")
	fl.StringVar(&f.DestinationId, "destination", "", "outbox only: only messages to this destination")
	fl.StringVar(&f.Provider, "provider", "", "events only: only events of this provider (yolfi, tbank)")
	fl.StringVar(&from, "from", "", "events only: only events received at or after this time: RFC 3339, or a duration back from now (1h)")
	fl.StringVar(&before, "before", "", "events only: only events received before this time: RFC 3339, or a duration back from now")
}

func newRedrivePlanCmd(c *conn) *cobra.Command {
	var (
		f      fulfillmentv1.RedriveFilter
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "plan --target T --org ORG --state S [filters]",
		Short: "Say what a re-drive with this filter would do; nothing changes",
		Example: `  fulfillctl redrive plan --target outbox --org org_demo --state failed --destination dev-listener
  fulfillctl redrive plan --target events --org org_demo --state failed
  fulfillctl redrive plan --target events --org org_demo --state failed --provider tbank --from 2h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *fulfillmentv1.PlanRedriveResponse
			err := c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				var err error
				resp, err = client.PlanRedrive(ctx, &fulfillmentv1.PlanRedriveRequest{Filter: &f})
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			return planText(cmd.OutOrStdout(), resp)
		},
	}
	redriveFlags(cmd, &f)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (a PlanRedriveResponse) instead of text")
	return cmd
}

func planText(w io.Writer, p *fulfillmentv1.PlanRedriveResponse) error {
	n := strconv.FormatInt(p.GetMatched(), 10)
	if p.GetCapped() {
		n = "more than 10000 (a run applies the oldest 10000)"
	}
	if _, err := fmt.Fprintf(w, "matching items: %s\nwhat it does: %s\n\n", n, p.GetEffect()); err != nil {
		return err
	}
	if len(p.GetSample()) == 0 {
		return printNone(w, "items", "a re-drive with this filter would change nothing")
	}
	if _, err := fmt.Fprintln(w, "oldest matching:"); err != nil {
		return err
	}
	t := newTable(w, "ID", "ITEM", "ORDER")
	for _, x := range p.GetSample() {
		t.row(x.GetId(), x.GetSummary(), x.GetOrderId())
	}
	return t.flush()
}

func newRedriveStartCmd(c *conn) *cobra.Command {
	var (
		f      fulfillmentv1.RedriveFilter
		detail string
		yes    bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "start --target T --org ORG --state S [filters] --yes",
		Short: "Start a re-drive (plan it first: it changes what the filter matches)",
		Example: `  fulfillctl redrive start --target outbox --org org_demo --state failed --destination dev-listener --yes
  fulfillctl redrive get 7`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !yes {
				return errors.New("start changes every item the filter matches: plan it first (fulfillctl redrive plan), then add --yes")
			}
			var resp *fulfillmentv1.StartRedriveResponse
			err := c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				var err error
				resp, err = client.StartRedrive(ctx, &fulfillmentv1.StartRedriveRequest{Filter: &f, ActorDetail: detail})
				return err
			})
			if err != nil {
				return err
			}
			_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "re-drive %s started with %s: follow it with fulfillctl redrive get %s\n",
				resp.GetRedrive().GetId(), english.Plural(resp.GetRedrive().GetTotal(), "item"), resp.GetRedrive().GetId())
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp.GetRedrive())
			}
			return redriveDetail(cmd.OutOrStdout(), resp.GetRedrive())
		},
	}
	redriveFlags(cmd, &f)
	cmd.Flags().StringVar(&detail, "detail", "", "free text recorded with the run (your name, a ticket)")
	cmd.Flags().BoolVar(&yes, "yes", false, "start it: the filter's items are changed")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (a Redrive) instead of text")
	return cmd
}

func newRedriveGetCmd(c *conn) *cobra.Command {
	return newIDCmd(c, &cobra.Command{
		Use:   "get REDRIVE_ID",
		Short: "Show a re-drive and its progress",
		// What a person following a run may type first.
		SuggestFor: []string{"watch", "status", "show"},
		Example:    `  fulfillctl redrive get 7`,
	}, func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (*fulfillmentv1.Redrive, error) {
		resp, err := client.GetRedrive(ctx, &fulfillmentv1.GetRedriveRequest{RedriveId: id})
		return resp.GetRedrive(), err
	}, redriveDetail, nil)
}

func newRedriveCancelCmd(c *conn) *cobra.Command {
	return newIDCmd(c, &cobra.Command{
		Use:     "cancel REDRIVE_ID",
		Short:   "Stop a running re-drive: items not applied yet stay so",
		Example: `  fulfillctl redrive cancel 7`,
	}, func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (*fulfillmentv1.Redrive, error) {
		resp, err := client.CancelRedrive(ctx, &fulfillmentv1.CancelRedriveRequest{RedriveId: id})
		return resp.GetRedrive(), err
	}, redriveDetail, func(d *fulfillmentv1.Redrive) string {
		return fmt.Sprintf("re-drive %s cancelled after %d of %s", d.GetId(), d.GetApplied()+d.GetSkipped(), english.Plural(d.GetTotal(), "item"))
	})
}

func newRedriveListCmd(c *conn) *cobra.Command {
	var (
		org    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list [--org ORG]",
		Short: "List the newest re-drives (at most 50)",
		Example: `  fulfillctl redrive list
  fulfillctl redrive list --org org_demo --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *fulfillmentv1.ListRedrivesResponse
			err := c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				var err error
				resp, err = client.ListRedrives(ctx, &fulfillmentv1.ListRedrivesRequest{OrgId: org})
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetRedrives()) == 0 {
				return printNone(cmd.OutOrStdout(), "re-drives", "")
			}
			t := newTable(cmd.OutOrStdout(), "ID", "STATE", "TARGET", "ORG", "FILTER STATE", "TOTAL", "APPLIED", "SKIPPED", "BY", "CREATED")
			for _, d := range resp.GetRedrives() {
				t.row(d.GetId(), d.GetState(), d.GetFilter().GetTarget(), d.GetFilter().GetOrgId(), d.GetFilter().GetState(),
					strconv.FormatInt(d.GetTotal(), 10), strconv.FormatInt(d.GetApplied(), 10), strconv.FormatInt(d.GetSkipped(), 10),
					d.GetCreatedBy(), timeText(d.GetCreateTime()))
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&org, "org", "", "only this org's re-drives")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (a ListRedrivesResponse) instead of a table")
	return cmd
}

// filterText is a re-drive's filter but its target and org, as the flags
// that set it, the ones set only: "state=failed provider=tbank
// from=2025-06-01T12:00:00Z".
func filterText(f *fulfillmentv1.RedriveFilter) string {
	var set []string
	for _, kv := range [][2]string{
		{"state", f.GetState()}, {"environment", f.GetEnvironment()}, {"type", f.GetType()}, {"decision", f.GetDecision()},
		{"endpoint", f.GetEndpointId()}, {"destination", f.GetDestinationId()}, {"provider", f.GetProvider()},
		{"from", timeText(f.GetReceivedAfter())}, {"before", timeText(f.GetReceivedBefore())},
	} {
		if kv[1] != "" {
			set = append(set, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(set, " ")
}

// redriveDetail writes one run, a field a line.
func redriveDetail(w io.Writer, d *fulfillmentv1.Redrive) error {
	t := newTable(w)
	f := d.GetFilter()
	t.row("id", d.GetId())
	t.row("state", d.GetState())
	t.row("target", f.GetTarget())
	t.row("org", f.GetOrgId())
	t.row("filter", filterText(f))
	t.row("progress", fmt.Sprintf("%d applied, %d skipped, of %d", d.GetApplied(), d.GetSkipped(), d.GetTotal()))
	t.row("started by", d.GetCreatedBy()+" "+d.GetCreatedByDetail())
	t.row("created", timeText(d.GetCreateTime()))
	t.row("finished", timeText(d.GetFinishTime()))
	t.row("cancelled by", d.GetCancelledBy())
	return t.flush()
}
