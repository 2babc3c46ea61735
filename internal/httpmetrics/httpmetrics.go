// Package httpmetrics counts and times the requests of an HTTP listener
// with promhttp's instrumentation, by route, method and status code.
//
// A request's route is the pattern of the innermost router that took it —
// "/v1/orders/{order_id}", "/console/orders/{id}", "/webhooks/{endpoint_id}"
// — never its path, so that ids never become label values. The outermost
// router's pattern is read from the request after it served
// (http.ServeMux sets it); a router nested inside, which sees a request of
// its own, names its pattern with SetRoute. A request no router matched is
// Unmatched. A subtree pattern ("/v1/", "/console/") stands for the
// requests that reached it but no route below it: refused before routing,
// or unknown there. Every label value is one of a fixed set.
package httpmetrics

import (
	"context"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Unmatched is the route of the requests that no router matched.
const Unmatched = "unmatched"

// Buckets are the bounds of the duration histogram, in seconds.
var Buckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// Metrics are the request metrics of one listener.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// New registers the metrics of the listener named listener with reg:
// fulfillment_http_requests_total{listener, route, method, code} and
// fulfillment_http_request_duration_seconds{listener, route, method}. Any
// number of listeners register with one registry, each under its own name.
func New(reg prometheus.Registerer, listener string) *Metrics {
	labels := prometheus.Labels{"listener": listener}
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "fulfillment_http_requests_total",
			Help:        "HTTP requests answered, by listener, route (the pattern that routed it, or unmatched), method and status code.",
			ConstLabels: labels,
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:        "fulfillment_http_request_duration_seconds",
			Help:        "Time from an HTTP request's headers read to its handler's return, by listener, route and method.",
			ConstLabels: labels,
			Buckets:     Buckets,
		}, []string{"route", "method"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

// Handler counts and times the requests that next serves. next is the
// listener's outermost router (or passes the request it gets to it
// unchanged), so that its pattern is on the request once it served.
func (m *Metrics) Handler(next http.Handler) http.Handler {
	route := promhttp.WithLabelFromCtx("route", routeOf)
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		SetRoute(r.Context(), r.Pattern)
	})
	h := promhttp.InstrumentHandlerDuration(m.duration, promhttp.InstrumentHandlerCounter(m.requests, record, route), route)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), slotKey{}, new(slot))))
	})
}

// slot holds the route of one request. It is written and read on the
// request's goroutine: by the routers while it is served, by Handler once
// it was.
type slot struct{ route string }

type slotKey struct{}

// SetRoute names pattern (a router's, as http.ServeMux or grpc-gateway
// write it; a method before it is dropped) as the route of the request of
// ctx, unless a router nested deeper named one already. It does nothing
// for an empty pattern, or outside a Handler.
func SetRoute(ctx context.Context, pattern string) {
	s, _ := ctx.Value(slotKey{}).(*slot)
	if s == nil || s.route != "" || pattern == "" {
		return
	}
	if _, path, ok := strings.Cut(pattern, " "); ok {
		pattern = strings.TrimLeft(path, " \t")
	}
	s.route = pattern
}

func routeOf(ctx context.Context) string {
	if s, _ := ctx.Value(slotKey{}).(*slot); s != nil && s.route != "" {
		return s.route
	}
	return Unmatched
}
