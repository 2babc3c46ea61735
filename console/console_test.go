package console

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// fakeStore keeps sessions and audit entries in memory.
type fakeStore struct {
	sessions map[string]fulfillment.ConsoleSession
	audit    []fulfillment.ConsoleAuditEntry
}

func (f *fakeStore) ConsoleSessionInsert(_ context.Context, s fulfillment.ConsoleSession) error {
	f.sessions[string(s.IDHash)] = s
	return nil
}

func (f *fakeStore) ConsoleSessionGet(_ context.Context, h []byte) (fulfillment.ConsoleSession, error) {
	s, ok := f.sessions[string(h)]
	if !ok || time.Now().After(s.ExpiresAt) {
		return s, fulfillment.ErrNotFound
	}
	return s, nil
}

func (f *fakeStore) ConsoleSessionDelete(_ context.Context, h []byte) error {
	delete(f.sessions, string(h))
	return nil
}

func (f *fakeStore) ConsoleAuditInsert(_ context.Context, e fulfillment.ConsoleAuditEntry) error {
	f.audit = append(f.audit, e)
	return nil
}

func (f *fakeStore) ConsoleAuditList(context.Context, fulfillment.ConsoleAuditFilter) ([]fulfillment.ConsoleAuditEntry, error) {
	return f.audit, nil
}

const testToken = "tok-console-0123456789abcdef"

