package fakebank_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

const (
	terminal = "FakeTerminalDEMO"
	password = "TerminalPassword1"
)

var endpoint = fulfillment.Endpoint{ID: "tbank-test", Provider: fulfillment.ProviderTBank, OrgID: "org_a", Environment: fulfillment.EnvTest}

func start(t *testing.T, o fakebank.Options) *fakebank.Bank {
	t.Helper()
	o.TerminalKey, o.Password = terminal, []byte(password)
	if o.RetryInterval == 0 {
		o.RetryInterval = 5 * time.Millisecond
	}
	b, err := fakebank.New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("closing the bank: %v", err)
		}
	})
	return b
}

func wait(t *testing.T, b *fakebank.Bank) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := b.Wait(ctx); err != nil {
		t.Fatal(err)
	}
}

// call signs req with pw, posts it to method and returns the answer, its
// numbers as json.Number.
func call(t *testing.T, b *fakebank.Bank, pw, method string, req map[string]any) map[string]any {
	t.Helper()
	if _, ok := req["TerminalKey"]; !ok {
		req["TerminalKey"] = terminal
	}
	unsigned, _ := json.Marshal(req)
	tok, err := tbank.Token(unsigned, []byte(pw))
	if err != nil {
		t.Fatal(err)
	}
	req["Token"] = tok
	body, _ := json.Marshal(req)
	status, answer := post(t, b.URL()+"/v2/"+method, "application/json", body)
	if status != http.StatusOK {
		t.Fatalf("%s: HTTP %d %s", method, status, answer)
	}
	dec := json.NewDecoder(strings.NewReader(answer))
	dec.UseNumber()
	var a map[string]any
	if err := dec.Decode(&a); err != nil {
		t.Fatalf("%s answered %s: %v", method, answer, err)
	}
	return a
}

