package e2e_test

// The metrics of issue 21, scraped from a running service after real work:
// per-call gRPC metrics, per-request HTTP metrics of both listeners (by
// route pattern), the status poller's, the subscription sweeper's and the
// housekeeper's, and undelivered outbox messages by destination. Each
// series is named with its labels, and its value checked against the work
// done or the database.

import (
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

const obsPlan = "obs-daily"

func TestMetricsOfEveryCallAndQueue(t *testing.T) {
	t.Parallel()
	started := time.Now()
	crm := startReceiver(t, true, nil)
	erp := startReceiver(t, true, func(string, int) receiver.Action { return receiver.Action{Status: http.StatusServiceUnavailable} })
	noGrace := time.Duration(0)
	s := startTBank(t, fakebank.Options{Misbehaviour: fakebank.Misbehaviour{Hold: true}}, func(c *config.Config) {
		erpDest := destination(t, "erp", erp, true, 5*time.Second, "order.fulfilled")
		erpDest.MaxAttempts = 100000 // its messages stay pending
		withDestinations(destination(t, "crm", crm, true, 5*time.Second, "order.fulfilled"), erpDest)(c)
		c.StatusPoll = config.StatusPoll{After: time.Millisecond,
			Queue: config.Queue{Poll: 20 * time.Millisecond, BaseBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}}
		c.Plans = []config.Plan{{ID: obsPlan, Days: 1, Grace: &noGrace}}
		c.SubscriptionSweep = config.Queue{Poll: 20 * time.Millisecond}
		c.Housekeeping = config.Housekeeping{Interval: time.Second, RawBodyRetention: time.Millisecond}
		c.HTTP.MaxBodyBytes = 4 << 10
	})

	// Webhooks: a paid order (delivered to crm, pending for erp), paid
	// twice (an extra_payment item), and the first payment of a daily
	// subscription ten days ago, whose access the sweeper ends.
	order := s.createOrder(t, "live", "obs-all")
	s.pay(t, "obs-all")
	s.sendOK(t, event(yolfi.TypePaymentConfirmed, "obs-all", "inv_second"))
	if _, err := s.client.CreateOrder(authed(orgAToken), &fulfillmentv1.CreateOrderRequest{
		OrgId: orgA, Environment: "live", MerchantOrderId: "obs-sub",
		Lines: []*fulfillmentv1.OrderLine{{Sku: "pro", Kind: "subscription", Quantity: 1,
			UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 2500}, AccountRef: "user_obs", PlanId: obsPlan}},
		Settlement: &fulfillmentv1.Settlement{Token: "USDT", Network: "TRON", Amount: "25.000000", Tolerance: "0.5"},
	}); err != nil {
		t.Fatal(err)
	}
	sub := event(yolfi.TypePaymentConfirmed, "obs-sub", "inv_obs-sub")
	sub.Data.SubscriptionID = "sub_obs"
	sub.CreatedAt = time.Now().AddDate(0, 0, -10).UTC().Format(time.RFC3339)
	s.sendOK(t, sub)
	// A payment at the bank, whose outcome the poller learns (the bank
	// holds its notifications).
	rub := s.createRUBOrder(t, "obs-poll")
	p, err := s.startPayment(rub.GetId(), tbankFail, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.bank.Pay(p.GetPaymentId()); err != nil {
		t.Fatal(err)
	}
	s.settle(t)
	waitFor(t, "the polled payment fulfilled", func() bool { return s.effects(t, rub.GetId()).State == "fulfilled" })
	waitFor(t, "the subscription's access ended", func() bool {
		return s.count(t, "SELECT count(*) FROM subscriptions WHERE access_ended_at IS NOT NULL") == 1
	})
	waitFor(t, "every order.fulfilled delivered to crm, and tried at erp", func() bool {
		return s.count(t, "SELECT count(*) FROM outbox_messages WHERE destination_id = 'crm' AND state <> 'delivered'") == 0 &&
			s.count(t, "SELECT count(*) FROM outbox_work WHERE destination_id = 'erp' AND attempts = 0") == 0
	})
	// erp's messages stay pending: it answers 503, and has retries enough.
	erpPending := float64(s.count(t, "SELECT count(*) FROM outbox_messages WHERE destination_id = 'erp' AND state = 'pending'"))
	if erpPending < 3 {
		t.Fatalf("erp has %v pending messages, want each order's order.fulfilled", erpPending)
	}

	// The calls counted: from here on, exactly these.
	before := scrape(t, s.restURL)
	const grpcCalls, restCalls = 2, 3
	for range grpcCalls {
		if _, err := s.client.GetOrder(authed(orgAToken), &fulfillmentv1.GetOrderRequest{OrderId: order.GetId()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.client.GetOrder(context.Background(), &fulfillmentv1.GetOrderRequest{OrderId: order.GetId()}); err == nil {
		t.Fatal("GetOrder without a token succeeded")
	}
	for range restCalls {
		get(t, s.restURL+"/v1/orders/"+order.GetId(), orgAToken, http.StatusOK)
	}
	get(t, s.restURL+"/v1/orders/"+order.GetId(), "", http.StatusUnauthorized) // refused before routing
	get(t, s.restURL+"/v1/no-such-thing/"+order.GetId(), orgAToken, http.StatusNotFound)
	// A body over http.max_body_bytes is refused unread, its connection
	// taken over (hijacked) to linger: still answered, and counted.
	big, err := http.NewRequest(http.MethodPost, s.restURL+"/v1/orders", strings.NewReader(strings.Repeat("x", 8<<10)))
	if err != nil {
		t.Fatal(err)
	}
	big.Header.Set("Authorization", "Bearer "+orgAToken)
	if resp, err := http.DefaultClient.Do(big); err != nil {
		t.Fatal(err)
	} else {
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("POST of 8 KiB = %d, want 413", resp.StatusCode)
		}
	}
	get(t, s.restURL+"/no-such-page/"+order.GetId(), "", http.StatusNotFound)
	get(t, s.restURL+"/console/login", "", http.StatusOK)
	get(t, s.restURL+"/console/orders/"+order.GetId(), "", http.StatusSeeOther) // no session: to the sign-in page
	resp, err := http.Post(s.ingestURL+"/no-such-hook/"+order.GetId(), "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("POST to an unknown ingest path = %d", resp.StatusCode)
	}

	// Housekeeping purged the raw body of every event (none is pending),
	// and its counter says how many.
	var after metrics
	waitFor(t, "every raw body purged and counted", func() bool {
		purged := s.count(t, "SELECT count(*) FROM inbox_events WHERE raw_body_purged_at IS NOT NULL")
		after = scrape(t, s.restURL)
		return purged == s.count(t, "SELECT count(*) FROM inbox_events") &&
			after.value(t, "fulfillment_housekeeping_rows_total", "task", "raw_body_purge") == float64(purged) &&
			after.value(t, "fulfillment_housekeeping_runs_total", "task", "fulfillment_sla", "outcome", "ok") >= 1
	})
	events := float64(s.count(t, "SELECT count(*) FROM inbox_events"))
	t.Logf("%v of work; %v events purged", time.Since(started).Round(time.Millisecond), events)

	getOrder := []string{"grpc_service", "fulfillment.v1.FulfillmentService", "grpc_method", "GetOrder", "grpc_type", "unary"}
	orderRoute := []string{"listener", "http", "route", "/v1/orders/{order_id}", "method", "get"}
	webhookRoute := []string{"listener", "ingest", "route", "/webhooks/{endpoint_id}", "method", "post"}
	accepted := after.sum(t, "fulfillment_webhook_requests_total", "outcome", "accepted")
	now := float64(time.Now().Unix()) + 1
	for _, c := range []struct {
		name   string
		labels []string
		delta  bool // the value since the calls began; else the value
		min    float64
		max    float64
	}{
		// gRPC: the REST calls reach GetOrder in-process, and count too.
		{"grpc_server_started_total", getOrder, true, grpcCalls + restCalls + 1, grpcCalls + restCalls + 1},
		{"grpc_server_handled_total", append(getOrder, "grpc_code", "OK"), true, grpcCalls + restCalls, grpcCalls + restCalls},
		{"grpc_server_handled_total", append(getOrder, "grpc_code", "Unauthenticated"), true, 1, 1},
		{"grpc_server_handling_seconds_count", getOrder, true, grpcCalls + restCalls + 1, grpcCalls + restCalls + 1},
		{"grpc_server_msg_received_total", getOrder, true, grpcCalls + restCalls + 1, grpcCalls + restCalls + 1},
		{"grpc_server_msg_sent_total", getOrder, true, grpcCalls + restCalls, grpcCalls + restCalls}, // none to the refused call
		{"grpc_server_handled_total", []string{"grpc_method", "CreateOrder", "grpc_code", "OK"}, false, 3, 3},
		{"grpc_server_handled_total", []string{"grpc_method", "StartPayment", "grpc_code", "OK"}, false, 1, 1},

		// HTTP, by route pattern: never a path.
		{"fulfillment_http_requests_total", append(orderRoute, "code", "200"), true, restCalls, restCalls},
		{"fulfillment_http_request_duration_seconds_count", orderRoute, true, restCalls, restCalls},
		{"fulfillment_http_requests_total", []string{"listener", "http", "route", "/v1/", "method", "get", "code", "401"}, true, 1, 1},
		{"fulfillment_http_requests_total", []string{"listener", "http", "route", "/v1/", "method", "get", "code", "404"}, true, 1, 1},
		{"fulfillment_http_requests_total", []string{"listener", "http", "route", "/v1/", "method", "post", "code", "413"}, true, 1, 1},
		{"fulfillment_http_requests_total", []string{"listener", "http", "route", "unmatched", "method", "get", "code", "404"}, true, 1, 1},
		{"fulfillment_http_requests_total", []string{"listener", "http", "route", "/console/login", "method", "get", "code", "200"}, true, 1, 1},
		{"fulfillment_http_requests_total", []string{"listener", "http", "route", "/console/orders/{id}", "method", "get", "code", "303"}, true, 1, 1},
		{"fulfillment_http_request_duration_seconds_count", []string{"listener", "http", "route", "/console/login", "method", "get"}, true, 1, 1},
		{"fulfillment_http_requests_total", []string{"listener", "http", "route", "/metrics", "method", "get", "code", "200"}, true, 1, 1000},
		{"fulfillment_http_requests_total", append(webhookRoute, "code", "200"), false, accepted, accepted},
		{"fulfillment_http_requests_total", append(webhookRoute, "code", "200"), false, 3, 3}, // the order's two, the subscription's
		{"fulfillment_http_request_duration_seconds_count", webhookRoute, false, 3, 3},
		{"fulfillment_http_requests_total", []string{"listener", "ingest", "route", "unmatched", "method", "post", "code", "404"}, true, 1, 1},

		// The status poller: one poll settled the payment.
		{"fulfillment_status_polls_total", []string{"endpoint", tbankFail, "outcome", "settled"}, false, 1, 1},
		{"fulfillment_status_polls_total", []string{"endpoint", tbankFail, "outcome", "error"}, false, 0, 0},
		{"fulfillment_status_polls_total", []string{"endpoint", tbankFail, "outcome", "pending"}, false, 0, 1000},
		{"fulfillment_status_polls_total", []string{"endpoint", tbankReuse, "outcome", "settled"}, false, 0, 0},
		{"fulfillment_status_polls_total", []string{"endpoint", "unconfigured", "outcome", "error"}, false, 0, 0},
		{"fulfillment_status_poll_last_success_timestamp_seconds", []string{"endpoint", tbankFail}, false, float64(started.Unix()), now},
		{"fulfillment_status_poll_last_success_timestamp_seconds", []string{"endpoint", tbankIgnore}, false, 0, 0},

		// The sweeper ended the one subscription's access.
		{"fulfillment_subscription_sweeps_total", []string{"outcome", "ended"}, false, 1, 1},
		{"fulfillment_subscription_sweeps_total", []string{"outcome", "unchanged"}, false, 0, 0},
		{"fulfillment_subscription_sweeps_total", []string{"outcome", "error"}, false, 0, 0},
		{"fulfillment_subscription_sweep_last_success_timestamp_seconds", nil, false, float64(started.Unix()), now},

		// The housekeeper: its runs, what they did, when they last did it.
		{"fulfillment_housekeeping_runs_total", []string{"task", "raw_body_purge", "outcome", "ok"}, false, 1, 1000},
		{"fulfillment_housekeeping_runs_total", []string{"task", "raw_body_purge", "outcome", "error"}, false, 0, 0},
		{"fulfillment_housekeeping_runs_total", []string{"task", "fulfillment_sla", "outcome", "error"}, false, 0, 0},
		{"fulfillment_housekeeping_rows_total", []string{"task", "raw_body_purge"}, false, events, events},
		{"fulfillment_housekeeping_rows_total", []string{"task", "fulfillment_sla"}, false, 0, 0}, // within the SLA
		{"fulfillment_housekeeping_last_success_timestamp_seconds", []string{"task", "raw_body_purge"}, false, float64(started.Unix()), now},
		{"fulfillment_housekeeping_last_success_timestamp_seconds", []string{"task", "fulfillment_sla"}, false, float64(started.Unix()), now},

		// Undelivered outbox messages by destination.
		{"fulfillment_outbox_messages", []string{"destination", "crm", "state", "pending"}, false, 0, 0},
		{"fulfillment_outbox_messages", []string{"destination", "crm", "state", "failed"}, false, 0, 0},
		{"fulfillment_outbox_messages", []string{"destination", "crm", "state", "uncertain"}, false, 0, 0},
		{"fulfillment_outbox_messages", []string{"destination", "erp", "state", "pending"}, false, erpPending, erpPending},
		{"fulfillment_outbox_messages", []string{"destination", "erp", "state", "failed"}, false, 0, 0},
		{"fulfillment_outbox_attempts_total", []string{"destination", "erp", "outcome", "retry"}, false, 1, 100000},
	} {
		got := after.value(t, c.name, c.labels...)
		what := c.name + "{" + strings.Join(c.labels, " ") + "}"
		if c.delta {
			before.each(c.name, c.labels, func(v float64) { got -= v }) // none before: 0
			what += " since the calls began"
		}
		if got < c.min || got > c.max {
			if c.min == c.max {
				t.Errorf("%s = %v, want %v", what, got, c.min)
			} else {
				t.Errorf("%s = %v, want %v to %v", what, got, c.min, c.max)
			}
		}
	}
	// Every series the shipped alert rules name is one the service exports.
	rules, err := os.ReadFile("../deploy/prometheus/fulfillment.rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	// (The series the expressions name: a description may name a label's
	// value, such as a task.)
	var file struct {
		Groups []struct {
			Rules []struct {
				Expr string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(rules, &file); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			names = append(names, regexp.MustCompile(`fulfillment_[a-z_]+`).FindAllString(r.Expr, -1)...)
		}
	}
	if len(names) < 15 {
		t.Errorf("the alert rules name %d series; expected more", len(names))
	}
	for _, name := range names {
		if !regexp.MustCompile(`\n` + name + `[{ ]`).MatchString(after.text) {
			t.Errorf("deploy/prometheus/fulfillment.rules.yml names %s, which /metrics lacks", name)
		}
	}
	// No label value is a path's: no id, no unknown path.
	if strings.Contains(after.text, order.GetId()) || strings.Contains(after.text, "no-such") {
		t.Errorf("a label holds a request's path:\n%s", grepLines(after.text, order.GetId()))
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", grepLines(after.text, "_"))
	}
}

// get GETs url with token (none when empty), expecting status.
func get(t *testing.T, url, token string, status int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("GET %s = %d, want %d", url, resp.StatusCode, status)
	}
}

// metrics is one scrape of /metrics.
type metrics struct {
	text     string
	families map[string]*dto.MetricFamily
}

func scrape(t *testing.T, restURL string) metrics {
	t.Helper()
	resp, err := http.Get(restURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics = %d, %v", resp.StatusCode, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return metrics{text: string(body), families: families}
}

// value is the value of the one series of name whose labels include
// labels (name, value, ...); a histogram's _count and _sum are named so.
// The test fails when no series or several match.
func (m metrics) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	var got []float64
	m.each(name, labels, func(v float64) { got = append(got, v) })
	if len(got) != 1 {
		t.Fatalf("/metrics has %d series %s{%s}, want one\n%s", len(got), name, strings.Join(labels, " "),
			grepLines(m.text, strings.TrimSuffix(strings.TrimSuffix(name, "_count"), "_sum")))
	}
	return got[0]
}

// sum adds up the series of name whose labels include labels; at least
// one must.
func (m metrics) sum(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	var total float64
	n := 0
	m.each(name, labels, func(v float64) { total += v; n++ })
	if n == 0 {
		t.Fatalf("/metrics has no series %s{%s}", name, strings.Join(labels, " "))
	}
	return total
}

func (m metrics) each(name string, labels []string, fn func(float64)) {
	family, suffix := m.families[name], ""
	for _, s := range []string{"_count", "_sum"} {
		if base, ok := strings.CutSuffix(name, s); family == nil && ok {
			family, suffix = m.families[base], s
		}
	}
	if family == nil {
		return
	}
	for _, metric := range family.GetMetric() {
		have := map[string]string{}
		for _, l := range metric.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		if !slices.ContainsFunc(pairs(labels), func(p [2]string) bool { return have[p[0]] != p[1] }) {
			fn(sample(metric, suffix))
		}
	}
}

func pairs(labels []string) [][2]string {
	var out [][2]string
	for i := 0; i+1 < len(labels); i += 2 {
		out = append(out, [2]string{labels[i], labels[i+1]})
	}
	return out
}

func sample(m *dto.Metric, suffix string) float64 {
	switch {
	case m.GetHistogram() != nil && suffix == "_count":
		return float64(m.GetHistogram().GetSampleCount())
	case m.GetHistogram() != nil:
		return m.GetHistogram().GetSampleSum()
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue()
	default:
		return m.GetGauge().GetValue()
	}
}
