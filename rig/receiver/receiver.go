// Package receiver is a Standard Webhooks receiver for tests and the chaos
// harness: a real HTTP server on loopback that verifies each delivery,
// counts the effects it applies per webhook-id, and fails on demand
// (refuses, hangs before or after the effect, drops the connection).
//
// An effect stands for the business action a real receiver would take.
// Counting them per key shows what a sender's retries did: a key with two
// effects was applied twice.
package receiver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
)

// Fixed bounds of a Receiver.
const (
	// Tolerance is how far a delivery's webhook-timestamp may be from the
	// receiver's clock, either way.
	Tolerance = 5 * time.Minute
	// MaxBody is the largest body accepted; a larger one is answered 413.
	MaxBody = 1 << 20

	readHeaderTimeout = 10 * time.Second
)

// Options configure a Receiver.
type Options struct {
	// Secrets verify deliveries: one signature under any of them suffices.
	// At least one is required.
	Secrets []stdwebhooks.Secret
	// Idempotent applies the effect once per webhook-id: a repeat that is
	// to succeed is answered 2xx without a second effect. Otherwise every
	// request that is to succeed applies an effect.
	Idempotent bool
	// Plan decides each verified request's fate; nil applies the effect
	// and answers 200 every time. SetPlan replaces it.
	Plan Plan
	// Addr is the address to listen on; "" means 127.0.0.1 on a free port.
	Addr string
	// Now is the clock webhook-timestamp is checked against; nil means
	// time.Now.
	Now func() time.Time
}

// Plan returns the Action for the n-th verified request (n counts from 1)
// carrying webhook-id key. It is called from the server's goroutines.
type Plan func(key string, n int) Action

// Action is what the receiver does with one verified request, in this
// order: hold it for Before, apply the effect when Status is 2xx, hold it
// for After, then answer Status or, with Drop, reset the connection.
// The zero Action applies the effect and answers 200.
//
// While held, a request is abandoned when its client goes away or the
// receiver closes: abandoned during Before, it has no effect; during
// After, its effect stays and the answer is lost. Either way the
// connection is closed without an answer.
type Action struct {
	// Status is the answer's status, 200 to 599; 0 means 200. A status
	// other than 2xx refuses the request: no effect.
	Status int
	// Before holds the request before the effect is decided.
	Before time.Duration
	// After holds the request after the effect, before the answer.
	After time.Duration
	// Drop resets the connection (TCP RST) instead of answering.
	Drop bool
	// RetryAfter, when set, is the answer's Retry-After header.
	RetryAfter string
}

// FailFirst returns a Plan answering status, without effect, to the first
// k requests of every key, and applying the effect after that.
func FailFirst(k, status int) Plan {
	return func(_ string, n int) Action {
		if n <= k {
			return Action{Status: status}
		}
		return Action{}
	}
}

// Always returns a Plan giving every request the same Action.
func Always(a Action) Plan {
	return func(string, int) Action { return a }
}

// Delivery is a verified request as received.
type Delivery struct {
	Header http.Header
	Body   []byte
}

// Receiver is a running receiver. Its methods are safe for concurrent use.
type Receiver struct {
	secrets    []stdwebhooks.Secret
	idempotent bool
	now        func() time.Time
	url        string

	srv    *http.Server
	served chan error    // Serve's result
	stop   chan struct{} // closed by Close: releases held requests

	closeOnce sync.Once
	closeErr  error

	mu          sync.Mutex
	idle        *sync.Cond // signalled when inFlight drops to 0
	plan        Plan
	keys        map[string]*keyState
	forged      int
	inFlight    int
	maxInFlight int
	closed      bool // no request is let in any more
}

type keyState struct {
	requests, effects int
	last              Delivery
}

// New starts a receiver serving on opts.Addr (127.0.0.1 on a free port by
// default) until Close.
func New(opts Options) (*Receiver, error) {
	if stdwebhooks.Sign("", time.Time{}, nil, opts.Secrets...) == "" {
		return nil, errors.New("receiver: no secret to verify deliveries with")
	}
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	r := &Receiver{
		secrets:    slices.Clone(opts.Secrets),
		idempotent: opts.Idempotent,
		now:        opts.Now,
		url:        "http://" + ln.Addr().String(),
		served:     make(chan error, 1),
		stop:       make(chan struct{}),
		plan:       opts.Plan,
		keys:       make(map[string]*keyState),
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.idle = sync.NewCond(&r.mu)
	r.srv = &http.Server{Handler: r, ReadHeaderTimeout: readHeaderTimeout}
	go func() { r.served <- r.srv.Serve(ln) }()
	return r, nil
}

// Start starts a receiver for the test, failing it when that is not
// possible, and closes the receiver when the test ends.
func Start(t testing.TB, opts Options) *Receiver {
	t.Helper()
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("closing the receiver: %v", err)
		}
	})
	return r
}

// URL returns the receiver's base URL, e.g. "http://127.0.0.1:41234". It
// accepts deliveries on every path.
func (r *Receiver) URL() string { return r.url }

// SetPlan replaces the plan for requests verified from now on; nil
// restores the default (effect, 200).
func (r *Receiver) SetPlan(p Plan) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.plan = p
}

