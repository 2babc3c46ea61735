package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// The customer of these tests: its reference must never reach the log.
const testCustomer = "customer-7f3a9c@example.com"

// withPlans configures a monthly plan with the default grace (72h) and a
// yearly one without grace.
func withPlans(c *config.Config) {
	none := time.Duration(0)
	c.Plans = append(c.Plans, config.Plan{ID: "pro-monthly", Months: 1}, config.Plan{ID: "pro-yearly", Months: 12, Grace: &none})
}

// subscriptionRequest is a valid CreateSubscription request.
func subscriptionRequest(org, providerID, customer, plan string) *fulfillmentv1.CreateSubscriptionRequest {
	return &fulfillmentv1.CreateSubscriptionRequest{OrgId: org, Environment: "live", Provider: "yolfi",
		ProviderSubscriptionId: providerID, CustomerRef: customer, PlanId: plan}
}

// createSubscription creates a subscription with the ops token and returns
// its id.
func (ts *testServer) createSubscription(t *testing.T, req *fulfillmentv1.CreateSubscriptionRequest) string {
	t.Helper()
	resp, err := ts.client.CreateSubscription(withToken(tokOps), req)
	if err != nil {
		t.Fatalf("CreateSubscription: %v", err)
	}
	return resp.GetSubscription().GetId()
}

// pay records periods [from, from + months) … as n consecutive paid
// periods of subscription id, and leaves it in state: as the rules would
// have stored them, behind the service's back (the inbox is not running in
// these tests).
func (ts *testServer) pay(t *testing.T, id string, from time.Time, months, n int, state string) {
	t.Helper()
	ts.exec(t, `
		INSERT INTO subscription_periods (subscription_id, period, period_key, payment_id, starts_at, ends_at)
		SELECT $1::uuid, g, 'invoice:inv_' || g, 'pay_' || g, $2::timestamptz + (g - 1) * $3 * interval '1 month',
			$2::timestamptz + g * $3 * interval '1 month'
		FROM generate_series(1, $4::int) AS g`, id, from, months, n)
	ts.exec(t, `
		UPDATE subscriptions SET periods = $4, state = $5,
			period_start = $2::timestamptz + ($4 - 1) * $3 * interval '1 month',
			period_end = $2::timestamptz + $4 * $3 * interval '1 month', updated_at = now()
		WHERE id = $1::uuid`, id, from, months, n, state)
}

// payPeriod records one paid period of subscription id, from start to end
// (a month or so: the dates a test needs, which a whole month from a given
// day cannot always give — no monthly period ends on March 30th).
func (ts *testServer) payPeriod(t *testing.T, id string, start, end time.Time, state string) {
	t.Helper()
	ts.exec(t, `
		INSERT INTO subscription_periods (subscription_id, period, period_key, payment_id, starts_at, ends_at)
		VALUES ($1::uuid, 1, 'invoice:inv_1', 'pay_1', $2, $3)`, id, start, end)
	ts.exec(t, `
		UPDATE subscriptions SET periods = 1, state = $4, period_start = $2, period_end = $3, updated_at = now()
		WHERE id = $1::uuid`, id, start, end, state)
}

// wantViolation checks that err is INVALID_ARGUMENT whose first field
// violation names field.
func wantViolation(t *testing.T, what string, err error, field string) {
	t.Helper()
	st := status.Convert(err)
	if st.Code() != codes.InvalidArgument {
		t.Errorf("%s: %v, want InvalidArgument", what, err)
		return
	}
	var fields []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
				if v.GetDescription() == "" {
					t.Errorf("%s: violation of %s has no description", what, v.GetField())
				}
			}
		}
	}
	if len(fields) == 0 || fields[0] != field {
		t.Errorf("%s: field violations %v, want %s", what, fields, field)
	}
}

