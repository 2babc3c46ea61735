package console

import (
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

type ordersView struct {
	Q, By, OrgID, Env, State string
	// Found says which reference q matched, when By is "any".
	Found  string
	Orders []*fulfillmentv1.Order
	Next   string
	States []string
}

var orderStates = []string{"pending_payment", "paid", "fulfilling", "fulfilled", "on_hold", "cancelled", "expired", "refunded"}

// orders lists orders, newest first, filtered by the query string. q finds
// orders by order id, merchant order id, customer ref or payment ref: by
// says which ("any": the first that finds some, in that order).
func (c *Console) orders(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	v := ordersView{Q: strings.TrimSpace(q.Get("q")), By: q.Get("by"), OrgID: q.Get("org_id"), Env: q.Get("environment"), State: q.Get("state"), States: orderStates}
	if v.By == "" {
		v.By = "any"
	}
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
	bys := []string{v.By}
	if v.By == "any" {
		bys = []string{"merchant_order_id", "customer_ref", "payment_ref"}
	}
	if v.Q == "" {
		bys = []string{""}
	}
	var resp *fulfillmentv1.ListOrdersResponse
	for _, by := range bys {
		req := &fulfillmentv1.ListOrdersRequest{OrgId: v.OrgID, Environment: v.Env, State: v.State,
			PageSize: pageSize, PageToken: q.Get("page_token")}
		switch by {
		case "merchant_order_id":
			req.MerchantOrderId = v.Q
		case "customer_ref":
			req.CustomerRef = v.Q
		case "payment_ref":
			req.PaymentRef = v.Q
		case "":
		default:
			c.fail(w, r, s, http.StatusBadRequest, "by must be any, merchant_order_id, customer_ref or payment_ref.")
			return
		}
		var err error
		if resp, err = c.api.ListOrders(ctx, req); err != nil {
			c.apiFail(w, r, s, err)
			return
		}
		if len(resp.GetOrders()) > 0 {
			v.Found = by
			break
		}
	}
	v.Orders = resp.GetOrders()
	if t := resp.GetNextPageToken(); t != "" {
		by := v.By
		if v.Found != "" {
			by = v.Found // the page token is bound to the filter that found them
		}
		v.Next = link(Prefix+"orders", "q", v.Q, "by", by, "org_id", v.OrgID, "environment", v.Env, "state", v.State, "page_token", t)
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
