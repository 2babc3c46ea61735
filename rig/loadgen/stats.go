// Package loadgen drives a running fulfillmentd like payment providers and
// internal callers would, and measures it: building orders and signed Yolfi
// events, closed-loop and open-loop runners, exact percentiles, and the
// database-side ack→fulfilled measurement. rig/cmd/loadgen is a thin CLI over it;
// rig/cmd/bench orchestrates whole benchmark runs with it.
package loadgen

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// Summary describes a latency distribution. Percentiles are exact: the
// samples are sorted and the nearest-rank value is taken (p99 of 1,000
// samples is the 990th smallest), so no histogram bucket rounds them.
type Summary struct {
	N    int
	Mean time.Duration
	P50  time.Duration
	P90  time.Duration
	P99  time.Duration
	P999 time.Duration
	Max  time.Duration
}

// Summarize sorts a copy of ds and returns its summary. An empty input gives
// a zero Summary (N = 0).
func Summarize(ds []time.Duration) Summary {
	if len(ds) == 0 {
		return Summary{}
	}
	xs := slices.Clone(ds)
	slices.Sort(xs)
	var sum float64
	for _, d := range xs {
		sum += float64(d)
	}
	return Summary{
		N:    len(xs),
		Mean: time.Duration(sum / float64(len(xs))),
		P50:  Percentile(xs, 0.50),
		P90:  Percentile(xs, 0.90),
		P99:  Percentile(xs, 0.99),
		P999: Percentile(xs, 0.999),
		Max:  xs[len(xs)-1],
	}
}

// Percentile returns the nearest-rank q-quantile (0 < q ≤ 1) of sorted
// samples: the smallest sample with at least q of all samples at or below it.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// Ms converts a duration to float milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// String formats the summary in milliseconds.
func (s Summary) String() string {
	if s.N == 0 {
		return "no samples"
	}
	return fmt.Sprintf("n=%d p50=%.2fms p90=%.2fms p99=%.2fms p99.9=%.2fms max=%.2fms",
		s.N, Ms(s.P50), Ms(s.P90), Ms(s.P99), Ms(s.P999), Ms(s.Max))
}

// MarshalJSON writes the summary in milliseconds.
func (s Summary) MarshalJSON() ([]byte, error) {
	return json.Marshal(summaryJSON{s.N, round3(Ms(s.Mean)), round3(Ms(s.P50)), round3(Ms(s.P90)), round3(Ms(s.P99)), round3(Ms(s.P999)), round3(Ms(s.Max))})
}

// summaryJSON is a Summary as written, in milliseconds.
type summaryJSON struct {
	N      int     `json:"n"`
	MeanMs float64 `json:"mean_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	P999Ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
}

// UnmarshalJSON reads what MarshalJSON wrote (to the microsecond).
func (s *Summary) UnmarshalJSON(data []byte) error {
	var j summaryJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	d := func(ms float64) time.Duration { return time.Duration(math.Round(ms*1e3)) * time.Microsecond }
	*s = Summary{N: j.N, Mean: d(j.MeanMs), P50: d(j.P50Ms), P90: d(j.P90Ms), P99: d(j.P99Ms), P999: d(j.P999Ms), Max: d(j.MaxMs)}
	return nil
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
