package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// The tests run each queue in a synctest bubble: time is virtual, so that
// backoffs of minutes and polls of an hour pass at once and exactly, and
// synctest.Wait returns once every goroutine of the queue is idle.

// fakeTable is a Table whose methods call its function fields; a nil field
// does nothing (claims nothing, listens until ctx ends).
type fakeTable struct {
	claim   func(owner string, limit int, lease time.Duration, maxAttempts int) ([]Claim, error)
	process func(ctx context.Context, owner string, claims []Claim) error
	retry   func(owner string, c Claim, cause string, next time.Time, maxAttempts int) (bool, error)
	retries func(ids []int64) // each call of Retry, before retry sees its attempts
	release func(owner string) (int, error)
	// releaseClaims, when set, is told of each ReleaseClaims.
	releaseClaims func(owner string, ids []int64) error
	reclaim       func() (int, error)
	listen        func(ctx context.Context, wake func()) error
	// inFlight, when set, sees what each claim is told the queue holds.
	inFlight func([]int64)
	// retried, when set, sees each attempt Retry records, first.
	retried func(Retry)
	// told, when set, sees each outage the queue tells (TellOutage).
	told func(error)
}

func (f *fakeTable) TellOutage(err error) {
	if f.told != nil {
		f.told(err)
	}
}

func (f *fakeTable) Claim(_ context.Context, p ClaimParams) ([]Claim, error) {
	owner, limit, lease, maxAttempts, inFlight := p.Owner, p.Limit, p.Lease, p.MaxAttempts, p.InFlight
	if f.inFlight != nil {
		f.inFlight(inFlight)
	}
	if f.claim == nil {
		return nil, nil
	}
	return f.claim(owner, limit, lease, maxAttempts)
}

func (f *fakeTable) Process(ctx context.Context, owner string, claims []Claim) error {
	if f.process == nil {
		return nil
	}
	return f.process(ctx, owner, claims)
}

// Retry hands each attempt to retry, in order; ErrLeaseLost from it makes
// the attempt's outcome RetryLost, any other error the call's. retries,
// when set, sees the ids of each call first.
func (f *fakeTable) Retry(_ context.Context, owner string, rs []Retry, maxAttempts int) ([]RetryOutcome, error) {
	if f.retries != nil {
		ids := make([]int64, len(rs))
		for i, r := range rs {
			ids[i] = r.Claim.ID
		}
		f.retries(ids)
	}
	outcomes := make([]RetryOutcome, len(rs))
	for i, r := range rs {
		if f.retried != nil {
			f.retried(r)
		}
		if f.retry == nil {
			continue
		}
		failed, err := f.retry(owner, r.Claim, r.Cause, r.Next, maxAttempts)
		switch {
		case errors.Is(err, ErrLeaseLost):
			outcomes[i] = RetryLost
		case err != nil:
			return nil, err
		case failed:
			outcomes[i] = RetryFailed
		}
	}
	return outcomes, nil
}

func (f *fakeTable) Release(_ context.Context, owner string) (int, error) {
	if f.release == nil {
		return 0, nil
	}
	return f.release(owner)
}

func (f *fakeTable) ReleaseClaims(_ context.Context, owner string, ids []int64) error {
	if f.releaseClaims == nil {
		return nil
	}
	return f.releaseClaims(owner, ids)
}

func (f *fakeTable) Reclaim(context.Context) (int, error) {
	if f.reclaim == nil {
		return 0, nil
	}
	return f.reclaim()
}

func (f *fakeTable) Listen(ctx context.Context, wake func()) error {
	if f.listen == nil {
		<-ctx.Done()
		return nil
	}
	return f.listen(ctx, wake)
}

// fakeOwners is an Owners whose Owner calls its function field.
type fakeOwners struct {
	owner func() (string, <-chan struct{})
}

func (f fakeOwners) Owner() (owner string, lost <-chan struct{}) { return f.owner() }

// liveOwner is always id.
func liveOwner(id string) fakeOwners {
	never := make(chan struct{})
	return fakeOwners{owner: func() (string, <-chan struct{}) { return id, never }}
}

// switchingOwner is first live, until lose makes next the live owner
// ("" for none).
func switchingOwner(first string) (owners fakeOwners, lose func(next string)) {
	var (
		mu      sync.Mutex
		owner   = first
		changed = make(chan struct{})
	)
	owners = fakeOwners{owner: func() (string, <-chan struct{}) {
		mu.Lock()
		defer mu.Unlock()
		return owner, changed
	}}
	return owners, func(next string) {
		mu.Lock()
		defer mu.Unlock()
		owner = next
		close(changed)
		changed = make(chan struct{})
	}
}

