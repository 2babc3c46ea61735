package console

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// Under TLS a session is only ever named by the __Host- cookie, which only
// this host can set. The plain one, which a sibling subdomain or an answer
// over plain HTTP can plant in an operator's browser, signs nobody in: else
// an attacker could plant their own session and have the operator work, and
// be audited, as them.
func TestUnderTLSOnlyTheHostCookieNamesASession(t *testing.T) {
	t.Parallel()
	c, _ := newTestConsole(t)
	r := httptest.NewRequest(http.MethodPost, "https://console.example/console/login",
		strings.NewReader(url.Values{"token": {testToken}}.Encode()))
	r.TLS = &tls.ConnectionState{}
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Header.Set("Origin", "https://console.example")
	w := httptest.NewRecorder()
	c.ServeHTTP(w, r)
	cookies := w.Result().Cookies()
	if len(cookies) != 1 || cookies[0].Name != hostCookie || !cookies[0].Secure {
		t.Fatalf("sign-in cookies %+v, want one secure %s", cookies, hostCookie)
	}
	for _, tc := range []struct {
		name string
		want int
	}{
		{hostCookie, http.StatusOK},
		{cookieName, http.StatusSeeOther}, // planted: to the sign-in page
	} {
		r = httptest.NewRequest(http.MethodGet, "https://console.example/console/audit", http.NoBody)
		r.TLS = &tls.ConnectionState{}
		r.AddCookie(&http.Cookie{Name: tc.name, Value: cookies[0].Value})
		w = httptest.NewRecorder()
		c.ServeHTTP(w, r)
		if w.Code != tc.want {
			t.Errorf("the session's id as %s: status %d, want %d", tc.name, w.Code, tc.want)
		}
	}
}