func newTestConsole(t *testing.T) (*Console, *fakeStore) {
	t.Helper()
	st := &fakeStore{sessions: map[string]fulfillment.ConsoleSession{}}
	c, err := New(Options{Store: st, Tokens: []config.Token{
		{Name: "ops", Secret: testToken, Scopes: []string{config.ScopeAdmin}, Orgs: []string{"*"}},
		{Name: "edge", Secret: "tok-edge-0123456789abcdef", Scopes: []string{config.ScopeIngest}, Orgs: []string{"*"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c, st
}

// Sign-in: an unknown token is refused without echoing it, an ingest-only
// token cannot sign in, a known one gets an HttpOnly, SameSite=Strict
// cookie naming a stored session, never holding the token; every answer
// carries the strict CSP.
func TestSignIn(t *testing.T) {
	t.Parallel()
	c, st := newTestConsole(t)
	post := func(token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/console/login", strings.NewReader(url.Values{"token": {token}, "next": {"/console/orders"}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)
		return w
	}
	w := post("tok-unknown-0123456789abcdef")
	if w.Code != http.StatusUnauthorized || strings.Contains(w.Body.String(), "tok-unknown") {
		t.Fatalf("unknown token: %d, body echoes it: %v", w.Code, strings.Contains(w.Body.String(), "tok-unknown"))
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Fatalf("CSP: %q", csp)
	}
	if w := post("tok-edge-0123456789abcdef"); w.Code != http.StatusForbidden {
		t.Fatalf("ingest-only token: %d, want 403", w.Code)
	}
	w = post(testToken)
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/console/orders" {
		t.Fatalf("sign-in: %d to %q", w.Code, w.Header().Get("Location"))
	}
	ck := w.Result().Cookies()
	if len(ck) != 1 || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || strings.Contains(ck[0].Value, testToken) {
		t.Fatalf("cookie: %+v", ck)
	}
	if len(st.sessions) != 1 {
		t.Fatalf("%d sessions stored", len(st.sessions))
	}
	for _, s := range st.sessions {
		if s.TokenName != "ops" || strings.Contains(string(s.TokenPrint), testToken) {
			t.Fatalf("session: %+v", s)
		}
	}

	// A POST from another origin is refused even with the cookie.
	r := httptest.NewRequest(http.MethodPost, "/console/logout", strings.NewReader("csrf=x"))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Origin", "https://evil.example")
	r.AddCookie(ck[0])
	w = httptest.NewRecorder()
	c.ServeHTTP(w, r)
	if w.Code != http.StatusForbidden || len(st.sessions) != 1 {
		t.Fatalf("cross-origin sign-out: %d, %d sessions", w.Code, len(st.sessions))
	}
	// Without a session a page redirects to sign-in, keeping where it was.
	w = httptest.NewRecorder()
	c.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/console/orders?q=x", http.NoBody))
	if w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/console/login?next=%2Fconsole%2Forders%3Fq%3Dx" {
		t.Fatalf("signed out: %d to %q", w.Code, w.Header().Get("Location"))
	}
}

func TestSafeNext(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"/console/orders?q=1", "/console/orders?q=1"},
		{"https://evil.example/console/", "/console/"},
		{"//evil.example/", "/console/"},
		{"/console/login", "/console/"},
		{"/console/\\evil", "/console/"},
		{"", "/console/"},
		{"/console/../metrics", "/console/"},             // leaves the console once cleaned
		{"/console/orders/../../v1/orders", "/console/"}, // so does this
		{"/console/./login", "/console/"},                // the sign-in page, once cleaned
		{"/console/%2e%2e/metrics", "/console/"},         // browsers read %2e%2e as ..
		{"/console/%2E%2e/%2e%2E/v1/orders", "/console/"},
		{"/console/%2e/login", "/console/"},
		{"/console/orders?q=%2e%2e", "/console/orders?q=%2e%2e"}, // a query is not a path
		{"/console/.\t./metrics", "/console/"},                   // browsers drop tabs: /console/../metrics
		{"/console/.\x0b./metrics", "/console/"},
		{"/console/orders\x7f", "/console/"},
		{"/console/.%09./metrics", "/console/"},
	}
	for _, c := range cases {
		if got := safeNext(c.in); got != c.want {
			t.Errorf("safeNext(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestWhy(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 12, 0, 0, 0, time.UTC)
	line := int32(2)
	paid := &fulfillmentv1.OrderHistory{
		Events:          []*fulfillmentv1.OrderEvent{{EventId: "evt_1", Type: "payment.confirmed", Decision: "fulfilled"}},
		PaymentAttempts: []*fulfillmentv1.PaymentAttempt{{State: "confirmed", Amount: "25.000000", Token: "USDT"}},
	}
	cases := []struct {
		name  string
		order *fulfillmentv1.Order
		items []*fulfillmentv1.ReconciliationItem
		dels  []*fulfillmentv1.OutboxMessage
		want  string
	}{
		{"waiting for payment", &fulfillmentv1.Order{State: "pending_payment", History: &fulfillmentv1.OrderHistory{}}, nil, nil,
			"waiting for payment: no confirmed payment yet"},
		{"waiting for a delivery", &fulfillmentv1.Order{State: "fulfilling", History: paid}, nil,
			[]*fulfillmentv1.OutboxMessage{{State: "pending", Required: true, LineNo: &line, DestinationId: "crm", Attempts: 3, LastStatus: 503,
				NextAttemptTime: timestamppb.New(now.Add(4 * time.Minute))}},
			"paid 25.000000 USDT by event evt_1; waiting for delivery of line 2 to crm: 3 attempts, last 503, next at 12:04:00"},
		{"fulfilled with an open item", &fulfillmentv1.Order{State: "fulfilled", History: paid},
			[]*fulfillmentv1.ReconciliationItem{{State: "open", Kind: "extra_payment"}, {State: "resolved", Kind: "overpayment"}}, nil,
			"paid 25.000000 USDT by event evt_1; fulfilled: no entitlement, no ledger movement; 1 open reconciliation item(s): extra_payment"},
		{"fulfilled, its history cut", &fulfillmentv1.Order{State: "fulfilled", History: &fulfillmentv1.OrderHistory{
			Events: paid.Events, PaymentAttempts: paid.PaymentAttempts,
			Entitlements: []*fulfillmentv1.Entitlement{{Id: "1"}}, LedgerEntries: []*fulfillmentv1.LedgerEntry{{Id: "1"}, {Id: "2"}},
			OmittedLedgerEntries: 3}}, nil, nil,
			"paid 25.000000 USDT by event evt_1; fulfilled: 1 entitlement, 5 ledger movements"},
		{"on hold", &fulfillmentv1.Order{State: "on_hold", History: &fulfillmentv1.OrderHistory{}},
			[]*fulfillmentv1.ReconciliationItem{{State: "open", Kind: "amount_mismatch", Amount: "20", ExpectedAmount: "25", Token: "USDT"}}, nil,
			"on hold for review: amount_mismatch — received 20, expected 25 USDT; 1 open reconciliation item(s): amount_mismatch"},
	}
	for _, c := range cases {
		if got := why(c.order, c.items, c.dels, now); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.name, got, c.want)
		}
	}
}

// Every page template parses and the vendored htmx is embedded under the
// name the layout loads.
func TestAssets(t *testing.T) {
	t.Parallel()
	c, _ := newTestConsole(t)
	w := httptest.NewRecorder()
	c.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/console/static/htmx-"+HTMXVersion+".min.js", http.NoBody))
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "htmx") {
		t.Fatalf("htmx: %d", w.Code)
	}
	// The folder is not listed, to anyone.
	for _, p := range []string{"/console/static/", "/console/static/..%2f", "/console/static"} {
		w := httptest.NewRecorder()
		c.ServeHTTP(w, httptest.NewRequest(http.MethodGet, p, http.NoBody))
		if w.Code == http.StatusOK || strings.Contains(w.Body.String(), "console.css") {
			t.Errorf("GET %s: %d %.80q; want the folder not listed", p, w.Code, w.Body.String())
		}
	}
	for _, p := range []string{"login", "error", "overview", "order", "orders", "events", "event", "outbox", "message",
		"destinations", "recon", "item", "subscriptions", "subscription", "access", "audit", "redrive", "run"} {
		if _, ok := c.pages.byName[p]; !ok {
			t.Errorf("no template %s", p)
		}
	}
}

func TestActivityCharts(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	resp := &fulfillmentv1.GetActivityResponse{}
	for i, n := range []int64{0, 4, 1, 0} {
		resp.Minutes = append(resp.Minutes, &fulfillmentv1.ActivityMinute{
			StartTime: timestamppb.New(start.Add(time.Duration(i) * time.Minute)), EventsReceived: n, OrdersFulfilled: n / 4,
		})
	}
	charts := activityCharts(resp)
	if len(charts) != 3 {
		t.Fatalf("%d charts, want 3", len(charts))
	}
	ev := charts[0]
	if ev.Total != 5 || ev.Peak != 4 || len(ev.Bars) != 4 || ev.From != "12:00" || ev.To != "12:03" {
		t.Fatalf("events chart = %+v", ev)
	}
	// The peak fills the height, a small count still shows, none is empty.
	if b := ev.Bars[1]; b.H != chartHeight || b.Y != 0 || b.Title != "12:01 UTC: 4" {
		t.Errorf("peak bar = %+v", b)
	}
	if b := ev.Bars[2]; b.H != chartHeight/4 || b.Y != chartHeight-chartHeight/4 {
		t.Errorf("a quarter bar = %+v", b)
	}
	if b := ev.Bars[0]; b.H != 0 || b.Y != chartHeight {
		t.Errorf("an empty minute = %+v", b)
	}
	if ev.Bars[3].X != 3*(chartBarWidth+chartBarGap) {
		t.Errorf("bar 3 at x = %d", ev.Bars[3].X)
	}
	if got := charts[2]; got.Total != 0 || got.Peak != 0 || got.Bars[1].H != 0 {
		t.Errorf("an idle series = %+v", got)
	}
	if s := ev.Summary(); s != "Events received per minute, 12:00 to 12:03 UTC: 5 in all, at most 4 in a minute" {
		t.Errorf("summary = %q", s)
	}
}

// Failed sign-ins are limited per address: past the burst, every sign-in
// from that address is refused (a right token too) until the limit
// refills; another address is not affected.
func TestSignInLimit(t *testing.T) {
	t.Parallel()
	c, st := newTestConsole(t)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	post := func(addr, token string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/console/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.RemoteAddr = addr
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)
		return w
	}
	for i := range signInBurst {
		if w := post("192.0.2.1:1000", "tok-wrong"); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, w.Code)
		}
	}
	w := post("192.0.2.1:1001", testToken)
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "12" || !strings.Contains(w.Body.String(), "try again in 12 s") {
		t.Fatalf("right token past the limit: %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
	if len(st.sessions) != 0 {
		t.Fatalf("a limited sign-in stored a session")
	}
	if w := post("198.51.100.7:2000", testToken); w.Code != http.StatusSeeOther {
		t.Fatalf("another address: %d, want 303", w.Code)
	}
	now = now.Add(signInEvery)
	if w := post("192.0.2.1:1002", testToken); w.Code != http.StatusSeeOther {
		t.Fatalf("after the limit refilled: %d, want 303", w.Code)
	}
	// A success does not spend the limit; a failure does, at once.
	if w := post("192.0.2.1:1003", "tok-wrong"); w.Code != http.StatusUnauthorized {
		t.Fatalf("a wrong token after the refill: %d, want 401", w.Code)
	}
	if w := post("192.0.2.1:1004", "tok-wrong"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("a second wrong token after one refill: %d, want 429", w.Code)
	}
}

// The story's state changes: an order with external lines is fulfilling
// when its payment is decided, and fulfilled when the feed announces it.
func TestTimelineStates(t *testing.T) {
	t.Parallel()
	at := func(s int) *timestamppb.Timestamp {
		return timestamppb.New(time.Date(2026, 1, 2, 12, 0, s, 0, time.UTC))
	}
	h := &fulfillmentv1.OrderHistory{
		Events:     []*fulfillmentv1.OrderEvent{{EventId: "evt_1", Type: "payment.confirmed", Decision: "fulfilled", ReceiveTime: at(1)}},
		FeedEvents: []*fulfillmentv1.OrderFeedEvent{{Cursor: "9.1", Topic: "order.fulfilled", CreateTime: at(5)}},
	}
	states := func(o *fulfillmentv1.Order) []string {
		var got []string
		for _, e := range timeline(o, nil, nil, nil) {
			if e.Kind == "state" || e.Kind == "feed" {
				got = append(got, e.Title)
			}
		}
		return got
	}
	licence := &fulfillmentv1.OrderLine{Kind: "license"}
	got := states(&fulfillmentv1.Order{History: h, CreateTime: at(0), Lines: []*fulfillmentv1.OrderLine{licence}})
	want := []string{"State → fulfilled", "Announced order.fulfilled on the event feed"}
	if !slices.Equal(got, want) {
		t.Errorf("licence only: %q, want %q", got, want)
	}
	got = states(&fulfillmentv1.Order{History: h, CreateTime: at(0), Lines: []*fulfillmentv1.OrderLine{licence, {Kind: "external"}}})
	want = []string{"State → fulfilling", "State → fulfilled", "Announced order.fulfilled on the event feed"}
	if !slices.Equal(got, want) {
		t.Errorf("with an external line: %q, want %q", got, want)
	}
	refused := &fulfillmentv1.OrderHistory{Events: []*fulfillmentv1.OrderEvent{{EventId: "evt_2", Type: "payment.confirmed",
		Decision: "plan_change_refused", ReceiveTime: at(1)}}}
	got = states(&fulfillmentv1.Order{History: refused, CreateTime: at(0)})
	if want := []string{"State → on_hold"}; !slices.Equal(got, want) {
		t.Errorf("a plan change refused: %q, want %q", got, want)
	}
	late := &fulfillmentv1.OrderHistory{Events: []*fulfillmentv1.OrderEvent{{EventId: "evt_3", Type: "payment.confirmed",
		Decision: "fulfilled", DecisionReason: "paid (late match: order o-1 was created after this event)", MatchedLater: true, ReceiveTime: at(1)}}}
	var event storyEntry
	for _, e := range timeline(&fulfillmentv1.Order{History: late, CreateTime: at(0)}, nil, nil, nil) {
		if e.Kind == "event" {
			event = e
		}
	}
	if !strings.Contains(event.Title, "came before the order") || !strings.Contains(event.Detail, "late match: order o-1") {
		t.Errorf("a payment that came first: %q — %q; want it to say so, with the decision's reason", event.Title, event.Detail)
	}
	a := &fulfillmentv1.DeliveryAttempt{Status: 200, Outcome: "delivered", Reason: "HTTP 200"}
	if s := attemptLine(a); s != "HTTP 200, delivered" {
		t.Errorf("attempt line = %q", s)
	}
}

// Sign-in failures are counted per client: an IPv4 address, or an IPv6
// address's /64, which one host usually holds whole (a client rotating its
// addresses within it is one client).
func TestClientOfGroupsAnIPv6Slash64(t *testing.T) {
	t.Parallel()
	of := func(addr string) string { return clientOf(&http.Request{RemoteAddr: addr}, nil) }
	if a, b := of("[2001:db8:1:2::1]:4000"), of("[2001:db8:1:2:ffff::9]:5000"); a != b {
		t.Errorf("one /64: %q and %q, want one client", a, b)
	}
	if a, b := of("[2001:db8:1:2::1]:4000"), of("[2001:db8:1:3::1]:4000"); a == b {
		t.Errorf("two /64s: both %q, want two clients", a)
	}
	if a := of("[fe80::1%eth0]:4000"); a != "fe80::/64" {
		t.Errorf("a link-local address with its zone: %q, want its /64", a)
	}
	if a, b := of("192.0.2.1:4000"), of("192.0.2.2:4000"); a == b || a != "192.0.2.1" {
		t.Errorf("IPv4: %q and %q, want each address apart", a, b)
	}
}

// Behind trusted reverse proxies the client is the nearest address in
// X-Forwarded-For that is not one of them; what the client wrote before it
// is never read, and no other peer's header is.
func TestClientOfBehindTrustedProxies(t *testing.T) {
	t.Parallel()
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	for _, c := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"no proxy: the peer", "192.0.2.1:4000", nil, "192.0.2.1"},
		{"an untrusted peer's header is ignored", "192.0.2.1:4000", []string{"198.51.100.9"}, "192.0.2.1"},
		{"one proxy", "10.0.0.2:4000", []string{"198.51.100.9"}, "198.51.100.9"},
		{"two proxies", "10.0.0.2:4000", []string{"198.51.100.9, 10.1.1.1"}, "198.51.100.9"},
		{"a forged entry before the client is not read", "10.0.0.2:4000", []string{"203.0.113.5, 198.51.100.9"}, "198.51.100.9"},
		{"headers repeated", "10.0.0.2:4000", []string{"203.0.113.5", "198.51.100.9"}, "198.51.100.9"},
		{"an IPv6 client's /64", "[2001:db8:ffff::1]:4000", []string{"2001:db8:1:2::77"}, "2001:db8:1:2::/64"},
		{"a mapped IPv4 proxy", "[::ffff:10.0.0.2]:4000", []string{"198.51.100.9"}, "198.51.100.9"},
		{"no header from the proxy: the proxy", "10.0.0.2:4000", nil, "10.0.0.2"},
		{"garbage from the proxy: the proxy", "10.0.0.2:4000", []string{"unknown"}, "10.0.0.2"},
		{"garbage before a trusted hop: that hop", "10.0.0.2:4000", []string{"junk, 10.3.3.3"}, "10.3.3.3"},
	} {
		r := &http.Request{RemoteAddr: c.peer, Header: http.Header{}}
		for _, v := range c.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := clientOf(r, proxies); got != c.want {
			t.Errorf("%s: client %q, want %q", c.name, got, c.want)
		}
	}
}