// calls records what a fake saw, safe for concurrent use.
type calls[T any] struct {
	mu   sync.Mutex
	seen []T
}

func (c *calls[T]) add(v T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, v)
}

func (c *calls[T]) all() []T {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

// batches returns claim functions handing out each batch once, in order,
// then nothing, and recording when each claim was made.
func batches(at *calls[time.Time], bs ...[]Claim) func(string, int, time.Duration, int) ([]Claim, error) {
	var mu sync.Mutex
	return func(string, int, time.Duration, int) ([]Claim, error) {
		at.add(time.Now())
		mu.Lock()
		defer mu.Unlock()
		if len(bs) == 0 {
			return nil, nil
		}
		b := bs[0]
		bs = bs[1:]
		return b, nil
	}
}

var discard = slog.New(slog.DiscardHandler)

// start runs q until the returned stop is called; stop waits for Run.
func start(q *Queue) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = q.Run(ctx)
	}()
	return func() { cancel(); <-done }
}

func ids(claims []Claim) []int64 {
	out := make([]int64, len(claims))
	for i, c := range claims {
		out[i] = c.ID
	}
	return out
}

// A claim leases a batch under the live owner with the configured limit,
// lease and attempts, and the batch is processed at once, in one call. A
// full batch is followed by another claim at once; a partial one by a claim
// after the poll interval.
func TestQueueClaimsAndProcesses(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		batches  [][]Claim
		wantNext time.Duration // between the last batch and the claim after it
	}{
		{"full batch: claims again at once", [][]Claim{{{1, 1}, {2, 1}}}, 0},
		{"partial batch: claims again after the poll", [][]Claim{{{1, 1}}}, time.Minute},
		{"two full batches", [][]Claim{{{1, 1}, {2, 1}}, {{3, 2}, {4, 1}}}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var (
					claimed   calls[time.Time]
					processed calls[[]int64]
					args      calls[string]
				)
				claim := batches(&claimed, tc.batches...)
				ft := &fakeTable{
					claim: func(owner string, limit int, lease time.Duration, maxAttempts int) ([]Claim, error) {
						args.add(fmt.Sprintf("%s limit=%d lease=%v max=%d", owner, limit, lease, maxAttempts))
						return claim(owner, limit, lease, maxAttempts)
					},
					process: func(_ context.Context, owner string, claims []Claim) error {
						if owner != "a" {
							t.Errorf("processed under %q, want a", owner)
						}
						processed.add(ids(claims))
						return nil
					},
				}
				q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 1, Batch: 2, Lease: 42 * time.Second, Poll: time.Minute, MaxAttempts: 7}, discard)
				t0 := time.Now()
				stop := start(q)
				time.Sleep(time.Hour)
				stop()

				var want [][]int64
				for _, b := range tc.batches {
					want = append(want, ids(b))
				}
				if got := processed.all(); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("processed %v, want %v", got, want)
				}
				at := claimed.all()
				n := len(tc.batches)
				if len(at) < n+1 {
					t.Fatalf("%d claims, want at least %d", len(at), n+1)
				}
				for i := range n {
					if at[i] != t0 {
						t.Errorf("claim %d at %v, want at once", i, at[i].Sub(t0))
					}
				}
				if got := at[n].Sub(at[n-1]); got != tc.wantNext {
					t.Errorf("claim after the last batch %v later, want %v", got, tc.wantNext)
				}
				if got := args.all()[0]; got != "a limit=2 lease=42s max=7" {
					t.Errorf("claim arguments: %s", got)
				}
			})
		})
	}
}

// When a batch fails, each of its items is processed alone; only the
// failing one is retried, with the backoff of its attempt.
func TestQueueRetriesFailingItemAlone(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var (
			claimed   calls[time.Time]
			processed calls[[]int64]
			retried   calls[string]
		)
		ft := &fakeTable{
			claim: batches(&claimed, []Claim{{1, 1}, {2, 3}, {3, 1}}),
			process: func(_ context.Context, _ string, claims []Claim) error {
				processed.add(ids(claims))
				if slices.Contains(ids(claims), 2) {
					return errors.New("boom")
				}
				return nil
			},
			retry: func(owner string, c Claim, cause string, next time.Time, maxAttempts int) (bool, error) {
				retried.add(fmt.Sprintf("%s %d attempt %d: %s, in %v, max %d", owner, c.ID, c.Attempts, cause, time.Until(next), maxAttempts))
				return false, nil
			},
		}
		q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 1, Batch: 3, BaseBackoff: time.Second, MaxAttempts: 5}, discard)
		q.jitter = func() float64 { return 0.5 }
		stop := start(q)
		synctest.Wait()
		stop()

		if got, want := fmt.Sprint(processed.all()), "[[1 2 3] [1] [2] [3]]"; got != want {
			t.Errorf("processed %s, want %s", got, want)
		}
		// Attempt 3: 1s doubled twice, plus half of the jitter's half.
		if got, want := retried.all(), []string{"a 2 attempt 3: boom, in 5s, max 5"}; !slices.Equal(got, want) {
			t.Errorf("retries %q, want %q", got, want)
		}
	})
}

