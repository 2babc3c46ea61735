package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/english"
)

// The scenarios of trigger.
const (
	scenarioPayment      = "payment"
	scenarioDuplicate    = "duplicate"
	scenarioExtraPayment = "extra-payment"
	scenarioRefund       = "refund"
	scenarioRenewal      = "renewal"
)

// triggerScenarios lists the scenarios, and the providers each works with.
var triggerScenarios = []struct {
	name      string
	providers []fulfillment.Provider
}{
	{scenarioPayment, []fulfillment.Provider{fulfillment.ProviderYolfi, fulfillment.ProviderTBank}},
	{scenarioDuplicate, []fulfillment.Provider{fulfillment.ProviderYolfi, fulfillment.ProviderTBank}},
	{scenarioExtraPayment, []fulfillment.Provider{fulfillment.ProviderYolfi, fulfillment.ProviderTBank}},
	{scenarioRefund, []fulfillment.Provider{fulfillment.ProviderTBank}},
	{scenarioRenewal, []fulfillment.Provider{fulfillment.ProviderYolfi, fulfillment.ProviderTBank}},
}

// What an order of trigger costs and what its payment carries.
const (
	triggerYolfiPrice  = 2500 // USD cents
	triggerYolfiAmount = "25.000000"
	triggerYolfiToken  = "USDT"
	triggerYolfiChain  = "TRON"
	triggerTBankPrice  = 19900 // kopecks
)

// trigger holds the flags of trigger and what a run found.
type trigger struct {
	c                        *conn
	provider                 string
	url, secretEnv, secretFn string
	org, environment         string
	terminalKey              string
	plan, customer, subID    string
	timeout                  time.Duration

	secret []byte
	out    io.Writer
	http   *http.Client
}

