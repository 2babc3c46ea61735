// Package fakebank is a fake T-Bank Internet Acquiring API (v2) for tests,
// development and chaos runs: one terminal, payments kept in memory, a page
// to pay them on, and signed notifications delivered with retries — or
// repeated, held back and reordered, wrongly signed or dropped, on demand.
//
// It serves POST /v2/Init, /v2/GetState, /v2/Confirm and /v2/Cancel, each
// request signed with the terminal's Token, and /pay/{PaymentId}: a GET
// shows the payment with Pay and Decline buttons, a POST presses one. A
// recurrent payment (Init's Recurrent Y, with a CustomerKey) binds the card
// once paid, and Charge charges the binding again, as the merchant's
// billing does.
//
// Each status change is notified. Notifications go out one at a time, in
// the order they were made (a notification being retried holds up the
// next), until Close.
package fakebank

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fulfillplatform/fulfillment/ingest/tbank"
)

// ErrorCodes the fake answers with. Only "0" is the bank's own; the others
// are the fake's choice (the bank publishes few).
const (
	CodeOK             = "0"
	CodeTransition     = "4" // the payment's status does not allow the operation
	CodeNotFound       = "7" // no such payment
	CodeDuplicateOrder = "8" // the default of Options.DuplicateCode
	CodeBadRequest     = "9" // the request is malformed or misses a member
	CodeBadToken       = "204"
	CodeDeclined       = "1051" // the payer's card was declined (Decline)
)

// MaxBodyBytes bounds the body of every request the fake serves.
const MaxBodyBytes = 64 << 10

// MaxCustomerKeyLen is the longest CustomerKey Init takes, in characters
// (the bank's documented limit).
const MaxCustomerKeyLen = 36

// Defaults of Options.
const (
	DefaultRetries        = 3
	DefaultRetryInterval  = 100 * time.Millisecond
	DefaultNotifyTimeout  = 5 * time.Second
	DefaultFirstPaymentID = 1000001
)

// Options configure a Bank.
type Options struct {
	// TerminalKey and Password are the one terminal's: every request must
	// name the key and carry a Token made with the password. Required.
	TerminalKey string
	Password    []byte
	// Addr is the address to listen on; "" means 127.0.0.1 on a free port.
	Addr string
	// PublicURL is the base of the PaymentURLs handed out; "" means the
	// listening address over http.
	PublicURL string
	// NotificationURL receives the notifications of payments whose Init
	// named none; "" sends those nowhere (they are recorded as dropped).
	NotificationURL string
	// TwoStage makes payments two-stage unless Init's PayType says
	// otherwise (O one-stage, T two-stage).
	TwoStage bool
	// ConfirmLater leaves a paid one-stage payment AUTHORIZED until Confirm
	// is called, as a bank may take its time between the two
	// notifications; a test orders them so.
	ConfirmLater bool
	// DuplicateCode is the ErrorCode of an Init that repeats an OrderId;
	// "" means CodeDuplicateOrder. The answer names the existing payment
	// unless OmitDuplicatePaymentID.
	DuplicateCode          string
	OmitDuplicatePaymentID bool
	// PaymentIDAsString writes PaymentId (and RebillId) as JSON strings in
	// answers and notifications; by default they are numbers.
	PaymentIDAsString bool
	// FirstPaymentID is the PaymentId of the first payment; later ones
	// count up. 0 means DefaultFirstPaymentID.
	FirstPaymentID int64
	// Retries is how many times a notification not answered OK is sent
	// again, RetryInterval apart, each attempt bounded by NotifyTimeout.
	// 0 means the default; a negative Retries means none.
	Retries       int
	RetryInterval time.Duration
	NotifyTimeout time.Duration
	// Misbehaviour is the initial misbehaviour (SetMisbehaviour).
	Misbehaviour Misbehaviour
	// Log receives one line per request and per notification sent, with
	// ids, statuses and amounts only; nil discards them.
	Log *slog.Logger
}

// Bank is a running fake bank. Its methods are safe for concurrent use.
type Bank struct {
	opts      Options
	url       string
	log       *slog.Logger
	srv       *http.Server
	served    chan error
	transport *http.Transport
	hc        *http.Client
	ctx       context.Context // ends on Close: stops deliveries
	cancel    context.CancelFunc
	worker    sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex
	mis      Misbehaviour
	nextID   int64
	payments map[string]*Payment
	ids      []string          // payment ids in creation order
	byOrder  map[string]string // OrderId → PaymentId
	bindings map[string]string // RebillId → the PaymentId that bound the card
	notes    []*Notification
	queue    []*Notification
	held     []*Notification
	pending  int           // queued or being delivered
	idle     chan struct{} // closed when pending drops to 0
	wake     chan struct{}
}