// A batch whose work was done but some of whose items did not complete
// (ItemErrors) is not tried again: those items are retried on their own
// after their backoff, each with its cause, all in one call of the table
// (one transaction) — also when the queue is stopping as the batch ends.
func TestQueueRetriesItemErrorsAfterBackoff(t *testing.T) {
	t.Parallel()
	for _, stopping := range []bool{false, true} {
		t.Run(fmt.Sprintf("stopping=%v", stopping), func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				var (
					claimed    calls[time.Time]
					processed  calls[[]int64]
					retried    calls[string]
					retryCalls calls[[]int64]
				)
				ctx, cancel := context.WithCancel(context.Background())
				ft := &fakeTable{
					retries: retryCalls.add,
					claim:   batches(&claimed, []Claim{{1, 1}, {2, 2}, {3, 1}}),
					process: func(_ context.Context, _ string, claims []Claim) error {
						processed.add(ids(claims))
						if stopping {
							cancel()
						}
						return ItemErrors{2: errors.New("HTTP 503"), 3: errors.New("recording failed")}
					},
					retry: func(owner string, c Claim, cause string, next time.Time, _ int) (bool, error) {
						retried.add(fmt.Sprintf("%s %d attempt %d: %s, in %v", owner, c.ID, c.Attempts, cause, time.Until(next)))
						return false, nil
					},
				}
				q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 1, Batch: 3, BaseBackoff: time.Second, MaxAttempts: 5}, discard)
				q.jitter = func() float64 { return 0 }
				done := make(chan struct{})
				go func() { defer close(done); _ = q.Run(ctx) }()
				synctest.Wait()
				cancel()
				<-done
				if got, want := fmt.Sprint(processed.all()), "[[1 2 3]]"; got != want {
					t.Errorf("processed %s, want %s (the batch once)", got, want)
				}
				want := []string{"a 2 attempt 2: HTTP 503, in 2s", "a 3 attempt 1: recording failed, in 1s"}
				if got := retried.all(); !slices.Equal(got, want) {
					t.Errorf("retries %q, want %q", got, want)
				}
				if got, want := fmt.Sprint(retryCalls.all()), "[[2 3]]"; got != want {
					t.Errorf("calls of the table's Retry %s, want %s (one for the batch)", got, want)
				}
			})
		})
	}
}

// A failed item whose cause asks for a wait (a destination's Retry-After)
// is due again no sooner than that, or after its backoff when that is
// longer.
func TestQueueRetryWaitsAsAsked(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var retried calls[string]
		ft := &fakeTable{
			claim: batches(new(calls[time.Time]), []Claim{{1, 1}, {2, 3}, {3, 1}}),
			process: func(context.Context, string, []Claim) error {
				return ItemErrors{1: later{reason: "HTTP 429", after: 90 * time.Second},
					2: later{reason: "HTTP 503", after: time.Second}, 3: errors.New("HTTP 500")}
			},
			retry: func(_ string, c Claim, cause string, next time.Time, _ int) (bool, error) {
				retried.add(fmt.Sprintf("%d: %s, in %v", c.ID, cause, time.Until(next)))
				return false, nil
			},
		}
		q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 1, Batch: 3, BaseBackoff: time.Second, MaxAttempts: 5}, discard)
		q.jitter = func() float64 { return 0 }
		stop := start(q)
		synctest.Wait()
		stop()
		want := []string{"1: HTTP 429, in 1m30s", "2: HTTP 503, in 4s", "3: HTTP 500, in 1s"}
		if got := retried.all(); !slices.Equal(got, want) {
			t.Errorf("retries %q, want %q", got, want)
		}
	})
}

