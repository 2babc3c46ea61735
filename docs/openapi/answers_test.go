package openapi_test

// The REST API's generated OpenAPI document (GET /openapi.json), against
// the service's 200 answers: a service with orders unpaid, paid, paid twice
// and undelivered, a payment started at a (fake) bank, subscriptions with
// and without a paid period, stored events, outbox messages and
// reconciliation items is asked what every operation answers, and each
// answer holds to its documented schema as strictly as a client generated
// from the document reads it: no null where the document does not allow
// it, no member it does not describe, every value of its type and format.

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

// The operations whose 200 answer is not provoked here, and why.
var answersNotProvoked = map[string]string{
	"FulfillmentService_CancelRedrive": "only a run still running is cancelled, and the service applies a run as soon as " +
		"it starts it: the cancel would race the run's end. Its answer is a Redrive, as StartRedrive's and GetRedrive's are",
}

func TestRESTAnswersMatchTheDocument(t *testing.T) {
	t.Parallel()
	key, err := stdwebhooks.ParseSecret(outboxSecret)
	if err != nil {
		t.Fatal(err)
	}
	dest := receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{key}, Idempotent: true})
	bank, err := fakebank.New(fakebank.Options{TerminalKey: bankTerminal, Password: []byte(bankPassword)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bank.Close() })
	s := startService(t, dest, bank.URL())
	c := newAnswers(t, s)
	now := time.Now()

	usd := map[string]any{"currency": "USD", "minor_units": 1250}
	license := map[string]any{"sku": "pro-license", "kind": "license", "quantity": 1, "unit_price": usd}
	external := map[string]any{"sku": "boxed-edition", "kind": "external", "quantity": 1, "unit_price": usd, "destination": destID}
	order := func(merchantOrderID, amount string, lines ...any) map[string]any {
		o := map[string]any{"org_id": orgA, "environment": "live", "merchant_order_id": merchantOrderID, "lines": lines}
		if amount != "" {
			o["settlement"] = map[string]any{"token": "USDT", "network": "TRON", "amount": amount}
		}
		return o
	}
	create := func(o map[string]any) string {
		t.Helper()
		return str(c.call(t, http.MethodPost, "/v1/orders", o), "order", "id")
	}

	// Orders: unpaid (created, then created again); paid, with a line
	// delivered to the destination; paid twice (an extra_payment item);
	// paid, its line's delivery refused until it fails (a failed_delivery
	// item); in roubles, its payment started at the bank, without a
	// settlement; a subscription's first period.
	unpaid := order("unpaid", "12.5", license)
	unpaidID := create(unpaid)
	if created, ok := c.call(t, http.MethodPost, "/v1/orders", unpaid)["created"].(bool); !ok || created {
		t.Errorf("CreateOrder repeated: created %v, want false", created)
	}
	paidID := create(order("paid", "25", license, external))
	s.mustWebhook(t, payment("paid", "inv_paid", "25.000000", now))
	extraID := create(order("extra", "12.5", license))
	s.mustWebhook(t, payment("extra", "inv_extra_1", "12.500000", now))
	s.mustWebhook(t, payment("extra", "inv_extra_2", "12.500000", now))
	undeliveredID := create(order("undelivered", "25", license, external))
	dest.SetPlan(func(key string, _ int) receiver.Action {
		if strings.HasPrefix(key, "order_"+undeliveredID+"_") {
			return receiver.Action{Status: http.StatusServiceUnavailable}
		}
		return receiver.Action{}
	})
	s.mustWebhook(t, payment("undelivered", "inv_undelivered", "25.000000", now))
	rubID := create(order("rub", "", map[string]any{"sku": "pro-license", "kind": "license", "quantity": 1,
		"unit_price": map[string]any{"currency": "RUB", "minor_units": 19900}}))
	start := c.call(t, http.MethodPost, "/v1/orders/"+rubID+"/payments", map[string]any{"endpoint_id": tbankEP})
	if state := str(start, "payment", "state"); state != "started" {
		t.Errorf("StartPayment: the start is %q, want started", state)
	}
	subOrderID := create(order("sub", "9", map[string]any{"sku": "pro", "kind": "subscription", "quantity": 1,
		"plan_id": "pro-monthly", "account_ref": "user_1", "unit_price": map[string]any{"currency": "USD", "minor_units": 900}}))
	paidSub := payment("sub", "inv_sub", "9.000000", now)
	paidSub.Data.SubscriptionID = "sub_1"
	s.mustWebhook(t, paidSub)
	// A payment of no order (unmatched), and a subscription before its
	// first payment.
	s.mustWebhook(t, payment("nobody", "inv_nobody", "1.000000", now))
	c.call(t, http.MethodPost, "/v1/subscriptions", map[string]any{"org_id": orgA, "environment": "live", "provider": "yolfi",
		"provider_subscription_id": "sub_2", "customer_ref": "user_2", "plan_id": "pro-monthly"})

	waitFor(t, "the paid orders fulfilled and the undelivered line failed", func() bool {
		return c.peek(t, "/v1/orders/"+paidID, "order", "state") == "fulfilled" &&
			c.peek(t, "/v1/orders/"+subOrderID, "order", "state") == "fulfilled" &&
			len(c.list(t, "/v1/outbox/messages?state=failed&order_id="+undeliveredID, "messages")) == 1 &&
			len(c.list(t, "/v1/reconciliation/items?kind=failed_delivery&order_id="+undeliveredID, "items")) == 1
	})

	// Orders, one by one with their history, and as listed.
	for _, id := range []string{unpaidID, paidID, extraID, undeliveredID, rubID, subOrderID} {
		c.call(t, http.MethodGet, "/v1/orders/"+id, nil)
	}
	c.call(t, http.MethodGet, "/v1/orders?org_id="+orgA, nil)

	// Stored events; the unmatched one replayed.
	var unmatched, rawBody string
	for _, e := range list(c.call(t, http.MethodGet, "/v1/events?org_id="+orgA, nil), "events") {
		id := str(e, "id")
		rawBody += str(c.call(t, http.MethodGet, "/v1/events/"+id, nil), "event", "raw_body")
		if str(e, "state") == "unmatched" {
			unmatched = id
		}
	}
	if unmatched == "" || rawBody == "" {
		t.Fatalf("no unmatched stored event (%q), or no raw body (%q)", unmatched, rawBody)
	}
	c.call(t, http.MethodPost, "/v1/events/"+unmatched+":replay", map[string]any{"actor_detail": "answers test"})

	// Outbox messages: each with its attempts; a delivered one sent again,
	// the failed one confirmed.
	var delivered, failed string
	for _, m := range list(c.call(t, http.MethodGet, "/v1/outbox/messages?org_id="+orgA, nil), "messages") {
		id := str(m, "id")
		c.call(t, http.MethodGet, "/v1/outbox/messages/"+id, nil)
		switch str(m, "state") {
		case "delivered":
			delivered = id
		case "failed":
			failed = id
		}
	}
	if delivered == "" || failed == "" {
		t.Fatalf("no delivered (%q) or no failed (%q) outbox message", delivered, failed)
	}
	c.call(t, http.MethodPost, "/v1/outbox/messages/"+delivered+":retry", map[string]any{"resend": true})
	c.call(t, http.MethodPost, "/v1/outbox/messages/"+failed+":confirmDelivery", map[string]any{"note": "the destination has it"})

	// Destinations, enabled and disabled.
	c.call(t, http.MethodGet, "/v1/outbox/destinations", nil)
	c.call(t, http.MethodPost, "/v1/outbox/destinations/"+destID+":disable", map[string]any{"reason": "maintenance"})
	c.call(t, http.MethodGet, "/v1/outbox/destinations", nil)
	c.call(t, http.MethodPost, "/v1/outbox/destinations/"+destID+":enable", map[string]any{})

	// Reconciliation: the summary with open items and without, the
	// activity, each item with its evidence; the extra payment resolved.
	summaries := list(c.call(t, http.MethodGet, "/v1/reconciliation/summary?org_id="+orgA, nil), "summaries")
	if len(summaries) != 1 || str(summaries[0], "oldest_open_age") == "" {
		t.Errorf("GetReconciliationSummary: %v, want one summary with oldest_open_age (a Duration)", summaries)
	}
	c.call(t, http.MethodGet, "/v1/reconciliation/summary?org_id=org_without_items", nil)
	c.call(t, http.MethodGet, "/v1/activity?org_id="+orgA+"&minutes=5", nil)
	var extraItem string
	for _, item := range list(c.call(t, http.MethodGet, "/v1/reconciliation/items?org_id="+orgA, nil), "items") {
		got := c.call(t, http.MethodGet, "/v1/reconciliation/items/"+str(item, "id"), nil)
		switch str(item, "kind") {
		case "extra_payment":
			extraItem = str(item, "id")
		case "failed_delivery":
			if dig(got, "evidence", "delivery") == nil {
				t.Error("a failed_delivery item without its delivery in evidence")
			}
		}
	}
	if extraItem == "" {
		t.Fatal("no extra_payment item")
	}
	c.call(t, http.MethodPost, "/v1/reconciliation/items/"+extraItem+":resolve",
		map[string]any{"resolution": "refunded", "note": "refunded the second payment"})
	c.call(t, http.MethodGet, "/v1/reconciliation/items/"+extraItem, nil)

	// Subscriptions, and access: paid, not paid yet, never subscribed.
	for _, sub := range list(c.call(t, http.MethodGet, "/v1/subscriptions?org_id="+orgA, nil), "subscriptions") {
		c.call(t, http.MethodGet, "/v1/subscriptions/"+str(sub, "id"), nil)
	}
	for _, customer := range []string{"user_1", "user_2", "user_3"} {
		c.call(t, http.MethodGet, "/v1/access?"+url.Values{"org_id": {orgA}, "customer_ref": {customer},
			"plan_id": {"pro-monthly"}}.Encode(), nil)
	}

	// A bulk re-drive, planned, started, read and listed.
	filter := map[string]any{"target": "events", "org_id": orgA, "state": "processed"}
	c.call(t, http.MethodPost, "/v1/redrives:plan", map[string]any{"filter": filter})
	run := str(c.call(t, http.MethodPost, "/v1/redrives", map[string]any{"filter": filter, "actor_detail": "answers test"}), "redrive", "id")
	c.call(t, http.MethodGet, "/v1/redrives/"+run, nil)
	c.call(t, http.MethodGet, "/v1/redrives?org_id="+orgA, nil)

	c.report(t)
}

