package worker

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// NewSweeper returns the subscription sweeper: a queue of one sweep per
// subscription, each due when the subscription's access ends (the end of
// its paid period, plus the plan's grace unless it was cancelled). A sweep
// ends the access — once, whichever of several replicas' sweepers gets
// there, as the subscription's row lock and its recorded end decide — or,
// when an event extended the access meanwhile, waits for the new end.
// now is the sweeper's clock; nil is the database's.
func NewSweeper(table Table, work fulfillment.SweepWork, owners Owners, cfg Config, now func() time.Time, log *slog.Logger) *Queue {
	return NewSweeperWith(table, work, owners, cfg, now, log, SweepOptions{})
}

// NewSweeperWith is NewSweeper with an observer.
func NewSweeperWith(table Table, work fulfillment.SweepWork, owners Owners, cfg Config, now func() time.Time, log *slog.Logger, opts SweepOptions) *Queue {
	return NewQueue("subscription sweep", table, (&sweeper{work: work, now: now, opts: opts}).Process, owners, cfg, log)
}

// SweepOutcome is what came of one sweep.
type SweepOutcome string

// What came of a sweep.
const (
	// SweepEnded: the sweep ended the subscription's access.
	SweepEnded SweepOutcome = "ended"
	// SweepUnchanged: the access goes on (an event extended it: the sweep
	// waits for its new end), or had ended already.
	SweepUnchanged SweepOutcome = "unchanged"
	// SweepFailed: the sweep failed (the database's error); it is tried
	// again.
	SweepFailed SweepOutcome = "error"
)

// SweepOptions adds an observer to the sweeper.
type SweepOptions struct {
	// OnSweep, when set, is told of each sweep made and what came of it:
	// each failed attempt, not a sweep another worker took over or one
	// that shutdown interrupted.
	OnSweep func(SweepOutcome)
}

// sweeper makes the sweeps claimed.
type sweeper struct {
	work fulfillment.SweepWork
	now  func() time.Time
	opts SweepOptions
}

// Process sweeps each claim in a transaction of its own: one
// subscription's sweep never waits for another's.
func (t *sweeper) Process(ctx context.Context, owner string, claims []Claim) error {
	var now time.Time
	if t.now != nil {
		now = t.now()
	}
	for _, c := range claims {
		ended, err := t.work.SweepProcess(ctx, c.ID, owner, now)
		if errors.Is(err, ErrLeaseLost) {
			continue
		}
		t.observe(ctx, ended, err)
		if err != nil {
			return err
		}
	}
	return nil
}

func (t *sweeper) observe(ctx context.Context, ended bool, err error) {
	if t.opts.OnSweep == nil || ctx.Err() != nil {
		return
	}
	switch {
	case err != nil:
		t.opts.OnSweep(SweepFailed)
	case ended:
		t.opts.OnSweep(SweepEnded)
	default:
		t.opts.OnSweep(SweepUnchanged)
	}
}
