package e2e_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// Behind a reverse proxy listed in console.trusted_proxies (here loopback,
// where every test request comes from), failed sign-ins are limited per
// client that X-Forwarded-For names: one client guessing tokens is held
// back, and another operator behind the same proxy still signs in.
func TestConsoleSignInLimitBehindATrustedProxy(t *testing.T) {
	t.Parallel()
	s := startReplicaWith(t, pgtest.DB(t), func(c *config.Config) {
		withConsole()(c)
		c.Console.TrustedProxies = []string{"127.0.0.0/8", "::1"}
	})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	signIn := func(forwardedFor, token string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.restURL+"/console/login",
			strings.NewReader(url.Values{"token": {token}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("X-Forwarded-For", forwardedFor)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	const guesser, operator = "198.51.100.66", "203.0.113.7"
	for i := range 5 {
		if code := signIn(guesser, "tok-wrong-0123456789abcdef"); code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, code)
		}
	}
	if code := signIn(guesser, adminToken); code != http.StatusTooManyRequests {
		t.Errorf("the guesser past its limit: %d, want 429", code)
	}
	if code := signIn(operator, adminToken); code != http.StatusSeeOther {
		t.Errorf("another operator behind the same proxy: %d, want 303 (signed in)", code)
	}
	// What the guesser writes before the proxy's own entry is not read.
	if code := signIn(operator+", "+guesser, adminToken); code != http.StatusTooManyRequests {
		t.Errorf("the guesser naming the operator first: %d, want 429", code)
	}
}