// An attempt that failed for an outage of the database is recorded
// uncounted, and waits about as long as the outage has lasted (its own
// backoff would stay the first, its claim not counted): from the queue's
// first such failure, between BaseBackoff and MaxBackoff. Work that
// succeeds meanwhile does not end it (a disk full takes some writes and
// refuses others, to the same items): item 2's failure, after a success,
// waits as long as the outage has lasted. Other failures keep their
// backoff, counted. The table is told of each
// outage, for its store to say once.
func TestQueueOutageAttemptsUncounted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		down := fmt.Errorf("%w: %w", fulfillment.ErrUnavailable, fulfillment.ErrDatabaseDown)
		var retried, told calls[string]
		results := []error{down, down, down, nil, down, errors.New("boom")}
		var mu sync.Mutex
		ft := &fakeTable{
			claim: batches(new(calls[time.Time]), []Claim{{1, 1}}, []Claim{{1, 1}}, []Claim{{1, 1}}, []Claim{{1, 1}},
				[]Claim{{2, 1}}, []Claim{{3, 2}}),
			process: func(context.Context, string, []Claim) error {
				mu.Lock()
				defer mu.Unlock()
				err := results[0]
				results = results[1:]
				return err
			},
			retried: func(r Retry) {
				retried.add(fmt.Sprintf("%d uncounted %v in %v", r.Claim.ID, r.Uncounted, time.Until(r.Next)))
			},
			told: func(err error) { told.add(err.Error()) },
		}
		q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 1, Batch: 2, Poll: time.Minute,
			BaseBackoff: time.Second, MaxBackoff: 90 * time.Second, MaxAttempts: 5}, discard)
		q.jitter = func() float64 { return 0 }
		stop := start(q)
		time.Sleep(10 * time.Minute)
		stop()
		want := []string{"1 uncounted true in 1s", "1 uncounted true in 1m0s", "1 uncounted true in 1m30s",
			"2 uncounted true in 1m30s", "3 uncounted false in 2s"}
		if got := retried.all(); !slices.Equal(got, want) {
			t.Errorf("retries %q, want %q", got, want)
		}
		// Each uncounted attempt's outage is told to the table (whose
		// store says it once); the other failure is not.
		if got := told.all(); len(got) != 4 || slices.ContainsFunc(got, func(e string) bool { return e != down.Error() }) {
			t.Errorf("outages told %q, want the 4 uncounted attempts' causes", got)
		}
	})
}

// An outage's waits grow with it; a pause of its failures longer than twice
// MaxBackoff (the queue's work failing for other reasons meanwhile, never
// succeeding) starts a new one.
func TestOutageWait(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		q := NewQueue("test", &fakeTable{}, nil, liveOwner("a"), Config{BaseBackoff: time.Second, MaxBackoff: time.Minute}, discard)
		q.jitter = func() float64 { return 0 }
		var got []time.Duration
		for _, pause := range []time.Duration{0, 30 * time.Second, 50 * time.Second, 110 * time.Second, 2*time.Minute + time.Second} {
			time.Sleep(pause)
			got = append(got, q.outageWait())
		}
		want := []time.Duration{time.Second, 30 * time.Second, time.Minute, time.Minute, time.Second}
		if !slices.Equal(got, want) {
			t.Errorf("waits %v, want %v", got, want)
		}
	})
}

// An attempt that lost its connection while other work of the queue
// succeeded is counted: the database took that work, and the item itself
// may be what ends its session (a query that crashes the server), every
// time. One refused for the database's state (a disk full: some work fits,
// some does not) is not.
func TestQueueLostConnectionCountedWhenOtherWorkSucceeded(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		lost := fmt.Errorf("%w: %w", fulfillment.ErrUnavailable, errors.Join(fulfillment.ErrDatabaseDown, fulfillment.ErrConnectionLost))
		full := fmt.Errorf("%w: %w", fulfillment.ErrUnavailable, fulfillment.ErrDatabaseDown)
		var retried, told calls[string]
		ft := &fakeTable{
			told:  func(err error) { told.add(err.Error()) },
			claim: batches(new(calls[time.Time]), []Claim{{1, 1}}, []Claim{{2, 1}}, []Claim{{3, 1}}),
			process: func(_ context.Context, _ string, claims []Claim) error {
				switch claims[0].ID {
				case 1:
					time.Sleep(time.Second) // item 2 succeeds meanwhile
					return lost
				case 3:
					time.Sleep(time.Second)
					return full
				}
				time.Sleep(10 * time.Millisecond)
				return nil
			},
			retried: func(r Retry) {
				retried.add(fmt.Sprintf("%d uncounted %v in %v", r.Claim.ID, r.Uncounted, time.Until(r.Next)))
			},
		}
		var log bytes.Buffer // read once the queue stopped
		q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 3, Batch: 1, Poll: time.Minute,
			BaseBackoff: 2 * time.Second, MaxBackoff: time.Minute, MaxAttempts: 5},
			slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelWarn})))
		q.jitter = func() float64 { return 0 }
		stop := start(q)
		time.Sleep(10 * time.Second)
		stop()
		got := retried.all()
		slices.Sort(got)
		if want := []string{"1 uncounted false in 2s", "3 uncounted true in 2s"}; !slices.Equal(got, want) {
			t.Errorf("retries %q, want %q", got, want)
		}
		// The outage is told, not the lost connection (its record proved
		// the database answers); the counted one is a warning, the
		// uncounted one is not.
		if got := told.all(); !slices.Equal(got, []string{full.Error()}) {
			t.Errorf("outages told %q, want only the disk's", got)
		}
		if text := log.String(); strings.Count(text, "processing failed; will retry") != 1 || !strings.Contains(text, "id=1 ") {
			t.Errorf("warnings %q, want one, of item 1's counted lost connection", text)
		}
	})
}

