// Command bench is `make bench`: one self-contained run that starts a
// durable throwaway PostgreSQL and a freshly built fulfillmentd, measures
//
//   - baseline: the raw PostgreSQL limit of the ingest workload (one-row
//     INSERT … ON CONFLICT DO NOTHING into the real inbox_events, one commit
//     per row) at 1, 8, 32 and 64 clients;
//   - ingest: signed Yolfi webhooks, then signed T-Bank notifications,
//     through the HTTP gateway at the same concurrencies, with redeliveries
//     and out-of-order events, and their ratio to the baseline; plus an
//     open-loop run of Yolfi's at half its peak (three windows, their
//     answers pooled);
//   - pipeline: ack and ack→fulfilled latency at fixed offered rates (open
//     loop), and the maximum sustained fulfilled/s;
//   - reads: GetOrder over gRPC and REST, and CheckAccess over gRPC for
//     customers of a few thousand paid subscriptions;
//   - history: ingest and processing again after ≥1,000,000 processed
//     events are added to the inbox;
//   - console: every admin console page on that history, with 100,000
//     orders added (console.go);
//
// prints one table, evaluates the goals (goals.go), and writes
// results/bench-<timestamp>.{json,md}, results/latest.{json,md} and
// results/bench.png. Every phase's duration is printed.
//
//	go run ./rig/cmd/bench            # full run, under 10 minutes on 2 cores
//	go run ./rig/cmd/bench --quick    # smoke test: short phases, 20k history rows
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/rig/loadgen"
	"github.com/fulfillplatform/fulfillment/rig/pgcluster"
)

type options struct {
	quick         bool
	out           string
	historyRows   int
	concurrencies []int
	rates         []int
	warmup        time.Duration
	phase         time.Duration
	// halfPeakWindows is how many windows of phase the half-peak run
	// pools.
	halfPeakWindows int
	pipeline        time.Duration
	reads           time.Duration
	push            time.Duration
	drainTimeout    time.Duration
	maxConns        int
	readWorkers     int
	accessWorkers   int
	subscriptions   int
	pushWorkers     int
	replicas        []int         // replica counts of the replicas push
	replicaPush     time.Duration // length of each
	redeliver       float64
	outOfOrder      float64
	keep            bool
	noNotify        bool
	pprof           bool
	statements      bool
	rounds          int
	budget          time.Duration
	outboxConc      []int
	outboxBacklog   int
	outboxRate      int
}

// maxHalfPeakWindows bounds --half-peak-windows: each window creates its
// orders and runs for --duration, within the run's budget.
const maxHalfPeakWindows = 10

