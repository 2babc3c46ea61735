package console

import (
	"net/http"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

type overviewView struct {
	// Summary is nil when the token cannot read reconciliation.
	Summary *fulfillmentv1.GetReconciliationSummaryResponse
	// Destinations is nil when the token is not admin.
	Destinations []*fulfillmentv1.Destination
	// Oldest are the newest open items (the API lists newest first).
	Oldest []*fulfillmentv1.ReconciliationItem
	// Refresh reloads the page's figures every RefreshSeconds (htmx);
	// ?refresh=off pauses it.
	Refresh        bool
	RefreshSeconds int
	Env            string
	// Charts are the last hour's activity, per minute.
	Charts []activityChart
}

// overview: per org and environment what needs a person, the queues'
// backlog and the destinations' state.
func (c *Console) overview(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	v := overviewView{Refresh: q.Get("refresh") != "off", RefreshSeconds: 10, Env: q.Get("environment")}
	ctx := s.call(r.Context())
	if s.Can(config.ScopeReconciliationRead) {
		sum, err := c.api.GetReconciliationSummary(ctx, &fulfillmentv1.GetReconciliationSummaryRequest{Environment: v.Env})
		if err != nil {
			c.apiFail(w, r, s, err)
			return
		}
		v.Summary = sum
		items, err := c.api.ListReconciliationItems(ctx, &fulfillmentv1.ListReconciliationItemsRequest{State: "open", Environment: v.Env, PageSize: 10})
		if err != nil {
			c.apiFail(w, r, s, err)
			return
		}
		v.Oldest = items.GetItems()
		act, err := c.api.GetActivity(ctx, &fulfillmentv1.GetActivityRequest{Environment: v.Env})
		if err != nil {
			c.apiFail(w, r, s, err)
			return
		}
		v.Charts = activityCharts(act)
	}
	if s.Admin() {
		d, err := c.api.ListDestinations(ctx, &fulfillmentv1.ListDestinationsRequest{})
		if err != nil {
			c.apiFail(w, r, s, err)
			return
		}
		v.Destinations = d.GetDestinations()
	}
	c.render(w, r, s, http.StatusOK, "overview", "Overview", v)
}
