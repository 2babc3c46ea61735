package storage

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

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
	readOnly bool // down because the database takes no writes
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

// unreachable reports err when it says the database could not be reached
// (or takes no writes, or has no room for them: each told as what it is),
// and returns whether it did: the caller then leaves the telling to it.
func (s *Store) unreachable(err error) bool {
	if !errors.Is(err, fulfillment.ErrUnavailable) || errors.Is(err, context.Canceled) {
		return false
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && !errors.As(err, new(*pgconn.ConnectError)) {
		switch {
		case pgErr.Code == sqlstateDiskFull:
			// The database answers, and refuses the writes that need
			// room: every read, and so a probe, succeeds, and some writes
			// do. Not "unreachable", and no watcher to find it "reachable
			// again" every second: a line per failure, which the log's
			// handler lets through once per interval (its PostgreSQL
			// message, a run of digits one placeholder, and its SQLSTATE
			// are the line's cause, whichever relation it names).
			s.diskFullRefusals.Add(1)
			s.log.Error(diskFullLine, "code", pgErr.Code, "error", pgErr.Message)
			return true
		case !errors.Is(err, fulfillment.ErrDatabaseDown):
			// An answer of a database that takes calls (a transaction it
			// rolled back, a statement it cancelled on a timeout, a
			// query that needed more memory than it had): interpret
			// marked none of them an outage.
			return false
		}
	}
	r := &s.reach
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.down {
		r.down, r.readOnly, r.downAt = true, readOnly(err), time.Now()
		if r.readOnly {
			s.log.Error(readOnlyLine, "error", err)
		} else {
			s.log.Error("database unreachable: webhooks are answered 503 (providers retry) and nothing is processed until it answers", "error", err)
		}
	}
	if !r.watching && s.bgCtx != nil {
		r.watching = true
		s.bg.Go(r.watch)
	}
	return true
}

// watch probes the database every second until it answers and takes
// writes, then says so.
func (r *reachability) watch() {
	ctx := r.s.bgCtx
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	sawStandby := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		standby, err := r.s.probeWritable(pctx)
		cancel()
		if standby {
			// The pools' connections reached a standby (an address that
			// points at it during a failover, or by mistake): make them
			// anew, so that they reach the primary as soon as the address
			// does, rather than staying for their lifetime. Once a second
			// at most, and not for a primary set read-only, where new
			// connections would land again.
			sawStandby = true
			r.s.resetPools()
		}
		if err != nil {
			r.mu.Lock()
			downFor := time.Since(r.downAt)
			// Down for want of an answer, it now answers but takes no
			// writes (a standby came up where the primary was): say so.
			toldReadOnly := errors.Is(err, errProbeReadOnly) && !r.readOnly
			r.readOnly = r.readOnly || toldReadOnly
			readOnly := r.readOnly
			r.mu.Unlock()
			if toldReadOnly {
				r.s.log.Error(readOnlyLine, "error", err)
			}
			if g := r.s.giveUpAfter; g > 0 && downFor >= g {
				r.gaveUpOnce.Do(func() {
					msg := "database unreachable for too long: giving up"
					if readOnly {
						msg = "database unreachable or read-only for too long: giving up"
					}
					r.s.log.Error(msg, "down_for", downFor.Round(time.Second).String())
					close(r.gaveUp)
				})
			}
			continue
		}
		if sawStandby {
			// The probe may have been the first connection to reach the
			// primary: the others made since the last reset go too.
			r.s.resetPools()
		}
		r.mu.Lock()
		downFor, wasReadOnly := time.Since(r.downAt), r.readOnly
		r.down, r.watching = false, false
		r.mu.Unlock()
		if wasReadOnly {
			r.s.log.Info("database takes writes again", "down_for", downFor.Round(time.Second).String())
		} else {
			r.s.log.Info("database reachable again", "down_for", downFor.Round(time.Second).String())
		}
		return
	}
}

// diskFullLine says the database is out of disk space, and what follows.
const diskFullLine = "database out of disk space: the writes that need room fail; webhooks whose group commit " +
	"meets a full table are answered 503 (providers retry), and queued work waits without using its attempts"

// readOnlyLine says the database takes no writes, and what follows.
const readOnlyLine = "database read-only (a standby, or default_transaction_read_only): webhooks are answered 503 " +
	"(providers retry) and nothing is processed until it takes writes"

// errProbeReadOnly: the watcher's probe reached a server that takes no
// writes.
var errProbeReadOnly = errors.New("the database takes no writes (transaction_read_only is on)")

// probeWritable asks the database whether a transaction of this service
// could write: it answers, and transaction_read_only is off. standby says
// whether the connection it asked on is to a hot standby.
func (s *Store) probeWritable(ctx context.Context) (standby bool, err error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer c.Release()
	var ro string
	if err := c.QueryRow(ctx, "SELECT current_setting('transaction_read_only')").Scan(&ro); err != nil {
		return false, err
	}
	if ro == "on" {
		return onStandby(c.Conn().PgConn()), errProbeReadOnly
	}
	return false, nil
}

// resetPools closes the pools' connections: the idle ones now, the ones in
// use when they are handed back.
func (s *Store) resetPools() {
	s.pool.Reset()
	s.leasePool.Reset()
}