// While a Hold is in force (a destination asked to wait) the queue claims
// nothing, notified or not, and claims at once when it ends.
func TestQueueClaimsNothingWhileHeld(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var claimed calls[time.Time]
		ft := &fakeTable{claim: batches(&claimed, []Claim{{1, 1}})}
		t0 := time.Now()
		ends := t0.Add(90 * time.Second)
		q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 2, Batch: 1, Poll: time.Second,
			Hold: func() time.Time { return ends }}, discard)
		stop := start(q)
		time.Sleep(30 * time.Second)
		q.notify() // a new message meanwhile
		time.Sleep(90 * time.Second)
		stop()
		at := claimed.all()
		if len(at) == 0 {
			t.Fatal("no claim after the hold ended")
		}
		if at[0] != ends {
			t.Errorf("first claim %v after the start, want when the hold ended (%v)", at[0].Sub(t0), ends.Sub(t0))
		}
	})
}

// Items of a batch whose work did not start (ErrNotStarted) are handed
// back in one call, not retried: their claim is not counted; the others'
// failures are retried as ever.
func TestQueueHandsBackItemsNotStarted(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var retried, handed calls[string]
		ft := &fakeTable{
			claim: batches(new(calls[time.Time]), []Claim{{1, 1}, {2, 1}, {3, 1}}),
			process: func(context.Context, string, []Claim) error {
				return ItemErrors{1: errors.New("HTTP 500"), 2: ErrNotStarted, 3: ErrNotStarted}
			},
			retry: func(_ string, c Claim, cause string, _ time.Time, _ int) (bool, error) {
				retried.add(fmt.Sprintf("%d: %s", c.ID, cause))
				return false, nil
			},
			releaseClaims: func(owner string, ids []int64) error {
				handed.add(fmt.Sprintf("%s %v", owner, ids))
				return nil
			},
		}
		q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 1, Batch: 3, BaseBackoff: time.Second, MaxAttempts: 5}, discard)
		stop := start(q)
		synctest.Wait()
		stop()
		if got, want := retried.all(), []string{"1: HTTP 500"}; !slices.Equal(got, want) {
			t.Errorf("retries %q, want %q", got, want)
		}
		if got, want := handed.all(), []string{"a [2 3]"}; !slices.Equal(got, want) {
			t.Errorf("hand-backs %q, want %q", got, want)
		}
	})
}

// A batch of failed attempts the table refuses as a whole (one attempt
// it cannot store) is recorded again one attempt at a time: the others
// are not kept leased until their lease runs out.
func TestQueueRetriesAloneWhenTheTableRefusesTheBatch(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var retryCalls calls[[]int64]
		ctx, cancel := context.WithCancel(context.Background())
		ft := &fakeTable{
			retries: retryCalls.add,
			claim:   batches(new(calls[time.Time]), []Claim{{1, 1}, {2, 1}, {3, 1}}),
			process: func(context.Context, string, []Claim) error {
				return ItemErrors{1: errors.New("HTTP 503"), 2: errors.New("bad\x00cause"), 3: errors.New("HTTP 503")}
			},
			retry: func(_ string, _ Claim, cause string, _ time.Time, _ int) (bool, error) {
				if strings.Contains(cause, "\x00") {
					return false, errors.New("invalid byte sequence")
				}
				return false, nil
			},
		}
		q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 1, Batch: 3}, discard)
		done := make(chan struct{})
		go func() { defer close(done); _ = q.Run(ctx) }()
		synctest.Wait()
		cancel()
		<-done
		if got, want := fmt.Sprint(retryCalls.all()), "[[1 2 3] [1] [2] [3]]"; got != want {
			t.Errorf("calls of the table's Retry %s, want %s (the batch, then each alone)", got, want)
		}
	})
}