func newTriggerCmd(c *conn) *cobra.Command {
	tr := &trigger{c: c}
	cmd := &cobra.Command{
		Use:   "trigger SCENARIO --provider yolfi|tbank --url URL (--secret-env NAME | --secret-file PATH) --org ORG [flags]",
		Short: "Send a named scenario of signed test webhooks (payment, duplicate, extra-payment, refund, renewal) to a running service",
		Long: `Trigger plays a provider for a running service: it creates through the API
what the scenario needs (an order, a subscription), builds the provider's
webhooks, signs them with the endpoint's secret and POSTs them to the
endpoint's URL, waiting (up to --timeout) for each step to take effect
before the next. It prints each order or subscription it created, each
webhook it sent (its ids and the HTTP answer, never its body or the
secret), what the service should do, and the commands that show it.
Before it creates anything, it checks that --url is an endpoint (a GET,
answered 405); a webhook refused later ends it, naming what it created.

Scenarios:
  payment        a new order, paid once: fulfilled, one license.
  duplicate      a new order paid, then the very same webhook again: still
                 one license, nothing stored twice.
  extra-payment  a new order paid, then a second, different payment of it:
                 still one license, an extra_payment reconciliation item.
  refund         a new order paid, then its payment refunded: the order
                 refunded, its license revoked. T-Bank only: Yolfi's
                 native webhooks carry no refund.
  renewal        a subscription of --customer-ref to --plan (registered through
                 the API, or the one --subscription-id names), then a
                 payment of its next period: one more paid period.

Yolfi (--provider yolfi) sends payment.confirmed events signed with
X-Yolfi-Signature. T-Bank (--provider tbank) sends the notifications of a
one-stage card payment, AUTHORIZED then CONFIRMED (REFUNDED for a refund),
signed with their Token under the terminal password; it needs the
endpoint's --terminal-key. The order's checkout session is the T-Bank
OrderId, so no bank is called.

Orders are created in --org and --environment, which must be the
endpoint's. Needs a token with the orders:read and orders:write scopes.`,
		Example: `  fulfillctl trigger payment --provider yolfi --url http://127.0.0.1:8081/webhooks/yolfi-test \
    --secret-file .data/dev/yolfi-test.secret --org org_demo
  fulfillctl trigger refund --provider tbank --url http://127.0.0.1:8081/webhooks/tbank-test \
    --secret-env TBANK_TEST_PASSWORD --terminal-key 1321054611234DEMO --org org_demo
  fulfillctl trigger renewal --provider yolfi --url http://127.0.0.1:8081/webhooks/yolfi-test \
    --secret-file .data/dev/yolfi-test.secret --org org_demo --plan pro-monthly --customer-ref user_42`,
		Args: cobra.ExactArgs(1),
		ValidArgs: func() []string {
			var names []string
			for _, s := range triggerScenarios {
				names = append(names, s.name)
			}
			return names
		}(),
		RunE: func(cmd *cobra.Command, args []string) error { return tr.run(cmd, args[0]) },
	}
	f := cmd.Flags()
	f.StringVar(&tr.provider, "provider", "", "the endpoint's provider: yolfi or tbank (required)")
	f.StringVar(&tr.url, "url", "", "the endpoint's URL, e.g. http://127.0.0.1:8081/webhooks/yolfi-test (required)")
	f.StringVar(&tr.secretEnv, "secret-env", "", "environment variable holding the endpoint's signing secret (T-Bank: the terminal password)")
	f.StringVar(&tr.secretFn, "secret-file", "", "file holding the endpoint's signing secret (T-Bank: the terminal password)")
	f.StringVar(&tr.org, "org", "", "the endpoint's org, where orders and subscriptions are created (required)")
	f.StringVar(&tr.environment, "environment", "test", "the endpoint's environment: live or test")
	f.StringVar(&tr.terminalKey, "terminal-key", "", "tbank: the endpoint's terminal_key, named in every notification")
	f.StringVar(&tr.plan, "plan", "", "renewal: the configured plan of the subscription")
	f.StringVar(&tr.customer, "customer-ref", "trigger-customer", "renewal: the customer reference of the subscription")
	deprecatedName(cmd, "customer", "customer-ref")
	f.StringVar(&tr.subID, "subscription-id", "", "renewal: the provider's id of the subscription to renew (Yolfi subscriptionId, T-Bank RebillId); default: a new one")
	f.DurationVar(&tr.timeout, "timeout", 30*time.Second, "how long to wait for each step to take effect")
	cmd.MarkFlagsMutuallyExclusive("secret-env", "secret-file")
	for _, name := range []string{"provider", "url", "org"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// check validates the flags for scenario before anything is created or
// sent.
func (tr *trigger) check(scenario string) error {
	i := slices.IndexFunc(triggerScenarios, func(s struct {
		name      string
		providers []fulfillment.Provider
	}) bool {
		return s.name == scenario
	})
	if i < 0 {
		return fmt.Errorf("scenario %q: use one of payment, duplicate, extra-payment, refund, renewal", scenario)
	}
	p := fulfillment.Provider(tr.provider)
	switch {
	case p != fulfillment.ProviderYolfi && p != fulfillment.ProviderTBank:
		return fmt.Errorf("--provider %q: use yolfi or tbank", tr.provider)
	case !slices.Contains(triggerScenarios[i].providers, p):
		return fmt.Errorf("scenario %s: %s sends no refund webhook (its native events carry none); use --provider tbank", scenario, tr.provider)
	case p == fulfillment.ProviderTBank && tr.terminalKey == "":
		return errors.New("--terminal-key is required with --provider tbank: the endpoint's terminal_key, which every notification names")
	case tr.environment != "live" && tr.environment != "test":
		return fmt.Errorf("--environment %q: use live or test", tr.environment)
	case scenario == scenarioRenewal && tr.plan == "":
		return errors.New("--plan is required for renewal: a configured plan (plans[].id)")
	case scenario == scenarioRenewal && p == fulfillment.ProviderTBank && tr.subID != "" && !allDigits(tr.subID):
		return fmt.Errorf("--subscription-id %q: a T-Bank RebillId is digits only", tr.subID)
	case tr.timeout <= 0:
		return errors.New("--timeout must be more than 0, e.g. 30s")
	}
	if tr.secretEnv == "" && tr.secretFn == "" {
		return errors.New("no secret: pass --secret-env NAME or --secret-file PATH (the endpoint's signing secret)")
	}
	return checkWebhookURL(tr.url)
}

func (tr *trigger) run(cmd *cobra.Command, scenario string) error {
	if err := tr.check(scenario); err != nil {
		return err
	}
	secret, err := readSecret(tr.secretEnv, tr.secretFn)
	if err != nil {
		return err
	}
	tr.secret, tr.out, tr.http = secret, cmd.OutOrStdout(), &http.Client{Timeout: webhookTimeout}
	_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "scenario %s (%s) at %s\n", scenario, tr.provider, tr.url)
	if err := tr.probe(cmd.Context()); err != nil {
		return err
	}
	return tr.c.call(cmd.Context(), func(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
		if scenario == scenarioRenewal {
			return tr.renewal(ctx, client)
		}
		return tr.orderScenario(ctx, client, scenario)
	})
}

// probe checks, before anything is created, that --url is a webhook
// endpoint: it asks it with a GET, which an endpoint answers 405 (POST
// only). An address nothing listens on, or a 404 (another listener, such
// as the REST one, a wrong path, an endpoint id the service does not
// have), ends the scenario there; so did its first webhook, after the
// order was created. Other answers (a proxy's) are left to the webhooks.
func (tr *trigger) probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, tr.url, http.NoBody)
	if err != nil {
		return fmt.Errorf("--url %s: %w", tr.url, err)
	}
	resp, err := tr.http.Do(req)
	if err != nil {
		return fmt.Errorf("--url %s does not answer (%w): check it, and that the service's ingest listener is up; nothing was created", tr.url, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return fmt.Errorf("--url %s: no webhook endpoint there (HTTP 404): use the ingest listener's /webhooks/ENDPOINT_ID, "+
			"e.g. http://127.0.0.1:8081/webhooks/yolfi-test; nothing was created", tr.url)
	}
	return nil
}

