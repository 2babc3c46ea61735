package e2e_test

// The T-Bank path against the fake bank (rig/fakebank): the service
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
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
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
	relay := newTBankRelay(t)
	bank := startFakeBank(t, bankOpts, relay)
	s := startReplicaWith(t, pgtest.DB(t), func(c *config.Config) {
		c.Endpoints = append(c.Endpoints, tbankEndpoints(t, bank, relay, config.Secret{Value: []byte(tbankPassword)})...)
		c.StatusPoll = config.StatusPoll{Queue: config.Queue{Disabled: true}} // tests that poll enable it
		if configure != nil {
			configure(c)
		}
	})
	relay.forwardTo(t, s.ingestURL)
	return &tbankStack{stack: s, bank: bank}
}

// tbankRelay is the address the bank notifies. The service's ingest
// address is known once it runs (and changes when a process is restarted),
// the bank's API address must be in its configuration: the bank notifies a
// relay that forwards to the service running now.
type tbankRelay struct {
	url    string
	target atomic.Pointer[url.URL]
	// lose makes the relay forward requests but answer the bank 502, as
	// if each answer were lost on the way back.
	lose atomic.Bool
}

func newTBankRelay(t *testing.T) *tbankRelay {
	t.Helper()
	r := &tbankRelay{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		target := r.target.Load()
		if target == nil {
			http.Error(w, "service not started", http.StatusServiceUnavailable)
			return
		}
		proxy := httputil.NewSingleHostReverseProxy(target)
		proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
			http.Error(w, "service unreachable: "+err.Error(), http.StatusBadGateway) // a process is down: the bank retries
		}
		if r.lose.Load() {
			loseAnswer(proxy, w, req)
			return
		}
		proxy.ServeHTTP(w, req)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

// loseAnswer forwards req through proxy and answers w 502, as if the
// answer were lost on the way back.
func loseAnswer(proxy *httputil.ReverseProxy, w http.ResponseWriter, req *http.Request) {
	proxy.ServeHTTP(httptest.NewRecorder(), req)
	http.Error(w, "the answer was lost", http.StatusBadGateway)
}

// forwardTo sends what the relay receives from now on to ingestURL.
func (r *tbankRelay) forwardTo(t *testing.T, ingestURL string) {
	t.Helper()
	u, err := url.Parse(ingestURL)
	if err != nil {
		t.Fatal(err)
	}
	r.target.Store(u)
}

// loseAnswers makes the relay lose the service's answers (or stop losing
// them): the bank sees none, and retries.
func (r *tbankRelay) loseAnswers(lose bool) { r.lose.Store(lose) }

// webhook is the relay's address of endpoint's webhook.
func (r *tbankRelay) webhook(endpoint string) string { return r.url + "/webhooks/" + endpoint }

// startFakeBank runs the fake bank of the test terminal, notifying
// tbankFail's webhook through relay.
func startFakeBank(t *testing.T, opts fakebank.Options, relay *tbankRelay) *fakebank.Bank {
	t.Helper()
	opts.TerminalKey, opts.Password = tbankTerminal, []byte(tbankPassword)
	opts.NotificationURL = relay.webhook(tbankFail)
	if opts.RetryInterval == 0 {
		opts.RetryInterval = 50 * time.Millisecond
	}
	bank, err := fakebank.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bank.Close() })
	return bank
}

// tbankEndpoints are the service's endpoints for the bank's terminal, one
// per duplicate OrderId policy, verifying with the terminal password secret.
func tbankEndpoints(t *testing.T, bank *fakebank.Bank, relay *tbankRelay, secret config.Secret) []config.Endpoint {
	t.Helper()
	var eps []config.Endpoint
	for _, ep := range []struct{ id, policy string }{{tbankFail, ""}, {tbankIgnore, "ignore"}, {tbankReuse, "reuse"}} {
		opts := map[string]any{"terminal_key": tbankTerminal, "api_url": bank.URL(),
			"notification_url": relay.webhook(ep.id), "duplicate_order_codes": []string{fakebank.CodeDuplicateOrder}}
		if ep.policy != "" {
			opts["duplicate_order_policy"] = ep.policy
		}
		var node yaml.Node
		if err := node.Encode(opts); err != nil {
			t.Fatal(err)
		}
		eps = append(eps, config.Endpoint{ID: ep.id, Provider: "tbank", Org: orgA, Environment: "live",
			Secrets: []config.Secret{secret}, Options: node})
	}
	return eps
}

// withTBankAPI points the endpoint's bank API (options.api_url) at apiURL.
func withTBankAPI(t *testing.T, endpoint, apiURL string) func(*config.Config) {
	t.Helper()
	return withTBankOption(t, endpoint, "api_url", apiURL)
}

// withTBankOption sets the endpoint's option key to value.
func withTBankOption(t *testing.T, endpoint, key string, value any) func(*config.Config) {
	t.Helper()
	return func(c *config.Config) {
		for i := range c.Endpoints {
			if c.Endpoints[i].ID != endpoint {
				continue
			}
			var opts map[string]any
			if err := c.Endpoints[i].Options.Decode(&opts); err != nil {
				t.Fatal(err)
			}
			opts[key] = value
			if err := c.Endpoints[i].Options.Encode(opts); err != nil {
				t.Fatal(err)
			}
		}
	}
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
