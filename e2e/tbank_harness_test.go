package e2e_test

// The T-Bank path against the fake bank (internal/fakebank): the service
// starts payments at it (Init), the bank notifies the service's webhook
// endpoints, the poller asks it (GetState).

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/internal/fakebank"
	"github.com/fulfillplatform/fulfillment/internal/pgtest"
)

// The fake bank's terminal, and the endpoints the stack has for it: one
// per duplicate OrderId policy.
const (
	tbankTerminal = "FulfilTestDEMO"
	tbankPassword = "Dfsfh56dgKl"
	tbankFail     = "tbank-fail" // duplicate_order_policy: fail (the default)
	tbankIgnore   = "tbank-ignore"
	tbankReuse    = "tbank-reuse"
	rubMinor      = 19200
)

// tbankStack is the service with T-Bank endpoints, and the fake bank they
// use.
type tbankStack struct {
	*stack
	bank *fakebank.Bank
}

// startTBank runs a fake bank and the service with its endpoints. The bank
// notifies tbankFail's webhook unless Init names another address. configure
// may change the configuration further.
func startTBank(t *testing.T, bankOpts fakebank.Options, configure func(*config.Config)) *tbankStack {
	t.Helper()
	// The service's ingest address is known once it runs, the bank's API
	// address must be in its configuration: the bank notifies a relay.
	var ingest atomic.Pointer[url.URL]
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := ingest.Load()
		if target == nil {
			http.Error(w, "service not started", http.StatusServiceUnavailable)
			return
		}
		httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
	}))
	t.Cleanup(relay.Close)

	bankOpts.TerminalKey, bankOpts.Password = tbankTerminal, []byte(tbankPassword)
	bankOpts.NotificationURL = relay.URL + "/webhooks/" + tbankFail
	if bankOpts.RetryInterval == 0 {
		bankOpts.RetryInterval = 50 * time.Millisecond
	}
	bank, err := fakebank.New(bankOpts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bank.Close() })

	s := startReplicaWith(t, pgtest.DB(t), func(c *config.Config) {
		for _, ep := range []struct{ id, policy string }{{tbankFail, ""}, {tbankIgnore, "ignore"}, {tbankReuse, "reuse"}} {
			opts := map[string]any{"terminal_key": tbankTerminal, "api_url": bank.URL(),
				"notification_url": relay.URL + "/webhooks/" + ep.id, "duplicate_order_codes": []string{fakebank.CodeDuplicateOrder}}
			if ep.policy != "" {
				opts["duplicate_order_policy"] = ep.policy
			}
			var node yaml.Node
			if err := node.Encode(opts); err != nil {
				t.Fatal(err)
			}
			c.Endpoints = append(c.Endpoints, config.Endpoint{ID: ep.id, Provider: "tbank", Org: orgA, Environment: "live",
				Secrets: []config.Secret{{Value: []byte(tbankPassword)}}, Options: node})
		}
		c.StatusPoll = config.StatusPoll{Queue: config.Queue{Disabled: true}} // tests that poll enable it
		if configure != nil {
			configure(c)
		}
	})
	u, err := url.Parse(s.ingestURL)
	if err != nil {
		t.Fatal(err)
	}
	ingest.Store(u)
	return &tbankStack{stack: s, bank: bank}
}

// createRUBOrder creates a live order of org_a for one license at 192 RUB.
func (s *tbankStack) createRUBOrder(t *testing.T, merchantOrderID string) *fulfillmentv1.Order {
	t.Helper()
	resp, err := s.client.CreateOrder(authed(orgAToken), &fulfillmentv1.CreateOrderRequest{
		OrgId: orgA, Environment: "live", MerchantOrderId: merchantOrderID,
		Lines: []*fulfillmentv1.OrderLine{
			{Sku: defaultSKU, Kind: "license", Quantity: 1, UnitPrice: &fulfillmentv1.Money{Currency: "RUB", MinorUnits: rubMinor}},
		},
	})
	if err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	return resp.GetOrder()
}

// startPayment calls StartPayment through endpoint.
func (s *tbankStack) startPayment(orderID, endpoint string, newAttempt bool) (*fulfillmentv1.PaymentStart, error) {
	resp, err := s.client.StartPayment(authed(orgAToken), &fulfillmentv1.StartPaymentRequest{
		OrderId: orderID, EndpointId: endpoint, NewAttempt: newAttempt, Description: "Pro license",
	})
	return resp.GetPayment(), err
}

// waitBank waits until the bank delivered every notification it queued.
func (s *tbankStack) waitBank(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.bank.Wait(ctx); err != nil {
		t.Fatalf("bank notifications: %v", err)
	}
}