// Create is idempotent on the provider key; the same key with another
// customer or plan is ALREADY_EXISTS naming the subscription, not the
// customer; Get and List return what was created.
func TestSubscriptionCreateGetListGRPC(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withPlans)
	ctx := withToken(tokCheckout)

	first, err := ts.client.CreateSubscription(ctx, subscriptionRequest("org_a", "sub_1", testCustomer, "pro-monthly"))
	if err != nil {
		t.Fatal(err)
	}
	sub := first.GetSubscription()
	if !first.GetCreated() || sub.GetId() == "" || sub.GetState() != "active" || sub.GetPeriods() != 0 ||
		sub.GetCustomerRef() != testCustomer || sub.GetPlanId() != "pro-monthly" || sub.GetProvider() != "yolfi" ||
		sub.GetProviderSubscriptionId() != "sub_1" || sub.GetEnvironment() != "live" || sub.GetOrgId() != "org_a" ||
		sub.GetCurrentPeriodEndTime() != nil || sub.GetAccessEndTime() != nil || sub.GetCreateTime() == nil {
		t.Fatalf("created = %v, %v", first.GetCreated(), sub)
	}
	again, err := ts.client.CreateSubscription(ctx, subscriptionRequest("org_a", "sub_1", testCustomer, "pro-monthly"))
	if err != nil || again.GetCreated() || again.GetSubscription().GetId() != sub.GetId() {
		t.Errorf("repeat = %v, %v; want the same subscription, created false", again, err)
	}
	for name, req := range map[string]*fulfillmentv1.CreateSubscriptionRequest{
		"customer": subscriptionRequest("org_a", "sub_1", "someone-else", "pro-monthly"),
		"plan":     subscriptionRequest("org_a", "sub_1", testCustomer, "pro-yearly"),
	} {
		_, err := ts.client.CreateSubscription(ctx, req)
		if status.Code(err) != codes.AlreadyExists {
			t.Errorf("another %s: %v, want AlreadyExists", name, err)
			continue
		}
		if msg := status.Convert(err).Message(); !strings.Contains(msg, sub.GetId()) || strings.Contains(msg, testCustomer) || strings.Contains(msg, "someone-else") {
			t.Errorf("conflict message %q: want the subscription named, no customer", msg)
		}
	}

	got, err := ts.client.GetSubscription(ctx, &fulfillmentv1.GetSubscriptionRequest{SubscriptionId: sub.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if got.GetSubscription().GetId() != sub.GetId() || len(got.GetPeriods()) != 0 || got.GetOmittedPeriods() != 0 {
		t.Errorf("GetSubscription = %v", got)
	}
	if a := got.GetAccess(); a == nil || a.GetHasAccess() || a.GetUntil() != nil || a.GetReason() != "no period was paid" || a.GetCheckTime() == nil {
		t.Errorf("access of an unpaid subscription = %v", a)
	}

	other := ts.createSubscription(t, subscriptionRequest("org_a", "sub_2", "another-customer", "pro-yearly"))
	for _, tc := range []struct {
		req  *fulfillmentv1.ListSubscriptionsRequest
		want []string
	}{
		{&fulfillmentv1.ListSubscriptionsRequest{OrgId: "org_a"}, []string{other, sub.GetId()}},
		{&fulfillmentv1.ListSubscriptionsRequest{CustomerRef: testCustomer}, []string{sub.GetId()}},
		{&fulfillmentv1.ListSubscriptionsRequest{PlanId: "pro-yearly", Environment: "live", State: "active"}, []string{other}},
		{&fulfillmentv1.ListSubscriptionsRequest{State: "expired"}, nil},
	} {
		list, err := ts.client.ListSubscriptions(ctx, tc.req)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, s := range list.GetSubscriptions() {
			ids = append(ids, s.GetId())
		}
		if fmt.Sprint(ids) != fmt.Sprint(tc.want) || list.GetNextPageToken() != "" {
			t.Errorf("ListSubscriptions(%v) = %v, want %v", tc.req, ids, tc.want)
		}
	}
	if strings.Contains(ts.logs.String(), testCustomer) {
		t.Error("a customer reference appears in the logs")
	}
}

// The same over REST: the routes, the conflict's 409, strict queries.
func TestSubscriptionsREST(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withPlans)
	body := map[string]any{"org_id": "org_a", "environment": "live", "provider": "tbank",
		"provider_subscription_id": "rebill-1", "customer_ref": testCustomer, "plan_id": "pro-monthly"}
	code, resp := ts.do(t, "POST", "/v1/subscriptions", tokCheckout, body)
	if created, _ := resp["created"].(bool); code != http.StatusOK || !created {
		t.Fatalf("POST /v1/subscriptions = %d %v", code, resp)
	}
	sub := resp["subscription"].(map[string]any)
	id := sub["id"].(string)
	if sub["provider"] != "tbank" || sub["state"] != "active" || sub["current_period_end_time"] != nil {
		t.Errorf("created subscription = %v", sub)
	}
	body["plan_id"] = "pro-yearly"
	if code, resp := ts.do(t, "POST", "/v1/subscriptions", tokCheckout, body); code != http.StatusConflict {
		t.Errorf("conflicting POST = %d %v, want 409", code, resp)
	}

	code, resp = ts.do(t, "GET", "/v1/subscriptions/"+id, tokReader, nil)
	if granted, known := resp["access"].(map[string]any)["has_access"].(bool); code != http.StatusOK ||
		resp["subscription"].(map[string]any)["id"] != id || !known || granted {
		t.Errorf("GET /v1/subscriptions/%s = %d %v", id, code, resp)
	}
	q := url.Values{"org_id": {"org_a"}, "customer_ref": {testCustomer}, "plan_id": {"pro-monthly"}}
	code, resp = ts.do(t, "GET", "/v1/subscriptions?"+q.Encode(), tokReader, nil)
	if list, _ := resp["subscriptions"].([]any); code != http.StatusOK || len(list) != 1 {
		t.Errorf("GET /v1/subscriptions?%s = %d %v", q.Encode(), code, resp)
	}
	code, resp = ts.do(t, "GET", "/v1/access?"+q.Encode(), tokReader, nil)
	if granted, known := resp["has_access"].(bool); code != http.StatusOK || !known || granted ||
		resp["subscription_id"] != id || resp["reason"] != "no period was paid" {
		t.Errorf("GET /v1/access = %d %v", code, resp)
	}

	for _, tc := range []struct {
		path string
		want int
	}{
		{"/v1/subscriptions/019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b", http.StatusNotFound},
		{"/v1/subscriptions/not-an-id", http.StatusBadRequest},
		{"/v1/subscriptions?customer=x", http.StatusBadRequest},
		{"/v1/access?org_id=org_a&customer_ref=x&plan=pro-monthly", http.StatusBadRequest},
		{"/v1/access?org_id=org_a&customer_ref=x&plan_id=gold", http.StatusBadRequest},
	} {
		if code, resp := ts.do(t, "GET", tc.path, tokReader, nil); code != tc.want {
			t.Errorf("GET %s = %d %v, want %d", tc.path, code, resp, tc.want)
		}
	}

	resp2, err := http.Get(ts.httpURL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp2.Body.Close() }()
	doc, err := io.ReadAll(resp2.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{`"/v1/subscriptions"`, `"/v1/subscriptions/{subscription_id}"`, `"/v1/access"`} {
		if !strings.Contains(string(doc), p) {
			t.Errorf("the OpenAPI document lacks %s", p)
		}
	}
}

// Every invalid field is named; nothing is stored.
func TestSubscriptionValidation(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withPlans)
	ctx := withToken(tokOps)
	for _, tc := range []struct {
		name   string
		mutate func(*fulfillmentv1.CreateSubscriptionRequest)
		field  string
	}{
		{"missing org", func(r *fulfillmentv1.CreateSubscriptionRequest) { r.OrgId = "" }, "org_id"},
		{"unknown environment", func(r *fulfillmentv1.CreateSubscriptionRequest) { r.Environment = "" }, "environment"},
		{"unknown provider", func(r *fulfillmentv1.CreateSubscriptionRequest) { r.Provider = "paypal" }, "provider"},
		{"missing provider id", func(r *fulfillmentv1.CreateSubscriptionRequest) { r.ProviderSubscriptionId = "" }, "provider_subscription_id"},
		{"over-long provider id", func(r *fulfillmentv1.CreateSubscriptionRequest) { r.ProviderSubscriptionId = strings.Repeat("x", 129) }, "provider_subscription_id"},
		{"missing customer", func(r *fulfillmentv1.CreateSubscriptionRequest) { r.CustomerRef = "" }, "customer_ref"},
		{"customer with a control character", func(r *fulfillmentv1.CreateSubscriptionRequest) { r.CustomerRef = "a\nb" }, "customer_ref"},
		{"customer with a trailing space", func(r *fulfillmentv1.CreateSubscriptionRequest) { r.CustomerRef = "a " }, "customer_ref"},
		{"missing plan", func(r *fulfillmentv1.CreateSubscriptionRequest) { r.PlanId = "" }, "plan_id"},
		{"unknown plan", func(r *fulfillmentv1.CreateSubscriptionRequest) { r.PlanId = "gold" }, "plan_id"},
		{"malformed plan", func(r *fulfillmentv1.CreateSubscriptionRequest) { r.PlanId = "Gold Plan" }, "plan_id"},
	} {
		req := subscriptionRequest("org_a", "sub-"+tc.field, "user_1", "pro-monthly")
		tc.mutate(req)
		_, err := ts.client.CreateSubscription(ctx, req)
		wantViolation(t, "CreateSubscription, "+tc.name, err, tc.field)
	}
	_, err := ts.client.CreateSubscription(ctx, &fulfillmentv1.CreateSubscriptionRequest{})
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || len(st.Details()) != 1 ||
		len(st.Details()[0].(*errdetails.BadRequest).GetFieldViolations()) != 6 {
		t.Errorf("empty CreateSubscription: %v, want all 6 fields named", err)
	}

	for _, tc := range []struct {
		name  string
		req   *fulfillmentv1.CheckAccessRequest
		field string
	}{
		{"missing org", &fulfillmentv1.CheckAccessRequest{CustomerRef: "u", PlanId: "pro-monthly"}, "org_id"},
		{"unknown environment", &fulfillmentv1.CheckAccessRequest{OrgId: "org_a", Environment: "prod", CustomerRef: "u", PlanId: "pro-monthly"}, "environment"},
		{"missing customer", &fulfillmentv1.CheckAccessRequest{OrgId: "org_a", PlanId: "pro-monthly"}, "customer_ref"},
		{"missing plan", &fulfillmentv1.CheckAccessRequest{OrgId: "org_a", CustomerRef: "u"}, "plan_id"},
		{"unknown plan", &fulfillmentv1.CheckAccessRequest{OrgId: "org_a", CustomerRef: "u", PlanId: "gold"}, "plan_id"},
	} {
		_, err := ts.client.CheckAccess(ctx, tc.req)
		wantViolation(t, "CheckAccess, "+tc.name, err, tc.field)
	}

	for _, tc := range []struct {
		name  string
		req   *fulfillmentv1.ListSubscriptionsRequest
		field string
	}{
		{"org", &fulfillmentv1.ListSubscriptionsRequest{OrgId: "org a"}, "org_id"},
		{"environment", &fulfillmentv1.ListSubscriptionsRequest{Environment: "prod"}, "environment"},
		{"state", &fulfillmentv1.ListSubscriptionsRequest{State: "lapsed"}, "state"},
		{"plan", &fulfillmentv1.ListSubscriptionsRequest{PlanId: "Gold"}, "plan_id"},
		{"customer", &fulfillmentv1.ListSubscriptionsRequest{CustomerRef: " u"}, "customer_ref"},
		{"page size", &fulfillmentv1.ListSubscriptionsRequest{PageSize: -1}, "page_size"},
		{"page token", &fulfillmentv1.ListSubscriptionsRequest{PageToken: "garbage"}, "page_token"},
	} {
		_, err := ts.client.ListSubscriptions(ctx, tc.req)
		wantViolation(t, "ListSubscriptions, "+tc.name, err, tc.field)
	}
	_, err = ts.client.GetSubscription(ctx, &fulfillmentv1.GetSubscriptionRequest{SubscriptionId: "42"})
	wantViolation(t, "GetSubscription", err, "subscription_id")

	list, err := ts.client.ListSubscriptions(ctx, &fulfillmentv1.ListSubscriptionsRequest{})
	if err != nil || len(list.GetSubscriptions()) != 0 {
		t.Errorf("after invalid requests: %v, %v; want nothing stored", list, err)
	}
}

