package chaos

// Waiting on what the service has processed: the gate that holds back an
// event's first delivery until the events it comes after are processed, and
// the wait for the sweeper once the inbox has settled.

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// processedGate holds back the first delivery of an event until the
// events it comes after are processed, as the harness sees from the
// inbox.
type processedGate struct {
	mu sync.Mutex
	// done: applied (decided other than unmatched); decided: decided,
	// unmatched or not.
	done, decided map[int]bool
	changed       chan struct{} // closed (and replaced) whenever either grows
	wanted        []int         // every event some event comes after
	events        []*eventPlan
}

// newProcessedGate is the gate of events, watching also the events of
// extra (what late orders wait for).
func newProcessedGate(events []*eventPlan, extra []int) *processedGate {
	g := &processedGate{done: map[int]bool{}, decided: map[int]bool{}, changed: make(chan struct{}), events: events}
	seen := map[int]bool{}
	want := func(j int) {
		if !seen[j] {
			seen[j] = true
			g.wanted = append(g.wanted, j)
		}
	}
	for _, e := range events {
		for _, j := range e.after {
			want(j)
		}
	}
	for _, j := range extra {
		want(j)
	}
	return g
}

// wait returns true once every event ev comes after is applied (decided,
// when ev waits for decisions only), false when ctx ends first.
func (g *processedGate) wait(ctx context.Context, ev int) bool {
	return g.waitAll(ctx, g.events[ev].after, g.events[ev].afterDecided)
}

// waitAll returns true once every event of evs is applied (decided, when
// decided), false when ctx ends first. evs must be watched (wanted).
func (g *processedGate) waitAll(ctx context.Context, evs []int, decided bool) bool {
	for {
		g.mu.Lock()
		done := g.done
		if decided {
			done = g.decided
		}
		ok := true
		for _, j := range evs {
			ok = ok && done[j]
		}
		ch := g.changed
		g.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// run asks the inbox which of the wanted events are processed, every
// 100 ms until ctx ends (a failed question, as when PostgreSQL is down, is
// asked again).
func (g *processedGate) run(ctx context.Context, db *pgxpool.Pool) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		g.mu.Lock()
		var ids []string
		byID := map[string]int{}
		for _, j := range g.wanted {
			if !g.done[j] {
				ids = append(ids, g.events[j].id)
				byID[g.events[j].id] = j
			}
		}
		g.mu.Unlock()
		if len(ids) > 0 {
			rows, err := db.Query(ctx, `SELECT event_id, state <> 'unmatched' FROM inbox_events
				WHERE provider IN ('yolfi', 'tbank') AND org_id = $1 AND environment = 'live' AND event_id = ANY($2) AND state <> 'pending'`, orgID, ids)
			var got []decidedEvent
			if err == nil {
				got, err = pgx.CollectRows(rows, pgx.RowToStructByPos[decidedEvent])
			}
			if err == nil && len(got) > 0 {
				g.mu.Lock()
				grew := false
				for _, d := range got {
					j := byID[d.ID]
					grew = grew || !g.decided[j] || d.Applied
					g.decided[j], g.done[j] = true, d.Applied
				}
				if grew {
					close(g.changed)
					g.changed = make(chan struct{})
				}
				g.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// decidedEvent is a watched event the inbox decided: applied unless
// unmatched.
type decidedEvent struct {
	ID      string
	Applied bool
}

// startGate starts the gate of the workload's events, if any waits for
// another, and returns it (nil: none) with the function that stops it.
func (r *runner) startGate(ctx context.Context) (*processedGate, func(), error) {
	var extra []int
	for _, evs := range r.lateOrderEvents() {
		extra = append(extra, evs...)
	}
	g := newProcessedGate(r.w.events, extra)
	if len(g.wanted) == 0 {
		return nil, func() {}, nil
	}
	db, err := r.openDB(ctx)
	if err != nil {
		return nil, nil, err
	}
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); g.run(gctx, db) }()
	return g, func() { cancel(); <-done; db.Close() }, nil
}

// waitSweeps waits, after the inbox settled, until the sweeper has done
// every sweep that is due — and every planned end of access has come — or
// reports those still due; it returns how long it waited.
func (r *runner) waitSweeps(ctx context.Context, db *pgxpool.Pool) time.Duration {
	t := time.Now()
	var latest time.Time
	for _, o := range r.w.orders {
		if o.sub != nil && o.sub.story == storyGraceOut {
			if end := o.sub.start.AddDate(0, 0, o.sub.plan.Period.Days).Add(o.sub.plan.Grace); end.After(latest) {
				latest = end
			}
		}
	}
	limit := max(time.Until(r.deadline), 20*time.Second)
	var due int
	for {
		err := db.QueryRow(ctx, `SELECT count(*) FROM subscription_sweeps WHERE state = 'pending' AND next_attempt_at <= now()`).Scan(&due)
		if err == nil && due == 0 && time.Now().After(latest) {
			break
		}
		if time.Since(t) > limit || ctx.Err() != nil {
			r.viol.add("sweeper behind", "%d subscription sweeps still due %v after the inbox settled (last error: %v)",
				due, time.Since(t).Round(time.Second), err)
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(t)
	r.logf("subscription_sweeps settled in %v", took.Round(100*time.Millisecond))
	return took
}
