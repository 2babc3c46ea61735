package main

// The API commands run against a real fulfillmentd: internal/app in this
// process, on loopback ports and a database of its own (rig/pgtest).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

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

// The service's credentials in these tests.
const (
	svcAdminToken = "tok-admin-fulfillctl-0123456789"
	svcOrg        = "org_a"
	svcEndpoint   = "yolfi-live"
	svcYolfiKey   = "ywhsec_live_fulfillctl_0123456789"
)

// service is a running fulfillmentd and a way to call it.
type service struct {
	grpcAddr  string
	ingestURL string
	tokenFile string // holds svcAdminToken
	client    fulfillmentv1.FulfillmentServiceClient
}

// startService runs fulfillmentd until the test ends: an admin token, a
// live Yolfi endpoint of svcOrg, and dests with an outbox that retries
// fast.
func startService(t *testing.T, dests ...config.Destination) *service {
	t.Helper()
	return startServiceWith(t, func(c *config.Config) { c.Destinations = dests })
}

// startServiceWith is startService with the configuration changed by
// configure.
func startServiceWith(t *testing.T, configure func(*config.Config)) *service {
	t.Helper()
	fast := config.Queue{Lease: 5 * time.Second, Poll: 50 * time.Millisecond,
		BaseBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	cfg := &config.Config{
		Listen:   config.Listen{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", Ingest: "127.0.0.1:0"},
		Database: config.Database{URL: pgtest.DB(t), MaxConns: 10, ConnectTimeout: 2 * time.Second},
		Auth: config.Auth{Tokens: []config.Token{
			{Name: "admin", Secret: svcAdminToken, Scopes: []string{config.ScopeAdmin}, Orgs: []string{config.AllOrgs}},
		}},
		Endpoints: []config.Endpoint{{ID: svcEndpoint, Provider: "yolfi", Org: svcOrg, Environment: "live",
			Secrets: []config.Secret{{Value: []byte(svcYolfiKey)}}}},
		Ingest: config.Ingest{MaxBodyBytes: 256 << 10, Timeout: 2 * time.Second},
		Inbox:  config.Inbox{Queue: fast},
		Outbox: fast,
	}
	configure(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("fulfillmentd stopped with error: %v", err)
		}
	})
	<-a.Ready()

	cc, err := grpc.NewClient(a.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(svcAdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &service{
		grpcAddr:  a.GRPCAddr(),
		ingestURL: "http://" + a.IngestAddr(),
		tokenFile: tokenFile,
		client:    fulfillmentv1.NewFulfillmentServiceClient(cc),
	}
}

// admin is a context carrying the admin token, for the test's own calls.
func admin(t *testing.T) context.Context {
	t.Helper()
	return metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+svcAdminToken)
}

// ctl runs fulfillctl with args against s, as the admin, and returns what
// it wrote to stdout and stderr and its error (what main prints before
// exiting 1).
func (s *service) ctl(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	root := newRootCmd()
	root.SetArgs(append([]string{"--addr", s.grpcAddr, "--token-file", s.tokenFile}, args...))
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	err = root.ExecuteContext(t.Context())
	return out.String(), errOut.String(), err
}

// ctlOK is ctl for a command that must succeed; it returns stdout.
func (s *service) ctlOK(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := s.ctl(t, args...)
	if err != nil {
		t.Fatalf("fulfillctl %q: %v (stderr %q)", args, err, errOut)
	}
	return out
}

// payOrder creates a live order of svcOrg, with one license and an
// external line for each destination, and pays it through the Yolfi
// endpoint. It returns the order id.
func (s *service) payOrder(t *testing.T, merchantOrderID string, destinations ...string) string {
	t.Helper()
	price := &fulfillmentv1.Money{Currency: "USD", MinorUnits: 500}
	req := &fulfillmentv1.CreateOrderRequest{
		OrgId: svcOrg, Environment: "live", MerchantOrderId: merchantOrderID,
		Lines:      []*fulfillmentv1.OrderLine{{Sku: "pro-license", Kind: "license", Quantity: 1, UnitPrice: price}},
		Settlement: &fulfillmentv1.Settlement{Token: "USDT", Network: "TRON", Amount: "25.000000"},
	}
	for _, d := range destinations {
		req.Lines = append(req.Lines, &fulfillmentv1.OrderLine{Sku: "box", Kind: "external", Quantity: 1, UnitPrice: price, Destination: d})
	}
	resp, err := s.client.CreateOrder(admin(t), req)
	if err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	s.sendPayment(t, merchantOrderID, "inv_"+merchantOrderID, "pay_"+merchantOrderID)
	return resp.GetOrder().GetId()
}

// sendPayment delivers a signed Yolfi payment.confirmed of 25 USDT, of
// invoice invoiceID and payment paymentID, for merchantOrderID to s's Yolfi
// endpoint, and returns the event id.
func (s *service) sendPayment(t *testing.T, merchantOrderID, invoiceID, paymentID string) string {
	t.Helper()
	live := true
	p := yolfi.Payload{
		ID: yolfi.NewID("evt_"), Type: yolfi.TypePaymentConfirmed, Livemode: &live, OrgID: svcOrg,
		CreatedAt: time.Now().UTC().Format(time.RFC3339),
		Data: yolfi.PayloadData{InvoiceID: invoiceID, PaymentID: paymentID,
			MerchantOrderID: merchantOrderID, Amount: "25.000000", Token: "USDT", Network: "TRON"},
	}
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	hook, err := yolfi.NewRequest(t.Context(), s.ingestURL+"/webhooks/"+svcEndpoint, []byte(svcYolfiKey), body, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	answer, err := http.DefaultClient.Do(hook)
	if err != nil {
		t.Fatal(err)
	}
	_ = answer.Body.Close()
	if answer.StatusCode != http.StatusOK {
		t.Fatalf("payment webhook answered %d", answer.StatusCode)
	}
	return p.ID
}

// waitUntil polls cond until it holds, for at most 20 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 20s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// proxy forwards TCP connections to a target: the network between
// fulfillctl and fulfillmentd, which a test can take down.
type proxy struct {
	addr     string
	mu       sync.Mutex
	refusing bool       // down: new connections are closed at once
	open     []net.Conn // both sides of every connection forwarded
}

// startProxy forwards connections on a loopback port to target until the
// test ends.
func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: ln.Addr().String()}
	t.Cleanup(func() {
		_ = ln.Close()
		p.down()
	})
	go func() {
		for {
			in, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			out, err := (&net.Dialer{}).DialContext(context.Background(), "tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.forward(in, out)
		}
	}()
	return p
}

// forward copies between in and out both ways, unless the proxy is down.
func (p *proxy) forward(in, out net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.refusing {
		_ = in.Close()
		_ = out.Close()
		return
	}
	p.open = append(p.open, in, out)
	go func() { _, _ = io.Copy(out, in); _ = out.Close() }()
	go func() { _, _ = io.Copy(in, out); _ = in.Close() }()
}

// down cuts every connection and refuses new ones until up: to fulfillctl,
// the service has become unreachable.
func (p *proxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = true
	for _, c := range p.open {
		_ = c.Close()
	}
	p.open = nil
}

// up forwards new connections again.
func (p *proxy) up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refusing = false
}
