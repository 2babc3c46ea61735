package outbox_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/outbox"
	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

// payload is the body tests send; Reason must never quote it.
const payload = `{"type":"order.fulfilled","data":{"order_id":"ord_PAYLOADMARK"}}`

// secretText returns the text form of a secret with key bytes n, n+1, …
func secretText(n byte) string {
	key := make([]byte, 32)
	for i := range key {
		key[i] = n + byte(i)
	}
	return stdwebhooks.SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

func secretOf(t testing.TB, n byte) stdwebhooks.Secret {
	t.Helper()
	s, err := stdwebhooks.ParseSecret(secretText(n))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Secrets 1 and 2 sign everything; 3 is a stranger's.
var testSecretNumbers = []byte{1, 2}

func newSender(t *testing.T, opts ...outbox.Option) *outbox.Sender {
	t.Helper()
	s := outbox.NewSender(opts...)
	t.Cleanup(s.CloseIdleConnections)
	return s
}

// start starts a receiver verifying with secret 1.
func start(t *testing.T, idempotent bool, plan receiver.Plan) *receiver.Receiver {
	t.Helper()
	return receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{secretOf(t, 1)}, Idempotent: idempotent, Plan: plan})
}

// dest returns a destination for url, signing with secrets 1 and 2.
func dest(t *testing.T, url string, idempotent bool, timeout time.Duration) outbox.Destination {
	t.Helper()
	return outbox.Destination{ID: "dst_test", URL: url, Secrets: []stdwebhooks.Secret{secretOf(t, 1), secretOf(t, 2)}, Idempotent: idempotent, Timeout: timeout}
}

func msg(key string) outbox.Message {
	return outbox.Message{Key: key, Topic: "order.fulfilled", Payload: []byte(payload)}
}

// mode names a destination's idempotence in subtest names.
func mode(idempotent bool) string {
	if idempotent {
		return "idempotent"
	}
	return "not idempotent"
}

// want is the expected Result; reason "" is not checked.
type want struct {
	verdict outbox.Verdict
	status  int
	sent    bool
	reason  string
}

// check compares got with w, and checks that the reason is one short line
// quoting nothing it must not: the payload, a key, a secret, the URL.
func check(t *testing.T, got outbox.Result, w want, d outbox.Destination, m outbox.Message) {
	t.Helper()
	if got.Verdict != w.verdict || got.Status != w.status || got.Sent != w.sent {
		t.Errorf("Send = {%s, %d, sent %v, %q}, want {%s, %d, sent %v}", got.Verdict, got.Status, got.Sent, got.Reason, w.verdict, w.status, w.sent)
	}
	if w.reason != "" && got.Reason != w.reason {
		t.Errorf("Reason = %q, want %q", got.Reason, w.reason)
	}
	checkReason(t, got.Reason, d, m)
}

func checkReason(t *testing.T, reason string, d outbox.Destination, m outbox.Message) {
	t.Helper()
	if reason == "" || len(reason) > 200 || strings.ContainsAny(reason, "\r\n") {
		t.Errorf("Reason %q is not one line of 1 to 200 bytes", reason)
	}
	forbidden := []string{"PAYLOADMARK", "whsec_", "http://", "https://", "@"}
	if m.Key != "" {
		forbidden = append(forbidden, m.Key)
	}
	for _, n := range append(testSecretNumbers, 3) {
		forbidden = append(forbidden, strings.TrimPrefix(secretText(n), stdwebhooks.SecretPrefix)[:12])
	}
	if host := strings.TrimPrefix(strings.TrimPrefix(d.URL, "http://"), "https://"); len(host) > 4 {
		forbidden = append(forbidden, host[:len(host)/2+1])
	}
	for _, f := range forbidden {
		if strings.Contains(reason, f) {
			t.Errorf("Reason %q quotes %q", reason, f)
		}
	}
}

