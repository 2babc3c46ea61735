package tbank_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

const (
	terminal = "FakeTerminalDEMO"
	password = "TerminalPassword1"
)

// startBank starts a fake bank for terminal/password, closed when the test
// ends.
func startBank(t *testing.T, o fakebank.Options) *fakebank.Bank {
	t.Helper()
	o.TerminalKey, o.Password = terminal, []byte(password)
	if o.RetryInterval == 0 {
		o.RetryInterval = 10 * time.Millisecond
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

func newClient(t *testing.T, baseURL, pw string) *tbank.Client {
	t.Helper()
	c, err := tbank.NewClient(baseURL, terminal, [][]byte{[]byte(pw), []byte("OlderPassword")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}

// checkErrorText fails when err is on more than one line or shows the
// password or a Token.
func checkErrorText(t *testing.T, err error) {
	t.Helper()
	s := err.Error()
	if strings.ContainsAny(s, "\n\r") || strings.Contains(s, password) || strings.Contains(s, "Token\":") {
		t.Errorf("error text %q: one line, no password, no Token", s)
	}
}

func TestClientInit(t *testing.T) {
	t.Parallel()
	for _, asString := range []bool{false, true} {
		t.Run(fmt.Sprintf("PaymentId as string %v", asString), func(t *testing.T) {
			t.Parallel()
			bank := startBank(t, fakebank.Options{PaymentIDAsString: asString, FirstPaymentID: 8742591})
			c := newClient(t, bank.URL(), password)
			p, err := c.Init(ctx(t), tbank.InitRequest{
				OrderID: "att_1", Amount: 19200, Description: "Подарочная карта на 1000 рублей",
				NotificationURL: "http://127.0.0.1:1/hook", Data: map[string]string{"Email": "a@test.com"},
			})
			if err != nil {
				t.Fatal(err)
			}
			want := tbank.Payment{TerminalKey: terminal, OrderID: "att_1", PaymentID: "8742591", Status: "NEW",
				Amount: 19200, PaymentURL: bank.URL() + "/pay/8742591"}
			if p != want {
				t.Errorf("Init = %+v, want %+v", p, want)
			}
			got, ok := bank.Payment("8742591")
			if !ok || got.Description != "Подарочная карта на 1000 рублей" || got.NotificationURL != "http://127.0.0.1:1/hook" ||
				got.Data["Email"] != "a@test.com" || got.TwoStage {
				t.Errorf("the bank has %+v", got)
			}
			p2, err := c.Init(ctx(t), tbank.InitRequest{OrderID: "att_2", Amount: 1})
			if err != nil || p2.PaymentID != "8742592" {
				t.Errorf("second Init = %+v, %v; want PaymentId 8742592", p2, err)
			}
		})
	}
}

func TestClientDuplicateOrderID(t *testing.T) {
	t.Parallel()
	opts := tbank.Options{TerminalKey: terminal, DuplicateOrderCodes: []string{"77"}}
	for _, omit := range []bool{false, true} {
		t.Run(fmt.Sprintf("PaymentId omitted %v", omit), func(t *testing.T) {
			t.Parallel()
			bank := startBank(t, fakebank.Options{DuplicateCode: "77", OmitDuplicatePaymentID: omit})
			c := newClient(t, bank.URL(), password)
			first, err := c.Init(ctx(t), tbank.InitRequest{OrderID: "att_1", Amount: 100})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.Init(ctx(t), tbank.InitRequest{OrderID: "att_1", Amount: 100})
			be, ok := errors.AsType[*tbank.BankError](err)
			if !ok {
				t.Fatalf("repeated OrderId: %v, want a *BankError", err)
			}
			if _, unknown := errors.AsType[*tbank.UnknownOutcomeError](err); unknown {
				t.Errorf("a refusal is also an UnknownOutcomeError: %v", err)
			}
			wantID := first.PaymentID
			if omit {
				wantID = ""
			}
			if !opts.DuplicateOrder(be.Code) || be.PaymentID != wantID || be.Message == "" {
				t.Errorf("BankError %+v, want code 77 and PaymentId %q", be, wantID)
			}
			checkErrorText(t, err)
			if n := len(bank.Payments()); n != 1 {
				t.Errorf("the bank has %d payments, want 1", n)
			}
		})
	}
}

func TestClientGetState(t *testing.T) {
	t.Parallel()
	for _, asString := range []bool{false, true} {
		t.Run(fmt.Sprintf("PaymentId as string %v", asString), func(t *testing.T) {
			t.Parallel()
			bank := startBank(t, fakebank.Options{PaymentIDAsString: asString})
			c := newClient(t, bank.URL(), password)
			p, err := c.Init(ctx(t), tbank.InitRequest{OrderID: "att_1", Amount: 9855})
			if err != nil {
				t.Fatal(err)
			}
			s, err := c.GetState(ctx(t), p.PaymentID)
			want := tbank.Payment{TerminalKey: terminal, OrderID: "att_1", PaymentID: p.PaymentID, Status: "NEW", Amount: 9855}
			if err != nil || s != want {
				t.Fatalf("GetState = %+v, %v; want %+v", s, err, want)
			}
			if err := bank.Pay(p.PaymentID); err != nil {
				t.Fatal(err)
			}
			if s, err = c.GetState(ctx(t), p.PaymentID); err != nil || s.Status != tbank.StatusConfirmed {
				t.Errorf("GetState after paying = %+v, %v; want CONFIRMED", s, err)
			}
			_, err = c.GetState(ctx(t), "999")
			if be, ok := errors.AsType[*tbank.BankError](err); !ok || be.Code != fakebank.CodeNotFound {
				t.Errorf("GetState of an unknown payment: %v, want a *BankError %s", err, fakebank.CodeNotFound)
			}
		})
	}
}

func TestClientRefusedToken(t *testing.T) {
	t.Parallel()
	bank := startBank(t, fakebank.Options{})
	wrong := newClient(t, bank.URL(), "AnotherPassword")
	other, err := tbank.NewClient(bank.URL(), "OtherTerminal", [][]byte{[]byte(password)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, call := range map[string]func() error{
		"Init, wrong password":     func() error { _, err := wrong.Init(ctx(t), tbank.InitRequest{OrderID: "a", Amount: 1}); return err },
		"GetState, wrong password": func() error { _, err := wrong.GetState(ctx(t), "1000001"); return err },
		"Init, other terminal":     func() error { _, err := other.Init(ctx(t), tbank.InitRequest{OrderID: "a", Amount: 1}); return err },
	} {
		err := call()
		if be, ok := errors.AsType[*tbank.BankError](err); !ok || be.Code != fakebank.CodeBadToken {
			t.Errorf("%s: %v, want a *BankError %s", name, err, fakebank.CodeBadToken)
			continue
		}
		checkErrorText(t, err)
	}
	if n := len(bank.Payments()); n != 0 {
		t.Errorf("refused requests created %d payments", n)
	}
}

// recorder is a hand-written ingest.Recorder keeping the events in the
// order they came.
type recorder struct {
	mu     sync.Mutex
	events []fulfillment.ProviderEvent
}

func (r *recorder) RecordEvent(_ context.Context, ev fulfillment.ProviderEvent, _ []byte) (fulfillment.InboxReceipt, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
	return fulfillment.InboxReceipt{}, nil
}

func (r *recorder) all() []fulfillment.ProviderEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fulfillment.ProviderEvent(nil), r.events...)
}

var endpoint = fulfillment.Endpoint{ID: "tbank-test", Provider: fulfillment.ProviderTBank, OrgID: "org_a", Environment: fulfillment.EnvTest}

// startGateway serves the T-Bank adapter of terminal/password on
// {URL}/webhooks/tbank-test, recording into rec.
func startGateway(t *testing.T, rec *recorder) string {
	t.Helper()
	var opts yaml.Node
	if err := yaml.Unmarshal([]byte("terminal_key: "+terminal), &opts); err != nil {
		t.Fatal(err)
	}
	a, err := tbank.New(endpoint, [][]byte{[]byte(password)}, opts.Content[0])
	if err != nil {
		t.Fatal(err)
	}
	g := ingest.NewGateway([]ingest.Endpoint{{Endpoint: endpoint, Adapter: a}}, rec, ingest.Options{},
		slog.New(slog.DiscardHandler))
	srv := httptest.NewServer(g.Handler())
	t.Cleanup(srv.Close)
	return srv.URL + "/webhooks/" + endpoint.ID
}

// The fake's notifications are accepted by the adapter behind the ingest
// gateway, whichever way PaymentId is written: a payment's life as events.
func TestClientAndNotificationsEndToEnd(t *testing.T) {
	t.Parallel()
	for _, asString := range []bool{false, true} {
		t.Run(fmt.Sprintf("PaymentId as string %v", asString), func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			hook := startGateway(t, rec)
			bank := startBank(t, fakebank.Options{PaymentIDAsString: asString})
			c := newClient(t, bank.URL(), password)

			paid, err := c.Init(ctx(t), tbank.InitRequest{OrderID: "att_paid", Amount: 50000, NotificationURL: hook,
				Data: map[string]string{"Email": "payer@test.com"}})
			if err != nil {
				t.Fatal(err)
			}
			declined, err := c.Init(ctx(t), tbank.InitRequest{OrderID: "att_declined", Amount: 700, NotificationURL: hook})
			if err != nil {
				t.Fatal(err)
			}
			for _, step := range []error{
				bank.Pay(paid.PaymentID),
				bank.Cancel(paid.PaymentID, 20000),
				bank.Cancel(paid.PaymentID, 0),
				bank.Decline(declined.PaymentID),
			} {
				if step != nil {
					t.Fatal(step)
				}
			}
			if err := bank.Wait(ctx(t)); err != nil {
				t.Fatal(err)
			}

			id := terminal + ":" + paid.PaymentID + ":"
			want := []struct {
				eventID string
				kind    fulfillment.EventKind
				amount  int64 // kopecks
			}{
				{id + "AUTHORIZED", fulfillment.EventAttemptCreated, 50000},
				{id + "CONFIRMED", fulfillment.EventPaymentConfirmed, 50000},
				{id + "PARTIAL_REFUNDED:20000", fulfillment.EventPartiallyRefunded, 20000},
				{id + "REFUNDED", fulfillment.EventRefunded, 30000},
				{terminal + ":" + declined.PaymentID + ":REJECTED", fulfillment.EventAttemptCancelled, 700},
			}
			events := rec.all()
			if len(events) != len(want) {
				t.Fatalf("%d events recorded, want %d: %+v", len(events), len(want), events)
			}
			for i, w := range want {
				ev := events[i]
				if amount := fulfillment.MinorAmount(w.amount, tbank.Currency); ev.EventID != w.eventID || ev.Kind != w.kind ||
					!ev.Payment.Amount.Value.Equal(amount.Value) || ev.Payment.Amount.Unit != amount.Unit {
					t.Errorf("event %d: %s %s %s, want %s %s %d kopecks", i, ev.EventID, ev.Kind, ev.Payment.Amount, w.eventID, w.kind, w.amount)
				}
			}
			if got := events[0].Payment.CheckoutSessionID; got != "att_paid" {
				t.Errorf("the checkout session is %q, want the OrderId", got)
			}
			if got := events[4].Refs[tbank.RefErrorCode]; got != fakebank.CodeDeclined {
				t.Errorf("the declined payment's error code: %q", got)
			}
			for _, n := range bank.Notifications() {
				if !n.Acked() || len(n.Attempts) != 1 {
					t.Errorf("notification %s %s: %+v, want acknowledged at once", n.PaymentID, n.Status, n.Attempts)
				}
			}
			s, err := c.GetState(ctx(t), paid.PaymentID)
			if err != nil || s.Status != tbank.StatusRefunded {
				t.Errorf("GetState = %+v, %v; want REFUNDED", s, err)
			}
		})
	}
}

// answering starts a server answering every request with status and body,
// and returns its URL and the number of requests it had.
func answering(t *testing.T, status int, body string) (url string, requests func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		if status == http.StatusFound {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

func TestClientMalformedAnswers(t *testing.T) {
	t.Parallel()
	const initOK = `{"Success":true,"ErrorCode":"0","TerminalKey":"` + terminal + `","Status":"NEW","PaymentId":"13660","OrderId":"att_1","Amount":100,"PaymentURL":"https://pay.test/13660"}`
	const stateOK = `{"Success":true,"ErrorCode":"0","Status":"CONFIRMED","PaymentId":13660,"OrderId":"att_1","Amount":100}`
	cases := []struct {
		name    string
		op      string // Init or GetState
		status  int
		body    string
		wantErr string // part of the error; "" = accepted
	}{
		{"Init accepted", "Init", 200, initOK, ""},
		{"GetState accepted, no TerminalKey", "GetState", 200, stateOK, ""},
		{"201 accepted", "GetState", 201, stateOK, ""},
		{"500", "Init", 500, initOK, "HTTP 500"},
		{"503 from a proxy", "GetState", 503, "<html>busy</html>", "HTTP 503"},
		{"404", "Init", 404, "not found", "HTTP 404"},
		{"redirect not followed", "Init", 302, "", "HTTP 302"},
		{"not JSON", "Init", 200, "<html>OK</html>", "not valid JSON"},
		{"empty", "GetState", 200, "", "empty"},
		{"an array", "GetState", 200, "[]", "must be a JSON object"},
		{"trailing data", "GetState", 200, stateOK + `{}`, "more data"},
		{"member twice", "GetState", 200, strings.Replace(stateOK, `"Status":"CONFIRMED"`, `"Status":"NEW","Status":"CONFIRMED"`, 1), "twice"},
		{"near-miss name", "GetState", 200, strings.Replace(stateOK, `"Status"`, `"status"`, 1), `spelled exactly "Status"`},
		{"too large", "GetState", 200, `{"Details":"` + strings.Repeat("x", tbank.MaxAnswerBytes) + `"}`, "larger than"},
		{"no Success", "GetState", 200, strings.Replace(stateOK, `"Success":true,`, "", 1), "no Success"},
		{"Success a string", "GetState", 200, strings.Replace(stateOK, `"Success":true`, `"Success":"true"`, 1), "Success has the wrong JSON type"},
		{"no ErrorCode", "Init", 200, strings.Replace(initOK, `"ErrorCode":"0",`, "", 1), "no ErrorCode"},
		{"ErrorCode a number", "GetState", 200, strings.Replace(stateOK, `"ErrorCode":"0"`, `"ErrorCode":0`, 1), "ErrorCode has the wrong JSON type"},
		{"another terminal", "Init", 200, strings.Replace(initOK, terminal, "OtherTerminal", 1), "another terminal"},
		{"another terminal refusing", "Init", 200, `{"Success":false,"ErrorCode":"8","TerminalKey":"OtherTerminal"}`, "another terminal"},
		{"no PaymentId", "Init", 200, strings.Replace(initOK, `"PaymentId":"13660",`, "", 1), "PaymentId is required"},
		{"PaymentId not digits", "Init", 200, strings.Replace(initOK, `"13660"`, `"pay_1"`, 1), "PaymentId must be a whole number"},
		{"PaymentId a fraction", "GetState", 200, strings.Replace(stateOK, `13660`, `13660.5`, 1), "PaymentId must be a whole number"},
		{"no Status", "GetState", 200, strings.Replace(stateOK, `"Status":"CONFIRMED",`, "", 1), "Status is required"},
		{"no OrderId", "GetState", 200, strings.Replace(stateOK, `"OrderId":"att_1",`, "", 1), "OrderId is required"},
		{"no Amount", "GetState", 200, strings.Replace(stateOK, `,"Amount":100`, "", 1), "Amount must be a whole number"},
		{"Amount a string", "GetState", 200, strings.Replace(stateOK, `"Amount":100`, `"Amount":"100"`, 1), "Amount must be a whole number"},
		{"Amount a fraction", "GetState", 200, strings.Replace(stateOK, `"Amount":100`, `"Amount":100.5`, 1), "Amount must be a whole number"},
		{"Amount negative", "GetState", 200, strings.Replace(stateOK, `"Amount":100`, `"Amount":-100`, 1), "Amount must be a whole number"},
		{"Amount too large", "GetState", 200, strings.Replace(stateOK, `"Amount":100`, `"Amount":99999999999999999999`, 1), "Amount must be a whole number"},
		{"another payment", "GetState", 200, strings.Replace(stateOK, `13660`, `13661`, 1), "PaymentId must be the one asked for"},
		{"another order", "Init", 200, strings.Replace(initOK, `"att_1"`, `"att_2"`, 1), "OrderId and Amount must be the ones sent"},
		{"another amount", "Init", 200, strings.Replace(initOK, `"Amount":100`, `"Amount":1000`, 1), "OrderId and Amount must be the ones sent"},
		{"no PaymentURL", "Init", 200, strings.Replace(initOK, `,"PaymentURL":"https://pay.test/13660"`, "", 1), "PaymentURL must be"},
		{"PaymentURL not http", "Init", 200, strings.Replace(initOK, `https://pay.test/13660`, `javascript:alert(1)`, 1), "PaymentURL must be"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url, _ := answering(t, tc.status, tc.body)
			c := newClient(t, url, password)
			var p tbank.Payment
			var err error
			if tc.op == "Init" {
				p, err = c.Init(ctx(t), tbank.InitRequest{OrderID: "att_1", Amount: 100})
			} else {
				p, err = c.GetState(ctx(t), "13660")
			}
			if tc.wantErr == "" {
				if err != nil || p.PaymentID != "13660" || p.TerminalKey != terminal || p.Amount != 100 {
					t.Fatalf("%s = %+v, %v", tc.op, p, err)
				}
				return
			}
			ue, ok := errors.AsType[*tbank.UnknownOutcomeError](err)
			if !ok || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("%s: %v, want an *UnknownOutcomeError saying %q", tc.op, err, tc.wantErr)
			}
			if _, refused := errors.AsType[*tbank.BankError](err); refused {
				t.Errorf("an unknown outcome is also a *BankError: %v", err)
			}
			if ue.Op != tc.op || ue.StatusCode != tc.status || p != (tbank.Payment{}) {
				t.Errorf("%+v with payment %+v", ue, p)
			}
			checkErrorText(t, err)
		})
	}
}

// A refusal is Success false or an ErrorCode other than 0; its text is
// the bank's, kept on one line.
func TestClientRefusals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, body string
		want       tbank.BankError
	}{
		{"Success false", `{"Success":false,"ErrorCode":"99","Message":"Line one\nline two","Details":"` + strings.Repeat("д", 300) + `","PaymentId":"42"}`,
			tbank.BankError{Code: "99", Message: "Line one\nline two", Details: strings.Repeat("д", 300), PaymentID: "42"}},
		{"Success true with a code", `{"Success":true,"ErrorCode":"8","PaymentId":42}`, tbank.BankError{Code: "8", PaymentID: "42"}},
		{"Success false with code 0", `{"Success":false,"ErrorCode":"0","PaymentId":"not a number"}`, tbank.BankError{Code: "0"}},
		{"Success false alone", `{"Success":false}`, tbank.BankError{}},
	}
	for _, tc := range cases {
		url, _ := answering(t, 200, tc.body)
		_, err := newClient(t, url, password).GetState(ctx(t), "42")
		be, ok := errors.AsType[*tbank.BankError](err)
		if !ok || *be != tc.want {
			t.Errorf("%s: %v (%+v), want %+v", tc.name, err, be, tc.want)
			continue
		}
		checkErrorText(t, err)
	}
	url, _ := answering(t, 200, cases[0].body)
	_, err := newClient(t, url, password).Init(ctx(t), tbank.InitRequest{OrderID: "att_1", Amount: 1})
	if got := err.Error(); !strings.HasPrefix(got, "tbank Init: the bank refused: ErrorCode 99: Line one line two: ддд") || len(got) > 400 {
		t.Errorf("error text %q", got)
	}
}

// What the Client sends: the documented members, signed with the first
// password, DATA unsigned.
func TestClientRequests(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []*http.Request
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got, bodies = append(got, r), append(bodies, body)
		mu.Unlock()
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL+"/prefix/", password)
	_, _ = c.Init(ctx(t), tbank.InitRequest{OrderID: "att_1", Amount: 19200, Description: "<gift> & card",
		NotificationURL: "https://svc.test/webhooks/tbank-live?a=1&b=2", Data: map[string]string{"Phone": "+71234567890"}})
	_, _ = c.GetState(ctx(t), "13660")
	if len(got) != 2 {
		t.Fatalf("%d requests", len(got))
	}
	for i, path := range []string{"/prefix/v2/Init", "/prefix/v2/GetState"} {
		r := got[i]
		if r.Method != http.MethodPost || r.URL.Path != path || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("request %d: %s %s %q", i, r.Method, r.URL.Path, r.Header.Get("Content-Type"))
		}
		if err := tbank.Verify(bodies[i], [][]byte{[]byte(password)}); err != nil {
			t.Errorf("request %d is not signed with the first password: %v", i, err)
		}
	}
	var init map[string]any
	if err := json.Unmarshal(bodies[0], &init); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"TerminalKey": terminal, "Amount": 19200.0, "OrderId": "att_1", "Description": "<gift> & card",
		"NotificationURL": "https://svc.test/webhooks/tbank-live?a=1&b=2", "DATA": map[string]any{"Phone": "+71234567890"},
		"PayType": "O"} // one-stage, whatever the terminal's default
	for k, v := range want {
		if fmt.Sprint(init[k]) != fmt.Sprint(v) {
			t.Errorf("Init %s = %v, want %v", k, init[k], v)
		}
	}
	if len(init) != len(want)+1 {
		t.Errorf("Init has members %v", init)
	}
	// DATA is not signed: the Token is that of the body without it.
	tok, err := tbank.Token([]byte(strings.Replace(string(bodies[0]), `"DATA":{"Phone":"+71234567890"},`, "", 1)), []byte(password))
	if err != nil || tok != init["Token"] {
		t.Errorf("Token %v, want %s (%v)", init["Token"], tok, err)
	}
	if !strings.Contains(string(bodies[1]), `"PaymentId":"13660"`) {
		t.Errorf("GetState body %s", bodies[1])
	}
	// An Init without the optional members leaves them out.
	_, _ = c.Init(ctx(t), tbank.InitRequest{OrderID: "att_2", Amount: 1})
	mu.Lock()
	defer mu.Unlock()
	if b := string(bodies[2]); strings.Contains(b, "Description") || strings.Contains(b, "DATA") || strings.Contains(b, "NotificationURL") {
		t.Errorf("Init body %s", b)
	}
}