// The retry delay doubles from the base per attempt, up to the ceiling, and
// jitter adds up to half of it.
func TestBackoffSchedule(t *testing.T) {
	t.Parallel()
	const base, ceiling = time.Second, 5 * time.Minute
	cases := []struct {
		attempt int
		jitter  float64
		want    time.Duration
	}{
		{0, 0, time.Second},
		{1, 0, time.Second},
		{2, 0, 2 * time.Second},
		{3, 0, 4 * time.Second},
		{9, 0, 256 * time.Second},
		{10, 0, 5 * time.Minute}, // 512s capped
		{60, 0, 5 * time.Minute},
		{1, 0.5, 1250 * time.Millisecond},
		{3, 0.5, 5 * time.Second},
		{10, 0.5, 375 * time.Second},
		{10, 0.999, 5*time.Minute + 149850*time.Millisecond},
	}
	for _, tc := range cases {
		if got := backoff(tc.attempt, base, ceiling, tc.jitter); got != tc.want {
			t.Errorf("backoff(attempt %d, jitter %v) = %v, want %v", tc.attempt, tc.jitter, got, tc.want)
		}
	}
}

// An item that always fails is retried on the backoff schedule and failed
// at its last attempt; then nobody claims it again. The table is an
// in-memory model of one leased item.
func TestQueueFailsItemAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const maxAttempts = 5
		var (
			mu       sync.Mutex
			due      = time.Now()
			attempts int
			failed   bool
			tried    []time.Time // when each attempt was claimed
		)
		ft := &fakeTable{
			claim: func(_ string, _ int, _ time.Duration, _ int) ([]Claim, error) {
				mu.Lock()
				defer mu.Unlock()
				if failed || time.Now().Before(due) {
					return nil, nil
				}
				attempts++
				tried = append(tried, time.Now())
				due = time.Now().Add(time.Hour) // leased
				return []Claim{{ID: 1, Attempts: attempts}}, nil
			},
			process: func(context.Context, string, []Claim) error { return errors.New("always") },
			retry: func(_ string, c Claim, _ string, next time.Time, maxAttempts int) (bool, error) {
				mu.Lock()
				defer mu.Unlock()
				due = next
				failed = c.Attempts >= maxAttempts
				return failed, nil
			},
		}
		poll := 100 * time.Millisecond
		q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 2, Poll: poll, MaxAttempts: maxAttempts,
			BaseBackoff: time.Second, MaxBackoff: 4 * time.Second}, discard)
		q.jitter = func() float64 { return 0 }
		stop := start(q)
		time.Sleep(time.Hour)
		stop()

		mu.Lock()
		defer mu.Unlock()
		if !failed || attempts != maxAttempts {
			t.Fatalf("after an hour: failed %v after %d attempts, want failed after %d", failed, attempts, maxAttempts)
		}
		// 1s, 2s, 4s, then capped at 4s; each claimed at the first poll
		// after it is due.
		want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 4 * time.Second}
		for i, w := range want {
			if got := tried[i+1].Sub(tried[i]); got < w || got > w+poll {
				t.Errorf("retry %d claimed %v after attempt %d, want %v (within a poll)", i+1, got, i+1, w)
			}
		}
	})
}

// On shutdown, processing in flight is abandoned (not retried: the context
// ended) and what the owner claimed is handed back.
func TestQueueReleasesOnShutdown(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var (
			claimed  calls[time.Time]
			released calls[string]
			retried  calls[int64]
		)
		ft := &fakeTable{
			claim: batches(&claimed, []Claim{{1, 1}, {2, 1}}),
			process: func(ctx context.Context, _ string, _ []Claim) error {
				<-ctx.Done() // a slow batch, rolled back by the shutdown
				return ctx.Err()
			},
			retry: func(_ string, c Claim, _ string, _ time.Time, _ int) (bool, error) {
				retried.add(c.ID)
				return false, nil
			},
			release: func(owner string) (int, error) {
				released.add(owner)
				return 2, nil
			},
		}
		q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 2, Batch: 4}, discard)
		stop := start(q)
		synctest.Wait()
		if got := released.all(); len(got) != 0 {
			t.Fatalf("released %v before the shutdown", got)
		}
		stop()
		if got := released.all(); !slices.Equal(got, []string{"a"}) {
			t.Errorf("released %v, want once for owner a", got)
		}
		if got := retried.all(); len(got) != 0 {
			t.Errorf("retried %v on shutdown, want nothing", got)
		}
	})
}

// A queue without a live owner hands nothing back: others reclaim.
func TestQueueReleasesNothingWithoutOwner(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var released, claimed calls[string]
		ft := &fakeTable{
			claim: func(owner string, _ int, _ time.Duration, _ int) ([]Claim, error) {
				claimed.add(owner)
				return nil, nil
			},
			release: func(owner string) (int, error) {
				released.add(owner)
				return 0, nil
			},
		}
		never := make(chan struct{})
		none := fakeOwners{owner: func() (string, <-chan struct{}) { return "", never }}
		stop := start(NewQueue("test", ft, ft.Process, none, Config{Workers: 2}, discard))
		time.Sleep(time.Minute)
		stop()
		if got := claimed.all(); len(got) != 0 {
			t.Errorf("claimed under %q without an owner", got)
		}
		if got := released.all(); len(got) != 0 {
			t.Errorf("released %v without an owner", got)
		}
	})
}

