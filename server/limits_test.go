package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// rawRequest opens a TCP connection to addr, writes head (request line and
// headers, without the blank line) and then body, and returns the
// connection.
func rawRequest(t *testing.T, addr, head string, body []byte) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := io.WriteString(conn, head+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if len(body) > 0 {
		if _, err := conn.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	return conn
}

// answer reads the response on conn, waiting at most wait.
func answer(t *testing.T, conn net.Conn, wait time.Duration) (*http.Response, error) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
	}
	return resp, err
}

// A huge or slow body costs the REST listener nothing when the request has
// no token (401) or is too large (413): the answer comes before the body,
// and the connection is closed instead of reading it.
func TestRESTRefusesBeforeReadingTheBody(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	addr := strings.TrimPrefix(ts.httpURL, "http://")
	const huge = 256 << 20 // announced, never sent
	cases := []struct {
		name, head string
		want       int
	}{
		{"no token, 256 MiB announced", fmt.Sprintf("POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d", huge), http.StatusUnauthorized},
		{"no token, slow small body", "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Length: 100", http.StatusUnauthorized},
		{"unknown token", fmt.Sprintf("POST /v1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer not-a-token-0123456789\r\nContent-Length: %d", huge), http.StatusUnauthorized},
		{"not a bearer token", fmt.Sprintf("POST /v1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Basic %s\r\nContent-Length: %d", tokCheckout, huge), http.StatusUnauthorized},
		{"token, 256 MiB announced", fmt.Sprintf("POST /v1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d", tokCheckout, huge), http.StatusRequestEntityTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn := rawRequest(t, addr, tc.head, nil)
			resp, err := answer(t, conn, 5*time.Second)
			if err != nil {
				t.Fatalf("no answer before the body was sent: %v", err)
			}
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
			if !resp.Close {
				t.Error("the connection stays open: the server would read the unread body next")
			}
			// And the server closes its end.
			_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
				t.Errorf("after the answer: %v, want EOF", err)
			}
		})
	}
}

// A chunked body (no length announced) is read up to http.max_body_bytes and
// refused with 413 past it.
func TestRESTChunkedBodyOverLimit(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *config.Config) { c.HTTP.MaxBodyBytes = 64 << 10 })
	conn := rawRequest(t, strings.TrimPrefix(ts.httpURL, "http://"),
		"POST /v1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+tokCheckout+"\r\nTransfer-Encoding: chunked", nil)
	chunk := strings.Repeat("x", 16<<10)
	go func() { // the server may stop reading before all of it is written
		for range 8 {
			if _, err := fmt.Fprintf(conn, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(conn, "0\r\n\r\n")
	}()
	resp, err := answer(t, conn, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("status %d, want 413", resp.StatusCode)
	}
}

// An authenticated request whose body trickles in is cut off by
// http.read_timeout, and answered 408, saying so.
func TestRESTSlowBodyTimesOut(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *config.Config) { c.HTTP.ReadTimeout = 500 * time.Millisecond })
	conn := rawRequest(t, strings.TrimPrefix(ts.httpURL, "http://"),
		"POST /v1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+tokCheckout+"\r\nContent-Length: 1000", []byte(`{"org_id":`))
	start := time.Now()
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	got, err := io.ReadAll(conn) // the answer, then EOF
	if err != nil {
		t.Fatalf("the connection was not closed: %v", err)
	}
	if !strings.HasPrefix(string(got), "HTTP/1.1 408 ") || !strings.Contains(string(got), "did not arrive in time") {
		t.Errorf("answer %q, want 408 saying the body did not arrive in time", got)
	}
	t.Logf("closed %v after the request started", time.Since(start).Round(time.Millisecond))
}

// A compressed body is refused (415), saying what to send instead.
func TestRESTContentEncoding(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	code, body := ts.doWith(t, "POST", "/v1/orders", tokCheckout, orderBody("org_a", "gz-1"), map[string]string{"Content-Encoding": "gzip"})
	if code != http.StatusUnsupportedMediaType || !strings.Contains(fmt.Sprint(body), "without a Content-Encoding") {
		t.Errorf("gzip: %d %v, want 415", code, body)
	}
	if code, body := ts.doWith(t, "POST", "/v1/orders", tokCheckout, orderBody("org_a", "id-1"), map[string]string{"Content-Encoding": "identity"}); code != http.StatusOK {
		t.Errorf("identity: %d %v, want 200", code, body)
	}
}

// The gRPC listener closes connections that never start a call: one that
// sends nothing (handshake timeout) and one that sends only the HTTP/2
// preface and settings (idle and keepalive bounds).
func TestGRPCClosesIdleConnections(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *config.Config) {
		c.GRPC.ConnectionTimeout = 500 * time.Millisecond
		c.GRPC.MaxConnectionIdle = 500 * time.Millisecond
		c.GRPC.KeepaliveTime = time.Second
		c.GRPC.KeepaliveTimeout = time.Second
	})
	cases := []struct {
		name  string
		hello []byte
	}{
		{"silent", nil},
		// The client preface, then an empty SETTINGS frame; nothing is ever
		// acknowledged.
		{"preface only", append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 0, 0, 0, 4, 0, 0, 0, 0, 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", ts.grpcAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			if _, err := conn.Write(tc.hello); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.Copy(io.Discard, conn); err != nil {
				t.Fatalf("the connection is still open after %v: %v", time.Since(start).Round(time.Second), err)
			}
			t.Logf("closed after %v", time.Since(start).Round(time.Millisecond))
		})
	}
}

