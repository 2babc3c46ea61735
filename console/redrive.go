package console

import (
	"net/http"
	"net/url"
	"slices"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// Bulk re-drive: filter → plan → confirm → progress (→ cancel), through
// the API's PlanRedrive, StartRedrive, GetRedrive and CancelRedrive.

type redriveView struct {
	F         *fulfillmentv1.RedriveFilter
	Plan      *fulfillmentv1.PlanRedriveResponse
	Runs      []*fulfillmentv1.Redrive
	Providers []string
}

// redriveFilter reads a filter from the query string or a form.
func redriveFilter(v url.Values) (*fulfillmentv1.RedriveFilter, error) {
	f := &fulfillmentv1.RedriveFilter{
		Target: v.Get("target"), OrgId: v.Get("org_id"), State: v.Get("state"), Environment: v.Get("environment"),
		Type: v.Get("type"), Decision: v.Get("decision"), EndpointId: v.Get("endpoint_id"), DestinationId: v.Get("destination_id"),
		Provider: v.Get("provider"),
	}
	var err error
	if f.ReceivedAfter, err = timeParam(v, "received_after"); err != nil {
		return f, err
	}
	f.ReceivedBefore, err = timeParam(v, "received_before")
	return f, err
}

// redrive shows the filter form, the plan of the filter in the query
// string (when complete), and the newest runs.
func (c *Console) redrive(w http.ResponseWriter, r *http.Request, s *session) {
	if !s.Admin() {
		c.fail(w, r, s, http.StatusForbidden, "Bulk re-drives replay events and retry deliveries: admin tokens only.")
		return
	}
	ctx := s.call(r.Context())
	f, err := redriveFilter(r.URL.Query())
	if err != nil {
		c.fail(w, r, s, http.StatusBadRequest, err.Error())
		return
	}
	v := redriveView{F: f, Providers: providers}
	if v.F.GetTarget() != "" || v.F.GetOrgId() != "" || v.F.GetState() != "" {
		plan, err := c.api.PlanRedrive(ctx, &fulfillmentv1.PlanRedriveRequest{Filter: v.F})
		if err != nil {
			c.apiFail(w, r, s, err)
			return
		}
		v.Plan = plan
	}
	runs, err := c.api.ListRedrives(ctx, &fulfillmentv1.ListRedrivesRequest{})
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	v.Runs = runs.GetRedrives()
	c.render(w, r, s, http.StatusOK, "redrive", "Bulk re-drive", v)
}

// startRedrive confirms a plan: the API records the items matching now and
// applies them in batches.
func (c *Console) startRedrive(w http.ResponseWriter, r *http.Request, s *session) {
	f, err := redriveFilter(r.PostForm)
	if err != nil {
		c.fail(w, r, s, http.StatusBadRequest, err.Error())
		return
	}
	resp, err := c.api.StartRedrive(s.call(r.Context()), &fulfillmentv1.StartRedriveRequest{Filter: f, ActorDetail: "console"})
	d := resp.GetRedrive()
	// The org the form names is the entry's only when the session may act
	// for it: a refused attempt on another org is in the actor's own log,
	// not in that org's.
	org := f.GetOrgId()
	if orgs := s.Orgs(); orgs != nil && !slices.Contains(orgs, org) {
		org = ""
	}
	c.record(r.Context(), s.Name(), org, "redrive.start", "redrive", d.GetId(), outcome(err),
		f.GetTarget()+" "+f.GetState()+" "+f.GetDestinationId()+f.GetType())
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	done(w, r, Prefix+"redrive/"+d.GetId(), "started")
}

type runView struct {
	Run *fulfillmentv1.Redrive
	// Done is the items applied or skipped so far.
	Done int64
}

// redriveRun shows a run's progress; while it runs, htmx refreshes it.
func (c *Console) redriveRun(w http.ResponseWriter, r *http.Request, s *session) {
	resp, err := c.api.GetRedrive(s.call(r.Context()), &fulfillmentv1.GetRedriveRequest{RedriveId: r.PathValue("id")})
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	d := resp.GetRedrive()
	c.render(w, r, s, http.StatusOK, "run", "Re-drive "+d.GetId(), runView{Run: d, Done: d.GetApplied() + d.GetSkipped()})
}

func (c *Console) cancelRedrive(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	resp, err := c.api.CancelRedrive(s.call(r.Context()), &fulfillmentv1.CancelRedriveRequest{RedriveId: id})
	c.record(r.Context(), s.Name(), resp.GetRedrive().GetFilter().GetOrgId(), "redrive.cancel", "redrive", id, outcome(err), "")
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	done(w, r, Prefix+"redrive/"+id, "cancelled")
}