// A token sees and acts for its own orgs only; reading needs orders:read,
// creating orders:write.
func TestSubscriptionAuth(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withPlans)
	a := ts.createSubscription(t, subscriptionRequest("org_a", "sub_a", "user_1", "pro-monthly"))
	b := ts.createSubscription(t, subscriptionRequest("org_b", "sub_b", "user_1", "pro-monthly"))

	cases := []struct {
		name  string
		token string
		call  func(context.Context) error
		want  codes.Code
	}{
		{"read another org's subscription (as an unknown one)", tokCheckout, func(ctx context.Context) error {
			_, err := ts.client.GetSubscription(ctx, &fulfillmentv1.GetSubscriptionRequest{SubscriptionId: b})
			return err
		}, codes.NotFound},
		{"list another org", tokCheckout, func(ctx context.Context) error {
			_, err := ts.client.ListSubscriptions(ctx, &fulfillmentv1.ListSubscriptionsRequest{OrgId: "org_b"})
			return err
		}, codes.PermissionDenied},
		{"create for another org", tokCheckout, func(ctx context.Context) error {
			_, err := ts.client.CreateSubscription(ctx, subscriptionRequest("org_b", "sub_x", "user_1", "pro-monthly"))
			return err
		}, codes.PermissionDenied},
		{"check another org's access", tokCheckout, func(ctx context.Context) error {
			_, err := ts.client.CheckAccess(ctx, &fulfillmentv1.CheckAccessRequest{OrgId: "org_b", CustomerRef: "user_1", PlanId: "pro-monthly"})
			return err
		}, codes.PermissionDenied},
		{"create without orders:write", tokReader, func(ctx context.Context) error {
			_, err := ts.client.CreateSubscription(ctx, subscriptionRequest("org_a", "sub_y", "user_1", "pro-monthly"))
			return err
		}, codes.PermissionDenied},
		{"check without orders:read", tokIngest, func(ctx context.Context) error {
			_, err := ts.client.CheckAccess(ctx, &fulfillmentv1.CheckAccessRequest{OrgId: "org_a", CustomerRef: "user_1", PlanId: "pro-monthly"})
			return err
		}, codes.PermissionDenied},
		{"no token", "", func(ctx context.Context) error {
			_, err := ts.client.CheckAccess(ctx, &fulfillmentv1.CheckAccessRequest{OrgId: "org_a", CustomerRef: "user_1", PlanId: "pro-monthly"})
			return err
		}, codes.Unauthenticated},
		{"reader reads its org", tokReader, func(ctx context.Context) error {
			_, err := ts.client.GetSubscription(ctx, &fulfillmentv1.GetSubscriptionRequest{SubscriptionId: a})
			return err
		}, codes.OK},
		{"reader checks its org", tokReader, func(ctx context.Context) error {
			_, err := ts.client.CheckAccess(ctx, &fulfillmentv1.CheckAccessRequest{OrgId: "org_a", CustomerRef: "user_1", PlanId: "pro-monthly"})
			return err
		}, codes.OK},
		{"admin reads any org", tokOps, func(ctx context.Context) error {
			_, err := ts.client.GetSubscription(ctx, &fulfillmentv1.GetSubscriptionRequest{SubscriptionId: b})
			return err
		}, codes.OK},
	}
	for _, tc := range cases {
		if err := tc.call(withToken(tc.token)); status.Code(err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	// Without an org filter, a token lists its orgs' only.
	for token, want := range map[string]string{tokCheckout: a, tokOrgB: b} {
		list, err := ts.client.ListSubscriptions(withToken(token), &fulfillmentv1.ListSubscriptionsRequest{})
		if err != nil || len(list.GetSubscriptions()) != 1 || list.GetSubscriptions()[0].GetId() != want {
			t.Errorf("list of %s: %v, %v; want %s alone", token[:8], list, err, want)
		}
	}
	if list, err := ts.client.ListSubscriptions(withToken(tokOps), &fulfillmentv1.ListSubscriptionsRequest{}); err != nil || len(list.GetSubscriptions()) != 2 {
		t.Errorf("admin list: %v, %v; want both", list, err)
	}
}

// CheckAccess: a paid period grants access until it ends; the grace
// follows an unpaid renewal; a cancelled subscription grants until its
// paid period ends; none paid, none granted, and why. GetSubscription
// shows the same access, with the periods.
func TestCheckAccess(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withPlans)
	ctx := withToken(tokReader)
	now := time.Now().UTC().Truncate(time.Second)
	// periodEnd is when subscription id's current period ends, as stored
	// (PostgreSQL's calendar months, not computed here).
	periodEnd := func(id string) time.Time {
		t.Helper()
		got, err := ts.client.GetSubscription(ctx, &fulfillmentv1.GetSubscriptionRequest{SubscriptionId: id})
		if err != nil {
			t.Fatal(err)
		}
		return got.GetSubscription().GetCurrentPeriodEndTime().AsTime()
	}
	check := func(customer, plan string) *fulfillmentv1.CheckAccessResponse {
		t.Helper()
		resp, err := ts.client.CheckAccess(ctx, &fulfillmentv1.CheckAccessRequest{OrgId: "org_a", CustomerRef: customer, PlanId: plan})
		if err != nil {
			t.Fatal(err)
		}
		if c := resp.GetCheckTime().AsTime(); c.Before(now) || c.After(time.Now()) {
			t.Errorf("check_time %v, want the time of the call", c)
		}
		return resp
	}

	// Paid ten days ago, monthly: access until the period ends.
	paid := ts.createSubscription(t, subscriptionRequest("org_a", "sub_paid", testCustomer, "pro-monthly"))
	start := now.AddDate(0, 0, -10)
	ts.pay(t, paid, start, 1, 1, "active")
	end := periodEnd(paid)
	if end.Before(now.AddDate(0, 0, 17)) || end.After(now.AddDate(0, 0, 22)) {
		t.Fatalf("the period paid ten days ago ends at %v", end)
	}
	resp := check(testCustomer, "pro-monthly")
	if !resp.GetHasAccess() || !resp.GetUntil().AsTime().Equal(end) || resp.GetReason() != "paid period" || resp.GetSubscriptionId() != paid {
		t.Errorf("paid: %v, want access until %v (paid period) by %s", resp, end, paid)
	}
	got, err := ts.client.GetSubscription(ctx, &fulfillmentv1.GetSubscriptionRequest{SubscriptionId: paid})
	if err != nil {
		t.Fatal(err)
	}
	if s := got.GetSubscription(); s.GetPeriods() != 1 || !s.GetCurrentPeriodStartTime().AsTime().Equal(start) || !s.GetCurrentPeriodEndTime().AsTime().Equal(end) {
		t.Errorf("GetSubscription = %v, want one period from %v", s, start)
	}
	if ps := got.GetPeriods(); len(ps) != 1 || ps[0].GetPeriod() != 1 || ps[0].GetBill() != "invoice:inv_1" || ps[0].GetPaymentId() != "pay_1" ||
		!ps[0].GetStartTime().AsTime().Equal(start) || !ps[0].GetEndTime().AsTime().Equal(end) {
		t.Errorf("periods = %v", ps)
	}
	if a := got.GetAccess(); !a.GetHasAccess() || !a.GetUntil().AsTime().Equal(resp.GetUntil().AsTime()) || a.GetReason() != "paid period" {
		t.Errorf("GetSubscription access = %v, want CheckAccess's %v", a, resp)
	}

	// Not paid: no access, and why; the newest subscription is named.
	unpaid := ts.createSubscription(t, subscriptionRequest("org_a", "sub_unpaid", "user_unpaid", "pro-monthly"))
	resp = check("user_unpaid", "pro-monthly")
	if resp.GetHasAccess() || resp.GetUntil() != nil || resp.GetReason() != "no period was paid" || resp.GetSubscriptionId() != unpaid {
		t.Errorf("unpaid: %v", resp)
	}
	// No subscription at all, or to another plan.
	for _, c := range [][2]string{{"user_nobody", "pro-monthly"}, {testCustomer, "pro-yearly"}} {
		resp = check(c[0], c[1])
		if resp.GetHasAccess() || resp.GetSubscriptionId() != "" || resp.GetReason() != "no subscription of this customer to this plan" {
			t.Errorf("%s to %s: %v", c[0], c[1], resp)
		}
	}
	// The paid one's customer in the test environment: nothing there.
	test, err := ts.client.CheckAccess(ctx, &fulfillmentv1.CheckAccessRequest{OrgId: "org_a", Environment: "test", CustomerRef: testCustomer, PlanId: "pro-monthly"})
	if err != nil || test.GetHasAccess() || test.GetSubscriptionId() != "" {
		t.Errorf("test environment: %v, %v; want no access (live is the default)", test, err)
	}

	// A period that ended a day ago, renewal awaited: the plan's 72h grace.
	late := ts.createSubscription(t, subscriptionRequest("org_a", "sub_late", "user_late", "pro-monthly"))
	ts.payPeriod(t, late, now.AddDate(0, 0, -31), now.AddDate(0, 0, -1), "active")
	if end := periodEnd(late); !end.Before(now) || end.Before(now.Add(-72*time.Hour)) {
		t.Fatalf("the period that ended a day ago ends at %v", end)
	}
	resp = check("user_late", "pro-monthly")
	if want := periodEnd(late).Add(72 * time.Hour); !resp.GetHasAccess() || !resp.GetUntil().AsTime().Equal(want) || resp.GetReason() != "grace while the renewal is awaited" {
		t.Errorf("in grace: %v, want access until %v", resp, want)
	}
	// Cancelled, its yearly period over (a plan without grace): ended.
	gone := ts.createSubscription(t, subscriptionRequest("org_a", "sub_gone", "user_gone", "pro-yearly"))
	goneStart := now.AddDate(-1, 0, -1)
	ts.pay(t, gone, goneStart, 12, 1, "cancelled")
	resp = check("user_gone", "pro-yearly")
	if resp.GetReason() != "cancelled; the paid period runs out ended" || resp.GetHasAccess() || !resp.GetUntil().AsTime().Equal(periodEnd(gone)) {
		t.Errorf("cancelled and over: %v", resp)
	}
	// Of two subscriptions, the one granting longest answers.
	second := ts.createSubscription(t, subscriptionRequest("org_a", "sub_gone_2", "user_gone", "pro-yearly"))
	ts.pay(t, second, now.AddDate(0, -1, 0), 12, 1, "active")
	if resp = check("user_gone", "pro-yearly"); !resp.GetHasAccess() || resp.GetSubscriptionId() != second {
		t.Errorf("with a second, paid subscription: %v, want access by %s", resp, second)
	}

	if strings.Contains(ts.logs.String(), testCustomer) {
		t.Error("a customer reference appears in the logs")
	}
}

