package main

import (
	"bytes"
	"context"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/ingest/tbank"
)

const password = "TerminalPassword1"

func env(name string) string {
	if name == "FAKEBANK_PASSWORD" {
		return password
	}
	return ""
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRunRefuses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"no password", []string{"--password-env", "NOT_SET", "--listen", "127.0.0.1:0"}, "$NOT_SET"},
		{"unknown flag", []string{"--password", password}, flag.ErrHelp.Error()},
		{"arguments", []string{"extra"}, "unexpected arguments"},
	}
	for _, tc := range cases {
		var out syncBuffer
		err := run(t.Context(), tc.args, env, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
		if strings.Contains(out.String()+err.Error(), password) {
			t.Errorf("%s: the password is shown", tc.name)
		}
	}
}

// A walkthrough: Init, the payer presses Pay, notifications arrive (twice
// each, --repeat 2); the log has a line for each and no secret.
func TestRun(t *testing.T) {
	t.Parallel()
	var notified atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if tbank.Verify(body, [][]byte{[]byte(password)}) == nil {
			notified.Add(1)
		}
		_, _ = io.WriteString(w, "OK")
	}))
	t.Cleanup(hook.Close)

	var out syncBuffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--terminal-key", "T1", "--first-payment-id", "42",
			"--repeat", "2", "--notify-url", hook.URL}, env, &out)
	}()
	var base string
	for deadline := time.Now().Add(5 * time.Second); base == ""; time.Sleep(5 * time.Millisecond) {
		if m := regexp.MustCompile(`url=(http://\S+)`).FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no URL in the log:\n%s", out.String())
		}
	}
	c, err := tbank.NewClient(base, "T1", [][]byte{[]byte(password)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Init(t.Context(), tbank.InitRequest{OrderID: "att_1", Amount: 100})
	if err != nil || p.PaymentID != "42" {
		t.Fatalf("Init = %+v, %v", p, err)
	}
	resp, err := http.PostForm(p.PaymentURL, url.Values{"action": {"pay"}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	for deadline := time.Now().Add(5 * time.Second); notified.Load() < 4; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d notifications verified, want 4", notified.Load())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	log := out.String()
	for _, want := range []string{"msg=Init", "payment_id=42", "status=NEW", "msg=pay", "msg=notification", "status=CONFIRMED", "copy=2"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log has no %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, password) || strings.Contains(log, "Token") {
		t.Errorf("the log shows a secret:\n%s", log)
	}
}