// waitIdle waits until r handles no request.
func waitIdle(t *testing.T, r *receiver.Receiver) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.InFlight() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the receiver still handles a request")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// closedPortURL returns the URL of a loopback port nothing listens on.
func closedPortURL(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/hooks"
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return url
}

func TestDelivered(t *testing.T) {
	t.Parallel()
	signedAt := time.Now().Add(-time.Minute).Truncate(time.Second)
	s := newSender(t, outbox.WithClock(func() time.Time { return signedAt }))
	for _, idem := range []bool{true, false} {
		t.Run(mode(idem), func(t *testing.T) {
			t.Parallel()
			r := start(t, idem, nil)
			d, m := dest(t, r.URL()+"/in/outbox", idem, 5*time.Second), msg("msg_delivered")
			check(t, s.Send(t.Context(), d, m), want{outbox.Delivered, 200, true, "HTTP 200"}, d, m)
			if r.Effects(m.Key) != 1 || r.Forged() != 0 {
				t.Fatalf("%d effects, %d forged; want 1, 0", r.Effects(m.Key), r.Forged())
			}
			got, _ := r.Last(m.Key)
			if string(got.Body) != payload {
				t.Errorf("body %q, want the payload byte for byte", got.Body)
			}
			for name, v := range map[string]string{
				"webhook-id":        m.Key,
				"Idempotency-Key":   m.Key,
				"webhook-timestamp": fmt.Sprint(signedAt.Unix()),
				"Content-Type":      "application/json",
				"User-Agent":        "fulfillmentd",
			} {
				if vals := got.Header.Values(name); len(vals) != 1 || vals[0] != v {
					t.Errorf("%s: %q, want [%q]", name, vals, v)
				}
			}
			if sig := got.Header.Get("webhook-signature"); len(strings.Fields(sig)) != 2 {
				t.Errorf("webhook-signature %q: want two signatures, one per secret", sig)
			}
		})
	}
}

// TestStatuses checks the verdict of every kind of answer.
func TestStatuses(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	cases := []struct {
		status        int
		idem, notIdem outbox.Verdict
	}{
		{200, outbox.Delivered, outbox.Delivered},
		{202, outbox.Delivered, outbox.Delivered},
		{204, outbox.Delivered, outbox.Delivered},
		{301, outbox.Retry, outbox.Uncertain},
		{302, outbox.Retry, outbox.Uncertain},
		{303, outbox.Retry, outbox.Uncertain},
		{307, outbox.Retry, outbox.Retry},
		{308, outbox.Retry, outbox.Retry},
		{400, outbox.Retry, outbox.Retry},
		{404, outbox.Retry, outbox.Retry},
		{408, outbox.Retry, outbox.Retry},
		{409, outbox.Retry, outbox.Retry},
		{410, outbox.Gone, outbox.Gone},
		{422, outbox.Retry, outbox.Retry},
		{429, outbox.Retry, outbox.Retry},
		{500, outbox.Retry, outbox.Uncertain},
		{502, outbox.Retry, outbox.Uncertain},
		{503, outbox.Retry, outbox.Uncertain},
		{504, outbox.Retry, outbox.Uncertain},
		{600, outbox.Retry, outbox.Uncertain},
	}
	for _, c := range cases {
		for _, idem := range []bool{true, false} {
			t.Run(fmt.Sprintf("%d %s", c.status, mode(idem)), func(t *testing.T) {
				t.Parallel()
				r := start(t, idem, receiver.Always(receiver.Action{Status: c.status}))
				d, m := dest(t, r.URL(), idem, 5*time.Second), msg("msg_status")
				v, reason := c.idem, fmt.Sprintf("HTTP %d", c.status)
				if !idem {
					v = c.notIdem
				}
				if c.status/100 == 3 {
					reason += " (redirects are not followed)"
				}
				check(t, s.Send(t.Context(), d, m), want{v, c.status, true, reason}, d, m)
				if r.Requests(m.Key) != 1 {
					t.Errorf("%d requests, want 1", r.Requests(m.Key))
				}
			})
		}
	}
}

