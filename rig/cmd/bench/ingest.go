package main

// The ingest phase: signed Yolfi and T-Bank webhooks through the HTTP
// gateway, closed loop at each concurrency (also on a service whose inbox
// processor is paused) and open loop at half of Yolfi's peak.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/rig/loadgen"
)

// provider is a webhook provider of the ingest sweep: its endpoint's signed
// events, the orders they pay, and its levels.
type provider struct {
	name   string // as the table shows it
	key    string // inbox_events.provider
	src    loadgen.Source
	order  func(org, env, mid string) *fulfillmentv1.CreateOrderRequest
	sender func(*target) *loadgen.Sender
	levels map[int]IngestLevel // by concurrency
	lastC  int                 // the concurrency measured last
	on     *target             // the service it is sent to; nil: the main one
	at     []int               // the concurrencies it runs at; nil: all
	report *[]IngestLevel      // where the report lists its levels
}

// pausedAt are the concurrencies of the ingest levels with the inbox
// processor paused: the goal's (pausedGoalAt), and one client, to show
// what processing adds to one client's latency.
var (
	pausedAt     = []int{1, 32, 64}
	pausedGoalAt = []int{32, 64}
)

// ordersFor estimates how many orders a closed-loop webhook run of p at c
// clients will use: its likely rate (from p's previous level, scaled by the
// concurrency, with headroom), over the run, for the share of first
// deliveries. Too few only shortens the measured window (the run stops
// when they run out, with a warning), unless they run out before it starts:
// a first level with nothing to go by (no level measured, no baseline yet)
// assumes 600/s per client (1,500/s with the processor paused), up to the
// limit.
func (b *bench) ordersFor(p *provider, c int, seconds float64) int {
	guess := 300.0
	if _, ok := b.yolfi.levels[b.yolfi.lastC]; !ok && b.fastestBaseline() == 0 {
		// The first level: nothing measured yet. From one client,
		// ingest has reached about 450/s, and alone about 1,250/s.
		guess = 600 * float64(c)
		if p == b.paused {
			guess = 1500 * float64(c)
		}
	}
	if prev, ok := p.levels[p.lastC]; ok {
		guess = max(guess, prev.PerSecond*ingestGrowth(p.lastC, c)*1.25)
	} else if prev, ok := b.yolfi.levels[b.yolfi.lastC]; ok && p == b.paused {
		// Its first level: Yolfi's last one with the processor running,
		// and room for ingest alone to be much faster.
		guess = max(guess, prev.PerSecond*ingestGrowth(b.yolfi.lastC, c)*2.5)
	}
	if cur, ok := p.levels[c]; ok { // a re-run of a measured level
		guess = max(guess, cur.PerSecond*1.15)
	}
	limit := 5000.0
	if p == b.paused {
		limit = 9000
	}
	if base := b.fastestBaseline(); base > 0 {
		// The baseline so far (the orders are created before this
		// level's): ingest with the processor running has reached 0.5×
		// of it, ingest alone about 1×, and it grows with the clients.
		floor := base * 0.7
		if p == b.paused {
			floor = base
		}
		guess = max(guess, floor)
	}
	guess = min(guess, limit)
	return int(guess*seconds*(1-b.o.redeliver)) + 200
}

// ingestGrowth is how much a closed-loop ingest rate grows, at most, from
// from clients to to clients: about fourfold from one client to eight (one client
// waits for each commit; eight share them), then about 1.6-fold per
// doubling. In a130f77's and e1fbae2's full runs, Yolfi's grew 4.2 and
// 3.9-fold from 1 client to 8, 2.1 and 2.3-fold from 8 to 32, 1.3 and
// 1.25-fold from 32 to 64; ingest alone 7.0 and 8.3-fold from 1 to 32.
// (Before, growth was capped at 1.6 whatever the clients added, and the
// 32- and 64-client levels ran out of orders.)
func ingestGrowth(from, to int) float64 {
	scale := func(c int) float64 {
		d := math.Log2(float64(max(c, 1)))
		if d <= 3 {
			return math.Pow(4, d/3)
		}
		return 4 * math.Pow(1.6, d-3)
	}
	return max(scale(to)/scale(from), 1)
}

