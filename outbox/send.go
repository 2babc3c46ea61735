// Package outbox delivers the service's outbox messages to their
// destinations: one HTTP POST per attempt, signed as Standard Webhooks
// deliveries, and classified so that the dispatcher knows whether it may
// send the message again.
//
// The dispatcher (claiming rows, backoff, recording results) is elsewhere;
// this package performs one attempt and says what it proved.
package outbox

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
)

// Destination is one receiver of outbox messages.
type Destination struct {
	// ID names the destination for the dispatcher; Send does not use it.
	ID string
	// URL is where deliveries are POSTed: an absolute http or https URL.
	// Redirects are not followed.
	URL string
	// Secrets sign every delivery, one signature per secret, so that during
	// a rotation the receiver can verify with the old or the new one. At
	// least one must hold a key.
	Secrets []stdwebhooks.Secret
	// Idempotent says the receiver applies each webhook-id (equally,
	// Idempotency-Key) at most once, so a message may be sent again after
	// any failure. When false, a message that may have been processed is
	// never sent again automatically (see Uncertain).
	Idempotent bool
	// Timeout bounds the whole attempt, from resolving the host to the
	// last response byte read. It must be positive.
	Timeout time.Duration
}

// Message is one delivery to make.
type Message struct {
	// Key identifies the message: sent as both webhook-id and
	// Idempotency-Key, and the same on every attempt. It must be 1 to
	// stdwebhooks.MaxIDBytes printable ASCII characters without spaces,
	// as Standard Webhooks receivers require.
	Key string
	// Topic is the message's kind, e.g. "order.fulfilled", for the
	// dispatcher's logs; Send does not use it (the body carries "type").
	Topic string
	// Payload is the JSON body, sent byte for byte.
	Payload []byte
}

// Verdict is what one attempt proved, and so what the dispatcher may do
// next. The zero Verdict is none of these; Send never returns it.
type Verdict int

// The verdicts of an attempt.
const (
	// Delivered: the destination answered 2xx. The message is done.
	Delivered Verdict = iota + 1
	// Retry: the message was not delivered, and sending it again cannot
	// apply it twice: either the destination is idempotent, or the
	// request provably was not processed (nothing was sent, or the
	// destination answered 3xx or 4xx). Send it again after a backoff.
	Retry
	// Uncertain: the destination is not idempotent and the request may
	// have been processed (it was sent, even in part, and no answer said
	// otherwise: a timeout, a dropped connection, a 5xx). Sending it
	// again could apply it twice, so it must not be sent automatically;
	// someone has to find out what the destination did.
	Uncertain
	// Gone: the destination answered 410 Gone: it no longer accepts
	// deliveries. Stop sending to it; the message was not delivered.
	Gone
	// Invalid: nothing was sent because the destination or the message
	// cannot be sent as given (see Destination.Validate and Message.Key).
	// The same inputs always give Invalid, so retrying is pointless until
	// the configuration or the code is fixed.
	Invalid
)

// String returns the verdict's lower-case name, e.g. "uncertain".
func (v Verdict) String() string {
	switch v {
	case Delivered:
		return "delivered"
	case Retry:
		return "retry"
	case Uncertain:
		return "uncertain"
	case Gone:
		return "gone"
	case Invalid:
		return "invalid"
	default:
		return "Verdict(" + strconv.Itoa(int(v)) + ")"
	}
}

// Result is the outcome of one attempt.
type Result struct {
	Verdict Verdict
	// Status is the HTTP status of the answer; 0 when none was received.
	Status int
	// Reason says what happened in one short line (under 200 bytes), e.g.
	// "HTTP 503" or "timed out after 5s waiting for the answer (request
	// sent)". It is built from fixed phrases only: it never holds the
	// URL, a header, the payload, a secret or the response body, so it
	// is safe to store and show.
	Reason string
	// Sent is false only when the request provably did not reach the
	// destination: not even its header block was written in full.
	Sent bool
	// RetryAfter is how long a destination that answered 429 or 503 asked
	// to be left alone (its Retry-After: seconds, or a date), at most
	// MaxRetryAfter; 0 when it asked nothing. It is the message's wait
	// when the verdict is Retry; whatever the verdict, the destination's
	// (its other messages are not sent meanwhile).
	RetryAfter time.Duration
}

// MaxRetryAfter bounds how long a Retry-After may hold a message back: a
// date years ahead is a destination's mistake, not a wish to wait.
const MaxRetryAfter = time.Hour