// New starts a bank serving on opts.Addr until Close.
func New(opts Options) (*Bank, error) {
	switch {
	case opts.TerminalKey == "":
		return nil, errors.New("fakebank: a terminal key is required")
	case len(opts.Password) == 0:
		return nil, errors.New("fakebank: a terminal password is required")
	}
	if opts.DuplicateCode == "" {
		opts.DuplicateCode = CodeDuplicateOrder
	}
	if opts.FirstPaymentID <= 0 {
		opts.FirstPaymentID = DefaultFirstPaymentID
	}
	switch {
	case opts.Retries == 0:
		opts.Retries = DefaultRetries
	case opts.Retries < 0:
		opts.Retries = 0
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = DefaultRetryInterval
	}
	if opts.NotifyTimeout <= 0 {
		opts.NotifyTimeout = DefaultNotifyTimeout
	}
	opts.Password = bytes.Clone(opts.Password)
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("fakebank: %w", err)
	}
	b := &Bank{
		opts:     opts,
		url:      strings.TrimSuffix(opts.PublicURL, "/"),
		log:      opts.Log,
		served:   make(chan error, 1),
		mis:      opts.Misbehaviour,
		nextID:   opts.FirstPaymentID,
		payments: map[string]*Payment{},
		byOrder:  map[string]string{},
		bindings: map[string]string{},
		wake:     make(chan struct{}, 1),
	}
	if b.url == "" {
		b.url = "http://" + ln.Addr().String()
	}
	if b.log == nil {
		b.log = slog.New(slog.DiscardHandler)
	}
	b.transport = http.DefaultTransport.(*http.Transport).Clone()
	b.hc = &http.Client{
		Transport:     b.transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v2/{method}", b.serveAPI)
	mux.HandleFunc("GET /pay/{id}", b.servePage)
	mux.HandleFunc("POST /pay/{id}", b.servePay)
	b.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
	}
	b.worker.Add(1)
	go b.deliverAll()
	go func() { b.served <- b.srv.Serve(ln) }()
	return b, nil
}

// URL returns the bank's base URL, e.g. "http://127.0.0.1:41234": the
// API is under URL()+"/v2/".
func (b *Bank) URL() string { return b.url }

// Close stops the bank: no more requests are served and no notification
// is sent or retried; the ones not delivered are abandoned. It returns once
// every goroutine of the bank has ended. Later calls return the first
// call's result.
func (b *Bank) Close() error {
	b.closeOnce.Do(func() {
		b.cancel()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := b.srv.Shutdown(ctx)
		if err != nil {
			err = errors.Join(err, b.srv.Close())
		}
		if serr := <-b.served; !errors.Is(serr, http.ErrServerClosed) {
			err = errors.Join(err, serr)
		}
		b.worker.Wait()
		b.transport.CloseIdleConnections()
		b.closeErr = err
	})
	return b.closeErr
}

// request is the union of the members the API methods read.
type request struct {
	TerminalKey     string            `json:"TerminalKey"`
	OrderID         string            `json:"OrderId"`
	PaymentID       json.RawMessage   `json:"PaymentId"`
	Amount          int64             `json:"Amount"`
	Description     string            `json:"Description"`
	NotificationURL string            `json:"NotificationURL"`
	PayType         string            `json:"PayType"`
	Recurrent       string            `json:"Recurrent"`
	CustomerKey     string            `json:"CustomerKey"`
	Data            map[string]string `json:"DATA"`
}

// answer is an API answer; json.Marshal writes its members sorted.
type answer map[string]any

func refusal(code, message string) answer {
	return answer{"Success": false, "ErrorCode": code, "Message": message}
}

