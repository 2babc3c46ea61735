// Package worker runs the service's background work as leased queues. A
// Queue claims due items of its Table (storage.Queue) in batches under a
// live owner, has its Process do each batch's work, retries failures with
// capped exponential backoff and jitter, hands its claims back on shutdown,
// and frees the claims of owners that died. The queues' work: the inbox
// processor turning stored provider events into effects, the outbox
// dispatcher, the status poller, the subscription sweeper and the
// housekeeper.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	mrand "math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/internal/failpoint"
)

// Claim is one leased item of a queue.
type Claim struct {
	ID int64
	// Attempts counts the claims of the item, this one included.
	Attempts int
}

// claimIDs are the ids of claims, in their order.
func claimIDs(claims []Claim) []int64 {
	ids := make([]int64, len(claims))
	for i, c := range claims {
		ids[i] = c.ID
	}
	return ids
}

// ErrLeaseLost means an item is no longer leased to the owner that tried to
// complete or reschedule it: the owner stopped being live and another one
// claimed the item. The work must be dropped: the new owner does it.
var ErrLeaseLost = errors.New("lease lost")

// ClaimParams says what one claim takes.
type ClaimParams struct {
	// Owner is the live owner the items are leased to.
	Owner string
	// Limit is the most items one claim takes.
	Limit int
	// Lease is how long claims leave a claimed item alone before they
	// check whether its owner is still live.
	Lease time.Duration
	// MaxAttempts is the retry budget of one item: a due item that used it
	// without completing (its workers died) is failed instead of claimed.
	MaxAttempts int
	// InFlight are the items Owner's workers hold: an item leased to Owner
	// whose lease ran out and that is not among them (a claim it lost track
	// of) is claimed again.
	InFlight []int64
}

// Table is the storage of one leased queue (storage.Queue, over each
// queued table). Items are leased to an owner; an owner is live while its
// process proves it (see Owners), and a live owner keeps its items whatever
// its lease.
type Table interface {
	// Claim leases due items as p says, skipping those leased to live
	// owners; each claim counts as an attempt.
	Claim(ctx context.Context, p ClaimParams) ([]Claim, error)
	// Retry records failed attempts at claims owner holds, all in one
	// transaction, each claim at most once: each is due again at its
	// Next, or failed when it has used maxAttempts (an Uncounted one is due
	// again, its claim no longer counted, and never failed). It returns what became
	// of each, in the order of rs; a claim owner no longer holds is
	// RetryLost and left alone. An error means none was recorded.
	Retry(ctx context.Context, owner string, rs []Retry, maxAttempts int) ([]RetryOutcome, error)
	// Release hands back the items leased to owner, not counting their
	// claim as an attempt.
	Release(ctx context.Context, owner string) (int, error)
	// ReleaseClaims hands back the claims ids owner holds, as Release does
	// (due at once, their claim not counted); the others are left alone.
	ReleaseClaims(ctx context.Context, owner string, ids []int64) error
	// Reclaim makes the items leased to owners that are no longer live due
	// at once, and returns how many.
	Reclaim(ctx context.Context) (int, error)
	// Listen calls wake whenever items may have become due, until ctx ends.
	Listen(ctx context.Context, wake func()) error
}

// OutageTeller is a Table that tells an outage of its database (the
// service's storage says one once, however many parts of the service meet
// it): a queue hands it the cause of an attempt that failed for one
// (fulfillment.ErrDatabaseDown) and logs that attempt at DEBUG only.
type OutageTeller interface {
	TellOutage(err error)
}

// Retry is a failed attempt at a claim, to record (Table.Retry).
type Retry struct {
	Claim Claim
	// Cause is why the attempt failed: the item's last error.
	Cause string
	// Next is when the item is due again, unless it is failed.
	Next time.Time
	// Uncounted says the attempt failed for an outage of the database
	// (fulfillment.ErrDatabaseDown), not for anything of the item's: its
	// claim is not counted, and the item is never failed for it.
	Uncounted bool
}

// RetryOutcome is what Table.Retry did with a failed attempt.
type RetryOutcome uint8

