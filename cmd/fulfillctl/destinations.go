package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

func newDestinationsCmd(c *conn) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "destinations",
		Short: "List, disable and enable outbox destinations (admin)",
	}
	cmd.AddCommand(newDestinationsListCmd(c), newDestinationsDisableCmd(c), newDestinationsEnableCmd(c))
	return cmd
}

func newDestinationsListCmd(c *conn) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the configured destinations and their messages by state",
		Long: `List shows every configured destination: whether it is enabled (or when and
why it was disabled), its pending, failed and uncertain messages, whether it
honours idempotency keys, the order events it receives and its URL. --json
prints a ListDestinationsResponse. Needs the admin scope.`,
		Example: `  fulfillctl destinations list
  fulfillctl destinations list -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *fulfillmentv1.ListDestinationsResponse
			err := c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				var err error
				resp, err = client.ListDestinations(ctx, &fulfillmentv1.ListDestinationsRequest{})
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetDestinations()) == 0 {
				return printNone(cmd.OutOrStdout(), "destinations", "none is configured: see destinations in the service's configuration")
			}
			return destinationTable(cmd.OutOrStdout(), resp.GetDestinations()...)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (a ListDestinationsResponse) instead of a table")
	return cmd
}

func newDestinationsDisableCmd(c *conn) *cobra.Command {
	var reason string
	cmd := newIDCmd(c, &cobra.Command{
		Use:   "disable DESTINATION_ID --reason TEXT",
		Short: "Stop deliveries to a destination: its messages wait",
		Long: `Disable stops deliveries to a destination until it is enabled again: its
messages stay pending (deliveries in flight complete). --reason is required;
the service stores it with the token's name, and destinations list shows it.
Prints the destination. Needs the admin scope.`,
		Example: `  fulfillctl destinations disable crm --reason "CRM maintenance until 18:00, ticket OPS-12"`,
	}, func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (*fulfillmentv1.Destination, error) {
		resp, err := client.DisableDestination(ctx, &fulfillmentv1.DisableDestinationRequest{DestinationId: id, Reason: reason})
		return resp.GetDestination(), err
	}, destinationRow, func(d *fulfillmentv1.Destination) string {
		return fmt.Sprintf("deliveries to %s are stopped: its messages wait until fulfillctl destinations enable %s", d.GetId(), d.GetId())
	})
	cmd.Flags().StringVar(&reason, "reason", "", "why, for whoever lists the destinations (required)")
	_ = cmd.MarkFlagRequired("reason")
	return cmd
}

func newDestinationsEnableCmd(c *conn) *cobra.Command {
	return newIDCmd(c, &cobra.Command{
		Use:   "enable DESTINATION_ID",
		Short: "Resume deliveries to a destination disabled by hand or by a 410 Gone answer",
		Long: `Enable resumes deliveries to a destination disabled by hand or by a 410 Gone
answer: its waiting messages are sent. Prints the destination. Needs the
admin scope.`,
		Example: `  fulfillctl destinations enable crm`,
	}, func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (*fulfillmentv1.Destination, error) {
		resp, err := client.EnableDestination(ctx, &fulfillmentv1.EnableDestinationRequest{DestinationId: id})
		return resp.GetDestination(), err
	}, destinationRow, func(d *fulfillmentv1.Destination) string {
		return fmt.Sprintf("deliveries to %s resume (%d pending)", d.GetId(), d.GetPending())
	})
}

// destinationRow writes one destination as a table.
func destinationRow(w io.Writer, d *fulfillmentv1.Destination) error { return destinationTable(w, d) }

// destinationTable writes destinations as a table, one row each.
func destinationTable(w io.Writer, dests ...*fulfillmentv1.Destination) error {
	t := newTable(w, "ID", "STATE", "PENDING", "FAILED", "UNCERTAIN", "IDEMPOTENT", "EVENTS", "URL", "DISABLED")
	for _, d := range dests {
		state, disabled := "enabled", ""
		if !d.GetEnabled() {
			state = "disabled"
			disabled = strings.TrimSpace(timeText(d.GetDisableTime()) + " " + d.GetDisabledReason())
		}
		t.row(d.GetId(), state, strconv.FormatInt(d.GetPending(), 10), strconv.FormatInt(d.GetFailed(), 10),
			strconv.FormatInt(d.GetUncertain(), 10), yesNo(d.GetIdempotent()), strings.Join(d.GetEvents(), ","),
			d.GetUrl(), disabled)
	}
	return t.flush()
}
