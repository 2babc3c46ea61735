package console

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// cookieName names the session cookie. Under TLS it is "__Host-" prefixed,
// which browsers accept only with Secure and Path=/.
const (
	cookieName    = "fulfillment_console"
	hostCookie    = "__Host-fulfillment_console"
	csrfFormField = "csrf"
)

// session is a signed-in operator: the stored session and the configured
// token it names.
type session struct {
	fulfillment.ConsoleSession
	token config.Token
}

// Can reports whether the session's token holds scope.
func (s *session) Can(scope string) bool { return s.token.HasScope(scope) }

// Opens reports whether the session's token may open page, a page of the
// main menu (menu): whether it holds the scope the page needs.
func (s *session) Opens(page string) bool {
	for _, m := range menu {
		if m.Page == page {
			return m.Scope == "" || s.Can(m.Scope)
		}
	}
	return false
}

// Admin reports whether the session's token holds admin.
func (s *session) Admin() bool { return s.token.HasScope(config.ScopeAdmin) }

// AdminOfEveryOrg reports whether the session's token holds admin for
// every org: what the actions that affect every org (disabling a
// destination) take.
func (s *session) AdminOfEveryOrg() bool { return s.Admin() && s.token.AllOrgsAllowed() }

// Name is the token's name: who the session is.
func (s *session) Name() string { return s.TokenName }

// Orgs lists the orgs the session may see; nil means all.
func (s *session) Orgs() []string {
	if s.token.AllOrgsAllowed() {
		return nil
	}
	return s.token.Orgs
}

// handlerFunc is a page of a signed-in session.
type handlerFunc func(http.ResponseWriter, *http.Request, *session)

// authed requires a live session: without one a page is sent to sign in
// (htmx is told to load the sign-in page as a whole), a state-changing
// request is refused. A POST must carry the session's CSRF token and come
// from the console's own origin.
func (c *Console) authed(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := c.sessionOf(r)
		if err != nil {
			if !errors.Is(err, errNoSession) {
				c.log.WarnContext(r.Context(), "console: reading session", "error", err)
				c.fail(w, r, nil, http.StatusServiceUnavailable, "The console cannot read sessions right now; try again shortly.")
				return
			}
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				c.fail(w, r, nil, http.StatusUnauthorized, "Your session has ended: sign in again.")
				return
			}
			target := Prefix + "login?next=" + url.QueryEscape(r.URL.RequestURI())
			if r.Header.Get("HX-Request") != "" {
				w.Header().Set("HX-Redirect", target)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, target, http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodPost {
			if !c.sameOrigin(r) {
				c.fail(w, r, s, http.StatusForbidden, "This request did not come from the console's own pages.")
				return
			}
			if code, msg := readForm(r); code != 0 {
				c.fail(w, r, s, code, msg)
				return
			}
			got := r.PostForm.Get(csrfFormField)
			if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(s.CSRFToken)) != 1 {
				c.fail(w, r, s, http.StatusForbidden, "The form's security token is missing or stale: reload the page and try again.")
				return
			}
		}
		h(w, r, s)
	}
}

// readForm parses a POST's form and says, as a status and a message, what
// is wrong with it, if anything (status 0: nothing): larger than
// maxFormBytes, not a form, or holding text that is not UTF-8 (which the
// API's calls could not carry, nor the audit log store).
func readForm(r *http.Request) (code int, msg string) {
	if err := r.ParseForm(); err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return http.StatusRequestEntityTooLarge, "The form is too large."
		}
		return http.StatusBadRequest, "The form could not be read."
	}
	for name, values := range r.PostForm {
		if !utf8.ValidString(name) || slices.ContainsFunc(values, notUTF8) {
			return http.StatusBadRequest, "The form holds text that is not valid UTF-8."
		}
	}
	return 0, ""
}

func notUTF8(s string) bool { return !utf8.ValidString(s) }

var errNoSession = errors.New("no live session")

// sessionOf returns the request's live session: the cookie names a stored,
// unexpired session whose token is still configured with the same value.
// Only the cookie the console sets over the request's scheme counts: under
// TLS the __Host- one, which only this host can have set, never the plain
// one, which a sibling subdomain or a plain-HTTP answer can plant (to sign
// an operator in as someone else).
func (c *Console) sessionOf(r *http.Request) (*session, error) {
	ck, err := r.Cookie(c.sessionCookieName(r))
	if err != nil {
		return nil, errNoSession
	}
	raw, err := base64.RawURLEncoding.DecodeString(ck.Value)
	if err != nil || len(raw) != sessionIDBytes {
		return nil, errNoSession
	}
	h := sha256.Sum256(raw)
	cs, err := c.store.ConsoleSessionGet(r.Context(), h[:])
	switch {
	case errors.Is(err, fulfillment.ErrNotFound):
		return nil, errNoSession
	case err != nil:
		return nil, err
	}
	tok, ok := c.byName[cs.TokenName]
	if !ok || subtle.ConstantTimeCompare(tokenPrint(tok.Secret), cs.TokenPrint) != 1 {
		return nil, errNoSession // removed from the configuration, or rotated
	}
	return &session{ConsoleSession: cs, token: tok}, nil
}