// payment is one payment of an order as the provider announces it: the
// webhooks, in order.
type payment struct {
	hooks []hook
	ref   string // what names it for people: the invoice and payment, the bank's payment id
}

// hook is one signed webhook.
type hook struct {
	what string // for people: the type and ids
	req  func(ctx context.Context) (*http.Request, error)
}

func (tr *trigger) orderScenario(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, scenario string) error {
	order, session, err := tr.createOrder(ctx, client, scenario)
	if err != nil {
		return err
	}
	id := order.GetId()
	first, err := tr.payment(session, order.GetMerchantOrderId())
	if err != nil {
		return err
	}
	if err := tr.sendAll(ctx, first); err != nil {
		return fmt.Errorf("%w; order %s, created for this run, stays pending_payment", err, id)
	}
	if err := tr.waitOrder(ctx, client, id, "fulfilled"); err != nil {
		return err
	}
	expect := "fulfilled, with one license"
	look := []string{"fulfillctl orders get " + id}
	switch scenario {
	case scenarioDuplicate:
		last := first.hooks[len(first.hooks)-1]
		if err := tr.send(ctx, last); err != nil {
			return err
		}
		expect = "still fulfilled with one license: the repeat is stored once (the same event id) and does nothing"
		look = append(look, "fulfillctl events list --order "+id)
	case scenarioExtraPayment:
		second, err := tr.payment(session, order.GetMerchantOrderId())
		if err != nil {
			return err
		}
		if err := tr.sendAll(ctx, second); err != nil {
			return err
		}
		expect = "still fulfilled with one license; an extra_payment reconciliation item opens for the second payment (" + second.ref + ")"
		look = append(look, "fulfillctl recon list --order "+id)
	case scenarioRefund:
		refund, err := tr.refund(first, session)
		if err != nil {
			return err
		}
		if err := tr.send(ctx, refund); err != nil {
			return err
		}
		if err := tr.waitOrder(ctx, client, id, "refunded"); err != nil {
			return err
		}
		expect = "refunded, its license revoked; a refund_after_fulfillment reconciliation item to check"
		look = append(look, "fulfillctl recon list --order "+id)
	}
	return tr.done(expect, look)
}

