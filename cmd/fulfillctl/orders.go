package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

func newOrdersCmd(c *conn) *cobra.Command {
	cmd := &cobra.Command{Use: "orders", Short: "Create, show and list orders, and start their payments"}
	cmd.AddCommand(newOrdersCreateCmd(c), newOrdersGetCmd(c), newOrdersListCmd(c), newOrdersStartPaymentCmd(c))
	return cmd
}

func newOrdersCreateCmd(c *conn) *cobra.Command {
	var (
		file   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "create --file ORDER.json",
		Short: "Create an order from a JSON CreateOrderRequest (- reads standard input)",
		Long: `Create sends the CreateOrderRequest in --file (JSON, field names as in the
API) and prints the order: its fields, then its lines. Sending the same
merchant order id again prints the order created the first time; stderr
says whether it was created now. --json prints the CreateOrderResponse.
Needs the orders:write scope.`,
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
				return fmt.Errorf("reading the order: %w", err)
			}
			req := &fulfillmentv1.CreateOrderRequest{}
			if err := protojson.Unmarshal(raw, req); err != nil {
				return fmt.Errorf("parsing the order in %s: %w (write a CreateOrderRequest as JSON, as in the example of --help)", file, err)
			}
			var resp *fulfillmentv1.CreateOrderResponse
			err = c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				resp, err = client.CreateOrder(ctx, req)
				return err
			})
			if err != nil {
				return err
			}
			note := "order %s created\n"
			if !resp.GetCreated() {
				note = "order %s existed already under this merchant order id: nothing created\n"
			}
			_, _ = fmt.Fprintf(cmd.ErrOrStderr(), note, resp.GetOrder().GetId())
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			return orderDetail(cmd.OutOrStdout(), resp.GetOrder())
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "JSON file with the order (- for standard input)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (a CreateOrderResponse) instead of text")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func newOrdersGetCmd(c *conn) *cobra.Command {
	var (
		byMerchant fulfillmentv1.ListOrdersRequest
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "get ORDER_ID | --org ORG --merchant-order-id ID [--environment ENV]",
		Short: "Show one order with its history, by its id or by the merchant's order id",
		Long: `Get shows one order: by the service's order id, or by the merchant's order id
within an org (--org and --merchant-order-id; --environment when the org has
the id in both live and test). It prints the order's fields, then its
lines, payment attempts, payments started, provider events, entitlements
(without their values), ledger entries and deliveries, each as a table.
--json prints the Order with its whole history. Needs the orders:read
scope.`,
		Example: `  fulfillctl orders get 019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b
  fulfillctl orders get --org org_demo --merchant-order-id demo-1 --json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			byRef := byMerchant.OrgId != "" || byMerchant.MerchantOrderId != "" || byMerchant.Environment != ""
			switch {
			case len(args) == 1 && byRef:
				return errors.New("give an order id or --org with --merchant-order-id, not both")
			case len(args) == 0 && (byMerchant.OrgId == "" || byMerchant.MerchantOrderId == ""):
				return errors.New("give an order id, or --org with --merchant-order-id")
			}
			var order *fulfillmentv1.Order
			err := c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
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
						return fmt.Errorf("no order of org %s has merchant order id %q: check the id, or list them with fulfillctl orders list --org %s",
							byMerchant.OrgId, byMerchant.MerchantOrderId, byMerchant.OrgId)
					case n > 1:
						return fmt.Errorf("org %s has merchant order id %q in live and in test: add --environment", byMerchant.OrgId, byMerchant.MerchantOrderId)
					}
					id = found.GetOrders()[0].GetId()
				}
				resp, err := client.GetOrder(ctx, &fulfillmentv1.GetOrderRequest{OrderId: id})
				order = resp.GetOrder()
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), order)
			}
			return orderDetail(cmd.OutOrStdout(), order)
		},
	}
	f := cmd.Flags()
	f.StringVar(&byMerchant.OrgId, "org", "", "with --merchant-order-id: the org of the order")
	f.StringVar(&byMerchant.MerchantOrderId, "merchant-order-id", "", "with --org: the merchant's own order id")
	f.StringVar(&byMerchant.Environment, "environment", "", "with --merchant-order-id: live or test")
	f.BoolVar(&asJSON, "json", false, "print JSON (the Order with its history) instead of text")
	return cmd
}

func newOrdersListCmd(c *conn) *cobra.Command {
	var (
		filter   fulfillmentv1.ListOrdersRequest // the filters; paging is collectPages'
		limit    int
		pageSize int
		token    string
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "list [flags]",
		Short: "List orders, newest first",
		Long: `List shows orders, newest first: one line per order with its state, org,
environment, merchant order id, total, number of lines and creation time.
It pages through the service's pages until --limit orders (0: all); when
more follow, stderr says how to continue (--page-token). An empty list says
so. --json prints the orders and next_page_token as a ListOrdersResponse.
Needs the orders:read scope; a token limited to some orgs sees theirs
only.`,
		Example: `  fulfillctl orders list --org org_demo
  fulfillctl orders list --org org_demo --state on_hold --environment test
  fulfillctl orders list --customer-ref acct_42 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("page-size") && !cmd.Flags().Changed("limit") {
				limit = pageSize
			}
			if limit < 0 {
				return fmt.Errorf("--limit %d: must not be negative (0 lists all)", limit)
			}
			resp := &fulfillmentv1.ListOrdersResponse{}
			err := c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				var err error
				resp.Orders, resp.NextPageToken, err = collectPages(limit, token,
					func(size int32, token string) ([]*fulfillmentv1.Order, string, error) {
						page, err := client.ListOrders(ctx, &fulfillmentv1.ListOrdersRequest{
							OrgId: filter.OrgId, Environment: filter.Environment, State: filter.State,
							MerchantOrderId: filter.MerchantOrderId, CustomerRef: filter.CustomerRef, PaymentRef: filter.PaymentRef,
							PageSize: size, PageToken: token,
						})
						return page.GetOrders(), page.GetNextPageToken(), err
					})
				return err
			})
			if err != nil {
				return err
			}
			if resp.NextPageToken != "" {
				moreFollow(cmd.ErrOrStderr(), "orders", resp.NextPageToken)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetOrders()) == 0 {
				return printNone(cmd.OutOrStdout(), "orders", "")
			}
			return orderTable(cmd.OutOrStdout(), resp.GetOrders())
		},
	}
	f := cmd.Flags()
	f.StringVar(&filter.OrgId, "org", "", "only this org")
	f.StringVar(&filter.Environment, "environment", "", "only live or test")
	f.StringVar(&filter.State, "state", "", "only this state")
	f.StringVar(&filter.MerchantOrderId, "merchant-order-id", "", "only this merchant order id")
	f.StringVar(&filter.CustomerRef, "customer-ref", "", "only orders with a line for this customer (credited account, subscriber)")
	f.StringVar(&filter.PaymentRef, "payment-ref", "", "only orders with a payment attempt of this provider reference (invoice, payment, checkout session)")
	f.IntVar(&limit, "limit", defaultListLimit, "show at most this many orders (0: all)")
	f.IntVar(&pageSize, "page-size", 0, "the former name of --limit")
	_ = f.MarkDeprecated("page-size", "use --limit")
	f.StringVar(&token, "page-token", "", "continue after a previous list (the token it printed), with the same filters")
	f.BoolVar(&asJSON, "json", false, "print JSON (a ListOrdersResponse) instead of a table")
	return cmd
}