func post(t *testing.T, u, contentType string, body []byte) (status int, answer string) {
	t.Helper()
	resp, err := http.Post(u, contentType, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// succeeded reports whether an answer says Success true.
func succeeded(a map[string]any) bool {
	ok, _ := a["Success"].(bool)
	return ok
}

// initPayment creates a payment of amount for order and returns its id.
func initPayment(t *testing.T, b *fakebank.Bank, order string, amount int64, extra map[string]any) string {
	t.Helper()
	req := map[string]any{"OrderId": order, "Amount": amount}
	for k, v := range extra {
		req[k] = v
	}
	a := call(t, b, password, "Init", req)
	if !succeeded(a) || a["Status"] != "NEW" {
		t.Fatalf("Init: %v", a)
	}
	return fmt.Sprint(a["PaymentId"])
}

// receiver is a notification receiver that verifies and parses each
// notification with the T-Bank adapter, and answers as plan says.
type receiver struct {
	srv  *httptest.Server
	url  string
	plan func(n int) (int, string) // n counts requests from 1

	mu     sync.Mutex
	n      int
	bodies [][]byte
	events []fulfillment.ProviderEvent
	forged int
}

func newReceiver(t *testing.T, plan func(n int) (int, string)) *receiver {
	t.Helper()
	r := &receiver{plan: plan}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.n++
		n := r.n
		r.bodies = append(r.bodies, body)
		if err := tbank.Verify(body, [][]byte{[]byte(password)}); err != nil {
			r.forged++
			r.mu.Unlock()
			http.Error(w, "invalid Token", http.StatusUnauthorized)
			return
		}
		ev, err := tbank.Parse(endpoint, terminal, body)
		if err != nil {
			r.mu.Unlock()
			t.Errorf("the adapter refuses a notification: %v\n%s", err, body)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.events = append(r.events, ev)
		r.mu.Unlock()
		status, answer := http.StatusOK, "OK"
		if r.plan != nil {
			status, answer = r.plan(n)
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	r.srv, r.url = srv, srv.URL+"/webhooks/tbank-test"
	return r
}

// types returns the statuses of the notifications verified, in order.
func (r *receiver) types() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.events {
		out = append(out, ev.Type)
	}
	return out
}

func (r *receiver) counts() (requests, forged int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n, r.forged
}

func TestNew(t *testing.T) {
	t.Parallel()
	for _, o := range []fakebank.Options{{Password: []byte(password)}, {TerminalKey: terminal}} {
		if b, err := fakebank.New(o); err == nil {
			_ = b.Close()
			t.Errorf("New(%+v) accepted", o)
		}
	}
	if _, err := fakebank.New(fakebank.Options{TerminalKey: terminal, Password: []byte(password), Addr: "256.0.0.1:1"}); err == nil {
		t.Error("New listened on an impossible address")
	}
}

func TestAPIRefusals(t *testing.T) {
	t.Parallel()
	b := start(t, fakebank.Options{})
	id := initPayment(t, b, "att_1", 100, nil)
	cases := []struct {
		name, pw, method string
		req              map[string]any
		code             string
	}{
		{"wrong password", "AnotherPassword", "Init", map[string]any{"OrderId": "att_2", "Amount": 100}, fakebank.CodeBadToken},
		{"another terminal", password, "GetState", map[string]any{"TerminalKey": "Other", "PaymentId": id}, fakebank.CodeBadToken},
		{"no OrderId", password, "Init", map[string]any{"Amount": 100}, fakebank.CodeBadRequest},
		{"zero Amount", password, "Init", map[string]any{"OrderId": "att_2"}, fakebank.CodeBadRequest},
		{"Amount a string", password, "Init", map[string]any{"OrderId": "att_2", "Amount": "100"}, fakebank.CodeBadRequest},
		{"PayType X", password, "Init", map[string]any{"OrderId": "att_2", "Amount": 1, "PayType": "X"}, fakebank.CodeBadRequest},
		{"NotificationURL not http", password, "Init", map[string]any{"OrderId": "att_2", "Amount": 1, "NotificationURL": "mailto:x@y"}, fakebank.CodeBadRequest},
		{"repeated OrderId", password, "Init", map[string]any{"OrderId": "att_1", "Amount": 100}, fakebank.CodeDuplicateOrder},
		{"no PaymentId", password, "GetState", map[string]any{}, fakebank.CodeBadRequest},
		{"unknown payment", password, "GetState", map[string]any{"PaymentId": "1"}, fakebank.CodeNotFound},
		{"confirm a NEW payment", password, "Confirm", map[string]any{"PaymentId": id}, fakebank.CodeTransition},
		{"cancel part of a NEW payment", password, "Cancel", map[string]any{"PaymentId": id, "Amount": 50}, fakebank.CodeTransition},
		{"cancel more than paid", password, "Cancel", map[string]any{"PaymentId": id, "Amount": 101}, fakebank.CodeTransition},
	}
	for _, tc := range cases {
		a := call(t, b, tc.pw, tc.method, tc.req)
		if succeeded(a) || a["ErrorCode"] != tc.code || a["Message"] == "" {
			t.Errorf("%s: %v, want Success false and ErrorCode %s", tc.name, a, tc.code)
		}
	}
	if got := call(t, b, password, "Init", map[string]any{"OrderId": "att_1", "Amount": 100}); fmt.Sprint(got["PaymentId"]) != id {
		t.Errorf("a repeated OrderId names %v, want %s", got["PaymentId"], id)
	}
	if n := len(b.Payments()); n != 1 {
		t.Errorf("%d payments after refusals, want 1", n)
	}

	// Below the API: HTTP errors.
	for _, tc := range []struct {
		name, method, path, body string
		want                     int
	}{
		{"not JSON", http.MethodPost, "/v2/Init", "OrderId=1", http.StatusOK},
		{"unknown method", http.MethodPost, "/v2/Charge", "{}", http.StatusNotFound},
		{"GET", http.MethodGet, "/v2/Init", "", http.StatusMethodNotAllowed},
		{"too large", http.MethodPost, "/v2/Init", `{"Description":"` + strings.Repeat("x", fakebank.MaxBodyBytes) + `"}`, http.StatusRequestEntityTooLarge},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), tc.method, b.URL()+tc.path, strings.NewReader(tc.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: HTTP %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusOK && !strings.Contains(string(body), `"ErrorCode":"`+fakebank.CodeBadRequest+`"`) {
			t.Errorf("%s: %s", tc.name, body)
		}
	}
}

// Confirm and Cancel over the API, two-stage and one-stage, with the
// notifications each change sends.
func TestConfirmAndCancel(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, nil)
	b := start(t, fakebank.Options{TwoStage: true, NotificationURL: r.url})

	two := initPayment(t, b, "att_two", 1000, nil)
	if err := b.Pay(two); err != nil {
		t.Fatal(err)
	}
	if a := call(t, b, password, "GetState", map[string]any{"PaymentId": two}); a["Status"] != "AUTHORIZED" {
		t.Fatalf("a paid two-stage payment is %v, want AUTHORIZED", a["Status"])
	}
	for i := range 2 { // a repeated Confirm succeeds and sends nothing
		if a := call(t, b, password, "Confirm", map[string]any{"PaymentId": two}); !succeeded(a) || a["Status"] != "CONFIRMED" {
			t.Fatalf("Confirm %d: %v", i+1, a)
		}
	}
	a := call(t, b, password, "Cancel", map[string]any{"PaymentId": json.Number(two), "Amount": 300})
	if a["Status"] != "PARTIAL_REFUNDED" || a["OriginalAmount"] != json.Number("1000") || a["NewAmount"] != json.Number("700") {
		t.Fatalf("partial Cancel: %v", a)
	}
	if a = call(t, b, password, "Cancel", map[string]any{"PaymentId": two}); a["Status"] != "REFUNDED" || a["NewAmount"] != json.Number("0") {
		t.Fatalf("Cancel of the rest: %v", a)
	}
	if a = call(t, b, password, "Cancel", map[string]any{"PaymentId": two}); a["ErrorCode"] != fakebank.CodeTransition {
		t.Fatalf("Cancel of a refunded payment: %v", a)
	}

	reversed := initPayment(t, b, "att_reversed", 500, nil)
	if err := b.Pay(reversed); err != nil {
		t.Fatal(err)
	}
	if err := b.Cancel(reversed, 100); err != nil {
		t.Fatal(err)
	}
	if err := b.Cancel(reversed, 0); err != nil {
		t.Fatal(err)
	}
	canceled := initPayment(t, b, "att_canceled", 500, nil)
	if a := call(t, b, password, "Cancel", map[string]any{"PaymentId": canceled}); a["Status"] != "CANCELED" {
		t.Fatalf("Cancel of a NEW payment: %v", a)
	}
	one := initPayment(t, b, "att_one", 500, map[string]any{"PayType": "O"})
	if err := b.Pay(one); err != nil {
		t.Fatal(err)
	}
	if err := b.Pay(one); err == nil {
		t.Error("paying twice succeeded")
	}
	wait(t, b)

	want := []string{"AUTHORIZED", "CONFIRMED", "PARTIAL_REFUNDED", "REFUNDED",
		"AUTHORIZED", "PARTIAL_REVERSED", "REVERSED", "CANCELED", "AUTHORIZED", "CONFIRMED"}
	if got := r.types(); !slices.Equal(got, want) {
		t.Errorf("notified %v, want %v", got, want)
	}
	var amounts []int64
	for _, n := range b.Notifications() {
		amounts = append(amounts, n.Amount)
	}
	if want := []int64{1000, 1000, 300, 700, 500, 100, 400, 500, 500, 500}; !slices.Equal(amounts, want) {
		t.Errorf("notified amounts %v, want %v", amounts, want)
	}
	if p, _ := b.Payment(two); p.Status != "REFUNDED" || p.Remaining != 0 || p.Amount != 1000 || !p.TwoStage {
		t.Errorf("payment %+v", p)
	}
	if p, _ := b.Payment(one); p.Status != "CONFIRMED" || p.TwoStage {
		t.Errorf("payment %+v", p)
	}
}

// Notification bodies: the members the bank sends, PaymentId a number or
// a string, RebillId and CustomerKey for recurrent payments, DATA as given
// at Init.
func TestNotificationBody(t *testing.T) {
	t.Parallel()
	for _, asString := range []bool{false, true} {
		t.Run(fmt.Sprintf("PaymentId as string %v", asString), func(t *testing.T) {
			t.Parallel()
			r := newReceiver(t, nil)
			b := start(t, fakebank.Options{NotificationURL: "http://127.0.0.1:1/unused", PaymentIDAsString: asString})
			id := initPayment(t, b, "att_1", 9855, map[string]any{"Recurrent": "Y", "CustomerKey": "cust_1", "NotificationURL": r.url,
				"DATA": map[string]string{"Email": "a@test.com"}})
			if err := b.Pay(id); err != nil {
				t.Fatal(err)
			}
			wait(t, b)
			r.mu.Lock()
			defer r.mu.Unlock()
			if len(r.bodies) != 2 {
				t.Fatalf("%d notifications", len(r.bodies))
			}
			var n map[string]any
			dec := json.NewDecoder(bytes.NewReader(r.bodies[1]))
			dec.UseNumber()
			if err := dec.Decode(&n); err != nil {
				t.Fatal(err)
			}
			var wantID any = json.Number(id)
			if asString {
				wantID = id
			}
			for k, v := range map[string]any{"TerminalKey": terminal, "OrderId": "att_1", "Success": true, "Status": "CONFIRMED",
				"PaymentId": wantID, "ErrorCode": "0", "Amount": json.Number("9855"), "Pan": "430000******0777", "CustomerKey": "cust_1"} {
				if n[k] != v {
					t.Errorf("%s = %#v, want %#v", k, n[k], v)
				}
			}
			for _, k := range []string{"CardId", "ExpDate", "RebillId", "Token"} {
				if n[k] == nil {
					t.Errorf("no %s in %s", k, r.bodies[1])
				}
			}
			if d, _ := n["DATA"].(map[string]any); d["Email"] != "a@test.com" {
				t.Errorf("DATA = %v", n["DATA"])
			}
			ev := r.events[1]
			if ev.EventID != terminal+":"+id+":CONFIRMED" || ev.Payment.SubscriptionID == "" {
				t.Errorf("parsed %+v", ev)
			}
		})
	}
}

// Init's Recurrent, as the bank documents it: Y or absent, with a
// CustomerKey of 36 characters at most. A recurrent payment binds the card
// once paid, and Charge charges that binding again: a payment of its own,
// notified with the binding's RebillId; a binding never issued is refused.
func TestRecurrent(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, nil)
	b := start(t, fakebank.Options{NotificationURL: r.url})
	for name, tc := range map[string]struct {
		extra map[string]any
		want  string
	}{
		"Recurrent without CustomerKey": {map[string]any{"Recurrent": "Y"}, "CustomerKey is required"},
		"Recurrent other than Y":        {map[string]any{"Recurrent": "yes", "CustomerKey": "cust_1"}, "Recurrent must be Y"},
		"CustomerKey too long":          {map[string]any{"Recurrent": "Y", "CustomerKey": strings.Repeat("к", 37)}, "at most 36 characters"},
	} {
		req := map[string]any{"OrderId": "refused", "Amount": 100}
		for k, v := range tc.extra {
			req[k] = v
		}
		if a := call(t, b, password, "Init", req); succeeded(a) || a["ErrorCode"] != fakebank.CodeBadRequest ||
			!strings.Contains(fmt.Sprint(a["Message"]), tc.want) {
			t.Errorf("%s: Init answered %v, want refused: %s", name, a, tc.want)
		}
	}
	if n := len(b.Payments()); n != 0 {
		t.Fatalf("%d payments after refused Inits", n)
	}

	// 36 characters, though more bytes, is the longest key.
	key := strings.Repeat("к", 36)
	first := initPayment(t, b, "att_1", 500, map[string]any{"Recurrent": "Y", "CustomerKey": key})
	plain := initPayment(t, b, "att_2", 500, nil)
	if _, err := b.Charge("7"+first, "charge_0", 500); !errors.Is(err, fakebank.ErrNoBinding) {
		t.Errorf("Charge before the card was bound: %v, want ErrNoBinding", err)
	}
	for _, id := range []string{first, plain} {
		if err := b.Pay(id); err != nil {
			t.Fatal(err)
		}
	}
	p, _ := b.Payment(first)
	if !p.Recurrent || p.CustomerKey != key || p.RebillID == "" {
		t.Fatalf("recurrent payment %+v, want its CustomerKey and a RebillId", p)
	}
	if q, _ := b.Payment(plain); q.Recurrent || q.CustomerKey != "" || q.RebillID != "" {
		t.Errorf("plain payment %+v, want no binding", q)
	}
	charge, err := b.Charge(p.RebillID, "charge_1", 700)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Charge(p.RebillID, "charge_1", 700); !errors.Is(err, fakebank.ErrTransition) {
		t.Errorf("a second charge under the same OrderId: %v, want refused", err)
	}
	if _, err := b.Charge("7"+plain, "charge_2", 700); !errors.Is(err, fakebank.ErrNoBinding) {
		t.Errorf("Charge of a payment that bound no card: %v, want ErrNoBinding", err)
	}
	wait(t, b)
	if c, _ := b.Payment(charge); c.Status != "CONFIRMED" || c.ChargeOf != p.RebillID || c.Amount != 700 {
		t.Errorf("charge %+v, want CONFIRMED of 700 with binding %s", c, p.RebillID)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// Two notifications of each payment, each verified and parsed.
	if len(r.events) != 6 || r.forged != 0 {
		t.Fatalf("%d notifications parsed, %d forged; want 6, none forged", len(r.events), r.forged)
	}
	for i, ev := range r.events {
		wantSub, wantKey := "", false
		switch ev.Payment.PaymentID {
		case first:
			wantSub, wantKey = p.RebillID, true
		case charge:
			wantSub = p.RebillID
		}
		gotKey := bytes.Contains(r.bodies[i], []byte(`"CustomerKey"`))
		if ev.Payment.SubscriptionID != wantSub || gotKey != wantKey {
			t.Errorf("notification %s: RebillId %q, want %q; CustomerKey sent %v, want %v", ev.EventID, ev.Payment.SubscriptionID,
				wantSub, gotKey, wantKey)
		}
	}
}

// A notification not answered exactly OK is sent again, a bounded number
// of times.
func TestRetries(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		plan         func(n int) (int, string)
		wantAttempts int
		wantAcked    bool
	}{
		{"OK at once", nil, 1, true},
		{"OK at the third", func(n int) (int, string) {
			if n < 3 {
				return http.StatusServiceUnavailable, "busy"
			}
			return http.StatusOK, "OK"
		}, 3, true},
		{"200 without OK", func(int) (int, string) { return http.StatusOK, "" }, 4, false},
		{"ok in lowercase", func(int) (int, string) { return http.StatusOK, "ok" }, 4, false},
		{"OK with a newline", func(int) (int, string) { return http.StatusOK, "OK\n" }, 4, false},
		{"OK with 201", func(int) (int, string) { return http.StatusCreated, "OK" }, 4, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newReceiver(t, tc.plan)
			b := start(t, fakebank.Options{NotificationURL: r.url, Retries: 3, TwoStage: true})
			if err := b.Pay(initPayment(t, b, "att_1", 100, nil)); err != nil {
				t.Fatal(err)
			}
			wait(t, b)
			ns := b.Notifications()
			if len(ns) != 1 || len(ns[0].Attempts) != tc.wantAttempts || ns[0].Acked() != tc.wantAcked {
				t.Fatalf("notifications %+v, want %d attempts", ns, tc.wantAttempts)
			}
			if last := ns[0].Attempts[tc.wantAttempts-1]; last.HTTPStatus == 0 || last.Copy != 1 {
				t.Errorf("last attempt %+v", last)
			}
		})
	}
	t.Run("no retries", func(t *testing.T) {
		t.Parallel()
		b := start(t, fakebank.Options{NotificationURL: "http://127.0.0.1:1/closed", Retries: -1, TwoStage: true})
		if err := b.Pay(initPayment(t, b, "att_1", 100, nil)); err != nil {
			t.Fatal(err)
		}
		wait(t, b)
		if ns := b.Notifications(); len(ns) != 1 || len(ns[0].Attempts) != 1 || ns[0].Attempts[0].Err == "" || ns[0].Acked() {
			t.Fatalf("notifications %+v, want one failed attempt", ns)
		}
	})
}