const sessionIDBytes = 32

// tokenPrint is a one-way fingerprint of a token's value, so that a
// session ends when its token is rotated under the same name.
func tokenPrint(secret string) []byte {
	h := sha256.Sum256([]byte("fulfillment-console-token-print\x00" + secret))
	return h[:16]
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

type loginView struct {
	Next  string
	Error string
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if s, err := c.sessionOf(r); err == nil && s != nil {
		http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	c.render(w, r, nil, http.StatusOK, "login", "Sign in", loginView{Next: safeNext(r.URL.Query().Get("next"))})
}

// login exchanges an API token for a session. The token is compared by its
// hash and never stored, logged or echoed.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	if !c.sameOrigin(r) {
		c.fail(w, r, nil, http.StatusForbidden, "This request did not come from the console's own pages.")
		return
	}
	if code, msg := readForm(r); code != 0 {
		c.fail(w, r, nil, code, msg)
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	client := clientOf(r, c.proxies)
	d, done := c.signIns.begin(client, c.now())
	if d > 0 {
		secs := int((d + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		c.render(w, r, nil, http.StatusTooManyRequests, "login", "Sign in", loginView{Next: next,
			Error: fmt.Sprintf("Too many failed sign-ins from your address: try again in %d s.", secs)})
		return
	}
	secret := strings.TrimSpace(r.PostForm.Get("token"))
	tok, ok := c.tokens[sha256.Sum256([]byte(secret))]
	failed := secret == "" || !ok
	done(failed, c.now())
	if failed {
		c.render(w, r, nil, http.StatusUnauthorized, "login", "Sign in", loginView{Next: next, Error: "That token is not one of the service's API tokens."})
		return
	}
	if !canSignIn(tok) {
		c.record(r.Context(), tok.Name, "", "session.sign_in", "token", tok.Name, "PermissionDenied", "no console scope")
		c.render(w, r, nil, http.StatusForbidden, "login", "Sign in", loginView{Next: next, Error: "This token holds no scope the console can use (it needs a read scope or admin)."})
		return
	}
	id := make([]byte, sessionIDBytes)
	_, _ = rand.Read(id)
	h := sha256.Sum256(id)
	now := c.now()
	cs := fulfillment.ConsoleSession{
		IDHash: h[:], TokenName: tok.Name, TokenPrint: tokenPrint(tok.Secret),
		CSRFToken: randomString(32), CreatedAt: now, ExpiresAt: now.Add(c.ttl),
	}
	if err := c.store.ConsoleSessionInsert(r.Context(), cs); err != nil {
		c.log.WarnContext(r.Context(), "console: storing session", "error", err)
		c.fail(w, r, nil, http.StatusServiceUnavailable, "The console cannot store sessions right now; try again shortly.")
		return
	}
	c.record(r.Context(), tok.Name, "", "session.sign_in", "token", tok.Name, "ok", "")
	http.SetCookie(w, c.sessionCookie(r, base64.RawURLEncoding.EncodeToString(id), cs.ExpiresAt))
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *session) {
	if err := c.store.ConsoleSessionDelete(r.Context(), s.IDHash); err != nil {
		c.log.WarnContext(r.Context(), "console: ending session", "error", err)
		c.fail(w, r, s, http.StatusServiceUnavailable, "The session could not be ended right now; try again shortly.")
		return
	}
	c.record(r.Context(), s.Name(), "", "session.sign_out", "token", s.Name(), "ok", "")
	ck := c.sessionCookie(r, "", time.Unix(0, 0))
	ck.MaxAge = -1
	http.SetCookie(w, ck)
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// sessionCookieName is the session cookie's name over r's scheme: under
// TLS the __Host- one.
func (c *Console) sessionCookieName(r *http.Request) string {
	if c.overTLS(r) {
		return hostCookie
	}
	return cookieName
}

// sessionCookie names the session: HttpOnly, SameSite=Strict, and under
// TLS Secure with the __Host- prefix.
func (c *Console) sessionCookie(r *http.Request, value string, expires time.Time) *http.Cookie {
	ck := &http.Cookie{Name: c.sessionCookieName(r), Value: value, Path: Prefix, Expires: expires,
		HttpOnly: true, SameSite: http.SameSiteStrictMode}
	if c.overTLS(r) {
		ck.Path, ck.Secure = "/", true
	}
	return ck
}

// overTLS reports whether the browser reached the console over TLS: the
// request came over TLS, or from a trusted proxy (console.trusted_proxies)
// whose X-Forwarded-Proto says it did. Anyone else's header is not
// believed.
func (c *Console) overTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	proto := r.Header.Values("X-Forwarded-Proto")
	if len(proto) == 0 || !fromTrusted(r, c.proxies) {
		return false
	}
	// The nearest proxy's word: the last value it added.
	last := proto[len(proto)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	return strings.EqualFold(strings.TrimSpace(last), "https")
}

// canSignIn reports whether the token can read anything the console shows.
func canSignIn(t config.Token) bool {
	for _, s := range []string{config.ScopeAdmin, config.ScopeOrdersRead, config.ScopeReconciliationRead, config.ScopeOutboxRead} {
		if t.HasScope(s) {
			return true
		}
	}
	return false
}

// safeNext keeps a post-sign-in target inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.ContainsAny(next, "\\") || strings.ContainsFunc(next, isControl) {
		// A browser drops tabs and line breaks from a URL before it reads
		// it ("/console/.\t./metrics" is "/console/../metrics"), and
		// http.Redirect sends a URL it cannot parse as it is.
		return Prefix
	}
	// As the browser will resolve it: "/console/../metrics" leaves the
	// console, "/console/./login" is the sign-in page.
	// A browser reads "%2e" in a path as "." too: "/console/%2e%2e/metrics"
	// is "/console/../metrics".
	p, _, _ := strings.Cut(next, "?")
	p, err := url.PathUnescape(p)
	if err != nil || strings.ContainsFunc(p, isControl) {
		return Prefix
	}
	if clean := path.Clean(p) + "/"; !strings.HasPrefix(clean, Prefix) || strings.HasPrefix(clean, Prefix+"login") {
		return Prefix
	}
	return next
}

// isControl reports whether r is an ASCII control character.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// sameOrigin reports whether a state-changing request came from the
// console's origin: the browser's Sec-Fetch-Site or Origin, when sent,
// must say so (both are set by browsers, not by pages). An opaque Origin
// ("null") says nothing either way: the console's own forms send it, as
// its pages' Referrer-Policy is no-referrer; Sec-Fetch-Site, which
// browsers send beside it, tells a sandboxed or foreign page's apart.
func (c *Console) sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host || !c.servedAs(r, u.Scheme) {
			return false
		}
	}
	return true
}