func newOrdersStartPaymentCmd(c *conn) *cobra.Command {
	var pay fulfillmentv1.StartPaymentRequest
	cmd := newIDCmd(c, &cobra.Command{
		Use:     "start-payment ORDER_ID --endpoint ENDPOINT_ID",
		Short:   "Start paying an order at a provider (T-Bank Init) and print the attempt with its payment page",
		Example: `  fulfillctl orders start-payment 019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b --endpoint tbank-test`,
		Long: `Start-payment asks the endpoint's provider for a payment of the order's
total (T-Bank: Init) and prints the attempt: its payment_url, or why it
failed or waits for review. Running it again returns the same attempt;
--new-attempt starts the next one. --json prints the PaymentStart. Needs
the orders:write scope.`,
	}, func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (*fulfillmentv1.PaymentStart, error) {
		pay.OrderId = id
		resp, err := client.StartPayment(ctx, &pay)
		return resp.GetPayment(), err
	}, paymentStartDetail, nil)
	f := cmd.Flags()
	f.StringVar(&pay.EndpointId, "endpoint", "", "the endpoint whose provider takes the payment (e.g. tbank-test)")
	f.BoolVar(&pay.NewAttempt, "new-attempt", false, "start another attempt even if one was started")
	f.Int32Var(&pay.ReplaceAttempt, "replace-attempt", 0, "with --new-attempt: the attempt being replaced, so that running the command again does not start yet another")
	f.StringVar(&pay.Description, "description", "", "what the payer is shown (140 characters at most)")
	_ = cmd.MarkFlagRequired("endpoint")
	return cmd
}