const (
	// RetryScheduled means the item is due again at its Next.
	RetryScheduled RetryOutcome = iota
	// RetryFailed means the item used its attempts and is failed.
	RetryFailed
	// RetryLost means the owner no longer held the item (ErrLeaseLost):
	// it was left to the owner that claimed it since.
	RetryLost
)

// Process completes claims held by owner: the work of one queue. An error
// means none of them completed, and each is then tried alone (see
// Queue.process) — unless it is an ItemErrors, which names the claims that
// did not complete, each with its cause, the others having completed.
// Claims owner no longer holds are left alone.
type Process func(ctx context.Context, owner string, claims []Claim) error

// ItemErrors is what a Process returns when some claims of its batch did
// not complete while the others did: each is retried after its backoff on
// its own, with its cause, and the batch is not tried again.
type ItemErrors map[int64]error

// orNil is e, or nil when it names no item.
func (e ItemErrors) orNil() error {
	if len(e) == 0 {
		return nil
	}
	return e
}

func (e ItemErrors) Error() string {
	if len(e) == 0 {
		return "no items failed"
	}
	first := slices.Min(slices.Collect(maps.Keys(e)))
	return fmt.Sprintf("%d items not completed; item %d because: %v", len(e), first, e[first])
}

// Owners tells a queue which owner to claim under (storage.Liveness).
// When it also has a method Down() error, that says why no owner is live.
type Owners interface {
	// Owner returns the live owner — "" while there is none — and a channel
	// closed when that changes. Items claimed under an owner are not
	// processed once it is lost: other replicas reclaim them.
	Owner() (string, <-chan struct{})
}

// Config tunes a queue. Zero values take the defaults.
type Config struct {
	// Workers claim and process concurrently (default 4).
	Workers int
	// Batch is the number of items one claim leases (default 16).
	Batch int
	// Lease is how long claims leave a claimed item alone before they check
	// whether its owner is still live (default 30s). A live owner keeps its
	// items beyond it; a dead owner's items are reclaimed long before it.
	Lease time.Duration
	// Poll is the fallback claim interval when no notification arrives
	// (default 1s).
	Poll time.Duration
	// MaxAttempts is the retry budget of one item (default 10); past it the
	// item is failed.
	MaxAttempts int
	// BaseBackoff and MaxBackoff bound the exponential retry delay
	// (defaults 1s and 5m); a random jitter of up to half the delay is added.
	BaseBackoff, MaxBackoff time.Duration
	// Reclaim is how often the items of owners that are no longer live are
	// freed (default 1s).
	Reclaim time.Duration
	// Hold, when set, says until when the workers claim nothing: the
	// outbox's destination asked to be left alone for a while (its
	// Retry-After). A zero or past time holds nothing. Notifications that
	// come meanwhile are kept for when it ends; items handed to the queue
	// are processed all the same.
	Hold func() time.Time
}

func (c *Config) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.Batch <= 0 {
		c.Batch = 16
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	set(&c.Lease, 30*time.Second)
	set(&c.Poll, time.Second)
	set(&c.BaseBackoff, time.Second)
	set(&c.MaxBackoff, 5*time.Minute)
	set(&c.Reclaim, time.Second)
}

// Queue processes the items of one leased table. Any number of queues
// (in as many processes) may drain one table.
type Queue struct {
	name   string
	table  Table
	work   Process
	owners Owners
	cfg    Config
	log    *slog.Logger
	wake   chan struct{}
	jitter func() float64 // in [0, 1)

	// claimDue says that a claim may find items: a notification came
	// since the last claim began.
	claimDue atomic.Bool

	mu       sync.Mutex
	inFlight map[int64]struct{} // the items this queue's workers hold
	claimErr error              // the last claim's failure, nil after a claim that worked
	running  bool               // Run's workers take items (see Reserve)
	reserved int                // items reserved for hand-offs, not delivered yet
	handed   []handedClaims     // items handed to the queue, not taken yet
	// outageSince is when the queue's work began to fail for an outage of
	// the database (fulfillment.ErrDatabaseDown), zero while its work
	// succeeds: an attempt that failed for it waits about as long as the
	// outage has lasted (outageWait). outageLast is that outage's latest
	// such failure; workedAt, when work of the queue last succeeded.
	outageSince, outageLast, workedAt time.Time
}

// Name is the queue's name, as in logs and metrics.
func (q *Queue) Name() string { return q.name }