// A recurrent Init carries Recurrent Y and the CustomerKey, both signed:
// the Token is the bank's, over every root scalar member sorted by name
// (computed here by hand, not by the package's Token).
func TestClientInitRecurrent(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, body)
		mu.Unlock()
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, password)
	_, _ = c.Init(ctx(t), tbank.InitRequest{OrderID: "att_1", Amount: 19200, Description: "Подписка <Pro> & co",
		Recurrent: true, CustomerKey: "user 42/ж", Data: map[string]string{"Email": "a@test.com"}})
	mu.Lock()
	defer mu.Unlock()
	if len(bodies) != 1 {
		t.Fatalf("%d requests", len(bodies))
	}
	var init map[string]any
	if err := json.Unmarshal(bodies[0], &init); err != nil {
		t.Fatal(err)
	}
	if init["Recurrent"] != "Y" || init["CustomerKey"] != "user 42/ж" {
		t.Errorf("Init body %s, want Recurrent Y and the CustomerKey", bodies[0])
	}
	// Amount, CustomerKey, Description, OrderId, Password, PayType,
	// Recurrent, TerminalKey: DATA is an object, not signed.
	sum := sha256.Sum256([]byte("19200" + "user 42/ж" + "Подписка <Pro> & co" + "att_1" + password + "O" + "Y" + terminal))
	if want := hex.EncodeToString(sum[:]); init["Token"] != want {
		t.Errorf("Token %v, want %s", init["Token"], want)
	}
}

