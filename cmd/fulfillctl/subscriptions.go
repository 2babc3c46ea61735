package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

func newSubscriptionsCmd(c *conn) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "subscriptions",
		Short: "List, show and create subscriptions",
	}
	cmd.AddCommand(newSubscriptionsListCmd(c), newSubscriptionsGetCmd(c), newSubscriptionsCreateCmd(c))
	return cmd
}

func newSubscriptionsListCmd(c *conn) *cobra.Command {
	var (
		filter fulfillmentv1.ListSubscriptionsRequest // the filters; paging is collectPages'
		limit  int
		token  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list [flags]",
		Short: "List subscriptions, newest first",
		Long: `List shows subscriptions, newest first: one line per subscription with its
state, paid periods, the end of its current period, plan, customer, provider
and the provider's id of it, org, environment and creation time. It pages
through the service's pages until --limit subscriptions (0: all); when more
follow, stderr says how to continue (--page-token). --json prints the
subscriptions and next_page_token as a ListSubscriptionsResponse. Needs the
orders:read scope; a token limited to some orgs sees theirs only.`,
		Example: `  fulfillctl subscriptions list --org org_demo --customer-ref user_42
  fulfillctl subscriptions list --state past_due --limit 0 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit < 0 {
				return fmt.Errorf("--limit %d: must not be negative (0 lists all)", limit)
			}
			resp := &fulfillmentv1.ListSubscriptionsResponse{}
			err := c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				var err error
				resp.Subscriptions, resp.NextPageToken, err = collectPages(limit, token,
					func(size int32, token string) ([]*fulfillmentv1.Subscription, string, error) {
						page, err := client.ListSubscriptions(ctx, &fulfillmentv1.ListSubscriptionsRequest{
							OrgId: filter.OrgId, Environment: filter.Environment, CustomerRef: filter.CustomerRef,
							PlanId: filter.PlanId, State: filter.State, PageSize: size, PageToken: token,
						})
						return page.GetSubscriptions(), page.GetNextPageToken(), err
					})
				return err
			})
			if err != nil {
				return err
			}
			if resp.NextPageToken != "" {
				moreFollow(cmd.ErrOrStderr(), "subscriptions", resp.NextPageToken)
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			if len(resp.GetSubscriptions()) == 0 {
				return printNone(cmd.OutOrStdout(), "subscriptions", "")
			}
			return subscriptionTable(cmd.OutOrStdout(), resp.GetSubscriptions())
		},
	}
	f := cmd.Flags()
	f.StringVar(&filter.OrgId, "org", "", "only subscriptions of this org")
	f.StringVar(&filter.Environment, "environment", "", "only live or test")
	f.StringVar(&filter.CustomerRef, "customer-ref", "", "only subscriptions of this customer reference")
	deprecatedName(cmd, "customer", "customer-ref") // its first name; orders list and the API say customer-ref
	f.StringVar(&filter.PlanId, "plan", "", "only subscriptions to this plan")
	f.StringVar(&filter.State, "state", "", "only subscriptions in this state: active, past_due, cancelled or expired")
	f.IntVar(&limit, "limit", defaultListLimit, "show at most this many subscriptions (0: all)")
	f.StringVar(&token, "page-token", "", "continue after a previous list (the token it printed), with the same filters")
	f.BoolVar(&asJSON, "json", false, "print JSON (a ListSubscriptionsResponse) instead of a table")
	return cmd
}

func newSubscriptionsGetCmd(c *conn) *cobra.Command {
	return newIDCmd(c, &cobra.Command{
		Use:   "get SUBSCRIPTION_ID",
		Short: "Show one subscription with its paid periods and its access now",
		Long: `Get shows one subscription: its fields, the access it grants now (whether,
until when, and why, by its plan as configured), and its paid periods
(number, start, end, the bill and payment that paid it; the newest 100, and
how many older ones are not shown). --json prints the
GetSubscriptionResponse. Needs the orders:read scope.`,
		Example: `  fulfillctl subscriptions get 019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b`,
	}, func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id string) (*fulfillmentv1.GetSubscriptionResponse, error) {
		return client.GetSubscription(ctx, &fulfillmentv1.GetSubscriptionRequest{SubscriptionId: id})
	}, subscriptionDetail, nil)
}

func newSubscriptionsCreateCmd(c *conn) *cobra.Command {
	var (
		req    fulfillmentv1.CreateSubscriptionRequest
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "create --org ORG --provider PROVIDER --provider-subscription-id ID --customer-ref REF --plan PLAN",
		Short: "Register a subscription a provider knows of, for a customer and a plan",
		Long: `Create registers a subscription before its first payment arrives: the
provider's id of it, the customer it belongs to and the configured plan it
is to. Its first payment pays its first period. Running it again prints
the same subscription (stderr says it existed); the same provider id with
another customer or plan is ALREADY_EXISTS. It is created in live unless
--environment says test (make run's endpoints are test ones). --json
prints the CreateSubscriptionResponse. Needs the orders:write scope.`,
		Example: `  fulfillctl subscriptions create --org org_demo --environment test --provider yolfi \
    --provider-subscription-id sub_123 --customer-ref user_42 --plan pro-monthly`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *fulfillmentv1.CreateSubscriptionResponse
			err := c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				var err error
				resp, err = client.CreateSubscription(ctx, &req)
				return err
			})
			if err != nil {
				return err
			}
			note := "subscription %s created\n"
			if !resp.GetCreated() {
				note = "subscription %s existed already: nothing created\n"
			}
			_, _ = fmt.Fprintf(cmd.ErrOrStderr(), note, resp.GetSubscription().GetId())
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			return subscriptionDetail(cmd.OutOrStdout(), &fulfillmentv1.GetSubscriptionResponse{Subscription: resp.GetSubscription()})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.OrgId, "org", "", "the org it belongs to")
	f.StringVar(&req.Environment, "environment", "live", "live or test")
	f.StringVar(&req.Provider, "provider", "", "the provider: yolfi or tbank")
	f.StringVar(&req.ProviderSubscriptionId, "provider-subscription-id", "", "the provider's id of the subscription (Yolfi subscriptionId, T-Bank RebillId)")
	f.StringVar(&req.CustomerRef, "customer-ref", "", "your reference of the customer")
	deprecatedName(cmd, "customer", "customer-ref")
	f.StringVar(&req.PlanId, "plan", "", "a configured plan")
	f.BoolVar(&asJSON, "json", false, "print JSON (a CreateSubscriptionResponse) instead of text")
	for _, name := range []string{"org", "provider", "provider-subscription-id", "customer-ref", "plan"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

func newAccessCmd(c *conn) *cobra.Command {
	cmd := &cobra.Command{Use: "access", Short: "Check a customer's access to a plan"}
	var (
		req    fulfillmentv1.CheckAccessRequest
		asJSON bool
	)
	check := &cobra.Command{
		Use:   "check --org ORG --customer-ref REF --plan PLAN",
		Short: "Say whether a customer has access to a plan now, until when and why",
		Long: `Check asks the service what the services selling the plan ask on every
request (CheckAccess): whether the customer has access to the plan now,
until when, why, and which of the customer's subscriptions says so. It
prints "access yes" or "access no" first; the command succeeds either way.
It asks about live unless --environment says test (a test-mode customer,
such as make run's, has no live subscription). --json prints the
CheckAccessResponse. Needs the orders:read scope.`,
		Example: `  fulfillctl access check --org org_demo --environment test --customer-ref user_42 --plan pro-monthly`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var resp *fulfillmentv1.CheckAccessResponse
			err := c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
				var err error
				resp, err = client.CheckAccess(ctx, &req)
				return err
			})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), resp)
			}
			t := newTable(cmd.OutOrStdout())
			t.row("access", yesNo(resp.GetHasAccess()))
			t.row("until", timeText(resp.GetUntil()))
			t.row("reason", resp.GetReason())
			t.row("subscription", resp.GetSubscriptionId())
			t.row("checked at", timeText(resp.GetCheckTime()))
			return t.flush()
		},
	}
	f := check.Flags()
	f.StringVar(&req.OrgId, "org", "", "the customer's org")
	f.StringVar(&req.Environment, "environment", "live", "live or test")
	f.StringVar(&req.CustomerRef, "customer-ref", "", "your reference of the customer")
	deprecatedName(check, "customer", "customer-ref")
	f.StringVar(&req.PlanId, "plan", "", "a configured plan")
	f.BoolVar(&asJSON, "json", false, "print JSON (a CheckAccessResponse) instead of text")
	for _, name := range []string{"org", "customer-ref", "plan"} {
		_ = check.MarkFlagRequired(name)
	}
	cmd.AddCommand(check)
	return cmd
}

// subscriptionTable writes subscriptions as a table, one row each.
func subscriptionTable(w io.Writer, subs []*fulfillmentv1.Subscription) error {
	t := newTable(w, "ID", "STATE", "PERIODS", "PERIOD END", "PLAN", "CUSTOMER", "PROVIDER", "PROVIDER ID", "ORG", "ENV", "CREATED")
	for _, s := range subs {
		t.row(s.GetId(), s.GetState(), strconv.Itoa(int(s.GetPeriods())), timeText(s.GetCurrentPeriodEndTime()), s.GetPlanId(),
			s.GetCustomerRef(), s.GetProvider(), s.GetProviderSubscriptionId(), s.GetOrgId(), s.GetEnvironment(),
			timeText(s.GetCreateTime()))
	}
	return t.flush()
}

// subscriptionDetail writes one subscription: its fields, one a line, its
// access now (when the answer has it), then its paid periods as a table
// (when the answer has any).
func subscriptionDetail(w io.Writer, r *fulfillmentv1.GetSubscriptionResponse) error {
	s := r.GetSubscription()
	f := newTable(w)
	f.row("id", s.GetId())
	f.row("state", s.GetState())
	f.row("plan", s.GetPlanId())
	f.row("customer", s.GetCustomerRef())
	f.row("provider", s.GetProvider())
	f.row("provider id", s.GetProviderSubscriptionId())
	f.row("org", s.GetOrgId())
	f.row("environment", s.GetEnvironment())
	f.row("periods", strconv.Itoa(int(s.GetPeriods())))
	f.row("period start", timeText(s.GetCurrentPeriodStartTime()))
	f.row("period end", timeText(s.GetCurrentPeriodEndTime()))
	f.row("access ended", timeText(s.GetAccessEndTime()))
	f.row("created", timeText(s.GetCreateTime()))
	f.row("updated", timeText(s.GetUpdateTime()))
	if a := r.GetAccess(); a != nil {
		f.row("access now", accessText(a))
	}
	if err := f.flush(); err != nil {
		return err
	}
	if len(r.GetPeriods()) == 0 {
		return nil
	}
	n := strconv.Itoa(len(r.GetPeriods()))
	if r.GetOmittedPeriods() > 0 {
		n += fmt.Sprintf(", and %d older not shown", r.GetOmittedPeriods())
	}
	if _, err := fmt.Fprintf(w, "\npaid periods (%s):\n", n); err != nil {
		return err
	}
	p := newTable(w, "PERIOD", "START", "END", "BILL", "PAYMENT", "GRANTED")
	for _, pp := range r.GetPeriods() {
		p.row(strconv.Itoa(int(pp.GetPeriod())), timeText(pp.GetStartTime()), timeText(pp.GetEndTime()), pp.GetBill(),
			pp.GetPaymentId(), timeText(pp.GetCreateTime()))
	}
	return p.flush()
}

// accessText says an access in one line, e.g. "yes, until
// 2027-02-01T10:00:00Z (paid period)".
func accessText(a *fulfillmentv1.Access) string {
	text := yesNo(a.GetHasAccess())
	if a.GetUntil() != nil {
		text += ", until " + timeText(a.GetUntil())
	}
	return text + " (" + a.GetReason() + ")"
}