// A destination that answers 429 or 503 with Retry-After says how long
// to leave it alone: seconds or a date, bounded — also with a message that
// is not sent again (its destination's other messages wait as asked).
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2027, 3, 1, 12, 0, 0, 0, time.UTC)
	s := newSender(t, outbox.WithClock(func() time.Time { return now }))
	cases := []struct {
		status     int
		header     string
		idempotent bool
		verdict    outbox.Verdict
		after      time.Duration
	}{
		{429, "120", true, outbox.Retry, 2 * time.Minute},
		{429, "120", false, outbox.Retry, 2 * time.Minute}, // a 4xx: not acted on
		{503, now.Add(90 * time.Second).Format(http.TimeFormat), true, outbox.Retry, 90 * time.Second},
		{503, "120", false, outbox.Uncertain, 2 * time.Minute}, // may have acted: not retried at all, but the others wait
		{429, "86400", true, outbox.Retry, outbox.MaxRetryAfter},
		{429, now.AddDate(5, 0, 0).Format(http.TimeFormat), true, outbox.Retry, outbox.MaxRetryAfter},
		{429, now.Add(-time.Hour).Format(http.TimeFormat), true, outbox.Retry, 0},
		{429, "-5", true, outbox.Retry, 0},
		{429, "99999999999999999999", true, outbox.Retry, outbox.MaxRetryAfter}, // past an int64: it was read as no wait
		{429, "-99999999999999999999", true, outbox.Retry, 0},
		{429, "soon", true, outbox.Retry, 0},
		{429, "", true, outbox.Retry, 0},
		{500, "120", true, outbox.Retry, 0}, // only 429 and 503 carry it
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d %q %s", c.status, c.header, mode(c.idempotent)), func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if c.header != "" {
					w.Header().Set("Retry-After", c.header)
				}
				w.WriteHeader(c.status)
			}))
			t.Cleanup(srv.Close)
			d, m := dest(t, srv.URL, c.idempotent, 5*time.Second), msg("msg_retry_after")
			r := s.Send(t.Context(), d, m)
			if r.Verdict != c.verdict || r.RetryAfter != c.after {
				t.Errorf("Send = %s, retry after %v (%q); want %s, %v", r.Verdict, r.RetryAfter, r.Reason, c.verdict, c.after)
			}
			if wantSaid := c.after > 0; strings.Contains(r.Reason, "asked to retry after "+c.after.String()) != wantSaid {
				t.Errorf("reason %q; saying the wait: want %v", r.Reason, wantSaid)
			}
			checkReason(t, r.Reason, d, m)
		})
	}
}

func TestRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	target := start(t, false, nil)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL(), http.StatusTemporaryRedirect)
	}))
	t.Cleanup(redirect.Close)
	d, m := dest(t, redirect.URL, false, 5*time.Second), msg("msg_redirect")
	check(t, s.Send(t.Context(), d, m), want{outbox.Retry, 307, true, "HTTP 307 (redirects are not followed)"}, d, m)
	if n := target.Requests(m.Key); n != 0 {
		t.Errorf("the redirect target got %d requests", n)
	}
}

func TestRetryThenDelivered(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	r := start(t, true, receiver.FailFirst(1, http.StatusInternalServerError))
	d, m := dest(t, r.URL(), true, 5*time.Second), msg("msg_retry")
	check(t, s.Send(t.Context(), d, m), want{outbox.Retry, 500, true, "HTTP 500"}, d, m)
	check(t, s.Send(t.Context(), d, m), want{outbox.Delivered, 200, true, "HTTP 200"}, d, m)
	if r.Requests(m.Key) != 2 || r.Effects(m.Key) != 1 {
		t.Errorf("%d requests, %d effects; want 2, 1", r.Requests(m.Key), r.Effects(m.Key))
	}
}