// A misspelt query parameter is an error, not a filter silently dropped.
func TestUnknownQueryParameter(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	for _, path := range []string{
		"/v1/orders?orgid=org_b",
		"/v1/orders?org_id=org_a&pagesize=5",
		"/v1/reconciliation/items?kinds=extra_payment",
		"/v1/orders/019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b?view=full",
	} {
		code, body := ts.do(t, "GET", path, tokOps, nil)
		if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(body["message"]), "unknown query parameter") {
			t.Errorf("GET %s: %d %v, want 400 naming the unknown parameter", path, code, body)
		}
	}
	if code, body := ts.do(t, "POST", "/v1/orders?org_id=org_a", tokCheckout, orderBody("org_a", "q-1")); code != http.StatusBadRequest {
		t.Errorf("POST with a query: %d %v, want 400", code, body)
	}
	// A value that is not of the parameter's type is named, with what it
	// must be, in words without the parser's internals.
	for path, want := range map[string]string{
		"/v1/orders?page_size=abc":                            `query parameter page_size: "abc" is not a whole number in the parameter's range`,
		"/v1/orders?pageSize=abc":                             `query parameter page_size: "abc" is not a whole number in the parameter's range`,
		"/v1/orders?page_size=99999999999":                    `query parameter page_size: "99999999999" is not a whole number in the parameter's range`,
		"/v1/reconciliation/items?create_time_from=yesterday": `query parameter create_time_from: "yesterday" is not an RFC 3339 time such as "2026-11-29T10:15:30Z"`,
	} {
		code, body := ts.do(t, "GET", path, tokOps, nil)
		if code != http.StatusBadRequest || fmt.Sprint(body["message"]) != want {
			t.Errorf("GET %s: %d %v, want 400 %q", path, code, body, want)
		}
	}
	// Known parameters, by proto or JSON name, still work.
	for _, path := range []string{"/v1/orders?org_id=org_a&page_size=5", "/v1/orders?orgId=org_a", "/v1/reconciliation/items?kind=extra_payment"} {
		if code, body := ts.do(t, "GET", path, tokOps, nil); code != http.StatusOK {
			t.Errorf("GET %s: %d %v, want 200", path, code, body)
		}
	}
}

