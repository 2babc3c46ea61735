package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
)

// pollTimeout bounds one question to a provider.
const pollTimeout = 15 * time.Second

// NewPollerWith returns the status poller: a queue of the payments the service
// started, each asked about (PaymentState) at its provider until its
// outcome is known. Every answer goes into the inbox as an event of its
// own, through the same rules as the provider's notifications, so a late
// notification and a poll can never both have an effect. A payment whose
// outcome a notification brought first is not asked about. providers are
// the endpoints' providers by endpoint id. cfg's backoff is the polling
// cadence and its MaxAttempts how many polls a payment gets.
// opts observes the polls.
func NewPollerWith(table Table, work fulfillment.PollWork, providers map[string]fulfillment.StatePoller, owners Owners, cfg Config, log *slog.Logger, opts PollOptions) *Queue {
	cfg.Batch = 1
	p := &poller{work: work, providers: providers, log: log, opts: opts}
	return NewQueue("status poll", table, p.Process, owners, cfg, log)
}

// PollOutcome is what came of one poll.
type PollOutcome string

// What came of a poll.
const (
	// PollSettled: the provider's answer, recorded, settles the payment's
	// outcome; it is not polled again.
	PollSettled PollOutcome = "settled"
	// PollPending: the provider's answer, recorded, has no outcome yet;
	// the payment is polled again after its backoff.
	PollPending PollOutcome = "pending"
	// PollKnown: a notification had brought the outcome; nothing was asked.
	PollKnown PollOutcome = "known"
	// PollFailed: the endpoint is not configured with a provider that
	// reports payment states, the provider did not answer, or its answer
	// could not be read or recorded; the poll is tried again.
	PollFailed PollOutcome = "error"
)

// PollOptions adds an observer to the status poller.
type PollOptions struct {
	// OnPoll, when set, is told of each poll made: its payment's endpoint
	// id and what came of it. A poll that could not be read from the
	// database, that another worker took over, or that shutdown
	// interrupted is not told.
	OnPoll func(endpoint string, outcome PollOutcome)
}

// poller makes the polls claimed.
type poller struct {
	work      fulfillment.PollWork
	providers map[string]fulfillment.StatePoller
	log       *slog.Logger
	opts      PollOptions
}

// Process polls each claimed payment. One that has no outcome yet is
// returned as an error, for the queue to poll it again later.
func (t *poller) Process(ctx context.Context, owner string, claims []Claim) error {
	for _, c := range claims {
		if err := t.poll(ctx, owner, c); err != nil {
			return err
		}
	}
	return nil
}

func (t *poller) poll(ctx context.Context, owner string, c Claim) error {
	start, known, err := t.work.PollLoad(ctx, c.ID, owner)
	switch {
	case errors.Is(err, ErrLeaseLost):
		return nil
	case err != nil:
		return err
	}
	outcome, err := t.ask(ctx, owner, c, start, known)
	if outcome != "" && t.opts.OnPoll != nil && ctx.Err() == nil {
		t.opts.OnPoll(start.EndpointID, outcome)
	}
	return err
}

// ask polls the payment of start at its provider, unless its outcome is
// known already, and records the answer. outcome is empty when another
// worker took the poll over.
func (t *poller) ask(ctx context.Context, owner string, c Claim, start fulfillment.PaymentStart, known bool) (outcome PollOutcome, err error) {
	if known { // a notification brought the outcome: nothing to ask
		return t.record(ctx, owner, c, fulfillment.PollAnswer{}, true, PollKnown)
	}
	provider := t.providers[start.EndpointID]
	if provider == nil {
		// The endpoint left the configuration: keep the poll, as another
		// replica may still have it.
		return PollFailed, fmt.Errorf("endpoint %q is not configured with a provider that reports payment states", start.EndpointID)
	}
	qctx, cancel := context.WithTimeout(ctx, pollTimeout)
	defer cancel()
	answer, err := provider.PaymentState(qctx, start.PaymentID)
	if err != nil {
		return PollFailed, fmt.Errorf("asking %s for payment %s: %w", start.EndpointID, start.PaymentID, askFailure{err})
	}
	ev, raw, final, err := provider.PolledEvent(answer)
	if err != nil {
		return PollFailed, fmt.Errorf("payment %s: %w", start.PaymentID, err)
	}
	a := fulfillment.PollAnswer{Event: ev, Raw: raw}
	if answer.Held {
		a.Held = answer.Status
	}
	if !final {
		outcome, err = t.record(ctx, owner, c, a, false, PollPending)
		if err == nil { // polled again later (as when another worker has it: the queue's retry says so)
			err = fmt.Errorf("%w: payment %s is %s", ErrLater, start.PaymentID, answer.Status)
		}
		return outcome, err
	}
	return t.record(ctx, owner, c, a, true, PollSettled)
}

// record stores a poll's answer; it returns outcome once it is recorded,
// PollFailed when it could not be, and no outcome when another worker took
// the poll over.
func (t *poller) record(ctx context.Context, owner string, c Claim, a fulfillment.PollAnswer, done bool, outcome PollOutcome) (PollOutcome, error) {
	err := t.work.PollRecord(ctx, c.ID, owner, a, done)
	switch {
	case errors.Is(err, ErrLeaseLost):
		return "", nil
	case err != nil:
		return PollFailed, err
	}
	return outcome, nil
}

// askFailure is a question to a provider that failed. Its text is what
// the poll records and its poll_failing item quotes: a transport error
// names the provider's address (its internal URL, host and port), so it
// is told by its kind only; anything else is the adapter's account of the
// answer, which holds no address. It wraps the error.
type askFailure struct{ err error }

func (f askFailure) Unwrap() error { return f.err }

func (f askFailure) Error() string { return ingest.DescribeFailure(f.err) }
