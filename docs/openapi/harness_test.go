package openapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The service's credentials and names in these tests.
const (
	orgA         = "org_a"
	adminToken   = "tok-admin-0123456789abcdef"
	ingestToken  = "tok-ingest-0123456789abcdef" // holds no scope of the REST methods
	yolfiSecret  = "ywhsec_live_0123456789abcdef"
	yolfiEP      = "yolfi-live"
	tbankEP      = "tbank-live"
	destID       = "everything"
	bankTerminal = "TestTerminal" // tbankEP's terminal and its password
	bankPassword = "bank-password"
	outboxSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	maxBody      = 16 << 10 // http.max_body_bytes and ingest.max_body_bytes
)

// service is the whole service in this process, on its own database.
type service struct {
	restURL   string
	ingestURL string
}

// startService runs the service until the test ends. dest, when not nil,
// is a destination subscribed to every event. T-Bank's API is at bankURL,
// or nowhere when "" (a payment start fails).
func startService(t *testing.T, dest *receiver.Receiver, bankURL string) *service {
	t.Helper()
	key, err := stdwebhooks.ParseSecret(outboxSecret)
	if err != nil {
		t.Fatal(err)
	}
	apiURL := bankURL
	if apiURL == "" {
		apiURL = "http://127.0.0.1:1"
	}
	var bank yaml.Node
	if err := bank.Encode(map[string]any{"terminal_key": bankTerminal, "api_url": apiURL,
		"notification_url": "http://127.0.0.1:1/webhooks/" + tbankEP}); err != nil {
		t.Fatal(err)
	}
	noGrace := time.Duration(0)
	fast := config.Queue{Workers: 2, Batch: 8, Lease: 5 * time.Second, Poll: 50 * time.Millisecond,
		MaxAttempts: 5, BaseBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	cfg := &config.Config{
		Listen:   config.Listen{GRPC: "127.0.0.1:0", HTTP: "127.0.0.1:0", Ingest: "127.0.0.1:0"},
		Database: config.Database{URL: pgtest.DB(t), MaxConns: 10, ConnectTimeout: 2 * time.Second},
		Log:      config.Log{Level: "info"},
		HTTP:     config.HTTP{MaxBodyBytes: maxBody},
		Auth: config.Auth{Tokens: []config.Token{
			{Name: "admin", Secret: adminToken, Scopes: []string{config.ScopeAdmin}, Orgs: []string{"*"}},
			{Name: "edge", Secret: ingestToken, Scopes: []string{config.ScopeIngest}, Orgs: []string{"*"}},
		}},
		Endpoints: []config.Endpoint{
			{ID: yolfiEP, Provider: "yolfi", Org: orgA, Environment: "live", Secrets: []config.Secret{{Value: []byte(yolfiSecret)}}},
			{ID: tbankEP, Provider: "tbank", Org: orgA, Environment: "live", Secrets: []config.Secret{{Value: []byte(bankPassword)}}, Options: bank},
		},
		Ingest: config.Ingest{MaxBodyBytes: maxBody, Timeout: 2 * time.Second},
		Inbox:  config.Inbox{Queue: fast},
		Plans: []config.Plan{
			{ID: "pro-monthly", Months: 1},
			{ID: "daily", Days: 1},
			{ID: "daily-no-grace", Days: 1, Grace: &noGrace},
		},
		SubscriptionSweep: fast,
		Outbox:            fast,
	}
	if dest != nil {
		idempotent := true
		events := make([]string, len(fulfillment.EventTopics))
		for i, e := range fulfillment.EventTopics {
			events[i] = string(e)
		}
		cfg.Destinations = []config.Destination{config.Destination{ID: destID, URL: dest.URL(), Idempotent: &idempotent,
			Timeout: 5 * time.Second, Events: events, Keys: []stdwebhooks.Secret{key}}.WithDefaults()}
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
	return &service{restURL: "http://" + a.HTTPAddr(), ingestURL: "http://" + a.IngestAddr()}
}

// answer is an HTTP answer: its status, content type and body.
type answer struct {
	status      int
	contentType string
	body        []byte
}

// do sends a request and reads the answer.
func do(t *testing.T, method, url string, header http.Header, body []byte) answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == nil {
		req.Body = http.NoBody
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	ct, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	return answer{status: resp.StatusCode, contentType: ct, body: b}
}

// rest calls a REST method with token (none when "") and a JSON body.
func (s *service) rest(t *testing.T, method, path, token string, body []byte) answer {
	t.Helper()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		h.Set("Content-Type", "application/json")
	}
	return do(t, method, s.restURL+path, h, body)
}

// yolfiEvent is a Yolfi event about the order merchantOrderID (or none),
// occurred at at.
func yolfiEvent(typ, merchantOrderID string, at time.Time) yolfi.Payload {
	live := true
	return yolfi.Payload{
		ID: yolfi.NewID("evt_"), Type: typ, Livemode: &live, OrgID: orgA, CreatedAt: at.UTC().Format(time.RFC3339),
		Data: yolfi.PayloadData{MerchantOrderID: merchantOrderID},
	}
}

// payment is Yolfi's confirmation of a payment of amount USDT on TRON.
func payment(merchantOrderID, invoice, amount string, at time.Time) yolfi.Payload {
	p := yolfiEvent(yolfi.TypePaymentConfirmed, merchantOrderID, at)
	p.Data.InvoiceID, p.Data.PaymentID = invoice, "pay_"+invoice
	p.Data.Amount, p.Data.Token, p.Data.Network, p.Data.TxHash = amount, "USDT", "TRON", "0xabc"
	return p
}

// webhook posts a Yolfi event, signed, to the gateway.
func (s *service) webhook(t *testing.T, p yolfi.Payload) answer {
	t.Helper()
	body, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return s.webhookRaw(t, yolfiEP, []byte(yolfiSecret), body, p.ID)
}

func (s *service) webhookRaw(t *testing.T, endpoint string, secret, body []byte, eventID string) answer {
	t.Helper()
	req, err := yolfi.NewRequest(t.Context(), s.ingestURL+"/webhooks/"+endpoint, secret, body, eventID)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req.Method, req.URL.String(), req.Header, body)
}