// A path or query parameter that is not UTF-8 once percent-decoded is
// refused (400, INVALID_ARGUMENT, naming what), on REST and on the
// console, not an internal error from encoding the call.
func TestAddressNotUTF8(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	for path, want := range map[string]string{
		"/v1/orders?org_id=org_a&merchant_order_id=%FF": `query parameter "merchant_order_id" is not valid UTF-8`,
		"/v1/orders/%FF":                  "the request's path is not valid UTF-8",
		"/v1/reconciliation/items/%C3%28": "the request's path is not valid UTF-8",
		"/v1/orders?org_id=org_a&%FF=1":   "a query parameter's name is not valid UTF-8",
	} {
		code, body := ts.do(t, "GET", path, tokOps, nil)
		if code != http.StatusBadRequest || fmt.Sprint(body["code"]) != "3" || !strings.Contains(fmt.Sprint(body["message"]), want) {
			t.Errorf("GET %s: %d %v, want 400, code 3, %q", path, code, body, want)
		}
	}
	if code, body := ts.do(t, "GET", "/v1/orders?org_id=org_a&merchant_order_id=%C3%A9", tokOps, nil); code != http.StatusOK {
		t.Errorf("a UTF-8 parameter: %d %v, want 200", code, body)
	}
}

// doRaw sends a request of method to path with token and the raw body (""
// for none) and the headers given as name, value pairs; it returns the
// answer's status, headers and body.
func (ts *testServer) doRaw(t *testing.T, method, path, token, body string, headers ...string) (code int, header http.Header, answer string) {
	t.Helper()
	var rd io.Reader = http.NoBody
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.httpURL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(raw)
}

// A REST body holding more after its JSON value is refused whole, and
// stores nothing: the gateway would read the first value and act on it.
func TestBodyWithTrailingData(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	valid, err := json.Marshal(orderBody("org_a", "trailing-1"))
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{string(valid) + ` {"org_id": "org_b"}`, string(valid) + "\n garbage"} {
		code, _, raw := ts.doRaw(t, "POST", "/v1/orders", tokCheckout, body)
		if code != http.StatusBadRequest || !strings.Contains(raw, "goes on after its JSON value") {
			t.Errorf("%.60q…: %d %s, want 400 saying the body goes on", body[len(body)-20:], code, raw)
		}
	}
	// Half of a surrogate pair is no Unicode text: refused with its place,
	// not as the protobuf decoder's "unexpected EOF".
	lone := strings.Replace(string(valid), `"trailing-1"`, `"trailing-\ud800"`, 1)
	if code, _, raw := ts.doRaw(t, "POST", "/v1/orders", tokCheckout, lone); code != http.StatusBadRequest ||
		!strings.Contains(raw, `\\ud800 is half of a UTF-16 surrogate pair`) {
		t.Errorf("a body with half a surrogate pair: %d %s, want 400 saying so", code, raw)
	}
	list, err := ts.client.ListOrders(withToken(tokOps), &fulfillmentv1.ListOrdersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(list.GetOrders()); n != 0 {
		t.Errorf("%d orders stored by bodies with trailing data or half a surrogate pair", n)
	}
	// White space alone is no body, as none at all: the call goes on.
	if code, _, raw := ts.doRaw(t, "POST", "/v1/events/999:replay", tokOps, "\n "); code != http.StatusNotFound {
		t.Errorf("a body of white space: %d %s, want the call's own answer (404: no such event)", code, raw)
	}
}

// A REST call waits for a stream of the in-process connection within
// grpc.max_call_duration from its arrival: with the only stream
// (max_concurrent_streams 1) held by an order event feed, it is answered
// DEADLINE_EXCEEDED (504) about then, rather than when the feed ends.
func TestRESTCallWaitingForAStreamIsBounded(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *config.Config) {
		c.GRPC.MaxConcurrentStreams = 1
		c.GRPC.MaxCallDuration = time.Second
	})
	ctx, cancel := context.WithCancel(withToken(tokOps))
	defer cancel()
	feed, err := fulfillmentv1.NewFulfillmentServiceClient(ts.local).WatchOrderEvents(ctx, &fulfillmentv1.WatchOrderEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := feed.Header(); err != nil {
		t.Fatalf("the feed did not start: %v", err)
	}
	client := &http.Client{Timeout: 20 * time.Second}
	req, err := http.NewRequest("GET", ts.httpURL+"/v1/orders", http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokOps)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("the call waited past %v: %v", time.Since(start).Round(time.Millisecond), err)
	}
	_ = resp.Body.Close()
	took := time.Since(start)
	if resp.StatusCode != http.StatusGatewayTimeout || took > 10*time.Second {
		t.Errorf("%d after %v, want 504 after about a second", resp.StatusCode, took.Round(time.Millisecond))
	}
	t.Logf("%d after %v", resp.StatusCode, took.Round(time.Millisecond))
}

