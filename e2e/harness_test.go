package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The stack's credentials.
const (
	orgA        = "org_a"
	liveSecret  = "ywhsec_live_0123456789abcdef"
	testSecret  = "ywhsec_test_0123456789abcdef"
	adminToken  = "tok-admin-0123456789abcdef"
	orgAToken   = "tok-org-a-0123456789abcdef"
	ingestToken = "tok-ingest-0123456789abcdef" // a remote webhook gateway's
	liveEP      = "yolfi-live"
	testEP      = "yolfi-test"
	defaultSKU  = "pro-license"
	creditSKU   = "credits"
	creditMinor = 500
)

// stack is the whole service on loopback ports and its own database: the
// webhook gateway (real HTTP), the API (real gRPC), the inbox processor.
type stack struct {
	dbURL     string
	ingestURL string
	restURL   string
	grpcAddr  string
	client    fulfillmentv1.FulfillmentServiceClient
	db        *pgxpool.Pool // for counting effects behind the service's back
}

// setReadOnly fences the database of dbURL as a primary set read-only is
// (default_transaction_read_only, its sessions ended so that none keeps
// writing), or lifts the fence.
func setReadOnly(t *testing.T, dbURL string, on bool) {
	t.Helper()
	value := ""
	if on {
		value = "on"
	}
	pgtest.SetDatabase(t, dbURL, "default_transaction_read_only", value)
}

func testConfig(dbURL string) *config.Config {
	return &config.Config{
		Listen:   config.Listen{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", Ingest: "127.0.0.1:0"},
		Database: config.Database{URL: dbURL, MaxConns: 20, ConnectTimeout: 2 * time.Second},
		Log:      config.Log{Level: "info"},
		Auth: config.Auth{Tokens: []config.Token{
			{Name: "admin", Secret: adminToken, Scopes: []string{config.ScopeAdmin}, Orgs: []string{"*"}},
			{Name: "org-a", Secret: orgAToken, Scopes: []string{config.ScopeOrdersRead, config.ScopeOrdersWrite, config.ScopeReconciliationRead}, Orgs: []string{orgA}},
			{Name: "edge", Secret: ingestToken, Scopes: []string{config.ScopeIngest}, Orgs: []string{"*"}},
		}},
		Endpoints: []config.Endpoint{
			{ID: liveEP, Provider: "yolfi", Org: orgA, Environment: "live", Secrets: []config.Secret{{Value: []byte(liveSecret)}}},
			{ID: testEP, Provider: "yolfi", Org: orgA, Environment: "test", Secrets: []config.Secret{{Value: []byte(testSecret)}}},
		},
		Ingest: config.Ingest{MaxBodyBytes: 256 << 10, Timeout: 2 * time.Second},
		Inbox: config.Inbox{Queue: config.Queue{Workers: 4, Batch: 8, Lease: 5 * time.Second, Poll: 50 * time.Millisecond,
			MaxAttempts: 5, BaseBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}},
	}
}

func startStack(t *testing.T) *stack {
	t.Helper()
	return startReplica(t, pgtest.DB(t))
}

// runApp runs the service on cfg, logging to log, until the test ends, and
// returns once it serves. How it stops is checked too, unless the test
// breaks the service on purpose (tolerateStop).
func runApp(t *testing.T, cfg *config.Config, log *slog.Logger, tolerateStop bool, opts ...app.Option) *app.App {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, log, opts...)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		switch err := <-done; {
		case err != nil && tolerateStop:
			t.Logf("service stopped with error: %v", err)
		case err != nil:
			t.Errorf("service stopped with error: %v", err)
		}
	})
	<-a.Ready()
	return a
}

// startReplica runs one more instance of the service on the database at
// dbURL, as a replica would.
func startReplica(t *testing.T, dbURL string) *stack {
	t.Helper()
	return startReplicaWith(t, dbURL, nil)
}

// startReplicaWith is startReplica with the test configuration changed by
// configure, when not nil.
func startReplicaWith(t *testing.T, dbURL string, configure func(*config.Config)) *stack {
	t.Helper()
	return startService(t, dbURL, configure, slog.New(slog.NewJSONHandler(io.Discard, nil)))
}

// startService runs the service on the database at dbURL with the test
// configuration changed by configure (when not nil), logging to log, with
// the app options opts.
func startService(t *testing.T, dbURL string, configure func(*config.Config), log *slog.Logger, opts ...app.Option) *stack {
	t.Helper()
	cfg := testConfig(dbURL)
	if configure != nil {
		configure(cfg)
	}
	return stackOf(t, runApp(t, cfg, log, false, opts...), dbURL)
}

// stackOf is the test's side of a running app: its addresses, an API
// client, and a pool on dbURL for counting behind its back.
func stackOf(t *testing.T, a *app.App, dbURL string) *stack {
	t.Helper()
	conn, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return &stack{
		dbURL:     dbURL,
		ingestURL: "http://" + a.IngestAddr(),
		restURL:   "http://" + a.HTTPAddr(),
		grpcAddr:  a.GRPCAddr(),
		client:    fulfillmentv1.NewFulfillmentServiceClient(conn),
		db:        db,
	}
}