// Close stops the receiver: it closes the listener and every connection,
// abandons the requests being held, and returns once no request is being
// handled. Later calls wait for the first and return its result.
func (r *Receiver) Close() error {
	r.closeOnce.Do(func() { r.closeErr = r.shutdown() })
	return r.closeErr
}

func (r *Receiver) shutdown() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	// Connections first, so that no abandoned request gets an answer.
	err := r.srv.Close()
	close(r.stop)
	if serr := <-r.served; !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.inFlight > 0 {
		r.idle.Wait()
	}
	return err
}

// Requests returns how many verified requests carried webhook-id key.
func (r *Receiver) Requests(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := r.keys[key]; k != nil {
		return k.requests
	}
	return 0
}

// Effects returns how many effects key has had.
func (r *Receiver) Effects(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := r.keys[key]; k != nil {
		return k.effects
	}
	return 0
}

// TotalRequests returns the number of verified requests, all keys together.
func (r *Receiver) TotalRequests() int { return r.total(func(k *keyState) int { return k.requests }) }

// TotalEffects returns the number of effects applied, all keys together.
func (r *Receiver) TotalEffects() int { return r.total(func(k *keyState) int { return k.effects }) }

// total sums count over the keys.
func (r *Receiver) total(count func(*keyState) int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range r.keys {
		n += count(k)
	}
	return n
}

// Keys returns the keys with at least one effect, sorted.
func (r *Receiver) Keys() []string { return r.keysWith(1) }

// Doubled returns the keys with more than one effect, sorted: with an
// idempotent receiver, always none.
func (r *Receiver) Doubled() []string { return r.keysWith(2) }

func (r *Receiver) keysWith(minEffects int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for key, k := range r.keys {
		if k.effects >= minEffects {
			out = append(out, key)
		}
	}
	slices.Sort(out)
	return out
}

// Last returns the last verified request carrying webhook-id key (a copy),
// and whether there was one.
func (r *Receiver) Last(key string) (Delivery, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := r.keys[key]
	if k == nil {
		return Delivery{}, false
	}
	return Delivery{Header: k.last.Header.Clone(), Body: slices.Clone(k.last.Body)}, true
}

// Forged returns how many requests failed verification (answered 401).
func (r *Receiver) Forged() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.forged
}

// InFlight returns how many requests are being handled now.
func (r *Receiver) InFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inFlight
}

// MaxInFlight returns the most requests ever handled at the same time,
// counting every request (also those that fail verification) from the
// moment its headers have arrived until it is answered or abandoned.
func (r *Receiver) MaxInFlight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.maxInFlight
}

// ServeHTTP handles one request; see Action.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if !r.enter() {
		panic(http.ErrAbortHandler)
	}
	defer r.leave()
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "deliveries are POSTs", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxBody))
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
		return
	}
	if err != nil {
		http.Error(w, "reading the body failed", http.StatusBadRequest)
		return
	}
	if err := stdwebhooks.Verify(req.Header, body, r.now(), Tolerance, r.secrets...); err != nil {
		r.mu.Lock()
		r.forged++
		r.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	key := req.Header.Get(stdwebhooks.HeaderID)
	a := r.received(key, Delivery{Header: req.Header.Clone(), Body: body})
	status := a.Status
	if status == 0 {
		status = http.StatusOK
	}
	if !r.hold(req.Context(), a.Before) {
		panic(http.ErrAbortHandler)
	}
	if status >= 200 && status <= 299 {
		r.apply(key)
	}
	if !r.hold(req.Context(), a.After) {
		panic(http.ErrAbortHandler)
	}
	if a.Drop {
		reset(w)
		return
	}
	if a.RetryAfter != "" {
		w.Header().Set("Retry-After", a.RetryAfter)
	}
	w.WriteHeader(status)
}

// enter counts a request in, unless the receiver is closed.
func (r *Receiver) enter() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.inFlight++
	r.maxInFlight = max(r.maxInFlight, r.inFlight)
	return true
}

func (r *Receiver) leave() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inFlight--
	if r.inFlight == 0 {
		r.idle.Broadcast()
	}
}

// received counts a verified request and returns its Action.
func (r *Receiver) received(key string, d Delivery) Action {
	r.mu.Lock()
	k := r.keys[key]
	if k == nil {
		k = &keyState{}
		r.keys[key] = k
	}
	k.requests++
	k.last = d
	n, plan := k.requests, r.plan
	r.mu.Unlock()
	if plan == nil {
		return Action{}
	}
	return plan(key, n)
}

// apply applies key's effect: once in all in idempotent mode.
func (r *Receiver) apply(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k := r.keys[key]; !r.idempotent || k.effects == 0 {
		k.effects++
	}
}

// hold waits for d and reports whether the request is still wanted: false
// when its client went away or the receiver is closing.
func (r *Receiver) hold(ctx context.Context, d time.Duration) bool {
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		case <-r.stop:
		}
	}
	select {
	case <-ctx.Done():
		return false
	case <-r.stop:
		return false
	default:
		return true
	}
}

// reset closes the request's connection with a TCP RST, without an answer.
func reset(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
