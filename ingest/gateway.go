package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// Recorder stores a verified event durably and returns once it is
// committed. Errors wrap fulfillment.ErrUnavailable when the event cannot be
// stored now (the provider should retry: 503), or are a
// *fulfillment.ValidationError when the event is refused (400); any other
// error is a failure of the service or of this gateway's access to it (500).
type Recorder interface {
	RecordEvent(ctx context.Context, ev fulfillment.ProviderEvent, rawBody []byte) (fulfillment.InboxReceipt, error)
}

// Endpoint is one configured webhook receiver.
type Endpoint struct {
	fulfillment.Endpoint
	// Adapter speaks the provider's language, with the endpoint's secrets
	// and options.
	Adapter Adapter
}

// Options tunes the gateway.
type Options struct {
	// MaxBodyBytes caps a request body; larger is 413 (default 256 KiB).
	MaxBodyBytes int64
	// Timeout bounds storing one event; past it the provider gets 503 and
	// retries (default 2s).
	Timeout time.Duration
	// Registerer receives the gateway's metrics (nil: not registered).
	Registerer prometheus.Registerer
}

// Gateway is the webhook HTTP handler: POST /webhooks/{endpoint_id}.
type Gateway struct {
	endpoints map[string]Endpoint
	rec       Recorder
	opts      Options
	log       *slog.Logger
	// rejectLog keeps a flood of forged or malformed requests from
	// flooding the log; the counter still counts every one.
	rejectLog *rate.Limiter
	requests  *prometheus.CounterVec
	// ack is the time from a request's arrival to its 2xx, by endpoint.
	ack *prometheus.HistogramVec
}

// Outcomes of a webhook request, as counted in metrics and logs.
const (
	outcomeAccepted        = "accepted"
	outcomeDuplicate       = "duplicate"
	outcomeUnknownEndpoint = "unknown_endpoint"
	outcomeTooLarge        = "too_large"
	outcomeBadSignature    = "bad_signature"
	outcomeInvalid         = "invalid_payload"
	outcomeOrgMismatch     = "org_mismatch"
	outcomeAccountMismatch = "account_mismatch"
	outcomeUnavailable     = "unavailable"
	outcomeFailed          = "failed"
	outcomeMethod          = "method_not_allowed"
	outcomeEncoding        = "unsupported_encoding"
	outcomeBodyTimeout     = "body_timeout"
)

// NewGateway returns the handler for endpoints, storing through rec.
func NewGateway(endpoints []Endpoint, rec Recorder, opts Options, log *slog.Logger) *Gateway {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 256 << 10
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	g := &Gateway{
		endpoints: make(map[string]Endpoint, len(endpoints)),
		rec:       rec,
		opts:      opts,
		log:       log,
		rejectLog: rate.NewLimiter(rate.Limit(5), 20),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fulfillment_webhook_requests_total",
			Help: "Webhook requests by endpoint and outcome.",
		}, []string{"endpoint", "outcome"}),
		ack: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fulfillment_webhook_ack_duration_seconds",
			Help:    "Time from a webhook's arrival to its 2xx answer (the event committed), by endpoint.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"endpoint"}),
	}
	for _, ep := range endpoints {
		g.endpoints[ep.ID] = ep
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(g.requests, g.ack)
	}
	return g
}

// Handler routes POST /webhooks/{endpoint_id} to the gateway and answers
// /healthz for load balancers.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/webhooks/{endpoint_id}", g.serveWebhook)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	return mux
}

// RetryAfterUnavailable is the Retry-After, in seconds, of an answer 503
// (the event, or the call, could not be stored or read now): the service's
// REST answers say the same.
const RetryAfterUnavailable = "5"

// Encoded reports whether a request's body was sent with a
// Content-Encoding (other than identity), which neither a provider's
// signature nor the API's reading of a body undoes.
func Encoded(h http.Header) bool {
	enc := h.Values("Content-Encoding")
	return len(enc) > 1 || len(enc) == 1 && !strings.EqualFold(enc[0], "identity")
}