// done prints what to expect and where to look.
func (tr *trigger) done(expect string, look []string) error {
	_, err := fmt.Fprintf(tr.out, "expect: %s\nlook:   %s\n", expect, strings.Join(look, "\n        "))
	return err
}

// createOrder creates the order of a scenario: one license, priced for
// the provider; a T-Bank order has a checkout session, its OrderId at the
// bank, which it returns.
func (tr *trigger) createOrder(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, scenario string) (*fulfillmentv1.Order, string, error) {
	req := &fulfillmentv1.CreateOrderRequest{
		OrgId: tr.org, Environment: tr.environment, MerchantOrderId: "trigger-" + scenario + "-" + randomHex(6),
	}
	line := &fulfillmentv1.OrderLine{Sku: "trigger-license", Kind: "license", Quantity: 1}
	var session string
	if tr.provider == string(fulfillment.ProviderTBank) {
		session = "trg-" + randomHex(8)
		req.CheckoutSessionId = session
		line.UnitPrice = &fulfillmentv1.Money{Currency: tbank.Currency, MinorUnits: triggerTBankPrice}
	} else {
		line.UnitPrice = &fulfillmentv1.Money{Currency: "USD", MinorUnits: triggerYolfiPrice}
		req.Settlement = &fulfillmentv1.Settlement{Token: triggerYolfiToken, Network: triggerYolfiChain, Amount: triggerYolfiAmount}
	}
	req.Lines = []*fulfillmentv1.OrderLine{line}
	resp, err := client.CreateOrder(ctx, req)
	if err != nil {
		return nil, "", err
	}
	o := resp.GetOrder()
	expects := moneyText(o.GetTotal())
	if s := o.GetSettlement(); s != nil {
		expects += ", settlement " + settlementText(s)
	}
	_, _ = fmt.Fprintf(tr.out, "order %s created: merchant order %s, %s %s, %s\n", o.GetId(), o.GetMerchantOrderId(),
		o.GetOrgId(), o.GetEnvironment(), expects)
	return o, session, nil
}

// payment builds one new payment of the order (merchant order id for
// Yolfi, checkout session for T-Bank).
func (tr *trigger) payment(session, merchantOrderID string) (payment, error) {
	if tr.provider == string(fulfillment.ProviderTBank) {
		paymentID := randomDigits(10)
		var hooks []hook
		for _, status := range []string{tbank.StatusAuthorized, tbank.StatusConfirmed} {
			h, err := tr.tbankHook(tbankNotice{OrderID: session, PaymentID: json.Number(paymentID), Status: status, Amount: triggerTBankPrice})
			if err != nil {
				return payment{}, err
			}
			hooks = append(hooks, h)
		}
		return payment{hooks: hooks, ref: "payment " + paymentID}, nil
	}
	invoice, pay := yolfi.NewID("inv_"), yolfi.NewID("pay_")
	h, err := tr.yolfiHook(yolfi.PayloadData{InvoiceID: invoice, PaymentID: pay, MerchantOrderID: merchantOrderID,
		Amount: triggerYolfiAmount, Token: triggerYolfiToken, Network: triggerYolfiChain})
	return payment{hooks: []hook{h}, ref: "payment " + pay + " of invoice " + invoice}, err
}

// refund is the bank's notification that the payment p of the order's
// checkout session was refunded in full.
func (tr *trigger) refund(p payment, session string) (hook, error) {
	paymentID := strings.TrimPrefix(p.ref, "payment ")
	return tr.tbankHook(tbankNotice{OrderID: session, PaymentID: json.Number(paymentID), Status: tbank.StatusRefunded, Amount: triggerTBankPrice})
}