// Repeat sends the copies of a notification at the same time: the
// receiver holds each until all have arrived.
func TestRepeatConcurrently(t *testing.T) {
	t.Parallel()
	const copies = 3
	var mu sync.Mutex
	arrived := 0
	all := make(chan struct{})
	r := newReceiver(t, func(int) (int, string) {
		mu.Lock()
		arrived++
		if arrived == copies {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			return http.StatusOK, "OK"
		case <-time.After(5 * time.Second):
			return http.StatusServiceUnavailable, "the copies came one after the other"
		}
	})
	b := start(t, fakebank.Options{NotificationURL: r.url, TwoStage: true, Retries: -1,
		Misbehaviour: fakebank.Misbehaviour{Repeat: copies}})
	if err := b.Pay(initPayment(t, b, "att_1", 100, nil)); err != nil {
		t.Fatal(err)
	}
	wait(t, b)
	ns := b.Notifications()
	if len(ns) != 1 || ns[0].Copies != copies || len(ns[0].Attempts) != copies {
		t.Fatalf("notifications %+v", ns)
	}
	for _, a := range ns[0].Attempts {
		if !a.OK {
			t.Errorf("attempt %+v", a)
		}
	}
	if got := r.types(); len(got) != copies {
		t.Errorf("received %v", got)
	}
}

