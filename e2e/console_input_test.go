package e2e_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// consoleHTTP is a console session driven over plain HTTP, as a script
// (or an attacker holding the session) would.
type consoleHTTP struct {
	t    *testing.T
	base string
	c    *http.Client
	csrf string
}

// newConsoleHTTP is a client of the console at base, not signed in: it
// keeps its cookies, follows no redirect and waits 30 s at most.
func newConsoleHTTP(t *testing.T, base string) *consoleHTTP {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &consoleHTTP{t: t, base: base, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// signInHTTP signs in with token and reads the session's CSRF token from
// a page's form.
func signInHTTP(t *testing.T, base, token string) *consoleHTTP {
	t.Helper()
	s := newConsoleHTTP(t, base)
	if code, _ := s.post("/console/login", url.Values{"token": {token}}); code != http.StatusSeeOther {
		t.Fatalf("signing in: %d", code)
	}
	resp, err := s.c.Get(base + "/console/audit")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token on the audit page")
	}
	s.csrf = string(m[1])
	return s
}

// post sends form to path and returns the status and the body.
func (s *consoleHTTP) post(path string, form url.Values) (code int, body string) {
	s.t.Helper()
	resp, err := s.c.PostForm(s.base+path, form)
	if err != nil {
		s.t.Fatalf("POST %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A form field that is not UTF-8 is the sender's mistake: 400, saying so,
// before any action or audit entry (it answered 500: the API call could not
// carry the text, and the audit log refused it).
func TestConsoleFormNotUTF8(t *testing.T) {
	t.Parallel()
	s := startReplicaWith(t, pgtest.DB(t), withConsole())
	if code, body := newConsoleHTTP(t, s.restURL).post("/console/login",
		url.Values{"token": {"tok-\xff"}}); code != http.StatusBadRequest || !strings.Contains(body, "not valid UTF-8") {
		t.Errorf("sign-in with a token not UTF-8: %d", code)
	}
	admin := signInHTTP(t, s.restURL, adminToken)
	for path, form := range map[string]url.Values{
		"/console/reconciliation/1/resolve":                {"resolution": {"no_action"}, "note": {"bad \xff note"}},
		"/console/outbox/1/confirm":                        {"note": {"bad \xff note"}},
		"/console/destinations/" + consoleCRM + "/disable": {"reason": {"bad \xff"}},
		"/console/redrive":                                 {"target": {"events"}, "org_id": {"org\xff"}, "state": {"failed"}},
		"/console/events/1/replay":                         {"\xff": {"x"}},
	} {
		form.Set("csrf", admin.csrf)
		if code, body := admin.post(path, form); code != http.StatusBadRequest || !strings.Contains(body, "not valid UTF-8") {
			t.Errorf("POST %s with text not UTF-8: %d, want 400 saying so", path, code)
		}
	}
	var n int
	if err := s.db.QueryRow(context.Background(), "SELECT count(*) FROM console_audit WHERE action <> 'session.sign_in'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("%d audit entries for refused forms", n)
	}
}

// The audit entry's write outlives its request, but not for ever: with its
// table locked, a sign-in is answered (it waited for the lock without end),
// and a raw body's reveal, which must be recorded, is refused rather than
// shown unrecorded.
func TestConsoleAuditWriteBounded(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	s := startReplicaWith(t, db, withConsole())
	s.createOrder(t, "live", "audit-bound-1")
	s.pay(t, "audit-bound-1")
	s.settle(t)
	admin := signInHTTP(t, s.restURL, adminToken)
	ctx := context.Background()
	var id string
	if err := s.db.QueryRow(ctx, "SELECT id::text FROM inbox_events WHERE convert_from(raw_body, 'UTF8') LIKE '%paymentId%' LIMIT 1").Scan(&id); err != nil {
		t.Fatal(err)
	}

	tx, err := pgtest.Conn(t, db).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE console_audit IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	// The client gives up after 30 s: long past the write's bound.
	code, page := admin.post("/console/events/"+id+"/raw", url.Values{"csrf": {admin.csrf}})
	if code != http.StatusServiceUnavailable || !strings.Contains(page, "could not record") {
		t.Errorf("reveal while the audit log cannot be written: %d, want 503 saying why", code)
	}
	if strings.Contains(page, "paymentId") {
		t.Error("the raw body was shown without its record")
	}
	if code, _ := newConsoleHTTP(t, s.restURL).post("/console/login", url.Values{"token": {adminToken}}); code != http.StatusSeeOther {
		t.Errorf("sign-in while the audit log cannot be written: %d, want 303 (the sign-in does not depend on its record)", code)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// Recorded again, the reveal shows the body.
	code, page = admin.post("/console/events/"+id+"/raw", url.Values{"csrf": {admin.csrf}})
	if code != http.StatusOK || !strings.Contains(page, "paymentId") {
		t.Errorf("reveal once the audit log takes writes: %d, body shown %v", code, strings.Contains(page, "paymentId"))
	}
}