// A notification wakes an idle worker at once; without one, the poll does,
// after its interval.
func TestQueueWakesOnNotify(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var claimed calls[time.Time]
		wakes := make(chan func(), 1)
		ft := &fakeTable{
			claim: batches(&claimed),
			listen: func(ctx context.Context, wake func()) error {
				wakes <- wake
				<-ctx.Done()
				return nil
			},
		}
		q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 1, Poll: time.Hour}, discard)
		t0 := time.Now()
		stop := start(q)
		defer stop()
		wake := <-wakes
		synctest.Wait()
		if n := len(claimed.all()); n != 1 {
			t.Fatalf("%d claims at start, want 1", n)
		}
		time.Sleep(time.Minute)
		wake()
		synctest.Wait()
		at := claimed.all()
		if len(at) != 2 || at[1].Sub(t0) != time.Minute {
			t.Fatalf("claims at %v after a notification at 1m, want a second claim at once", offsets(t0, at))
		}
		time.Sleep(time.Hour + time.Second) // no notification: the poll
		at = claimed.all()
		if len(at) != 3 || at[2].Sub(t0) != time.Hour+time.Minute {
			t.Errorf("claims at %v, want a third claim an hour after the second (the poll)", offsets(t0, at))
		}
	})
}

func offsets(t0 time.Time, at []time.Time) []time.Duration {
	var out []time.Duration
	for _, a := range at {
		out = append(out, a.Sub(t0))
	}
	return out
}

// Reclaiming runs at start and then every interval; when it frees items,
// idle workers claim at once instead of waiting for the poll.
func TestQueueReclaimsAndWakes(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var (
			claimed   calls[time.Time]
			reclaimed calls[time.Time]
		)
		ft := &fakeTable{
			claim: batches(&claimed),
			reclaim: func() (int, error) {
				reclaimed.add(time.Now())
				if len(reclaimed.all()) == 3 {
					return 1, nil // an owner died: one item is free
				}
				return 0, nil
			},
		}
		q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 2, Poll: time.Hour, Reclaim: time.Second}, discard)
		t0 := time.Now()
		stop := start(q)
		time.Sleep(2500 * time.Millisecond)
		stop()
		if got := offsets(t0, reclaimed.all()); fmt.Sprint(got) != "[0s 1s 2s]" {
			t.Errorf("reclaims at %v, want at 0s, 1s and 2s", got)
		}
		// Each worker claims at start; the reclaim at 2s wakes one.
		if got := offsets(t0, claimed.all()); fmt.Sprint(got) != "[0s 0s 2s]" {
			t.Errorf("claims at %v, want [0s 0s 2s]", got)
		}
	})
}

// A notification wakes one idle worker: a single new item costs one claim,
// not one per worker. A worker whose claim is a full batch wakes the next,
// so that a backlog is shared by every worker.
func TestQueueNotifyWakesOneWorkerThenChains(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var claimed calls[time.Time]
		wakes := make(chan func(), 1)
		full := []Claim{{ID: 1}, {ID: 2}}
		release := make(chan struct{})
		var workers calls[int64]
		ft := &fakeTable{
			claim: batches(&claimed, nil, nil, nil, []Claim{{ID: 9}}, nil, full, full, full),
			process: func(_ context.Context, _ string, claims []Claim) error {
				workers.add(claims[0].ID)
				if claims[0].ID == 1 {
					<-release // the batches stay in flight: a further claim is another worker's
				}
				return nil
			},
			listen: func(ctx context.Context, wake func()) error {
				wakes <- wake
				<-ctx.Done()
				return nil
			},
		}
		q := NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 3, Batch: 2, Poll: time.Hour}, discard)
		stop := start(q)
		defer stop()
		defer close(release) // before stop: the batches in flight end
		wake := <-wakes
		synctest.Wait() // each worker claimed (nothing) at start
		if n := len(claimed.all()); n != 3 {
			t.Fatalf("%d claims at start, want 3", n)
		}
		wake() // one item
		synctest.Wait()
		if n := len(claimed.all()); n != 4 {
			t.Fatalf("%d claims after one notification with one item due, want 4 (one worker woken)", n)
		}
		// The claim came back short: nobody else is woken until the next
		// notification; then full batches wake worker after worker.
		wake()
		synctest.Wait()
		if n := len(claimed.all()); n != 5 {
			t.Fatalf("%d claims, want 5", n)
		}
		wake()
		synctest.Wait()
		if got := len(workers.all()); got != 4 {
			t.Errorf("%d batches being processed after a backlog's notification, want 4 (three workers, chained)", got)
		}
	})
}