func TestHoldAndRelease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		order fakebank.Order
		want  []string
	}{
		{fakebank.InOrder, []string{"AUTHORIZED", "CONFIRMED", "PARTIAL_REFUNDED", "REFUNDED"}},
		{fakebank.Reversed, []string{"REFUNDED", "PARTIAL_REFUNDED", "CONFIRMED", "AUTHORIZED"}},
		{fakebank.Shuffled, nil},
	} {
		t.Run(fmt.Sprint(tc.order), func(t *testing.T) {
			t.Parallel()
			r := newReceiver(t, nil)
			b := start(t, fakebank.Options{NotificationURL: r.url, Misbehaviour: fakebank.Misbehaviour{Hold: true}})
			id := initPayment(t, b, "att_1", 100, nil)
			for _, err := range []error{b.Pay(id), b.Cancel(id, 40), b.Cancel(id, 0)} {
				if err != nil {
					t.Fatal(err)
				}
			}
			wait(t, b)
			if n, _ := r.counts(); n != 0 {
				t.Fatalf("%d notifications arrived while held", n)
			}
			for _, n := range b.Notifications() {
				if !n.Held || len(n.Attempts) != 0 {
					t.Errorf("notification %+v, want held", n)
				}
			}
			b.SetMisbehaviour(fakebank.Misbehaviour{})
			if n := b.Release(tc.order); n != 4 {
				t.Fatalf("released %d, want 4", n)
			}
			wait(t, b)
			got := r.types()
			if tc.order == fakebank.Shuffled { // any order, each once
				slices.Sort(got)
				tc.want = []string{"AUTHORIZED", "CONFIRMED", "PARTIAL_REFUNDED", "REFUNDED"}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("received %v, want %v", got, tc.want)
			}
			if n := b.Release(fakebank.InOrder); n != 0 {
				t.Errorf("released %d more", n)
			}
		})
	}
}