// TestTimeoutBeforeEffect: the destination holds the request past the
// timeout without acting on it.
func TestTimeoutBeforeEffect(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	for _, idem := range []bool{true, false} {
		t.Run(mode(idem), func(t *testing.T) {
			t.Parallel()
			r := start(t, idem, receiver.Always(receiver.Action{Before: time.Minute}))
			d, m := dest(t, r.URL(), idem, time.Second), msg("msg_timeout")
			v := outbox.Retry
			if !idem {
				v = outbox.Uncertain // the sender cannot know it was not acted on
			}
			check(t, s.Send(t.Context(), d, m), want{v, 0, true, "timed out after 1s waiting for the answer (request sent)"}, d, m)
			waitIdle(t, r)
			if r.Requests(m.Key) != 1 || r.Effects(m.Key) != 0 {
				t.Errorf("%d requests, %d effects; want 1, 0", r.Requests(m.Key), r.Effects(m.Key))
			}
		})
	}
}

// TestTimeoutAfterEffect is the classic case: the destination acted, the
// answer is lost.
func TestTimeoutAfterEffect(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	for _, idem := range []bool{true, false} {
		t.Run(mode(idem), func(t *testing.T) {
			t.Parallel()
			r := start(t, idem, receiver.Always(receiver.Action{After: time.Minute}))
			d, m := dest(t, r.URL(), idem, time.Second), msg("msg_lost_answer")
			v := outbox.Retry
			if !idem {
				v = outbox.Uncertain
			}
			check(t, s.Send(t.Context(), d, m), want{v, 0, true, "timed out after 1s waiting for the answer (request sent)"}, d, m)
			waitIdle(t, r)
			if r.Requests(m.Key) != 1 || r.Effects(m.Key) != 1 {
				t.Errorf("%d requests, %d effects; want exactly 1, 1", r.Requests(m.Key), r.Effects(m.Key))
			}
		})
	}
}

func TestResetAfterEffect(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	for _, idem := range []bool{true, false} {
		t.Run(mode(idem), func(t *testing.T) {
			t.Parallel()
			r := start(t, idem, receiver.Always(receiver.Action{Drop: true}))
			d, m := dest(t, r.URL(), idem, 5*time.Second), msg("msg_reset")
			v := outbox.Retry
			if !idem {
				v = outbox.Uncertain
			}
			check(t, s.Send(t.Context(), d, m), want{v, 0, true, "connection reset while waiting for the answer (request sent)"}, d, m)
			if r.Requests(m.Key) != 1 || r.Effects(m.Key) != 1 {
				t.Errorf("%d requests, %d effects; want exactly 1, 1", r.Requests(m.Key), r.Effects(m.Key))
			}
		})
	}
}

// TestNothingSent: failures before anything was written are Retry, even
// for a destination that is not idempotent.
func TestNothingSent(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	cases := []struct {
		name, url, reason string
	}{
		{"connection refused", closedPortURL(t), "connection refused while connecting (nothing sent)"},
		{"credentials in the URL", strings.Replace(closedPortURL(t), "http://", "http://user:hunter2@", 1), "connection refused while connecting (nothing sent)"},
		{"DNS", "http://delivery.invalid/hooks", "no such host (DNS) while connecting (nothing sent)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d, m := dest(t, c.url, false, 5*time.Second), msg("msg_nothing_sent")
			got := s.Send(t.Context(), d, m)
			check(t, got, want{outbox.Retry, 0, false, c.reason}, d, m)
			if strings.Contains(got.Reason, "hunter2") || strings.Contains(got.Reason, "delivery.invalid") {
				t.Errorf("Reason %q quotes the URL", got.Reason)
			}
		})
	}
}

