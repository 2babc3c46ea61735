package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

func newOrdersCmd(c *conn) *cobra.Command {
	cmd := &cobra.Command{Use: "orders", Short: "Create, show and list orders"}

	var file string
	create := &cobra.Command{
		Use:         "create --file ORDER.json",
		Annotations: printsJSON,
		Short:       "Create an order from a JSON CreateOrderRequest (- reads standard input)",
		Example: `  fulfillctl orders create --file order.json
  echo '{"org_id": "org_demo", "environment": "test", "merchant_order_id": "demo-9", "lines": [{"sku": "pro",
    "kind": "license", "quantity": 1, "unit_price": {"currency": "USD", "minor_units": 2500}}]}' |
    fulfillctl orders create --file -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var raw []byte
			var err error
			if file == "-" {
				raw, err = io.ReadAll(cmd.InOrStdin())
			} else {
				raw, err = os.ReadFile(file)
			}
			if err != nil {
				return fmt.Errorf("reading order: %w", err)
			}
			req := &fulfillmentv1.CreateOrderRequest{}
			if err := protojson.Unmarshal(raw, req); err != nil {
				return fmt.Errorf("parsing order: %w", err)
			}
			client, ctx, done, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resp, err := client.CreateOrder(ctx, req)
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), resp)
		},
	}
	create.Flags().StringVar(&file, "file", "", "JSON file with the order (- for standard input)")
	_ = create.MarkFlagRequired("file")

	var byMerchant fulfillmentv1.ListOrdersRequest
	get := &cobra.Command{
		Use:         "get ORDER_ID | --org ORG --merchant-order-id ID [--environment ENV]",
		Annotations: printsJSON,
		Short:       "Show one order, by its id or by the merchant's order id",
		Long: `Get prints one order with its history as JSON: by the service's order id, or
by the merchant's order id within an org (--org and --merchant-order-id;
--environment when the org has the id in both live and test). Needs the
orders:read scope.`,
		Example: `  fulfillctl orders get 019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b
  fulfillctl orders get --org org_demo --merchant-order-id demo-1`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			byRef := byMerchant.OrgId != "" || byMerchant.MerchantOrderId != "" || byMerchant.Environment != ""
			switch {
			case len(args) == 1 && byRef:
				return fmt.Errorf("give an order id or --org with --merchant-order-id, not both")
			case len(args) == 0 && (byMerchant.OrgId == "" || byMerchant.MerchantOrderId == ""):
				return fmt.Errorf("give an order id, or --org with --merchant-order-id")
			}
			return c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				id := ""
				if len(args) == 1 {
					id = args[0]
				} else {
					byMerchant.PageSize = 3
					found, err := client.ListOrders(ctx, &byMerchant)
					if err != nil {
						return err
					}
					switch n := len(found.GetOrders()); {
					case n == 0:
						return fmt.Errorf("no order of org %s has merchant order id %q", byMerchant.OrgId, byMerchant.MerchantOrderId)
					case n > 1:
						return fmt.Errorf("org %s has merchant order id %q in live and in test: add --environment", byMerchant.OrgId, byMerchant.MerchantOrderId)
					}
					id = found.GetOrders()[0].GetId()
				}
				resp, err := client.GetOrder(ctx, &fulfillmentv1.GetOrderRequest{OrderId: id})
				if err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), resp.GetOrder())
			})
		},
	}
	gf := get.Flags()
	gf.StringVar(&byMerchant.OrgId, "org", "", "with --merchant-order-id: the org of the order")
	gf.StringVar(&byMerchant.MerchantOrderId, "merchant-order-id", "", "with --org: the merchant's own order id")
	gf.StringVar(&byMerchant.Environment, "environment", "", "with --merchant-order-id: live or test")

	req := &fulfillmentv1.ListOrdersRequest{}
	list := &cobra.Command{
		Use:         "list",
		Annotations: printsJSON,
		Short:       "List orders, newest first",
		Example: `  fulfillctl orders list --org org_demo
  fulfillctl orders list --org org_demo --state on_hold --environment live
  fulfillctl orders list --customer-ref acct_42`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			client, ctx, done, err := c.client(cmd.Context())
			if err != nil {
				return err
			}
			defer done()
			resp, err := client.ListOrders(ctx, req)
			if err != nil {
				return err
			}
			return printJSON(cmd.OutOrStdout(), resp)
		},
	}
	lf := list.Flags()
	lf.StringVar(&req.OrgId, "org", "", "only this org")
	lf.StringVar(&req.Environment, "environment", "", "only live or test")
	lf.StringVar(&req.State, "state", "", "only this state")
	lf.StringVar(&req.MerchantOrderId, "merchant-order-id", "", "only this merchant order id")
	lf.StringVar(&req.CustomerRef, "customer-ref", "", "only orders with a line for this customer (credited account, subscriber)")
	lf.StringVar(&req.PaymentRef, "payment-ref", "", "only orders with a payment attempt of this provider reference (invoice, payment, checkout session)")
	lf.Int32Var(&req.PageSize, "page-size", 0, "orders per page (default 50)")
	lf.StringVar(&req.PageToken, "page-token", "", "continue from a previous next_page_token")

	pay := &fulfillmentv1.StartPaymentRequest{}
	startPayment := &cobra.Command{
		Use:     "start-payment ORDER_ID --endpoint ENDPOINT_ID",
		Short:   "Start paying an order at a provider (T-Bank Init) and print the attempt with its payment page",
		Example: `  fulfillctl orders start-payment 019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b --endpoint tbank-test`,
		Long: `start-payment asks the endpoint's provider for a payment of the order's total and prints the
attempt: its payment_url, or why it failed or waits for review. Running it again returns the same
attempt; --new-attempt starts the next one. Needs the orders:write scope.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			pay.OrderId = args[0]
			return c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				resp, err := client.StartPayment(ctx, pay)
				if err != nil {
					return err
				}
				return printJSON(cmd.OutOrStdout(), resp.GetPayment())
			})
		},
	}
	pf := startPayment.Flags()
	pf.StringVar(&pay.EndpointId, "endpoint", "", "the endpoint whose provider takes the payment (e.g. tbank-test)")
	pf.BoolVar(&pay.NewAttempt, "new-attempt", false, "start another attempt even if one was started")
	pf.Int32Var(&pay.ReplaceAttempt, "replace-attempt", 0, "with --new-attempt: the attempt being replaced, so that running the command again does not start yet another")
	pf.StringVar(&pay.Description, "description", "", "what the payer is shown (140 characters at most)")
	_ = startPayment.MarkFlagRequired("endpoint")

	cmd.AddCommand(create, get, list, startPayment)
	return cmd
}

func printJSON(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, UseProtoNames: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}
