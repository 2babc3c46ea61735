package console

import (
	"bytes"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/internal/english"
)

// HTMXVersion is the version of the vendored htmx file (static/).
const HTMXVersion = "2.0.11"

// pages are the parsed templates, one set per page: the layout and the
// page's own file.
type pages struct {
	byName map[string]*template.Template
}

func parsePages() (*pages, error) {
	files, err := fs.Glob(templateFiles, "templates/pages/*.html")
	if err != nil {
		return nil, err
	}
	p := &pages{byName: map[string]*template.Template{}}
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".html")
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", f)
		if err != nil {
			return nil, fmt.Errorf("parsing console template %s: %w", f, err)
		}
		p.byName[name] = t
	}
	return p, nil
}

// view is what every page template receives.
type view struct {
	// S is the signed-in session (nil on the sign-in and error pages of
	// signed-out requests).
	S *session
	// Title names the page; Nav the menu entry to highlight.
	Title, Nav string
	// Notice reports what the last action did (?done=).
	Notice string
	// HTMX is the vendored htmx file's name.
	HTMX string
	// Data is the page's own data.
	Data any
}

// menuEntry is a page of the main menu.
type menuEntry struct {
	// Page names it, as view.Nav does; Label is its link's text.
	Page, Href, Label string
	// Scope is what a token needs to open the page: the scope the API asks
	// for the calls it makes (server/auth.go), or that the page asks itself
	// (events, destinations, re-drives: admin). "": every session (the
	// overview shows what the token can read; the audit log, the actions
	// on its orgs and its own).
	Scope string
	// Also are the pages under it (an order under orders), for which it is
	// the current entry too.
	Also []string
}

// menu is the main menu, in its order.
var menu = []menuEntry{
	{Page: "overview", Href: Prefix, Label: "Overview"},
	{Page: "orders", Href: Prefix + "orders", Label: "Orders", Scope: config.ScopeOrdersRead, Also: []string{"order"}},
	{Page: "events", Href: Prefix + "events", Label: "Events", Scope: config.ScopeAdmin, Also: []string{"event"}},
	{Page: "outbox", Href: Prefix + "outbox", Label: "Outbox", Scope: config.ScopeOutboxRead, Also: []string{"message"}},
	{Page: "destinations", Href: Prefix + "destinations", Label: "Destinations", Scope: config.ScopeAdmin},
	{Page: "recon", Href: Prefix + "reconciliation", Label: "Reconciliation", Scope: config.ScopeReconciliationRead, Also: []string{"item"}},
	{Page: "subscriptions", Href: Prefix + "subscriptions", Label: "Subscriptions", Scope: config.ScopeOrdersRead, Also: []string{"subscription"}},
	{Page: "redrive", Href: Prefix + "redrive", Label: "Re-drive", Scope: config.ScopeAdmin, Also: []string{"run"}},
	{Page: "audit", Href: Prefix + "audit", Label: "Audit"},
}

// menuHref is the address of page, a page of the menu.
func menuHref(page string) string {
	for _, m := range menu {
		if m.Page == page {
			return m.Href
		}
	}
	return Prefix
}

// menuLink is an entry of the menu as a page shows it.
type menuLink struct {
	Href, Label string
	Current     bool
}

// Menu is the main menu of the signed-in session: the pages its token may
// open, the one shown (or above the one shown) current. A token without a
// page's scope does not see its link: the page would answer 403.
func (v view) Menu() []menuLink {
	if v.S == nil {
		return nil
	}
	var links []menuLink
	for _, m := range menu {
		if v.S.Opens(m.Page) {
			links = append(links, menuLink{Href: m.Href, Label: m.Label, Current: m.Page == v.Nav || slices.Contains(m.Also, v.Nav)})
		}
	}
	return links
}

