package main

// The saturating push: the most events per second the processor fulfils
// while full-speed ingest keeps its backlog from emptying, and what each
// event costs (CPU, statements).

import (
	"cmp"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fulfillplatform/fulfillment/rig/loadgen"
)

// sustained pushes new payment.confirmed events as fast as push-workers
// closed-loop clients can, and measures how many events per second the
// processor completes while the backlog is never empty.
func (b *bench) sustained(ctx context.Context) error {
	w := b.o.pushWorkers
	// The push ends when its orders run out: enough for the whole duration
	// at the highest rate seen so far, with headroom — twice that when no
	// level ran as many clients as the push (its redeliveries aside, a
	// push of only new events goes faster still).
	headroom := 1.15
	if b.yolfi.lastC < w {
		headroom = 2
	}
	guess := max(b.peakIngest, b.maxAccepted, 300) * headroom
	orders, err := b.createOrders(ctx, int(guess*b.o.push.Seconds())+200)
	if err != nil {
		return err
	}
	b.ready(ctx)
	if b.o.statements {
		if err := loadgen.ResetStatements(ctx, b.t.db); err != nil {
			return err
		}
	}
	gc0, gcErr := b.t.svc.receiptBatches(ctx)
	reserveErr := reserveWAL(ctx, b.t.db)
	if reserveErr != nil {
		b.warn("push: the WAL could not be kept for its breakdown: %v", reserveErr)
	} else {
		// Whatever ends the push, the slot goes: kept, it would hold
		// every later segment of the cluster.
		defer func() {
			if err := releaseWAL(context.WithoutCancel(ctx), b.t.db); err != nil {
				b.warn("push: the WAL kept for its breakdown could not be let go: %v", err)
			}
		}()
	}
	wal0, err := loadgen.WALBytes(ctx, b.t.db)
	if err != nil {
		return err
	}
	fpi0, ckpt0, err := loadgen.WALImages(ctx, b.t.db)
	if err != nil {
		return err
	}
	upd0, err := loadgen.ReadTableUpdates(ctx, b.t.db)
	if err != nil {
		return err
	}
	mix := loadgen.NewMix(b.src, orders, 0, 0)
	mix.StopWhenExhausted = true
	prof := b.profile(ctx, "push", b.o.push)
	cpu0 := b.cpu.sample()
	waits := b.sampleWaits(ctx)
	res := loadgen.RunClosed(ctx, loadgen.ClosedConfig{Workers: w, Duration: b.o.push},
		func(ctx context.Context, _ int) (int, error) { return mix.Send(ctx, b.t.sender, true) })
	pushWaits := waits()
	prof()
	cpuPush := b.cpu.since(cpu0)
	cpu1 := b.cpu.sample()
	waits = b.sampleWaits(ctx)
	drainSecs := b.drain(ctx, "the saturating push")
	drained := time.Now()
	drainWaits := waits()
	cpuDrain := b.cpu.since(cpu1)
	cpu2 := b.cpu.sample()
	wal1, err := loadgen.WALBytes(ctx, b.t.db)
	if err != nil {
		return err
	}
	fpi1, ckpt1, err := loadgen.WALImages(ctx, b.t.db)
	if err != nil {
		return err
	}
	b.logWaits("push", pushWaits)
	b.logWaits("drain", drainWaits)
	var statements []loadgen.StatementCost
	var allStatements loadgen.StatementCost
	if b.o.statements {
		// Read before the bench's own queries below; every event the push
		// sent was acknowledged, and the drain processed it.
		if statements, allStatements, err = loadgen.StatementCosts(ctx, b.t.db, len(mix.NewIDs()), 24); err != nil {
			return err
		}
		// pg_stat_statements does not see a BEGIN or a COMMIT sent in a
		// pipeline, with the extended protocol, as a group commit decided
		// on receipt sends them: 2 per group commit decided, at least 1
		// (its BEGIN) per one queued instead.
		gc1, err := b.t.svc.receiptBatches(ctx)
		switch {
		case gcErr != nil || err != nil:
			b.warn("push: the group commits could not be counted, their BEGIN and COMMIT are missing from the statements: %v", errors.Join(gcErr, err))
		case gc1 != nil:
			var n float64
			for outcome, v := range gc1 {
				per := 1.0
				if outcome == "decided" {
					per = 2
				}
				n += per * (v - gc0[outcome])
			}
			unseen := loadgen.StatementCost{Query: "BEGIN and COMMIT sent pipelined (not seen by pg_stat_statements: counted from the group commits)",
				Calls: n / float64(len(mix.NewIDs()))}
			statements = append(statements, unseen)
			allStatements.Calls += unseen.Calls
		}
	}
	// After the statements' costs, which the bench's own queries would
	// join: the update counts, once the backends have reported them.
	upd1, err := settledTableUpdates(ctx, b.t.db, drained)
	if err != nil {
		return err
	}
	if mix.Exhausted() > 0 && res.Elapsed < b.o.push*3/4 {
		b.warn("push: the %d pre-created orders ran out after %.1fs", len(orders), res.Elapsed.Seconds())
	}
	ts, err := loadgen.Timings(ctx, b.t.db, b.key, mix.NewIDs())
	if err != nil {
		return err
	}
	first, last := loadgen.ReceivedSpan(ts)
	s := &Sustained{Workers: w, PushSeconds: round2(res.Elapsed.Seconds()), IngestPerSecond: round1(res.Throughput()),
		DrainSeconds: drainSecs, CPU: cpuPush, CPUDrain: cpuDrain, Waits: pushWaits, DrainWaits: drainWaits,
		Statements: statements, Updates: upd1.Since(upd0)}
	if b.o.statements {
		s.StatementsTotal = &allStatements
	}
	f := loadgen.Fulfilled(ts)
	s.Decisions = f.Decisions
	if s.Events = f.Latency.N; s.Events > 0 {
		// Every event of the push, acknowledged then processed, over the
		// push and the drain; pending ones (a drain cut short) are left out.
		s.ServiceUsPerEvent = round1((cpu2.service - cpu0.service) / float64(s.Events) * 1e6)
		s.PostgresUsPerEvent = round1((cpu2.postgres - cpu0.postgres) / float64(s.Events) * 1e6)
		s.WALBytesPerEvent = round1(float64(wal1-wal0) / float64(s.Events))
		s.WALImagesPerEvent = round2(float64(fpi1-fpi0) / float64(s.Events))
		s.Checkpoints = ckpt1 - ckpt0
	}
	if reserveErr == nil && s.Events > 0 {
		if s.WAL, err = walBreakdown(ctx, b.t.db, filepath.Join(b.tmp, "pg", "data"), wal0, wal1, s.Events); err != nil {
			b.warn("push: no WAL breakdown: %v", err)
		}
	}
	// Under load: from the end of the ramp-up to the last receipt, the
	// processor competes with full-speed ingest.
	from := underLoadFrom(first, last)
	if last.Sub(from) >= time.Second {
		buckets := loadgen.PerSecond(ts, from, last)
		s.PerSecondBuckets = buckets
		total := 0
		for _, n := range buckets {
			total += n
		}
		s.FulfilledPerSec = round1(float64(total) / float64(len(buckets)))
		s.FulfilledPerSecMd = float64(median(buckets))
	}
	processedByEnd := 0
	for _, t := range ts {
		if !t.ProcessedAt.IsZero() && !t.ProcessedAt.After(last) {
			processedByEnd++
		}
	}
	s.BacklogAtPushEnd = len(ts) - processedByEnd
	s.ProcessingKeptUp = float64(s.BacklogAtPushEnd) < max(s.IngestPerSecond*0.25, 20)
	if lp := loadgen.LastProcessed(ts); lp.Sub(last) > 500*time.Millisecond && s.BacklogAtPushEnd > 0 {
		s.DrainPerSecond = round1(float64(s.BacklogAtPushEnd) / lp.Sub(last).Seconds())
	}
	b.rep.Sustained = s
	b.logf("push %d workers: ingest %.0f/s; fulfilled under load %.0f/s (median bucket %.0f), drain %.0f/s, backlog at end %d, cpu push %s drain %s",
		w, s.IngestPerSecond, s.FulfilledPerSec, s.FulfilledPerSecMd, s.DrainPerSecond, s.BacklogAtPushEnd, cpuPush, cpuDrain)
	return ctx.Err()
}

// settledTableUpdates reads the tables' update counts once the backends
// have reported them: a busy backend reports its counts at most once a
// second, an idle one within 10 s (PostgreSQL 15), so the reading waits
// until 11 s past idle, the end of the drain. (Readings a second apart
// agreed well before that, with a quarter of the updates unreported.)
func settledTableUpdates(ctx context.Context, db *pgxpool.Pool, idle time.Time) (loadgen.TableUpdates, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Until(idle.Add(11 * time.Second))):
	}
	return loadgen.ReadTableUpdates(ctx, db)
}

// median is the middle of xs (the upper one of an even count; zero for
// none); xs is left as it was.
func median[T cmp.Ordered](xs []T) T {
	if len(xs) == 0 {
		var zero T
		return zero
	}
	return slices.Sorted(slices.Values(xs))[len(xs)/2]
}

// underLoadFrom is when the sustained rate of a push whose receipts span
// first to last starts counting: one second in (the ramp-up), or a quarter
// of the span when it is shorter than four seconds, so that a short push
// (--quick's two seconds) keeps a whole second to count; one shorter than
// about 1.3 s keeps none, and the rate is not measured.
func underLoadFrom(first, last time.Time) time.Time {
	return first.Add(min(time.Second, last.Sub(first)/4))
}
