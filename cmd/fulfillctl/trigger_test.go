package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// The T-Bank endpoint of the trigger tests.
const (
	svcTBankEndpoint = "tbank-live"
	svcTerminalKey   = "CtlTriggerTerminal"
	svcTBankPassword = "ctl-trigger-password"
)

// triggerService runs fulfillmentd with the Yolfi endpoint, a T-Bank
// endpoint of svcOrg and the plan pro-monthly; it returns it and the
// arguments of trigger for each provider (its URL, secret and terminal).
func triggerService(t *testing.T) (s *service, providers map[string][]string) {
	t.Helper()
	s = startServiceWith(t, func(c *config.Config) {
		var opts yaml.Node
		// No bank is called: trigger's orders are paid by their checkout
		// session, not through StartPayment.
		if err := opts.Encode(map[string]string{"terminal_key": svcTerminalKey, "api_url": "http://127.0.0.1:1"}); err != nil {
			t.Fatal(err)
		}
		c.Endpoints = append(c.Endpoints, config.Endpoint{ID: svcTBankEndpoint, Provider: "tbank", Org: svcOrg,
			Environment: "live", Secrets: []config.Secret{{Value: []byte(svcTBankPassword)}}, Options: opts})
		c.Plans = []config.Plan{{ID: "pro-monthly", Months: 1}}
	})
	dir := t.TempDir()
	yolfiSecret, tbankSecret := filepath.Join(dir, "yolfi.secret"), filepath.Join(dir, "tbank.secret")
	for name, v := range map[string]string{yolfiSecret: svcYolfiKey, tbankSecret: svcTBankPassword} {
		if err := os.WriteFile(name, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	common := []string{"--org", svcOrg, "--environment", "live", "--timeout", "20s"}
	return s, map[string][]string{
		"yolfi": append([]string{"--provider", "yolfi", "--url", s.ingestURL + "/webhooks/" + svcEndpoint, "--secret-file", yolfiSecret}, common...),
		"tbank": append([]string{"--provider", "tbank", "--url", s.ingestURL + "/webhooks/" + svcTBankEndpoint, "--secret-file", tbankSecret,
			"--terminal-key", svcTerminalKey}, common...),
	}
}

// triggered runs trigger scenario with args and returns what it printed
// and the order it created (its id on the line "order ID created").
func (s *service) triggered(t *testing.T, scenario string, args []string) (out, order string) {
	t.Helper()
	out = s.ctlOK(t, append([]string{"trigger", scenario}, args...)...)
	if strings.Contains(out, svcYolfiKey) || strings.Contains(out, svcTBankPassword) {
		t.Errorf("trigger %s printed a secret:\n%s", scenario, out)
	}
	if m := regexp.MustCompile(`(?m)^order (\S+) created: merchant order trigger-`).FindStringSubmatch(out); m != nil {
		order = m[1]
	}
	return out, order
}

// effects are what an order's events did, as the API shows them.
type effects struct {
	state              string
	licenses, revoked  int
	events             int // stored provider events of the order
	extraItems, others int // its open reconciliation items: extra_payment, other kinds
}

func (s *service) effectsOf(t *testing.T, order string) effects {
	t.Helper()
	o, err := s.client.GetOrder(admin(t), &fulfillmentv1.GetOrderRequest{OrderId: order})
	if err != nil {
		t.Fatal(err)
	}
	e := effects{state: o.GetOrder().GetState()}
	for _, en := range o.GetOrder().GetHistory().GetEntitlements() {
		e.licenses++
		if en.GetRevokeTime() != nil {
			e.revoked++
		}
	}
	evs, err := s.client.ListInboxEvents(admin(t), &fulfillmentv1.ListInboxEventsRequest{OrderId: order})
	if err != nil {
		t.Fatal(err)
	}
	e.events = len(evs.GetEvents())
	items, err := s.client.ListReconciliationItems(admin(t), &fulfillmentv1.ListReconciliationItemsRequest{OrderId: order, State: "open"})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items.GetItems() {
		if it.GetKind() == "extra_payment" {
			e.extraItems++
		} else {
			e.others++
		}
	}
	return e
}

// storedEvents counts the provider events the service stored (the
// gateway stores an event before it answers).
func (s *service) storedEvents(t *testing.T) int {
	t.Helper()
	resp, err := s.client.ListInboxEvents(admin(t), &fulfillmentv1.ListInboxEventsRequest{PageSize: 500})
	if err != nil {
		t.Fatal(err)
	}
	return len(resp.GetEvents())
}

// settled waits until no stored event is pending: all are decided.
func (s *service) settled(t *testing.T) {
	t.Helper()
	waitUntil(t, "every event decided", func() bool {
		resp, err := s.client.ListInboxEvents(admin(t), &fulfillmentv1.ListInboxEventsRequest{State: "pending"})
		return err == nil && len(resp.GetEvents()) == 0
	})
}

// Each scenario, for each provider that has it, against a real service:
// what the service did, counted through its API.
func TestTriggerScenarios(t *testing.T) {
	t.Parallel()
	s, providers := triggerService(t)
	// The events one payment stores: Yolfi's payment.confirmed; T-Bank's
	// AUTHORIZED and CONFIRMED.
	perPayment := map[string]int{"yolfi": 1, "tbank": 2}

	for _, provider := range []string{"yolfi", "tbank"} {
		args := providers[provider]
		n := perPayment[provider]

		// payment: fulfilled, one license, nothing to reconcile.
		out, order := s.triggered(t, "payment", args)
		if order == "" || !strings.Contains(out, "order "+order+" is fulfilled\n") || !regexp.MustCompile(`(?m)^sent .*: HTTP 200`).MatchString(out) ||
			!strings.Contains(out, "look:   fulfillctl orders get "+order+"\n") {
			t.Fatalf("%s payment printed:\n%s", provider, out)
		}
		s.settled(t)
		if got, want := s.effectsOf(t, order), (effects{state: "fulfilled", licenses: 1, events: n}); got != want {
			t.Errorf("%s payment: %+v, want %+v", provider, got, want)
		}

		// duplicate: the same webhook again is stored once and does
		// nothing more.
		before := s.storedEvents(t)
		out, order = s.triggered(t, "duplicate", args)
		if strings.Count(out, "\nsent ") != n+1 {
			t.Errorf("%s duplicate: want %d webhooks sent:\n%s", provider, n+1, out)
		}
		if stored := s.storedEvents(t) - before; stored != n {
			t.Errorf("%s duplicate: %d events stored, want %d (the repeat is not stored again)", provider, stored, n)
		}
		s.settled(t)
		if got, want := s.effectsOf(t, order), (effects{state: "fulfilled", licenses: 1, events: n}); got != want {
			t.Errorf("%s duplicate: %+v, want %+v (one license, no event stored twice)", provider, got, want)
		}

		// extra-payment: a second payment opens an item, grants nothing.
		_, order = s.triggered(t, "extra-payment", args)
		waitUntil(t, provider+" extra payment's item open", func() bool { return s.effectsOf(t, order).extraItems == 1 })
		s.settled(t)
		if got, want := s.effectsOf(t, order), (effects{state: "fulfilled", licenses: 1, events: 2 * n, extraItems: 1}); got != want {
			t.Errorf("%s extra-payment: %+v, want %+v", provider, got, want)
		}

		// renewal: each run pays one more period of the subscription.
		out, _ = s.triggered(t, "renewal", append(args, "--plan", "pro-monthly", "--customer-ref", "user_"+provider))
		m := regexp.MustCompile(`(?m)^subscription (\S+) registered: provider id (\S+), plan pro-monthly, 0 periods paid$`).FindStringSubmatch(out)
		if len(m) != 3 || !strings.Contains(out, "subscription "+m[1]+" has 1 period paid\n") {
			t.Fatalf("%s renewal printed:\n%s", provider, out)
		}
		sub, providerID := m[1], m[2]
		out, _ = s.triggered(t, "renewal", append(args, "--plan", "pro-monthly", "--customer-ref", "user_"+provider, "--subscription-id", providerID))
		if !strings.Contains(out, "subscription "+sub+" found: provider id "+providerID+", plan pro-monthly, 1 period paid\n") {
			t.Errorf("%s renewal again printed:\n%s", provider, out)
		}
		got, err := s.client.GetSubscription(admin(t), &fulfillmentv1.GetSubscriptionRequest{SubscriptionId: sub})
		if err != nil || got.GetSubscription().GetPeriods() != 2 || len(got.GetPeriods()) != 2 || got.GetSubscription().GetProvider() != provider {
			t.Errorf("%s subscription after two renewals: %v, %v; want two periods", provider, got, err)
		}
	}

	// refund, T-Bank's: the order refunded, its license revoked.
	out, order := s.triggered(t, "refund", providers["tbank"])
	if !strings.Contains(out, "order "+order+" is refunded\n") || !strings.Contains(out, "sent REFUNDED of payment ") {
		t.Fatalf("tbank refund printed:\n%s", out)
	}
	s.settled(t)
	if got := s.effectsOf(t, order); got.state != "refunded" || got.licenses != 1 || got.revoked != 1 || got.events != 3 || got.extraItems != 0 || got.others != 1 {
		t.Errorf("tbank refund: %+v, want refunded, its one license revoked, three events, a refund item", got)
	}
}

// What cannot work is refused before anything is created or sent: a
// scenario the provider lacks, a missing flag, a URL where no endpoint
// answers (it created an order, then failed on "HTTP 404 404 page not
// found"); a wrong secret stops at the first webhook, which the service
// refuses, and says which order it left pending.
func TestTriggerRefusals(t *testing.T) {
	t.Parallel()
	s, providers := triggerService(t)
	orders := func() int {
		t.Helper()
		resp, err := s.client.ListOrders(admin(t), &fulfillmentv1.ListOrdersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.GetOrders())
	}
	withoutTerminal := without(providers["tbank"], "--terminal-key")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append([]string{"trigger", "refund"}, providers["yolfi"]...), "scenario refund: yolfi sends no refund webhook (its native events carry none); use --provider tbank"},
		{append([]string{"trigger", "payment"}, withoutTerminal...), "--terminal-key is required with --provider tbank"},
		{append([]string{"trigger", "renewal"}, providers["yolfi"]...), "--plan is required for renewal"},
		{append([]string{"trigger", "refunds"}, providers["tbank"]...), `scenario "refunds": use one of payment, duplicate, extra-payment, refund, renewal`},
		{append([]string{"trigger", "payment"}, with(providers["yolfi"], "--environment", "prod")...), `--environment "prod": use live or test`},
		{append([]string{"trigger", "payment"}, with(providers["yolfi"], "--url", s.ingestURL+"/webhook/"+svcEndpoint)...),
			"--url " + s.ingestURL + "/webhook/" + svcEndpoint + ": no webhook endpoint there (HTTP 404): use the ingest listener's /webhooks/ENDPOINT_ID"},
		{append([]string{"trigger", "renewal", "--plan", "pro-monthly"}, with(providers["tbank"], "--url", s.ingestURL+"/webhooks/nosuch")...),
			"--url " + s.ingestURL + "/webhooks/nosuch: no webhook endpoint there (HTTP 404)"},
		{append([]string{"trigger", "payment"}, with(providers["yolfi"], "--url", "http://127.0.0.1:1/webhooks/"+svcEndpoint)...),
			"--url http://127.0.0.1:1/webhooks/" + svcEndpoint + " does not answer ("},
	} {
		out, _, err := s.ctl(t, tc.args...)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || out != "" {
			t.Errorf("%v: %v, printed %q; want %q", tc.args[1:], err, out, tc.want)
		}
	}
	if n := orders(); n != 0 {
		t.Errorf("refused triggers created %d orders", n)
	}

	wrong := filepath.Join(t.TempDir(), "wrong.secret")
	if err := os.WriteFile(wrong, []byte("ywhsec_wrong_0123456789abcdef"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"trigger", "payment"}, with(providers["yolfi"], "--secret-file", wrong)...)
	out, _, err := s.ctl(t, args...)
	if err == nil || !strings.HasPrefix(err.Error(), "the endpoint did not store the webhook (HTTP 401") ||
		!regexp.MustCompile(`; order \S+, created for this run, stays pending_payment$`).MatchString(err.Error()) ||
		strings.Count(out, "\nsent ") != 1 || strings.Contains(out, "ywhsec_wrong") {
		t.Errorf("a wrong secret: %v, printed:\n%s", err, out)
	}
}

// without is args without flag and its value.
func without(args []string, flag string) []string {
	i := flagAt(args, flag)
	return append(append([]string(nil), args[:i]...), args[i+2:]...)
}

// with is args with flag's value replaced by value.
func with(args []string, flag, value string) []string {
	c := append([]string(nil), args...)
	c[flagAt(c, flag)+1] = value
	return c
}

func flagAt(args []string, flag string) int {
	for i, a := range args {
		if a == flag {
			return i
		}
	}
	panic("no flag " + flag)
}
