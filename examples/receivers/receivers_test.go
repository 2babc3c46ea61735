package receivers_test

// The receiver examples, each run as it would be (a child process, its own
// interpreter, a loopback port), against what the service really sends: an
// order with an external line is paid through the webhook gateway, and the
// service's outbox dispatcher delivers the fulfillment request and the
// order.fulfilled event to the example. Then the same signer the dispatcher
// uses (outbox.Sender) replays, forges and delays deliveries, and the test
// counts what the example handled.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/outbox"
	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The examples: how to run each, and the Debian package of its interpreter.
var examples = []struct {
	name, interpreter, debian, script string
}{
	{name: "python", interpreter: "python3", debian: "python3", script: "python/receiver.py"},
	{name: "node", interpreter: "node", debian: "nodejs", script: "node/receiver.mjs"},
}

// The secrets: the example's, and one it does not know.
const (
	exampleSecret = "whsec_c2lnbmluZyBzZWNyZXQgb2YgdGhlIGV4YW1wbGUgcmVjZWl2ZXI="
	otherSecret   = "whsec_YW5vdGhlciBzZWNyZXQsIHVua25vd24gdG8gdGhlIHJlY2VpdmVy"
)

// The service's side.
const (
	orgA        = "org_a"
	orgAToken   = "tok-org-a-0123456789abcdef"
	yolfiSecret = "ywhsec_live_0123456789abcdef"
	yolfiEP     = "yolfi-live"
	destID      = "example"
)

func TestReceiverExamples(t *testing.T) {
	t.Parallel()
	for _, ex := range examples {
		t.Run(ex.name, func(t *testing.T) {
			t.Parallel()
			interpreter := lookInterpreter(t, ex.interpreter, ex.debian)
			r := startExample(t, interpreter, ex.script)
			s := startService(t, r.url+"/webhooks")
			checkExample(t, r, s)
		})
	}
}