// The session cookie is Secure, with the __Host- prefix, when the browser
// reached the console over TLS: directly, or through a trusted proxy that
// says so in X-Forwarded-Proto. Anyone else's header is not believed.
func TestSessionCookieOverTLS(t *testing.T) {
	t.Parallel()
	c := &Console{proxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}
	for _, tc := range []struct {
		name, peer string
		tls        bool
		proto      []string
		want       bool
	}{
		{"plain HTTP", "192.0.2.1:4000", false, nil, false},
		{"TLS", "192.0.2.1:4000", true, nil, true},
		{"a trusted proxy that terminated TLS", "10.0.0.2:4000", false, []string{"https"}, true},
		{"a trusted proxy, plain HTTP", "10.0.0.2:4000", false, []string{"http"}, false},
		{"a trusted proxy behind another: its own word", "10.0.0.2:4000", false, []string{"http, https"}, true},
		{"an untrusted peer's header", "192.0.2.1:4000", false, []string{"https"}, false},
	} {
		r := &http.Request{RemoteAddr: tc.peer, Header: http.Header{}}
		if tc.tls {
			r.TLS = &tls.ConnectionState{}
		}
		for _, v := range tc.proto {
			r.Header.Add("X-Forwarded-Proto", v)
		}
		ck := c.sessionCookie(r, "v", time.Now())
		if ck.Secure != tc.want || (ck.Name == hostCookie) != tc.want || (ck.Path == "/") != tc.want {
			t.Errorf("%s: cookie %s (Secure %v, Path %s), want Secure and __Host- %v", tc.name, ck.Name, ck.Secure, ck.Path, tc.want)
		}
	}
}