// serveAPI handles POST /v2/{method}: the answer is 200 with JSON, a
// refusal included, as the bank does.
func (b *Bank) serveAPI(w http.ResponseWriter, r *http.Request) {
	method := r.PathValue("method")
	if method != "Init" && method != "GetState" && method != "Confirm" && method != "Cancel" {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		http.Error(w, "request body too large or unreadable", http.StatusRequestEntityTooLarge)
		return
	}
	var req request
	var a answer
	switch {
	case json.Unmarshal(body, &req) != nil:
		a = refusal(CodeBadRequest, "the request is not a JSON object of the expected members")
	case req.TerminalKey != b.opts.TerminalKey:
		a = refusal(CodeBadToken, "unknown terminal")
	case tbank.Verify(body, [][]byte{b.opts.Password}) != nil:
		a = refusal(CodeBadToken, "invalid Token")
	case method == "Init":
		a = b.init(req)
	default:
		a = b.operate(method, req)
	}
	logged := answer{"OrderId": req.OrderID, "PaymentId": "", "Status": "", "Amount": req.Amount}
	maps.Copy(logged, a)
	b.log.Info(method, "order_id", logged["OrderId"], "payment_id", logged["PaymentId"], "status", logged["Status"],
		"amount", logged["Amount"], "error_code", logged["ErrorCode"])
	out, _ := json.Marshal(a) // only strings, numbers and booleans
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// init creates a payment (Init).
func (b *Bank) init(req request) answer {
	two := b.opts.TwoStage
	switch req.PayType {
	case "":
	case "O":
		two = false
	case "T":
		two = true
	default:
		return refusal(CodeBadRequest, "PayType must be O or T")
	}
	if u, err := url.Parse(req.NotificationURL); req.NotificationURL != "" && (err != nil || u.Host == "" ||
		(u.Scheme != "http" && u.Scheme != "https")) {
		return refusal(CodeBadRequest, "NotificationURL must be an absolute http or https URL")
	}
	if req.OrderID == "" || req.Amount <= 0 {
		return refusal(CodeBadRequest, "OrderId is required and Amount must be a positive number of kopecks")
	}
	// As the bank documents: Recurrent is Y or absent, and a card is bound
	// to a customer, so CustomerKey (36 characters at most) comes with it.
	switch {
	case req.Recurrent != "" && req.Recurrent != "Y":
		return refusal(CodeBadRequest, "Recurrent must be Y when sent")
	case req.Recurrent == "Y" && req.CustomerKey == "":
		return refusal(CodeBadRequest, "CustomerKey is required with Recurrent")
	case utf8.RuneCountInString(req.CustomerKey) > MaxCustomerKeyLen:
		return refusal(CodeBadRequest, "CustomerKey must be at most 36 characters")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if id, dup := b.byOrder[req.OrderID]; dup {
		a := refusal(b.opts.DuplicateCode, "a payment with this OrderId already exists")
		a["OrderId"], a["TerminalKey"] = req.OrderID, b.opts.TerminalKey
		if !b.opts.OmitDuplicatePaymentID {
			a["PaymentId"] = b.idValue(id)
		}
		return a
	}
	id := strconv.FormatInt(b.nextID, 10)
	b.nextID++
	p := &Payment{
		PaymentID: id, OrderID: req.OrderID, Status: tbank.StatusNew,
		Amount: req.Amount, Remaining: req.Amount, TwoStage: two, Recurrent: req.Recurrent == "Y", CustomerKey: req.CustomerKey,
		Description: req.Description, NotificationURL: req.NotificationURL, Data: req.Data,
		PaymentURL: b.url + "/pay/" + id,
	}
	b.payments[id] = p
	b.byOrder[p.OrderID] = id
	b.ids = append(b.ids, id)
	a := b.describe(p)
	a["PaymentURL"] = p.PaymentURL
	return a
}

// operate answers GetState, Confirm and Cancel.
func (b *Bank) operate(method string, req request) answer {
	id := string(bytes.Trim(req.PaymentID, `"`))
	if id == "" {
		return refusal(CodeBadRequest, "PaymentId is required")
	}
	var err error
	switch method {
	case "Confirm":
		err = b.Confirm(id)
	case "Cancel":
		err = b.Cancel(id, req.Amount)
	}
	switch {
	case errors.Is(err, ErrNotFound):
		return refusal(CodeNotFound, "no such payment")
	case errors.Is(err, ErrTransition):
		return refusal(CodeTransition, "the payment's status does not allow "+method)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.payments[id]
	if p == nil {
		return refusal(CodeNotFound, "no such payment")
	}
	a := b.describe(p)
	if method == "Cancel" {
		a["OriginalAmount"], a["NewAmount"] = p.Amount, p.Remaining
	}
	return a
}

// describe is the successful answer about p.
func (b *Bank) describe(p *Payment) answer {
	return answer{
		"Success": true, "ErrorCode": CodeOK, "TerminalKey": b.opts.TerminalKey, "Status": p.Status,
		"PaymentId": b.idValue(p.PaymentID), "OrderId": p.OrderID, "Amount": p.Amount,
	}
}

// idValue is a bank id as answers and notifications write it.
func (b *Bank) idValue(id string) any {
	if b.opts.PaymentIDAsString {
		return id
	}
	return json.Number(id)
}