// Defaults of NewSender.
const (
	// DefaultUserAgent is the User-Agent of every delivery.
	DefaultUserAgent = "fulfillmentd"
	// DefaultMaxResponseBytes is how much of an answer's body Send reads
	// (and discards) so that the connection can be reused; past it the
	// connection is closed instead.
	DefaultMaxResponseBytes = 64 << 10
)

// Transport bounds. Concurrency per destination is the dispatcher's to
// limit, so connections per host are not capped here.
const (
	maxResponseHeaderBytes = 64 << 10
	maxIdleConns           = 256
	maxIdleConnsPerHost    = 32
	// idleConnTimeout stays under common server keep-alive timeouts
	// (nginx 75 s, most load balancers 60 s) so that the sender, not the
	// server, usually closes an idle connection.
	idleConnTimeout = 30 * time.Second
)

// Sender makes delivery attempts. It is safe for concurrent use; make it
// with NewSender.
//
// Deliveries to idempotent destinations share kept-alive connections.
// Every delivery to a non-idempotent destination opens a connection of its
// own and closes it after the answer, because net/http silently sends a
// request again when a reused connection turns out to be broken, and a
// POST carrying an Idempotency-Key qualifies for that (see Transport's
// shouldRetryRequest and Request.isReplayable). The transport only does
// this on a reused connection, so it never happens to a non-idempotent
// delivery; the request also carries no GetBody, which alone makes a
// non-empty body ineligible. A fresh connection also means a failure of
// such a delivery is a real one, not a keep-alive connection the server
// closed at the same moment, which would otherwise show up as Uncertain.
type Sender struct {
	now       func() time.Time
	userAgent string
	maxRead   int64
	tls       *tls.Config

	shared *http.Client // idempotent destinations: kept-alive connections
	single *http.Client // other destinations: one connection per attempt
}

// Option configures a Sender.
type Option func(*Sender)

// WithClock sets the clock whose time each attempt signs as its
// webhook-timestamp (for tests); the default is time.Now.
func WithClock(now func() time.Time) Option {
	return func(s *Sender) {
		if now != nil {
			s.now = now
		}
	}
}

// WithUserAgent sets the User-Agent of every delivery (DefaultUserAgent
// otherwise).
func WithUserAgent(ua string) Option {
	return func(s *Sender) { s.userAgent = ua }
}

// WithMaxResponseBytes sets how many bytes of an answer's body Send reads
// at most (DefaultMaxResponseBytes otherwise). Nothing read is kept.
func WithMaxResponseBytes(n int64) Option {
	return func(s *Sender) {
		if n >= 0 {
			s.maxRead = n
		}
	}
}

// WithTLSConfig sets the TLS configuration of https destinations, e.g. to
// trust an internal certificate authority. The default trusts the system's
// roots. The Sender keeps a copy.
func WithTLSConfig(c *tls.Config) Option {
	return func(s *Sender) { s.tls = c.Clone() }
}

// NewSender returns a Sender. Deliveries use HTTP/1.1, connect directly
// (the proxy environment variables are ignored: destinations are internal
// systems, and a proxy would answer for the destination, so a proxy's
// error could not be told from the destination's), do not follow redirects
// and do not ask for compressed answers.
func NewSender(opts ...Option) *Sender {
	s := &Sender{now: time.Now, userAgent: DefaultUserAgent, maxRead: DefaultMaxResponseBytes}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	s.shared = s.client(true)
	s.single = s.client(false)
	return s
}