// servedAs reports whether the console may be served to r's browser over
// scheme. Under TLS only https: a page of the same host over plain HTTP,
// which anyone on the path can write, is another origin. A console that
// sees plain HTTP may still sit behind a TLS proxy it was not told of
// (console.trusted_proxies), so https is its own too.
func (c *Console) servedAs(r *http.Request, scheme string) bool {
	if c.overTLS(r) {
		return scheme == "https"
	}
	return scheme == "http" || scheme == "https"
}

// call returns a context carrying the session's token as the bearer of
// in-process API calls.
func (s *session) call(ctx context.Context) context.Context {
	md := metadata.Pairs("authorization", "Bearer "+s.token.Secret)
	if id := requestID(ctx); id != "" {
		md.Set("x-request-id", id)
	}
	return metadata.NewOutgoingContext(ctx, md)
}

type requestIDKey struct{}

func requestID(ctx context.Context) string {
	v, _ := ctx.Value(requestIDKey{}).(string)
	return v
}

// record writes one audit entry, and says whether it did; a failure to
// write it is logged, and the action it records has already happened. The
// target's id comes from the page's address: it is cut as the detail is.
func (c *Console) record(ctx context.Context, actor, org, action, kind, id, outcome, detail string) bool {
	e := fulfillment.ConsoleAuditEntry{Actor: actor, Action: action, TargetKind: kind, TargetID: truncate(id, 200), OrgID: org,
		Outcome: outcome, Detail: truncate(detail, 500)}
	// The entry is written even when the page's request ended, but not
	// for longer than a page may take: a stalled database must not hold
	// the answer for ever.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWait)
	defer cancel()
	if err := c.store.ConsoleAuditInsert(actx, e); err != nil {
		c.log.WarnContext(ctx, "console: recording an action in the audit log", "action", action, "error", err)
		return false
	}
	return true
}

// outcome names how an API call ended, for the audit log.
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	return status.Code(err).String()
}

// truncate cuts s to at most n bytes, at a character's start: a cut
// inside a character is not UTF-8, which PostgreSQL refuses to store.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