// answers calls the REST API and checks each 200 answer against the schema
// its operation documents in the served document.
type answers struct {
	s       *service
	checker schemaChecker
	routes  []route
	checked map[string]int // answers checked, by operationId
}

// route is one operation of the document.
type route struct {
	method string
	path   *regexp.Regexp // the template, its parameters any segment
	id     string
	schema map[string]any // of its 200 answer
}

func newAnswers(t *testing.T, s *service) *answers {
	t.Helper()
	served := do(t, http.MethodGet, s.restURL+"/openapi.json", nil, nil)
	if served.status != http.StatusOK {
		t.Fatalf("GET /openapi.json: HTTP %d", served.status)
	}
	doc := loadDocument(t, served.body)
	if v := dig(doc, "swagger"); v != "2.0" {
		t.Fatalf("swagger: %v, want 2.0", v)
	}
	a := &answers{s: s, checker: schemaChecker{doc: doc, swagger2: true}, checked: map[string]int{}}
	param := regexp.MustCompile(`\{[^}]+\}`)
	paths, _ := doc["paths"].(map[string]any)
	for _, template := range slices.Sorted(maps.Keys(paths)) {
		for method, op := range paths[template].(map[string]any) {
			var pattern strings.Builder
			last := 0
			for _, m := range param.FindAllStringIndex(template, -1) {
				pattern.WriteString(regexp.QuoteMeta(template[last:m[0]]) + `[^/:]+`)
				last = m[1]
			}
			pattern.WriteString(regexp.QuoteMeta(template[last:]))
			schema, ok := dig(op, "responses", "200", "schema").(map[string]any)
			id, _ := dig(op, "operationId").(string)
			if !ok {
				t.Errorf("%s %s (%s): no schema of its 200 answer", method, template, id)
			}
			a.routes = append(a.routes, route{method: strings.ToUpper(method), path: regexp.MustCompile("^" + pattern.String() + "$"),
				id: id, schema: schema})
		}
	}
	return a
}