func (s *Sender) client(keepAlive bool) *http.Client {
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	t := &http.Transport{
		Proxy:                  nil, // not from the environment: see NewSender
		TLSClientConfig:        s.tls,
		Protocols:              &protocols,
		DisableKeepAlives:      !keepAlive,
		DisableCompression:     true,
		MaxIdleConns:           maxIdleConns,
		MaxIdleConnsPerHost:    maxIdleConnsPerHost,
		IdleConnTimeout:        idleConnTimeout,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	return &http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// CloseIdleConnections closes the kept-alive connections not in use, e.g.
// when the dispatcher stops.
func (s *Sender) CloseIdleConnections() { s.shared.CloseIdleConnections() }

// Validate reports why the destination cannot be delivered to, or nil.
// The error never quotes the URL (it may hold credentials).
func (d Destination) Validate() error {
	u, err := url.Parse(d.URL)
	switch {
	case err != nil:
		return errors.New("the destination URL does not parse")
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("the destination URL's scheme must be http or https")
	case u.Hostname() == "":
		return errors.New("the destination URL has no host")
	case u.Port() != "" && !validPort(u.Port()):
		return errors.New("the destination URL's port is not 1 to 65535")
	case d.Timeout <= 0:
		return errors.New("the destination timeout must be positive")
	case !stdwebhooks.AnyKey(d.Secrets...):
		return errors.New("the destination has no signing secret")
	}
	return nil
}

func validPort(p string) bool {
	n, err := strconv.Atoi(p)
	return err == nil && n >= 1 && n <= 65535
}

// checkKey refuses a key that Standard Webhooks receivers would refuse
// as a webhook-id (and that could not always be sent as a header).
func checkKey(key string) error {
	if key == "" || len(key) > stdwebhooks.MaxIDBytes {
		return fmt.Errorf("the message key must be 1 to %d bytes long", stdwebhooks.MaxIDBytes)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c > '~' {
			return errors.New("the message key must be printable ASCII without spaces")
		}
	}
	return nil
}

// Send makes one attempt to deliver m to d and classifies it: a POST of
// m.Payload with Content-Type application/json, the Standard Webhooks
// headers (webhook-id m.Key, webhook-timestamp the time of this attempt,
// webhook-signature under every secret of d) and Idempotency-Key m.Key,
// within d.Timeout (ctx may end it earlier). At most the configured number
// of answer bytes is read.
//
// Verdicts: 2xx is Delivered and 410 Gone. Anything else is Retry for an
// idempotent destination. For another destination it is Retry when the
// request provably was not processed (nothing was sent: DNS failure,
// connection refused, TLS failure, a timeout while connecting; or the
// destination answered 3xx or a 4xx, 408 and 429 included, which by HTTP's
// definition did not act on it — except 303, which answers a POST that
// was acted on), and Uncertain otherwise (a timeout or a lost connection
// after something was sent, a 303, a 5xx or non-standard answer).
// Invalid inputs give Invalid without sending anything. Send does not
// panic, whatever its inputs.
func (s *Sender) Send(ctx context.Context, d Destination, m Message) Result {
	if err := d.Validate(); err != nil {
		return Result{Verdict: Invalid, Reason: err.Error()}
	}
	if err := checkKey(m.Key); err != nil {
		return Result{Verdict: Invalid, Reason: err.Error()}
	}
	if ctx == nil {
		ctx = context.Background()
	}
	// Signing a large payload takes time: not the destination's.
	req, err := s.request(ctx, d, m)
	if err != nil {
		return Result{Verdict: Invalid, Reason: "the request cannot be built from the destination URL"}
	}
	attempt, cancel := context.WithTimeout(ctx, d.Timeout)
	defer cancel()
	var p progress
	req = req.WithContext(httptrace.WithClientTrace(attempt, p.trace()))
	client := s.single
	if d.Idempotent {
		client = s.shared
	}
	resp, err := client.Do(req)
	if err != nil {
		return failed(ctx, attempt, d, &p, err)
	}
	// Whatever happens while reading the body, the status is the answer.
	_, _ = io.CopyN(io.Discard, resp.Body, s.maxRead)
	_ = resp.Body.Close()
	r := answered(resp.StatusCode, d.Idempotent)
	if r.Status == http.StatusTooManyRequests || r.Status == http.StatusServiceUnavailable {
		// Read for an uncertain message too: it is not sent again, but the
		// destination's other messages wait as asked.
		r.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), s.now())
		if r.RetryAfter > 0 {
			r.Reason += " (asked to retry after " + r.RetryAfter.String() + ")"
		}
	}
	return r
}

// retryAfter reads a Retry-After header (delay-seconds or an HTTP date,
// RFC 9110 10.2.3) at now, bounded by MaxRetryAfter; 0 when absent,
// malformed or past.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	// Seconds past what an int64 holds are read as its largest (or, negative,
	// its smallest): a very long wait, or none.
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		d = time.Duration(min(max(secs, 0), int64(MaxRetryAfter/time.Second))) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now).Truncate(time.Second)
	}
	return min(max(d, 0), MaxRetryAfter)
}

// request builds the POST of m to d, under ctx.
func (s *Sender) request(ctx context.Context, d Destination, m Message) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.URL, bytes.NewReader(m.Payload))
	if err != nil {
		return nil, err
	}
	for name, v := range stdwebhooks.Headers(m.Key, s.now(), m.Payload, d.Secrets...) {
		req.Header[name] = v
	}
	req.Header.Set("Idempotency-Key", m.Key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", s.userAgent)
	if !d.Idempotent {
		// Without GetBody the transport cannot replay a sent body.
		req.GetBody = nil
	}
	return req, nil
}

