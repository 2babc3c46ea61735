package outbox

import (
	"bufio"
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
)

// These tests provoke net/http's silent resend. Transport.roundTrip sends a
// request again on a new connection when shouldRetryRequest allows it:
// the failed connection was reused, and the request is replayable (for a
// POST: an Idempotency-Key header and a GetBody to rewind the body with),
// and the failure is one of a few, among them the server closing the
// connection before the first byte of the answer
// (transportReadFromServerError). closingServer does exactly that to one
// message, on a connection that served another message first.

// victim is the message closingServer drops the first time it arrives.
const victim = "msg_victim"

// closingServer is an HTTP/1.1 server that answers 200 with keep-alive,
// except to the first arrival of victim: it reads that request in full,
// then closes the connection without answering.
type closingServer struct {
	ln net.Listener
	wg sync.WaitGroup

	mu    sync.Mutex
	seen  map[string]int // requests by webhook-id
	conns int
}

func startClosingServer(t *testing.T) *closingServer {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &closingServer{ln: ln, seen: make(map[string]int)}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() { _ = ln.Close(); s.wg.Wait() })
	return s
}

func (s *closingServer) serve(c net.Conn) {
	defer func() { _ = c.Close() }()
	br := bufio.NewReader(c)
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if _, err := io.Copy(io.Discard, req.Body); err != nil {
			return
		}
		key := req.Header.Get(stdwebhooks.HeaderID)
		s.mu.Lock()
		s.seen[key]++
		drop := key == victim && s.seen[key] == 1
		s.mu.Unlock()
		if drop {
			return
		}
		if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"); err != nil || req.Close {
			return
		}
	}
}

func (s *closingServer) url() string { return "http://" + s.ln.Addr().String() + "/hooks" }

// counts returns how many times key arrived and how many connections were
// accepted.
func (s *closingServer) counts(key string) (requests, conns int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[key], s.conns
}

func testDestination(t *testing.T, url string, idempotent bool) Destination {
	t.Helper()
	secret, err := stdwebhooks.ParseSecret(stdwebhooks.SecretPrefix + base64.StdEncoding.EncodeToString(make([]byte, 32)))
	if err != nil {
		t.Fatal(err)
	}
	return Destination{URL: url, Secrets: []stdwebhooks.Secret{secret}, Idempotent: idempotent, Timeout: 5 * time.Second}
}

// TestSendNeverResends: through Send, the transport resends the dropped
// message to an idempotent destination (proof that the server provokes
// the resend), and never to one that is not idempotent.
func TestSendNeverResends(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		idempotent     bool
		want           Verdict
		requests, conn int
	}{
		{idempotent: true, want: Delivered, requests: 2, conn: 2},  // resent on a second connection
		{idempotent: false, want: Uncertain, requests: 1, conn: 2}, // a connection per delivery, no resend
	} {
		var (
			srv             *closingServer
			s               *Sender
			r               Result
			requests, conns int
		)
		// The resend needs the victim on the first message's connection,
		// which the transport returns to its idle pool asynchronously,
		// after the first answer was read: a victim that got a new
		// connection (a loaded machine) tells nothing, and is sent again
		// on a fresh server.
		for try := 0; ; try++ {
			srv = startClosingServer(t)
			s = NewSender()
			d := testDestination(t, srv.url(), tc.idempotent)
			if r := s.Send(t.Context(), d, Message{Key: "msg_first", Payload: []byte(`{}`)}); r.Verdict != Delivered {
				t.Fatalf("idempotent %v, first message: %s %q", tc.idempotent, r.Verdict, r.Reason)
			}
			var reused []bool
			ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
				GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }})
			r = s.Send(ctx, d, Message{Key: victim, Payload: []byte(`{}`)})
			requests, conns = srv.counts(victim)
			if !tc.idempotent || (len(reused) > 0 && reused[0]) || try == 20 {
				break
			}
			s.CloseIdleConnections()
		}
		if r.Verdict != tc.want || requests != tc.requests || conns != tc.conn {
			t.Errorf("idempotent %v: %s %q, the server saw the message %d times on %d connections; want %s, %d times on %d",
				tc.idempotent, r.Verdict, r.Reason, requests, conns, tc.want, tc.requests, tc.conn)
		}
		if !tc.idempotent && r.Reason != "connection closed by the destination while waiting for the answer (request sent)" {
			t.Errorf("Reason = %q", r.Reason)
		}
		s.CloseIdleConnections()
	}
}

// TestNoGetBodyNoResend isolates the second guard: even on a reused
// connection, the request Send builds for a destination that is not
// idempotent (no GetBody) is not resent, while the same request with
// GetBody is.
func TestNoGetBodyNoResend(t *testing.T) {
	t.Parallel()
	for _, idempotent := range []bool{true, false} {
		srv := startClosingServer(t)
		s := NewSender()
		client := s.shared // kept-alive connections, whatever the destination
		d := testDestination(t, srv.url(), idempotent)
		var reused []bool
		trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
		ctx := httptrace.WithClientTrace(t.Context(), trace)
		do := func(ctx context.Context, key string) error {
			req, err := s.request(ctx, d, Message{Key: key, Payload: []byte(`{}`)})
			if err != nil {
				t.Fatal(err)
			}
			resp, err := client.Do(req)
			if err == nil {
				_ = resp.Body.Close()
			}
			return err
		}
		if err := do(ctx, "msg_first"); err != nil {
			t.Fatal(err)
		}
		err := do(ctx, victim)
		requests, _ := srv.counts(victim)
		if len(reused) < 2 || !reused[1] {
			t.Fatalf("the second request did not reuse the connection: %v", reused)
		}
		switch {
		case idempotent && (err != nil || requests != 2):
			t.Errorf("with GetBody: err %v, the server saw the message %d times; want a silent resend (2)", err, requests)
		case !idempotent && (err == nil || requests != 1):
			t.Errorf("without GetBody: err %v, the server saw the message %d times; want an error and 1", err, requests)
		}
		s.CloseIdleConnections()
	}
}
