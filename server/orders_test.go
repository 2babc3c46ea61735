package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/fulfillplatform/fulfillment/config"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

func TestCreateGetListGRPC(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	ctx := withToken(tokCheckout)

	created, err := ts.client.CreateOrder(ctx, orderRequest("org_a", "m-1"))
	if err != nil {
		t.Fatal(err)
	}
	o := created.GetOrder()
	if !created.GetCreated() || o.GetId() == "" || o.GetState() != "pending_payment" {
		t.Fatalf("created = %v, order = %v", created.GetCreated(), o)
	}
	if o.GetTotal().GetMinorUnits() != 2700 || o.GetTotal().GetCurrency() != "USD" {
		t.Errorf("total = %v, want 2700 USD", o.GetTotal())
	}
	if len(o.GetLines()) != 2 || o.GetLines()[1].GetAccountRef() != "acct_7" {
		t.Errorf("lines = %v", o.GetLines())
	}
	if o.GetSettlement().GetAmount() != "27" || o.GetSettlement().GetTolerance() != "0.01" {
		t.Errorf("settlement = %v", o.GetSettlement())
	}

	got, err := ts.client.GetOrder(ctx, &fulfillmentv1.GetOrderRequest{OrderId: o.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	// GetOrder adds the history (empty here) to what CreateOrder answered.
	if o.GetHistory() != nil {
		t.Errorf("CreateOrder answered a history: %v", o.GetHistory())
	}
	h := got.GetOrder().GetHistory()
	if h == nil || len(h.GetEntitlements())+len(h.GetEvents())+len(h.GetPaymentAttempts())+len(h.GetLedgerEntries()) != 0 {
		t.Errorf("GetOrder history = %v, want present and empty", h)
	}
	basic := proto.CloneOf(got.GetOrder())
	basic.History = nil
	if !proto.Equal(basic, o) {
		t.Errorf("GetOrder differs from CreateOrder:\n got %v\nwant %v", basic, o)
	}

	list, err := ts.client.ListOrders(ctx, &fulfillmentv1.ListOrdersRequest{OrgId: "org_a", MerchantOrderId: "m-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetOrders()) != 1 || list.GetOrders()[0].GetId() != o.GetId() || list.GetNextPageToken() != "" {
		t.Errorf("ListOrders = %v", list)
	}
}

func TestCreateGetListREST(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)

	code, body := ts.do(t, "POST", "/v1/orders", tokCheckout, orderBody("org_a", "web-1"))
	if code != http.StatusOK {
		t.Fatalf("POST /v1/orders = %d %v", code, body)
	}
	order := body["order"].(map[string]any)
	id := order["id"].(string)
	if created, _ := body["created"].(bool); order["state"] != "pending_payment" || order["merchant_order_id"] != "web-1" || !created {
		t.Errorf("created order = %v", body)
	}

	code, body = ts.do(t, "GET", "/v1/orders/"+id, tokCheckout, nil)
	if code != http.StatusOK || body["order"].(map[string]any)["id"] != id {
		t.Fatalf("GET /v1/orders/%s = %d %v", id, code, body)
	}

	code, body = ts.do(t, "GET", "/v1/orders?org_id=org_a&environment=live&state=pending_payment", tokCheckout, nil)
	if code != http.StatusOK || len(body["orders"].([]any)) != 1 {
		t.Fatalf("GET /v1/orders = %d %v", code, body)
	}

	code, body = ts.do(t, "GET", "/v1/orders/019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b", tokCheckout, nil)
	if code != http.StatusNotFound {
		t.Errorf("unknown order = %d %v, want 404", code, body)
	}
}

func TestCreateIdempotentAndConflict(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	ctx := withToken(tokCheckout)

	first, err := ts.client.CreateOrder(ctx, orderRequest("org_a", "m-1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := ts.client.CreateOrder(ctx, orderRequest("org_a", "m-1"))
	if err != nil {
		t.Fatal(err)
	}
	if again.GetCreated() || again.GetOrder().GetId() != first.GetOrder().GetId() {
		t.Errorf("repeat: created=%v id=%s, want created=false id=%s", again.GetCreated(), again.GetOrder().GetId(), first.GetOrder().GetId())
	}
	// Same amount written differently is the same request.
	same := orderRequest("org_a", "m-1")
	same.Settlement.Amount = "27.0"
	if _, err := ts.client.CreateOrder(ctx, same); err != nil {
		t.Errorf("repeat with 27.0 for 27.000000: %v", err)
	}

	changed := orderRequest("org_a", "m-1")
	changed.Lines[0].Quantity = 5
	_, err = ts.client.CreateOrder(ctx, changed)
	if status.Code(err) != codes.AlreadyExists {
		t.Fatalf("different content: %v, want AlreadyExists", err)
	}
	if !strings.Contains(status.Convert(err).Message(), first.GetOrder().GetId()) {
		t.Errorf("conflict message %q does not name the existing order", status.Convert(err).Message())
	}
	code, body := ts.do(t, "POST", "/v1/orders", tokCheckout, orderBody("org_a", "m-1"))
	if code != http.StatusConflict {
		t.Errorf("REST conflict = %d %v, want 409", code, body)
	}

	// Nothing changed: one order, with its original content.
	list, err := ts.client.ListOrders(ctx, &fulfillmentv1.ListOrdersRequest{OrgId: "org_a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetOrders()) != 1 || list.GetOrders()[0].GetLines()[0].GetQuantity() != 1 {
		t.Errorf("after conflicts: %v", list.GetOrders())
	}
}

func TestCreateConcurrentREST(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	const callers = 20
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		ids     = make([]string, callers)
		answers = make([]int, callers)
		news    = make([]bool, callers)
	)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code, body := ts.do(t, "POST", "/v1/orders", tokCheckout, orderBody("org_a", "race-1"))
			answers[i] = code
			if code == http.StatusOK {
				ids[i] = body["order"].(map[string]any)["id"].(string)
				news[i], _ = body["created"].(bool)
			}
		}()
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range callers {
		if answers[i] != http.StatusOK || ids[i] != ids[0] {
			t.Errorf("caller %d: %d, order %q (caller 0: %q)", i, answers[i], ids[i], ids[0])
		}
		if news[i] {
			created++
		}
	}
	if created != 1 {
		t.Errorf("%d callers were told they created the order, want 1", created)
	}
	code, body := ts.do(t, "GET", "/v1/orders?org_id=org_a", tokCheckout, nil)
	if code != http.StatusOK || len(body["orders"].([]any)) != 1 {
		t.Errorf("orders after the race: %d %v, want exactly 1", code, body)
	}
}

func TestValidationErrors(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withDestination("crm"))

	cases := []struct {
		name   string
		mutate func(*fulfillmentv1.CreateOrderRequest)
		field  string
	}{
		{"missing org", func(r *fulfillmentv1.CreateOrderRequest) { r.OrgId = "" }, "org_id"},
		{"missing merchant id", func(r *fulfillmentv1.CreateOrderRequest) { r.MerchantOrderId = "" }, "merchant_order_id"},
		{"unknown environment", func(r *fulfillmentv1.CreateOrderRequest) { r.Environment = "staging" }, "environment"},
		{"unknown kind", func(r *fulfillmentv1.CreateOrderRequest) { r.Lines[0].Kind = "voucher" }, "lines[0].kind"},
		{"zero quantity", func(r *fulfillmentv1.CreateOrderRequest) { r.Lines[0].Quantity = 0 }, "lines[0].quantity"},
		{"negative quantity", func(r *fulfillmentv1.CreateOrderRequest) { r.Lines[1].Quantity = -1 }, "lines[1].quantity"},
		{"zero price", func(r *fulfillmentv1.CreateOrderRequest) { r.Lines[0].UnitPrice.MinorUnits = 0 }, "lines[0].unit_price.minor_units"},
		{"negative price", func(r *fulfillmentv1.CreateOrderRequest) { r.Lines[0].UnitPrice.MinorUnits = -5 }, "lines[0].unit_price.minor_units"},
		{"no lines", func(r *fulfillmentv1.CreateOrderRequest) { r.Lines = nil }, "lines"},
		{"non-decimal amount", func(r *fulfillmentv1.CreateOrderRequest) { r.Settlement.Amount = "25,00" }, "settlement.amount"},
		{"negative amount", func(r *fulfillmentv1.CreateOrderRequest) { r.Settlement.Amount = "-25" }, "settlement.amount"},
		{"exponent amount", func(r *fulfillmentv1.CreateOrderRequest) { r.Settlement.Amount = "1e3" }, "settlement.amount"},
		{"over-long merchant id", func(r *fulfillmentv1.CreateOrderRequest) { r.MerchantOrderId = strings.Repeat("x", 129) }, "merchant_order_id"},
		{"balance credit without account", func(r *fulfillmentv1.CreateOrderRequest) { r.Lines[1].AccountRef = "" }, "lines[1].account_ref"},
		{"external line without destination", func(r *fulfillmentv1.CreateOrderRequest) {
			r.Lines[0] = &fulfillmentv1.OrderLine{Sku: "box", Kind: "external", Quantity: 1, UnitPrice: r.Lines[0].UnitPrice}
		}, "lines[0].destination"},
		{"unknown destination", func(r *fulfillmentv1.CreateOrderRequest) {
			r.Lines[0] = &fulfillmentv1.OrderLine{Sku: "box", Kind: "external", Quantity: 1, UnitPrice: r.Lines[0].UnitPrice, Destination: "shipping"}
		}, "lines[0].destination"},
	}
	// The cases run in parallel, all done before the checks below.
	t.Run("cases", func(t *testing.T) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				req := orderRequest("org_a", "bad-"+tc.field)
				tc.mutate(req)
				// Its own deadline: parallel subtests wait for a free slot, which
				// on a loaded machine can take longer than one.
				_, err := ts.client.CreateOrder(withToken(tokOps), req)
				st := status.Convert(err)
				if st.Code() != codes.InvalidArgument {
					t.Fatalf("code = %v (%v), want InvalidArgument", st.Code(), err)
				}
				var fields []string
				for _, d := range st.Details() {
					if br, ok := d.(*errdetails.BadRequest); ok {
						for _, v := range br.GetFieldViolations() {
							fields = append(fields, v.GetField())
							if v.GetDescription() == "" {
								t.Errorf("violation of %s has no description", v.GetField())
							}
						}
					}
				}
				if len(fields) == 0 || fields[0] != tc.field {
					t.Errorf("field violations = %v, want %s", fields, tc.field)
				}
			})
		}
	})

	// Over REST: 400 with the violation in the details.
	body := orderBody("org_a", "rest-bad")
	body["lines"].([]any)[0].(map[string]any)["quantity"] = 0
	code, resp := ts.do(t, "POST", "/v1/orders", tokOps, body)
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(resp["details"]), "lines[0].quantity") {
		t.Errorf("REST validation = %d %v", code, resp)
	}
	// Every field of the error says something: no empty reason, no nulls.
	for _, d := range resp["details"].([]any) {
		for _, v := range d.(map[string]any)["field_violations"].([]any) {
			for k, x := range v.(map[string]any) {
				if x == "" || x == nil {
					t.Errorf("REST field violation %v has an empty %s", v, k)
				}
			}
		}
	}
	// A misspelt field is refused, not ignored, in words without the
	// library's prefix.
	body = orderBody("org_a", "rest-typo")
	body["merchantOrderID"] = "x"
	if code, resp := ts.do(t, "POST", "/v1/orders", tokOps, body); code != http.StatusBadRequest ||
		!strings.HasPrefix(fmt.Sprint(resp["message"]), `the request body has an unknown field "merchantOrderID" at line 1, column `) {
		t.Errorf("unknown JSON field = %d %v, want 400 naming the field", code, resp)
	}
	if code, resp := ts.do(t, "GET", "/v1/orders/not-an-id", tokOps, nil); code != http.StatusBadRequest {
		t.Errorf("malformed order id = %d %v, want 400", code, resp)
	}
	if code, resp := ts.do(t, "GET", "/v1/orders?state=lost", tokOps, nil); code != http.StatusBadRequest {
		t.Errorf("unknown state filter = %d %v, want 400", code, resp)
	}
	if code, resp := ts.do(t, "GET", "/v1/orders?page_token=garbage", tokOps, nil); code != http.StatusBadRequest {
		t.Errorf("bad page token = %d %v, want 400", code, resp)
	}

	// Nothing was stored by any of it.
	list, err := ts.client.ListOrders(withToken(tokOps), &fulfillmentv1.ListOrdersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetOrders()); n != 0 {
		t.Errorf("%d orders stored by invalid requests", n)
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)

	aCode, a := ts.do(t, "POST", "/v1/orders", tokCheckout, orderBody("org_a", "a-1"))
	bCode, b := ts.do(t, "POST", "/v1/orders", tokOrgB, orderBody("org_b", "b-1"))
	if aCode != 200 || bCode != 200 {
		t.Fatalf("setup: %d %v / %d %v", aCode, a, bCode, b)
	}
	aID := a["order"].(map[string]any)["id"].(string)
	bID := b["order"].(map[string]any)["id"].(string)

	cases := []struct {
		name, method, path, token string
		body                      any
		want                      int
	}{
		{"no token", "GET", "/v1/orders/" + aID, "", nil, 401},
		{"unknown token", "GET", "/v1/orders/" + aID, "tok-nobody-0123456789", nil, 401},
		{"missing scope to create", "POST", "/v1/orders", tokReader, orderBody("org_a", "r-1"), 403},
		{"missing scope to read", "GET", "/v1/orders/" + aID, tokIngest, nil, 403},
		{"create for another org", "POST", "/v1/orders", tokCheckout, orderBody("org_b", "x-1"), 403},
		{"read another org's order (as an unknown one)", "GET", "/v1/orders/" + bID, tokCheckout, nil, 404},
		{"list another org", "GET", "/v1/orders?org_id=org_b", tokCheckout, nil, 403},
		{"reader reads own org", "GET", "/v1/orders/" + aID, tokReader, nil, 200},
		{"admin reads any org", "GET", "/v1/orders/" + bID, tokOps, nil, 200},
	}
	// Not parallel: the checks after the loop count what these requests
	// stored, and parallel subtests would only run after them.
	for _, tc := range cases { //nolint:paralleltest // see above
		t.Run(tc.name, func(t *testing.T) {
			code, body := ts.do(t, tc.method, tc.path, tc.token, tc.body)
			if code != tc.want {
				t.Errorf("%s %s = %d %v, want %d", tc.method, tc.path, code, body, tc.want)
			}
		})
	}

	// Listing without an org filter shows only the caller's orgs.
	_, body := ts.do(t, "GET", "/v1/orders", tokCheckout, nil)
	orders := body["orders"].([]any)
	if len(orders) != 1 || orders[0].(map[string]any)["org_id"] != "org_a" {
		t.Errorf("org_a token lists %v", orders)
	}
	_, body = ts.do(t, "GET", "/v1/orders", tokOps, nil)
	if n := len(body["orders"].([]any)); n != 2 {
		t.Errorf("admin lists %d orders, want 2", n)
	}

	// The same over gRPC, with the codes.
	_, err := ts.client.GetOrder(withToken(""), &fulfillmentv1.GetOrderRequest{OrderId: aID})
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC without token: %v", err)
	}
	_, err = ts.client.GetOrder(withToken(tokCheckout), &fulfillmentv1.GetOrderRequest{OrderId: bID})
	_, unknown := ts.client.GetOrder(withToken(tokCheckout), &fulfillmentv1.GetOrderRequest{OrderId: "01890a5d-ac96-774b-bcce-b302099a8057"})
	if status.Code(err) != codes.NotFound || status.Convert(err).Message() != status.Convert(unknown).Message() {
		t.Errorf("gRPC cross-org: %v, want NOT_FOUND as an unknown order's %v", err, unknown)
	}
	// Refused creates stored nothing.
	_, body = ts.do(t, "GET", "/v1/orders", tokOps, nil)
	if n := len(body["orders"].([]any)); n != 2 {
		t.Errorf("refused requests changed the order count to %d", n)
	}
	// Two tokens in one request: neither is taken, whichever comes first.
	pairs := [][]string{{tokOps, "tok-nobody-0123456789"}, {"tok-nobody-0123456789", tokOps}}
	for _, pair := range pairs { //nolint:paralleltest // two requests, not cases
		req, err := http.NewRequest("GET", ts.httpURL+"/v1/orders/"+aID, http.NoBody)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range pair {
			req.Header.Add("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(msg), "more than one authorization header") {
			t.Errorf("REST with two Authorization headers: %d %s, want 401 saying so", resp.StatusCode, msg)
		}
		md := metadata.Pairs("authorization", "Bearer "+pair[0], "authorization", "Bearer "+pair[1])
		_, err = ts.client.GetOrder(metadata.NewOutgoingContext(context.Background(), md), &fulfillmentv1.GetOrderRequest{OrderId: aID})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("gRPC with two authorization values: %v, want UNAUTHENTICATED", err)
		}
	}
	// What was refused is in the log: a REST request refused before its
	// call, and the caller of a call refused for its scope.
	logs := ts.logs.String()
	if !strings.Contains(logs, `"msg":"rest request refused"`) || !strings.Contains(logs, "unknown bearer token") {
		t.Error("no log line for the REST requests refused for their token")
	}
	if !regexp.MustCompile(`"code":"PermissionDenied"[^\n]*"caller":"reader"|"caller":"reader"[^\n]*"code":"PermissionDenied"`).MatchString(logs) {
		t.Errorf("the call refused for its scope does not name its caller:\n%s", logs)
	}
	if strings.Contains(logs, tokCheckout) || strings.Contains(logs, tokOps) {
		t.Error("a token value appears in the logs")
	}
}