func TestRotation(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	for n, wantVerdict := range map[byte]outbox.Verdict{1: outbox.Delivered, 2: outbox.Delivered, 3: outbox.Retry} {
		t.Run(fmt.Sprintf("receiver holds secret %d", n), func(t *testing.T) {
			t.Parallel()
			r := receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{secretOf(t, n)}})
			d, m := dest(t, r.URL(), false, 5*time.Second), msg("msg_rotation")
			got := s.Send(t.Context(), d, m)
			if got.Verdict != wantVerdict {
				t.Fatalf("Send = %s %q, want %s", got.Verdict, got.Reason, wantVerdict)
			}
			if forged := map[bool]int{true: 0, false: 1}[wantVerdict == outbox.Delivered]; r.Forged() != forged {
				t.Errorf("Forged = %d, want %d", r.Forged(), forged)
			}
		})
	}
}

// TestPublishedVector sends the Standard Webhooks specification's test
// vector through Send: the same id, time, body and secret must give the
// published signature.
func TestPublishedVector(t *testing.T) {
	t.Parallel()
	const (
		vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
		vectorBody      = `{"test": 2432232314}`
		vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	)
	vectorTime := time.Unix(1614265330, 0)
	secret, err := stdwebhooks.ParseSecret(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	r := receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{secret}, Now: func() time.Time { return vectorTime.Add(time.Minute) }})
	s := newSender(t, outbox.WithClock(func() time.Time { return vectorTime }))
	d := outbox.Destination{URL: r.URL(), Secrets: []stdwebhooks.Secret{secret}, Timeout: 5 * time.Second}
	if got := s.Send(t.Context(), d, outbox.Message{Key: vectorID, Payload: []byte(vectorBody)}); got.Verdict != outbox.Delivered {
		t.Fatalf("Send = %s %q, want delivered", got.Verdict, got.Reason)
	}
	got, _ := r.Last(vectorID)
	if sig := got.Header.Get("webhook-signature"); sig != vectorSignature {
		t.Errorf("webhook-signature = %q, want %q", sig, vectorSignature)
	}
	if ts := got.Header.Get("webhook-timestamp"); ts != "1614265330" {
		t.Errorf("webhook-timestamp = %q, want 1614265330", ts)
	}
}

