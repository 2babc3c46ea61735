package storage

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// reachability says once, plainly, that the database is unreachable, and
// once that it answers again, however many parts of the service (queues,
// listeners, liveness, readiness, metrics) run into it meanwhile. Those
// parts call report with what they got, and log their own failures only
// when the database answered.
type reachability struct {
	s *Store

	mu       sync.Mutex
	down     bool
	downAt   time.Time
	watching bool
	// gaveUp is closed once the database was unreachable for
	// Options.GiveUpAfter.
	gaveUp     chan struct{}
	gaveUpOnce sync.Once
}

// GaveUp is closed once the database has been unreachable for
// Options.GiveUpAfter (never when it is 0).
func (s *Store) GaveUp() <-chan struct{} { return s.reach.gaveUp }

// GiveUpAfter is Options.GiveUpAfter.
func (s *Store) GiveUpAfter() time.Duration { return s.giveUpAfter }

// unreachable reports err when it says the database could not be reached,
// and returns whether it did: the caller then leaves the telling to it.
func (s *Store) unreachable(err error) bool {
	if !errors.Is(err, fulfillment.ErrUnavailable) || errors.Is(err, context.Canceled) ||
		rolledBack(err) || sqlstateOf(err) == sqlstateQueryCanceled {
		// (A transaction PostgreSQL rolled back, a statement it cancelled
		// on a timeout, came from a database that answers.)
		return false
	}
	r := &s.reach
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.down {
		r.down, r.downAt = true, time.Now()
		s.log.Error("database unreachable: webhooks are answered 503 (providers retry) and nothing is processed until it answers", "error", err)
	}
	if !r.watching && s.bgCtx != nil {
		r.watching = true
		s.bg.Go(r.watch)
	}
	return true
}

// Unreachable reports whether err says the database could not be reached,
// telling so once (see reachability): callers outside storage log their own
// failures only when it returns false.
func (s *Store) Unreachable(err error) bool { return s.unreachable(err) }

// watch pings the database every second until it answers, then says so.
func (r *reachability) watch() {
	ctx := r.s.bgCtx
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := r.s.pool.Ping(pctx)
		cancel()
		if err != nil {
			r.mu.Lock()
			downFor := time.Since(r.downAt)
			r.mu.Unlock()
			if g := r.s.giveUpAfter; g > 0 && downFor >= g {
				r.gaveUpOnce.Do(func() {
					r.s.log.Error("database unreachable for too long: giving up", "down_for", downFor.Round(time.Second).String())
					close(r.gaveUp)
				})
			}
			continue
		}
		r.mu.Lock()
		downFor := time.Since(r.downAt)
		r.down, r.watching = false, false
		r.mu.Unlock()
		r.s.log.Info("database reachable again", "down_for", downFor.Round(time.Second).String())
		return
	}
}
