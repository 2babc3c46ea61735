package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
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
	// Held, when set, is told when the wait the destination asked for ends,
	// each time one begins or grows longer (see sender.hold).
	Held func(until time.Time)
}

// idempotentBatch is how many messages a worker of an idempotent
// destination claims at once, sends (concurrently, within the
// destination's concurrency) and records in one transaction. A worker that
// stops in between leaves sent messages unrecorded: they are sent again,
// which such a destination applies once. (A destination that does not
// honour idempotency keys gets one message per claim.) A claim, a load and
// a record cost round trips and a commit per batch whatever its size: in
// the bench's drain of 4,000 messages, batches of 64 delivered 8,491 to
// 9,737 messages/s (0.10 commits per delivery) where batches of 32
// delivered 6,102 to 6,933 (0.16); 128 did no better than 64.
const idempotentBatch = 64

// recordTimeout bounds recording attempts, which happens even when the
// dispatcher is stopping: the requests were made.
const recordTimeout = 10 * time.Second

// NewOutbox returns the outbox dispatcher: one queue per destination, so
// that a slow or dead destination never holds back another, each draining
// table(destination id) and recording its attempts with work. cfg
// tunes every destination's queue (poll, lease, backoff); each destination
// sets its own workers (Concurrency) and MaxAttempts; its workers claim
// idempotentBatch messages at a time (one, when it is not idempotent), and
// share Concurrency request slots: while one worker is claiming or
// recording, the others' requests use its slots.
func NewOutbox(work fulfillment.OutboxWork, table func(destination string) Table, destinations []Destination, owners Owners, cfg Config, log *slog.Logger) []*Queue {
	var queues []*Queue
	for _, d := range destinations {
		c := cfg
		c.Workers, c.Batch, c.MaxAttempts = d.Concurrency, 1, d.MaxAttempts
		if d.Idempotent {
			c.Batch = idempotentBatch
		}
		s := newSender(work, d, log.With("destination", d.ID))
		c.Hold = s.claimsHeldUntil
		queues = append(queues, NewQueue("outbox "+d.ID, table(d.ID), s.Process, owners, c, log))
	}
	return queues
}

// sender delivers one destination's messages.
type sender struct {
	work fulfillment.OutboxWork
	dest Destination
	log  *slog.Logger
	// slots holds a token per request in flight to the destination, across
	// its workers: at most its Concurrency.
	slots chan struct{}
	// checkEvery is disabledCheck (shorter in tests).
	checkEvery time.Duration
	// mu guards holdEnds and the 410 state below. holdEnds is when the
	// wait the destination last asked for ends (zero before any): until
	// then no request is started to it (see hold). A time.Now reading, so
	// that it is compared on the monotonic clock: a step of the wall clock
	// neither ends nor prolongs it.
	mu       sync.Mutex
	holdEnds time.Time
	// A 410 Gone answer stops every batch of the destination in this
	// process, not only the one whose request got it: the request slots
	// are shared, so a slot the 410 freed would otherwise start a request
	// of another worker's batch, claimed before the disable committed (it
	// commits with the batch's record, once the batch's other requests
	// ended). See answeredGone and goneStops.
	//
	// gone: a request was answered 410, and no check since found the
	// destination enabled. goneUnrecorded counts the 410 answers whose
	// record, which disables the destination, has not ended yet. goneSeq
	// counts every 410 answer, so that a check that found the destination
	// enabled does not clear a 410 answered while it asked.
	gone           bool
	goneUnrecorded int
	goneSeq        uint64
}

// goneRecheck is how often the workers of a destination whose 410 answer
// is being recorded look again whether they may claim (claimsHeldUntil):
// a look costs no query.
const goneRecheck = 50 * time.Millisecond

// busyHold is how long a destination that answered 429 Too Many Requests
// without a Retry-After is left alone: the rest of its batch would be
// more requests of the kind it refused.
const busyHold = time.Second