func TestClientTransportErrors(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-hang }))
	t.Cleanup(func() { close(hang); slow.Close() })
	// Port 1 on loopback: nothing listens there, and no test's server can
	// be given it (a closed server's port can be, by a parallel test).
	const refusing = "http://127.0.0.1:1"

	short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	_, err := newClient(t, slow.URL, password).Init(short, tbank.InitRequest{OrderID: "att_1", Amount: 100})
	if ue, ok := errors.AsType[*tbank.UnknownOutcomeError](err); !ok || ue.StatusCode != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("timeout: %v, want an *UnknownOutcomeError wrapping the deadline", err)
	}
	_, err = newClient(t, refusing, password).GetState(ctx(t), "1")
	if ue, ok := errors.AsType[*tbank.UnknownOutcomeError](err); !ok || ue.StatusCode != 0 {
		t.Errorf("connection refused: %v, want an *UnknownOutcomeError without status", err)
	}
	checkErrorText(t, err)

	// A context that has ended before the call: nothing is sent.
	done, cancelDone := context.WithCancel(t.Context())
	cancelDone()
	url, requests := answering(t, 200, "{}")
	_, err = newClient(t, url, password).Init(done, tbank.InitRequest{OrderID: "att_1", Amount: 100})
	if _, unknown := errors.AsType[*tbank.UnknownOutcomeError](err); unknown || !errors.Is(err, context.Canceled) || requests() != 0 {
		t.Errorf("ended context: %v after %d requests, want context.Canceled and nothing sent", err, requests())
	}
}

