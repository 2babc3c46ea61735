package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// HousekeepingConfig tunes the housekeeper. Zero values take the defaults.
type HousekeepingConfig struct {
	// Interval is how often each task runs, on one replica or another, and
	// how often each replica looks for a due task (default 1m).
	Interval time.Duration
	// FulfillmentSLA is how long a paid order may wait for its fulfillment
	// before a paid_not_fulfilled item is opened (default 1h).
	FulfillmentSLA time.Duration
	// RawBodyRetention is how long the raw bodies of stored provider
	// events are kept (default 30 days).
	RawBodyRetention time.Duration
	// Batch is the number of rows one statement handles (default 1000).
	Batch int
	// MaxBatches bounds the statements of one run of one task (default
	// 100): a backlog is worked off over several intervals.
	MaxBatches int
}

// defaultHousekeepingBatches bounds the statements of one run of a task.
const defaultHousekeepingBatches = 100

// WithDefaults is c with its zero values filled in.
func (c HousekeepingConfig) WithDefaults() HousekeepingConfig {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	set(&c.Interval, fulfillment.DefaultHousekeepingInterval)
	set(&c.FulfillmentSLA, fulfillment.DefaultFulfillmentSLA)
	set(&c.RawBodyRetention, fulfillment.DefaultRawBodyRetention)
	if c.Batch <= 0 {
		c.Batch = fulfillment.DefaultHousekeepingBatch
	}
	if c.MaxBatches <= 0 {
		c.MaxBatches = defaultHousekeepingBatches
	}
	return c
}

// NewHousekeeper returns the housekeeper: a queue of the recurring
// housekeeping tasks (fulfillment.HousekeepingTask), each a row due again
// an interval after its last run. now is its clock for the tasks' rules
// (the SLA, the retention); nil is the database's.
//
// Why a leased queue rather than an advisory lock per task: the work is
// time-driven and runs on every replica, and what must hold is "about one
// run per interval, whatever the number of replicas". An advisory lock only
// keeps runs apart — each replica would still run on its own ticker, N
// runs per interval, unless the last run were recorded in a table anyway;
// and a lock held for a whole run needs one session (a transaction, for an
// xact lock) for its length, which the batched, short statements of a run
// avoid. The queue row holds the schedule, in the database's clock that
// every replica shares: one claim per due task, across replicas; a replica
// that dies mid-run loses its claim within a second (its liveness), the
// claim is retried with backoff when a run fails, and a replica's claims
// cost one indexed read of two rows per interval. Mutual exclusion is not
// what makes the tasks safe, though: every batch is idempotent (an item's
// unique key, a purge of rows that still have a body, whose batches lock
// its cursor in turn), so that two runs at once — a replica that lost its
// liveness mid-run — do no harm.
func NewHousekeeper(table Table, work fulfillment.HousekeepingWork, owners Owners, cfg HousekeepingConfig, now func() time.Time, log *slog.Logger) *Queue {
	return NewHousekeeperWith(table, work, owners, cfg, now, log, HousekeepingOptions{})
}

// HousekeepingOptions adds an observer to the housekeeper.
type HousekeepingOptions struct {
	// OnRun, when set, is told of each run of a task: how many things it
	// did (paid_not_fulfilled items opened, raw bodies purged: committed,
	// even by a run that then failed) and its error, nil when it completed.
	// A run that shutdown interrupted is not told.
	OnRun func(task fulfillment.HousekeepingTask, done int, err error)
}

// NewHousekeeperWith is NewHousekeeper with an observer.
func NewHousekeeperWith(table Table, work fulfillment.HousekeepingWork, owners Owners, cfg HousekeepingConfig, now func() time.Time, log *slog.Logger, opts HousekeepingOptions) *Queue {
	cfg = cfg.WithDefaults()
	h := &housekeeper{work: work, cfg: cfg, now: now, log: log.With("queue", "housekeeping"), opts: opts}
	return NewQueue("housekeeping", notBefore{Table: table, at: time.Now().Add(cfg.Interval)}, h.Process, owners, Config{
		Workers: 1,
		Batch:   1,
		Poll:    cfg.Interval,
		// A task is never given up: its attempts restart at every run, and
		// a failing one is retried after an interval, doubling to an hour.
		MaxAttempts: math.MaxInt32,
		BaseBackoff: cfg.Interval,
		MaxBackoff:  max(cfg.Interval, time.Hour),
	}, log)
}

// housekeeper runs the housekeeping tasks claimed.
type housekeeper struct {
	work fulfillment.HousekeepingWork
	cfg  HousekeepingConfig
	now  func() time.Time
	log  *slog.Logger
	opts HousekeepingOptions
}

// notBefore is a Table that claims nothing before at. The housekeeper's
// first claim is made one interval after it was made: housekeeping never
// competes with a replica's start-up, and the first queue a starting
// replica claims from is the one with work waiting (crash tests arm their
// failpoint at a claim, meaning the inbox's).
type notBefore struct {
	Table
	at time.Time
}

// TellOutage hands the outage to the table it wraps, when that one tells
// them (OutageTeller): the embedded Table alone would hide it.
func (t notBefore) TellOutage(err error) {
	if o, ok := t.Table.(OutageTeller); ok {
		o.TellOutage(err)
	}
}

func (t notBefore) Claim(ctx context.Context, p ClaimParams) ([]Claim, error) {
	if time.Now().Before(t.at) {
		return nil, nil
	}
	return t.Table.Claim(ctx, p)
}

// Process runs the claimed tasks, each in batches of statements of their
// own, and schedules each one's next run.
func (t *housekeeper) Process(ctx context.Context, owner string, claims []Claim) error {
	for _, c := range claims {
		task, err := t.work.HousekeepingTask(ctx, c.ID, owner)
		if errors.Is(err, ErrLeaseLost) {
			continue
		}
		if err != nil {
			return err
		}
		n, err := t.Run(ctx, task)
		if err == nil {
			if err = t.work.HousekeepingDone(ctx, c.ID, owner, n, t.cfg.Interval); errors.Is(err, ErrLeaseLost) {
				err = nil // the run's work is done; another replica has the task now
			}
		}
		if t.opts.OnRun != nil && ctx.Err() == nil {
			t.opts.OnRun(task, n, err)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Run runs one task at the housekeeper's clock: batches until one comes
// back short, at most MaxBatches. It returns how many things it did.
func (t *housekeeper) Run(ctx context.Context, task fulfillment.HousekeepingTask) (int, error) {
	var now time.Time
	if t.now != nil {
		now = t.now()
	}
	total := 0
	for range t.cfg.MaxBatches {
		var seen, done int
		var err error
		switch task {
		case fulfillment.TaskFulfillmentSLA:
			seen, done, err = t.work.OpenOverdueFulfillments(ctx, now, t.cfg.FulfillmentSLA, t.cfg.Batch)
		case fulfillment.TaskRawBodyPurge:
			seen, done, err = t.work.PurgeRawBodies(ctx, now, t.cfg.RawBodyRetention, t.cfg.Batch)
		default:
			return total, fmt.Errorf("unknown housekeeping task %q", task)
		}
		total += done
		if err != nil {
			return total, err
		}
		if seen < t.cfg.Batch || ctx.Err() != nil {
			break
		}
	}
	switch {
	case total == 0:
	case task == fulfillment.TaskFulfillmentSLA:
		t.log.Warn("paid orders past the fulfillment SLA: paid_not_fulfilled items opened", "count", total, "sla", t.cfg.FulfillmentSLA)
	default:
		t.log.Info("raw event bodies purged", "count", total, "retention", t.cfg.RawBodyRetention)
	}
	return total, nil
}