func checkExample(t *testing.T, r *example, s *service) {
	// A real delivery: the service fulfils an order with an external line.
	order := s.createExternalOrder(t, "receiver-1")
	s.pay(t, "receiver-1")
	lineKey := fulfillment.LineKey(order.GetId(), 1)
	fulfilledKey := fulfillment.EventKey(order.GetId(), fulfillment.TopicOrderFulfilled)
	r.waitFor(t, "handled "+lineKey+" "+string(fulfillment.TopicFulfillmentRequested))
	r.waitFor(t, "handled "+fulfilledKey+" "+string(fulfillment.TopicOrderFulfilled))
	// The receiver prints before it answers, and the service records the
	// answer after: wait for the record.
	for _, key := range []string{lineKey, fulfilledKey} {
		deadline := time.Now().Add(10 * time.Second)
		st, attempts := s.message(t, key)
		for st != "delivered" && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
			st, attempts = s.message(t, key)
		}
		if st != "delivered" || attempts != 1 {
			t.Errorf("message %s: %s after %d attempts, want delivered at the first", key, st, attempts)
		}
	}
	payload := s.payload(t, lineKey)

	sender := outbox.NewSender()
	dest := outbox.Destination{ID: destID, URL: r.url + "/webhooks", Secrets: []stdwebhooks.Secret{secret(t, exampleSecret)},
		Idempotent: true, Timeout: 5 * time.Second}
	send := func(s *outbox.Sender, d outbox.Destination, key string, body []byte) outbox.Result {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		return s.Send(ctx, d, outbox.Message{Key: key, Payload: body})
	}

	// The same message again (a redelivery): acknowledged, not handled again.
	if res := send(sender, dest, lineKey, payload); res.Verdict != outbox.Delivered {
		t.Errorf("replay of %s: %s (%s), want delivered", lineKey, res.Verdict, res.Reason)
	}
	r.waitFor(t, "duplicate "+lineKey)

	// Signed with the old and the new secret, as during a rotation: the
	// example knows only one of them.
	rotated := dest
	rotated.Secrets = []stdwebhooks.Secret{secret(t, otherSecret), secret(t, exampleSecret)}
	if res := send(sender, rotated, "rotated", payload); res.Verdict != outbox.Delivered {
		t.Errorf("two signatures, one under the example's secret: %s (%s), want delivered", res.Verdict, res.Reason)
	}

	// Refused, each under a webhook-id never handled, so that a wrongly
	// accepted one would show as handled.
	wrong := dest
	wrong.Secrets = []stdwebhooks.Secret{secret(t, otherSecret)}
	if res := send(sender, wrong, "wrong-secret", payload); res.Status != http.StatusUnauthorized {
		t.Errorf("signed under another secret: %s, want HTTP 401", res.Reason)
	}
	for name, shift := range map[string]time.Duration{"stale": -6 * time.Minute, "early": 6 * time.Minute} {
		skewed := outbox.NewSender(outbox.WithClock(func() time.Time { return time.Now().Add(shift) }))
		if res := send(skewed, dest, name, payload); res.Status != http.StatusUnauthorized {
			t.Errorf("webhook-timestamp %s from now: %s, want HTTP 401", shift, res.Reason)
		}
	}
	// Within the tolerance, a little behind: accepted.
	late := outbox.NewSender(outbox.WithClock(func() time.Time { return time.Now().Add(-4 * time.Minute) }))
	if res := send(late, dest, "late", payload); res.Verdict != outbox.Delivered {
		t.Errorf("webhook-timestamp 4m ago: %s, want delivered", res.Reason)
	}
	if res := send(sender, dest, "not-json", []byte("fulfil it, please")); res.Status != http.StatusBadRequest {
		t.Errorf("signed body that is not JSON: %s, want HTTP 400", res.Reason)
	}

	tampered := bytes.Clone(payload)
	i := bytes.Index(tampered, []byte(`"quantity": 1`)) + len(`"quantity": `)
	if i < len(`"quantity": `) {
		t.Fatalf("no quantity in the payload: %s", payload)
	}
	tampered[i] = '9' // ten licenses instead of one
	signed := stdwebhooks.Headers("tampered", time.Now(), payload, secret(t, exampleSecret))
	if got := r.post(t, http.MethodPost, signed, tampered); got != http.StatusUnauthorized {
		t.Errorf("body changed after signing: HTTP %d, want 401", got)
	}
	for _, name := range []string{stdwebhooks.HeaderID, stdwebhooks.HeaderTimestamp, stdwebhooks.HeaderSignature} {
		h := stdwebhooks.Headers("missing-header", time.Now(), payload, secret(t, exampleSecret))
		h.Del(name)
		if got := r.post(t, http.MethodPost, h, payload); got != http.StatusBadRequest {
			t.Errorf("no %s header: HTTP %d, want 400", name, got)
		}
	}
	badTime := stdwebhooks.Headers("bad-timestamp", time.Now(), payload, secret(t, exampleSecret))
	badTime.Set(stdwebhooks.HeaderTimestamp, "soon")
	if got := r.post(t, http.MethodPost, badTime, payload); got != http.StatusBadRequest {
		t.Errorf("webhook-timestamp not a number: HTTP %d, want 400", got)
	}
	if got := r.post(t, http.MethodGet, signed, nil); got != http.StatusMethodNotAllowed {
		t.Errorf("GET: HTTP %d, want 405", got)
	}

	// A last message: once it is handled, every line the example printed
	// for the requests before it has been read.
	if res := send(sender, dest, "last", payload); res.Verdict != outbox.Delivered {
		t.Errorf("last message: %s (%s), want delivered", res.Verdict, res.Reason)
	}
	r.waitFor(t, "handled last "+string(fulfillment.TopicFulfillmentRequested))
	want := []string{lineKey, fulfilledKey, "rotated", "late", "last"}
	if got := r.handled(); !slices.Equal(got, want) {
		t.Errorf("handled %q, want each of %q once, in that order", got, want)
	}

	// Never the body or the secret in what it printed.
	out := r.output()
	for _, leak := range []string{exampleSecret, strings.TrimPrefix(exampleSecret, stdwebhooks.SecretPrefix), order.GetMerchantOrderId(), `"sku"`, "fulfil it"} {
		if strings.Contains(out, leak) {
			t.Errorf("the example printed %q:\n%s", leak, out)
		}
	}
}

