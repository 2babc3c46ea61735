package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/server"
	"github.com/fulfillplatform/fulfillment/storage"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Tokens of the test configuration.
const (
	tokCheckout = "tok-checkout-0123456789"  // orders:write + orders:read for org_a
	tokReader   = "tok-reader-0123456789ab"  // orders:read for org_a
	tokOrgB     = "tok-orgb-0123456789abcd"  // orders:write + orders:read for org_b
	tokOps      = "tok-ops-0123456789abcdef" // admin, every org
	tokIngest   = "tok-ingest-0123456789ab"  // ingest only
)

func testConfig() *config.Config {
	return &config.Config{
		Listen: config.Listen{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", Ingest: "127.0.0.1:0"},
		Log:    config.Log{Level: "info"},
		Auth: config.Auth{Tokens: []config.Token{
			{Name: "checkout", Secret: tokCheckout, Scopes: []string{config.ScopeOrdersWrite, config.ScopeOrdersRead}, Orgs: []string{"org_a"}},
			{Name: "reader", Secret: tokReader, Scopes: []string{config.ScopeOrdersRead}, Orgs: []string{"org_a"}},
			{Name: "orgb", Secret: tokOrgB, Scopes: []string{config.ScopeOrdersWrite, config.ScopeOrdersRead}, Orgs: []string{"org_b"}},
			{Name: "ops", Secret: tokOps, Scopes: []string{config.ScopeAdmin}, Orgs: []string{"*"}},
			{Name: "ingest", Secret: tokIngest, Scopes: []string{config.ScopeIngest}, Orgs: []string{"*"}},
		}},
	}
}

// testServer is a real server on loopback ports, on its own database.
type testServer struct {
	httpURL  string
	grpcAddr string
	conn     *grpc.ClientConn // plain-text connection; nil with TLS
	local    *grpc.ClientConn // the in-process connection REST and the console call through
	client   fulfillmentv1.FulfillmentServiceClient
	logs     *syncBuffer
	db       string // the database's URL, for what a test writes behind the service's back
}

func startServer(t *testing.T, mutate func(*config.Config)) *testServer {
	t.Helper()
	cfg := testConfig()
	if mutate != nil {
		mutate(cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	db := pgtest.DB(t)
	store, err := storage.Open(ctx, db, storage.Options{MaxConns: 20})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	log := slog.New(server.ContextHandler{Handler: slog.NewJSONHandler(logs, nil)})
	endpoints, err := app.Endpoints(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := app.LoadTLS(cfg.TLS)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(app.ServerConfig(cfg, endpoints, tlsCfg), store, log, server.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server stopped with error: %v", err)
		}
		store.Close()
	})
	select {
	case <-srv.Ready():
	case err := <-done:
		t.Fatalf("server did not start: %v", err)
	}
	ts := &testServer{httpURL: "http://" + srv.HTTPAddr(), grpcAddr: srv.GRPCAddr(), logs: logs, db: db, local: srv.LocalConn()}
	if cfg.TLS == nil {
		conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		ts.conn = conn
		ts.client = fulfillmentv1.NewFulfillmentServiceClient(conn)
	}
	return ts
}

// withToken returns a context that authenticates gRPC calls with token.
// Its deadline bounds every call made with it, by parallel subtests too,
// on a machine that runs every package's servers at once.
func withToken(token string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	_ = cancel // the test's lifetime bounds it
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// exec runs a statement on the service's database directly: what a test
// arranges that no API does.
func (ts *testServer) exec(t *testing.T, query string, args ...any) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, ts.db)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, query, args...); err != nil {
		t.Fatal(err)
	}
}

// do sends a REST request and decodes the JSON answer into a map.
func (ts *testServer) do(t *testing.T, method, path, token string, body any) (code int, answer map[string]any) {
	t.Helper()
	return ts.doWith(t, method, path, token, body, nil)
}

// doWith is do with more request headers.
func (ts *testServer) doWith(t *testing.T, method, path, token string, body any, header map[string]string) (code int, answer map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, ts.httpURL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s %s: status %d, body not JSON: %q", method, path, resp.StatusCode, raw)
		}
	}
	return resp.StatusCode, out
}

// orderBody is a valid REST CreateOrder body.
func orderBody(org, merchantID string) map[string]any {
	return map[string]any{
		"org_id": org, "environment": "live", "merchant_order_id": merchantID,
		"lines": []any{
			map[string]any{"sku": "pro", "kind": "license", "quantity": 1, "unit_price": map[string]any{"currency": "USD", "minor_units": 2500}},
		},
		"settlement": map[string]any{"token": "USDT", "network": "TRON", "amount": "25.000000"},
	}
}

// orderRequest is a valid gRPC CreateOrder request.
func orderRequest(org, merchantID string) *fulfillmentv1.CreateOrderRequest {
	return &fulfillmentv1.CreateOrderRequest{
		OrgId: org, Environment: "live", MerchantOrderId: merchantID,
		Lines: []*fulfillmentv1.OrderLine{
			{Sku: "pro", Kind: "license", Quantity: 1, UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 2500}},
			{Sku: "credits", Kind: "balance_credit", Quantity: 2, UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 100}, AccountRef: "acct_7"},
		},
		Settlement: &fulfillmentv1.Settlement{Token: "USDT", Network: "TRON", Amount: "27.000000", Tolerance: "0.01"},
	}
}

// syncBuffer collects the server's log lines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