// The HTTP listener holds at most http.max_connections connections open.
// With its two taken by clients that send nothing, a third is served: it
// takes the place of the oldest of them, which is closed. With its two
// busy with requests (bodies that do not come), a third is closed at once,
// and served once one of them goes. With its two taken by idle keep-alive
// connections, a third is served: an idle one makes room.
func TestHTTPConnectionsCapped(t *testing.T) {
	t.Parallel()
	ts := startServer(t, func(c *config.Config) { c.HTTP.MaxConnections = 2 })
	addr := strings.TrimPrefix(ts.httpURL, "http://")
	healthz := func(client *http.Client) error {
		resp, err := client.Get(ts.httpURL + "/healthz")
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("answered %d", resp.StatusCode)
		}
		return nil
	}
	fresh := func() *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	}
	var held []net.Conn
	closeHeld := func() {
		for _, c := range held {
			_ = c.Close()
		}
		held = nil
	}
	t.Cleanup(closeHeld)
	hold := func(request string) net.Conn {
		t.Helper()
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
		if _, err := io.WriteString(conn, request); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // (accepted, and what was sent read)
		return conn
	}
	closed := func(conn net.Conn) bool {
		_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := conn.Read(make([]byte, 1))
		return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
	}

	oldest, newer := hold(""), hold("")
	if err := healthz(fresh()); err != nil {
		t.Fatalf("with both connections taken by clients that send nothing: %v; want a third served", err)
	}
	if !closed(oldest) {
		t.Error("the oldest connection that sent nothing is still open, want it closed to make room")
	}
	_ = newer.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := newer.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the newer silent connection: %v, want it left open", err)
	}
	closeHeld()
	time.Sleep(100 * time.Millisecond) // (the server sees them go)

	// Two requests whose bodies do not come: both connections are busy.
	busy := "POST /v1/orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + tokOps +
		"\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
	hold(busy)
	hold(busy)
	if err := healthz(fresh()); err == nil {
		t.Fatal("with both connections busy with requests, a third was served")
	}
	closeHeld()
	// The server sees them go as it reads them.
	for deadline := time.Now().Add(5 * time.Second); healthz(fresh()) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the connections closed, yet no request is served")
		}
	}
	time.Sleep(100 * time.Millisecond) // (and that one's)
	// Two clients that keep their connection open, idle, between requests.
	for range 2 {
		keep := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{}}
		if err := healthz(keep); err != nil {
			t.Fatalf("a keep-alive client: %v", err)
		}
	}
	// (Idle as soon as the server has written their answers: a request
	// that comes before that may be refused, and is tried again.)
	for i := range 3 {
		err := healthz(fresh())
		for deadline := time.Now().Add(2 * time.Second); err != nil && time.Now().Before(deadline); err = healthz(fresh()) {
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("request %d with two idle keep-alive connections open: %v; want it served", i+1, err)
		}
	}
}