// TestLargeAnswerNotBuffered: an endless answer is read no further than
// the bound; the connection is closed instead.
func TestLargeAnswerNotBuffered(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	var written atomic.Int64
	stopped := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		defer close(stopped)
		w.WriteHeader(http.StatusOK)
		chunk := []byte(strings.Repeat("RESPONSE ", 4096))
		for written.Load() < 1<<30 {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	for _, idem := range []bool{true, false} {
		d, m := dest(t, srv.URL, idem, 10*time.Second), msg("msg_large_answer")
		check(t, s.Send(t.Context(), d, m), want{outbox.Delivered, 200, true, "HTTP 200"}, d, m)
		select {
		case <-stopped:
		case <-time.After(5 * time.Second):
			t.Fatal("the server still writes: the sender did not close the connection")
		}
		// What was written beyond 64 KiB sat in socket buffers.
		if n := written.Load(); n > 64<<20 {
			t.Errorf("the server wrote %d bytes before the sender closed", n)
		}
		written.Store(0)
		stopped = make(chan struct{})
	}
}

// TestPartlySent: a destination that stops reading the body leaves the
// request partly written when the attempt times out.
func TestPartlySent(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); conns.Wait() })
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			// A small receive buffer, whatever the host's TCP tuning: the
			// body cannot all fit in socket buffers.
			_ = c.(*net.TCPConn).SetReadBuffer(64 << 10)
			conns.Go(func() {
				defer func() { _ = c.Close() }()
				if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
					return
				}
				<-t.Context().Done() // never reads the body
			})
		}
	})
	big := outbox.Message{Key: "msg_big", Payload: []byte(`"` + strings.Repeat("x", 64<<20) + `"`)}
	for _, idem := range []bool{true, false} {
		d := dest(t, "http://"+ln.Addr().String(), idem, 300*time.Millisecond)
		v := outbox.Retry
		if !idem {
			v = outbox.Uncertain
		}
		check(t, s.Send(t.Context(), d, big), want{v, 0, true, "timed out after 300ms sending the request (partly sent)"}, d, big)
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusting client's handshake error
	srv.StartTLS()
	t.Cleanup(srv.Close)
	d, m := dest(t, srv.URL, false, 5*time.Second), msg("msg_tls")

	untrusting := newSender(t)
	check(t, untrusting.Send(t.Context(), d, m), want{outbox.Retry, 0, false, "TLS: certificate not trusted while connecting (nothing sent)"}, d, m)

	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	trusting := newSender(t, outbox.WithTLSConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}))
	check(t, trusting.Send(t.Context(), d, m), want{outbox.Delivered, 204, true, "HTTP 204"}, d, m)

	// A server that accepts the connection but never finishes the handshake.
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { <-t.Context().Done(); _ = c.Close() }()
		}
	}()
	d = dest(t, "https://"+ln.Addr().String(), false, 300*time.Millisecond)
	check(t, trusting.Send(t.Context(), d, m), want{outbox.Retry, 0, false, "timed out after 300ms connecting (nothing sent)"}, d, m)

	// An https URL whose server speaks plain HTTP.
	plain := start(t, false, nil)
	d = dest(t, strings.Replace(plain.URL(), "http://", "https://", 1), false, 5*time.Second)
	check(t, trusting.Send(t.Context(), d, m), want{outbox.Retry, 0, false, "TLS: the destination does not speak TLS while connecting (nothing sent)"}, d, m)
	if n := plain.Requests(m.Key); n != 0 {
		t.Errorf("the plain server took %d requests", n)
	}
}

func TestCanceled(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	r := start(t, false, receiver.Always(receiver.Action{Before: time.Minute}))
	d, m := dest(t, r.URL(), false, 5*time.Second), msg("msg_canceled")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	check(t, s.Send(ctx, d, m), want{outbox.Retry, 0, false, "canceled while connecting (nothing sent)"}, d, m)

	ctx, cancel = context.WithCancel(t.Context())
	go func() {
		for r.Requests(m.Key) == 0 {
			time.Sleep(2 * time.Millisecond)
		}
		cancel()
	}()
	check(t, s.Send(ctx, d, m), want{outbox.Uncertain, 0, true, "canceled while waiting for the answer (request sent)"}, d, m)
}