// render writes the page, or an internal error page when the template
// fails (the page is built in memory first, so a failure sends no half
// page).
func (c *Console) render(w http.ResponseWriter, r *http.Request, s *session, code int, page, title string, data any) {
	t, ok := c.pages.byName[page]
	if !ok {
		c.log.ErrorContext(r.Context(), "console: no such template", "page", page)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	v := view{S: s, Title: title, Nav: page, Notice: notices[r.URL.Query().Get("done")],
		HTMX: "htmx-" + HTMXVersion + ".min.js", Data: data}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		c.log.ErrorContext(r.Context(), "console: rendering a page", "page", page, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Vary", "Cookie, HX-Request")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

// notices are the messages ?done= shows after an action redirects back.
var notices = map[string]string{
	"replayed":  "The event was queued for processing again.",
	"retried":   "The message was queued for delivery again.",
	"resent":    "The message will be sent again under the same idempotency key.",
	"confirmed": "The message is recorded as delivered (nothing was sent); its open items, if any, are resolved.",
	"disabled":  "The destination is disabled: nothing is delivered to it until it is enabled.",
	"enabled":   "The destination is enabled again.",
	"resolved":  "The item is resolved.",
	"revealed":  "The raw body is shown below; the reveal is recorded in the audit log.",
	"cancelled": "The run is cancelled: no further items will be applied.",
	"started":   "The run has started.",
}

type errorView struct {
	Code    int
	Message string
}

// fail answers with an error page saying what went wrong in words an
// operator can act on.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, code int, msg string) {
	c.render(w, r, s, code, "error", http.StatusText(code), errorView{Code: code, Message: msg})
}

// apiFail answers with the API's refusal: its code and (for the caller's
// own mistakes) its message; an internal error says only that.
func (c *Console) apiFail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	code, msg := apiError(err)
	if code >= 500 {
		c.log.WarnContext(r.Context(), "console: API call failed", "path", r.URL.Path, "code", status.Code(err).String())
	}
	c.fail(w, r, s, code, msg)
}

func apiError(err error) (code int, msg string) {
	st := status.Convert(err)
	switch st.Code() {
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest, st.Message()
	case codes.NotFound:
		return http.StatusNotFound, "Not found, or not visible to your token."
	case codes.PermissionDenied:
		return http.StatusForbidden, "Your token may not do this: " + st.Message()
	case codes.Unauthenticated:
		return http.StatusUnauthorized, "Your token is no longer accepted: sign in again."
	case codes.FailedPrecondition, codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict, st.Message()
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests, "The service is busy or the answer is too large: " + st.Message()
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return http.StatusServiceUnavailable, "The service could not answer in time; try again shortly."
	default:
		return http.StatusInternalServerError, "Internal error: the service logged it."
	}
}

// done redirects after an action (POST, then GET): the page shows what the
// action did.
func done(w http.ResponseWriter, r *http.Request, target, what string) {
	sep := "?"
	if strings.Contains(target, "?") {
		sep = "&"
	}
	http.Redirect(w, r, target+sep+"done="+what, http.StatusSeeOther)
}

var funcs = template.FuncMap{
	"ts":         tsString,
	"ago":        ago,
	"dur":        durString,
	"money":      money,
	"link":       link,
	"short":      short,
	"join":       strings.Join,
	"lineNo":     lineNo,
	"scopeAdmin": func() string { return config.ScopeAdmin },
	"inputTime":  inputTime,
	"plural":     plural,
}

// plural is english.Plural for the templates, which call a function with
// whatever integer a field holds (the API's are int32). Any signed integer
// is taken; another value fails the page (the template makes the panic an
// error).
func plural(n any, noun string) string {
	return english.Plural(reflect.ValueOf(n).Int(), noun)
}

func tsString(t *timestamppb.Timestamp) string {
	if t == nil || (t.Seconds == 0 && t.Nanos == 0) {
		return "—"
	}
	return t.AsTime().UTC().Format("2006-01-02 15:04:05 UTC")
}

// ago says how long before now t was, roughly.
func ago(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	d := time.Since(t.AsTime())
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		s = strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		s = strconv.Itoa(int(d.Hours())) + "h"
	default:
		s = strconv.Itoa(int(d.Hours()/24)) + "d"
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

func durString(d *durationpb.Duration) string {
	if d == nil {
		return "—"
	}
	return d.AsDuration().Round(time.Second).String()
}

func money(m *fulfillmentv1.Money) string {
	if m == nil {
		return ""
	}
	return fmt.Sprintf("%d %s (minor units)", m.GetMinorUnits(), m.GetCurrency())
}

// link builds a console URL: a path and query pairs, empty values left out.
func link(p string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return p
	}
	return p + "?" + q.Encode()
}

func short(id string) string {
	if len(id) > 13 {
		return id[:8] + "…"
	}
	return id
}

func lineNo(p *int32) string {
	if p == nil {
		return ""
	}
	return strconv.Itoa(int(*p))
}