// maxHold bounds how long one answer holds the whole destination: a longer
// Retry-After still holds its own message that long (the queue's retry), but
// the destination's other messages are tried again after maxHold — a
// request or a few (each answered so holds it again), so that one
// message's wait (a quota per key, say) cannot stop a destination for an
// hour, and a person's retry of a message waits a minute at most.
const maxHold = time.Minute

// hold leaves the destination alone after attempt a, when a asked for it:
// a 429 or 503 with a Retry-After (its wait, at most maxHold), or a 429
// without one (busyHold). The batch in flight starts no more requests
// (halted), the queue claims nothing (heldUntil), in this process, until
// the wait ends; the requests already started finish. A longer wait asked
// meanwhile extends it, a shorter one does not shorten it.
func (t *sender) hold(a fulfillment.DeliveryAttempt) {
	wait := min(a.RetryAfter, maxHold)
	if wait <= 0 && a.Status == http.StatusTooManyRequests {
		wait = busyHold
	}
	if wait <= 0 {
		return
	}
	now := time.Now()
	ends := now.Add(wait)
	t.mu.Lock()
	defer t.mu.Unlock()
	if !ends.After(t.holdEnds) {
		return
	}
	if !t.holdEnds.After(now) {
		t.log.Warn("destination asked to wait: no deliveries to it from this process until then",
			"status", a.Status, "wait", wait, "until", ends.UTC().Format(time.RFC3339))
	}
	t.holdEnds = ends
	if t.dest.Held != nil {
		t.dest.Held(ends) // under mu: the last told is the longest
	}
}

// heldUntil is when the wait the destination asked for ends; zero when it
// asked for none.
func (t *sender) heldUntil() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.holdEnds
}

// claimsHeldUntil is until when the destination's workers claim nothing
// (the queue's Hold): the end of the wait it asked for, or, while a 410
// answer is not recorded yet, goneRecheck from now. The claim's own check
// that the destination is enabled cannot stop them meanwhile: it is
// disabled only once the 410 is recorded, and a batch claimed before is
// handed back unsent (goneStops) — a full one, claimed again at once, over
// and over until then.
func (t *sender) claimsHeldUntil() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.goneUnrecorded > 0 {
		return latest(t.holdEnds, time.Now().Add(goneRecheck))
	}
	return t.holdEnds
}

// latest is the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// answeredGone notes that a request to the destination was answered 410
// Gone: from now on no batch of this process starts a request to it
// (goneStops). It is called before the request's slot is freed, so that
// whichever batch takes the slot next sees it.
func (t *sender) answeredGone() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.gone = true
	t.goneUnrecorded++
	t.goneSeq++
}

// goneRecorded notes that the record of n 410 answers ended, committed
// (the destination is disabled) or not (their messages are retried): from
// then on the database says whether the destination takes requests.
func (t *sender) goneRecorded(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.goneUnrecorded -= n
}

