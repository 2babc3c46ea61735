package server

import (
	"strings"
	"sync"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// GetActivity counts what happened per minute. A minute that ended is
// counted once and kept, so a window of 60 minutes, asked again every few
// seconds (the console's overview refreshes itself), costs one count of the
// rows since the last kept minute, not of the whole hour's.
const (
	// activitySettle is how long after its end a minute is counted for
	// good: a transaction that stamped a row in it may still be committing
	// (rows are stamped when written, and transactions are short).
	activitySettle = 30 * time.Second
	// activityKeys bounds the filters (orgs, org, environment) kept; past
	// it, the least recently used is forgotten.
	activityKeys = 256
	// activityFresh is how long a whole answer is reused: the minutes not
	// kept yet (the current one at least) hold the newest rows, which under
	// a high webhook rate are many, so they are counted at most this often
	// per filter. The answer's check_time says when they were counted.
	activityFresh = 5 * time.Second
)

// activityMemo keeps counted minutes per filter.
type activityMemo struct {
	mu   sync.Mutex
	keys map[string]*activitySeries
}

type activitySeries struct {
	minutes map[int64]fulfillment.ActivityMinute // by the minute's Unix time
	used    time.Time
	// last is the last answer, counted at lastAt for the window from
	// lastStart.
	last      []fulfillment.ActivityMinute
	lastAt    time.Time
	lastStart time.Time
}

// recent returns the last answer for key's window from start when it was
// counted less than activityFresh before now, and when.
func (m *activityMemo) recent(key string, start time.Time, n int, now time.Time) ([]fulfillment.ActivityMinute, time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.keys[key]
	if s == nil || len(s.last) != n || !s.lastStart.Equal(start) || now.Sub(s.lastAt) >= activityFresh || now.Before(s.lastAt) {
		return nil, time.Time{}, false
	}
	s.used = now
	return s.last, s.lastAt, true
}

func newActivityMemo() *activityMemo {
	return &activityMemo{keys: map[string]*activitySeries{}}
}

// activityKey names a filter.
func activityKey(f fulfillment.ReconFilter) string {
	orgs := "*"
	if f.VisibleOrgs != nil {
		orgs = strings.Join(f.VisibleOrgs, ",")
	}
	return orgs + "|" + f.OrgID + "|" + string(f.Environment)
}

// since is the first minute of the window from start (n minutes) that is
// not kept for key — what must be counted — with a copy of the kept
// minutes before it: another filter's call may forget key's minutes before
// window runs.
func (m *activityMemo) since(key string, start time.Time, n int) (time.Time, []fulfillment.ActivityMinute) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.keys[key]
	var kept []fulfillment.ActivityMinute
	for i := range n - 1 { // the last, current minute is never kept
		t := start.Add(time.Duration(i) * time.Minute)
		if s == nil {
			return t, kept
		}
		k, ok := s.minutes[t.Unix()]
		if !ok {
			return t, kept
		}
		kept = append(kept, k)
	}
	return start.Add(time.Duration(n-1) * time.Minute), kept
}

// window returns the n minutes from start: kept (as since returned them),
// then fresh (counted from since on). It keeps the fresh minutes
// that ended activitySettle before now, and forgets minutes older than any
// window.
func (m *activityMemo) window(key string, start time.Time, n int, kept, fresh []fulfillment.ActivityMinute, now time.Time) []fulfillment.ActivityMinute {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.keys[key]
	if s == nil {
		if len(m.keys) >= activityKeys {
			m.forgetOldest()
		}
		s = &activitySeries{minutes: map[int64]fulfillment.ActivityMinute{}}
		m.keys[key] = s
	}
	s.used = now
	for _, f := range fresh {
		if !f.Start.Add(time.Minute + activitySettle).After(now) {
			s.minutes[f.Start.Unix()] = f
		}
	}
	oldest := now.Add(-time.Duration(fulfillment.MaxActivityMinutes+1) * time.Minute).Unix()
	for t := range s.minutes {
		if t < oldest {
			delete(s.minutes, t)
		}
	}
	out := make([]fulfillment.ActivityMinute, 0, n)
	out = append(append(out, kept...), fresh...)
	s.last, s.lastAt, s.lastStart = out, now, start
	return out
}

func (m *activityMemo) forgetOldest() {
	var oldest string
	for k, s := range m.keys {
		if oldest == "" || s.used.Before(m.keys[oldest].used) {
			oldest = k
		}
	}
	delete(m.keys, oldest)
}