// One token follows at most 32 order event feeds on one server: the 33rd
// is RESOURCE_EXHAUSTED, saying so, while another token still follows one,
// and the first gets a place back when one of its feeds ends.
func TestFeedsPerToken(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	type liveFeed struct {
		cancel context.CancelFunc
		ended  chan struct{} // closed when the stream ends, by the server or by cancel
	}
	open := func(token string) (*liveFeed, error) {
		ctx, cancel := context.WithCancel(withToken(token))
		feed, err := ts.client.WatchOrderEvents(ctx, &fulfillmentv1.WatchOrderEventsRequest{})
		if err != nil {
			cancel()
			return nil, err
		}
		// A feed sends its headers at once; a refused one ends without
		// them, with its status.
		md, err := feed.Header()
		if err == nil && md == nil {
			_, err = feed.Recv()
		}
		if err != nil {
			cancel()
			return nil, err
		}
		f := &liveFeed{cancel, make(chan struct{})}
		go func() {
			defer close(f.ended)
			for {
				if _, err := feed.Recv(); err != nil {
					return
				}
			}
		}()
		return f, nil
	}
	var feeds []*liveFeed
	defer func() {
		for _, f := range feeds {
			f.cancel()
		}
	}()
	ended := func(f *liveFeed) bool {
		select {
		case <-f.ended:
			return true
		default:
			return false
		}
	}
	// A feed the server ends by itself (a read of the feed that failed:
	// under load, its wait for a database connection) gives its place
	// back, and a 33rd then rightly gets it: such a round is told again
	// with the feeds that ended replaced.
	const rounds = 5
	for round := 1; ; round++ {
		for i := range maxFeeds {
			if i < len(feeds) && !ended(feeds[i]) {
				continue
			}
			f, err := openEventually(t, func() (*liveFeed, error) { return open(tokOps) })
			if err != nil {
				t.Fatalf("feed %d: %v", i+1, err)
			}
			if i < len(feeds) {
				feeds[i] = f
			} else {
				feeds = append(feeds, f)
			}
		}
		extra, err := open(tokOps)
		if err != nil {
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "this token already follows 32 order event feeds") {
				t.Fatalf("the 33rd feed of one token: %v, want RESOURCE_EXHAUSTED naming the token's feeds", err)
			}
			break
		}
		extra.cancel()
		if !slices.ContainsFunc(feeds, ended) {
			t.Fatalf("the 33rd feed of one token was served while the other %d were", maxFeeds)
		}
		if round == rounds {
			t.Fatalf("in each of %d rounds a feed ended by itself before the 33rd was asked for", rounds)
		}
		t.Logf("round %d: a feed ended by itself, and the 33rd took its place; again", round)
	}
	if f, err := open(tokCheckout); err != nil {
		t.Errorf("another token's feed: %v", err)
	} else {
		feeds = append(feeds, f)
	}
	feeds[0].cancel()
	f, err := openEventually(t, func() (*liveFeed, error) { return open(tokOps) })
	if err != nil {
		t.Fatalf("a feed ended, yet the token gets no place back: %v", err)
	}
	feeds = append(feeds, f)
}

// maxFeeds is how many feeds one token may follow on one server.
const maxFeeds = 32

