package main

import (
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
)

// Bounds of fulfillctl listen.
const (
	// listenTolerance is how far a delivery's webhook-timestamp may be from
	// the receiver's clock, either way.
	listenTolerance = 5 * time.Minute
	// listenMaxBody is the largest body listen reads; a larger one is 413.
	listenMaxBody = 1 << 20
	// listenMaxIDs is how many webhook-ids listen remembers to mark repeats
	// (the most recently delivered ones).
	listenMaxIDs = 10_000
	// listenMaxShown is how many bytes of a webhook-id, path or event type a
	// line shows: all of any id that verifies.
	listenMaxShown = stdwebhooks.MaxIDBytes
	// Server timeouts; writing the answer also gets --delay.
	listenReadHeaderTimeout = 10 * time.Second
	listenReadTimeout       = 30 * time.Second
	listenWriteTimeout      = 30 * time.Second
	listenIdleTimeout       = 2 * time.Minute
	listenMaxHeaderBytes    = 64 << 10
	listenShutdownTimeout   = 5 * time.Second
)

// listenFlags holds the flags of listen.
type listenFlags struct {
	addr                    string
	secretFiles, secretEnvs []string
	status, failFirst       int
	delay                   time.Duration
	json                    bool
}

func newListenCmd() *cobra.Command {
	var l listenFlags
	cmd := &cobra.Command{
		Use:   "listen (--secret-file PATH | --secret-env NAME)... [flags]",
		Short: "Receive Standard Webhooks deliveries locally and print them (development)",
		Long: `Listen is a local receiver for the service's outgoing webhooks, for development.
It accepts POSTs on any path, verifies each delivery's Standard Webhooks
signature (webhook-id, webhook-timestamp within 5 minutes, webhook-signature)
against every given secret, and prints one line per request: the time, the
path, the webhook-id (marked "repeat N" when that id was delivered before),
the body's top-level "type", whether it verified (or why not), the body size
and the answer.

Answers: 401 when the signature does not verify, 413 for a body over 1 MiB,
405 for another method than POST; otherwise 500 for the first --fail-first
verified deliveries of each webhook-id, then --status. --delay holds every
answer back, to exercise the sender's timeouts. The last 10,000 webhook-ids
are remembered.

Secrets are "whsec_" followed by base64, or the base64 alone (as the official
Standard Webhooks libraries take them); give several (repeat the flags) to
accept deliveries signed with any of them, as during a rotation. The address
listened on is printed to stderr.`,
		Example: `  fulfillctl listen --secret-file .data/dev/outbox.secret
  fulfillctl listen --secret-env OLD_SECRET --secret-env NEW_SECRET --fail-first 2 --json
  fulfillctl listen --secret-file s.txt --delay 15s --status 503`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return l.run(cmd) },
	}
	f := cmd.Flags()
	// Shadows the root's --addr (fulfillmentd's gRPC address), which listen
	// does not use.
	// $FULFILLCTL_LISTEN_ADDR is also where make run's dev-listener
	// destination posts (scripts/dev-config.sh).
	f.StringVar(&l.addr, "addr", envOr("FULFILLCTL_LISTEN_ADDR", "127.0.0.1:8090"), "address to listen on (port 0: any free port; $FULFILLCTL_LISTEN_ADDR)")
	f.StringArrayVar(&l.secretFiles, "secret-file", nil, "file holding a whsec_ signing secret (repeatable)")
	f.StringArrayVar(&l.secretEnvs, "secret-env", nil, "environment variable holding a whsec_ signing secret (repeatable)")
	f.IntVar(&l.status, "status", http.StatusOK, "HTTP status of the answer to verified deliveries (200-599)")
	f.DurationVar(&l.delay, "delay", 0, "wait this long before answering each request, e.g. 15s")
	f.IntVar(&l.failFirst, "fail-first", 0, "answer 500 to the first N verified deliveries of each webhook-id, then --status")
	f.BoolVar(&l.json, "json", false, "print each request as one JSON object per line")
	cmd.MarkFlagsOneRequired("secret-file", "secret-env")
	return cmd
}

func (l *listenFlags) run(cmd *cobra.Command) error {
	rc, err := l.receiver(os.LookupEnv, cmd.OutOrStdout())
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", l.addr)
	if err != nil {
		return fmt.Errorf("--addr: %w", err)
	}
	_, _ = fmt.Fprintf(cmd.ErrOrStderr(), "listening on http://%s (secrets: %d; answering %d, fail-first %d, delay %s); Ctrl-C stops\n",
		ln.Addr(), len(rc.secrets), rc.status, rc.failFirst, rc.delay)
	return rc.serve(ctx, ln)
}