// lookInterpreter returns the path of an example's interpreter. Without it
// the test is skipped, or fails in CI (.ci/run installs it).
func lookInterpreter(t *testing.T, name, debian string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	switch {
	case err == nil:
		return path
	case os.Getenv("CI") != "":
		t.Fatalf("%s not found: CI must install it (Debian package %s; see .ci/run)", name, debian)
	default:
		t.Skipf("%s not found, so this example is not tested: install it (Debian: apt-get install %s)", name, debian)
	}
	return ""
}

func secret(t *testing.T, text string) stdwebhooks.Secret {
	t.Helper()
	s, err := stdwebhooks.ParseSecret(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// example is a running receiver example and what it printed.
type example struct {
	url string

	mu     sync.Mutex
	stdout []string // lines
	stderr bytes.Buffer
	lines  chan struct{} // signalled on every stdout line
}

// startExample runs script with interpreter on a free loopback port until
// the test ends.
func startExample(t *testing.T, interpreter, script string) *example {
	t.Helper()
	cmd := exec.Command(interpreter, script)
	cmd.Env = append(os.Environ(), "WEBHOOK_SECRET="+exampleSecret, "BIND_ADDRESS=127.0.0.1", "PORT=0")
	r := &example{lines: make(chan struct{}, 1)}
	cmd.Stderr = writerFunc(func(p []byte) (int, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.stderr.Write(p)
	})
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.mu.Lock()
			r.stdout = append(r.stdout, sc.Text())
			r.mu.Unlock()
			select {
			case r.lines <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s printed:\n%s", script, r.output())
		}
	})
	first := r.waitFor(t, "listening on http://127.0.0.1:")
	r.url = strings.TrimPrefix(first, "listening on ")
	return r
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// waitFor returns the first line of stdout that starts with prefix, waiting
// up to 30s for it.
func (r *example) waitFor(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		for _, l := range r.stdout {
			if strings.HasPrefix(l, prefix) {
				r.mu.Unlock()
				return l
			}
		}
		r.mu.Unlock()
		select {
		case <-r.lines:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatalf("the example did not print %q within 30s; it printed:\n%s", prefix, r.output())
		}
	}
}

// handled returns the webhook-ids of the "handled" lines, in order.
func (r *example) handled() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for _, l := range r.stdout {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "handled" {
			ids = append(ids, f[1])
		}
	}
	return ids
}

func (r *example) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return "stdout:\n" + strings.Join(r.stdout, "\n") + "\nstderr:\n" + r.stderr.String()
}

// post sends a request of ours to the example and returns the status.
func (r *example) post(t *testing.T, method string, h http.Header, body []byte) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.url+"/webhooks", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s to the example: %v", method, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// service is the fulfillment service, in this process, on its own database.
type service struct {
	ingestURL string
	client    fulfillmentv1.FulfillmentServiceClient
	db        *pgxpool.Pool
}

