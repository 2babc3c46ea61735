package openapi_test

// webhooks.yaml against the code: every topic the service can send is
// described, the examples fit the schemas, what the outbox really delivers
// fits them too, and the inbound webhook endpoint answers only what is
// documented.

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

func webhooksDocument(t *testing.T) map[string]any {
	t.Helper()
	return loadDocument(t, readFile(t, "webhooks.yaml"))
}

// topics are all the topics of outbox messages.
func topics() []string {
	all := []string{string(fulfillment.TopicFulfillmentRequested)}
	for _, e := range fulfillment.EventTopics {
		all = append(all, string(e))
	}
	slices.Sort(all)
	return all
}

// bodySchema returns the request body schema and example of a topic.
func bodySchema(t *testing.T, doc map[string]any, topic string) (schema map[string]any, example any) {
	t.Helper()
	media := dig(doc, "webhooks", topic, "post", "requestBody", "content", "application/json")
	schema, ok := dig(media, "schema").(map[string]any)
	if !ok {
		t.Fatalf("webhooks.%s: no application/json request body schema", topic)
	}
	return schema, dig(media, "example")
}

func TestWebhooksDocumentDescribesEveryTopic(t *testing.T) {
	t.Parallel()
	doc := webhooksDocument(t)
	if v := dig(doc, "openapi"); v != "3.1.0" {
		t.Errorf("openapi: %v, want 3.1.0 (webhooks need 3.1)", v)
	}
	hooks, _ := doc["webhooks"].(map[string]any)
	if got := slices.Sorted(maps.Keys(hooks)); !slices.Equal(got, topics()) {
		t.Errorf("webhooks describe %q; the service sends %q", got, topics())
	}
	c := schemaChecker{doc: doc}
	family := map[string][]string{} // the topics of each schema
	for _, topic := range topics() {
		schema, example := bodySchema(t, doc, topic)
		if example == nil {
			t.Errorf("webhooks.%s: no example", topic)
			continue
		}
		if typ := dig(example, "type"); typ != topic {
			t.Errorf("webhooks.%s: the example's type is %v", topic, typ)
		}
		for _, v := range c.check(topic, schema, example) {
			t.Errorf("webhooks.%s example: %s", topic, v)
		}
		ref, _ := schema["$ref"].(string)
		family[ref] = append(family[ref], topic)
		var headers []string
		for _, p := range dig(doc, "webhooks", topic, "post", "parameters").([]any) {
			ref, _ := dig(p, "$ref").(string)
			name, _ := dig(doc, strings.Split(strings.TrimPrefix(ref, "#/"), "/")...).(map[string]any)["name"].(string)
			headers = append(headers, http.CanonicalHeaderKey(name))
		}
		slices.Sort(headers)
		if want := []string{"Idempotency-Key", "Webhook-Id", "Webhook-Signature", "Webhook-Timestamp"}; !slices.Equal(headers, want) {
			t.Errorf("webhooks.%s: headers %q, want %q", topic, headers, want)
		}
	}
	// The service writes every key of a payload, null when it has no
	// value: a property the document describes is never optional.
	for name, schema := range dig(doc, "components", "schemas").(map[string]any) {
		for _, bad := range optionalProperties("components.schemas."+name, schema) {
			t.Errorf("%s: described but not required (the service always sends it)", bad)
		}
	}
	// A schema's type allows exactly the topics that use it.
	for ref, members := range family {
		target, _ := dig(doc, strings.Split(strings.TrimPrefix(ref, "#/"), "/")...).(map[string]any)
		typ, _ := dig(target, "properties", "type").(map[string]any)
		var allowed []string
		if v, ok := typ["const"].(string); ok {
			allowed = append(allowed, v)
		}
		enum, _ := typ["enum"].([]any)
		for _, v := range enum {
			allowed = append(allowed, v.(string))
		}
		slices.Sort(allowed)
		if !slices.Equal(allowed, members) {
			t.Errorf("schema %q: its type allows %q, and it describes %q", ref, allowed, members)
		}
	}
}

