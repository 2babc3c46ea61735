package console

import (
	"net/http"
	"strings"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

type subscriptionsView struct {
	CustomerRef, OrgID, Env, PlanID, State string
	Subscriptions                          []*fulfillmentv1.Subscription
	Next                                   string
}

// subscriptions finds subscriptions, by customer ref among others.
func (c *Console) subscriptions(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	v := subscriptionsView{CustomerRef: strings.TrimSpace(q.Get("customer_ref")), OrgID: q.Get("org_id"), Env: q.Get("environment"),
		PlanID: q.Get("plan_id"), State: q.Get("state")}
	if !s.Can(config.ScopeOrdersRead) {
		c.fail(w, r, s, http.StatusForbidden, "Your token cannot read subscriptions (it needs orders:read).")
		return
	}
	resp, err := c.api.ListSubscriptions(s.call(r.Context()), &fulfillmentv1.ListSubscriptionsRequest{
		OrgId: v.OrgID, Environment: v.Env, CustomerRef: v.CustomerRef, PlanId: v.PlanID, State: v.State,
		PageSize: pageSize, PageToken: q.Get("page_token"),
	})
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	v.Subscriptions = resp.GetSubscriptions()
	if t := resp.GetNextPageToken(); t != "" {
		v.Next = link(Prefix+"subscriptions", "customer_ref", v.CustomerRef, "org_id", v.OrgID, "environment", v.Env,
			"plan_id", v.PlanID, "state", v.State, "page_token", t)
	}
	c.render(w, r, s, http.StatusOK, "subscriptions", "Subscriptions", v)
}

func (c *Console) subscription(w http.ResponseWriter, r *http.Request, s *session) {
	resp, err := c.api.GetSubscription(s.call(r.Context()), &fulfillmentv1.GetSubscriptionRequest{SubscriptionId: r.PathValue("id")})
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	c.render(w, r, s, http.StatusOK, "subscription", "Subscription "+resp.GetSubscription().GetCustomerRef(), resp)
}

type accessView struct {
	OrgID, Env, CustomerRef, PlanID string
	Result                          *fulfillmentv1.CheckAccessResponse
}

// access answers the access check a selling service would make
// (CheckAccess), for the form's customer and plan.
func (c *Console) access(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	v := accessView{OrgID: strings.TrimSpace(q.Get("org_id")), Env: q.Get("environment"), CustomerRef: strings.TrimSpace(q.Get("customer_ref")), PlanID: strings.TrimSpace(q.Get("plan_id"))}
	if v.Env == "" {
		v.Env = "live"
	}
	if v.OrgID != "" || v.CustomerRef != "" || v.PlanID != "" {
		resp, err := c.api.CheckAccess(s.call(r.Context()), &fulfillmentv1.CheckAccessRequest{
			OrgId: v.OrgID, Environment: v.Env, CustomerRef: v.CustomerRef, PlanId: v.PlanID})
		if err != nil {
			c.apiFail(w, r, s, err)
			return
		}
		v.Result = resp
	}
	c.render(w, r, s, http.StatusOK, "access", "Access check", v)
}