func TestWrongTokenAndDrop(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, nil)
	b := start(t, fakebank.Options{NotificationURL: r.url, Retries: 1, Misbehaviour: fakebank.Misbehaviour{WrongToken: true}})
	if err := b.Pay(initPayment(t, b, "att_1", 100, nil)); err != nil {
		t.Fatal(err)
	}
	wait(t, b)
	if n, forged := r.counts(); n != 4 || forged != 4 {
		t.Errorf("%d requests, %d refused; want 2 notifications sent twice, all refused", n, forged)
	}

	b.SetMisbehaviour(fakebank.Misbehaviour{Drop: true})
	id := initPayment(t, b, "att_2", 100, nil)
	if err := b.Pay(id); err != nil {
		t.Fatal(err)
	}
	wait(t, b)
	if n, _ := r.counts(); n != 4 {
		t.Errorf("%d requests, want no more once dropping", n)
	}
	ns := b.Notifications()
	if len(ns) != 4 || !ns[2].Dropped || !ns[3].Dropped || len(ns[3].Attempts) != 0 {
		t.Errorf("notifications %+v", ns)
	}
	if a := call(t, b, password, "GetState", map[string]any{"PaymentId": id}); a["Status"] != "CONFIRMED" {
		t.Errorf("GetState of a payment whose notifications were dropped: %v", a)
	}
}

