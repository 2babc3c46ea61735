package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Speed is how long a fixed piece of CPU work takes on one thread, in the
// bench's own process and in PostgreSQL. The bench takes it before
// anything is measured and again at the end: this machine's cores are
// shared with other tenants, and in a slow hour each statement takes about
// twice as long (the full run of 12ddefb), which moves every figure in
// time — CPU µs per event, latencies, the baselines — by more than some
// goals' margins. Two runs' figures in time compare only at like speeds;
// the machine-independent ones (statements, WAL, buffers) at any.
type Speed struct {
	// GoNs is one HMAC-SHA256 of a 600-byte body, in ns.
	GoNs float64 `json:"go_hmac_600b_ns"`
	// PGMs is SELECT sum(i) FROM generate_series(1, 1000000), in ms: the
	// executor, memory, and a temporary file (the generated rows spill
	// at the default work_mem).
	PGMs float64 `json:"pg_sum_1m_ms"`
}

// speedRounds is how many times each piece of work is timed; the median
// counts.
const speedRounds = 5

// speedTimeout bounds one measurement of the speed (about 2 s at this
// machine's usual pace).
const speedTimeout = 30 * time.Second

// measureSpeed times the two pieces of work, PostgreSQL's on the cluster's
// postgres database.
func (b *bench) measureSpeed(ctx context.Context) (Speed, error) {
	ctx, cancel := context.WithTimeout(ctx, speedTimeout)
	defer cancel()
	var s Speed
	body, key := make([]byte, 600), []byte("bench-speed-key")
	var goRounds []float64
	for range speedRounds {
		const n = 20000
		mac := hmac.New(sha256.New, key)
		start := time.Now()
		for range n {
			mac.Reset()
			mac.Write(body)
			body[0] = mac.Sum(nil)[0] // keeps the work from being optimized away
		}
		goRounds = append(goRounds, float64(time.Since(start).Nanoseconds())/n)
	}
	s.GoNs = median(goRounds)
	conn, err := pgx.Connect(ctx, b.cluster.URL("postgres"))
	if err != nil {
		return s, err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var pgRounds []float64
	for range speedRounds {
		start := time.Now()
		var sum int64
		if err := conn.QueryRow(ctx, "SELECT sum(i) FROM generate_series(1, 1000000) AS i").Scan(&sum); err != nil {
			return s, err
		}
		pgRounds = append(pgRounds, float64(time.Since(start).Microseconds())/1000)
	}
	s.PGMs = median(pgRounds)
	return s, nil
}

// speedNow is the machine's speed now (measureSpeed); nil, with a
// warning, when it could not be measured.
func (b *bench) speedNow(ctx context.Context) *Speed {
	sp, err := b.measureSpeed(ctx)
	if err != nil {
		b.warn("measuring the machine's speed: %v", err)
		return nil
	}
	return &sp
}

// speedDrift is by how much the machine's speed may move between the
// start and the end of a run before the bench warns.
const speedDrift = 0.25

// checkSpeed warns when the machine was slower or faster at the end of the
// run than at its start by more than speedDrift, on either piece of work.
func (b *bench) checkSpeed(start, end Speed) {
	for _, c := range []struct {
		what   string
		before float64
		after  float64
		unit   string
	}{
		{"an HMAC in the bench's process", start.GoNs, end.GoNs, "ns"},
		{"PostgreSQL's sum over a million rows", start.PGMs, end.PGMs, "ms"},
	} {
		if c.before <= 0 || c.after <= 0 {
			continue
		}
		if r := c.after / c.before; r > 1+speedDrift || r < 1/(1+speedDrift) {
			b.warn("the machine's speed moved during the run: %s took %.1f %s at the start and %.1f %s at the end; figures in time measured at different moments do not compare",
				c.what, c.before, c.unit, c.after, c.unit)
		}
	}
}

// speedLine describes the two measurements for the report.
func speedLine(start, end *Speed) string {
	if start == nil {
		return "not measured"
	}
	line := fmt.Sprintf("one thread, median of %d: an HMAC-SHA256 of 600 bytes %.0f ns, PostgreSQL's sum over generate_series(1, 1000000) %.1f ms at the start",
		speedRounds, start.GoNs, start.PGMs)
	if end != nil {
		line += fmt.Sprintf("; %.0f ns and %.1f ms at the end", end.GoNs, end.PGMs)
	}
	return line + " (more is slower)"
}