// call sends a request with the admin token, requires a 200, checks the
// answer, and returns it.
func (a *answers) call(t *testing.T, method, path string, body map[string]any) map[string]any {
	t.Helper()
	r := a.route(t, method, path)
	var raw []byte
	if body != nil {
		var err error
		if raw, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	got := a.s.rest(t, method, path, adminToken, raw)
	if got.status != http.StatusOK {
		t.Fatalf("%s %s (%s): HTTP %d %s", method, path, r.id, got.status, got.body)
	}
	var v map[string]any
	if err := json.Unmarshal(got.body, &v); err != nil {
		t.Fatalf("%s %s (%s): %v", method, path, r.id, err)
	}
	a.checked[r.id]++
	if bad := a.checker.check(r.id, r.schema, v); len(bad) > 0 {
		t.Errorf("%s %s: the answer is not as documented:\n\t%s\n%s", method, path, strings.Join(bad, "\n\t"), got.body)
	}
	return v
}

// route returns the one operation that serves method and path.
func (a *answers) route(t *testing.T, method, path string) route {
	t.Helper()
	p, _, _ := strings.Cut(path, "?")
	var found []route
	for _, r := range a.routes {
		if r.method == method && r.path.MatchString(p) {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s %s: %d operations of the document serve it", method, path, len(found))
	}
	return found[0]
}

// peek reads a GET answer's member without checking it (for polling).
func (a *answers) peek(t *testing.T, path string, keys ...string) string {
	t.Helper()
	got := a.s.rest(t, http.MethodGet, path, adminToken, nil)
	var v any
	if got.status != http.StatusOK || json.Unmarshal(got.body, &v) != nil {
		t.Fatalf("GET %s: HTTP %d %s", path, got.status, got.body)
	}
	return str(v, keys...)
}

// list reads a GET answer's list without checking it (for polling).
func (a *answers) list(t *testing.T, path, name string) []map[string]any {
	t.Helper()
	got := a.s.rest(t, http.MethodGet, path, adminToken, nil)
	var v map[string]any
	if got.status != http.StatusOK || json.Unmarshal(got.body, &v) != nil {
		t.Fatalf("GET %s: HTTP %d %s", path, got.status, got.body)
	}
	return list(v, name)
}

// report fails for an operation whose answer was not checked, unless
// answersNotProvoked says why, and for one listed there that was.
func (a *answers) report(t *testing.T) {
	t.Helper()
	for _, r := range a.routes {
		why, excused := answersNotProvoked[r.id]
		switch n := a.checked[r.id]; {
		case n == 0 && !excused:
			t.Errorf("%s %s: no answer checked: provoke one, or say why in answersNotProvoked", r.method, r.id)
		case n > 0 && excused:
			t.Errorf("%s: answers checked, and answersNotProvoked says %q: remove it there", r.id, why)
		}
	}
	t.Logf("answers checked: %d operations of %d %v", len(a.checked), len(a.routes), a.checked)
}

// str returns the string at keys in v; "" when there is none.
func str(v any, keys ...string) string {
	s, _ := dig(v, keys...).(string)
	return s
}

// list returns the objects of the list name in v.
func list(v map[string]any, name string) []map[string]any {
	items, _ := v[name].([]any)
	out := make([]map[string]any, 0, len(items))
	for _, item := range items {
		if m, ok := item.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// The checker itself, reading the REST API's document: each kind of
// mistake in an answer is found, and each null the document allows is not
// one.
func TestSwaggerCheckerFindsMistakes(t *testing.T) {
	t.Parallel()
	doc := loadDocument(t, readFile(t, "../../server/apidocs/fulfillment.swagger.json"))
	c := schemaChecker{doc: doc, swagger2: true}
	order := map[string]any{"$ref": "#/definitions/v1CreateOrderResponse"}
	event := map[string]any{"$ref": "#/definitions/v1InboxEvent"}
	const (
		orderAnswer = `{"order": {"id": "0195634c-0000-7000-8000-000000000000", "org_id": "org_a", "environment": "live",
			"merchant_order_id": "m-1", "checkout_session_id": "", "state": "pending_payment",
			"lines": [{"sku": "pro", "kind": "license", "quantity": "1", "unit_price": {"currency": "USD", "minor_units": "1250"},
				"account_ref": "", "destination": "", "plan_id": ""}],
			"total": {"currency": "USD", "minor_units": "1250"}, "settlement": null,
			"create_time": "2026-01-02T03:04:05.123456Z", "update_time": "2026-01-02T03:04:05Z", "history": null}, "created": true}`
		eventAnswer = `{"id": "7", "provider": "yolfi", "endpoint_id": "yolfi-live", "org_id": "org_a", "environment": "live",
			"event_id": "evt_1", "type": "payment.confirmed", "kind": "payment_confirmed", "test_mode": false,
			"occur_time": null, "receive_time": "2026-01-02T03:04:05Z", "payment": null, "refs": {"tx_hash": "0xabc"},
			"state": "processed", "decision": "fulfilled", "decision_reason": "", "order_id": "", "subscription_id": "",
			"attempts": 1, "next_attempt_time": null, "last_error": "", "process_time": null, "raw_body": "eyJpZCI6IDF9",
			"raw_body_status": "", "replay_count": 0, "replays": []}`
	)
	parse := func(s string) map[string]any {
		var v map[string]any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if bad := c.check("order", order, parse(orderAnswer)); len(bad) > 0 {
		t.Fatalf("a valid answer is refused: %q", bad)
	}
	if bad := c.check("event", event, parse(eventAnswer)); len(bad) > 0 {
		t.Fatalf("a valid answer is refused: %q", bad)
	}
	orderOf := func(v map[string]any) map[string]any { return v["order"].(map[string]any) }
	line := func(v map[string]any) map[string]any { return orderOf(v)["lines"].([]any)[0].(map[string]any) }
	for _, m := range []struct {
		name   string
		schema map[string]any
		answer string
		mutate func(v map[string]any)
	}{
		{"null where not x-nullable", order, orderAnswer, func(v map[string]any) { orderOf(v)["state"] = nil }},
		{"a null list", order, orderAnswer, func(v map[string]any) { orderOf(v)["lines"] = nil }},
		{"a null item", order, orderAnswer, func(v map[string]any) { orderOf(v)["lines"] = []any{nil} }},
		{"a member not described", order, orderAnswer, func(v map[string]any) { orderOf(v)["comment"] = "x" }},
		{"a member not described, in a list", order, orderAnswer, func(v map[string]any) { line(v)["note"] = "x" }},
		{"a member not described, at the top", order, orderAnswer, func(v map[string]any) { v["next_page_token"] = "" }},
		{"a member not described, in a message", order, orderAnswer, func(v map[string]any) { orderOf(v)["history"] = map[string]any{"notes": []any{}} }},
		{"an int64 as a number", order, orderAnswer, func(v map[string]any) { line(v)["quantity"] = 1.0 }},
		{"an int64 that is no integer", order, orderAnswer, func(v map[string]any) { line(v)["unit_price"].(map[string]any)["minor_units"] = "12.5" }},
		{"a boolean as a string", order, orderAnswer, func(v map[string]any) { v["created"] = "true" }},
		{"an object for a list", order, orderAnswer, func(v map[string]any) { orderOf(v)["lines"] = map[string]any{} }},
		{"a time that is not RFC 3339", order, orderAnswer, func(v map[string]any) { orderOf(v)["create_time"] = "2026-01-02 03:04:05" }},
		{"a message as a string", order, orderAnswer, func(v map[string]any) { orderOf(v)["total"] = "USD 12.50" }},
		{"an int32 as a string", event, eventAnswer, func(v map[string]any) { v["attempts"] = "1" }},
		{"an int32 with a fraction", event, eventAnswer, func(v map[string]any) { v["attempts"] = 1.5 }},
		{"an int32 out of range", event, eventAnswer, func(v map[string]any) { v["attempts"] = 1e10 }},
		{"bytes not in base64", event, eventAnswer, func(v map[string]any) { v["raw_body"] = "{not base64}" }},
		{"a map's value of another type", event, eventAnswer, func(v map[string]any) { v["refs"] = map[string]any{"tx_hash": 1.0} }},
		{"a map's value null", event, eventAnswer, func(v map[string]any) { v["refs"] = map[string]any{"tx_hash": nil} }},
		{"a null map", event, eventAnswer, func(v map[string]any) { v["refs"] = nil }},
		{"a number for a boolean", event, eventAnswer, func(v map[string]any) { v["test_mode"] = 0.0 }},
		{"an item of another shape", event, eventAnswer, func(v map[string]any) { v["replays"] = []any{map[string]any{"replayed_at": "x"}} }},
	} {
		v := parse(m.answer)
		m.mutate(v)
		if len(c.check("answer", m.schema, v)) == 0 {
			t.Errorf("%s: not found", m.name)
		}
	}
	// A schema saying what the checker does not check is refused, not
	// passed over.
	for name, schema := range map[string]map[string]any{
		"an unknown keyword":         {"type": "string", "minLength": 1.0},
		"an unknown format":          {"type": "string", "format": "email"},
		"a type list (OpenAPI 3.1)":  {"type": []any{"string", "null"}},
		"const (OpenAPI 3.1)":        {"const": "x"},
		"x-nullable that is no bool": {"type": "string", "x-nullable": "yes"},
	} {
		if len(c.check("schema", schema, "x")) == 0 {
			t.Errorf("%s: not refused", name)
		}
	}
	if len((schemaChecker{doc: doc}).check("schema", map[string]any{"type": "string", "x-nullable": true}, "x")) == 0 {
		t.Error("x-nullable in an OpenAPI 3.1 document: not refused")
	}
}
