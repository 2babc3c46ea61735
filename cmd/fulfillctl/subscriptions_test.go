package main

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// paySubscriptionOrder creates a live order of svcOrg whose one line pays
// a period of customer's subscription to pro-monthly, and pays it through
// the Yolfi endpoint. It returns the order id.
func (s *service) paySubscriptionOrder(t *testing.T, merchantOrderID, customer string) string {
	t.Helper()
	resp, err := s.client.CreateOrder(admin(t), &fulfillmentv1.CreateOrderRequest{
		OrgId: svcOrg, Environment: "live", MerchantOrderId: merchantOrderID,
		Lines: []*fulfillmentv1.OrderLine{{Sku: "pro-month", Kind: "subscription", Quantity: 1,
			UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 2500}, AccountRef: customer, PlanId: "pro-monthly"}},
		Settlement: &fulfillmentv1.Settlement{Token: "USDT", Network: "TRON", Amount: "25.000000"},
	})
	if err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	s.sendPayment(t, merchantOrderID, "inv_"+merchantOrderID, "pay_"+merchantOrderID)
	return resp.GetOrder().GetId()
}

// A paid subscription order gives the customer access: access check says
// so, subscriptions list and get show the subscription and its period;
// subscriptions create registers another one, once; what the service
// refuses is one line.
func TestSubscriptionAndAccessCommands(t *testing.T) {
	t.Parallel()
	s := startServiceWith(t, func(c *config.Config) { c.Plans = []config.Plan{{ID: "pro-monthly", Months: 1}} })

	out := s.ctlOK(t, "access", "check", "--org", svcOrg, "--customer-ref", "user_42", "--plan", "pro-monthly")
	wantMatches(t, "access check before paying", out, `(?m)^access +no$`, `(?m)^until +-$`,
		`(?m)^reason +no subscription of this customer to this plan$`, `(?m)^subscription +-$`, `(?m)^checked at +`+timeRE+`$`)

	s.paySubscriptionOrder(t, "ctl-sub-1", "user_42")
	var access *fulfillmentv1.CheckAccessResponse
	waitUntil(t, "access granted by the paid order", func() bool {
		access = fromJSON(t, s.ctlOK(t, "access", "check", "--org", svcOrg, "--customer-ref", "user_42", "--plan", "pro-monthly", "--json"),
			&fulfillmentv1.CheckAccessResponse{})
		return access.GetHasAccess()
	})
	id := access.GetSubscriptionId()
	if access.GetReason() != "paid period" || id == "" || access.GetUntil().AsTime().Before(time.Now().AddDate(0, 0, 27)) {
		t.Errorf("access check --json: %v, want a month of paid period", access)
	}
	wantMatches(t, "access check", s.ctlOK(t, "access", "check", "--org", svcOrg, "--customer-ref", "user_42", "--plan", "pro-monthly"),
		`\Aaccess +yes\n`, `(?m)^until +`+timeRE+`$`, `(?m)^reason +paid period$`, `(?m)^subscription +`+id+`$`)

	// Listed, and shown with its period.
	lines := strings.Split(strings.TrimSuffix(s.ctlOK(t, "subscriptions", "list", "--customer-ref", "user_42"), "\n"), "\n")
	if len(lines) != 2 || !regexp.MustCompile(`^ID +STATE +PERIODS +PERIOD END +PLAN +CUSTOMER +PROVIDER +PROVIDER ID +ORG +ENV +CREATED$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^`+id+` +active +1 +`+timeRE+` +pro-monthly +user_42 +yolfi +\S+ +org_a +live +`+timeRE+`$`).MatchString(lines[1]) {
		t.Fatalf("subscriptions list --customer user_42:\n%s", strings.Join(lines, "\n"))
	}
	wantMatches(t, "subscriptions get", s.ctlOK(t, "subscriptions", "get", id),
		`(?m)^id +`+id+`$`, `(?m)^state +active$`, `(?m)^plan +pro-monthly$`, `(?m)^customer +user_42$`, `(?m)^periods +1$`,
		`(?m)^access now +yes, until `+timeRE+` \(paid period\)$`,
		`(?m)^paid periods \(1\):\nPERIOD +START +END +BILL +PAYMENT +GRANTED\n1 +`+timeRE+` +`+timeRE+` +invoice:inv_ctl-sub-1 +pay_ctl-sub-1 +`+timeRE+`\n\z`)
	got := fromJSON(t, s.ctlOK(t, "subscriptions", "get", id, "--json"), &fulfillmentv1.GetSubscriptionResponse{})
	if got.GetSubscription().GetId() != id || len(got.GetPeriods()) != 1 || !got.GetAccess().GetHasAccess() {
		t.Errorf("subscriptions get --json: %v", got)
	}

	// Registered by hand: created once, then found; no period paid.
	create := []string{"subscriptions", "create", "--org", svcOrg, "--provider", "yolfi", "--provider-subscription-id", "sub_ctl_2",
		"--customer-ref", "user_43", "--plan", "pro-monthly"}
	out, errOut, err := s.ctl(t, create...)
	if err != nil || !regexp.MustCompile(`(?m)^state +active$`).MatchString(out) || !regexp.MustCompile(`(?m)^periods +0$`).MatchString(out) ||
		!regexp.MustCompile(`\Asubscription \S+ created\n\z`).MatchString(errOut) {
		t.Fatalf("subscriptions create: %v\n%s\nstderr %q", err, out, errOut)
	}
	created := fromJSON(t, s.ctlOK(t, append(create, "--json")...), &fulfillmentv1.CreateSubscriptionResponse{})
	if created.GetCreated() || created.GetSubscription().GetCustomerRef() != "user_43" {
		t.Errorf("subscriptions create again: %v, want the same, not created", created)
	}
	wantMatches(t, "access check of the registered one", s.ctlOK(t, "access", "check", "--org", svcOrg, "--customer-ref", "user_43", "--plan", "pro-monthly"),
		`\Aaccess +no\n`, `(?m)^reason +no period was paid$`, `(?m)^subscription +`+created.GetSubscription().GetId()+`$`)
	if all := fromJSON(t, s.ctlOK(t, "subscriptions", "list", "--org", svcOrg, "--json"), &fulfillmentv1.ListSubscriptionsResponse{}); len(all.GetSubscriptions()) != 2 ||
		all.GetSubscriptions()[0].GetId() != created.GetSubscription().GetId() {
		t.Errorf("subscriptions list --json: %v, want both, newest first", all)
	}

	// What the service refuses, on one line.
	_, _, err = s.ctl(t, "subscriptions", "create", "--org", svcOrg, "--provider", "yolfi", "--provider-subscription-id", "sub_ctl_2",
		"--customer-ref", "user_44", "--plan", "pro-monthly")
	wantAPIError(t, err, codes.AlreadyExists, "ALREADY_EXISTS: conflict: subscription "+created.GetSubscription().GetId()+" already exists under this provider_subscription_id with another customer")
	_, _, err = s.ctl(t, "access", "check", "--org", svcOrg, "--customer-ref", "user_42", "--plan", "gold")
	wantAPIError(t, err, codes.InvalidArgument, `INVALID_ARGUMENT: plan_id: "gold" is not a configured plan`)
	_, _, err = s.ctl(t, "subscriptions", "list", "--state", "lapsed")
	wantAPIError(t, err, codes.InvalidArgument, "INVALID_ARGUMENT: state: ")
	_, _, err = s.ctl(t, "subscriptions", "get", "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b")
	wantAPIError(t, err, codes.NotFound, "NOT_FOUND: subscription not found")
	// --customer, the flag's first name, still works and says so.
	if out, _, err := s.ctl(t, "access", "check", "--org", svcOrg, "--customer", "user_42", "--plan", "pro-monthly"); err != nil ||
		!strings.HasPrefix(out, "Flag --customer has been deprecated, use --customer-ref\naccess ") || !strings.Contains(out, "paid period") {
		t.Errorf("access check --customer: %v\n%s", err, out)
	}
	if _, _, err := s.ctl(t, "access", "check", "--org", svcOrg, "--plan", "pro-monthly"); err == nil || !strings.Contains(err.Error(), "customer-ref") {
		t.Errorf("access check without --customer-ref: %v, want it asked for", err)
	}
}
