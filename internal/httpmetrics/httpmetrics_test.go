package httpmetrics_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fulfillplatform/fulfillment/internal/httpmetrics"
)

// The route of a request is the pattern of the innermost router that took
// it, without its method; a subtree pattern stands for what its router
// did not route; nothing matched is unmatched. Two listeners share one
// registry.
func TestRoutes(t *testing.T) {
	t.Parallel()
	inner := http.NewServeMux()
	inner.HandleFunc("GET /app/items/{id}", func(http.ResponseWriter, *http.Request) {})
	inner.HandleFunc("/app/", http.NotFound)
	app := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = r.WithContext(r.Context()) // a router of its own request, as the console is
		inner.ServeHTTP(w, r)
		httpmetrics.SetRoute(r.Context(), r.Pattern)
	})
	outer := http.NewServeMux()
	outer.Handle("/app/", app)
	outer.HandleFunc("POST /hooks/{name}", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) })

	reg := prometheus.NewPedanticRegistry()
	h := httpmetrics.New(reg, "http").Handler(outer)
	other := httpmetrics.New(reg, "ingest").Handler(http.NotFoundHandler())
	for _, req := range []struct {
		h            http.Handler
		method, path string
	}{
		{h, "GET", "/app/items/42"},
		{h, "GET", "/app/items/43"},
		{h, "GET", "/app/nothing/44"},
		{h, "POST", "/hooks/a"},
		{h, "GET", "/hooks/a"}, // 405: no pattern
		{h, "GET", "/elsewhere/45"},
		{h, "BREW", "/app/items/46"},
		{other, "POST", "/x/47"},
	} {
		req.h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(req.method, req.path, http.NoBody))
	}
	want := `
# HELP fulfillment_http_requests_total HTTP requests answered, by listener, route (the pattern that routed it, or unmatched), method and status code.
# TYPE fulfillment_http_requests_total counter
fulfillment_http_requests_total{code="200",listener="http",method="get",route="/app/items/{id}"} 2
fulfillment_http_requests_total{code="202",listener="http",method="post",route="/hooks/{name}"} 1
fulfillment_http_requests_total{code="404",listener="http",method="get",route="/app/"} 1
fulfillment_http_requests_total{code="404",listener="http",method="get",route="unmatched"} 1
fulfillment_http_requests_total{code="404",listener="http",method="unknown",route="/app/"} 1
fulfillment_http_requests_total{code="404",listener="ingest",method="post",route="unmatched"} 1
fulfillment_http_requests_total{code="405",listener="http",method="get",route="unmatched"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "fulfillment_http_requests_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "fulfillment_http_request_duration_seconds"); n != 6 {
		t.Errorf("%d duration series, want one per listener, route and method (6)", n)
	}
}