// What a browser says of where a POST came from decides; a client that
// says nothing (no browser) is let through to the CSRF token and the
// session's SameSite=Strict cookie. The console's pages are no-referrer,
// so its own forms come with Origin: null; Sec-Fetch-Site tells them from
// a sandboxed page's.
func TestSameOrigin(t *testing.T) {
	t.Parallel()
	con := &Console{}
	for _, c := range []struct {
		name, site, origin string
		want               bool
	}{
		{"same origin", "same-origin", "https://console.example", true},
		{"typed by the user", "none", "", true},
		{"no browser headers", "", "", true},
		{"another site", "cross-site", "https://evil.example", false},
		{"a sibling subdomain", "same-site", "https://x.console.example", false},
		{"another origin, no fetch metadata", "", "https://evil.example", false},
		{"the console's own form (no-referrer: an opaque origin)", "same-origin", "null", true},
		{"an opaque origin from another site (sandboxed frame)", "cross-site", "null", false},
		{"a malformed origin", "", "https://[::1", false},
	} {
		r := httptest.NewRequest(http.MethodPost, "https://console.example/console/login", http.NoBody)
		if c.site != "" {
			r.Header.Set("Sec-Fetch-Site", c.site)
		}
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if got := con.sameOrigin(r); got != c.want {
			t.Errorf("%s: sameOrigin = %v, want %v", c.name, got, c.want)
		}
	}
}

