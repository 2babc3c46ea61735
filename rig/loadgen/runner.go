package loadgen

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"sync"
	"time"
)

// Request performs one request and returns its status: an HTTP status code,
// or for gRPC 200 on success and the code's number + 1000 otherwise. An error
// (transport failure, timeout) is counted apart from the statuses. worker is
// the calling worker's number (closed loop) or the request's index (open
// loop).
type Request func(ctx context.Context, worker int) (status int, err error)

// ErrStop is what a Request returns when the generator has nothing left to
// send (e.g. no order left): it ends the calling worker without counting the
// request.
var ErrStop = errors.New("loadgen: nothing left to send")

// Result is what a runner measured. Only requests inside the measured
// window count: those that completed after the warm-up (closed loop), or
// that were scheduled after it (open loop).
type Result struct {
	// Elapsed is the measured window.
	Elapsed time.Duration
	// Requests is the number of measured requests that completed (with any
	// status) or failed.
	Requests int
	// OK is the number answered 200.
	OK int
	// Statuses counts every status other than 200.
	Statuses map[int]int
	// Errors counts transport failures and timeouts.
	Errors int
	// Latencies of the requests answered 200: from the request's start
	// (closed loop) or from its scheduled send time (open loop).
	Latencies []time.Duration
	// Open loop only: Offered is the configured rate; Late counts requests
	// that could not be sent within OpenConfig.LateAfter of their scheduled
	// time (every in-flight slot busy, or the generator itself starved);
	// Unsent counts requests never sent because the run hit its cutoff.
	Offered float64
	Late    int
	Unsent  int
}

// Throughput is the rate of 200 answers over the measured window.
func (r Result) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OK) / r.Elapsed.Seconds()
}

// Non200 counts measured requests not answered 200, errors included.
func (r Result) Non200() int {
	n := r.Errors
	for _, c := range r.Statuses {
		n += c
	}
	return n
}

// Latency summarizes the latencies of the 200 answers.
func (r Result) Latency() Summary { return Summarize(r.Latencies) }

// Merge takes runs together as one: their counts and latencies pooled,
// their measured windows added, the offered rate the first's.
func Merge(runs ...Result) Result {
	r := Result{Statuses: map[int]int{}}
	for i := range runs {
		r.merge(&runs[i])
		r.Elapsed += runs[i].Elapsed
		r.Unsent += runs[i].Unsent
	}
	if len(runs) > 0 {
		r.Offered = runs[0].Offered
	}
	return r
}

func (r *Result) merge(o *Result) {
	r.Requests += o.Requests
	r.OK += o.OK
	r.Errors += o.Errors
	r.Late += o.Late
	r.Latencies = append(r.Latencies, o.Latencies...)
	if r.Statuses == nil {
		r.Statuses = map[int]int{}
	}
	for k, v := range o.Statuses {
		r.Statuses[k] += v
	}
}

func (r *Result) record(status int, err error, lat time.Duration) {
	r.Requests++
	switch {
	case err != nil:
		r.Errors++
	case status == http.StatusOK:
		r.OK++
		r.Latencies = append(r.Latencies, lat)
	default:
		if r.Statuses == nil {
			r.Statuses = map[int]int{}
		}
		r.Statuses[status]++
	}
}

// ClosedConfig configures a closed-loop run: Workers workers each send a
// request, wait for its answer, and send the next one.
type ClosedConfig struct {
	Workers  int
	Warmup   time.Duration // requests completing before this are not measured
	Duration time.Duration // measured window after the warm-up
}

// RunClosed runs do in a closed loop. Throughput counts the requests that
// completed inside the measured window; their latency runs from the
// request's start. It returns early, with what it measured, when ctx ends
// or when every worker got ErrStop (Elapsed is then the shorter window).
func RunClosed(ctx context.Context, cfg ClosedConfig, do Request) Result {
	start := time.Now()
	measureFrom := start.Add(cfg.Warmup)
	end := measureFrom.Add(cfg.Duration)
	runCtx, cancel := context.WithDeadline(ctx, end.Add(30*time.Second)) // bounds a hung last request
	defer cancel()
	results := make([]Result, cfg.Workers)
	var wg sync.WaitGroup
	for w := range cfg.Workers {
		wg.Go(func() {
			res := &results[w]
			for runCtx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				status, err := do(runCtx, w)
				t1 := time.Now()
				if errors.Is(err, ErrStop) {
					return
				}
				if t1.Before(measureFrom) || t1.After(end) {
					continue // warm-up, or past the window
				}
				if runCtx.Err() != nil && err != nil {
					return // cancelled: not the service's failure
				}
				res.record(status, err, t1.Sub(t0))
			}
		})
	}
	wg.Wait()
	total := Merge(results...)
	total.Elapsed = min(time.Since(measureFrom), cfg.Duration)
	if ctx.Err() != nil {
		total.Elapsed = max(time.Since(measureFrom), 0)
	}
	return total
}