// answered classifies an answer with the given status.
func answered(status int, idempotent bool) Result {
	r := Result{Status: status, Sent: true, Reason: "HTTP " + strconv.Itoa(status)}
	switch {
	case status >= 200 && status <= 299:
		r.Verdict = Delivered
	case status == http.StatusGone:
		r.Verdict = Gone
	case idempotent:
		r.Verdict = Retry
	case status == http.StatusSeeOther, status == http.StatusFound, status == http.StatusMovedPermanently:
		// 303 is the answer to a POST that was acted on, pointing at its
		// result (RFC 9110, 15.4.4); 302 and 301 are what many servers
		// answer a POST they processed (post/redirect/get): sent again, it
		// could act twice. 307 and 308 ask for the same request at another
		// address, so the request was not acted on here.
		r.Verdict = Uncertain
	case status >= 300 && status <= 499:
		// The destination answered without acting on the request.
		r.Verdict = Retry
	default:
		// 5xx, or a status outside the classes HTTP defines.
		r.Verdict = Uncertain
	}
	if status >= 300 && status <= 399 {
		r.Reason += " (redirects are not followed)"
	}
	return r
}

// progress records how far an attempt got. The transport calls the trace
// hooks from its own goroutines, hence the atomics.
type progress struct {
	wroteHeaders atomic.Bool // the header block may have reached the destination
	wroteRequest atomic.Bool // the whole request was written
	gotAnswer    atomic.Bool // the first byte of an answer arrived
}

func (p *progress) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		// Called once the header block is in the connection's buffer: its
		// last byte has not reached the network yet, so before this call
		// the destination cannot have a whole request.
		WroteHeaders: func() { p.wroteHeaders.Store(true) },
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				p.wroteRequest.Store(true)
			}
		},
		GotFirstResponseByte: func() { p.gotAnswer.Store(true) },
	}
}

// stage is how far an attempt got.
type stage int

const (
	connecting stage = iota // the header block is not out: nothing can be processed
	sending                 // the request may be partly out
	waiting                 // the request is written, no answer yet
	reading                 // an answer started
)

func (p *progress) stage() stage {
	switch {
	case p.gotAnswer.Load():
		return reading
	case p.wroteRequest.Load():
		return waiting
	case p.wroteHeaders.Load():
		return sending
	default:
		return connecting
	}
}

// sent reports whether the destination may have received the request.
func (s stage) sent() bool { return s != connecting }

// describe returns the stage as the end of a reason: what was being done
// and what was sent, e.g. "waiting for the answer (request sent)".
func (s stage) describe() string {
	switch s {
	case connecting:
		return "connecting (nothing sent)"
	case sending:
		return "sending the request (partly sent)"
	case waiting:
		return "waiting for the answer (request sent)"
	default:
		return "reading the answer (request sent)"
	}
}

// failed classifies an attempt that got no answer. parent is Send's
// context, attempt the one bounded by d.Timeout.
func failed(parent, attempt context.Context, d Destination, p *progress, err error) Result {
	st := p.stage()
	r := Result{Verdict: Retry, Sent: st.sent()}
	if r.Sent && !d.Idempotent {
		r.Verdict = Uncertain
	}
	switch {
	case parent.Err() != nil:
		r.Reason = "canceled while " + st.describe()
	case attempt.Err() != nil:
		r.Reason = "timed out after " + d.Timeout.String() + " " + st.describe()
	default:
		r.Reason = cause(err, st) + " while " + st.describe()
	}
	return r
}

// plainAnswerToTLS is the error net/http gives, in place of the TLS
// record header error, when an https URL's server answered in plain HTTP.
const plainAnswerToTLS = "server gave HTTP response to HTTPS client"

// cause names a transport error, which happened at stage st, in a fixed
// phrase: the error's own text may quote the URL or the answer.
func cause(err error, st stage) string {
	if e, ok := errors.AsType[*net.DNSError](err); ok {
		switch {
		case e.IsNotFound:
			return "no such host (DNS)"
		case e.IsTimeout:
			return "DNS lookup timed out"
		default:
			return "DNS lookup failed"
		}
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return "TLS: certificate not trusted"
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok || strings.Contains(err.Error(), plainAnswerToTLS) {
		return "TLS: the destination does not speak TLS"
	}
	if _, ok := errors.AsType[tls.AlertError](err); ok {
		return "TLS: handshake refused by the destination"
	}
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EPIPE):
		return "connection closed by the destination (broken pipe)"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed by the destination"
	case errors.Is(err, syscall.ETIMEDOUT):
		return "connection timed out"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "destination unreachable"
	}
	if e, ok := errors.AsType[net.Error](err); ok && e.Timeout() {
		return "timed out"
	}
	if st == reading {
		return "malformed or oversized answer"
	}
	return "connection failed"
}