// Down says why the queue cannot claim work now: no live owner (its
// liveness session is down), or its last claim failed (the database refused
// its connections, say). It is nil while the queue can claim, and before a
// first claim with a live owner has been tried.
func (q *Queue) Down() error {
	owner, _ := q.owners.Owner()
	if owner == "" {
		var why error
		if d, ok := q.owners.(interface{ Down() error }); ok {
			why = d.Down()
		}
		if why == nil {
			return errors.New("no live owner: the liveness session is not held")
		}
		return fmt.Errorf("no live owner: %w", why)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.claimErr != nil {
		return fmt.Errorf("claiming: %w", q.claimErr)
	}
	return nil
}

// NewQueue returns the queue called name (in logs) of table, whose claims
// process completes, claiming under the owners' live owner.
func NewQueue(name string, table Table, process Process, owners Owners, cfg Config, log *slog.Logger) *Queue {
	cfg.defaults()
	return &Queue{
		name:     name,
		table:    table,
		work:     process,
		owners:   owners,
		cfg:      cfg,
		log:      log.With("queue", name),
		wake:     make(chan struct{}, 1),
		jitter:   mrand.Float64,
		inFlight: map[int64]struct{}{},
	}
}

// Run processes items until ctx ends, then hands back what its workers
// claimed but did not process (processing in flight is rolled back). The
// owners must stay live until it returns.
func (q *Queue) Run(ctx context.Context) error {
	q.setRunning(true)
	var wg sync.WaitGroup
	wg.Go(func() { _ = q.table.Listen(ctx, q.notify) })
	wg.Go(func() { q.reclaim(ctx) })
	for range q.cfg.Workers {
		wg.Go(func() { q.loop(ctx) })
	}
	q.log.Info(q.name+" processor started", "workers", q.cfg.Workers)
	wg.Wait()
	q.setRunning(false)

	owner, _ := q.owners.Owner()
	if owner == "" {
		return nil // not live: others reclaim what it held
	}
	releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if n, err := q.table.Release(releaseCtx, owner); err != nil {
		q.log.Warn("releasing claims", "error", err)
	} else if n > 0 {
		q.log.Info("released unprocessed claims", "count", n)
	}
	return nil
}

// setRunning says whether Run's workers take items; when they stop, the
// items handed to them and not taken are forgotten (Run releases them).
func (q *Queue) setRunning(running bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running = running
	if !running {
		for _, h := range q.handed {
			for _, c := range h.claims {
				delete(q.inFlight, c.ID)
			}
		}
		q.handed = nil
	}
}

// notify says that items may be due in the table, and wakes one idle
// worker to claim them; notifications arriving while one is pending
// coalesce. A worker that claims a full batch wakes the next (see
// claimAndProcess), so that a backlog is worked on by every worker, while a
// trickle of single events costs one claim each, not one per worker.
func (q *Queue) notify() {
	q.claimDue.Store(true)
	q.wakeOne()
}

// wakeOne wakes one idle worker: to claim when notify says so, and to take
// the items handed to the queue.
func (q *Queue) wakeOne() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// loop works until ctx ends: on the items handed to the queue first, and
// else on a claim — at first, again at once after a full batch, else when
// notified, when the owner changes, or after Poll; while a Hold is in
// force, once it ends.
func (q *Queue) loop(ctx context.Context) {
	poll := time.NewTimer(q.cfg.Poll)
	defer poll.Stop()
	claim := true
	for ctx.Err() == nil {
		owner, changed := q.owners.Owner()
		wait := q.cfg.Poll
		if owner != "" {
			if handed := q.takeHanded(owner); len(handed) > 0 {
				q.processHeld(ctx, owner, changed, handed)
				continue
			}
			if hold := q.held(); hold > 0 {
				wait, claim = hold, true // and claims once it ends
			} else if claim || q.claimDue.Swap(false) {
				if claim = q.claimAndProcess(ctx, owner, changed) == q.cfg.Batch; claim {
					continue // more may be waiting
				}
			}
		}
		poll.Reset(wait)
		select {
		case <-ctx.Done():
		case <-q.wake:
		case <-poll.C:
			claim = true
		case <-changed:
			claim = true
		}
	}
}

// held is how long the queue's Hold has yet to run; 0 or less when none
// is in force.
func (q *Queue) held() time.Duration {
	if q.cfg.Hold == nil {
		return 0
	}
	until := q.cfg.Hold()
	if until.IsZero() {
		return 0
	}
	return time.Until(until)
}

// claimAndProcess claims one batch under owner and processes it, unless
// owner was lost meanwhile. It returns the number of items claimed.
func (q *Queue) claimAndProcess(ctx context.Context, owner string, changed <-chan struct{}) int {
	// An item another worker claims meanwhile is missing from inFlight, but
	// its lease has just begun: only items whose lease ran out are taken
	// back.
	claims, err := q.table.Claim(ctx, ClaimParams{Owner: owner, Limit: q.cfg.Batch, Lease: q.cfg.Lease,
		MaxAttempts: q.cfg.MaxAttempts, InFlight: q.holding()})
	if ctx.Err() == nil {
		q.mu.Lock()
		q.claimErr = err
		q.mu.Unlock()
	}
	q.hold(claims)
	if err != nil {
		q.done(claims)
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, fulfillment.ErrUnavailable):
			q.log.Debug("claiming", "error", err) // the store says the database is unreachable, once
		default:
			q.log.Warn("claiming", "error", err)
		}
		return 0
	}
	if len(claims) == 0 {
		return 0
	}
	if len(claims) == q.cfg.Batch {
		q.notify() // more may be due: another worker takes the next batch
	}
	q.processHeld(ctx, owner, changed, claims)
	return len(claims)
}