func TestClientInvalidRequests(t *testing.T) {
	t.Parallel()
	url, requests := answering(t, 200, "{}")
	c := newClient(t, url, password)
	for name, call := range map[string]func() error{
		"no OrderID":       func() error { _, err := c.Init(ctx(t), tbank.InitRequest{Amount: 100}); return err },
		"zero Amount":      func() error { _, err := c.Init(ctx(t), tbank.InitRequest{OrderID: "a"}); return err },
		"negative Amount":  func() error { _, err := c.Init(ctx(t), tbank.InitRequest{OrderID: "a", Amount: -1}); return err },
		"empty PaymentId":  func() error { _, err := c.GetState(ctx(t), ""); return err },
		"PaymentId signed": func() error { _, err := c.GetState(ctx(t), "-5"); return err },
		"Recurrent without CustomerKey": func() error {
			_, err := c.Init(ctx(t), tbank.InitRequest{OrderID: "a", Amount: 1, Recurrent: true})
			return err
		},
		"CustomerKey too long": func() error {
			_, err := c.Init(ctx(t), tbank.InitRequest{OrderID: "a", Amount: 1, Recurrent: true, CustomerKey: strings.Repeat("k", 37)})
			return err
		},
		"CustomerKey with a control character": func() error {
			_, err := c.Init(ctx(t), tbank.InitRequest{OrderID: "a", Amount: 1, Recurrent: true, CustomerKey: "k\n"})
			return err
		},
	} {
		if err := call(); !errors.Is(err, tbank.ErrInvalidRequest) {
			t.Errorf("%s: %v, want ErrInvalidRequest", name, err)
		}
	}
	if requests() != 0 {
		t.Errorf("%d requests sent", requests())
	}
}