func (g *Gateway) serveWebhook(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id := r.PathValue("endpoint_id")
	ep, ok := g.endpoints[id]
	if !ok {
		g.reject(w, r, nil, id, http.StatusNotFound, outcomeUnknownEndpoint, "unknown webhook endpoint", nil)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		g.reject(w, r, ep.Adapter, id, http.StatusMethodNotAllowed, outcomeMethod, "webhooks are POSTed", nil)
		return
	}
	if Encoded(r.Header) {
		// A provider signs the bytes it sends as they are: a compressed
		// body is not what any adapter verifies or reads.
		g.reject(w, r, ep.Adapter, id, http.StatusUnsupportedMediaType, outcomeEncoding,
			"send the body as it is, without a Content-Encoding", nil)
		return
	}
	if r.ContentLength > g.opts.MaxBodyBytes {
		// Refused as declared, before any of it is read (and before a
		// client that asked to continue is told to send it).
		g.rejectTooLarge(w, r, ep.Adapter, id)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.opts.MaxBodyBytes))
	if err != nil {
		var (
			mbe *http.MaxBytesError
			ne  net.Error
		)
		switch {
		case errors.As(err, &mbe):
			g.rejectTooLarge(w, r, ep.Adapter, id)
		case errors.As(err, &ne) && ne.Timeout():
			g.reject(w, r, ep.Adapter, id, http.StatusRequestTimeout, outcomeBodyTimeout,
				"the body did not arrive in time", err)
		default:
			g.reject(w, r, ep.Adapter, id, http.StatusBadRequest, outcomeInvalid, "could not read the body", err)
		}
		return
	}

	// Verify before parsing: nothing of an unsigned body is interpreted.
	if err := ep.Adapter.Verify(r.Header, body); err != nil {
		g.reject(w, r, ep.Adapter, id, http.StatusUnauthorized, outcomeBadSignature, "invalid signature", err)
		return
	}
	ev, err := ep.Adapter.Parse(r.Header, body)
	switch {
	case errors.Is(err, ErrOrgMismatch):
		g.reject(w, r, ep.Adapter, id, http.StatusBadRequest, outcomeOrgMismatch, "the event names another org than this endpoint's", err)
		return
	case errors.Is(err, ErrAccountMismatch):
		g.reject(w, r, ep.Adapter, id, http.StatusBadRequest, outcomeAccountMismatch,
			"the event names another merchant account at the provider than this endpoint's", err)
		return
	case err != nil:
		g.reject(w, r, ep.Adapter, id, http.StatusBadRequest, outcomeInvalid, err.Error(), err)
		return
	}

	span := trace.SpanFromContext(r.Context())
	span.SetAttributes(attribute.String("webhook.endpoint", id), attribute.String("webhook.event_id", ev.EventID))
	ctx, cancel := context.WithTimeout(r.Context(), g.opts.Timeout)
	defer cancel()
	receipt, err := g.rec.RecordEvent(ctx, ev, body)
	var ve *fulfillment.ValidationError
	switch {
	case errors.As(err, &ve):
		// Refused for good: a retry would be refused again.
		g.reject(w, r, ep.Adapter, id, http.StatusBadRequest, outcomeInvalid, ve.Error(), err)
		return
	case errors.Is(err, fulfillment.ErrUnavailable):
		// Not stored, for now: the provider must retry.
		w.Header().Set("Retry-After", RetryAfterUnavailable)
		g.reject(w, r, ep.Adapter, id, http.StatusServiceUnavailable, outcomeUnavailable, "temporarily unable to store the event; retry", err)
		return
	case err != nil:
		// Not stored, and not for a passing reason (the service refused
		// this gateway, or failed): someone must look.
		g.reject(w, r, ep.Adapter, id, http.StatusInternalServerError, outcomeFailed, "the event could not be stored", err)
		return
	}
	outcome := outcomeAccepted
	if receipt.Duplicate {
		outcome = outcomeDuplicate
	}
	g.requests.WithLabelValues(id, outcome).Inc()
	ep.Adapter.Acknowledge(w)
	took := time.Since(start)
	g.ack.WithLabelValues(id).Observe(took.Seconds())
	// The event id, never its body. A new event's line is at DEBUG: the
	// line that tells an operator of it is the processor's "event
	// processed", with its decision (one line per event at INFO, not two).
	// A redelivery has no other line.
	level := slog.LevelInfo
	if outcome == outcomeAccepted {
		level = slog.LevelDebug
	}
	g.log.LogAttrs(r.Context(), level, "webhook "+outcome,
		slog.String("endpoint", id), slog.String("event_id", ev.EventID), slog.String("kind", string(ev.Kind)),
		slog.Duration("duration", took))
}

// rejectTooLarge answers a body over the limit 413, declared or read.
func (g *Gateway) rejectTooLarge(w http.ResponseWriter, r *http.Request, a Adapter, endpoint string) {
	g.reject(w, r, a, endpoint, http.StatusRequestEntityTooLarge, outcomeTooLarge,
		"body exceeds "+strconv.FormatInt(g.opts.MaxBodyBytes, 10)+" bytes", nil)
}

// reject answers a refused request, counts it, and logs it when the log
// budget allows — with the endpoint, outcome and cause, never the body or a
// secret.
func (g *Gateway) reject(w http.ResponseWriter, r *http.Request, a Adapter, endpoint string, status int, outcome, reason string, cause error) {
	label := endpoint
	if outcome == outcomeUnknownEndpoint {
		label = "unknown" // do not let callers invent label values
	}
	g.requests.WithLabelValues(label, outcome).Inc()
	// Refused requests (4xx) are whatever anyone sends: a few per second
	// are logged. Failures of ours (5xx) always reach the log, whose
	// handler writes each cause once per interval.
	if status >= 500 || g.rejectLog.Allow() {
		attrs := []any{"endpoint", label, "outcome", outcome, "status", status, "remote", r.RemoteAddr}
		if cause != nil {
			attrs = append(attrs, "cause", cause.Error())
		}
		level := slog.LevelWarn
		switch outcome {
		case outcomeUnavailable, outcomeFailed:
			level = slog.LevelError
		case outcomeMethod:
			// A GET is a browser, a health check or fulfillctl trigger's
			// probe of the URL: nothing a provider sent went wrong.
			level = slog.LevelInfo
		}
		g.log.Log(r.Context(), level, "webhook rejected", attrs...)
	}
	if a == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": reason})
		return
	}
	a.Reject(w, status, reason)
}
