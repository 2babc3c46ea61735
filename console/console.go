// Package console is the operators' web console, served by fulfillmentd
// under /console/ on the HTTP listener: server-rendered html/template pages,
// progressively enhanced by one vendored htmx file, every asset embedded.
//
// The console is a client of the service's own API, in-process: an operator
// signs in with a configured API token, the console keeps a server-side
// session naming that token, and every page calls the gRPC methods with the
// token as the bearer. Scopes, org limits, validation and bounds are
// therefore exactly the API's; the console only hides what the API would
// refuse. Every action is recorded in an audit log.
package console

import (
	"context"
	"crypto/sha256"
	"embed"
	"io/fs"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"google.golang.org/grpc"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/internal/httpmetrics"
)

// Prefix is where the console is mounted.
const Prefix = "/console/"

// Bounds of every console request.
const (
	// maxFormBytes caps a form body: the largest is a resolution note.
	maxFormBytes = 64 << 10
	// requestTimeout bounds one page: every API call it makes.
	requestTimeout = 10 * time.Second
	// auditWait bounds the write of an audit entry, which outlives its
	// page's request (it records what the request did).
	auditWait = 5 * time.Second
	// pageSize is the rows of one listing page (the API allows up to 500).
	pageSize = 50
)

//go:embed static
var staticFiles embed.FS

//go:embed templates
var templateFiles embed.FS

// Options configure the console.
type Options struct {
	// Tokens are the configured API tokens (auth.tokens): an operator signs
	// in with one, and the console calls the API with it.
	Tokens []config.Token
	// SessionTTL is how long a sign-in lasts.
	SessionTTL time.Duration
	// TrustedProxies are the reverse proxies whose X-Forwarded-For names
	// the client (config.Console.TrustedProxies).
	TrustedProxies []netip.Prefix
	// Store keeps sessions and the audit log.
	Store fulfillment.ConsoleStore
	// Log receives the console's own warnings; never a token or a body.
	Log *slog.Logger
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Console serves the console's pages.
type Console struct {
	api    fulfillmentv1.FulfillmentServiceClient
	store  fulfillment.ConsoleStore
	log    *slog.Logger
	ttl    time.Duration
	now    func() time.Time
	pages  *pages
	tokens map[[sha256.Size]byte]config.Token // by the hash of the value
	byName map[string]config.Token
	mux    *http.ServeMux
	// signIns limits failed sign-ins per client address; proxies are the
	// trusted reverse proxies (clientOf).
	signIns *signInLimit
	proxies []netip.Prefix
}

// New prepares the console; Mount connects it to the API.
func New(o Options) (*Console, error) {
	pg, err := parsePages()
	if err != nil {
		return nil, err
	}
	c := &Console{
		store: o.Store, log: o.Log,
		ttl: o.SessionTTL, now: o.Now, pages: pg, signIns: newSignInLimit(), proxies: o.TrustedProxies,
		tokens: make(map[[sha256.Size]byte]config.Token, len(o.Tokens)),
		byName: make(map[string]config.Token, len(o.Tokens)),
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.ttl <= 0 {
		c.ttl = config.DefaultConsoleSessionTTL
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	for _, t := range o.Tokens {
		c.tokens[sha256.Sum256([]byte(t.Secret))] = t
		c.byName[t.Name] = t
	}
	c.routes()
	return c, nil
}

// Mount returns the console as an http.Handler calling the API on conn
// (the server's in-process connection), to serve under Prefix.
func (c *Console) Mount(conn grpc.ClientConnInterface) http.Handler {
	c.api = fulfillmentv1.NewFulfillmentServiceClient(conn)
	return c
}

func (c *Console) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static") // the embedded folder always exists
	m.Handle("GET /console/static/", http.StripPrefix("/console/static/", cacheStatic(http.FileServerFS(static))))
	m.HandleFunc("GET /console/login", c.loginPage)
	m.HandleFunc("POST /console/login", c.login)
	m.HandleFunc("POST /console/logout", c.authed(c.logout))

	m.HandleFunc("GET /console/{$}", c.authed(c.overview))
	m.HandleFunc("GET /console/orders", c.authed(c.orders))
	m.HandleFunc("GET /console/orders/{id}", c.authed(c.order))
	m.HandleFunc("GET /console/events", c.authed(c.events))
	m.HandleFunc("GET /console/events/{id}", c.authed(c.event))
	m.HandleFunc("POST /console/events/{id}/replay", c.authed(c.replayEvent))
	m.HandleFunc("POST /console/events/{id}/raw", c.authed(c.revealRaw))
	m.HandleFunc("GET /console/outbox", c.authed(c.outbox))
	m.HandleFunc("GET /console/outbox/{id}", c.authed(c.message))
	m.HandleFunc("POST /console/outbox/{id}/retry", c.authed(c.retryMessage))
	m.HandleFunc("POST /console/outbox/{id}/confirm", c.authed(c.confirmMessage))
	m.HandleFunc("GET /console/destinations", c.authed(c.destinations))
	m.HandleFunc("POST /console/destinations/{id}/disable", c.authed(c.disableDestination))
	m.HandleFunc("POST /console/destinations/{id}/enable", c.authed(c.enableDestination))
	m.HandleFunc("GET /console/reconciliation", c.authed(c.reconItems))
	m.HandleFunc("GET /console/reconciliation/{id}", c.authed(c.reconItem))
	m.HandleFunc("POST /console/reconciliation/{id}/resolve", c.authed(c.resolveItem))
	m.HandleFunc("GET /console/subscriptions", c.authed(c.subscriptions))
	m.HandleFunc("GET /console/subscriptions/{id}", c.authed(c.subscription))
	m.HandleFunc("GET /console/access", c.authed(c.access))
	m.HandleFunc("GET /console/audit", c.authed(c.audit))
	m.HandleFunc("GET /console/redrive", c.authed(c.redrive))
	m.HandleFunc("POST /console/redrive", c.authed(c.startRedrive))
	m.HandleFunc("GET /console/redrive/{id}", c.authed(c.redriveRun))
	m.HandleFunc("POST /console/redrive/{id}/cancel", c.authed(c.cancelRedrive))
	m.HandleFunc("/console/", c.authed(func(w http.ResponseWriter, r *http.Request, s *session) {
		c.fail(w, r, s, http.StatusNotFound, "There is no such page.")
	}))
	c.mux = m
}

// ServeHTTP implements http.Handler: every answer carries the security
// headers, every request is bounded in time and body size.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
	if c.overTLS(r) {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	if id := r.Header.Get("X-Request-Id"); id != "" {
		ctx = context.WithValue(ctx, requestIDKey{}, id)
	}
	defer cancel()
	r = r.WithContext(ctx)
	c.mux.ServeHTTP(w, r)
	httpmetrics.SetRoute(ctx, r.Pattern) // the page's route, for the listener's metrics
}

// csp allows the console's own scripts, styles and images only: no inline
// script or style, no frames, forms posting only to the console.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'"

func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			// The files are named by the pages; the folder is not listed.
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Cache-Control", "public, max-age=86400")
		h.ServeHTTP(w, r)
	})
}
