package receiver_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

// secretOf returns a secret with key bytes n, n+1, …
func secretOf(t testing.TB, n byte) stdwebhooks.Secret {
	t.Helper()
	key := make([]byte, 32)
	for i := range key {
		key[i] = n + byte(i)
	}
	s, err := stdwebhooks.ParseSecret(stdwebhooks.SecretPrefix + base64.StdEncoding.EncodeToString(key))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// post delivers body as key, signed with secret, and returns the status (0
// with the error when there was no answer).
func post(t *testing.T, ctx context.Context, r *receiver.Receiver, key, body string, secret stdwebhooks.Secret) (int, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL()+"/hooks", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range stdwebhooks.Headers(key, time.Now(), []byte(body), secret) {
		req.Header[k] = v
	}
	// A connection per request: a held request must not hold up the next.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// mustPost is post for a request that must be answered.
func mustPost(t *testing.T, r *receiver.Receiver, key string, secret stdwebhooks.Secret) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	status, err := post(t, ctx, r, key, `{"k":"`+key+`"}`, secret)
	if err != nil {
		t.Fatalf("delivering %s: %v", key, err)
	}
	return status
}

// postAndLeave delivers a request as key and gives up on the answer as
// soon as until holds.
func postAndLeave(t *testing.T, r *receiver.Receiver, key string, secret stdwebhooks.Secret, until func() bool) error {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() {
		for !until() && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	_, err := post(t, ctx, r, key, "{}", secret)
	return err
}

// waitIdle waits until r handles no request: an abandoned request has had
// whatever effect it will have.
func waitIdle(t *testing.T, r *receiver.Receiver) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.InFlight() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("still %d requests in flight", r.InFlight())
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestCounting(t *testing.T) {
	t.Parallel()
	for _, idempotent := range []bool{true, false} {
		name := map[bool]string{true: "idempotent", false: "not idempotent"}[idempotent]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := secretOf(t, 1)
			r := receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{s}, Idempotent: idempotent})
			for _, key := range []string{"b", "a", "a"} {
				if st := mustPost(t, r, key, s); st != http.StatusOK {
					t.Fatalf("%s: status %d, want 200 (repeats included)", key, st)
				}
			}
			wantA, wantDoubled, wantTotal := 1, []string(nil), 2
			if !idempotent {
				wantA, wantDoubled, wantTotal = 2, []string{"a"}, 3
			}
			if got := r.Requests("a"); got != 2 {
				t.Errorf("Requests(a) = %d, want 2", got)
			}
			if got := r.Effects("a"); got != wantA {
				t.Errorf("Effects(a) = %d, want %d", got, wantA)
			}
			if got := r.Effects("b"); got != 1 {
				t.Errorf("Effects(b) = %d, want 1", got)
			}
			if got := r.Effects("none"); got != 0 || r.Requests("none") != 0 {
				t.Errorf("an unseen key has %d effects", got)
			}
			if got := r.Keys(); !slices.Equal(got, []string{"a", "b"}) {
				t.Errorf("Keys = %q, want [a b]", got)
			}
			if got := r.Doubled(); !slices.Equal(got, wantDoubled) {
				t.Errorf("Doubled = %q, want %q", got, wantDoubled)
			}
			if got := r.TotalEffects(); got != wantTotal {
				t.Errorf("TotalEffects = %d, want %d", got, wantTotal)
			}
			d, ok := r.Last("a")
			if !ok || string(d.Body) != `{"k":"a"}` || d.Header.Get(stdwebhooks.HeaderID) != "a" {
				t.Errorf("Last(a) = %q %v, %v", d.Body, d.Header, ok)
			}
			if _, ok := r.Last("none"); ok {
				t.Error("Last(none) found a delivery")
			}
		})
	}
}

func TestForged(t *testing.T) {
	t.Parallel()
	s, other := secretOf(t, 1), secretOf(t, 50)
	r := receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{other, s}})
	if st := mustPost(t, r, "k", secretOf(t, 99)); st != http.StatusUnauthorized {
		t.Fatalf("wrong secret: status %d, want 401", st)
	}
	if got := r.Forged(); got != 1 {
		t.Errorf("Forged = %d, want 1", got)
	}
	if r.Requests("k") != 0 || r.TotalEffects() != 0 {
		t.Errorf("a forged request counted: %d requests, %d effects", r.Requests("k"), r.TotalEffects())
	}
	// Any of the secrets verifies (a rotation).
	if st := mustPost(t, r, "k", s); st != http.StatusOK {
		t.Fatalf("second secret: status %d, want 200", st)
	}
	get, err := http.NewRequestWithContext(t.Context(), http.MethodGet, r.URL(), http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d, want 405", resp.StatusCode)
	}
}

func TestFailFirstAndGone(t *testing.T) {
	t.Parallel()
	s := secretOf(t, 1)
	r := receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{s}, Plan: receiver.FailFirst(2, http.StatusServiceUnavailable)})
	for i, want := range []int{503, 503, 200, 200} {
		if st := mustPost(t, r, "k", s); st != want {
			t.Fatalf("request %d: status %d, want %d", i+1, st, want)
		}
	}
	if r.Requests("k") != 4 || r.Effects("k") != 2 {
		t.Errorf("not idempotent, 2 refused of 4: %d requests, %d effects; want 4, 2", r.Requests("k"), r.Effects("k"))
	}
	r.SetPlan(receiver.Always(receiver.Action{Status: http.StatusGone}))
	if st := mustPost(t, r, "g", s); st != http.StatusGone {
		t.Fatalf("status %d, want 410", st)
	}
	r.SetPlan(nil)
	if st := mustPost(t, r, "g", s); st != http.StatusOK || r.Effects("g") != 1 {
		t.Fatalf("default plan again: status %d, %d effects", st, r.Effects("g"))
	}
}

