package console

import (
	"net/http"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

type reconView struct {
	Kind, State, OrgID, Env, OrderID, MinAge string
	Items                                    []*fulfillmentv1.ReconciliationItem
	Next                                     string
	Kinds                                    []string
}

// reconKinds are the kinds the filter offers: every kind the domain knows.
var reconKinds = func() []string {
	out := make([]string, len(fulfillment.ReconKinds))
	for i, k := range fulfillment.ReconKinds {
		out[i] = string(k)
	}
	return out
}()

// reconItems lists reconciliation items, newest first; min_age (a
// duration, e.g. 1h) keeps those older than it.
func (c *Console) reconItems(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	v := reconView{Kind: q.Get("kind"), State: q.Get("state"), OrgID: q.Get("org_id"), Env: q.Get("environment"),
		OrderID: q.Get("order_id"), MinAge: strings.TrimSpace(q.Get("min_age")), Kinds: reconKinds}
	if !s.Can(config.ScopeReconciliationRead) {
		c.fail(w, r, s, http.StatusForbidden, "Your token cannot read reconciliation (it needs reconciliation:read).")
		return
	}
	req := &fulfillmentv1.ListReconciliationItemsRequest{Kind: v.Kind, State: v.State, OrgId: v.OrgID, Environment: v.Env,
		OrderId: v.OrderID, PageSize: pageSize, PageToken: q.Get("page_token")}
	if b := q.Get("before"); b != "" {
		at, err := time.Parse(time.RFC3339Nano, b)
		if err != nil {
			c.fail(w, r, s, http.StatusBadRequest, "before must be an RFC 3339 time.")
			return
		}
		req.CreateTimeBefore = timestamppb.New(at)
	} else if v.MinAge != "" {
		age, err := time.ParseDuration(v.MinAge)
		if err != nil || age < 0 {
			c.fail(w, r, s, http.StatusBadRequest, "min_age must be a duration such as 30m, 2h or 72h.")
			return
		}
		req.CreateTimeBefore = timestamppb.New(c.now().Add(-age))
	}
	resp, err := c.api.ListReconciliationItems(s.call(r.Context()), req)
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	v.Items = resp.GetItems()
	if t := resp.GetNextPageToken(); t != "" {
		// The cursor is bound to the filters, the instant min_age stood
		// for included: the next page carries that instant, not the age.
		before := ""
		if req.CreateTimeBefore != nil {
			before = req.CreateTimeBefore.AsTime().Format(time.RFC3339Nano)
		}
		v.Next = link(Prefix+"reconciliation", "kind", v.Kind, "state", v.State, "org_id", v.OrgID, "environment", v.Env,
			"order_id", v.OrderID, "before", before, "page_token", t)
	}
	c.render(w, r, s, http.StatusOK, "recon", "Reconciliation", v)
}

type itemView struct {
	Item        *fulfillmentv1.ReconciliationItem
	Evidence    *fulfillmentv1.ReconciliationEvidence
	Resolutions []string
}

func (c *Console) reconItem(w http.ResponseWriter, r *http.Request, s *session) {
	resp, err := c.api.GetReconciliationItem(s.call(r.Context()), &fulfillmentv1.GetReconciliationItemRequest{ItemId: r.PathValue("id")})
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	v := itemView{Item: resp.GetItem(), Evidence: resp.GetEvidence()}
	for _, res := range fulfillment.Resolutions {
		v.Resolutions = append(v.Resolutions, string(res))
	}
	c.render(w, r, s, http.StatusOK, "item", "Item "+v.Item.GetId(), v)
}

// resolveItem resolves an item; the API records the session's token name
// as the resolver.
func (c *Console) resolveItem(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	res, note := r.PostForm.Get("resolution"), strings.TrimSpace(r.PostForm.Get("note"))
	resp, err := c.api.ResolveReconciliationItem(s.call(r.Context()), &fulfillmentv1.ResolveReconciliationItemRequest{
		ItemId: id, Resolution: res, Note: note, ActorDetail: "console"})
	c.record(r.Context(), s.Name(), resp.GetItem().GetOrgId(), "reconciliation.resolve", "reconciliation_item", id, outcome(err), res+": "+note)
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	done(w, r, Prefix+"reconciliation/"+id, "resolved")
}
