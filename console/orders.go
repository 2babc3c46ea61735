package console

import (
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

type ordersView struct {
	Q, OrgID, Env, State string
	Orders               []*fulfillmentv1.Order
	Next                 string
	States               []string
}

var orderStates = []string{"pending_payment", "paid", "fulfilling", "fulfilled", "on_hold", "cancelled", "expired", "refunded"}

// orders lists orders, newest first, filtered by the query string; q finds
// one by order id or merchant order id.
func (c *Console) orders(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	v := ordersView{Q: strings.TrimSpace(q.Get("q")), OrgID: q.Get("org_id"), Env: q.Get("environment"), State: q.Get("state"), States: orderStates}
	if !s.Can(config.ScopeOrdersRead) {
		c.fail(w, r, s, http.StatusForbidden, "Your token cannot read orders (it needs orders:read).")
		return
	}
	ctx := s.call(r.Context())
	if _, err := uuid.Parse(v.Q); err == nil && len(v.Q) == 36 {
		if _, err := c.api.GetOrder(ctx, &fulfillmentv1.GetOrderRequest{OrderId: v.Q}); err == nil {
			http.Redirect(w, r, Prefix+"orders/"+v.Q, http.StatusSeeOther)
			return
		}
	}
	resp, err := c.api.ListOrders(ctx, &fulfillmentv1.ListOrdersRequest{
		OrgId: v.OrgID, Environment: v.Env, State: v.State, MerchantOrderId: v.Q,
		PageSize: pageSize, PageToken: q.Get("page_token"),
	})
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	v.Orders = resp.GetOrders()
	if t := resp.GetNextPageToken(); t != "" {
		v.Next = link(Prefix+"orders", "q", v.Q, "org_id", v.OrgID, "environment", v.Env, "state", v.State, "page_token", t)
	}
	c.render(w, r, s, http.StatusOK, "orders", "Orders", v)
}

// order shows an order's story.
func (c *Console) order(w http.ResponseWriter, r *http.Request, s *session) {
	st, err := c.story(s.call(r.Context()), s, r.PathValue("id"))
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	c.render(w, r, s, http.StatusOK, "order", "Order "+st.Order.GetMerchantOrderId(), st)
}