// receiver checks the flags and reads the secrets (environment variables
// through lookup) into a receiver printing to out.
func (l *listenFlags) receiver(lookup func(string) (string, bool), out io.Writer) (*receiver, error) {
	if l.status < 200 || l.status > 599 {
		return nil, fmt.Errorf("--status %d: must be an HTTP status from 200 to 599", l.status)
	}
	if l.delay < 0 {
		return nil, fmt.Errorf("--delay %s: must not be negative", l.delay)
	}
	if l.failFirst < 0 {
		return nil, fmt.Errorf("--fail-first %d: must not be negative", l.failFirst)
	}
	var secrets []stdwebhooks.Secret
	for _, path := range l.secretFiles {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--secret-file: %w", err)
		}
		s, err := stdwebhooks.ParseSecret(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, fmt.Errorf("--secret-file %s: %w", path, err)
		}
		secrets = append(secrets, s)
	}
	for _, name := range l.secretEnvs {
		v, ok := lookup(name)
		if !ok || v == "" {
			return nil, fmt.Errorf("--secret-env: environment variable %s is not set", name)
		}
		s, err := stdwebhooks.ParseSecret(strings.TrimSpace(v))
		if err != nil {
			return nil, fmt.Errorf("--secret-env %s: %w", name, err)
		}
		secrets = append(secrets, s)
	}
	if len(secrets) == 0 {
		return nil, errors.New("no secret: pass --secret-file or --secret-env")
	}
	return &receiver{
		secrets:   secrets,
		status:    l.status,
		delay:     l.delay,
		failFirst: l.failFirst,
		json:      l.json,
		now:       time.Now,
		out:       out,
		seen:      newSeenIDs(listenMaxIDs),
	}, nil
}

// receiver is the HTTP handler of listen.
type receiver struct {
	secrets   []stdwebhooks.Secret
	status    int
	delay     time.Duration
	failFirst int
	json      bool
	now       func() time.Time

	mu   sync.Mutex // guards out and seen
	out  io.Writer
	seen *seenIDs
}