// ingestLevel measures p's ingest at c clients over orders, its ratio to
// the baseline, and records it.
func (b *bench) ingestLevel(ctx context.Context, p *provider, c int, orders []loadgen.Order) error {
	since := time.Now()
	lvl := b.closedIngest(ctx, p, c, orders)
	if base, ok := b.baseline[c]; ok && base.PerSecond > 0 {
		lvl.BaselinePerSec = base.PerSecond
		lvl.Ratio = round2(lvl.PerSecond / base.PerSecond)
	}
	if y, ok := b.yolfi.levels[c]; ok && p != b.yolfi && y.PerSecond > 0 {
		lvl.RatioYolfi = round2(lvl.PerSecond / y.PerSecond)
	}
	b.logf("ingest %-6s %2d clients: %7.0f req/s (%.0f new/s)  %s  ratio %.2f  cpu %s  non-200 %d",
		p.name, c, lvl.PerSecond, lvl.NewPerSecond, lvl.Latency, lvl.Ratio, lvl.CPU, lvl.Non200Total())
	if p != b.paused { // its backlog stays: nothing processes it
		lvl.DrainSeconds = b.drain(ctx, fmt.Sprintf("%s ingest at %d clients", p.name, c))
		b.checkConfirmations(ctx, p, c, since)
	}
	p.levels[c], p.lastC = lvl, c
	*p.report = append(*p.report, lvl)
	return ctx.Err()
}

// checkConfirmations warns unless every payment confirmation p's level
// sent since then fulfilled its order: the level measured the real path.
func (b *bench) checkConfirmations(ctx context.Context, p *provider, c int, since time.Time) {
	rows, err := b.t.db.Query(ctx, `SELECT coalesce(decision, state), count(*) FROM inbox_events
		WHERE provider = $1 AND kind = 'payment_confirmed' AND received_at >= $2 GROUP BY 1`, p.key, since)
	var decisions map[string]int
	if err == nil {
		decisions = map[string]int{}
		var d string
		var n int
		_, err = pgx.ForEachRow(rows, []any{&d, &n}, func() error { decisions[d] = n; return nil })
	}
	switch {
	case err != nil:
		b.warn("%s ingest at %d clients: reading the decisions: %v", p.name, c, err)
	case len(decisions) != 1 || decisions["fulfilled"] == 0:
		b.warn("%s ingest at %d clients: payment confirmations decided %v (expected all fulfilled)", p.name, c, decisions)
	}
}