// optionalProperties returns the properties of schema, and of the object
// schemas in it, that are not required.
func optionalProperties(where string, schema any) []string {
	props, _ := dig(schema, "properties").(map[string]any)
	required, _ := dig(schema, "required").([]any)
	var out []string
	for name, sub := range props {
		if !slices.Contains(required, any(name)) {
			out = append(out, where+"."+name)
		}
		out = append(out, optionalProperties(where+"."+name, sub)...)
	}
	return out
}

// The checker itself: each kind of mistake in a payload is found.
func TestSchemaCheckerFindsMistakes(t *testing.T) {
	t.Parallel()
	doc := webhooksDocument(t)
	c := schemaChecker{doc: doc}
	schema, example := bodySchema(t, doc, string(fulfillment.TopicFulfillmentRequested))
	mutations := map[string]func(data, line map[string]any){
		"a field not described":   func(data, _ map[string]any) { data["comment"] = "x" },
		"a required field absent": func(data, _ map[string]any) { delete(data, "merchant_order_id") },
		"a number as a string":    func(_, line map[string]any) { line["quantity"] = "1" },
		"money as a number":       func(_, line map[string]any) { line["unit_price"].(map[string]any)["minor_units"] = 1250.0 },
		"an unknown environment":  func(data, _ map[string]any) { data["environment"] = "staging" },
		"an order id not a UUID":  func(data, _ map[string]any) { data["order_id"] = "order-1" },
	}
	for name, mutate := range mutations {
		var v map[string]any
		b, _ := json.Marshal(example)
		_ = json.Unmarshal(b, &v)
		data := v["data"].(map[string]any)
		mutate(data, data["line"].(map[string]any))
		if len(c.check("example", schema, v)) == 0 {
			t.Errorf("%s: not found", name)
		}
	}
	stale := map[string]any{"type": "fulfillment.requested", "timestamp": time.Now().Format(time.RFC3339), "data": example.(map[string]any)["data"]}
	if len(c.check("example", schema, stale)) == 0 {
		t.Error("a timestamp without microseconds: not found")
	}
}