// Without a NotificationURL, from Init or the options, nothing is sent.
func TestNoNotificationURL(t *testing.T) {
	t.Parallel()
	b := start(t, fakebank.Options{})
	if err := b.Pay(initPayment(t, b, "att_1", 100, nil)); err != nil {
		t.Fatal(err)
	}
	wait(t, b)
	for _, n := range b.Notifications() {
		if !n.Dropped || n.URL != "" {
			t.Errorf("notification %+v, want dropped", n)
		}
	}
}

func TestPayPage(t *testing.T) {
	t.Parallel()
	r := newReceiver(t, nil)
	b := start(t, fakebank.Options{NotificationURL: r.url})
	id := initPayment(t, b, "<b>att_1</b>", 12345, map[string]any{"Description": "Pro <licence>"})
	declined := initPayment(t, b, "att_2", 100, nil)
	p, _ := b.Payment(id)
	if p.PaymentURL != b.URL()+"/pay/"+id {
		t.Fatalf("PaymentURL %s", p.PaymentURL)
	}
	resp, err := http.Get(p.PaymentURL)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	for _, want := range []string{"&lt;b&gt;att_1&lt;/b&gt;", "Pro &lt;licence&gt;", "12345", "NEW", `value="pay"`, `value="decline"`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page has no %q:\n%s", want, page)
		}
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Errorf("Content-Type %s", ct)
	}

	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	press := func(id, action string) int {
		resp, err := noFollow.PostForm(b.URL()+"/pay/"+id, url.Values{"action": {action}})
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if got := press(id, "pay"); got != http.StatusSeeOther {
		t.Errorf("Pay: HTTP %d", got)
	}
	if got := press(id, "pay"); got != http.StatusConflict {
		t.Errorf("Pay again: HTTP %d, want 409", got)
	}
	if got := press(declined, "decline"); got != http.StatusSeeOther {
		t.Errorf("Decline: HTTP %d", got)
	}
	if got := press("999", "pay"); got != http.StatusNotFound {
		t.Errorf("Pay an unknown payment: HTTP %d", got)
	}
	if resp, err := http.Get(b.URL() + "/pay/999"); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("the page of an unknown payment: %v %v", resp.StatusCode, err)
	} else {
		_ = resp.Body.Close()
	}
	wait(t, b)
	if got := r.types(); !slices.Equal(got, []string{"AUTHORIZED", "CONFIRMED", "REJECTED"}) {
		t.Errorf("notified %v", got)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev := r.events[2]; ev.Kind != fulfillment.EventAttemptCancelled || ev.Refs[tbank.RefErrorCode] != fakebank.CodeDeclined {
		t.Errorf("the declined payment's event %+v", ev)
	}
}