// closedIngest runs p's webhook mix over orders with c closed-loop clients.
func (b *bench) closedIngest(ctx context.Context, p *provider, c int, orders []loadgen.Order) IngestLevel {
	mix := loadgen.NewMix(p.src, orders, b.o.redeliver, b.o.outOfOrder)
	sender := p.sender(b.t)
	mix.StopWhenExhausted = true
	var prof func()
	if name := fmt.Sprintf("ingest%d", c); (c == 1 && p == b.yolfi || c == 32) && !b.profiled[name] {
		b.profiled[name] = true
		prof = b.profile(ctx, name, b.o.warmup+b.o.phase)
	}
	// One client's statements, per webhook: each batch holds one.
	countStatements := c == 1 && b.o.statements
	if countStatements {
		if err := loadgen.ResetStatements(ctx, b.t.db); err != nil {
			b.warn("resetting pg_stat_statements: %v", err)
			countStatements = false
		}
	}
	cpu0 := b.cpu.sample()
	waits := b.sampleWaits(ctx)
	res := loadgen.RunClosed(ctx, loadgen.ClosedConfig{Workers: c, Warmup: b.o.warmup, Duration: b.o.phase},
		func(ctx context.Context, _ int) (int, error) { return mix.Send(ctx, sender, false) })
	ws := waits()
	if prof != nil {
		prof()
	}
	cpu := b.cpu.since(cpu0)
	b.logWaits(fmt.Sprintf("ingest %s %d", p.name, c), ws)
	newAcked := mix.Acked(loadgen.KindNew) + mix.Acked(loadgen.KindOutOfOrder)
	allAcked := newAcked + mix.Acked(loadgen.KindRedelivery)
	lvl := IngestLevel{Provider: p.name, LoadLevel: LoadLevel{Name: "ingest", Concurrency: c, Seconds: round2(res.Elapsed.Seconds()),
		OK: res.OK, PerSecond: round1(res.Throughput()), Latency: res.Latency(), Non200: res.StatusCounts(), CPU: cpu, Waits: ws},
		New: mix.Acked(loadgen.KindNew), Redeliveries: mix.Acked(loadgen.KindRedelivery), OutOfOrder: mix.Acked(loadgen.KindOutOfOrder)}
	if allAcked > 0 {
		lvl.NewPerSecond = round1(res.Throughput() * float64(newAcked) / float64(allAcked))
	}
	if countStatements && allAcked > 0 {
		top, total, err := loadgen.StatementCosts(ctx, b.t.db, allAcked, 8)
		if err != nil {
			b.warn("reading pg_stat_statements after %s ingest at 1 client: %v", p.name, err)
		} else {
			lvl.Statements, lvl.StatementsTotal = top, &total
		}
	}
	if mix.Exhausted() > 0 {
		b.warn("%s ingest at %d clients: the %d pre-created orders ran out after %.1fs of the %.1fs window: measured over the shorter window",
			p.name, c, len(orders), res.Elapsed.Seconds(), b.o.phase.Seconds())
	}
	return lvl
}

// openIngest runs an open-loop webhook stream at rate/s and returns its
// acknowledgement figures.
func (b *bench) openIngest(ctx context.Context, rate float64, d time.Duration, mix *loadgen.Mix) OpenIngest {
	out, _ := b.openRun(ctx, rate, d, mix)
	return out
}

// openRun is openIngest, with the run's answers.
func (b *bench) openRun(ctx context.Context, rate float64, d time.Duration, mix *loadgen.Mix) (OpenIngest, loadgen.Result) {
	cfg := loadgen.OpenConfig{Rate: rate, Duration: d, Warmup: b.o.warmup, MaxInFlight: 256}
	first := cfg.FirstMeasured()
	cpu0 := b.cpu.sample()
	waits := b.sampleWaits(ctx)
	gc0, gcErr := b.t.svc.receiptBatches(ctx)
	res := loadgen.RunOpen(ctx, cfg, func(ctx context.Context, i int) (int, error) {
		return mix.Send(ctx, b.t.sender, i >= first)
	})
	ws := waits()
	b.logWaits(fmt.Sprintf("open %.0f/s", rate), ws)
	b.maxAccepted = max(b.maxAccepted, res.Throughput())
	out := OpenIngest{Offered: rate, Seconds: round2(res.Elapsed.Seconds()), OK: res.OK, PerSecond: round1(res.Throughput()),
		Latency: res.Latency(), Late: res.Late, Unsent: res.Unsent, Non200: res.StatusCounts(), CPU: b.cpu.since(cpu0), Waits: ws}
	gc1, err := b.t.svc.receiptBatches(ctx)
	switch {
	case gcErr != nil || err != nil:
		b.warn("open loop at %.0f/s: the service's group commits not read: %v", rate, errors.Join(gcErr, err))
	case gc1 != nil:
		out.GroupCommits = map[string]float64{}
		for k, v := range gc1 {
			out.GroupCommits[k] = v - gc0[k]
		}
	}
	return out, res
}