// openEventually calls open until it succeeds, for up to 10 seconds: a
// place a feed gave back is free once the server has seen it end.
func openEventually[F any](t *testing.T, open func() (F, error)) (F, error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		f, err := open()
		if err == nil || time.Now().After(deadline) {
			return f, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A method a path does not take is 405 listing the ones it does (Allow),
// and a form-encoded POST to a route that only reads is not read as a GET.
func TestRESTMethodNotAllowed(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	for _, tc := range []struct{ method, path, allow string }{
		{"DELETE", "/v1/orders", "GET, POST"},
		{"PUT", "/v1/orders/019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b", "GET"},
		{"PATCH", "/v1/reconciliation/items/8:resolve", "POST"},
		{"PUT", "/v1/orders%2Fx", "GET"}, // the gateway routes the path decoded: /v1/orders/x
	} {
		code, h, raw := ts.doRaw(t, tc.method, tc.path, tokOps, "")
		if code != http.StatusMethodNotAllowed || h.Get("Allow") != tc.allow || !strings.Contains(raw, "it takes "+tc.allow) {
			t.Errorf("%s %s: %d, Allow %q, %s; want 405, Allow %q", tc.method, tc.path, code, h.Get("Allow"), raw, tc.allow)
		}
	}
	code, _, _ := ts.doRaw(t, "POST", "/v1/reconciliation/items/8", tokOps, "bogus=1", "Content-Type", "application/x-www-form-urlencoded")
	if code == http.StatusOK || code == http.StatusNotFound {
		t.Errorf("a form POST to a route that only reads: %d, want it refused", code)
	}
}

// maximalOrder is a CreateOrder request of 100 lines whose texts are all at
// their longest: the largest item a listing page can hold.
func maximalOrder(merchantID string) *fulfillmentv1.CreateOrderRequest {
	long := func(prefix string, i int) string {
		s := fmt.Sprintf("%s-%s-%03d-", prefix, merchantID, i)
		return s + strings.Repeat("x", fulfillment.MaxIDLen-len(s))
	}
	req := &fulfillmentv1.CreateOrderRequest{OrgId: "org_a", Environment: "live", MerchantOrderId: merchantID,
		Settlement: &fulfillmentv1.Settlement{Token: "USDT", Network: "TRON", Amount: "25"}}
	for i := range fulfillment.MaxLines {
		req.Lines = append(req.Lines, &fulfillmentv1.OrderLine{Sku: long("sku", i), Kind: "balance_credit", Quantity: 1,
			UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 100}, AccountRef: long("acct", i)})
	}
	return req
}

// A page of 500 maximal orders would exceed what a gRPC client accepts: the
// page stops at the byte bound and says there is more, over gRPC and REST,
// and following the pages lists every order once.
func TestListPagesBoundedByBytes(t *testing.T) {
	t.Parallel()
	ts := startServer(t, nil)
	const orders = 500
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range orders {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := ts.client.CreateOrder(withToken(tokCheckout), maximalOrder(fmt.Sprintf("big-%03d", i))); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// gRPC, with a client's default 4 MiB receive limit.
	start := time.Now()
	seen := map[string]bool{}
	token, pages := "", 0
	for {
		resp, err := ts.client.ListOrders(withToken(tokCheckout), &fulfillmentv1.ListOrdersRequest{OrgId: "org_a", PageSize: 500, PageToken: token},
			grpc.MaxCallRecvMsgSize(4<<20))
		if err != nil {
			t.Fatalf("page %d: %v", pages+1, err)
		}
		pages++
		if size := proto.Size(resp); size > config.DefaultGRPCMaxPageBytes+64<<10 {
			t.Errorf("page %d: %d bytes, more than the page bound", pages, size)
		}
		for _, o := range resp.GetOrders() {
			if seen[o.GetId()] {
				t.Errorf("order %s on two pages", o.GetId())
			}
			seen[o.GetId()] = true
			if len(o.GetLines()) != fulfillment.MaxLines {
				t.Errorf("order %s listed with %d lines", o.GetId(), len(o.GetLines()))
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if len(seen) != orders || pages < 2 {
		t.Errorf("gRPC: %d orders in %d pages, want %d in several", len(seen), pages, orders)
	}
	t.Logf("gRPC: %d orders in %d pages of page_size 500, %v", len(seen), pages, time.Since(start).Round(time.Millisecond))

	// REST.
	total, pages, token := 0, 0, ""
	for {
		code, body := ts.do(t, "GET", "/v1/orders?org_id=org_a&page_size=500&page_token="+token, tokCheckout, nil)
		if code != http.StatusOK {
			t.Fatalf("REST page %d: %d %v", pages+1, code, body)
		}
		pages++
		total += len(body["orders"].([]any))
		if token, _ = body["next_page_token"].(string); token == "" {
			break
		}
	}
	if total != orders || pages < 2 {
		t.Errorf("REST: %d orders in %d pages, want %d in several", total, pages, orders)
	}
}