// serve answers on ln until ctx ends, then shuts down: requests in flight
// (their contexts end with ctx, cutting a --delay short) get
// listenShutdownTimeout to finish.
func (rc *receiver) serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           rc,
		ReadHeaderTimeout: listenReadHeaderTimeout,
		ReadTimeout:       listenReadTimeout,
		WriteTimeout:      listenWriteTimeout + rc.delay,
		IdleTimeout:       listenIdleTimeout,
		MaxHeaderBytes:    listenMaxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listenShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("stopping: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// delivery is what listen prints about one request (the --json form).
type delivery struct {
	Time      time.Time `json:"time"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	WebhookID string    `json:"webhook_id"` // as sent, cut to listenMaxShown bytes
	Type      string    `json:"type"`       // the body's top-level "type", if a string
	Size      int64     `json:"size"`       // body bytes; unread (405, 413): the Content-Length, -1 if unknown
	Verified  bool      `json:"verified"`
	Reason    string    `json:"reason,omitempty"` // why not verified
	Attempt   int       `json:"attempt"`          // verified deliveries of this webhook-id so far, this one included
	Repeat    bool      `json:"repeat"`           // Attempt > 1
	Status    int       `json:"status"`
	Note      string    `json:"note,omitempty"` // why this status; whether it was not sent
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d := delivery{
		Time:      rc.now(),
		Method:    r.Method,
		Path:      cut(r.URL.Path, listenMaxShown),
		WebhookID: cut(r.Header.Get(stdwebhooks.HeaderID), listenMaxShown),
	}
	answer := rc.handle(w, r, &d)
	if rc.delay > 0 {
		t := time.NewTimer(rc.delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	if r.Context().Err() != nil {
		d.Note = joinNote(d.Note, "not sent: the client left or listen is stopping")
		rc.print(&d)
		return
	}
	rc.print(&d) // first: once the sender has its answer, the line is out
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(d.Status)
	_, _ = io.WriteString(w, answer+"\n")
}

// handle reads and verifies the request, filling in d, and returns the
// answer's body.
func (rc *receiver) handle(w http.ResponseWriter, r *http.Request, d *delivery) string {
	if r.Method != http.MethodPost {
		d.Size, d.Status, d.Reason = r.ContentLength, http.StatusMethodNotAllowed, "not a POST"
		w.Header().Set("Allow", http.MethodPost)
		return "deliveries are POSTs"
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, listenMaxBody))
	if err != nil {
		d.Size, d.Status = r.ContentLength, http.StatusBadRequest
		d.Reason = "reading the body: " + err.Error()
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			d.Status, d.Reason = http.StatusRequestEntityTooLarge, "body over 1 MiB"
		}
		return d.Reason
	}
	d.Size = int64(len(body))
	d.Type = cut(eventType(body), listenMaxShown)
	if err := stdwebhooks.Verify(r.Header, body, d.Time, listenTolerance, rc.secrets...); err != nil {
		d.Status = http.StatusUnauthorized
		d.Reason = strings.TrimPrefix(err.Error(), stdwebhooks.ErrVerification.Error()+": ")
		return err.Error()
	}
	d.Verified = true
	rc.mu.Lock()
	d.Attempt = rc.seen.add(d.WebhookID) // verified: the whole id, as Verify bounds it
	rc.mu.Unlock()
	d.Repeat = d.Attempt > 1
	if d.Attempt <= rc.failFirst {
		d.Status = http.StatusInternalServerError
		d.Note = fmt.Sprintf("--fail-first %d", rc.failFirst)
		return fmt.Sprintf("failing on purpose: delivery %d of this webhook-id, --fail-first %d", d.Attempt, rc.failFirst)
	}
	d.Status = rc.status
	return http.StatusText(rc.status)
}

// print writes d as one line.
func (rc *receiver) print(d *delivery) {
	var line []byte
	if rc.json {
		utc := *d
		utc.Time = d.Time.UTC()
		b, err := json.Marshal(&utc)
		if err != nil { // cannot happen: strings, numbers and a time
			b = []byte(`{"error":` + strconv.Quote(err.Error()) + `}`)
		}
		line = b
		line = append(line, '\n')
	} else {
		line = []byte(d.text() + "\n")
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	_, _ = rc.out.Write(line)
}

// text is the human form of d: fields separated by two spaces, "-" for an
// absent one, e.g.
//
//	15:04:05.000  /hooks  order_019a…_line_0_fulfill (repeat 2)  fulfillment.requested  verified  402 B  -> 500 (--fail-first 2)
func (d *delivery) text() string {
	var b strings.Builder
	field := func(s string) {
		if b.Len() > 0 {
			b.WriteString("  ")
		}
		b.WriteString(s)
	}
	orDash := func(s string) string {
		if s == "" {
			return "-"
		}
		return shown(s)
	}
	field(d.Time.Format("15:04:05.000"))
	if d.Method != http.MethodPost {
		field(shown(d.Method) + " " + orDash(d.Path))
	} else {
		field(orDash(d.Path))
	}
	id := orDash(d.WebhookID)
	if d.Repeat {
		id += fmt.Sprintf(" (repeat %d)", d.Attempt)
	}
	field(id)
	field(orDash(d.Type))
	if d.Verified {
		field("verified")
	} else {
		field("NOT VERIFIED: " + d.Reason)
	}
	if d.Size < 0 {
		field("? B")
	} else {
		field(fmt.Sprintf("%d B", d.Size))
	}
	if d.Note != "" {
		field(fmt.Sprintf("-> %d (%s)", d.Status, d.Note))
	} else {
		field(fmt.Sprintf("-> %d", d.Status))
	}
	return b.String()
}

// joinNote appends a note to another.
func joinNote(note, more string) string {
	if note == "" {
		return more
	}
	return note + "; " + more
}

// eventType returns the body's top-level "type" when the body is a JSON
// object whose "type" is a string, else "".
func eventType(body []byte) string {
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return ""
	}
	var t string
	if json.Unmarshal(top["type"], &t) != nil {
		return ""
	}
	return t
}

// cut shortens s to at most n bytes, on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

// shown returns s as is when it is printable text without spaces, and
// quoted (Go syntax, ASCII) otherwise: a line never carries a sender's
// control characters or lets a value pass for two fields.
func shown(s string) string {
	for _, r := range s {
		if r == ' ' || r == utf8.RuneError || !strconv.IsPrint(r) {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}

// seenIDs counts deliveries per webhook-id, remembering the max most
// recently delivered ids.
type seenIDs struct {
	max   int
	order *list.List // of *seenID, most recently delivered first
	byID  map[string]*list.Element
}

type seenID struct {
	id string
	n  int
}

func newSeenIDs(maxIDs int) *seenIDs {
	return &seenIDs{max: maxIDs, order: list.New(), byID: make(map[string]*list.Element)}
}

// add counts a delivery of id and returns how many it has had, this one
// included (1 when id is new or was forgotten).
func (s *seenIDs) add(id string) int {
	if e, ok := s.byID[id]; ok {
		s.order.MoveToFront(e)
		v := e.Value.(*seenID)
		v.n++
		return v.n
	}
	s.byID[id] = s.order.PushFront(&seenID{id: id, n: 1})
	for s.order.Len() > s.max {
		oldest := s.order.Back()
		s.order.Remove(oldest)
		delete(s.byID, oldest.Value.(*seenID).id)
	}
	return 1
}