func TestNewClient(t *testing.T) {
	t.Parallel()
	pw := [][]byte{[]byte(password)}
	cases := []struct {
		name, url, key string
		passwords      [][]byte
		want           string
	}{
		{"https", "https://securepay.test", terminal, pw, ""},
		{"with a path", "http://127.0.0.1:8099/bank/", terminal, pw, ""},
		{"no scheme", "securepay.test", terminal, pw, "absolute http or https"},
		{"ftp", "ftp://securepay.test", terminal, pw, "absolute http or https"},
		{"credentials", "https://user:" + password + "@securepay.test", terminal, pw, "credentials"},
		{"query", "https://securepay.test/?x=1", terminal, pw, "query"},
		{"no terminal", "https://securepay.test", "", pw, "terminal key"},
		{"no password", "https://securepay.test", terminal, nil, "password"},
		{"empty first password", "https://securepay.test", terminal, [][]byte{nil, []byte(password)}, "password"},
	}
	for _, tc := range cases {
		_, err := tbank.NewClient(tc.url, tc.key, tc.passwords, nil)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), password) {
			t.Errorf("%s: the error shows the password: %v", tc.name, err)
		}
	}
}

// The Client keeps its own copy of the password.
func TestClientCopiesPassword(t *testing.T) {
	t.Parallel()
	bank := startBank(t, fakebank.Options{})
	pw := []byte(password)
	c, err := tbank.NewClient(bank.URL(), terminal, [][]byte{pw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	copy(pw, "XXXXXXXX")
	if _, err := c.Init(ctx(t), tbank.InitRequest{OrderID: "att_1", Amount: strconv.IntSize}); err != nil {
		t.Fatal(err)
	}
}