// The messages the outbox really delivers, one of each topic the
// scenarios below produce, fit the documented schemas; order.refunded
// shares order.fulfilled's schema (one query builds both).
func TestWebhooksDocumentMatchesDeliveries(t *testing.T) {
	t.Parallel()
	doc := webhooksDocument(t)
	key, err := stdwebhooks.ParseSecret(outboxSecret)
	if err != nil {
		t.Fatal(err)
	}
	dest := receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{key}, Idempotent: true})
	s := startService(t, dest, "")
	now := time.Now()
	price := map[string]any{"currency": "USD", "minor_units": 1250}
	settlement := map[string]any{"token": "USDT", "network": "TRON", "amount": "25"}

	// An order with an external line, paid: fulfillment.requested, then
	// order.fulfilled.
	s.createOrder(t, map[string]any{"org_id": orgA, "environment": "live", "merchant_order_id": "ext-1", "settlement": settlement,
		"lines": []any{
			map[string]any{"sku": "pro-license", "kind": "license", "quantity": 1, "unit_price": price},
			map[string]any{"sku": "boxed-edition", "kind": "external", "quantity": 1, "unit_price": price, "destination": destID},
		}})
	s.mustWebhook(t, payment("ext-1", "inv_ext_1", "25.000000", now))
	// Paid less than expected: order.on_hold.
	s.createOrder(t, map[string]any{"org_id": orgA, "environment": "live", "merchant_order_id": "short-1", "settlement": settlement,
		"lines": []any{map[string]any{"sku": "pro-license", "kind": "license", "quantity": 2, "unit_price": price}}})
	s.mustWebhook(t, payment("short-1", "inv_short_1", "20.000000", now))
	// A daily subscription paid two days ago, then said overdue:
	// subscription.renewed and subscription.past_due. Another, without
	// grace, paid three days ago: its access has ended, and the sweeper
	// says so (subscription.access_ended).
	for _, sub := range []struct{ id, plan string }{{"sub_due", "daily"}, {"sub_ended", "daily-no-grace"}} {
		s.createOrder(t, map[string]any{"org_id": orgA, "environment": "live", "merchant_order_id": "order-" + sub.id,
			"settlement": map[string]any{"token": "USDT", "network": "TRON", "amount": "10"},
			"lines": []any{map[string]any{"sku": "pro", "kind": "subscription", "quantity": 1, "account_ref": "user_" + sub.id,
				"plan_id": sub.plan, "unit_price": map[string]any{"currency": "USD", "minor_units": 1000}}}})
	}
	paid := payment("order-sub_due", "inv_sub_due_1", "10.000000", now.Add(-48*time.Hour))
	paid.Data.SubscriptionID = "sub_due"
	s.mustWebhook(t, paid)
	ended := payment("order-sub_ended", "inv_sub_ended_1", "10.000000", now.Add(-72*time.Hour))
	ended.Data.SubscriptionID = "sub_ended"
	s.mustWebhook(t, ended)
	overdue := yolfiEvent(yolfi.TypeSubscriptionOverdue, "", now)
	overdue.Data.SubscriptionID = "sub_due"
	// After sub_due's own renewal is stored (sub_ended's may come first):
	// an overdue before its subscription exists is unmatched, one before
	// its renewal stale.
	waitFor(t, "sub_due renewed", func() bool {
		for _, d := range deliveredOf(t, dest, "subscription.renewed") {
			var m struct {
				Data struct {
					ProviderSubscriptionID string `json:"provider_subscription_id"`
				} `json:"data"`
			}
			if json.Unmarshal(d.Body, &m) == nil && m.Data.ProviderSubscriptionID == "sub_due" {
				return true
			}
		}
		return false
	})
	s.mustWebhook(t, overdue)

	produced := []string{"fulfillment.requested", "order.fulfilled", "order.on_hold",
		"subscription.renewed", "subscription.past_due", "subscription.access_ended"}
	last := ""
	waitFor(t, "delivered, a message of each topic (the last topics logged are missing)", func() bool {
		var missing []string
		for _, topic := range produced {
			if len(deliveredOf(t, dest, topic)) == 0 {
				missing = append(missing, topic)
			}
		}
		if m := fmt.Sprint(missing); m != last && len(missing) > 0 {
			t.Logf("not delivered yet: %s", m)
			last = m
		}
		return len(missing) == 0
	})
	c := schemaChecker{doc: doc}
	for _, topic := range produced {
		schema, _ := bodySchema(t, doc, topic)
		for _, d := range deliveredOf(t, dest, topic) {
			var v any
			if err := json.Unmarshal(d.Body, &v); err != nil {
				t.Fatalf("%s: %v", topic, err)
			}
			for _, bad := range c.check(topic, schema, v) {
				t.Errorf("delivered %s: %s\n%s", topic, bad, d.Body)
			}
			for _, h := range []string{stdwebhooks.HeaderID, stdwebhooks.HeaderTimestamp, stdwebhooks.HeaderSignature, "Idempotency-Key"} {
				if d.Header.Get(h) == "" {
					t.Errorf("delivered %s without %s", topic, h)
				}
			}
		}
	}
	// The one topic not produced here has the schema of one that was.
	refunded, _ := bodySchema(t, doc, string(fulfillment.TopicOrderRefunded))
	fulfilled, _ := bodySchema(t, doc, string(fulfillment.TopicOrderFulfilled))
	if refunded["$ref"] == nil || refunded["$ref"] != fulfilled["$ref"] {
		t.Errorf("order.refunded's schema %v is not order.fulfilled's %v", refunded, fulfilled)
	}
}

// deliveredOf returns the deliveries the receiver accepted whose body's type
// is topic.
func deliveredOf(t *testing.T, r *receiver.Receiver, topic string) []receiver.Delivery {
	t.Helper()
	var out []receiver.Delivery
	for _, k := range r.Keys() {
		d, ok := r.Last(k)
		var body struct {
			Type string `json:"type"`
		}
		if ok && json.Unmarshal(d.Body, &body) == nil && body.Type == topic {
			out = append(out, d)
		}
	}
	return out
}