// goneStops reports whether a batch is to start no more requests because
// the destination answered 410 Gone to one of this process's requests:
// while that answer is being recorded, and afterwards as long as the
// destination is disabled — a batch claimed before the disable committed
// asks the database once, the first time it would start a request; one
// that finds the destination enabled again (by a person) clears it. A
// failed check stops the batch: the destination did answer 410, and its
// messages are handed back, not lost.
func (t *sender) goneStops(ctx context.Context) bool {
	t.mu.Lock()
	gone, unrecorded, seq := t.gone, t.goneUnrecorded, t.goneSeq
	t.mu.Unlock()
	switch {
	case !gone:
		return false
	case unrecorded > 0:
		return true
	}
	disabled, err := t.work.OutboxDisabled(ctx, t.dest.ID)
	if err != nil {
		t.log.Debug("checking whether the destination that answered 410 is still disabled", "error", err)
		return true
	}
	if disabled {
		return true
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.goneSeq == seq {
		t.gone = false
	}
	return t.gone
}

// newSender returns d's sender, with d.Concurrency request slots (at
// least one).
func newSender(work fulfillment.OutboxWork, d Destination, log *slog.Logger) *sender {
	return &sender{work: work, dest: d, log: log, slots: make(chan struct{}, max(d.Concurrency, 1)), checkEvery: disabledCheck}
}

// Process makes one attempt at each claimed message, as many at a time as
// the destination's free request slots allow, and records them together
// (one transaction). The messages whose attempt
// asks to be retried are returned as ItemErrors, for the queue to schedule
// each after its backoff — as are all of them when the record failed: they
// were sent, and are sent again after their backoff, not at once — and so
// are those not sent (ErrNotStarted), for the queue to hand back. A
// destination that does not honour idempotency keys has one message per
// claim, marked as sending (committed) before its request starts; sent
// again, it is found interrupted and not sent.
func (t *sender) Process(ctx context.Context, owner string, claims []Claim) error {
	ids := claimIDs(claims)
	msgs, err := t.work.OutboxLoad(ctx, ids, owner)
	if err != nil {
		return err
	}
	attempts, notSent, goneAnswers, err := t.attemptAll(ctx, owner, msgs)
	if goneAnswers > 0 {
		// Until their record ended, the destination's other batches stop
		// on the answers alone; then on the database's word.
		defer t.goneRecorded(goneAnswers)
	}
	if err != nil {
		return err
	}
	// The messages not sent were not attempted: handed back, not counted.
	retry := make(ItemErrors, len(notSent))
	for _, id := range notSent {
		retry[id] = ErrNotStarted
	}
	if len(attempts) == 0 {
		return retry.orNil()
	}
	// The requests were made: they are recorded even when the dispatcher
	// is stopping.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()
	lost, err := t.record(rctx, owner, attempts)
	if err != nil {
		for _, a := range attempts {
			retry[a.ID] = fmt.Errorf("recording its attempt (%s): %w", a.Outcome, err)
		}
		return retry
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
			retry[a.ID] = later{reason: a.Reason, after: a.RetryAfter}
		case a.Outcome == fulfillment.OutcomeGone:
			t.log.Warn("destination answered 410 Gone: disabled until an admin enables it", "message_id", a.ID)
		case a.Outcome == fulfillment.OutcomeUncertain || a.Outcome == fulfillment.OutcomeInterrupted:
			t.log.Warn("delivery uncertain: an uncertain_delivery item is open", "message_id", a.ID, "reason", a.Reason)
		}
	}
	return retry.orNil()
}

// disabledCheck is how long a batch's requests go on before the sender
// asks again whether a person disabled the destination meanwhile: a batch
// that takes longer (a slow destination, a small concurrency) stops
// starting requests within about this much of a disable. A batch sent in
// less time never asks.
const disabledCheck = time.Second

// later is a failed attempt whose destination asked (Retry-After) to be
// left alone for after: the queue tries the message again no sooner.
type later struct {
	reason string
	after  time.Duration
}

func (l later) Error() string { return l.reason }

// RetryAfter implements RetryAfterer.
func (l later) RetryAfter() time.Duration { return l.after }

// attemptAll makes one attempt at each of msgs, each in a request slot,
// and returns those made, in msgs' order, and how many were answered 410
// Gone (gone, counted even with an error: the caller says when their
// record ended). It starts no more requests once the worker is stopping
// (ctx ended), once a request to the destination was answered 410 Gone —
// one of this batch's or of another batch's, of any of the destination's
// workers in this process (goneStops) —, while the destination asked to
// wait (hold), or once the destination was found disabled: the messages
// not sent are returned apart (notSent), for the queue to hand back. An
// error is a sending mark that failed to commit: only a claim of one
// message marks.
func (t *sender) attemptAll(ctx context.Context, owner string, msgs []fulfillment.OutboxMessage) (attempts []fulfillment.MessageAttempt, notSent []int64, gone int, err error) {
	made := make([]fulfillment.MessageAttempt, len(msgs))
	errs := make([]error, len(msgs))
	var (
		wg       sync.WaitGroup
		answered atomic.Int32 // 410 answers
		checked  = time.Now()
	)
	for i, m := range msgs {
		if halt := t.acquire(ctx, &checked); halt != "" {
			for _, rest := range msgs[i:] {
				notSent = append(notSent, rest.ID)
			}
			t.log.Info("outbox batch cut short: the rest handed back, not sent", "reason", halt, "messages", len(notSent))
			break
		}
		wg.Go(func() {
			defer func() { <-t.slots }()
			a, ok, err := t.attempt(ctx, owner, m)
			if ok {
				made[i] = fulfillment.MessageAttempt{ID: m.ID, DeliveryAttempt: a}
				if a.Outcome == fulfillment.OutcomeGone {
					answered.Add(1)
					t.answeredGone() // before the deferred release of the slot
				}
				t.hold(a)
			}
			errs[i] = err
		})
	}
	wg.Wait()
	gone = int(answered.Load())
	if err := errors.Join(errs...); err != nil {
		return nil, nil, gone, err
	}
	for _, a := range made {
		if a.ID != 0 {
			attempts = append(attempts, a)
		}
	}
	return attempts, notSent, gone, nil
}