// moneyText is an amount of money in minor units with its currency, e.g.
// "2500 USD"; "" when it is not set.
func moneyText(m *fulfillmentv1.Money) string {
	if m == nil {
		return ""
	}
	return strconv.FormatInt(m.GetMinorUnits(), 10) + " " + m.GetCurrency()
}

// settlementText is what an order expects from the provider, e.g.
// "25.000000 USDT/TRON (tolerance 0.5)"; "" when it states none.
func settlementText(s *fulfillmentv1.Settlement) string {
	if s == nil {
		return ""
	}
	text := s.GetAmount() + " " + s.GetToken() + "/" + s.GetNetwork()
	if s.GetTolerance() != "" {
		text += " (tolerance " + s.GetTolerance() + ")"
	}
	return text
}

// orderTable writes orders as a table, one row each.
func orderTable(w io.Writer, orders []*fulfillmentv1.Order) error {
	t := newTable(w, "ID", "STATE", "ORG", "ENV", "MERCHANT ORDER", "TOTAL (MINOR UNITS)", "LINES", "CREATED")
	for _, o := range orders {
		t.row(o.GetId(), o.GetState(), o.GetOrgId(), o.GetEnvironment(), o.GetMerchantOrderId(), moneyText(o.GetTotal()),
			strconv.Itoa(len(o.GetLines())), timeText(o.GetCreateTime()))
	}
	return t.flush()
}

// section writes a blank line and a heading: its name and how many items
// it shows, and how many older ones the service left out.
func section(w io.Writer, name string, shown int, omitted int32) error {
	n := strconv.Itoa(shown)
	if omitted > 0 {
		n += fmt.Sprintf(", and %d older not shown", omitted)
	}
	_, err := fmt.Fprintf(w, "\n%s (%s):\n", name, n)
	return err
}