// POST /webhooks/{endpoint}: every answer provoked here is documented, with
// its content type, and every documented answer is provoked here but the
// service's own failures.
func TestWebhooksDocumentIngestAnswers(t *testing.T) {
	t.Parallel()
	doc := webhooksDocument(t)
	responses, _ := dig(doc, "paths", "/webhooks/{endpoint}", "post", "responses").(map[string]any)
	if responses == nil {
		t.Fatal("paths./webhooks/{endpoint}.post.responses: missing")
	}
	s := startService(t, nil, "")
	ev := yolfiEvent(yolfi.TypeInvoiceCreated, "no-such-order", time.Now())
	body, _ := json.Marshal(ev)
	sign := func(b []byte) answer { return s.webhookRaw(t, yolfiEP, []byte(yolfiSecret), b, ev.ID) }
	probes := []struct {
		name string
		want int
		send func() answer
	}{
		{"a signed event", 200, func() answer { return sign(body) }},
		{"the same event again", 200, func() answer { return sign(body) }},
		{"a signed body that is not an event", 400, func() answer { return sign([]byte(`{"type": 7}`)) }},
		{"another org's event", 400, func() answer {
			other := ev
			other.ID, other.OrgID = yolfi.NewID("evt_"), "org_b"
			b, _ := json.Marshal(other)
			return s.webhookRaw(t, yolfiEP, []byte(yolfiSecret), b, other.ID)
		}},
		{"a wrong signature", 401, func() answer { return s.webhookRaw(t, yolfiEP, []byte("ywhsec_live_not-the-secret"), body, ev.ID) }},
		{"an unknown endpoint", 404, func() answer { return s.webhookRaw(t, "no-such-endpoint", []byte(yolfiSecret), body, ev.ID) }},
		{"GET", 405, func() answer { return do(t, http.MethodGet, s.ingestURL+"/webhooks/"+yolfiEP, nil, nil) }},
		{"a body over ingest.max_body_bytes", 413, func() answer {
			return sign([]byte(`{"pad": "` + strings.Repeat("x", maxBody) + `"}`))
		}},
		{"a compressed body", 415, func() answer {
			req, err := yolfi.NewRequest(t.Context(), s.ingestURL+"/webhooks/"+yolfiEP, []byte(yolfiSecret), body, ev.ID)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Encoding", "gzip")
			return do(t, req.Method, req.URL.String(), req.Header, body)
		}},
	}
	seen := map[string]bool{}
	for _, p := range probes {
		a := p.send()
		if a.status != p.want {
			t.Errorf("%s: HTTP %d %s, want %d", p.name, a.status, a.body, p.want)
		}
		key := strconv.Itoa(a.status)
		seen[key] = true
		r, ok := responses[key].(map[string]any)
		if !ok {
			t.Errorf("%s: HTTP %d is not documented", p.name, a.status)
			continue
		}
		if a.status >= 400 {
			media, ok := dig(r, "content", a.contentType).(map[string]any)
			if !ok {
				t.Errorf("%s: HTTP %d answered %s, which is not documented", p.name, a.status, a.contentType)
				continue
			}
			// The answer's body fits its schema, which holds only keywords
			// the checker knows (an unquoted comma in a flow mapping once
			// made a keyword of half a description, which Redocly caught).
			if a.contentType != "application/json" {
				continue
			}
			var v any
			if err := json.Unmarshal(a.body, &v); err != nil {
				t.Errorf("%s: HTTP %d body is not JSON: %v", p.name, a.status, err)
				continue
			}
			schema, _ := media["schema"].(map[string]any)
			for _, bad := range (schemaChecker{doc: doc}).check(p.name, schema, v) {
				t.Errorf("HTTP %d: %s", a.status, bad)
			}
		}
	}
	// Documented but not provoked: the service's failures to store, and a
	// body slower than http.read_timeout (30 s here).
	notProvoked := []string{"408", "500", "503"}
	for key := range responses {
		if !seen[key] && !slices.Contains(notProvoked, key) {
			t.Errorf("HTTP %s is documented, and no request here gets it", key)
		}
	}
}
