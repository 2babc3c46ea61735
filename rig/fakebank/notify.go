package fakebank

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fulfillplatform/fulfillment/ingest/tbank"
)

// The card every payment is paid with, as notifications show it.
const (
	cardID  = 322264
	pan     = "430000******0777"
	expDate = "1230"
)

// maxAnswer bounds what is kept of a receiver's answer.
const maxAnswer = 64

// Misbehaviour is how the bank departs from sending each notification once,
// correctly signed, in order, with retries until it is answered OK.
type Misbehaviour struct {
	// Repeat sends each notification this many times, all at once (each
	// copy retried on its own); below 2, once.
	Repeat int
	// Hold keeps notifications back until Release.
	Hold bool
	// WrongToken signs notifications with another password.
	WrongToken bool
	// Drop sends no notification at all: only GetState tells what
	// happened.
	Drop bool
}

// SetMisbehaviour changes the misbehaviour of the notifications made from
// now on; those already made (held ones included) keep theirs.
func (b *Bank) SetMisbehaviour(m Misbehaviour) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mis = m
}

// Notification is a notification the bank made, and what became of it.
type Notification struct {
	PaymentID, Status string
	Amount            int64
	// URL is where it goes; Body is what is sent, signed.
	URL  string
	Body []byte
	// Copies is how many times it is sent at once (Misbehaviour.Repeat).
	Copies int
	// Held says it waits for Release; Dropped that it is never sent
	// (Misbehaviour.Drop, or no URL to send it to).
	Held, Dropped bool
	// Attempts are the POSTs made so far, every copy's.
	Attempts []Attempt
}

// Acked reports whether an attempt was answered OK.
func (n Notification) Acked() bool {
	return slices.ContainsFunc(n.Attempts, func(a Attempt) bool { return a.OK })
}

// Attempt is one POST of a notification.
type Attempt struct {
	// Copy counts from 1 to the notification's Copies.
	Copy int
	// HTTPStatus is the answer's status, 0 when none came (Err says why).
	HTTPStatus int
	// Answer is the start of the answer's body.
	Answer string
	Err    string
	// OK: the answer was 200 with the body OK, and nothing else.
	OK bool
}

// Notifications returns every notification made so far, in the order made.
func (b *Bank) Notifications() []Notification {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Notification, 0, len(b.notes))
	for _, n := range b.notes {
		c := *n
		c.Body, c.Attempts = slices.Clone(n.Body), slices.Clone(n.Attempts)
		out = append(out, c)
	}
	return out
}

// Order is the order Release sends held notifications in.
type Order int

// Orders of Release.
const (
	InOrder Order = iota
	Reversed
	Shuffled
)

// Release queues the held notifications in order o, one after the other,
// and returns how many there were. Later ones wait for the earlier ones'
// delivery (retries included).
func (b *Bank) Release(o Order) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	held := b.held
	b.held = nil
	switch o {
	case Reversed:
		slices.Reverse(held)
	case Shuffled:
		rand.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
	case InOrder:
	}
	for _, n := range held {
		n.Held = false
		b.enqueueLocked(n)
	}
	return len(held)
}

// ErrClosed is returned by Wait when the bank closes first.
var ErrClosed = errors.New("fakebank: closed")

// Wait returns once every notification queued so far has been delivered or
// given up (held ones are not waited for), or with ctx's error, or
// ErrClosed.
func (b *Bank) Wait(ctx context.Context) error {
	b.mu.Lock()
	idle := b.idle
	b.mu.Unlock()
	if idle == nil {
		return nil
	}
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.ctx.Done():
		return ErrClosed
	}
}

// NoticeFields are what a notification says of a payment.
type NoticeFields struct {
	TerminalKey, OrderID, PaymentID, Status, ErrorCode string
	Amount                                             int64
	// PaymentIDAsString writes PaymentId as a JSON string, not a number.
	PaymentIDAsString bool
	// RebillID, when set, is sent as RebillId (like PaymentId).
	RebillID string
	// CustomerKey, when set, is sent as CustomerKey (the bank names the
	// customer an Init named).
	CustomerKey string
	Data        map[string]string
}

// NoticeBody is the body of a notification of f signed with password, as
// the bank sends it (with a test card's fields): for tests, load
// generators and the chaos run, which send notifications of their own.
func NoticeBody(f NoticeFields, password []byte) []byte {
	id := func(v string) any { // digits: a JSON number unless asked otherwise
		if f.PaymentIDAsString {
			return v
		}
		return json.Number(v)
	}
	if f.ErrorCode == "" {
		f.ErrorCode = CodeOK
	}
	nb := notice{
		TerminalKey: f.TerminalKey, OrderID: f.OrderID, Success: f.ErrorCode == CodeOK, Status: f.Status,
		PaymentID: id(f.PaymentID), ErrorCode: f.ErrorCode, Amount: f.Amount,
		CardID: cardID, Pan: pan, ExpDate: expDate, CustomerKey: f.CustomerKey, Data: f.Data,
	}
	if f.RebillID != "" {
		nb.RebillID = id(f.RebillID)
	}
	unsigned, _ := json.Marshal(nb) // strings, numbers and a map of strings
	nb.Token, _ = tbank.Token(unsigned, password)
	body, _ := json.Marshal(nb)
	return body
}