// An origin is a scheme, a host and a port: under TLS (directly, or through
// a trusted proxy saying https) a sign-in posted from the same host over
// plain HTTP, a page anyone on the path can write, is refused. A console
// seeing plain HTTP takes https too: it may sit behind a TLS proxy it was
// not told of.
func TestSameOriginComparesTheScheme(t *testing.T) {
	t.Parallel()
	c, _ := newTestConsole(t)
	c.proxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	for _, tc := range []struct {
		name, peer, proto, origin string
		tls                       bool
		want                      int
	}{
		{"TLS, an https origin", "192.0.2.1:4000", "", "https://console.example", true, http.StatusSeeOther},
		{"TLS, an http origin", "192.0.2.1:4000", "", "http://console.example", true, http.StatusForbidden},
		{"TLS, another port", "192.0.2.1:4000", "", "https://console.example:8443", true, http.StatusForbidden},
		{"a trusted TLS proxy, an https origin", "10.0.0.2:4000", "https", "https://console.example", false, http.StatusSeeOther},
		{"a trusted TLS proxy, an http origin", "10.0.0.2:4000", "https", "http://console.example", false, http.StatusForbidden},
		{"plain HTTP, an http origin", "192.0.2.1:4000", "", "http://console.example", false, http.StatusSeeOther},
		{"plain HTTP, an https origin (a TLS proxy not listed)", "192.0.2.1:4000", "", "https://console.example", false, http.StatusSeeOther},
		{"an untrusted peer saying https, an http origin", "192.0.2.1:4000", "https", "http://console.example", false, http.StatusSeeOther},
		{"plain HTTP, another scheme", "192.0.2.1:4000", "", "ftp://console.example", false, http.StatusForbidden},
	} {
		r := httptest.NewRequest(http.MethodPost, "http://console.example/console/login",
			strings.NewReader(url.Values{"token": {testToken}}.Encode()))
		r.RemoteAddr = tc.peer
		if tc.tls {
			r.TLS = &tls.ConnectionState{}
		}
		if tc.proto != "" {
			r.Header.Set("X-Forwarded-Proto", tc.proto)
		}
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("Origin", tc.origin)
		w := httptest.NewRecorder()
		c.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("%s: sign-in %d, want %d", tc.name, w.Code, tc.want)
		}
	}
}

// A flood of addresses past the limit's memory neither forgets the clients
// still limited (the guesser stays held back) nor lets newcomers guess
// freely: they share one limit until the remembered ones refill, and then
// the refilled ones are forgotten.
func TestSignInLimitPastItsMemory(t *testing.T) {
	t.Parallel()
	l := newSignInLimit()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const guesser = "192.0.2.1"
	for range signInBurst {
		l.failed(guesser, now)
	}
	for i := range signInClients {
		l.failed(fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255), now)
	}
	if d := l.wait(guesser, now); d == 0 {
		t.Fatal("the guesser was forgotten by a flood of other addresses")
	}
	for i := range signInBurst {
		l.failed(fmt.Sprintf("198.51.100.%d", i), now)
	}
	if d := l.wait("198.51.100.200", now); d == 0 {
		t.Error("newcomers past the memory guess without limit")
	}
	if n := len(l.clients); n > signInClients+1 {
		t.Errorf("%d clients remembered, want at most %d", n, signInClients+1)
	}
	later := now.Add(signInBurst * signInEvery)
	l.failed("203.0.113.1", later)
	if n := len(l.clients); n != 1 {
		t.Errorf("%d clients remembered once every limit refilled, want only the newest", n)
	}
	if d := l.wait(guesser, later); d != 0 {
		t.Errorf("the guesser waits %v after its limit refilled", d)
	}
}

