package worker

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// InboxOptions adds observers to the inbox processor.
type InboxOptions struct {
	// OnOutcome, when not nil, observes every processed event's outcome.
	OnOutcome func(fulfillment.Outcome)
	// OnProcessed, when not nil, observes every processed event (metrics).
	// It is called only when the work tells more than outcomes
	// (fulfillment.InboxEventsProcessor, as storage does).
	OnProcessed func(fulfillment.ProcessedEvent)
	// Tracer, when set, traces each batch (its queries are its children)
	// and each event: the event's span is a child of the call that stored
	// it (its trace_parent), linked to its batch's span.
	Tracer trace.Tracer
}

// DefaultInboxBatch is the inbox's events per claim, decided in one
// transaction. The statements a batch sends are one per kind of effect,
// not per event, so that a larger batch spreads their fixed cost (a round
// trip, planning, the executor's start) over more events; measured with
// make bench's saturating push on 2 cores, 64 let processing keep up with
// ingest where 16 fell behind by half. A claim takes what is due, so a
// quiet inbox's batches are as small as its traffic.
const DefaultInboxBatch = 64

// NewInbox returns the inbox processor: the queue of stored provider events
// in table, each batch processed in one transaction by work. onOutcome,
// when not nil, observes every processed event (metrics).
func NewInbox(table Table, work fulfillment.InboxWork, owners Owners, cfg Config, log *slog.Logger, onOutcome func(fulfillment.Outcome)) *Queue {
	return NewInboxWith(table, work, owners, cfg, log, InboxOptions{OnOutcome: onOutcome})
}

// NewInboxWith is NewInbox with observers. Each processed event writes one
// INFO line: its id, its order, the decision (never its body or the
// customer's reference).
func NewInboxWith(table Table, work fulfillment.InboxWork, owners Owners, cfg Config, log *slog.Logger, opts InboxOptions) *Queue {
	if cfg.Batch <= 0 {
		cfg.Batch = DefaultInboxBatch
	}
	if opts.Tracer == nil {
		opts.Tracer = noop.NewTracerProvider().Tracer("")
	}
	return NewQueue("inbox", table, inboxWorker{work: work, log: log, opts: opts}.Process, owners, cfg, log)
}

// inboxWorker processes the inbox's claims.
type inboxWorker struct {
	work fulfillment.InboxWork
	log  *slog.Logger
	opts InboxOptions
}

func (t inboxWorker) Process(ctx context.Context, owner string, claims []Claim) error {
	start := time.Now()
	ctx, span := t.opts.Tracer.Start(ctx, "inbox.process", trace.WithAttributes(attribute.Int("inbox.batch_size", len(claims))))
	defer span.End()
	ids := claimIDs(claims)
	outs, err := t.process(ctx, ids, owner)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return err
	}
	for _, c := range claims {
		out, ok := outs[c.ID]
		if !ok {
			t.log.Info("inbox event taken over by another worker", "inbox_id", c.ID)
			continue
		}
		t.processed(ctx, span, start, c.ID, out)
	}
	return nil
}

// process runs the batch, with each event's details when the work tells
// them.
func (t inboxWorker) process(ctx context.Context, ids []int64, owner string) (map[int64]fulfillment.ProcessedEvent, error) {
	if p, ok := t.work.(fulfillment.InboxEventsProcessor); ok {
		return p.InboxProcessEvents(ctx, ids, owner)
	}
	outs, err := t.work.InboxProcess(ctx, ids, owner)
	if err != nil {
		return nil, err
	}
	res := make(map[int64]fulfillment.ProcessedEvent, len(outs))
	for id, o := range outs {
		res[id] = fulfillment.ProcessedEvent{Outcome: o}
	}
	return res, nil
}

// InboxObserver is what the inbox processor of log and opts does with an
// event it decided, for the events the store decides in the transaction
// that stores them (storage.Store.ObserveDecided): it logs the event,
// counts it and traces it, as a child of the call that stored it. ctx is
// that call's; start is when the decision began.
func InboxObserver(log *slog.Logger, opts InboxOptions) func(ctx context.Context, start time.Time, id int64, p fulfillment.ProcessedEvent) {
	if opts.Tracer == nil {
		opts.Tracer = noop.NewTracerProvider().Tracer("")
	}
	t := inboxWorker{log: log, opts: opts}
	return func(ctx context.Context, start time.Time, id int64, p fulfillment.ProcessedEvent) {
		t.processed(ctx, nil, start, id, p)
	}
}

// processed logs, counts and traces one processed event; its span is
// linked to the span of its batch when there is one (not nil).
func (t inboxWorker) processed(ctx context.Context, batch trace.Span, start time.Time, id int64, p fulfillment.ProcessedEvent) {
	attrs := []slog.Attr{
		slog.String("event_id", p.EventID), slog.String("endpoint", p.EndpointID), slog.String("kind", string(p.Kind)),
		slog.Int64("inbox_id", id), slog.String("order_id", p.OrderID), slog.String("decision", string(p.Decision)),
		slog.String("reason", p.Reason),
	}
	if !p.ReceivedAt.IsZero() {
		attrs = append(attrs, slog.Duration("since_received", max(time.Since(p.ReceivedAt), 0)))
	}
	t.log.LogAttrs(ctx, slog.LevelInfo, "event processed", attrs...)
	if t.opts.OnOutcome != nil {
		t.opts.OnOutcome(p.Outcome)
	}
	if t.opts.OnProcessed != nil && p.EventID != "" {
		t.opts.OnProcessed(p)
	}
	if p.TraceParent == "" || batch != nil && !batch.SpanContext().IsValid() { // tracing is off
		return
	}
	parent := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": p.TraceParent})
	if !trace.SpanContextFromContext(parent).IsValid() {
		return
	}
	opts := []trace.SpanStartOption{trace.WithTimestamp(start)}
	if batch != nil {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: batch.SpanContext()}))
	}
	_, span := t.opts.Tracer.Start(parent, "inbox.process_event", append(opts,
		trace.WithAttributes(
			attribute.String("webhook.event_id", p.EventID), attribute.Int64("inbox.id", id),
			attribute.String("order.id", p.OrderID), attribute.String("inbox.decision", string(p.Decision))))...)
	span.End()
}