// startService runs the service with one destination, the example at url,
// which receives the fulfillment requests of external lines and
// order.fulfilled.
func startService(t *testing.T, url string) *service {
	t.Helper()
	dbURL := pgtest.DB(t)
	idempotent := true
	cfg := &config.Config{
		Listen:   config.Listen{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", Ingest: "127.0.0.1:0"},
		Database: config.Database{URL: dbURL, MaxConns: 10, ConnectTimeout: 2 * time.Second},
		Log:      config.Log{Level: "info"},
		Auth: config.Auth{Tokens: []config.Token{{Name: "org-a", Secret: orgAToken,
			Scopes: []string{config.ScopeOrdersRead, config.ScopeOrdersWrite}, Orgs: []string{orgA}}}},
		Endpoints: []config.Endpoint{{ID: yolfiEP, Provider: "yolfi", Org: orgA, Environment: "live",
			Secrets: []config.Secret{{Value: []byte(yolfiSecret)}}}},
		Ingest: config.Ingest{MaxBodyBytes: 256 << 10, Timeout: 2 * time.Second},
		Inbox: config.Inbox{Queue: config.Queue{Workers: 2, Batch: 8, Lease: 5 * time.Second, Poll: 50 * time.Millisecond,
			MaxAttempts: 5, BaseBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}},
		Destinations: []config.Destination{config.Destination{
			ID: destID, URL: url, Idempotent: &idempotent, Timeout: 5 * time.Second,
			Events: []string{string(fulfillment.TopicOrderFulfilled)}, Keys: []stdwebhooks.Secret{secret(t, exampleSecret)},
		}.WithDefaults()},
		Outbox: config.Queue{Lease: 5 * time.Second, Poll: 50 * time.Millisecond,
			BaseBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond},
	}
	ctx, cancel := context.WithCancel(context.Background())
	a, err := app.New(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service stopped with error: %v", err)
		}
	})
	<-a.Ready()
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
	return &service{ingestURL: "http://" + a.IngestAddr(), client: fulfillmentv1.NewFulfillmentServiceClient(conn), db: db}
}

// createExternalOrder creates an order of org_a: one license, and one
// external line fulfilled by the example.
func (s *service) createExternalOrder(t *testing.T, merchantOrderID string) *fulfillmentv1.Order {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+orgAToken)
	price := &fulfillmentv1.Money{Currency: "USD", MinorUnits: 1250}
	resp, err := s.client.CreateOrder(ctx, &fulfillmentv1.CreateOrderRequest{
		OrgId: orgA, Environment: "live", MerchantOrderId: merchantOrderID,
		Lines: []*fulfillmentv1.OrderLine{
			{Sku: "pro-license", Kind: "license", Quantity: 1, UnitPrice: price},
			{Sku: "boxed-edition", Kind: "external", Quantity: 1, UnitPrice: price, Destination: destID},
		},
		Settlement: &fulfillmentv1.Settlement{Token: "USDT", Network: "TRON", Amount: "25.000000"},
	})
	if err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	return resp.GetOrder()
}

// pay posts the provider's signed confirmation of the order's payment to
// the webhook gateway.
func (s *service) pay(t *testing.T, merchantOrderID string) {
	t.Helper()
	live := true
	p := yolfi.Payload{
		ID: yolfi.NewID("evt_"), Type: yolfi.TypePaymentConfirmed, Livemode: &live, OrgID: orgA,
		CreatedAt: time.Now().UTC().Format(time.RFC3339),
		Data: yolfi.PayloadData{InvoiceID: "inv_" + merchantOrderID, PaymentID: "pay_" + merchantOrderID,
			MerchantOrderID: merchantOrderID, Amount: "25.000000", Token: "USDT", Network: "TRON", TxHash: "0xabc"},
	}
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	req, err := yolfi.NewRequest(t.Context(), s.ingestURL+"/webhooks/"+yolfiEP, []byte(yolfiSecret), body, p.ID)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("posting the payment: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("payment webhook: HTTP %d, want 200", resp.StatusCode)
	}
}

// message returns the state and the number of attempts of the outbox
// message under key.
func (s *service) message(t *testing.T, key string) (state string, attempts int) {
	t.Helper()
	err := s.db.QueryRow(t.Context(), `SELECT m.state, (SELECT count(*) FROM outbox_attempts a WHERE a.message_id = m.id)
		FROM outbox_messages m WHERE m.idempotency_key = $1`, key).Scan(&state, &attempts)
	if err != nil {
		t.Fatalf("outbox message %s: %v", key, err)
	}
	return state, attempts
}

// payload returns the body the service sent as the message under key.
func (s *service) payload(t *testing.T, key string) []byte {
	t.Helper()
	var body []byte
	if err := s.db.QueryRow(t.Context(), `SELECT payload::text FROM outbox_messages WHERE idempotency_key = $1`, key).Scan(&body); err != nil {
		t.Fatalf("payload of %s: %v", key, err)
	}
	return body
}
