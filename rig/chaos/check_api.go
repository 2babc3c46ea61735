package chaos

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// checkAPI compares what the API says with the database: GetOrder (grants,
// revocations, history, deliveries) for a sample of orders (every
// refunded, test-mode-only order, extra payment and order left fulfilling up
// to a bound, plus random ones),
// ListReconciliationItems for all items, with the message each is about.
func (r *runner) checkAPI(ctx context.Context, db *pgxpool.Pool, s *dbState) error {
	c := Check{Name: "API (GetOrder, ListReconciliationItems) agrees with the database"}
	extraOrders := map[int]bool{}
	for _, e := range r.w.events {
		if e.role == roleExtra {
			extraOrders[e.order] = true
		}
	}
	deliveries := map[string][]string{} // order id → "destination key state", sorted
	for _, m := range s.messages {
		deliveries[m.orderID] = append(deliveries[m.orderID], m.dest+" "+m.key+" "+m.state)
	}
	for _, d := range deliveries {
		slices.Sort(d)
	}
	rng := rand.New(rand.NewPCG(uint64(r.o.Seed)+2, 0))
	var sample []int
	nTest, nExtra, nFulfilling, nRefunded := 0, 0, 0, 0
	for i, o := range r.w.orders {
		switch {
		case s.orders[o.mid].state == string(fulfillment.StateRefunded) && nRefunded < 50:
			nRefunded++
			sample = append(sample, i)
		case o.testOnly && nTest < 50:
			nTest++
			sample = append(sample, i)
		case extraOrders[i] && nExtra < 100:
			nExtra++
			sample = append(sample, i)
		case s.orders[o.mid].state == string(fulfillment.StateFulfilling) && nFulfilling < 50:
			nFulfilling++
			sample = append(sample, i)
		case rng.IntN(len(r.w.orders)) < 60:
			sample = append(sample, i)
		}
	}
	for _, i := range sample {
		o := r.w.orders[i]
		row, ok := s.orders[o.mid]
		if !ok {
			continue // reported
		}
		c.Checked++
		resp, err := withRetry(ctx, func(ctx context.Context) (*fulfillmentv1.GetOrderResponse, error) {
			return r.client.GetOrder(r.authed(ctx, r.orgToken), &fulfillmentv1.GetOrderRequest{OrderId: row.id})
		})
		if err != nil {
			return fmt.Errorf("GetOrder %s: %w", o.mid, err)
		}
		got := resp.GetOrder()
		var values []string
		vrows, err := db.Query(ctx, `SELECT value FROM entitlements WHERE order_id = $1 ORDER BY value`, row.id)
		if err == nil {
			values, err = pgx.CollectRows(vrows, pgx.RowTo[string])
		}
		if err != nil {
			return fmt.Errorf("reading the license keys of %s: %w", o.mid, err)
		}
		apiValues := make([]string, 0, len(got.GetHistory().GetEntitlements()))
		apiRevoked := 0
		for _, e := range got.GetHistory().GetEntitlements() {
			apiValues = append(apiValues, e.GetValue())
			apiRevoked += btoi(e.GetRevokeTime() != nil)
		}
		slices.Sort(apiValues)
		apiDeliveries := []string{}
		for _, m := range got.GetHistory().GetDeliveries() {
			apiDeliveries = append(apiDeliveries, m.GetDestinationId()+" "+m.GetIdempotencyKey()+" "+m.GetState())
		}
		slices.Sort(apiDeliveries)
		var diffs []string
		diff := func(what string, api, dbv any) {
			if fmt.Sprint(api) != fmt.Sprint(dbv) {
				diffs = append(diffs, fmt.Sprintf("%s: API %v, database %v", what, api, dbv))
			}
		}
		diff("state", got.GetState(), row.state)
		diff("license keys", apiValues, values)
		diff("revoked licenses", apiRevoked, s.revoked[row.id])
		diff("ledger entries", len(got.GetHistory().GetLedgerEntries()), s.ledger[row.id])
		diff("payment attempts", len(got.GetHistory().GetPaymentAttempts()), len(s.attempts[row.id]))
		diff("events", len(got.GetHistory().GetEvents()), len(s.byOrder[row.id]))
		diff("deliveries", apiDeliveries, deliveries[row.id])
		if len(diffs) > 0 {
			c.Failed++
			r.viol.add("API disagrees", "order %s: %s", o.mid, strings.Join(diffs, "; "))
		}
	}

	// Every reconciliation item, through the API, by order and kind.
	apiItems := map[string]int{}
	token := ""
	for {
		resp, err := withRetry(ctx, func(ctx context.Context) (*fulfillmentv1.ListReconciliationItemsResponse, error) {
			return r.client.ListReconciliationItems(r.authed(ctx, r.adminToken), &fulfillmentv1.ListReconciliationItemsRequest{
				OrgId: orgID, PageSize: 500, PageToken: token,
			})
		})
		if err != nil {
			return fmt.Errorf("ListReconciliationItems: %w", err)
		}
		for _, it := range resp.GetItems() {
			apiItems[it.GetOrderId()+"|"+it.GetKind()+"|"+it.GetState()+"|"+it.GetOutboxMessageId()]++
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	dbItems := map[string]int{}
	for _, it := range s.items {
		msg := ""
		if it.messageID != 0 {
			msg = strconv.FormatInt(it.messageID, 10)
		}
		dbItems[it.orderID+"|"+it.kind+"|"+it.state+"|"+msg]++
	}
	c.Checked++
	if !maps.Equal(apiItems, dbItems) {
		c.Failed++
		r.viol.add("API disagrees", "ListReconciliationItems lists %d items, the database holds %d (by order|kind|state|message: API %v, database %v)",
			sum(apiItems), sum(dbItems), truncMap(apiItems), truncMap(dbItems))
	}
	r.addCheck(c)
	return nil
}

// withRetry calls fn with a bounded context, retrying while the service is
// unavailable.
func withRetry[T any](ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	for try := 0; ; try++ {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		v, err := fn(callCtx)
		cancel()
		if err == nil || try >= 20 || ctx.Err() != nil {
			return v, err
		}
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded:
		default:
			return v, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}