// notice is a notification body.
type notice struct {
	TerminalKey string            `json:"TerminalKey"`
	OrderID     string            `json:"OrderId"`
	Success     bool              `json:"Success"`
	Status      string            `json:"Status"`
	PaymentID   any               `json:"PaymentId"`
	ErrorCode   string            `json:"ErrorCode"`
	Amount      int64             `json:"Amount"`
	CardID      int64             `json:"CardId"`
	Pan         string            `json:"Pan"`
	ExpDate     string            `json:"ExpDate"`
	RebillID    any               `json:"RebillId,omitempty"`
	CustomerKey string            `json:"CustomerKey,omitempty"`
	Data        map[string]string `json:"DATA,omitempty"`
	Token       string            `json:"Token,omitempty"`
}

// moveLocked puts p in status and notifies it, with amount and errorCode.
func (b *Bank) moveLocked(p *Payment, status string, amount int64, errorCode string) {
	p.Status = status
	f := NoticeFields{
		TerminalKey: b.opts.TerminalKey, OrderID: p.OrderID, PaymentID: p.PaymentID, Status: status,
		ErrorCode: errorCode, Amount: amount, PaymentIDAsString: b.opts.PaymentIDAsString, Data: p.Data,
		CustomerKey: p.CustomerKey,
	}
	if p.Recurrent && p.RebillID == "" && status == tbank.StatusAuthorized {
		// The card is bound once the payer authorized the payment.
		p.RebillID = "7" + p.PaymentID
		b.bindings[p.RebillID] = p.PaymentID
	}
	if p.RebillID != "" && (status == tbank.StatusAuthorized || status == tbank.StatusConfirmed) {
		f.RebillID = p.RebillID
	}
	password := b.opts.Password
	if b.mis.WrongToken {
		password = append([]byte("wrong-"), password...)
	}
	body := NoticeBody(f, password)

	n := &Notification{
		PaymentID: p.PaymentID, Status: status, Amount: amount,
		URL: p.NotificationURL, Body: body, Copies: max(1, b.mis.Repeat),
	}
	if n.URL == "" {
		n.URL = b.opts.NotificationURL
	}
	b.notes = append(b.notes, n)
	switch {
	case n.URL == "" || b.mis.Drop:
		n.Dropped = true
		b.log.Info("notification dropped", "payment_id", n.PaymentID, "status", n.Status, "amount", n.Amount)
	case b.mis.Hold:
		n.Held = true
		b.held = append(b.held, n)
		b.log.Info("notification held", "payment_id", n.PaymentID, "status", n.Status, "amount", n.Amount)
	default:
		b.enqueueLocked(n)
	}
}

func (b *Bank) enqueueLocked(n *Notification) {
	b.queue = append(b.queue, n)
	if b.pending == 0 {
		b.idle = make(chan struct{})
	}
	b.pending++
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// deliverAll delivers the queued notifications one after the other until
// Close.
func (b *Bank) deliverAll() {
	defer b.worker.Done()
	for b.ctx.Err() == nil {
		b.mu.Lock()
		var n *Notification
		if len(b.queue) > 0 {
			n, b.queue = b.queue[0], b.queue[1:]
		}
		b.mu.Unlock()
		if n == nil {
			select {
			case <-b.wake:
				continue
			case <-b.ctx.Done():
				return
			}
		}
		var copies sync.WaitGroup
		for c := range n.Copies {
			copies.Go(func() { b.deliver(n, c+1) })
		}
		copies.Wait()
		b.mu.Lock()
		b.pending--
		if b.pending == 0 {
			close(b.idle)
			b.idle = nil
		}
		b.mu.Unlock()
	}
}

// deliver sends one copy of n until it is answered OK, the retries are
// spent or the bank closes.
func (b *Bank) deliver(n *Notification, copyNo int) {
	for attempt := 1; ; attempt++ {
		a := b.post(n)
		a.Copy = copyNo
		b.mu.Lock()
		n.Attempts = append(n.Attempts, a)
		b.mu.Unlock()
		args := []any{"payment_id", n.PaymentID, "status", n.Status, "amount", n.Amount,
			"copy", copyNo, "attempt", attempt, "http_status", a.HTTPStatus, "ok", a.OK}
		if a.Err != "" {
			args = append(args, "error", a.Err)
		}
		b.log.Info("notification", args...)
		if a.OK || attempt > b.opts.Retries {
			return
		}
		t := time.NewTimer(b.opts.RetryInterval)
		select {
		case <-t.C:
		case <-b.ctx.Done():
			t.Stop()
			return
		}
	}
}

// post makes one attempt.
func (b *Bank) post(n *Notification) Attempt {
	ctx, cancel := context.WithTimeout(b.ctx, b.opts.NotifyTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.URL, bytes.NewReader(n.Body))
	if err != nil {
		return Attempt{Err: "invalid notification URL"}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.hc.Do(req)
	if err != nil {
		return Attempt{Err: err.Error()}
	}
	defer func() { _ = resp.Body.Close() }()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	a := Attempt{HTTPStatus: resp.StatusCode, Answer: strings.ToValidUTF8(string(answer[:min(len(answer), maxAnswer)]), "")}
	if err != nil {
		a.Err = "reading the answer: " + err.Error()
	}
	a.OK = err == nil && resp.StatusCode == http.StatusOK && string(answer) == "OK"
	return a
}