// Items claimed under an owner that is lost meanwhile are not processed;
// the next claim is made under the new owner, at once.
func TestQueueDropsClaimsOfLostOwner(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		owners, lose := switchingOwner("a")
		var (
			claimedBy calls[string]
			processed calls[string]
		)
		ft := &fakeTable{
			claim: func(o string, _ int, _ time.Duration, _ int) ([]Claim, error) {
				claimedBy.add(o)
				if o == "a" {
					lose("") // the liveness connection broke during the claim
					return []Claim{{1, 1}}, nil
				}
				return nil, nil
			},
			process: func(_ context.Context, o string, claims []Claim) error {
				processed.add(fmt.Sprint(o, ids(claims)))
				return nil
			},
		}
		q := NewQueue("test", ft, ft.Process, owners, Config{Workers: 1, Poll: time.Hour}, discard)
		t0 := time.Now()
		stop := start(q)
		defer stop()
		time.Sleep(time.Minute) // no owner meanwhile: no claim
		if got := claimedBy.all(); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("claims under %q while no owner is live, want only a", got)
		}
		lose("b")
		synctest.Wait()
		if got := claimedBy.all(); !slices.Equal(got, []string{"a", "b"}) || time.Since(t0) != time.Minute {
			t.Errorf("claims under %q, want a then b at once when b is live", got)
		}
		if got := processed.all(); len(got) != 0 {
			t.Errorf("processed %q: a lost owner's claims must not be completed", got)
		}
	})
}

// A retry the owner lost (another worker took the item) or a failing claim
// does not stop the queue.
func TestQueueSurvivesStorageErrors(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var (
			mu      sync.Mutex
			n       int
			retried calls[int64]
		)
		ft := &fakeTable{
			claim: func(string, int, time.Duration, int) ([]Claim, error) {
				mu.Lock()
				defer mu.Unlock()
				n++
				switch n {
				case 1:
					return nil, errors.New("database unavailable")
				case 2:
					return []Claim{{7, 1}}, nil
				}
				return nil, nil
			},
			process: func(context.Context, string, []Claim) error { return errors.New("boom") },
			retry: func(_ string, c Claim, _ string, _ time.Time, _ int) (bool, error) {
				retried.add(c.ID)
				return false, fmt.Errorf("event 7: %w", ErrLeaseLost)
			},
		}
		stop := start(NewQueue("test", ft, ft.Process, liveOwner("a"), Config{Workers: 1, Poll: time.Second}, discard))
		time.Sleep(10 * time.Second)
		stop()
		mu.Lock()
		defer mu.Unlock()
		if n < 5 || !slices.Equal(retried.all(), []int64{7}) {
			t.Errorf("%d claims and retries of %v in 10s, want claims every second and one retry of 7", n, retried.all())
		}
	})
}

// Every claim is told which items the queue's workers hold, so that storage
// takes back an owner's own expired claims only when no worker holds them
// (a retry that failed to record, a claim whose answer was lost).
func TestClaimsKnowWhatIsInFlight(t *testing.T) {
	t.Parallel()
	var (
		mu       sync.Mutex
		seen     [][]int64
		handed   bool
		release  = make(chan struct{})
		started  = make(chan struct{})
		finished = make(chan struct{})
	)
	ft := &fakeTable{
		claim: func(string, int, time.Duration, int) ([]Claim, error) {
			mu.Lock()
			defer mu.Unlock()
			if handed {
				return nil, nil
			}
			handed = true
			return []Claim{{ID: 7, Attempts: 1}}, nil
		},
		process: func(context.Context, string, []Claim) error {
			close(started)
			<-release
			return nil
		},
		inFlight: func(ids []int64) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, slices.Clone(ids))
		},
	}
	q := NewQueue("test", ft, ft.Process, liveOwner("me"), Config{Workers: 2, Batch: 1, Poll: 5 * time.Millisecond}, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = q.Run(ctx); close(finished) }()
	defer func() { cancel(); <-finished }()

	<-started
	waitFor := func(what string, ok func([]int64) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			mu.Lock()
			last := seen[len(seen)-1]
			mu.Unlock()
			if ok(last) {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("no claim saw %s; saw %v", what, seen)
	}
	waitFor("item 7 in flight", func(ids []int64) bool { return slices.Equal(ids, []int64{7}) })
	close(release)
	waitFor("nothing in flight once it was processed", func(ids []int64) bool { return len(ids) == 0 })
}
