package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// largestOrder is the largest order CreateOrder accepts: every line, every
// license unit, and every text at its longest.
func largestOrder(merchantOrderID string) map[string]any {
	long := func(prefix string, i int) string {
		s := fmt.Sprintf("%s-%03d-", prefix, i)
		return s + strings.Repeat("x", fulfillment.MaxIDLen-len(s))
	}
	licenseLines := 10
	lines := make([]any, 0, fulfillment.MaxLines)
	for i := range fulfillment.MaxLines {
		line := map[string]any{"sku": long("sku", i), "unit_price": map[string]any{"currency": "USD", "minor_units": 100}}
		if i < licenseLines {
			line["kind"], line["quantity"] = "license", fulfillment.MaxLicensesPerOrder/licenseLines
		} else {
			line["kind"], line["quantity"], line["account_ref"] = "balance_credit", 1, long("acct", i)
		}
		lines = append(lines, line)
	}
	return map[string]any{
		"org_id": orgA, "environment": "live", "merchant_order_id": merchantOrderID,
		"checkout_session_id": long("cs", 0), "lines": lines,
		"settlement": map[string]any{"token": "USDT", "network": "TRON", "amount": "25.000000", "tolerance": "0.5"},
	}
}

// rest sends a REST request with token and decodes the JSON answer.
func (s *stack) rest(t *testing.T, method, path, token string, body any) (code int, answer map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.restURL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s %s: status %d, body not JSON: %v", method, path, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// The largest valid order is created, fulfilled in one processing
// transaction and read back whole over gRPC (with a client's default 4 MiB
// receive limit) and REST; one license unit more is refused up front.
func TestLargestOrder(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	mid := strings.Repeat("m", fulfillment.MaxIDLen)
	code, created := s.rest(t, "POST", "/v1/orders", orgAToken, largestOrder(mid))
	if code != http.StatusOK {
		t.Fatalf("creating the largest order: %d %v", code, created)
	}
	orderID := created["order"].(map[string]any)["id"].(string)

	tooMany := largestOrder("one-unit-more")
	tooMany["lines"].([]any)[0].(map[string]any)["quantity"] = fulfillment.MaxLicensesPerOrder/10 + 1
	if code, body := s.rest(t, "POST", "/v1/orders", orgAToken, tooMany); code != http.StatusBadRequest ||
		!strings.Contains(fmt.Sprint(body["message"]), "at most 1000") {
		t.Errorf("1,001 license units: %d %v, want 400 naming the bound", code, body)
	}

	s.sendOK(t, event(yolfi.TypePaymentConfirmed, mid, "inv_largest"))
	s.settle(t)
	got := s.effects(t, orderID)
	if got.State != "fulfilled" || got.Licenses != fulfillment.MaxLicensesPerOrder || got.Credits != fulfillment.MaxLines-10 {
		t.Fatalf("after payment: %v; want fulfilled with %d licenses and %d credits", got, fulfillment.MaxLicensesPerOrder, fulfillment.MaxLines-10)
	}

	// gRPC, with the receive limit every gRPC client has by default.
	resp, err := s.client.GetOrder(authed(orgAToken), &fulfillmentv1.GetOrderRequest{OrderId: orderID},
		grpc.MaxCallRecvMsgSize(4<<20))
	if err != nil {
		t.Fatalf("GetOrder over gRPC: %v", err)
	}
	h := resp.GetOrder().GetHistory()
	if len(resp.GetOrder().GetLines()) != fulfillment.MaxLines || len(h.GetEntitlements()) != fulfillment.MaxLicensesPerOrder ||
		len(h.GetLedgerEntries()) != fulfillment.MaxLines-10 || h.GetOmittedEntitlements() != 0 {
		t.Errorf("gRPC: %d lines, %d entitlements (%d omitted), %d ledger entries", len(resp.GetOrder().GetLines()),
			len(h.GetEntitlements()), h.GetOmittedEntitlements(), len(h.GetLedgerEntries()))
	}
	// REST.
	code, body := s.rest(t, "GET", "/v1/orders/"+orderID, orgAToken, nil)
	if code != http.StatusOK {
		t.Fatalf("GetOrder over REST: %d %v", code, body)
	}
	history := body["order"].(map[string]any)["history"].(map[string]any)
	if n := len(history["entitlements"].([]any)); n != fulfillment.MaxLicensesPerOrder {
		t.Errorf("REST: %d entitlements, want %d", n, fulfillment.MaxLicensesPerOrder)
	}
}

// CreateOrder and ListOrders answer the basic view: the history is absent
// (null), never an empty list a client would read as "no license"; GetOrder
// has it. A repeated create answers the same view as the first.
func TestOrderViews(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	body := largestOrder("views-1")
	body["lines"] = body["lines"].([]any)[:1]
	body["checkout_session_id"] = ""
	code, first := s.rest(t, "POST", "/v1/orders", orgAToken, body)
	if code != http.StatusOK {
		t.Fatalf("create: %d %v", code, first)
	}
	order := first["order"].(map[string]any)
	s.sendOK(t, event(yolfi.TypePaymentConfirmed, "views-1", "inv_views"))
	s.settle(t)

	_, again := s.rest(t, "POST", "/v1/orders", orgAToken, body)
	_, list := s.rest(t, "GET", "/v1/orders?merchant_order_id=views-1", orgAToken, nil)
	_, get := s.rest(t, "GET", "/v1/orders/"+order["id"].(string), orgAToken, nil)
	for name, o := range map[string]map[string]any{
		"first create":    order,
		"repeated create": again["order"].(map[string]any),
		"list":            list["orders"].([]any)[0].(map[string]any),
	} {
		if h, ok := o["history"]; !ok || h != nil {
			t.Errorf("%s: history = %v, want null (not in this view)", name, h)
		}
		for _, old := range []string{"entitlements", "events", "payment_attempts", "ledger_entries"} {
			if _, ok := o[old]; ok {
				t.Errorf("%s: has %q outside the history", name, old)
			}
		}
	}
	if created, ok := again["created"].(bool); !ok || created {
		t.Errorf("repeated create: created = %v", created)
	}
	h := get["order"].(map[string]any)["history"].(map[string]any)
	if n := len(h["entitlements"].([]any)); n != 100 {
		t.Errorf("GetOrder: %d entitlements, want 100", n)
	}
	if n := len(h["events"].([]any)); n != 1 {
		t.Errorf("GetOrder: %d events, want 1", n)
	}
}