func main() {
	var o options
	var conc, rates, outboxConc, replicas string
	flag.BoolVar(&o.quick, "quick", false, "smoke test: 2s phases, 20k history rows")
	flag.StringVar(&o.out, "out", "results", "folder for the JSON, Markdown and PNG outputs")
	flag.IntVar(&o.historyRows, "history", 1_000_000, "processed events added to the inbox for the history phase (0 skips it)")
	flag.StringVar(&conc, "concurrency", "1,8,32,64", "client counts of the baseline and ingest sweeps")
	flag.StringVar(&rates, "rates", "500,1000", "offered events/s of the pipeline phase")
	flag.DurationVar(&o.phase, "duration", 6*time.Second, "measured length of each baseline/ingest level")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured warm-up before each run")
	flag.IntVar(&o.halfPeakWindows, "half-peak-windows", 3, "windows of --duration the open loop at half of peak pools, each on its own orders (its p99 rests on every window's answers)")
	flag.DurationVar(&o.pipeline, "pipeline-duration", 8*time.Second, "measured length of each pipeline rate")
	flag.DurationVar(&o.reads, "reads-duration", 5*time.Second, "measured length of each read run")
	flag.DurationVar(&o.push, "push-duration", 8*time.Second, "length of the saturating push (max sustained fulfilled/s)")
	flag.DurationVar(&o.drainTimeout, "drain-timeout", 90*time.Second, "longest wait for the inbox backlog between phases")
	flag.IntVar(&o.maxConns, "max-conns", 40, "fulfillmentd database.max_conns")
	flag.IntVar(&o.readWorkers, "read-workers", 16, "closed-loop workers of the read phase (GetOrder)")
	flag.IntVar(&o.accessWorkers, "access-workers", 32, "closed-loop workers of the read phase's CheckAccess run")
	flag.IntVar(&o.subscriptions, "subscriptions", 4000, "paid subscriptions seeded for the CheckAccess run (0 skips it)")
	flag.IntVar(&o.pushWorkers, "push-workers", 64, "closed-loop workers of the saturating push")
	flag.StringVar(&replicas, "replicas", "1,2,3", "fulfillmentd replicas on one database of the replicas push (empty skips it)")
	flag.DurationVar(&o.replicaPush, "replicas-duration", 5*time.Second, "length of each replicas push")
	flag.Float64Var(&o.redeliver, "redeliver", 0.2, "share of ingest requests that are redeliveries")
	flag.Float64Var(&o.outOfOrder, "out-of-order", 0.05, "share of ingest requests that are out-of-order invoice events")
	flag.BoolVar(&o.noNotify, "baseline-no-notify", true, "also run the baseline with the table's triggers (a per-row NOTIFY) disabled, when it has any (informational)")
	flag.BoolVar(&o.statements, "statements", true, "load pg_stat_statements and report what each statement costs per event over the saturating push and its drain")
	flag.BoolVar(&o.pprof, "pprof", false, "serve pprof from fulfillmentd (listen.debug) and save CPU profiles of the first 32-client ingest level (ingest alone: the processor paused), Yolfi's one-client level and the saturating push into --out")
	flag.IntVar(&o.rounds, "history-rounds", 3, "alternating rounds (without history, with history) of the history comparison")
	flag.DurationVar(&o.budget, "budget", 9*time.Minute+30*time.Second, "whole-run budget: past it, waits for the inbox backlog are cut short (with a warning)")
	flag.StringVar(&outboxConc, "outbox-concurrency", "4,16", "destination concurrencies of the outbox drain")
	flag.IntVar(&o.outboxBacklog, "outbox-backlog", 4000, "outbox messages drained at each concurrency (0 skips the drains)")
	flag.IntVar(&o.outboxRate, "outbox-rate", 100, "offered payments/s of the outbox ack→delivered run (0 skips it)")
	redraw := flag.String("redraw", "", "draw the chart of a saved run's JSON (written next to it, .png) and exit")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary folder (cluster, service log) for inspection")
	flag.Parse()
	if *redraw != "" {
		if err := redrawChart(*redraw); err != nil {
			fatal(err)
		}
		return
	}
	var err error
	if o.concurrencies, err = parseInts(conc); err != nil {
		fatal(fmt.Errorf("--concurrency: %w", err))
	}
	if o.rates, err = parseInts(rates); err != nil {
		fatal(fmt.Errorf("--rates: %w", err))
	}
	if o.outboxConc, err = parseInts(outboxConc); err != nil {
		fatal(fmt.Errorf("--outbox-concurrency: %w", err))
	}
	if o.halfPeakWindows < 1 || o.halfPeakWindows > maxHalfPeakWindows {
		fatal(fmt.Errorf("--half-peak-windows: %d is not from 1 to %d", o.halfPeakWindows, maxHalfPeakWindows))
	}
	if replicas != "" {
		if o.replicas, err = parseInts(replicas); err != nil {
			fatal(fmt.Errorf("--replicas: %w", err))
		}
	}
	if o.quick {
		set := map[string]bool{}
		flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
		pick := func(name string, d *time.Duration, v time.Duration) {
			if !set[name] {
				*d = v
			}
		}
		pick("duration", &o.phase, 2*time.Second)
		if !set["half-peak-windows"] {
			o.halfPeakWindows = 1
		}
		pick("warmup", &o.warmup, 500*time.Millisecond)
		pick("pipeline-duration", &o.pipeline, 2*time.Second)
		pick("reads-duration", &o.reads, 2*time.Second)
		pick("push-duration", &o.push, 2*time.Second)
		pick("replicas-duration", &o.replicaPush, 2*time.Second)
		pick("drain-timeout", &o.drainTimeout, 60*time.Second)
		if !set["history"] {
			o.historyRows = 20_000
		}
		if !set["outbox-backlog"] {
			o.outboxBacklog = 1000
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C ends the process at once
	}()
	b := &bench{o: o}
	err = b.run(ctx)
	b.cleanup()
	if err != nil {
		if ctx.Err() != nil {
			fatal(errors.New("interrupted; cluster and service stopped"))
		}
		fatal(err)
	}
}

// fatal ends the command with err.
func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench:", err)
	os.Exit(1) //nolint:revive // deep-exit: a command's own exit helper, called only from main's flow
}

