package worker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
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

// idempotentBatch is how many messages a worker of an idempotent
// destination claims at once, sends one after the other and records in one
// transaction. A worker that stops in between leaves sent messages
// unrecorded: they are sent again, which such a destination applies once.
// (A destination that does not honour idempotency keys gets one message
// per claim.)
const idempotentBatch = 8

// recordTimeout bounds recording an attempt, which happens even when the
// dispatcher is stopping: the request was made.
const recordTimeout = 10 * time.Second

// NewOutbox returns the dispatcher of destinations. cfg tunes every
// destination's queue (poll, lease, backoff); each destination sets its own
// workers (Concurrency) and MaxAttempts; its workers claim idempotentBatch
// messages at a time (one, when it is not idempotent).
func NewOutbox(work fulfillment.OutboxWork, destinations []Destination, owners Owners, cfg Config, log *slog.Logger) *Outbox {
	o := &Outbox{work: work}
	for _, d := range destinations {
		c := cfg
		c.Workers, c.Batch, c.MaxAttempts = d.Concurrency, 1, d.MaxAttempts
		if d.Idempotent {
			c.Batch = idempotentBatch
		}
		c.defaults()
		t := &outboxTable{outbox: o, dest: d, cfg: c, log: log.With("destination", d.ID)}
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
	cfg    Config
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

// Process makes one attempt at each claimed message, one after the other,
// and records them together (one transaction); then it schedules the
// attempts to retry, each after its backoff. A destination that does not
// honour idempotency keys has one message per claim, marked as sending
// (committed) before its request starts.
func (t *outboxTable) Process(ctx context.Context, owner string, claims []Claim) error {
	ids := make([]int64, len(claims))
	tries := make(map[int64]int, len(claims))
	for i, c := range claims {
		ids[i], tries[c.ID] = c.ID, c.Attempts
	}
	msgs, err := t.outbox.work.OutboxLoad(ctx, ids, owner)
	if err != nil {
		return err
	}
	attempts := make([]fulfillment.MessageAttempt, 0, len(msgs))
	for _, m := range msgs {
		a, ok, err := t.attempt(ctx, owner, m)
		if err != nil {
			return err
		}
		if ok {
			attempts = append(attempts, fulfillment.MessageAttempt{ID: m.ID, DeliveryAttempt: a})
		}
	}
	if len(attempts) == 0 {
		return nil
	}
	// The requests were made: they are recorded even when the dispatcher
	// is stopping.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	lost, err := t.outbox.work.OutboxRecord(rctx, owner, attempts)
	if err != nil {
		return err
	}
	gone := make(map[int64]bool, len(lost))
	for _, id := range lost {
		gone[id] = true
	}
	for _, a := range attempts {
		switch {
		case gone[a.ID]:
			t.log.Info("outbox message taken over by another worker", "message_id", a.ID, "outcome", a.Outcome)
		case a.Outcome == fulfillment.OutcomeRetry:
			t.retry(rctx, owner, a.ID, tries[a.ID], a.Reason)
		case a.Outcome == fulfillment.OutcomeGone:
			t.log.Warn("destination answered 410 Gone: disabled until an admin enables it", "message_id", a.ID)
		case a.Outcome == fulfillment.OutcomeUncertain || a.Outcome == fulfillment.OutcomeInterrupted:
			t.log.Warn("delivery uncertain: an uncertain_delivery item is open", "message_id", a.ID, "reason", a.Reason)
		}
	}
	return nil
}

// attempt makes one attempt at m; ok is false when the message is no longer
// owner's to send.
func (t *outboxTable) attempt(ctx context.Context, owner string, m fulfillment.OutboxMessage) (a fulfillment.DeliveryAttempt, ok bool, err error) {
	started := time.Now()
	switch {
	case m.Interrupted && !t.dest.Idempotent:
		a = fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeInterrupted,
			Reason: "a request for it may have been on the wire when the worker sending it stopped; not sent again"}
	default:
		if !t.dest.Idempotent {
			if err := t.outbox.work.OutboxSending(ctx, m.ID, owner); errors.Is(err, fulfillment.ErrLeaseLost) {
				return a, false, nil
			} else if err != nil {
				return a, false, err
			}
		}
		// A request that started completes (within the destination's
		// timeout) and is recorded, even when the dispatcher is stopping.
		a = t.dest.Deliver(context.WithoutCancel(ctx), m)
		failpoint.Inject("outbox-after-send")
	}
	a.StartedAt = started
	return a, true, nil
}

// retry schedules message id, whose attempt number attempt asked to be
// retried, after its backoff (or fails it past its attempts).
func (t *outboxTable) retry(ctx context.Context, owner string, id int64, attempt int, why string) {
	next := time.Now().Add(backoff(attempt, t.cfg.BaseBackoff, t.cfg.MaxBackoff, rand.Float64()))
	failed, err := t.outbox.work.OutboxRetry(ctx, id, owner, why, next, t.dest.MaxAttempts)
	switch {
	case errors.Is(err, fulfillment.ErrLeaseLost):
		t.log.Info("outbox message taken over by another worker", "message_id", id)
	case err != nil && errors.Is(err, fulfillment.ErrUnavailable):
		t.log.Debug("recording failed attempt", "message_id", id, "error", err)
	case err != nil:
		// It stays leased to this live owner: once its lease runs out,
		// this owner claims it again.
		t.log.Warn("recording failed attempt", "message_id", id, "error", err)
	case failed:
		t.log.Error("failed past its retry budget", "message_id", id, "attempts", attempt, "error", why)
	default:
		t.log.Warn("delivery failed; will retry", "message_id", id, "attempt", attempt, "retry_at", next, "error", why)
	}
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