// orderDetail writes one order: its fields, one a line, its lines, then
// each part of its history (when the answer has it), each as a table
// under a heading with its count; a part with nothing in it is its heading
// alone. Entitlement values (license keys) are left out: --json has them.
func orderDetail(w io.Writer, o *fulfillmentv1.Order) error {
	f := newTable(w)
	f.row("id", o.GetId())
	f.row("state", o.GetState())
	f.row("org", o.GetOrgId())
	f.row("environment", o.GetEnvironment())
	f.row("merchant order", o.GetMerchantOrderId())
	f.row("checkout session", o.GetCheckoutSessionId())
	f.row("total", moneyText(o.GetTotal())+" minor units")
	f.row("settlement", settlementText(o.GetSettlement()))
	f.row("created", timeText(o.GetCreateTime()))
	f.row("updated", timeText(o.GetUpdateTime()))
	if err := f.flush(); err != nil {
		return err
	}

	type part struct {
		name    string
		shown   int
		omitted int32
		write   func(io.Writer) error
	}
	parts := []part{{"lines", len(o.GetLines()), 0, func(w io.Writer) error {
		t := newTable(w, "LINE", "SKU", "KIND", "QUANTITY", "UNIT PRICE", "ACCOUNT", "DESTINATION", "PLAN")
		for i, l := range o.GetLines() {
			t.row(strconv.Itoa(i), l.GetSku(), l.GetKind(), strconv.FormatInt(l.GetQuantity(), 10), moneyText(l.GetUnitPrice()),
				l.GetAccountRef(), l.GetDestination(), l.GetPlanId())
		}
		return t.flush()
	}}}
	if h := o.GetHistory(); h != nil {
		parts = append(parts,
			part{"payment attempts", len(h.GetPaymentAttempts()), h.GetOmittedPaymentAttempts(), func(w io.Writer) error {
				t := newTable(w, "PROVIDER", "REF", "STATE", "AMOUNT", "CREATED")
				for _, a := range h.GetPaymentAttempts() {
					amount := a.GetAmount()
					switch {
					case a.GetCurrency() != "":
						amount += " " + a.GetCurrency() + " minor units"
					case a.GetToken() != "":
						amount += " " + a.GetToken() + "/" + a.GetNetwork()
					}
					t.row(a.GetProvider(), a.GetProviderRef(), a.GetState(), strings.TrimSpace(amount), timeText(a.GetCreateTime()))
				}
				return t.flush()
			}},
			part{"payments started", len(h.GetPaymentStarts()), 0, func(w io.Writer) error {
				// STATE is the start's (started once the provider created
				// the payment); PAYMENT STATE what became of the payment.
				t := newTable(w, "ATTEMPT", "ENDPOINT", "STATE", "PROVIDER ORDER", "PAYMENT", "PAYMENT STATE", "AMOUNT", "CREATED")
				for _, p := range h.GetPaymentStarts() {
					t.row(strconv.Itoa(int(p.GetAttempt())), p.GetEndpointId(), p.GetState(), p.GetProviderOrderId(), p.GetPaymentId(),
						p.GetPaymentState(), moneyText(p.GetAmount()), timeText(p.GetCreateTime()))
				}
				return t.flush()
			}},
			part{"events", len(h.GetEvents()), h.GetOmittedEvents(), func(w io.Writer) error {
				t := newTable(w, "EVENT", "TYPE", "RECEIVED", "DECISION")
				for _, e := range h.GetEvents() {
					t.row(e.GetEventId(), e.GetType(), timeText(e.GetReceiveTime()), e.GetDecision())
				}
				return t.flush()
			}},
			part{"entitlements", len(h.GetEntitlements()), h.GetOmittedEntitlements(), func(w io.Writer) error {
				t := newTable(w, "ID", "KIND", "SKU", "UNIT", "GRANTED", "REVOKED", "REVOKED BECAUSE")
				for _, e := range h.GetEntitlements() {
					t.row(e.GetId(), e.GetKind(), e.GetSku(), strconv.FormatInt(e.GetUnit(), 10), timeText(e.GetCreateTime()),
						timeText(e.GetRevokeTime()), e.GetRevokedReason())
				}
				return t.flush()
			}},
			part{"ledger entries", len(h.GetLedgerEntries()), h.GetOmittedLedgerEntries(), func(w io.Writer) error {
				t := newTable(w, "ID", "ACCOUNT", "MOVEMENT", "AMOUNT", "CREATED")
				for _, l := range h.GetLedgerEntries() {
					t.row(l.GetId(), l.GetAccountRef(), l.GetMovement(), moneyText(l.GetAmount()), timeText(l.GetCreateTime()))
				}
				return t.flush()
			}},
			part{"deliveries", len(h.GetDeliveries()), h.GetOmittedDeliveries(), func(w io.Writer) error {
				return messageTable(w, h.GetDeliveries())
			}},
		)
	}
	for _, p := range parts {
		if err := section(w, p.name, p.shown, p.omitted); err != nil {
			return err
		}
		if p.shown == 0 {
			continue
		}
		if err := p.write(w); err != nil {
			return err
		}
	}
	return nil
}

// paymentStartDetail writes a payment the service started, a field a line.
func paymentStartDetail(w io.Writer, p *fulfillmentv1.PaymentStart) error {
	f := newTable(w)
	f.row("order", p.GetOrderId())
	f.row("endpoint", p.GetEndpointId())
	f.row("attempt", strconv.Itoa(int(p.GetAttempt())))
	f.row("provider order", p.GetProviderOrderId())
	f.row("state", p.GetState())
	f.row("amount", moneyText(p.GetAmount()))
	f.row("payment", p.GetPaymentId())
	if ps := p.GetPaymentState(); ps != "" {
		f.row("payment state", ps)
	}
	f.row("payment url", p.GetPaymentUrl())
	f.row("detail", p.GetDetail())
	f.row("created", timeText(p.GetCreateTime()))
	f.row("updated", timeText(p.GetUpdateTime()))
	return f.flush()
}

// jsonOptions write the API's messages as the REST gateway answers them
// (restMarshaler in server/gateway.go): proto field names, and every field,
// a false, zero or empty one included ("has_access": false), where the
// default leaves them out.
var jsonOptions = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}

// printJSON writes m as indented JSON (--json). The indentation is
// encoding/json's, two spaces, one space after a colon: protojson's own
// whitespace varies on purpose, from build to build, so that nobody relies
// on it, and scripts comparing outputs would.
func printJSON(w io.Writer, m proto.Message) error {
	b, err := jsonOptions.Marshal(m)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}