// A resolution's note is recorded in the audit log cut to 500 bytes: the
// cut keeps whole characters. It cut inside one (a note in Cyrillic, or
// with a dash), and PostgreSQL refused the entry as invalid UTF-8, so the
// resolution was missing from the audit log.
func TestAuditDetailCutKeepsWholeCharacters(t *testing.T) {
	t.Parallel()
	c, st := newTestConsole(t)
	note := "a" + strings.Repeat("—", 166) // 499 bytes, as the API allows
	c.record(context.Background(), "ops", "org_a", "reconciliation.resolve", "reconciliation_item", "1", "ok", "no_action: "+note)
	if len(st.audit) != 1 {
		t.Fatalf("%d entries recorded", len(st.audit))
	}
	if d := st.audit[0].Detail; !utf8.ValidString(d) || !strings.HasPrefix(d, "no_action: a—") {
		t.Errorf("recorded detail is not valid UTF-8 (%v) or lost its start: %q", utf8.ValidString(d), d)
	}
	if got := truncate("ab—", 3); got != "ab…" {
		t.Errorf("truncate(%q, 3) = %q, want %q", "ab—", got, "ab…")
	}
}

// renderPage renders page with data for an admin of every org.
func renderPage(t *testing.T, page, target string, data any) string {
	t.Helper()
	return renderPageAs(t, config.Token{Name: "ops", Scopes: []string{config.ScopeAdmin}, Orgs: []string{"*"}}, page, target, data)
}

// renderPageAs renders page with data for a session of token.
// Disabling or enabling a destination affects every org: an admin token
// limited to some orgs is not offered what the API refuses it.
func TestDestinationActionsForAdminsOfEveryOrg(t *testing.T) {
	t.Parallel()
	v := destinationsView{Destinations: []*fulfillmentv1.Destination{
		{Id: "crm", Url: "https://crm.example/hooks", Enabled: true},
		{Id: "erp", Url: "https://erp.example/hooks"},
	}}
	for _, tc := range []struct {
		orgs []string
		want bool
	}{{[]string{"*"}, true}, {[]string{"org_a"}, false}} {
		body := renderPageAs(t, config.Token{Name: "t", Scopes: []string{config.ScopeAdmin}, Orgs: tc.orgs}, "destinations", "/console/destinations", v)
		for _, action := range []string{"disable", "enable"} {
			if got := strings.Contains(body, `data-action="`+action+`"`); got != tc.want {
				t.Errorf("orgs %v: %s offered %v, want %v", tc.orgs, action, got, tc.want)
			}
		}
	}
}

func renderPageAs(t *testing.T, token config.Token, page, target string, data any) string {
	t.Helper()
	c, _ := newTestConsole(t)
	s := &session{ConsoleSession: fulfillment.ConsoleSession{TokenName: token.Name, CSRFToken: "csrf"}, token: token}
	w := httptest.NewRecorder()
	c.render(w, httptest.NewRequest(http.MethodGet, target, http.NoBody), s, http.StatusOK, page, page, data)
	if w.Code != http.StatusOK {
		t.Fatalf("rendering %s: %d", page, w.Code)
	}
	return w.Body.String()
}

