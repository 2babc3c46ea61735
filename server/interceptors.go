package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"runtime/debug"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// requestIDHeader carries a request id from the caller (or the REST gateway)
// into the service and back.
const requestIDHeader = "x-request-id"

// callRecord collects what the log line of one call reports.
type callRecord struct {
	principal string
}

type callKey struct{}

// newRequestID returns 16 random hex characters.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// requestIDFrom returns the caller's request id when it is a sane token,
// or a new one.
func requestIDFrom(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(requestIDHeader); len(v) > 0 && validRequestID(v[0]) {
		return v[0]
	}
	return newRequestID()
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, r := range id {
		allowed := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.'
		if !allowed {
			return false
		}
	}
	return true
}

// hotMethods are called once per webhook or per page view: a busy service
// would write a line per call. Their successful calls are logged at DEBUG;
// their failures like any other call's.
var hotMethods = map[string]bool{
	fulfillmentv1.FulfillmentService_RecordEvent_FullMethodName: true,
	fulfillmentv1.FulfillmentService_GetOrder_FullMethodName:    true,
	fulfillmentv1.FulfillmentService_CheckAccess_FullMethodName: true,
}

// logUnary writes one structured line per call: method, code, duration
// (duration_ms), request id and caller — at DEBUG for a successful call of
// a hot method. It never logs request or response bodies.
func logUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		id := requestIDFrom(ctx)
		_ = grpc.SetHeader(ctx, metadata.Pairs(requestIDHeader, id))
		rec := &callRecord{}
		ctx = context.WithValue(ctx, callKey{}, rec)
		ctx = withLogAttrs(ctx, slog.String("request_id", id))
		resp, err := handler(ctx, req)
		code := status.Code(err)
		var level slog.Level
		switch code {
		case codes.Internal, codes.Unknown, codes.DataLoss:
			level = slog.LevelError
		case codes.Unavailable:
			level = slog.LevelWarn
		case codes.OK:
			level = slog.LevelInfo
			if hotMethods[info.FullMethod] {
				level = slog.LevelDebug
			}
		default:
			level = slog.LevelInfo
		}
		if !log.Enabled(ctx, level) {
			return resp, err
		}
		attrs := []slog.Attr{
			slog.String("method", info.FullMethod),
			slog.String("code", code.String()),
			slog.Duration("duration", time.Since(start)),
		}
		if rec.principal != "" {
			attrs = append(attrs, slog.String("caller", rec.principal))
		}
		log.LogAttrs(ctx, level, "rpc", attrs...)
		return resp, err
	}
}

// rpcBuckets are the bounds of grpc_server_handling_seconds: most calls
// take milliseconds, the slowest (listings, exports) seconds.
var rpcBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// rpcMetrics are the interceptors that count and time every call, by
// service, method, type and code, with go-grpc-middleware's Prometheus
// provider: grpc_server_started_total, grpc_server_handled_total,
// grpc_server_handling_seconds, and grpc_server_msg_received_total and
// grpc_server_msg_sent_total. The labels are bounded: a call of a method
// the server does not have is answered before any interceptor. They come
// first in the chains, so that a call that auth refuses counts with its
// code and a panic counts as the INTERNAL it is turned into. The calls of
// the in-process clients (the REST gateway, the console) count too. None
// without reg.
func rpcMetrics(reg prometheus.Registerer) ([]grpc.UnaryServerInterceptor, []grpc.StreamServerInterceptor) {
	if reg == nil {
		return nil, nil
	}
	m := grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram(grpcprom.WithHistogramBuckets(rpcBuckets)))
	reg.MustRegister(m)
	return []grpc.UnaryServerInterceptor{m.UnaryServerInterceptor()}, []grpc.StreamServerInterceptor{m.StreamServerInterceptor()}
}

// recoverUnary turns a panic into INTERNAL and logs its stack, so that one
// bad request cannot take the process down.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if r := recover(); r != nil {
				log.ErrorContext(ctx, "panic in handler", "method", info.FullMethod, "panic", r, "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, "internal error")
			}
		}()
		return handler(ctx, req)
	}
}

// boundUnary gives a unary call at most limit to be handled: a caller that
// sets no deadline, or a later one, gets this one (grpc.max_call_duration),
// so that no call holds a database connection without end. The caller's
// own earlier deadline stands.
func boundUnary(limit time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > limit {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, limit)
			defer cancel()
		}
		return handler(ctx, req)
	}
}

// Log attributes travelling with the context, added to every line logged with
// it through contextHandler.
type logAttrsKey struct{}

func withLogAttrs(ctx context.Context, attrs ...slog.Attr) context.Context {
	prev, _ := ctx.Value(logAttrsKey{}).([]slog.Attr)
	return context.WithValue(ctx, logAttrsKey{}, append(prev[:len(prev):len(prev)], attrs...))
}

// ContextHandler wraps a slog.Handler so that records logged with a context
// carry that context's request id, and its trace id when it is traced.
type ContextHandler struct{ slog.Handler }

// Handle adds the context's attributes to r.
func (h ContextHandler) Handle(ctx context.Context, r slog.Record) error {
	if attrs, ok := ctx.Value(logAttrsKey{}).([]slog.Attr); ok {
		r.AddAttrs(attrs...)
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the wrapper.
func (h ContextHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return ContextHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup keeps the wrapper.
func (h ContextHandler) WithGroup(name string) slog.Handler {
	return ContextHandler{h.Handler.WithGroup(name)}
}

// limitResponse refuses to send a response larger than maxBytes, which the
// transport would fail with RESOURCE_EXHAUSTED — a code that tells clients
// to retry. Listings are bounded by bytes and orders by their units, so this
// only guards against a bug: the caller gets INTERNAL and the log says why.
func limitResponse(maxBytes int, log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		if m, ok := resp.(proto.Message); ok && err == nil {
			if n := proto.Size(m); n > maxBytes {
				log.ErrorContext(ctx, "response exceeds grpc.max_send_bytes", "method", info.FullMethod, "bytes", n, "max", maxBytes)
				return nil, status.Error(codes.Internal, "internal error: the response is too large to send")
			}
		}
		return resp, err
	}
}
