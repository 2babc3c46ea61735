package loadgen

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fulfillplatform/fulfillment/outbox"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

// Arrivals records when a receiver first saw each webhook-id: the moment a
// downstream system acts on a delivery. Give its Plan to
// receiver.Options.Plan. It is safe for concurrent use.
type Arrivals struct {
	mu      sync.Mutex
	first   map[string]time.Time
	repeats int
}

// NewArrivals returns an empty record.
func NewArrivals() *Arrivals { return &Arrivals{first: map[string]time.Time{}} }

// Plan is a receiver.Plan: it records a verified request of key, which
// the receiver then applies and answers 200.
func (a *Arrivals) Plan(key string, _ int) receiver.Action {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.first[key]; ok {
		a.repeats++
	} else {
		a.first[key] = now
	}
	return receiver.Action{}
}

// Repeats counts the verified requests that came after the first of their
// key: with no failure anywhere, none.
func (a *Arrivals) Repeats() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.repeats
}

// Times returns the arrival times of the keys that arrived, and how many
// have not.
func (a *Arrivals) Times(keys []string) (times []time.Time, missing int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range keys {
		if t, ok := a.first[k]; ok {
			times = append(times, t)
		} else {
			missing++
		}
	}
	return times, missing
}

// Wait waits until every key has arrived, for at most timeout, and returns
// how many have not.
func (a *Arrivals) Wait(ctx context.Context, keys []string, timeout time.Duration) int {
	deadline := time.Now().Add(timeout)
	for {
		_, missing := a.Times(keys)
		if missing == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return missing
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Lags returns, in the order of keys, the arrival of each key that arrived
// minus its from (from[i] for keys[i]), and how many keys have not arrived.
func (a *Arrivals) Lags(keys []string, from []time.Time) (lags []time.Duration, missing int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, k := range keys {
		if t, ok := a.first[k]; ok {
			lags = append(lags, t.Sub(from[i]))
		} else {
			missing++
		}
	}
	return lags, missing
}

// SteadyRate is the rate at which the middle 80% of times came: the number
// of times between the 10th and the 90th percentile over the time between
// them, leaving out the ramp-up at the start and the stragglers at the end.
// It is 0 with fewer than 10 times or when they all fall together.
func SteadyRate(times []time.Time) float64 {
	if len(times) < 10 {
		return 0
	}
	ts := slices.Clone(times)
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	lo, hi := len(ts)/10, len(ts)*9/10
	d := ts[hi].Sub(ts[lo])
	if d <= 0 {
		return 0
	}
	return float64(hi-lo) / d.Seconds()
}

// Span is the time from the earliest to the latest of times.
func Span(times []time.Time) time.Duration {
	if len(times) == 0 {
		return 0
	}
	return slices.MaxFunc(times, time.Time.Compare).Sub(slices.MinFunc(times, time.Time.Compare))
}

// RunDirect posts each of msgs once to d with s, from workers concurrent
// closed-loop senders, for at most timeout: the cost of a delivery without
// the outbox (signing and HTTP, no database). A Delivered verdict counts
// as status 200, another answer as its status, no answer as an error.
func RunDirect(ctx context.Context, s *outbox.Sender, d outbox.Destination, msgs []outbox.Message, workers int, timeout time.Duration) Result {
	var next atomic.Int64
	return RunClosed(ctx, ClosedConfig{Workers: workers, Duration: timeout}, func(ctx context.Context, _ int) (int, error) {
		i := int(next.Add(1) - 1)
		if i >= len(msgs) {
			return 0, ErrStop
		}
		r := s.Send(ctx, d, msgs[i])
		switch {
		case r.Verdict == outbox.Delivered:
			return http.StatusOK, nil
		case r.Status != 0:
			return r.Status, nil
		}
		return 0, errors.New(r.Reason)
	})
}

// PendingMessages returns the pending outbox messages of destination (at
// most limit): their keys and payloads as the dispatcher would send them.
func PendingMessages(ctx context.Context, db *pgxpool.Pool, destination string, limit int) ([]outbox.Message, error) {
	rows, err := db.Query(ctx, `
		SELECT idempotency_key, topic, payload::text FROM outbox_messages
		WHERE destination_id = $1 AND state = 'pending' ORDER BY id LIMIT $2`, destination, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var msgs []outbox.Message
	for rows.Next() {
		var m outbox.Message
		var payload string
		if err := rows.Scan(&m.Key, &m.Topic, &payload); err != nil {
			return nil, err
		}
		m.Payload = []byte(payload)
		msgs = append(msgs, m)
	}
	return msgs, rows.Err()
}

// DBCounters are cumulative statistics of the database a pool is connected
// to (pg_stat_database), and the WAL written by the whole cluster
// (pg_stat_wal): the difference of two readings is what happened between
// them.
type DBCounters struct {
	Transactions int64 `json:"transactions"` // committed
	Inserted     int64 `json:"rows_inserted"`
	Updated      int64 `json:"rows_updated"`
	Blocks       int64 `json:"blocks_accessed"` // shared buffers hit or read
	WALBytes     int64 `json:"wal_bytes"`
}

// Sub returns c − o.
func (c DBCounters) Sub(o DBCounters) DBCounters {
	return DBCounters{c.Transactions - o.Transactions, c.Inserted - o.Inserted, c.Updated - o.Updated,
		c.Blocks - o.Blocks, c.WALBytes - o.WALBytes}
}

// Per divides each counter by n.
func (c DBCounters) Per(n int) PerItem {
	if n <= 0 {
		return PerItem{}
	}
	f := func(x int64) float64 { return round3(float64(x) / float64(n)) }
	return PerItem{f(c.Transactions), f(c.Inserted), f(c.Updated), f(c.Blocks), f(c.WALBytes)}
}

// PerItem is DBCounters divided by a number of items.
type PerItem struct {
	Transactions float64 `json:"transactions"`
	Inserted     float64 `json:"rows_inserted"`
	Updated      float64 `json:"rows_updated"`
	Blocks       float64 `json:"blocks_accessed"`
	WALBytes     float64 `json:"wal_bytes"`
}

func (p PerItem) String() string {
	return fmt.Sprintf("%.2f commits, %.2f rows inserted, %.2f updated, %.0f buffer accesses, %.0f B WAL",
		p.Transactions, p.Inserted, p.Updated, p.Blocks, p.WALBytes)
}

// ReadDBCounters reads the counters once the other sessions have reported
// theirs: a session publishes its statistics when it ends, or when it is
// idle, at most once a second. So it reads until two readings statsDelay
// apart agree (for at most 5 s): call it when the database is otherwise
// idle. The readings themselves add a transaction each.
func ReadDBCounters(ctx context.Context, db *pgxpool.Pool) (DBCounters, error) {
	var prev DBCounters
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		var c DBCounters
		err := db.QueryRow(ctx, `
			SELECT d.xact_commit, d.tup_inserted, d.tup_updated, d.blks_hit + d.blks_read, w.wal_bytes::bigint
			FROM pg_stat_database d, pg_stat_wal w WHERE d.datname = current_database()`).
			Scan(&c.Transactions, &c.Inserted, &c.Updated, &c.Blocks, &c.WALBytes)
		if err != nil {
			return c, err
		}
		if i > 0 && c.Inserted == prev.Inserted && c.Updated == prev.Updated || time.Now().After(deadline) {
			return c, nil
		}
		prev = c
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(statsDelay):
		}
	}
}

// statsDelay is longer than PostgreSQL's shortest interval between two
// statistics reports of a session (PGSTAT_MIN_INTERVAL, 1 s).
const statsDelay = 1100 * time.Millisecond
