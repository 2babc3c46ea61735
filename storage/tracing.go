package storage

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// queryTracer makes a client span of each query (and each batch) that runs
// with a traced context: the statement's first words as its name, the
// statement's text (never its arguments) as db.query.text. Queries of an
// untraced context (background work, the group commit's flushers) make none.
type queryTracer struct{ tracer trace.Tracer }

func newQueryTracer(tp trace.TracerProvider) *queryTracer {
	return &queryTracer{tracer: tp.Tracer("github.com/fulfillplatform/fulfillment/storage")}
}

var (
	_ pgx.QueryTracer = (*queryTracer)(nil)
	_ pgx.BatchTracer = (*queryTracer)(nil)
)

// maxQueryText bounds the statement text a span carries.
const maxQueryText = 2000

func (t *queryTracer) start(ctx context.Context, name, sql string) context.Context {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	if len(sql) > maxQueryText {
		sql = sql[:maxQueryText]
	}
	ctx, _ = t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", "postgresql"), attribute.String("db.query.text", sql)))
	return ctx
}

func end(ctx context.Context, err error) {
	span := trace.SpanFromContext(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// TraceQueryStart starts the span of a query.
func (t *queryTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return t.start(ctx, operation(data.SQL), data.SQL)
}

// TraceQueryEnd ends it.
func (*queryTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	end(ctx, data.Err)
}

// TraceBatchStart starts the span of a batch (its queries are not spans of
// their own).
func (t *queryTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	n := 0
	if data.Batch != nil {
		n = data.Batch.Len()
	}
	ctx = t.start(ctx, "batch", "")
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int("db.operation.batch.size", n))
	return ctx
}

// TraceBatchQuery does nothing: the batch's span stands for its queries.
func (*queryTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd ends the batch's span.
func (*queryTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	end(ctx, data.Err)
}

// operation is the first word of a statement (SELECT, INSERT, WITH…), its
// span's name.
func operation(sql string) string {
	f := strings.Fields(sql)
	if len(f) == 0 {
		return "query"
	}
	op := strings.ToUpper(f[0])
	if len(op) > 16 {
		op = op[:16]
	}
	return op
}

// traceParent is the W3C traceparent of ctx's span, "" when ctx is not
// traced.
func traceParent(ctx context.Context) string {
	if ctx == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return ""
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c.Get("traceparent")
}