// processHeld processes claims the queue holds under owner (claimed or
// handed), unless owner was lost meanwhile, and then forgets them.
func (q *Queue) processHeld(ctx context.Context, owner string, changed <-chan struct{}, claims []Claim) {
	defer q.done(claims)
	failpoint.Inject("after-claim") // (handed items are claims too)
	select {
	case <-changed:
		// Liveness was lost: the claims are other replicas' to take.
		q.log.Warn("dropping claims of an owner that is no longer live; they are reclaimed", "count", len(claims))
		return
	default:
	}
	q.process(ctx, owner, claims)
}

// holding lists the items this queue's workers hold.
func (q *Queue) holding() []int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	ids := make([]int64, 0, len(q.inFlight))
	for id := range q.inFlight {
		ids = append(ids, id)
	}
	return ids
}

// hold records claims as held by a worker.
func (q *Queue) hold(claims []Claim) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, c := range claims {
		q.inFlight[c.ID] = struct{}{}
	}
}

// done forgets claims: their workers no longer hold them.
func (q *Queue) done(claims []Claim) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, c := range claims {
		delete(q.inFlight, c.ID)
	}
}

// RetryAfterer is a cause of a failed attempt that says how long the item
// must wait at least before it is tried again (a destination's
// Retry-After): its retry waits that long when it is longer than its
// backoff.
type RetryAfterer interface {
	error
	RetryAfter() time.Duration
}

// ErrNotStarted is an item's cause in an ItemErrors that says the item's
// work did not start (its worker was stopping, or its batch was
// cut short): it is handed back (Table.ReleaseClaims), its claim not
// counted as an attempt.
var ErrNotStarted = errors.New("not started")

// ErrLater says that an item is not done yet, as expected (a payment
// without an outcome), when an error of a Process wraps it: the item is
// tried again after its backoff like a failure, and counts as an attempt,
// but is no failure to warn about.
var ErrLater = errors.New("not done yet")

// retryTimeout bounds scheduling the retries of items whose work was done
// (an ItemErrors), which happens even when the queue is stopping.
const retryTimeout = 10 * time.Second