// mustWebhook posts p and requires it stored.
func (s *service) mustWebhook(t *testing.T, p yolfi.Payload) {
	t.Helper()
	if a := s.webhook(t, p); a.status != http.StatusOK {
		t.Fatalf("webhook %s: HTTP %d %s", p.Type, a.status, a.body)
	}
}

// createOrder creates an order of org_a through REST and returns its id.
func (s *service) createOrder(t *testing.T, order map[string]any) string {
	t.Helper()
	body, err := json.Marshal(order)
	if err != nil {
		t.Fatal(err)
	}
	a := s.rest(t, http.MethodPost, "/v1/orders", adminToken, body)
	var resp struct {
		Order struct {
			ID string `json:"id"`
		} `json:"order"`
	}
	if err := json.Unmarshal(a.body, &resp); a.status != http.StatusOK || err != nil || resp.Order.ID == "" {
		t.Fatalf("CreateOrder: HTTP %d %s", a.status, a.body)
	}
	return resp.Order.ID
}

// loadDocument reads a YAML or JSON document as JSON values.
func loadDocument(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	// Through JSON, so that numbers and maps are what encoding/json gives.
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dig follows keys down nested objects; nil when one is missing.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// schemaChecker validates JSON values against the schemas of an OpenAPI
// document: 3.1 (webhooks.yaml), or Swagger 2.0 with swagger2 (the REST
// API's, GET /openapi.json). It knows the keywords the document uses and
// refuses a schema with any other, so that nothing the document says goes
// unchecked.
type schemaChecker struct {
	doc map[string]any
	// swagger2 reads the document as protoc-gen-openapiv2 writes it, and
	// holds values to it as strictly as a client generated from it: null
	// only where x-nullable says so, and an object's members only those
	// its properties describe unless additionalProperties admits more.
	swagger2 bool
}

// annotations are keywords that do not constrain a value.
var annotations = []string{"description", "title", "example", "examples"}

// check returns what is wrong with v under schema, one line per violation,
// each starting with where in v.
func (c schemaChecker) check(where string, schema map[string]any, v any) []string {
	if c.swagger2 && v == nil {
		// Swagger 2.0 has no null type: x-nullable, beside the type or
		// the $ref, is how a document allows it.
		if nullable, _ := schema["x-nullable"].(bool); !nullable {
			return []string{where + ": null, and the schema is not x-nullable"}
		}
		return nil
	}
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, where+": "+fmt.Sprintf(format, args...)) }
	for k, rule := range schema {
		switch k {
		case "$ref":
			ref, _ := rule.(string)
			target, ok := dig(c.doc, strings.Split(strings.TrimPrefix(ref, "#/"), "/")...).(map[string]any)
			if !strings.HasPrefix(ref, "#/") || !ok {
				fail("unresolvable $ref %q", ref)
				continue
			}
			bad = append(bad, c.check(where, target, v)...)
		case "type":
			types := []any{rule}
			if list, ok := rule.([]any); ok && !c.swagger2 {
				types = list
			}
			if !slices.ContainsFunc(types, func(t any) bool { return hasType(v, t) }) {
				fail("%s is not of type %v", show(v), rule)
			}
		case "const":
			if c.swagger2 {
				fail("keyword %q is not Swagger 2.0", k)
			} else if fmt.Sprint(v) != fmt.Sprint(rule) {
				fail("%s is not %v", show(v), rule)
			}
		case "x-nullable":
			if _, ok := rule.(bool); !ok || !c.swagger2 {
				fail("keyword %q is not checked", k)
			}
		case "enum":
			if !slices.ContainsFunc(rule.([]any), func(e any) bool { return fmt.Sprint(e) == fmt.Sprint(v) && hasType(v, typeOf(e)) }) {
				fail("%s is not one of %v", show(v), rule)
			}
		case "required":
			obj, _ := v.(map[string]any)
			for _, name := range rule.([]any) {
				if _, ok := obj[name.(string)]; !ok && obj != nil {
					fail("lacks %q", name)
				}
			}
		case "properties":
			obj, _ := v.(map[string]any)
			for name, sub := range rule.(map[string]any) {
				if field, ok := obj[name]; ok {
					bad = append(bad, c.check(where+"."+name, sub.(map[string]any), field)...)
				}
			}
		case "items":
			list, _ := v.([]any)
			for i, item := range list {
				bad = append(bad, c.check(fmt.Sprintf("%s[%d]", where, i), rule.(map[string]any), item)...)
			}
		case "additionalProperties":
			if allowed, ok := rule.(bool); !c.swagger2 && (!ok || allowed) {
				fail("additionalProperties other than false is not checked")
				continue
			}
			obj, _ := v.(map[string]any)
			props, _ := schema["properties"].(map[string]any)
			for name, member := range obj {
				if _, ok := props[name]; ok {
					continue
				}
				switch rule := rule.(type) {
				case map[string]any: // a map's values
					bad = append(bad, c.check(where+"."+name, rule, member)...)
				case bool: // true: members of any name (a protobuf Any's)
					if !rule {
						fail("has %q, which the document does not describe", name)
					}
				default:
					fail("additionalProperties %s is not checked", show(rule))
				}
			}
		case "pattern":
			if s, ok := v.(string); ok && !regexp.MustCompile(rule.(string)).MatchString(s) {
				fail("%s does not match %s", show(v), rule)
			}
		case "maxLength":
			if s, ok := v.(string); ok && float64(len(s)) > rule.(float64) {
				fail("%s is longer than %v", show(v), rule)
			}
		case "format":
			switch why, known := notOfFormat(rule, v); {
			case !known:
				fail("format %v is not checked", rule)
			case why != "":
				fail("%s is not %s", show(v), why)
			}
		default:
			if !slices.Contains(annotations, k) {
				fail("keyword %q is not checked", k)
			}
		}
	}
	// Swagger 2.0 objects are open unless said otherwise; a client
	// generated from the document has no place for what it does not
	// describe. (A $ref's target decides for the value it refers to.)
	_, ref := schema["$ref"]
	_, more := schema["additionalProperties"]
	if obj, ok := v.(map[string]any); ok && c.swagger2 && !ref && !more {
		props, _ := schema["properties"].(map[string]any)
		for name := range obj {
			if _, ok := props[name]; !ok {
				fail("has %q, which the document does not describe", name)
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// notOfFormat says what v is not when it breaks format, and whether the
// format is known here. A value of another type than the format's keeps it
// (the type keyword judges that). protojson writes 64-bit integers as
// strings, and bytes in standard base64.
func notOfFormat(format, v any) (why string, known bool) {
	s, isString := v.(string)
	n, isNumber := v.(float64)
	switch format {
	case "date-time":
		if _, err := time.Parse(time.RFC3339Nano, s); isString && err != nil {
			return "an RFC 3339 time", true
		}
	case "uuid":
		if _, err := uuid.Parse(s); isString && err != nil {
			return "a UUID", true
		}
	case "int32":
		if isNumber && (n != math.Trunc(n) || n < math.MinInt32 || n > math.MaxInt32) {
			return "an int32", true
		}
	case "int64":
		if _, err := strconv.ParseInt(s, 10, 64); isString && err != nil {
			return "an int64", true
		}
	case "uint64":
		if _, err := strconv.ParseUint(s, 10, 64); isString && err != nil {
			return "a uint64", true
		}
	case "byte":
		if _, err := base64.StdEncoding.DecodeString(s); isString && err != nil {
			return "standard base64", true
		}
	default:
		return "", false
	}
	return "", true
}

func hasType(v, t any) bool {
	switch t {
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "null":
		return v == nil
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		f, ok := v.(float64)
		return ok && f == float64(int64(f))
	}
	return false
}

func typeOf(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return "object"
}

func show(v any) string {
	b, _ := json.Marshal(v)
	if len(b) > 80 {
		return string(b[:77]) + "..."
	}
	return string(b)
}

// waitFor polls cond for up to 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