func authed(token string) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_ = cancel // bounded by the timeout
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// createOrder creates a live order for org_a: two licenses and one balance
// credit, expecting 25 USDT on TRON with a 0.5 tolerance.
func (s *stack) createOrder(t *testing.T, env, merchantOrderID string) *fulfillmentv1.Order {
	t.Helper()
	resp, err := s.client.CreateOrder(authed(orgAToken), orderRequest(env, merchantOrderID))
	if err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	return resp.GetOrder()
}

// orderRequest is the CreateOrder request of createOrder.
func orderRequest(env, merchantOrderID string) *fulfillmentv1.CreateOrderRequest {
	return &fulfillmentv1.CreateOrderRequest{
		OrgId: orgA, Environment: env, MerchantOrderId: merchantOrderID,
		Lines: []*fulfillmentv1.OrderLine{
			{Sku: defaultSKU, Kind: "license", Quantity: 2, UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 1000}},
			{Sku: creditSKU, Kind: "balance_credit", Quantity: 1, UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: creditMinor}, AccountRef: "acct_" + merchantOrderID},
		},
		Settlement: &fulfillmentv1.Settlement{Token: "USDT", Network: "TRON", Amount: "25.000000", Tolerance: "0.5"},
	}
}

// event builds a native Yolfi event for merchantOrderID.
func event(typ, merchantOrderID, invoice string) yolfi.Payload {
	live := true
	p := yolfi.Payload{
		ID: yolfi.NewID("evt_"), Type: typ, Livemode: &live, OrgID: orgA,
		CreatedAt: time.Now().UTC().Format(time.RFC3339),
		Data: yolfi.PayloadData{
			InvoiceID: invoice, MerchantOrderID: merchantOrderID,
		},
	}
	if typ == yolfi.TypePaymentConfirmed {
		p.Data.PaymentID = "pay_" + invoice
		p.Data.Amount, p.Data.Token, p.Data.Network = "25.000000", "USDT", "TRON"
		p.Data.TxHash = "0xabc"
	}
	return p
}

// send signs p with secret and posts it to endpoint; it returns the status.
func (s *stack) send(t *testing.T, endpoint, secret string, p yolfi.Payload) int {
	t.Helper()
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return s.sendRaw(t, endpoint, secret, body, p.ID)
}

func (s *stack) sendRaw(t *testing.T, endpoint, secret string, body []byte, eventID string) int {
	t.Helper()
	req, err := yolfi.NewRequest(context.Background(), s.ingestURL+"/webhooks/"+endpoint, []byte(secret), body, eventID)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("sending webhook: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// sendOK sends p to the live endpoint and requires a 200.
func (s *stack) sendOK(t *testing.T, p yolfi.Payload) {
	t.Helper()
	if code := s.send(t, liveEP, liveSecret, p); code != http.StatusOK {
		t.Fatalf("webhook %s (%s) answered %d, want 200", p.ID, p.Type, code)
	}
}

// settle waits until no inbox event is pending: every acknowledged event
// has been processed (or failed).
func (s *stack) settle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if s.count(t, "SELECT count(*) FROM inbox_events WHERE state = 'pending'") == 0 {
			// No scenario here expects processing to fail.
			var failed int
			var lastErr string
			_ = s.db.QueryRow(context.Background(),
				"SELECT count(*), coalesce(max(last_error), '') FROM inbox_events WHERE state = 'failed'").Scan(&failed, &lastErr)
			if failed > 0 {
				t.Fatalf("%d inbox events failed; last error: %s", failed, lastErr)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("inbox events still pending after 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *stack) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.db.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// effects counts what an order has been granted, straight from the tables.
type effects struct {
	Licenses, Credits, Attempts int
	Items                       map[string]int // open reconciliation items by kind
	State                       string
}

func (s *stack) effects(t *testing.T, orderID string) effects {
	t.Helper()
	e := effects{
		Licenses: s.count(t, "SELECT count(*) FROM entitlements WHERE order_id = $1", orderID),
		Credits:  s.count(t, "SELECT count(*) FROM ledger_entries WHERE order_id = $1", orderID),
		Attempts: s.count(t, "SELECT count(*) FROM payment_attempts WHERE order_id = $1", orderID),
		Items:    map[string]int{},
	}
	if err := s.db.QueryRow(context.Background(), "SELECT state FROM orders WHERE id = $1", orderID).Scan(&e.State); err != nil {
		t.Fatal(err)
	}
	rows, err := s.db.Query(context.Background(), "SELECT kind, count(*) FROM reconciliation_items WHERE order_id = $1 GROUP BY kind", orderID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		e.Items[k] = n
	}
	return e
}

func (e effects) String() string {
	return fmt.Sprintf("state=%s licenses=%d credits=%d attempts=%d items=%v", e.State, e.Licenses, e.Credits, e.Attempts, e.Items)
}

// race runs fn n times concurrently, released together.
func race(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}

// decisions lists the decisions of an order's events, oldest first.
func (s *stack) decisions(t *testing.T, orderID string) string {
	t.Helper()
	rows, err := s.db.Query(context.Background(),
		"SELECT coalesce(decision, state) FROM inbox_events WHERE order_id = $1 ORDER BY processed_at, id", orderID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ds []string
	for rows.Next() {
		var d string
		_ = rows.Scan(&d)
		ds = append(ds, d)
	}
	return strings.Join(ds, ",")
}