// acquire takes a request slot for the next message of a batch, unless
// the batch is to start no more (halted, asked once the slot is free: the
// request that held it, of this batch or another's, may have been
// answered 410 meanwhile): then it holds none and says why. A stopping
// worker waits for no slot.
func (t *sender) acquire(ctx context.Context, checked *time.Time) (halt string) {
	select {
	case t.slots <- struct{}{}:
	case <-ctx.Done():
		return "the worker is stopping"
	}
	if halt = t.halted(ctx, checked); halt != "" {
		<-t.slots
	}
	return halt
}

// halted says why the sender starts no more requests of its batch, or
// "": the worker is stopping, the destination answered 410 (goneStops) or
// asked to wait (hold), or a person disabled it, which it asks the database once disabledCheck has
// passed since checked (then moved on). A failed check halts nothing:
// the requests' own answers tell a destination that is down.
func (t *sender) halted(ctx context.Context, checked *time.Time) string {
	switch {
	case ctx.Err() != nil:
		return "the worker is stopping"
	case t.goneStops(ctx):
		return "the destination answered 410 Gone"
	case time.Now().Before(t.heldUntil()):
		return "the destination asked to wait (429 or 503)"
	case time.Since(*checked) < t.checkEvery:
		return ""
	}
	*checked = time.Now()
	disabled, err := t.work.OutboxDisabled(ctx, t.dest.ID)
	if err != nil {
		t.log.Debug("checking whether the destination was disabled", "error", err)
		return ""
	}
	if disabled {
		return "the destination was disabled"
	}
	return ""
}

// record records attempts, again while the database is unavailable for a
// moment (a failover, a broken connection, a deadlock broken by rolling
// this transaction back) and ctx leaves time: the requests were made, and
// an outcome thrown away is a message sent again, or, for a destination
// that does not honour idempotency keys, one found interrupted and left
// uncertain. A record that committed before its answer was lost finds its
// delivered and uncertain messages no longer held the next time (it says
// they were taken over), and records a retried one's attempt twice.
func (t *sender) record(ctx context.Context, owner string, attempts []fulfillment.MessageAttempt) ([]int64, error) {
	for try := 1; ; try++ {
		lost, err := t.work.OutboxRecord(ctx, owner, attempts)
		if err == nil || !errors.Is(err, fulfillment.ErrUnavailable) {
			return lost, err
		}
		// Debug: the store says once that the database is unreachable,
		// and an outage would otherwise log this for every claim.
		t.log.Debug("recording delivery attempts; trying again", "messages", len(attempts), "error", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(backoff(try, 50*time.Millisecond, time.Second, 0)):
		}
	}
}

// attempt makes one attempt at m; ok is false when the message is no longer
// owner's to send.
func (t *sender) attempt(ctx context.Context, owner string, m fulfillment.OutboxMessage) (a fulfillment.DeliveryAttempt, ok bool, err error) {
	started := time.Now()
	switch {
	case m.Interrupted && !t.dest.Idempotent:
		a = fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeInterrupted,
			Reason: "a request for it may have been on the wire when the worker sending it stopped; not sent again"}
	default:
		if !t.dest.Idempotent {
			if err := t.work.OutboxSending(ctx, m.ID, owner); errors.Is(err, ErrLeaseLost) {
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