func parseInts(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// bench is one run.
type bench struct {
	o        options
	rep      Report
	start    time.Time
	root     string
	tmp      string
	cluster  *pgcluster.Cluster
	bin      string    // the built fulfillmentd
	t        *target   // the service being measured now
	targets  []*target // every service started, for cleanup
	src      loadgen.YolfiSource
	key      loadgen.EventKey
	cpu      *cpuMeter
	orderSeq int
	readable []loadgen.Order // fulfilled orders, for the read phase
	runID    string          // random run id in merchant order ids

	baseline     map[int]LoadLevel
	yolfi, tbank *provider       // the ingest sweep's, in the order measured
	paused       *provider       // Yolfi's on a service with its inbox processor paused
	peakIngest   float64         // Yolfi's
	maxAccepted  float64         // highest 200/s of any open-loop run
	profiled     map[string]bool // the ingest levels profiled (--pprof), by profile name
	emptyPipe    map[int]*Pipeline
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] "+format+"\n", append([]any{time.Since(b.start).Seconds()}, args...)...)
}

func (b *bench) warn(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.rep.Warnings = append(b.rep.Warnings, msg)
	b.logf("WARNING: %s", msg)
}

// phase runs fn as a named step and records its duration.
func (b *bench) phase(name string, fn func() error) error {
	b.logf("== %s", name)
	t0 := time.Now()
	err := fn()
	d := time.Since(t0)
	b.rep.Phases = append(b.rep.Phases, Phase{Name: name, Seconds: round1(d.Seconds())})
	b.logf("== %s: %.1fs", name, d.Seconds())
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

func round1(x float64) float64 { return float64(int(x*10+0.5)) / 10 }
func round2(x float64) float64 { return float64(int(x*100+0.5)) / 100 }

func (b *bench) run(ctx context.Context) error {
	b.start = time.Now()
	b.rep.Started = b.start
	b.baseline, b.emptyPipe, b.profiled = map[int]LoadLevel{}, map[int]*Pipeline{}, map[string]bool{}
	b.runID = strconv.FormatInt(b.start.Unix()%100000, 36)
	o := b.o
	b.rep.Settings = Settings{Quick: o.quick, Concurrencies: o.concurrencies, WarmupSeconds: o.warmup.Seconds(),
		PhaseSeconds: o.phase.Seconds(), HalfPeakWindows: o.halfPeakWindows, PipelineSeconds: o.pipeline.Seconds(), PipelineRates: o.rates,
		Redeliver: o.redeliver, OutOfOrder: o.outOfOrder, BodyBytes: loadgen.DefaultBodySize,
		HistoryRows: o.historyRows, ServiceMaxConns: o.maxConns, ReadWorkers: o.readWorkers, PushWorkers: o.pushWorkers,
		AccessWorkers: o.accessWorkers, Subscriptions: o.subscriptions,
		OutboxConc: o.outboxConc, OutboxBacklog: o.outboxBacklog, OutboxRate: o.outboxRate}
	b.rep.Methods = methods(o)
	var err error
	if b.root, err = moduleRoot(); err != nil {
		return err
	}
	if b.tmp, err = os.MkdirTemp("", "fulfillment-bench-"); err != nil {
		return err
	}
	// The server runs as the postgres OS user when we are root: it must be
	// able to traverse the folder.
	if err := os.Chmod(b.tmp, 0o755); err != nil {
		return err
	}
	b.logf("temporary folder %s", b.tmp)

	var binPath string
	if err := b.phase("start durable PostgreSQL, build fulfillmentd", func() error {
		// Both at once; the build is over before anything is measured.
		buildDone := make(chan error, 1)
		go func() {
			var err error
			binPath, err = buildService(ctx, b.root, b.tmp)
			buildDone <- err
		}()
		return errors.Join(b.startCluster(ctx), <-buildDone)
	}); err != nil {
		return err
	}
	b.bin = binPath
	if b.rep.Machine.SpeedStart = b.speedNow(ctx); b.rep.Machine.SpeedStart != nil {
		b.logf("speed: %s", speedLine(b.rep.Machine.SpeedStart, nil))
	}
	b.src = loadgen.YolfiSource{Org: benchOrg, Live: true, Secret: []byte(benchSecret), BodySize: loadgen.DefaultBodySize}
	b.key = loadgen.EventKey{Provider: "yolfi", Org: benchOrg, Environment: benchEnv}
	b.yolfi = &provider{name: "Yolfi", key: "yolfi", src: b.src, order: loadgen.OrderRequest,
		sender: func(t *target) *loadgen.Sender { return t.sender }, levels: map[int]IngestLevel{}, report: &b.rep.Ingest}
	b.tbank = &provider{name: "T-Bank", key: "tbank", src: loadgen.NewTBankSource(tbankTerminal, []byte(tbankPassword)),
		order:  loadgen.TBankOrderRequest,
		sender: func(t *target) *loadgen.Sender { return t.tbank }, levels: map[int]IngestLevel{}, report: &b.rep.IngestTBank}
	b.paused = &provider{name: "Yolfi (processor paused)", key: "yolfi", src: b.src, order: loadgen.OrderRequest,
		sender: b.yolfi.sender, levels: map[int]IngestLevel{}, report: &b.rep.IngestPaused, at: pausedAt}
	if err := b.phase("start fulfillmentd (and one with its inbox processor paused)", func() error {
		t, err := b.startTarget(ctx, "main", "service", nil)
		if err != nil {
			return err
		}
		b.use(t)
		b.paused.on, err = b.startTarget(ctx, "paused", "service_paused", func(c *config.Config) { c.Inbox.Disabled = true })
		return err
	}); err != nil {
		return err
	}
	// Baseline and ingest side by side at each concurrency, within seconds of
	// each other, so that the shared disk's drifting fsync latency hits both
	// figures of a ratio alike: Yolfi's right after the baseline, T-Bank's
	// right after Yolfi's. The service idles (its inbox drained) while the
	// baseline runs on its own database of the same cluster. At 32 and 64
	// clients, Yolfi's level also runs first on the service whose inbox
	// processor is paused: ingest alone, like for like with the baseline.
	for _, c := range o.concurrencies {
		if err := b.phase(fmt.Sprintf("baseline + ingest (Yolfi, T-Bank): %d clients", c), func() error {
			orders := map[*provider][]loadgen.Order{}
			var ps []*provider
			for _, p := range []*provider{b.paused, b.yolfi, b.tbank} {
				if p.at != nil && !slices.Contains(p.at, c) {
					continue
				}
				ps = append(ps, p)
				err := b.on(p, func() error {
					var err error
					orders[p], err = b.createOrdersOf(ctx, b.ordersFor(p, c, (b.o.warmup+b.o.phase).Seconds()),
						func(mid string) *fulfillmentv1.CreateOrderRequest { return p.order(benchOrg, benchEnv, mid) })
					return err
				})
				if err != nil {
					return err
				}
			}
			b.ready(ctx)
			if err := b.baselineLevel(ctx, c); err != nil {
				return err
			}
			for _, p := range ps {
				if err := b.on(p, func() error { return b.ingestLevel(ctx, p, c, orders[p]) }); err != nil {
					return err
				}
			}
			b.peakIngest = max(b.peakIngest, b.yolfi.levels[c].PerSecond)
			return nil
		}); err != nil {
			return err
		}
	}
	// Its idle polling would count in PostgreSQL's CPU from now on.
	b.paused.on.close()
	if err := b.phase("ingest: open loop at half of peak", func() error { return b.halfPeak(ctx) }); err != nil {
		return err
	}
	for _, r := range o.rates {
		if err := b.phase(fmt.Sprintf("pipeline: %d events/s open loop", r), func() error {
			p, err := b.pipelinePoint(ctx, r, "empty inbox")
			if err != nil {
				return err
			}
			b.emptyPipe[r] = p
			b.rep.Pipeline = append(b.rep.Pipeline, *p)
			return nil
		}); err != nil {
			return err
		}
	}
	if err := b.phase("pipeline: max sustained fulfilled/s", func() error { return b.sustained(ctx) }); err != nil {
		return err
	}
	if err := b.replicasPhase(ctx); err != nil {
		return err
	}
	if err := b.phase("reads: GetOrder gRPC and REST, CheckAccess gRPC", func() error { return b.readsPhase(ctx) }); err != nil {
		return err
	}
	if err := b.outboxPhase(ctx); err != nil {
		return err
	}
	if o.historyRows > 0 {
		if err := b.historyPhase(ctx); err != nil {
			return err
		}
	}
	if start := b.rep.Machine.SpeedStart; start != nil {
		if b.rep.Machine.SpeedEnd = b.speedNow(ctx); b.rep.Machine.SpeedEnd != nil {
			b.checkSpeed(*start, *b.rep.Machine.SpeedEnd)
		}
	}
	b.finish()
	return nil
}

func (b *bench) cleanup() {
	for _, t := range b.targets {
		t.close()
	}
	if b.cluster != nil {
		if err := b.cluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: stopping PostgreSQL:", err)
		}
	}
	if b.tmp != "" {
		if b.o.keep {
			fmt.Fprintln(os.Stderr, "bench: kept", b.tmp)
		} else if err := os.RemoveAll(b.tmp); err != nil {
			fmt.Fprintln(os.Stderr, "bench: removing", b.tmp+":", err)
		}
	}
}
