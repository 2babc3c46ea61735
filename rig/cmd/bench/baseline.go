package main

// The baseline phase: PostgreSQL's own limit of the ingest workload, one-row
// inserts into inbox_events with a commit each, which the ingest ratios are
// measured against.

import (
	"context"
	"fmt"

	"github.com/fulfillplatform/fulfillment/rig/loadgen"
)

// baselineLevel runs the baseline at c clients on the real table, then
// (informational) with its NOTIFY trigger disabled.
func (b *bench) baselineLevel(ctx context.Context, c int) error {
	variants := []struct{ db, name string }{{"baseline", "baseline"}}
	if b.o.noNotify {
		variants = append(variants, struct{ db, name string }{"baseline_nonotify", "baseline, NOTIFY trigger disabled"})
	}
	for _, v := range variants {
		cpu0 := b.cpu.sample()
		waits := b.sampleWaits(ctx)
		res, err := loadgen.RunBaseline(ctx, loadgen.BaselineConfig{DatabaseURL: b.cluster.URL(v.db), Clients: c,
			ClosedConfig: loadgen.ClosedConfig{Workers: c, Warmup: b.o.warmup, Duration: b.o.phase}})
		ws := waits()
		if err != nil {
			return err
		}
		lvl := LoadLevel{Name: v.name, Concurrency: c, Seconds: round2(res.Elapsed.Seconds()), OK: res.OK,
			PerSecond: round1(res.Throughput()), Latency: res.Latency(), Non200: res.StatusCounts(), CPU: b.cpu.since(cpu0), Waits: ws}
		if v.db == "baseline" {
			b.baseline[c] = lvl
			b.rep.Baseline = append(b.rep.Baseline, lvl)
		} else {
			b.rep.BaselineNoNotify = append(b.rep.BaselineNoNotify, lvl)
		}
		b.logf("%s %2d clients: %7.0f rows/s  %s  cpu %s  errors %d", v.name, c, lvl.PerSecond, lvl.Latency, lvl.CPU, res.Errors)
		b.logWaits(fmt.Sprintf("%s %d", v.db, c), ws)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// fastestBaseline is the highest baseline rows/s measured so far (0 for
// none).
func (b *bench) fastestBaseline() float64 {
	best := 0.0
	for _, l := range b.baseline {
		best = max(best, l.PerSecond)
	}
	return best
}