func (tr *trigger) renewal(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient) error {
	tb := tr.provider == string(fulfillment.ProviderTBank)
	subID := tr.subID
	if subID == "" {
		subID = "sub_trigger_" + randomHex(6)
		if tb {
			subID = randomDigits(12) // a RebillId
		}
	}
	resp, err := client.CreateSubscription(ctx, &fulfillmentv1.CreateSubscriptionRequest{
		OrgId: tr.org, Environment: tr.environment, Provider: tr.provider, ProviderSubscriptionId: subID,
		CustomerRef: tr.customer, PlanId: tr.plan,
	})
	if err != nil {
		return err
	}
	sub := resp.GetSubscription()
	how := "registered"
	if !resp.GetCreated() {
		how = "found"
	}
	_, _ = fmt.Fprintf(tr.out, "subscription %s %s: provider id %s, plan %s, %s paid\n", sub.GetId(), how, subID,
		sub.GetPlanId(), english.Plural(sub.GetPeriods(), "period"))
	var h hook
	if tb {
		h, err = tr.tbankHook(tbankNotice{OrderID: "trg-renewal-" + randomHex(6), PaymentID: json.Number(randomDigits(10)),
			Status: tbank.StatusConfirmed, Amount: triggerTBankPrice, RebillID: json.Number(subID)})
	} else {
		h, err = tr.yolfiHook(yolfi.PayloadData{InvoiceID: yolfi.NewID("inv_"), PaymentID: yolfi.NewID("pay_"), SubscriptionID: subID,
			Amount: triggerYolfiAmount, Token: triggerYolfiToken, Network: triggerYolfiChain,
			Customer: &yolfi.PayloadCustomer{ClientReferenceID: tr.customer}})
	}
	if err != nil {
		return err
	}
	if err := tr.send(ctx, h); err != nil {
		return fmt.Errorf("%w; subscription %s, %s for this run, has no new period", err, sub.GetId(), how)
	}
	want := sub.GetPeriods() + 1
	if err := tr.wait(ctx, fmt.Sprintf("subscription %s has %s paid", sub.GetId(), english.Plural(want, "period")), func() (bool, error) {
		got, err := client.GetSubscription(ctx, &fulfillmentv1.GetSubscriptionRequest{SubscriptionId: sub.GetId()})
		return got.GetSubscription().GetPeriods() >= want, err
	}); err != nil {
		return err
	}
	return tr.done(fmt.Sprintf("period %d paid: access until the new period ends", want),
		[]string{"fulfillctl subscriptions get " + sub.GetId(), "fulfillctl trigger renewal ... --subscription-id " + subID + "   # the period after"})
}

// yolfiHook is a payment.confirmed event with data, signed.
func (tr *trigger) yolfiHook(data yolfi.PayloadData) (hook, error) {
	live := tr.environment == "live"
	prefix := "evt_"
	if !live {
		prefix = yolfi.TestEventIDPrefix
	}
	p := yolfi.Payload{ID: yolfi.NewID(prefix), Type: yolfi.TypePaymentConfirmed, Livemode: &live, OrgID: tr.org,
		CreatedAt: time.Now().UTC().Format(createdAtLayout), Data: data}
	body, err := json.Marshal(p)
	if err != nil {
		return hook{}, fmt.Errorf("encoding the event: %w", err)
	}
	ref := data.PaymentID
	if data.SubscriptionID != "" {
		ref += " of subscription " + data.SubscriptionID
	}
	return hook{
		what: fmt.Sprintf("%s %s (invoice %s, payment %s, %s %s/%s)", p.Type, p.ID, data.InvoiceID, ref, data.Amount, data.Token, data.Network),
		req: func(ctx context.Context) (*http.Request, error) {
			return yolfi.NewRequest(ctx, tr.url, tr.secret, body, p.ID)
		},
	}, nil
}