func TestInvalid(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	r := start(t, false, nil)
	good := dest(t, r.URL(), false, 5*time.Second)
	with := func(f func(*outbox.Destination)) outbox.Destination {
		d := good
		f(&d)
		return d
	}
	cases := []struct {
		name string
		d    outbox.Destination
		m    outbox.Message
	}{
		{"unparsable URL", with(func(d *outbox.Destination) { d.URL = "http://127.0.0.1:port/" }), msg("k")},
		{"control character in URL", with(func(d *outbox.Destination) { d.URL = "http://host/\x7f" }), msg("k")},
		{"relative URL", with(func(d *outbox.Destination) { d.URL = "/hooks" }), msg("k")},
		{"other scheme", with(func(d *outbox.Destination) { d.URL = "ftp://127.0.0.1/" }), msg("k")},
		{"no host", with(func(d *outbox.Destination) { d.URL = "http:///hooks" }), msg("k")},
		{"port only", with(func(d *outbox.Destination) { d.URL = "http://:8080/hooks" }), msg("k")},
		{"port out of range", with(func(d *outbox.Destination) { d.URL = "http://127.0.0.1:99999/hooks" }), msg("k")},
		{"port zero", with(func(d *outbox.Destination) { d.URL = "http://127.0.0.1:0/hooks" }), msg("k")},
		{"empty URL", with(func(d *outbox.Destination) { d.URL = "" }), msg("k")},
		{"no timeout", with(func(d *outbox.Destination) { d.Timeout = 0 }), msg("k")},
		{"negative timeout", with(func(d *outbox.Destination) { d.Timeout = -time.Second }), msg("k")},
		{"no secret", with(func(d *outbox.Destination) { d.Secrets = nil }), msg("k")},
		{"zero secret", with(func(d *outbox.Destination) { d.Secrets = []stdwebhooks.Secret{{}} }), msg("k")},
		{"empty key", good, msg("")},
		{"key with a space", good, msg("msg 1")},
		{"key with a newline", good, msg("msg\r\nX-Injected: 1")},
		{"key with non-ASCII", good, msg("msg_é")},
		{"key too long", good, msg(strings.Repeat("k", stdwebhooks.MaxIDBytes+1))},
		{"zero destination", outbox.Destination{}, outbox.Message{}},
	}
	for _, c := range cases {
		got := s.Send(t.Context(), c.d, c.m)
		if got.Verdict != outbox.Invalid || got.Sent || got.Status != 0 {
			t.Errorf("%s: Send = %s %d sent %v %q, want invalid, nothing sent", c.name, got.Verdict, got.Status, got.Sent, got.Reason)
		}
		checkReason(t, got.Reason, c.d, c.m)
	}
	if r.Forged() != 0 || r.TotalEffects() != 0 || r.MaxInFlight() != 0 {
		t.Errorf("an invalid delivery reached the receiver")
	}
	if err := good.Validate(); err != nil {
		t.Errorf("Validate(good) = %v", err)
	}
	// A nil option is skipped, a nil context taken as context.Background.
	s = newSender(t, nil)
	check(t, s.Send(nil, good, msg("msg_nil_ctx")), want{outbox.Delivered, 200, true, "HTTP 200"}, good, msg("msg_nil_ctx")) //nolint:staticcheck // Send must survive a nil context
	// An empty payload is sent as an empty body.
	empty := outbox.Message{Key: "msg_empty"}
	check(t, s.Send(t.Context(), good, empty), want{outbox.Delivered, 200, true, "HTTP 200"}, good, empty)
	if got, _ := r.Last("msg_empty"); len(got.Body) != 0 {
		t.Errorf("body %q, want empty", got.Body)
	}
}

// TestConcurrent: one Sender, many deliveries at once, each applied once.
func TestConcurrent(t *testing.T) {
	t.Parallel()
	s := newSender(t)
	const n = 40
	for _, idem := range []bool{true, false} {
		r := start(t, idem, receiver.Always(receiver.Action{Before: 20 * time.Millisecond}))
		d := dest(t, r.URL(), idem, 10*time.Second)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				if got := s.Send(t.Context(), d, msg(fmt.Sprintf("msg_%d", i))); got.Verdict != outbox.Delivered {
					t.Errorf("%s msg_%d: %s %q", mode(idem), i, got.Verdict, got.Reason)
				}
			})
		}
		wg.Wait()
		if r.TotalEffects() != n || len(r.Doubled()) != 0 {
			t.Errorf("%s: %d effects, doubled %q; want %d, none", mode(idem), r.TotalEffects(), r.Doubled(), n)
		}
		if r.MaxInFlight() < 2 {
			t.Errorf("%s: at most %d request in flight: Send serialises deliveries", mode(idem), r.MaxInFlight())
		}
	}
}

func TestVerdictString(t *testing.T) {
	t.Parallel()
	for v, want := range map[outbox.Verdict]string{
		outbox.Delivered: "delivered", outbox.Retry: "retry", outbox.Uncertain: "uncertain",
		outbox.Gone: "gone", outbox.Invalid: "invalid", 0: "Verdict(0)",
	} {
		if got := v.String(); got != want {
			t.Errorf("%d: %q, want %q", int(v), got, want)
		}
	}
}
