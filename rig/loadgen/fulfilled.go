package loadgen

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// FulfilledMethod says how the ack→fulfilled latency is measured: in the
// service's database, not by the client: processed_at − received_at of each inbox_events row. Both are
// stamped with clock_timestamp() by PostgreSQL itself — received_at by the
// insert that precedes the acknowledgement, processed_at by the processing
// transaction — so client clocks, scheduling and polling add nothing.
const FulfilledMethod = "ack→fulfilled = inbox_events.processed_at − received_at, both clock_timestamp() of the database (insert before the 200; processing commit)"

// EventKey is the part of the inbox key that a run's events share.
type EventKey struct {
	Provider    string // "yolfi"
	Org         string
	Environment string
}

// Timing is what the database recorded about one event.
type Timing struct {
	EventID     string
	State       string
	Decision    string
	ReceivedAt  time.Time
	ProcessedAt time.Time // zero while pending
}

// Latency is processed − received, or 0 while pending.
func (t Timing) Latency() time.Duration {
	if t.ProcessedAt.IsZero() {
		return 0
	}
	return t.ProcessedAt.Sub(t.ReceivedAt)
}

// Timings reads the inbox rows of ids (looked up through the unique event
// key, so it stays an index lookup however long the history).
func Timings(ctx context.Context, db *pgxpool.Pool, key EventKey, ids []string) ([]Timing, error) {
	var out []Timing
	for chunk := range slices.Chunk(ids, 5000) {
		rows, err := db.Query(ctx, `
			SELECT event_id, state, coalesce(decision, ''), received_at, processed_at
			FROM inbox_events
			WHERE provider = $1 AND org_id = $2 AND environment = $3 AND event_id = ANY($4)`,
			key.Provider, key.Org, key.Environment, chunk)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var t Timing
			var processed *time.Time
			if err := rows.Scan(&t.EventID, &t.State, &t.Decision, &t.ReceivedAt, &processed); err != nil {
				rows.Close()
				return nil, err
			}
			if processed != nil {
				t.ProcessedAt = *processed
			}
			out = append(out, t)
		}
		if err := rows.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Pending counts the inbox events waiting to be processed (their work
// rows: cheap whatever the history).
func Pending(ctx context.Context, db *pgxpool.Pool) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM inbox_work WHERE state = 'pending'`).Scan(&n)
	return n, err
}

// ErrBacklog is returned by Drain when events are still pending at its deadline.
var ErrBacklog = errors.New("inbox events still pending")

// Drain waits until no inbox event is pending, for at most timeout.
func Drain(ctx context.Context, db *pgxpool.Pool, timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		n, err := Pending(ctx, db)
		if err != nil {
			return time.Since(start), err
		}
		if n == 0 {
			return time.Since(start), nil
		}
		if time.Since(start) > timeout {
			return time.Since(start), fmt.Errorf("%w: %d after %v", ErrBacklog, n, timeout)
		}
		select {
		case <-ctx.Done():
			return time.Since(start), ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// FulfilledReport summarizes the database-side processing of a set of events.
type FulfilledReport struct {
	Latency   Summary        `json:"latency"`
	Pending   int            `json:"pending"` // not processed when read
	Decisions map[string]int `json:"decisions"`
}

// Fulfilled summarizes ack→fulfilled latencies of timings (see FulfilledMethod).
func Fulfilled(ts []Timing) FulfilledReport {
	r := FulfilledReport{Decisions: map[string]int{}}
	var lat []time.Duration
	for _, t := range ts {
		if t.ProcessedAt.IsZero() {
			r.Pending++
			continue
		}
		lat = append(lat, t.Latency())
		r.Decisions[t.Decision]++
	}
	r.Latency = Summarize(lat)
	return r
}

// PerSecond counts, for each whole second from `from`, the timings whose
// processed_at falls in it.
func PerSecond(ts []Timing, from, to time.Time) []int {
	if !to.After(from) {
		return nil
	}
	buckets := make([]int, int(to.Sub(from)/time.Second))
	for _, t := range ts {
		if t.ProcessedAt.IsZero() || t.ProcessedAt.Before(from) {
			continue
		}
		if i := int(t.ProcessedAt.Sub(from) / time.Second); i < len(buckets) {
			buckets[i]++
		}
	}
	return buckets
}

// ReceivedSpan returns the first and last received_at of timings.
func ReceivedSpan(ts []Timing) (first, last time.Time) {
	for _, t := range ts {
		if first.IsZero() || t.ReceivedAt.Before(first) {
			first = t.ReceivedAt
		}
		if t.ReceivedAt.After(last) {
			last = t.ReceivedAt
		}
	}
	return first, last
}

// LastProcessed returns the latest processed_at of timings.
func LastProcessed(ts []Timing) time.Time {
	var last time.Time
	for _, t := range ts {
		if t.ProcessedAt.After(last) {
			last = t.ProcessedAt
		}
	}
	return last
}

// ConnectDB opens a small pool on the service's database for measurements.
func ConnectDB(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	return pgxpool.NewWithConfig(ctx, cfg)
}
