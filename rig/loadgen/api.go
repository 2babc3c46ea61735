package loadgen

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// The settlement every generated order expects, and every generated
// payment.confirmed pays in full.
const (
	SettlementAmount  = "25.000000"
	SettlementToken   = "USDT"
	SettlementNetwork = "TRON"
)

// Order is one order created for a run.
type Order struct {
	ID              string
	MerchantOrderID string
}

// OrderRequest is the CreateOrder request of a generated order: one license
// for 25 USD, settled as 25 USDT on TRON.
func OrderRequest(org, env, mid string) *fulfillmentv1.CreateOrderRequest {
	return &fulfillmentv1.CreateOrderRequest{
		OrgId: org, Environment: env, MerchantOrderId: mid,
		Lines: []*fulfillmentv1.OrderLine{{Sku: "load-license", Kind: "license", Quantity: 1,
			UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 2500}}},
		Settlement: &fulfillmentv1.Settlement{Token: SettlementToken, Network: SettlementNetwork, Amount: "25"},
	}
}

// TBankAmount is what every T-Bank order costs and every generated CONFIRMED
// pays, in kopecks (2,500 RUB).
const TBankAmount = 250000

// TBankOrderRequest is the CreateOrder request of an order paid through
// T-Bank: one license for TBankAmount kopecks, its checkout session mid (the
// OrderId of TBankSource's notifications).
func TBankOrderRequest(org, env, mid string) *fulfillmentv1.CreateOrderRequest {
	return &fulfillmentv1.CreateOrderRequest{
		OrgId: org, Environment: env, MerchantOrderId: mid, CheckoutSessionId: mid,
		Lines: []*fulfillmentv1.OrderLine{{Sku: "load-license", Kind: "license", Quantity: 1,
			UnitPrice: &fulfillmentv1.Money{Currency: "RUB", MinorUnits: TBankAmount}}},
	}
}

// ExternalOrderRequest is the CreateOrder request of an order whose one
// line is external: 25 USD fulfilled by destination (whose id must be
// configured), settled as OrderRequest's.
func ExternalOrderRequest(org, env, mid, destination string) *fulfillmentv1.CreateOrderRequest {
	r := OrderRequest(org, env, mid)
	line := r.GetLines()[0]
	line.Sku, line.Kind, line.Destination = "load-external", "external", destination
	return r
}

// API is an authenticated gRPC client of FulfillmentService.
type API struct {
	conn   *grpc.ClientConn
	Client fulfillmentv1.FulfillmentServiceClient
	token  string
}

// DialAPI connects (lazily, plaintext) to the gRPC address with a bearer token.
func DialAPI(addr, token string) (*API, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &API{conn: conn, Client: fulfillmentv1.NewFulfillmentServiceClient(conn), token: token}, nil
}

// Close closes the connection.
func (a *API) Close() error { return a.conn.Close() }

// Ctx adds the bearer token to ctx.
func (a *API) Ctx(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+a.token)
}

// CreateOrders creates n orders (OrderRequest) named prefix-0 …
// prefix-(n-1) with the given concurrency and returns them in that order.
func (a *API) CreateOrders(ctx context.Context, org, env, prefix string, n, workers int) ([]Order, error) {
	return a.CreateOrdersWith(ctx, prefix, n, workers, func(mid string) *fulfillmentv1.CreateOrderRequest {
		return OrderRequest(org, env, mid)
	})
}

// CreateOrdersWith creates n orders, the request of each built by request
// from its merchant order id prefix-0 … prefix-(n-1), with the given
// concurrency, and returns them in that order.
func (a *API) CreateOrdersWith(ctx context.Context, prefix string, n, workers int, request func(mid string) *fulfillmentv1.CreateOrderRequest) ([]Order, error) {
	orders := make([]Order, n)
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				mid := fmt.Sprintf("%s-%d", prefix, i)
				resp, err := a.Client.CreateOrder(a.Ctx(ctx), request(mid))
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("creating order %s: %w", mid, err); cancel() })
					return
				}
				orders[i] = Order{ID: resp.GetOrder().GetId(), MerchantOrderID: mid}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return orders, ctx.Err()
}

// GetOrder calls GetOrder over gRPC and returns a Request status: 200, or
// 1000 + the gRPC code.
func (a *API) GetOrder(ctx context.Context, id string) (int, error) {
	_, err := a.Client.GetOrder(a.Ctx(ctx), &fulfillmentv1.GetOrderRequest{OrderId: id})
	return GRPCStatus(err)
}

// GRPCStatus maps a gRPC call's error onto a Request status: nil → 200, a
// status error → 1000 + its code, anything else stays an error.
func GRPCStatus(err error) (int, error) {
	if err == nil {
		return http.StatusOK, nil
	}
	if st, ok := status.FromError(err); ok {
		return 1000 + int(st.Code()), nil
	}
	return 0, err
}

// REST is a client of the REST gateway.
type REST struct {
	BaseURL string // e.g. http://127.0.0.1:8080
	Token   string
	Client  *http.Client
}

// NewREST returns a REST client keeping up to conns idle connections.
func NewREST(baseURL, token string, conns int) *REST {
	return &REST{BaseURL: baseURL, Token: token, Client: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns},
	}}
}

// GetOrder calls GET /v1/orders/{id} and returns the HTTP status.
func (r *REST) GetOrder(ctx context.Context, id string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.BaseURL+"/v1/orders/"+id, http.NoBody)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+r.Token)
	resp, err := r.Client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}