// The overview's counts are per org and environment: each links to that
// org's and environment's open items of the kind, failed events and failed
// deliveries. They linked to every org's, so an operator clicking org_a's
// "amount_mismatch: 1" found org_b's items listed too; and the failed
// events and deliveries of an org's live row listed its test ones too.
func TestOverviewLinksKeepTheirOrgAndEnvironment(t *testing.T) {
	t.Parallel()
	body := renderPage(t, "overview", "/console/?refresh=off", overviewView{Summary: &fulfillmentv1.GetReconciliationSummaryResponse{
		Summaries: []*fulfillmentv1.ReconciliationSummary{
			{OrgId: "org_a", Environment: "live", OpenItems: 1, OpenByKind: []*fulfillmentv1.ReconciliationKindCount{{Kind: "amount_mismatch", Open: 1}},
				EventsFailed: 3, OutboxFailed: 4},
			{OrgId: "org_b", Environment: "test", OpenItems: 2, OpenByKind: []*fulfillmentv1.ReconciliationKindCount{{Kind: "amount_mismatch", Open: 2}}},
		}}})
	for _, want := range []string{
		`href="/console/reconciliation?environment=live&amp;kind=amount_mismatch&amp;org_id=org_a&amp;state=open"`,
		`href="/console/reconciliation?environment=test&amp;kind=amount_mismatch&amp;org_id=org_b&amp;state=open"`,
		`href="/console/events?environment=live&amp;org_id=org_a&amp;state=failed"`,
		`href="/console/outbox?environment=live&amp;org_id=org_a&amp;state=failed"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the overview has no link %s", want)
		}
	}
}

// The outbox's "Retry every message this filter matches…" plans a bulk
// retry, which has no order filter: a list filtered by order does not
// offer it. It did, and the plan retried every failed message of the org,
// not the order's only.
func TestOutboxRetryAllOnlyForFiltersARunKeeps(t *testing.T) {
	t.Parallel()
	byOrder := renderPage(t, "outbox", "/console/outbox", outboxView{State: "failed", OrgID: "org_a", OrderID: "0195f1d2-0000-7000-8000-000000000001"})
	if strings.Contains(byOrder, `data-action="plan-retry"`) {
		t.Errorf("a list filtered by order offers to retry every message of the org")
	}
	byOrg := renderPage(t, "outbox", "/console/outbox", outboxView{State: "failed", OrgID: "org_a"})
	if !strings.Contains(byOrg, `data-action="plan-retry"`) {
		t.Errorf("a list of an org's failed messages does not offer the bulk retry")
	}
}

// An order's lines are numbered as its deliveries, the API and fulfillctl
// number them, from 0: the lines table counted from 1 while the
// deliveries beside it said "line 0" for the first.
func TestOrderLinesNumberedAsTheirDeliveries(t *testing.T) {
	t.Parallel()
	zero := int32(0)
	body := renderPage(t, "order", "/console/orders/o1", &storyView{
		Order: &fulfillmentv1.Order{Id: "o1", MerchantOrderId: "m-1", State: "fulfilling",
			Total:      &fulfillmentv1.Money{Currency: "USD", MinorUnits: 900},
			Settlement: &fulfillmentv1.Settlement{Amount: "9.000000", Token: "USDT", Network: "TRON"},
			Lines: []*fulfillmentv1.OrderLine{{Sku: "crm-seat", Kind: "external", Quantity: 1, Destination: "crm",
				UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 900}}}},
		Deliveries: []*fulfillmentv1.OutboxMessage{{Id: "7", Topic: "fulfillment.requested", DestinationId: "crm", LineNo: &zero, State: "pending"}},
	})
	if !strings.Contains(body, `<tr><td>0</td><td>crm-seat</td>`) || !strings.Contains(body, `<td>crm</td><td>0</td><td>pending</td>`) {
		t.Errorf("the first line and its delivery are not both numbered 0:\n%s", body)
	}
}

// Counts agree with their nouns: an order of one line said "1 lines", a
// message with one attempt not shown "1 older attempts".
func TestPlural(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n    any
		noun string
		want string
	}{
		{1, "line", "1 line"}, {2, "line", "2 lines"}, {0, "line", "0 lines"},
		{int32(1), "older attempt", "1 older attempt"}, {int64(3), "more org", "3 more orgs"},
		{1, "older delivery", "1 older delivery"}, {2, "older delivery", "2 older deliveries"}, {2, "day", "2 days"},
	} {
		if got := plural(c.n, c.noun); got != c.want {
			t.Errorf("plural(%v, %q) = %q, want %q", c.n, c.noun, got, c.want)
		}
	}
	one := &fulfillmentv1.Order{Id: "o1", MerchantOrderId: "m-1", Lines: []*fulfillmentv1.OrderLine{{Sku: "pro", Kind: "license", Quantity: 1}}}
	if d := timeline(one, nil, nil, nil)[0].Detail; !strings.HasPrefix(d, "m-1, 1 line, total ") {
		t.Errorf("an order of one line is created as %q", d)
	}
	body := renderPage(t, "message", "/console/outbox/7", messageView{Message: &fulfillmentv1.OutboxMessage{Id: "7", State: "failed",
		AttemptHistory: []*fulfillmentv1.DeliveryAttempt{{Attempt: 2}}, OmittedAttempts: 1}})
	if !strings.Contains(body, ">1 older attempt not shown.<") {
		t.Errorf("a message with one attempt not shown says otherwise:\n%s", body)
	}
}

// The menu shows the pages the session's token may open: a token with
// orders scopes only saw Events, Outbox, Destinations, Reconciliation and
// Re-drive too, each answering 403. An order's page links to its events,
// messages and items only where the token may follow; the overview's
// failed counts are links only to pages the token may open.
func TestMenuShowsWhatTheTokenMayOpen(t *testing.T) {
	t.Parallel()
	menuOf := func(body string) []string {
		t.Helper()
		nav := regexp.MustCompile(`(?s)<nav aria-label="Main">(.*?)</nav>`).FindStringSubmatch(body)
		if nav == nil {
			t.Fatalf("no menu in\n%s", body)
		}
		var labels []string
		for _, m := range regexp.MustCompile(`<a href="([^"]*)"( aria-current="page")?>([^<]*)</a>`).FindAllStringSubmatch(nav[1], -1) {
			label := m[3]
			if m[2] != "" {
				label += "*" // the current page
			}
			labels = append(labels, label)
		}
		return labels
	}
	tok := func(scopes ...string) config.Token {
		return config.Token{Name: "t", Scopes: scopes, Orgs: []string{"org_a"}}
	}
	order := &storyView{Order: &fulfillmentv1.Order{Id: "o1", MerchantOrderId: "m-1", State: "pending_payment",
		Total: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 900}, Settlement: &fulfillmentv1.Settlement{Amount: "9.000000", Token: "USDT", Network: "TRON"}}}
	for _, c := range []struct {
		token config.Token
		want  string
	}{
		{tok(config.ScopeAdmin), "Overview Orders* Events Outbox Destinations Reconciliation Subscriptions Re-drive Audit"},
		{tok(config.ScopeOrdersRead, config.ScopeOrdersWrite), "Overview Orders* Subscriptions Audit"},
		{tok(config.ScopeReconciliationRead, config.ScopeReconciliationWrite), "Overview Reconciliation Audit"},
		{tok(config.ScopeOrdersRead, config.ScopeOutboxRead), "Overview Orders* Outbox Subscriptions Audit"},
	} {
		if got := strings.Join(menuOf(renderPageAs(t, c.token, "order", "/console/orders/o1", order)), " "); got != c.want {
			t.Errorf("%v: the menu is %q, want %q", c.token.Scopes, got, c.want)
		}
	}

	// The order's own links, as the story has them.
	for _, tc := range []struct {
		token config.Token
		want  string
	}{
		{tok(config.ScopeAdmin), `This order's <a href="/console/events?order_id=o1">events</a> · <a href="/console/outbox?order_id=o1">outbox messages</a> · <a href="/console/reconciliation?order_id=o1">reconciliation items</a>`},
		{tok(config.ScopeOrdersRead, config.ScopeOutboxRead), `This order's <a href="/console/outbox?order_id=o1">outbox messages</a></p>`},
		{tok(config.ScopeOrdersRead), ""},
	} {
		v := &storyView{Order: order.Order, Links: orderLinks(&session{token: tc.token}, "o1")}
		body := renderPageAs(t, tc.token, "order", "/console/orders/o1", v)
		switch {
		case tc.want == "" && strings.Contains(body, `data-testid="order-links"`):
			t.Errorf("%v: the order links to pages the token may not open", tc.token.Scopes)
		case tc.want != "" && !strings.Contains(body, tc.want):
			t.Errorf("%v: the order's links are not %s:\n%s", tc.token.Scopes, tc.want, body)
		}
	}

	// The overview of a token that reads items but not events: the failed
	// events are a count, not a link.
	overview := overviewView{Summary: &fulfillmentv1.GetReconciliationSummaryResponse{Summaries: []*fulfillmentv1.ReconciliationSummary{
		{OrgId: "org_a", Environment: "live", EventsFailed: 3, OutboxFailed: 4}}}}
	body := renderPageAs(t, tok(config.ScopeReconciliationRead), "overview", "/console/?refresh=off", overview)
	if strings.Contains(body, `data-testid="failed-events"`) || strings.Contains(body, `data-testid="failed-deliveries"`) || !strings.Contains(body, "<td>3</td>") {
		t.Errorf("the overview of a reconciliation:read token links to events or the outbox, or hides their counts:\n%s", body)
	}
}