// OpenConfig configures an open-loop run: requests are scheduled at a fixed
// rate whatever the answers, and latency runs from the scheduled time, so a
// service (or a generator) that falls behind cannot hide the delay
// (coordinated omission).
type OpenConfig struct {
	Rate     float64       // requests per second
	Duration time.Duration // requests are scheduled over this long
	Warmup   time.Duration // requests scheduled before this are sent but not measured
	// MaxInFlight bounds concurrent requests (default 256), so a stalled
	// service cannot make the generator explode: past it, requests wait for
	// a free slot and their wait counts in their latency.
	MaxInFlight int
	// LateAfter is how far past its scheduled time a request may start
	// before it counts as late (default 5ms).
	LateAfter time.Duration
	// Grace is how long past Duration requests may still start (default:
	// Duration); the rest are counted as Unsent.
	Grace time.Duration
}

// OpenTotal is the number of requests an open-loop run schedules.
func (cfg OpenConfig) OpenTotal() int { return int(cfg.Rate * (cfg.Warmup + cfg.Duration).Seconds()) }

// FirstMeasured is the index of the first measured request of a run.
func (cfg OpenConfig) FirstMeasured() int { return int(cfg.Rate * cfg.Warmup.Seconds()) }

type job struct {
	i     int
	sched time.Time
}

// RunOpen runs do in an open loop: request i (0 ≤ i < OpenTotal) is
// scheduled at start + i/Rate and do receives i. Elapsed is the scheduled
// (measured) duration, or longer when the answers came later.
func RunOpen(ctx context.Context, cfg OpenConfig, do Request) Result {
	if cfg.MaxInFlight <= 0 {
		cfg.MaxInFlight = 256
	}
	if cfg.LateAfter <= 0 {
		cfg.LateAfter = 5 * time.Millisecond
	}
	if cfg.Grace <= 0 {
		cfg.Grace = cfg.Duration
	}
	total, first := cfg.OpenTotal(), cfg.FirstMeasured()
	interval := time.Duration(float64(time.Second) / cfg.Rate)
	start := time.Now()
	measureFrom := start.Add(cfg.Warmup)
	cutoff := measureFrom.Add(cfg.Duration + cfg.Grace)
	runCtx, cancel := context.WithDeadline(ctx, cutoff.Add(30*time.Second))
	defer cancel()

	jobs := make(chan job)
	results := make([]Result, cfg.MaxInFlight)
	lastDone := make([]time.Time, cfg.MaxInFlight)
	var wg sync.WaitGroup
	for w := range cfg.MaxInFlight {
		wg.Go(func() {
			res := &results[w]
			for j := range jobs {
				started := time.Now()
				status, err := do(runCtx, j.i)
				done := time.Now()
				if j.i < first || errors.Is(err, ErrStop) {
					continue
				}
				if started.Sub(j.sched) > cfg.LateAfter {
					res.Late++
				}
				if runCtx.Err() != nil && err != nil {
					continue
				}
				res.record(status, err, done.Sub(j.sched))
				lastDone[w] = done
			}
		})
	}
	unsent := 0
	timer := time.NewTimer(0)
	<-timer.C
dispatch:
	for i := range total {
		sched := start.Add(time.Duration(i) * interval)
		if d := time.Until(sched); d > 0 {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				unsent = total - i
				break dispatch
			}
		}
		select {
		case jobs <- job{i, sched}:
		case <-time.After(time.Until(cutoff)):
			unsent = total - i
			break dispatch
		case <-ctx.Done():
			unsent = total - i
			break dispatch
		}
	}
	close(jobs)
	wg.Wait()
	res := Merge(results...)
	res.Offered, res.Unsent = cfg.Rate, unsent
	end := measureFrom.Add(cfg.Duration)
	for _, done := range lastDone {
		if done.After(end) {
			end = done
		}
	}
	res.Elapsed = end.Sub(measureFrom)
	return res
}

// StatusCounts returns a copy of the non-200 statuses, errors under key -1.
func (r Result) StatusCounts() map[int]int {
	m := maps.Clone(r.Statuses)
	if m == nil {
		m = map[int]int{}
	}
	if r.Errors > 0 {
		m[-1] = r.Errors
	}
	return m
}