func TestPlanByKey(t *testing.T) {
	t.Parallel()
	s := secretOf(t, 1)
	r := receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{s}, Idempotent: true,
		Plan: func(key string, n int) receiver.Action {
			if key == "bad" {
				return receiver.Action{Status: 402 + n} // 403, then 404
			}
			return receiver.Action{Status: http.StatusAccepted}
		}})
	if st := mustPost(t, r, "bad", s); st != 403 {
		t.Errorf("bad, first: %d, want 403", st)
	}
	if st := mustPost(t, r, "bad", s); st != 404 {
		t.Errorf("bad, second: %d, want 404", st)
	}
	if st := mustPost(t, r, "good", s); st != http.StatusAccepted {
		t.Errorf("good: %d, want 202", st)
	}
	if got := r.Keys(); !slices.Equal(got, []string{"good"}) {
		t.Errorf("Keys = %q, want [good]", got)
	}
}

func TestHoldBeforeEffect(t *testing.T) {
	t.Parallel()
	s := secretOf(t, 1)
	r := receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{s}, Plan: receiver.Always(receiver.Action{Before: time.Minute})})
	if err := postAndLeave(t, r, "k", s, func() bool { return r.Requests("k") == 1 }); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the client's cancellation", err)
	}
	waitIdle(t, r)
	if r.Requests("k") != 1 || r.Effects("k") != 0 {
		t.Errorf("abandoned before the effect: %d requests, %d effects; want 1, 0", r.Requests("k"), r.Effects("k"))
	}
}

func TestHoldAfterEffect(t *testing.T) {
	t.Parallel()
	s := secretOf(t, 1)
	r := receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{s}, Plan: receiver.Always(receiver.Action{After: time.Minute})})
	if err := postAndLeave(t, r, "k", s, func() bool { return r.Effects("k") == 1 }); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want the client's cancellation", err)
	}
	waitIdle(t, r)
	if r.Requests("k") != 1 || r.Effects("k") != 1 {
		t.Errorf("the answer was lost after the effect: %d requests, %d effects; want 1, 1", r.Requests("k"), r.Effects("k"))
	}
	// A short hold is only a delay.
	r.SetPlan(receiver.Always(receiver.Action{Before: 20 * time.Millisecond, After: 20 * time.Millisecond}))
	if st := mustPost(t, r, "d", s); st != http.StatusOK || r.Effects("d") != 1 {
		t.Errorf("delayed: status %d, %d effects", st, r.Effects("d"))
	}
}

func TestDrop(t *testing.T) {
	t.Parallel()
	s := secretOf(t, 1)
	r := receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{s}, Plan: func(key string, _ int) receiver.Action {
		if key == "refused" {
			return receiver.Action{Status: http.StatusInternalServerError, Drop: true}
		}
		return receiver.Action{Drop: true}
	}})
	for key, effects := range map[string]int{"applied": 1, "refused": 0} {
		_, err := post(t, t.Context(), r, key, "{}", s)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s: err = %v, want a connection reset", key, err)
		}
		if got := r.Effects(key); got != effects {
			t.Errorf("%s: %d effects, want %d", key, got, effects)
		}
	}
}

func TestMaxInFlight(t *testing.T) {
	t.Parallel()
	s := secretOf(t, 1)
	const n = 5
	release := make(chan struct{})
	var arrived sync.WaitGroup
	arrived.Add(n)
	r := receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{s}, Plan: func(key string, _ int) receiver.Action {
		if key != "z" { // the first n: all held at once
			arrived.Done()
			<-release
		}
		return receiver.Action{}
	}})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if st, err := post(t, t.Context(), r, string(rune('a'+i)), "{}", s); st != http.StatusOK {
				t.Errorf("concurrent request %d: status %d, %v", i, st, err)
			}
		})
	}
	arrived.Wait()
	if got := r.InFlight(); got != n {
		t.Errorf("InFlight = %d, want %d", got, n)
	}
	close(release)
	wg.Wait()
	mustPost(t, r, "z", s)
	if got := r.MaxInFlight(); got != n {
		t.Errorf("MaxInFlight = %d, want %d", got, n)
	}
	if r.TotalEffects() != n+1 {
		t.Errorf("TotalEffects = %d, want %d", r.TotalEffects(), n+1)
	}
}

func TestCloseAbandonsHeldRequests(t *testing.T) {
	t.Parallel()
	s := secretOf(t, 1)
	r, err := receiver.New(receiver.Options{Secrets: []stdwebhooks.Secret{s}, Plan: receiver.Always(receiver.Action{Before: time.Hour})})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := post(t, t.Context(), r, "k", "{}", s)
		errc <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for r.Requests("k") == 0 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %s with a request held for an hour", d)
	}
	if err := <-errc; err == nil {
		t.Error("the held request got an answer from a closed receiver")
	}
	if r.Effects("k") != 0 || r.InFlight() != 0 {
		t.Errorf("after Close: %d effects, %d in flight", r.Effects("k"), r.InFlight())
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestNewNeedsASecret(t *testing.T) {
	t.Parallel()
	if _, err := receiver.New(receiver.Options{}); err == nil {
		t.Error("New without secrets succeeded")
	}
	if _, err := receiver.New(receiver.Options{Secrets: []stdwebhooks.Secret{{}}}); err == nil {
		t.Error("New with only a zero secret succeeded")
	}
}