// Pages of a listing hold every subscription once; a token is bound to
// its filters.
func TestListSubscriptionsPaging(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withPlans)
	ctx := withToken(tokCheckout)
	for i := range 7 {
		if _, err := ts.client.CreateSubscription(ctx, subscriptionRequest("org_a", fmt.Sprintf("sub_%d", i), "user_1", "pro-monthly")); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	token, pages, last := "", 0, ""
	for {
		resp, err := ts.client.ListSubscriptions(ctx, &fulfillmentv1.ListSubscriptionsRequest{OrgId: "org_a", PageSize: 3, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, s := range resp.GetSubscriptions() {
			if seen[s.GetId()] || (last != "" && s.GetId() >= last) {
				t.Errorf("subscription %s after %s: twice, or not newest first", s.GetId(), last)
			}
			seen[s.GetId()], last = true, s.GetId()
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		_, err = ts.client.ListSubscriptions(ctx, &fulfillmentv1.ListSubscriptionsRequest{OrgId: "org_a", CustomerRef: "user_2", PageToken: token})
		wantViolation(t, "token with other filters", err, "page_token")
	}
	if len(seen) != 7 || pages != 3 {
		t.Errorf("saw %d subscriptions in %d pages, want 7 in 3", len(seen), pages)
	}
}

// A subscription line names a configured plan, and pays one period; the
// order shows its plan. What breaks that is refused before anything is
// stored.
func TestSubscriptionOrderLine(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withPlans)
	ctx := withToken(tokCheckout)
	line := func() *fulfillmentv1.OrderLine {
		return &fulfillmentv1.OrderLine{Sku: "pro-month", Kind: "subscription", Quantity: 1,
			UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 900}, AccountRef: testCustomer, PlanId: "pro-monthly"}
	}
	req := orderRequest("org_a", "sub-order-1")
	req.Lines = append(req.Lines, line())
	created, err := ts.client.CreateOrder(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ts.client.GetOrder(ctx, &fulfillmentv1.GetOrderRequest{OrderId: created.GetOrder().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]*fulfillmentv1.Order{"CreateOrder": created.GetOrder(), "GetOrder": got.GetOrder()} {
		if l := o.GetLines(); len(l) != 3 || l[2].GetKind() != "subscription" || l[2].GetPlanId() != "pro-monthly" ||
			l[2].GetAccountRef() != testCustomer || l[0].GetPlanId() != "" {
			t.Errorf("%s lines = %v, want the subscription line with its plan", name, l)
		}
	}
	if again, err := ts.client.CreateOrder(ctx, req); err != nil || again.GetCreated() {
		t.Errorf("repeat = %v, %v; want the existing order", again, err)
	}
	for _, tc := range []struct {
		name   string
		mutate func(*fulfillmentv1.CreateOrderRequest)
		field  string
	}{
		{"no plan", func(r *fulfillmentv1.CreateOrderRequest) { r.Lines[2].PlanId = "" }, "lines[2].plan_id"},
		{"unknown plan", func(r *fulfillmentv1.CreateOrderRequest) { r.Lines[2].PlanId = "gold" }, "lines[2].plan_id"},
		{"two units", func(r *fulfillmentv1.CreateOrderRequest) { r.Lines[2].Quantity = 2 }, "lines[2].quantity"},
		{"no customer", func(r *fulfillmentv1.CreateOrderRequest) { r.Lines[2].AccountRef = "" }, "lines[2].account_ref"},
		{"plan on a license line", func(r *fulfillmentv1.CreateOrderRequest) { r.Lines[0].PlanId = "pro-monthly" }, "lines[0].plan_id"},
	} {
		r := orderRequest("org_a", "sub-order-bad")
		r.Lines = append(r.Lines, line())
		tc.mutate(r)
		_, err := ts.client.CreateOrder(ctx, r)
		wantViolation(t, tc.name, err, tc.field)
	}
	// An unknown plan and an unknown destination are both named.
	r := orderRequest("org_a", "sub-order-bad")
	r.Lines = append(r.Lines, line(), &fulfillmentv1.OrderLine{Sku: "box", Kind: "external", Quantity: 1,
		UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 100}, Destination: "nowhere"})
	r.Lines[2].PlanId = "gold"
	_, err = ts.client.CreateOrder(ctx, r)
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "lines[3].destination") || !strings.Contains(st.Message(), "lines[2].plan_id") {
		t.Errorf("unknown plan and destination: %v, want both named", err)
	}
	if list, err := ts.client.ListOrders(ctx, &fulfillmentv1.ListOrdersRequest{}); err != nil || len(list.GetOrders()) != 1 {
		t.Errorf("after refused orders: %v, %v; want the first order alone", list, err)
	}
}