// process completes a batch of claims. When the batch fails, each item is
// tried alone, so that one failing item is retried (and eventually failed)
// on its own without holding back the others; when some items of a batch
// that did its work failed (ItemErrors), those are retried after their
// backoff.
func (q *Queue) process(ctx context.Context, owner string, claims []Claim) {
	began := time.Now()
	err := q.work(ctx, owner, claims)
	if err == nil {
		q.worked()
		return
	}
	var items ItemErrors
	if errors.As(err, &items) {
		// The work was done (requests were made): its failures are
		// recorded even when the queue is stopping, all in one
		// transaction (a destination that is down fails a whole batch).
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retryTimeout)
		defer cancel()
		var (
			failed     []Claim
			causes     []error
			notStarted []int64
			succeeded  bool
		)
		for _, c := range claims {
			switch cause, ok := items[c.ID]; {
			case !ok:
				succeeded = true
			case errors.Is(cause, ErrNotStarted):
				notStarted = append(notStarted, c.ID)
			default:
				failed, causes = append(failed, c), append(causes, cause)
			}
		}
		if len(notStarted) > 0 {
			// Nothing was tried: handed back uncounted, for this worker or
			// another (when this one stops) to take at once. A hand-back
			// that fails leaves them leased, to be claimed again.
			if err := q.table.ReleaseClaims(rctx, owner, notStarted); err != nil {
				q.log.Debug("handing back claims not started", "ids", notStarted, "error", err)
			}
		}
		q.retry(rctx, owner, began, failed, causes)
		if succeeded {
			// (After the retries: the batch's own successes do not make
			// its lost connections counted.)
			q.worked()
		}
		return
	}
	if ctx.Err() != nil {
		return // shutting down: the claims are released or reclaimed
	}
	if len(claims) > 1 {
		for _, c := range claims {
			q.process(ctx, owner, []Claim{c})
		}
		return
	}
	q.retry(ctx, owner, began, claims, []error{err})
}

// retry schedules each of claims, whose attempt (begun at began) failed
// with the cause of the same index, after its backoff, or fails it past its
// attempts — in one call of the table — and says so in the log, a line per
// claim. An attempt that failed for an outage of the database is not
// counted, unless it lost its connection while work of the queue
// succeeded: the database then took other work, and the item itself may
// be what ends its session (a query that crashes the server, or that a
// watchdog ends), over and over. (A database out of disk space may take
// some work and refuse the rest: those refusals stay uncounted.)
func (q *Queue) retry(ctx context.Context, owner string, began time.Time, claims []Claim, causes []error) {
	if len(claims) == 0 {
		return
	}
	rs := make([]Retry, len(claims))
	for i, c := range claims {
		// (Lost while others worked: the item may be what ends its
		// session, and its attempts bound it.)
		lostAlone := errors.Is(causes[i], fulfillment.ErrConnectionLost) && q.workedSince(began)
		uncounted := errors.Is(causes[i], fulfillment.ErrDatabaseDown) && !lostAlone
		wait := q.backoff(c.Attempts)
		if uncounted {
			wait = q.outageWait()
		}
		if ra, ok := errors.AsType[RetryAfterer](causes[i]); ok {
			wait = max(wait, ra.RetryAfter())
		}
		rs[i] = Retry{Claim: c, Cause: causes[i].Error(), Next: time.Now().Add(wait), Uncounted: uncounted}
	}
	outcomes, rerr := q.table.Retry(ctx, owner, rs, q.cfg.MaxAttempts)
	switch {
	case rerr != nil && errors.Is(rerr, fulfillment.ErrUnavailable):
		q.log.Debug("recording failed attempts", "ids", claimIDs(claims), "error", rerr) // the store says the database is unreachable, once
		return
	case rerr != nil && len(claims) > 1:
		// Recorded alone, one attempt that the table refuses cannot keep
		// the others leased until their lease runs out.
		for i, c := range claims {
			q.retry(ctx, owner, began, []Claim{c}, causes[i:i+1])
		}
		return
	case rerr != nil:
		// They stay leased to this live owner: once their lease runs out,
		// this owner claims them again.
		q.log.Warn("recording failed attempts", "ids", claimIDs(claims), "error", rerr)
		return
	case len(outcomes) != len(rs):
		q.log.Error("recording failed attempts", "ids", claimIDs(claims),
			"error", fmt.Sprintf("the table answered %d outcomes for %d attempts", len(outcomes), len(rs)))
		return
	}
	if t, ok := q.table.(OutageTeller); ok {
		// The record was written: the database answers, yet the attempts
		// met an outage (a disk full, say), which nothing else may tell.
		// (A lost connection is over once the record is written: the
		// claims, the listeners and the liveness tell an outage that
		// lasts.)
		for i, r := range rs {
			if r.Uncounted && !errors.Is(causes[i], fulfillment.ErrConnectionLost) {
				t.TellOutage(causes[i])
				break
			}
		}
	}
	for i, r := range rs {
		c, err, next := r.Claim, causes[i], r.Next
		later := errors.Is(err, ErrLater)
		failed := outcomes[i] == RetryFailed
		switch {
		case outcomes[i] == RetryLost:
			q.log.Info("claim taken over by another worker", "id", c.ID)
		case later && failed:
			q.log.Info("given up after its attempts", "id", c.ID, "attempts", c.Attempts, "last", err)
		case later:
			q.log.Debug("to be tried again", "id", c.ID, "attempt", c.Attempts, "retry_at", next, "why", err)
		case failed:
			q.log.Error("failed past its retry budget", "id", c.ID, "attempts", c.Attempts, "error", err)
		case errors.Is(err, fulfillment.ErrUnavailable) && !countedLoss(r, err):
			q.log.Debug("processing failed; will retry", "id", c.ID, "attempt", c.Attempts, "retry_at", next, "error", err)
		default:
			// (A lost connection counted, while other work succeeded, is
			// the item's to tell: it may be what ends its session.)
			q.log.Warn("processing failed; will retry", "id", c.ID, "attempt", c.Attempts, "retry_at", next, "error", err)
		}
	}
}

