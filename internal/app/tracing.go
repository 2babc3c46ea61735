package app

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"

	"github.com/fulfillplatform/fulfillment/config"
)

// Option changes how New builds the service.
type Option func(*options)

type options struct {
	tracer trace.TracerProvider
}

// WithTracerProvider traces with tp instead of what tracing configures
// (tests use an in-memory exporter). The caller shuts tp down.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracer = tp }
}

// newTracerProvider is the provider tracing configures: nil when tracing is
// off (no exporter, nothing instrumented), else one exporting over OTLP/gRPC
// in batches, sampling new traces at sample_ratio and following callers'
// decisions. shutdown flushes it.
func newTracerProvider(ctx context.Context, c config.Tracing) (tp trace.TracerProvider, shutdown func(context.Context) error, err error) {
	if c.OTLPEndpoint == "" {
		return nil, func(context.Context) error { return nil }, nil
	}
	c = c.WithDefaults()
	opt := otlptracegrpc.WithEndpoint(c.OTLPEndpoint)
	if strings.Contains(c.OTLPEndpoint, "://") {
		opt = otlptracegrpc.WithEndpointURL(c.OTLPEndpoint)
	}
	exp, err := otlptracegrpc.New(ctx, opt)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res := resource.NewSchemaless(attribute.String("service.name", c.ServiceName))
	p := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(2*time.Second)),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*c.SampleRatio))),
	)
	return p, p.Shutdown, nil
}

// propagator carries trace context in W3C headers and gRPC metadata.
var propagator = propagation.TraceContext{}

// traceHTTP wraps h in a server span per request when tp is set.
func traceHTTP(h http.Handler, name string, tp trace.TracerProvider) http.Handler {
	if tp == nil {
		return h
	}
	return otelhttp.NewHandler(h, name, otelhttp.WithTracerProvider(tp), otelhttp.WithPropagators(propagator))
}

// IngestTracing is what `fulfillmentd ingest` needs to trace webhooks as
// serve does: a wrapper of the gateway's handler (a server span per
// request) and the upstream connection's option (a client span per call,
// its context in gRPC metadata). Both do nothing when tracing is off.
// shutdown flushes the spans.
func IngestTracing(ctx context.Context, c config.Tracing) (wrap func(http.Handler) http.Handler, dial []grpc.DialOption, shutdown func(context.Context) error, err error) {
	tp, shutdown, err := newTracerProvider(ctx, c)
	if err != nil {
		return nil, nil, nil, err
	}
	wrap = func(h http.Handler) http.Handler { return traceHTTP(h, "webhook", tp) }
	if tp != nil {
		dial = append(dial, grpc.WithStatsHandler(otelgrpc.NewClientHandler(
			otelgrpc.WithTracerProvider(tp), otelgrpc.WithPropagators(propagator))))
	}
	return wrap, dial, shutdown, nil
}
