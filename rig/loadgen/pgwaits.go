package loadgen

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// WaitShare is one kind of PostgreSQL backend activity seen by a
// WaitSampler: what active client backends were doing (a wait event, or
// "CPU" when running) and the statement they were in.
type WaitShare struct {
	Wait  string  `json:"wait"`            // e.g. "Lock:object", "IO:WALSync", "CPU"
	Query string  `json:"query,omitempty"` // the statement's first words
	Avg   float64 `json:"avg_backends"`    // average number of backends in this state
}

func (w WaitShare) String() string {
	return fmt.Sprintf("%5.2f  %-22s %s", w.Avg, w.Wait, w.Query)
}

// WaitSampler polls pg_stat_activity (a poor man's profiler of the server:
// no extension needed) and tallies what active client backends wait on.
type WaitSampler struct {
	conn    *pgx.Conn
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	counts  map[[2]string]int
	samples int
}

var spaces = regexp.MustCompile(`\s+`)

// StartWaitSampler connects to url (any database of the cluster) and samples
// every interval until Stop.
func StartWaitSampler(ctx context.Context, url string, interval time.Duration) (*WaitSampler, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, err
	}
	s := &WaitSampler{conn: conn, stop: make(chan struct{}), done: make(chan struct{}), counts: map[[2]string]int{}}
	go s.loop(ctx, interval)
	return s, nil
}

func (s *WaitSampler) loop(ctx context.Context, interval time.Duration) {
	defer close(s.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rows, err := s.conn.Query(ctx, `
			SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), left(query, 200)
			FROM pg_stat_activity
			WHERE state = 'active' AND backend_type = 'client backend' AND pid <> pg_backend_pid()`)
		if err != nil {
			return
		}
		seen := map[[2]string]int{}
		for rows.Next() {
			var wait, query string
			if rows.Scan(&wait, &query) == nil {
				seen[[2]string{wait, shortQuery(query)}]++
			}
		}
		rows.Close()
		s.mu.Lock()
		s.samples++
		for k, n := range seen {
			s.counts[k] += n
		}
		s.mu.Unlock()
	}
}

// shortQuery keeps a statement's first words, enough to recognize it.
func shortQuery(q string) string {
	q = strings.TrimSpace(spaces.ReplaceAllString(q, " "))
	if len(q) > 60 {
		q = q[:60] + "…"
	}
	return q
}

// Stop ends sampling and returns the top activities, most frequent first.
func (s *WaitSampler) Stop(top int) []WaitShare {
	close(s.stop)
	<-s.done
	_ = s.conn.Close(context.Background())
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.samples == 0 {
		return nil
	}
	out := make([]WaitShare, 0, len(s.counts))
	for k, n := range s.counts {
		out = append(out, WaitShare{Wait: k[0], Query: k[1], Avg: float64(int(float64(n)/float64(s.samples)*100+0.5)) / 100})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Avg > out[j].Avg })
	return out[:min(top, len(out))]
}
