package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// webhookTimeout bounds each delivery of webhook send.
const webhookTimeout = 10 * time.Second

// createdAtLayout is the createdAt of an event sent without --created-at:
// RFC 3339 in UTC, to the millisecond.
const createdAtLayout = "2006-01-02T15:04:05.000Z07:00"

// maxShownResponse is how much of a response body webhook send prints.
const maxShownResponse = 200

func newWebhookCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "Build, sign and send provider webhooks (development and tests)",
	}
	cmd.AddCommand(newWebhookSendCmd())
	return cmd
}

// webhookSend holds the flags of webhook send.
type webhookSend struct {
	url, secretEnv, secretFile                   string
	eventType, eventID, org                      string
	merchantOrderID, checkoutSessionID           string
	subscriptionID, customerRef, createdAt       string
	invoiceID, paymentID, amount, token, network string
	livemode, test, print                        bool
	repeat                                       int
}

func newWebhookSendCmd() *cobra.Command {
	var s webhookSend
	cmd := &cobra.Command{
		Use:   "send --url URL (--secret-env NAME | --secret-file PATH) [flags]",
		Short: "Send a signed Yolfi webhook event, as Yolfi sends it, to a webhook endpoint",
		Long: `Send plays Yolfi towards an endpoint of provider yolfi: it builds a webhook
event as Yolfi sends it (its own JSON format, which such an endpoint reads),
signs it with the endpoint's signing secret (X-Yolfi-Signature) and POSTs
it, printing one line per send: the HTTP status and the start of the
response body. It exits non-zero when any response is not 2xx.

Ids left unset are generated: the event id (evt_…, or evt_test_… with --test),
the invoice id (inv_…) and, for payment.confirmed, the payment id (pay_…).
Pass an empty value (--invoice-id "") to leave a field out.

--repeat sends the very same signed bytes several times, as a provider's
redelivery does: the service must store one event and act once.`,
		Example: `  fulfillctl webhook send --url http://127.0.0.1:8081/webhooks/yolfi-test \
    --secret-file .data/dev/yolfi-test.secret --test --org org_demo \
    --merchant-order-id demo-1 --amount 25.000000 --repeat 2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return s.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&s.url, "url", "", "webhook endpoint URL, e.g. http://127.0.0.1:8081/webhooks/yolfi-test (required unless --print)")
	f.StringVar(&s.secretEnv, "secret-env", "", "environment variable holding the endpoint's signing secret")
	f.StringVar(&s.secretFile, "secret-file", "", "file holding the endpoint's signing secret")
	f.StringVar(&s.eventType, "type", yolfi.TypePaymentConfirmed, "event type: invoice.created, payment.confirmed, invoice.overdue, invoice.cancelled, subscription.overdue, subscription.cancelled")
	f.StringVar(&s.eventID, "event-id", "", "signed event id (default: generated evt_…, or evt_test_… with --test)")
	f.StringVar(&s.org, "org", "", "orgId of the event (default: left out)")
	f.StringVar(&s.merchantOrderID, "merchant-order-id", "", "data.merchantOrderId")
	f.StringVar(&s.checkoutSessionID, "checkout-session-id", "", "data.checkoutSessionId")
	f.StringVar(&s.subscriptionID, "subscription-id", "", "data.subscriptionId: the subscription a payment renews or a subscription.* event concerns")
	f.StringVar(&s.customerRef, "customer-ref", "", "data.customer.clientReferenceId")
	f.StringVar(&s.createdAt, "created-at", "", "createdAt, RFC 3339 (default: now)")
	f.StringVar(&s.invoiceID, "invoice-id", "", "data.invoiceId (default: generated inv_…)")
	f.StringVar(&s.paymentID, "payment-id", "", "data.paymentId (default: generated pay_… for payment.confirmed)")
	f.StringVar(&s.amount, "amount", "", "data.amount the merchant receives in --token units, e.g. 25.000000 (required for payment.confirmed)")
	f.StringVar(&s.token, "token", "USDT", "data.token")
	f.StringVar(&s.network, "network", "TRON", "data.network")
	f.BoolVar(&s.livemode, "livemode", true, "livemode of the event")
	f.BoolVar(&s.test, "test", false, "send a test event: livemode false (unless --livemode is given) and an evt_test_ event id")
	f.BoolVar(&s.print, "print", false, "print the JSON body and its signature instead of sending")
	f.IntVar(&s.repeat, "repeat", 1, "send the same signed bytes this many times")
	cmd.MarkFlagsMutuallyExclusive("secret-env", "secret-file")
	cmd.MarkFlagsOneRequired("secret-env", "secret-file")
	return cmd
}

func (s *webhookSend) run(cmd *cobra.Command) error {
	secret, err := s.secret()
	if err != nil {
		return err
	}
	if !s.print {
		if err := checkWebhookURL(s.url); err != nil {
			return err
		}
	}
	if s.repeat < 1 {
		return errors.New("--repeat must be at least 1")
	}
	p, err := s.payload(cmd)
	if err != nil {
		return err
	}
	body, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("encoding the event: %w", err)
	}

	out := cmd.OutOrStdout()
	if s.print {
		_, _ = fmt.Fprintln(out, string(body))
		_, _ = fmt.Fprintf(out, "%s: %s\n", yolfi.SignatureHeader, yolfi.Sign(secret, body))
		if p.ID != "" {
			_, _ = fmt.Fprintf(out, "%s: %s\n", yolfi.EventIDHeader, p.ID)
		}
		return nil
	}

	_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "sending %s %s to %s\n", p.Type, p.ID, s.url)
	client := &http.Client{Timeout: webhookTimeout}
	failed := 0
	for i := 0; i < s.repeat; i++ {
		if err := cmd.Context().Err(); err != nil {
			return err
		}
		line, ok := deliver(cmd, client, s.url, secret, body, p.ID)
		_, _ = fmt.Fprintln(out, line)
		if !ok {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("deliveries not answered with 2xx: %d of %d", failed, s.repeat)
	}
	return nil
}

// secret reads the signing secret from --secret-env or --secret-file.
func (s *webhookSend) secret() ([]byte, error) { return readSecret(s.secretEnv, s.secretFile) }

// readSecret reads a signing secret from the environment variable env, or
// else from file (trimmed, as the service reads secret_file). Errors name
// the flag, never the secret.
func readSecret(env, file string) ([]byte, error) {
	if env != "" {
		v := os.Getenv(env)
		if v == "" {
			return nil, fmt.Errorf("--secret-env: environment variable %s is not set", env)
		}
		return []byte(v), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("--secret-file: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return nil, fmt.Errorf("--secret-file: %s is empty", file)
	}
	return []byte(v), nil
}

func checkWebhookURL(raw string) error {
	if raw == "" {
		return errors.New("--url is required, e.g. --url http://127.0.0.1:8081/webhooks/yolfi-test")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--url %q must be an http:// or https:// URL", raw)
	}
	return nil
}

// payload builds the event from the flags, generating the ids left unset.
func (s *webhookSend) payload(cmd *cobra.Command) (yolfi.Payload, error) {
	changed := cmd.Flags().Changed
	if s.eventType == "" {
		return yolfi.Payload{}, errors.New("--type must not be empty")
	}
	confirmed := s.eventType == yolfi.TypePaymentConfirmed
	if confirmed && s.amount == "" {
		return yolfi.Payload{}, errors.New("--amount is required for payment.confirmed, e.g. --amount 25.000000")
	}
	livemode := s.livemode
	if s.test && !changed("livemode") {
		livemode = false
	}
	id := s.eventID
	if !changed("event-id") {
		prefix := "evt_"
		if s.test {
			prefix = yolfi.TestEventIDPrefix
		}
		id = yolfi.NewID(prefix)
	}
	invoiceID := s.invoiceID
	if !changed("invoice-id") && !strings.HasPrefix(s.eventType, "subscription.") {
		invoiceID = yolfi.NewID("inv_")
	}
	// Milliseconds, not whole seconds: events sent one after another (a
	// renewal, then the cancellation) keep their order in the rules, which
	// take a charge announced in the second of a cancellation for one made
	// after it.
	createdAt := time.Now().UTC().Format(createdAtLayout)
	if changed("created-at") {
		t, err := time.Parse(time.RFC3339, s.createdAt)
		if err != nil {
			return yolfi.Payload{}, errors.New(`--created-at must be an RFC 3339 time such as "2026-11-29T10:15:30Z"`)
		}
		createdAt = t.UTC().Format(time.RFC3339Nano)
	}
	var customer *yolfi.PayloadCustomer
	if s.customerRef != "" {
		customer = &yolfi.PayloadCustomer{ClientReferenceID: s.customerRef}
	}
	paymentID := s.paymentID
	if !changed("payment-id") && confirmed {
		paymentID = yolfi.NewID("pay_")
	}
	return yolfi.Payload{
		ID:        id,
		Type:      s.eventType,
		Livemode:  &livemode,
		OrgID:     s.org,
		CreatedAt: createdAt,
		Data: yolfi.PayloadData{
			InvoiceID:         invoiceID,
			PaymentID:         paymentID,
			CheckoutSessionID: s.checkoutSessionID,
			MerchantOrderID:   s.merchantOrderID,
			SubscriptionID:    s.subscriptionID,
			Customer:          customer,
			Amount:            s.amount,
			Token:             s.token,
			Network:           s.network,
		},
	}, nil
}

// deliver POSTs the signed body once and describes the answer in one line.
func deliver(cmd *cobra.Command, client *http.Client, target string, secret, body []byte, eventID string) (string, bool) {
	req, err := yolfi.NewRequest(cmd.Context(), target, secret, body, eventID)
	if err != nil {
		return "error: " + err.Error(), false
	}
	return postOnce(client, req)
}

// postOnce sends req and describes the answer in one line: its status and the
// start of its body. ok is a 2xx answer.
func postOnce(client *http.Client, req *http.Request) (line string, ok bool) {
	resp, err := client.Do(req)
	if err != nil {
		return "error: " + err.Error(), false
	}
	defer func() { _ = resp.Body.Close() }()
	shown, _ := io.ReadAll(io.LimitReader(resp.Body, maxShownResponse))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // let the connection be reused
	text := strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, string(shown)))
	ok = resp.StatusCode >= 200 && resp.StatusCode < 300
	return strings.TrimSpace(fmt.Sprintf("HTTP %d %s", resp.StatusCode, text)), ok
}