// countedLoss reports whether r, failed for err, lost its connection while
// other work of the queue succeeded: counted, unlike an outage's.
func countedLoss(r Retry, err error) bool {
	return !r.Uncounted && errors.Is(err, fulfillment.ErrConnectionLost)
}

// reclaim frees the items of owners that are no longer live, at once and
// then every Reclaim, and wakes the workers when it freed any.
func (q *Queue) reclaim(ctx context.Context) {
	tick := time.NewTicker(q.cfg.Reclaim)
	defer tick.Stop()
	for {
		n, err := q.table.Reclaim(ctx)
		switch {
		case err != nil && ctx.Err() == nil && errors.Is(err, fulfillment.ErrUnavailable):
			q.log.Debug("reclaiming the claims of owners that are no longer live", "error", err)
		case err != nil && ctx.Err() == nil:
			q.log.Warn("reclaiming the claims of owners that are no longer live", "error", err)
		case n > 0:
			q.log.Info("reclaimed the claims of owners that are no longer live", "count", n)
			q.notify()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// worked notes that work of the queue succeeded.
func (q *Queue) worked() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.workedAt = time.Now()
}

// workedSince reports whether work of the queue succeeded after t.
func (q *Queue) workedSince(t time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.workedAt.After(t)
}

// outageWait is the delay before an attempt that failed for an outage of
// the database is tried again: about as long as the outage has lasted
// (from the queue's first such failure after a pause of them longer than
// twice MaxBackoff), between BaseBackoff and MaxBackoff, with jitter. Its
// claim is not counted, so its own backoff would stay the first one: every
// item of a backlog tried again every BaseBackoff for as long as the
// outage lasts. Work that succeeds meanwhile does not end it: a disk full
// takes some writes and refuses others, to the same items.
func (q *Queue) outageWait() time.Duration {
	q.mu.Lock()
	now := time.Now()
	if q.outageSince.IsZero() || now.Sub(q.outageLast) > 2*q.cfg.MaxBackoff {
		q.outageSince = now
	}
	q.outageLast = now
	d := now.Sub(q.outageSince)
	q.mu.Unlock()
	d = min(max(d, q.cfg.BaseBackoff), q.cfg.MaxBackoff)
	return d + time.Duration(q.jitter()*float64(d)/2)
}

// backoff is the delay before retry number attempt, with jitter so that
// items failing together do not retry together.
func (q *Queue) backoff(attempt int) time.Duration {
	return backoff(attempt, q.cfg.BaseBackoff, q.cfg.MaxBackoff, q.jitter())
}

// backoff doubles base for every attempt after the first, up to ceiling, and
// adds jitter (in [0, 1)) times half of that.
func backoff(attempt int, base, ceiling time.Duration, jitter float64) time.Duration {
	d := float64(base) * math.Pow(2, float64(max(attempt-1, 0)))
	d = min(d, float64(ceiling))
	return time.Duration(d + jitter*d/2)
}