// tbankNotice is a T-Bank notification of a card payment: the members the
// service reads (no card data), and its Token.
type tbankNotice struct {
	TerminalKey string      `json:"TerminalKey"`
	OrderID     string      `json:"OrderId"`
	Success     bool        `json:"Success"`
	Status      string      `json:"Status"`
	PaymentID   json.Number `json:"PaymentId"`
	ErrorCode   string      `json:"ErrorCode"`
	Amount      int64       `json:"Amount"`
	RebillID    json.Number `json:"RebillId,omitempty"`
	Token       string      `json:"Token,omitempty"`
}

// tbankHook is notice n of the endpoint's terminal, successful, with its
// Token under the terminal password.
func (tr *trigger) tbankHook(n tbankNotice) (hook, error) {
	n.TerminalKey, n.Success, n.ErrorCode, n.Token = tr.terminalKey, true, "0", ""
	unsigned, err := json.Marshal(n)
	if err != nil {
		return hook{}, fmt.Errorf("encoding the notification: %w", err)
	}
	if n.Token, err = tbank.Token(unsigned, tr.secret); err != nil {
		return hook{}, fmt.Errorf("signing the notification: %w", err)
	}
	body, err := json.Marshal(n)
	if err != nil {
		return hook{}, fmt.Errorf("encoding the notification: %w", err)
	}
	what := fmt.Sprintf("%s of payment %s (OrderId %s, %d kopecks)", n.Status, n.PaymentID, n.OrderID, n.Amount)
	if n.RebillID != "" {
		what += ", RebillId " + string(n.RebillID)
	}
	return hook{what: what, req: func(ctx context.Context) (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, tr.url, bytes.NewReader(body))
		if err == nil {
			req.Header.Set("Content-Type", "application/json")
		}
		return req, err
	}}, nil
}

func (tr *trigger) sendAll(ctx context.Context, p payment) error {
	for _, h := range p.hooks {
		if err := tr.send(ctx, h); err != nil {
			return err
		}
	}
	return nil
}

// send POSTs h once and prints what it sent and the answer. An answer
// that is not 2xx ends the scenario: what follows would wait for nothing.
func (tr *trigger) send(ctx context.Context, h hook) error {
	req, err := h.req(ctx)
	if err != nil {
		return fmt.Errorf("building the request: %w", err)
	}
	line, ok := postOnce(tr.http, req)
	_, _ = fmt.Fprintf(tr.out, "sent %s: %s\n", h.what, line)
	if !ok {
		return fmt.Errorf("the endpoint did not store the webhook (%s): check --url, the secret, --org, --environment and, for tbank, --terminal-key", line)
	}
	return nil
}

// waitOrder waits until order id is in state, or fails saying where it is.
func (tr *trigger) waitOrder(ctx context.Context, client fulfillmentv1.FulfillmentServiceClient, id, state string) error {
	last := ""
	err := tr.wait(ctx, "order "+id+" is "+state, func() (bool, error) {
		o, err := client.GetOrder(ctx, &fulfillmentv1.GetOrderRequest{OrderId: id})
		last = o.GetOrder().GetState()
		return last == state, err
	})
	if err != nil && last != "" {
		return fmt.Errorf("%w (it is %s: see fulfillctl orders get %s)", err, last, id)
	}
	return err
}

// wait polls done until it holds (it prints that what holds), fails, or
// --timeout passes.
func (tr *trigger) wait(ctx context.Context, what string, done func() (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, tr.timeout)
	defer cancel()
	for {
		ok, err := done()
		switch {
		case ok:
			_, _ = fmt.Fprintln(tr.out, what)
			return nil
		case err != nil && ctx.Err() == nil:
			return err
		case ctx.Err() != nil:
			return fmt.Errorf("still not so after %s: %s; raise --timeout, or check that the service processes its inbox", tr.timeout, what)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// randomHex is n random bytes in hexadecimal.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%x", b)
}

// randomDigits is a random number of n digits (no leading zero), as the
// bank writes its ids.
func randomDigits(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		lo := int64(0)
		if i == 0 {
			lo = 1
		}
		d, _ := rand.Int(rand.Reader, big.NewInt(10-lo))
		b.WriteByte(byte('0' + lo + d.Int64()))
	}
	return b.String()
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
