package worker

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/internal/failpoint"
)

// Destination is one receiver of outbox messages, as its dispatcher sees
// it.
type Destination struct {
	ID string
	// Idempotent: the receiver applies a repeated key once, so a message
	// whose attempt ended unclearly is sent again. Otherwise such a message
	// is uncertain, and one whose request may have been on the wire when
	// its worker stopped is not sent again.
	Idempotent bool
	// Concurrency caps its deliveries in flight (per process).
	Concurrency int
	// MaxAttempts is the retry budget of one message.
	MaxAttempts int
	// Deliver makes one attempt at m and says what came of it. It returns
	// within the destination's timeout.
	Deliver func(ctx context.Context, m fulfillment.OutboxMessage) fulfillment.DeliveryAttempt
}

// Outbox dispatches outbox messages: one queue per destination, so that a
// slow or dead destination never holds back another, all woken by one
// listener.
type Outbox struct {
	work   fulfillment.OutboxWork
	queues []*Queue

	mu    sync.Mutex
	wakes []func()
}

// recordTimeout bounds recording an attempt, which happens even when the
// dispatcher is stopping: the request was made.
const recordTimeout = 10 * time.Second

// NewOutbox returns the dispatcher of destinations. cfg tunes every
// destination's queue (poll, lease, backoff); each destination sets its own
// workers (Concurrency) and MaxAttempts, and claims one message at a time.
func NewOutbox(work fulfillment.OutboxWork, destinations []Destination, owners Owners, cfg Config, log *slog.Logger) *Outbox {
	o := &Outbox{work: work}
	for _, d := range destinations {
		c := cfg
		c.Workers, c.Batch, c.MaxAttempts = d.Concurrency, 1, d.MaxAttempts
		t := &outboxTable{outbox: o, dest: d, log: log.With("destination", d.ID)}
		o.queues = append(o.queues, NewQueue("outbox "+d.ID, t, owners, c, log))
	}
	return o
}

// Queues are the destinations' queues, for the caller to run under the
// owners' liveness.
func (o *Outbox) Queues() []*Queue { return o.queues }

// Listen runs the one listener of the outbox until ctx ends, waking every
// destination's queue.
func (o *Outbox) Listen(ctx context.Context) error {
	return o.work.OutboxListen(ctx, func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, wake := range o.wakes {
			wake()
		}
	})
}

// outboxTable is one destination's messages as a Table.
type outboxTable struct {
	outbox *Outbox
	dest   Destination
	log    *slog.Logger
}

func (t *outboxTable) Claim(ctx context.Context, owner string, limit int, lease time.Duration, maxAttempts int, inFlight []int64) ([]Claim, error) {
	got, err := t.outbox.work.OutboxClaim(ctx, t.dest.ID, owner, limit, lease, maxAttempts, inFlight)
	claims := make([]Claim, len(got))
	for i, c := range got {
		claims[i] = Claim(c)
	}
	return claims, err
}

// Process makes one attempt at each claimed message and records it. An
// attempt to retry is returned as an error, for the queue to schedule it.
func (t *outboxTable) Process(ctx context.Context, owner string, claims []Claim) error {
	for _, c := range claims {
		if err := t.attempt(ctx, owner, c); err != nil {
			return err
		}
	}
	return nil
}

func (t *outboxTable) attempt(ctx context.Context, owner string, c Claim) error {
	m, err := t.outbox.work.OutboxLoad(ctx, c.ID, owner)
	if errors.Is(err, fulfillment.ErrLeaseLost) {
		return nil
	}
	if err != nil {
		return err
	}
	started := time.Now()
	var a fulfillment.DeliveryAttempt
	switch {
	case m.Interrupted && !t.dest.Idempotent:
		a = fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeInterrupted,
			Reason: "a request for it may have been on the wire when the worker sending it stopped; not sent again"}
	default:
		if !t.dest.Idempotent {
			if err := t.outbox.work.OutboxSending(ctx, c.ID, owner); errors.Is(err, fulfillment.ErrLeaseLost) {
				return nil
			} else if err != nil {
				return err
			}
		}
		// A request that started completes (within the destination's
		// timeout) and is recorded, even when the dispatcher is stopping.
		a = t.dest.Deliver(context.WithoutCancel(ctx), m)
		failpoint.Inject("outbox-after-send")
	}
	a.StartedAt = started
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	err = t.outbox.work.OutboxRecord(rctx, c.ID, owner, a)
	switch {
	case errors.Is(err, fulfillment.ErrLeaseLost):
		t.log.Info("outbox message taken over by another worker", "message_id", c.ID, "outcome", a.Outcome)
		return nil
	case err != nil:
		return err
	case a.Outcome == fulfillment.OutcomeRetry:
		return errors.New(a.Reason)
	case a.Outcome == fulfillment.OutcomeGone:
		t.log.Warn("destination answered 410 Gone: disabled until an admin enables it", "message_id", c.ID)
	case a.Outcome == fulfillment.OutcomeUncertain || a.Outcome == fulfillment.OutcomeInterrupted:
		t.log.Warn("delivery uncertain: an uncertain_delivery item is open", "message_id", c.ID, "reason", a.Reason)
	}
	return nil
}

func (t *outboxTable) Retry(ctx context.Context, owner string, c Claim, cause string, next time.Time, maxAttempts int) (bool, error) {
	return t.outbox.work.OutboxRetry(ctx, c.ID, owner, cause, next, maxAttempts)
}

func (t *outboxTable) Release(ctx context.Context, owner string) (int, error) {
	return t.outbox.work.OutboxRelease(ctx, t.dest.ID, owner)
}

func (t *outboxTable) Reclaim(ctx context.Context) (int, error) {
	return t.outbox.work.OutboxReclaim(ctx)
}

// Listen registers wake with the outbox's one listener until ctx ends.
func (t *outboxTable) Listen(ctx context.Context, wake func()) error {
	o := t.outbox
	o.mu.Lock()
	o.wakes = append(o.wakes, wake)
	o.mu.Unlock()
	<-ctx.Done()
	return nil
}
