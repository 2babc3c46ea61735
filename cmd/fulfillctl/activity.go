package main

import (
	"context"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

func newReconActivityCmd(c *conn) *cobra.Command {
	var (
		req    fulfillmentv1.GetActivityRequest
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "activity [flags]",
		Short: "Count, per minute of the last hour, events stored, orders fulfilled and messages delivered",
		Long: `Activity shows one line per minute, oldest first, of the last --minutes
minutes (60 by default, at most 180) and the current one: the provider
events stored (a webhook delivered again is not stored again), the orders
that reached fulfilled, and the outbox messages delivered. Minutes with
nothing are shown as 0. --json prints a GetActivityResponse. Needs the
reconciliation:read scope; a token limited to some orgs counts theirs only.`,
		Example: `  fulfillctl recon activity
  fulfillctl recon activity --minutes 10 --org org_demo --environment test`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *fulfillmentv1.GetActivityResponse
			err := c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				var err error
				resp, err = client.GetActivity(ctx, &req)
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			return activityTable(cmd.OutOrStdout(), resp.GetMinutes())
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.OrgId, "org", "", "only this org")
	f.StringVar(&req.Environment, "environment", "", "only live or test")
	f.Int32Var(&req.Minutes, "minutes", 0, "whole minutes before the current one (0: 60; at most 180)")
	f.BoolVar(&asJSON, "json", false, "print JSON (a GetActivityResponse) instead of a table")
	return cmd
}

// activityTable writes one row per minute, and the window's totals.
func activityTable(w io.Writer, ms []*fulfillmentv1.ActivityMinute) error {
	t := newTable(w, "MINUTE", "EVENTS", "FULFILLED", "DELIVERED")
	var ev, ful, del int64
	for _, m := range ms {
		ev, ful, del = ev+m.GetEventsReceived(), ful+m.GetOrdersFulfilled(), del+m.GetMessagesDelivered()
		t.row(timeText(m.GetStartTime()), strconv.FormatInt(m.GetEventsReceived(), 10),
			strconv.FormatInt(m.GetOrdersFulfilled(), 10), strconv.FormatInt(m.GetMessagesDelivered(), 10))
	}
	t.row("total", strconv.FormatInt(ev, 10), strconv.FormatInt(ful, 10), strconv.FormatInt(del, 10))
	return t.flush()
}