func TestListPaging(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	ctx := withToken(tokCheckout)
	for i := range 7 {
		if _, err := ts.client.CreateOrder(ctx, orderRequest("org_a", fmt.Sprintf("p-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	token := ""
	pages := 0
	for {
		resp, err := ts.client.ListOrders(ctx, &fulfillmentv1.ListOrdersRequest{OrgId: "org_a", PageSize: 3, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, o := range resp.GetOrders() {
			if seen[o.GetId()] {
				t.Errorf("order %s on two pages", o.GetId())
			}
			seen[o.GetId()] = true
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
		// A token is bound to its filters.
		_, err = ts.client.ListOrders(ctx, &fulfillmentv1.ListOrdersRequest{OrgId: "org_a", State: "fulfilled", PageToken: token})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("token with other filters: %v, want InvalidArgument", err)
		}
	}
	if len(seen) != 7 || pages != 3 {
		t.Errorf("saw %d orders in %d pages, want 7 in 3", len(seen), pages)
	}
}

// withDestination configures a destination id (deliveries are not made in
// these tests).
func withDestination(id string) func(*config.Config) {
	return func(c *config.Config) {
		idempotent := true
		c.Destinations = append(c.Destinations, config.Destination{ID: id, URL: "http://127.0.0.1:1/", Idempotent: &idempotent}.WithDefaults())
	}
}

// An external line names a configured destination; the order keeps it.
func TestExternalLineDestination(t *testing.T) {
	t.Parallel()
	ts := startServer(t, withDestination("crm"))
	ctx := withToken(tokCheckout)
	req := orderRequest("org_a", "ext-1")
	req.Lines = append(req.Lines, &fulfillmentv1.OrderLine{Sku: "box", Kind: "external", Quantity: 2,
		UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 300}, Destination: "crm"})
	created, err := ts.client.CreateOrder(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ts.client.GetOrder(ctx, &fulfillmentv1.GetOrderRequest{OrderId: created.GetOrder().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	lines := got.GetOrder().GetLines()
	if len(lines) != 3 || lines[2].GetDestination() != "crm" || lines[0].GetDestination() != "" {
		t.Errorf("lines = %v, want the external one naming crm", lines)
	}
	// The same order again is a repeat; another destination is a conflict.
	if again, err := ts.client.CreateOrder(ctx, req); err != nil || again.GetCreated() {
		t.Errorf("repeat = %v, %v; want the existing order", again, err)
	}
	req.Lines[2].Destination = "crm2"
	if _, err := ts.client.CreateOrder(ctx, req); status.Code(err) != codes.InvalidArgument {
		t.Errorf("unconfigured destination: %v, want InvalidArgument", err)
	}
}