// halfPeak runs Yolfi's webhook mix open loop at half its peak, in
// --half-peak-windows windows. Each is prepared as one run alone would be
// (its own orders, the inbox drained, ANALYZE), so that no window starts
// behind the work its neighbours left; their answers are pooled.
func (b *bench) halfPeak(ctx context.Context) error {
	rate := float64(int(b.peakIngest / 2))
	if rate < 1 {
		return errors.New("no ingest peak measured")
	}
	var (
		windows []OpenIngest
		answers []loadgen.Result
	)
	for range b.o.halfPeakWindows {
		orders, err := b.createOrders(ctx, int(rate*(b.o.warmup+b.o.phase).Seconds()*(1-b.o.redeliver))+200)
		if err != nil {
			return err
		}
		b.ready(ctx)
		mix := loadgen.NewMix(b.src, orders, b.o.redeliver, b.o.outOfOrder)
		w, res := b.openRun(ctx, rate, b.o.phase, mix)
		windows, answers = append(windows, w), append(answers, res)
		if b.o.halfPeakWindows > 1 {
			b.logf("ingest open loop at %.0f/s, window %d of %d: ack %s  cpu %s", rate, len(windows), b.o.halfPeakWindows, w.Latency, w.CPU)
		}
		b.drain(ctx, "the half-peak run")
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	h := pooledOpen(windows, loadgen.Merge(answers...))
	b.rep.HalfPeak = &h
	b.logf("ingest open loop at %.0f/s (½ of peak %.0f): %.0f/s  ack %s  late %d  cpu %s%s",
		rate, b.peakIngest, h.PerSecond, h.Latency, h.Late, h.CPU, windowsNote(h.WindowP99))
	return ctx.Err()
}

// pooledOpen is the figures of open-loop windows of one rate taken
// together: their answers pooled (all), their CPU shares and PostgreSQL's
// activity averaged over the windows (each window's CPU kept too, so that
// one noisy window shows), their group commits added (none when a window's
// were not read), and each window's p99 when there are several.
func pooledOpen(windows []OpenIngest, all loadgen.Result) OpenIngest {
	if len(windows) == 1 {
		return windows[0]
	}
	out := OpenIngest{Offered: windows[0].Offered, Seconds: round2(all.Elapsed.Seconds()), OK: all.OK,
		PerSecond: round1(all.Throughput()), Latency: all.Latency(), Late: all.Late, Unsent: all.Unsent, Non200: all.StatusCounts(),
		GroupCommits: map[string]float64{}}
	n := float64(len(windows))
	var cpu CPUShare
	waits := map[[2]string]float64{}
	for _, w := range windows {
		out.WindowP99 = append(out.WindowP99, round2(loadgen.Ms(w.Latency.P99)))
		out.WindowCPU = append(out.WindowCPU, w.CPU)
		cpu = CPUShare{cpu.Service + w.CPU.Service, cpu.Postgres + w.CPU.Postgres, cpu.Generator + w.CPU.Generator, cpu.Other + w.CPU.Other}
		for _, ws := range w.Waits {
			waits[[2]string{ws.Wait, ws.Query}] += ws.Avg
		}
		for k, v := range w.GroupCommits {
			out.GroupCommits[k] += v
		}
	}
	out.CPU = CPUShare{round2(cpu.Service / n), round2(cpu.Postgres / n), round2(cpu.Generator / n), round2(cpu.Other / n)}
	if slices.ContainsFunc(windows, func(w OpenIngest) bool { return w.GroupCommits == nil }) {
		out.GroupCommits = nil // a window's were not read: a sum would say less than happened
	}
	for k, avg := range waits {
		out.Waits = append(out.Waits, loadgen.WaitShare{Wait: k[0], Query: k[1], Avg: round2(avg / n)})
	}
	slices.SortFunc(out.Waits, func(a, b loadgen.WaitShare) int {
		return cmp.Or(cmp.Compare(b.Avg, a.Avg), cmp.Compare(a.Wait, b.Wait), cmp.Compare(a.Query, b.Query))
	})
	if len(out.Waits) > 6 {
		out.Waits = out.Waits[:6]
	}
	return out
}