// A time filter is to the second, as the pages carry it on (the next
// page's link, a re-drive's confirmation): a fraction is refused rather
// than lost on the way, which made the next page's token refused and a
// re-drive cover other events than its plan counted.
func TestTimeParamToTheSecond(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"2026-12-01T12:00":           "2026-12-01T12:00:00",
		"2026-12-01T12:00:07":        "2026-12-01T12:00:07",
		"2026-12-01T12:00:07Z":       "2026-12-01T12:00:07",
		"2026-12-01T13:00:07+01:00":  "2026-12-01T12:00:07",
		"2026-12-01T12:00:00.5Z":     "",
		"2026-12-01T12:00:00.000001": "",
		"yesterday":                  "",
	} {
		ts, err := timeParam(url.Values{"received_after": {in}}, "received_after")
		switch {
		case want == "" && err == nil:
			t.Errorf("%q: accepted as %s", in, inputTime(ts))
		case want != "" && (err != nil || inputTime(ts) != want):
			t.Errorf("%q: %s, %v; want %s", in, inputTime(ts), err, want)
		}
	}
}

// Sign-ins begun and not yet ended each hold one of the client's attempts:
// sent at once, no more pass than the limit leaves, though none has failed
// yet (the limit counted failures only once they ended, so that sign-ins
// sent together all passed). One that succeeds gives its attempt back.
func TestSignInLimitHoldsAttemptsInFlight(t *testing.T) {
	t.Parallel()
	l := newSignInLimit()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	const client = "192.0.2.9"
	var ends []func(bool, time.Time)
	for i := range signInBurst {
		d, done := l.begin(client, now)
		if d != 0 || done == nil {
			t.Fatalf("sign-in %d of the burst: wait %v", i+1, d)
		}
		ends = append(ends, done)
	}
	if d, done := l.begin(client, now); d != signInEvery || done != nil {
		t.Fatalf("a sign-in past the burst, the others still in flight: wait %v, want %v", d, signInEvery)
	}
	if d := l.wait("198.51.100.1", now); d != 0 {
		t.Errorf("another client waits %v", d)
	}
	ends[0](false, now) // succeeded: its attempt is back
	d, done := l.begin(client, now)
	if d != 0 {
		t.Fatalf("after one succeeded: wait %v", d)
	}
	ends[0] = done
	for _, end := range ends {
		end(true, now)
	}
	if d := l.wait(client, now); d != signInEvery {
		t.Errorf("after %d failures: wait %v, want %v", signInBurst, d, signInEvery)
	}
	if len(l.trying) != 0 {
		t.Errorf("sign-ins still counted in flight: %v", l.trying)
	}
}