// Introspection returns copies.
func TestPaymentsAreCopies(t *testing.T) {
	t.Parallel()
	b := start(t, fakebank.Options{FirstPaymentID: 500})
	initPayment(t, b, "att_1", 100, map[string]any{"DATA": map[string]string{"k": "v"}})
	initPayment(t, b, "att_2", 200, nil)
	ps := b.Payments()
	if len(ps) != 2 || ps[0].PaymentID != "500" || ps[1].PaymentID != "501" || ps[0].OrderID != "att_1" {
		t.Fatalf("payments %+v", ps)
	}
	ps[0].Data["k"] = "changed"
	if p, _ := b.Payment("500"); p.Data["k"] != "v" {
		t.Errorf("changing a copy changed the bank: %+v", p)
	}
	if _, ok := b.Payment("1"); ok {
		t.Error("Payment of an unknown id")
	}
}

// Close stops deliveries that hang or are being retried, and leaves no
// goroutine behind. Not parallel: it counts the process's goroutines.
//
//nolint:paralleltest // counts the goroutines of the whole test binary
func TestCloseLeavesNothingRunning(t *testing.T) {
	before := runtime.NumGoroutine()
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	failing := newReceiver(t, func(int) (int, string) { return http.StatusServiceUnavailable, "down" })

	b, err := fakebank.New(fakebank.Options{TerminalKey: terminal, Password: []byte(password), NotificationURL: failing.url,
		Retries: 1000, RetryInterval: 10 * time.Millisecond, Misbehaviour: fakebank.Misbehaviour{Repeat: 3}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Pay(initPayment(t, b, "att_1", 100, nil)); err != nil {
		t.Fatal(err)
	}
	hung := initPayment(t, b, "att_2", 100, map[string]any{"NotificationURL": hanging.URL})
	if err := b.Pay(hung); err != nil {
		t.Fatal(err)
	}
	b.SetMisbehaviour(fakebank.Misbehaviour{Hold: true})
	if err := b.Pay(initPayment(t, b, "att_3", 100, nil)); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if n, _ := failing.counts(); n >= 6 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the notifications are not being retried")
		}
		time.Sleep(5 * time.Millisecond)
	}

	t0 := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := b.Wait(t.Context()); err != nil && !errors.Is(err, fakebank.ErrClosed) {
		t.Errorf("Wait after Close: %v", err)
	}
	time.Sleep(50 * time.Millisecond) // requests written before Close reach the receiver
	n, _ := failing.counts()
	time.Sleep(100 * time.Millisecond)
	if m, _ := failing.counts(); m != n {
		t.Errorf("%d notifications sent after Close", m-n)
	}
	if _, err := http.Get(b.URL() + "/pay/1"); err == nil {
		t.Error("the bank still serves after Close")
	}

	close(release)
	hanging.Close()
	failing.srv.Close()
	http.DefaultClient.CloseIdleConnections()
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after Close:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
