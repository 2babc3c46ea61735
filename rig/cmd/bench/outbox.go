package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/outbox"
	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
	"github.com/fulfillplatform/fulfillment/rig/loadgen"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

// The outbox phase's database and destinations. Both destinations are
// idempotent and post to the bench's one receiver.
const (
	outboxDB   = "service_outbox"
	lineDest   = "fulfil" // fulfils the orders' external line
	eventsDest = "crm"    // subscribed to order.fulfilled (lag run only)
	// fillWorkers pay the backlog's orders, closed loop.
	fillWorkers = 32
)

// Outbox is what the outbox phase measured.
type Outbox struct {
	Backlog int            `json:"backlog_messages"`
	Drains  []OutboxDrain  `json:"drains"`
	Lag     *OutboxLag     `json:"lag,omitempty"`
	Failing *OutboxFailing `json:"failing,omitempty"`
	// Repeats counts requests the receiver got again for a key it had
	// (retries); Forged those that failed verification. Both should be 0.
	Repeats int `json:"receiver_repeats"`
	Forged  int `json:"receiver_forged"`
}

// OutboxDrain is one backlog of line deliveries drained by a fresh
// dispatcher at one destination concurrency, against the same messages
// POSTed straight to the receiver at the same concurrency.
type OutboxDrain struct {
	Concurrency       int                 `json:"concurrency"`
	Messages          int                 `json:"messages"`
	Delivered         int                 `json:"delivered"`
	FillSeconds       float64             `json:"fill_seconds"`
	DrainSeconds      float64             `json:"first_to_last_delivery_seconds"`
	PerSecond         float64             `json:"deliveries_per_second"`
	BaselinePerSecond float64             `json:"direct_posts_per_second"` // median run
	BaselineRuns      []float64           `json:"direct_posts_per_second_runs"`
	BaselineLatency   loadgen.Summary     `json:"direct_post_latency"`
	BaselineNon200    map[int]int         `json:"direct_non_200,omitempty"`
	Ratio             float64             `json:"ratio_outbox_over_direct"`
	PerDelivery       loadgen.PerItem     `json:"database_per_delivery"`
	CPU               CPUShare            `json:"cpu"`
	BaselineCPU       CPUShare            `json:"cpu_direct"`
	Waits             []loadgen.WaitShare `json:"pg_activity,omitempty"`
}

// OutboxFailing is a backlog sent to a destination that answers every
// request 503, until each message was attempted once: what recording the
// failed attempts costs the database.
type OutboxFailing struct {
	Concurrency int             `json:"concurrency"`
	Messages    int             `json:"messages"`
	Attempts    int             `json:"failed_attempts"` // requests the destination answered 503
	Seconds     float64         `json:"seconds"`
	PerAttempt  loadgen.PerItem `json:"database_per_failed_attempt"`
}

// OutboxLag is a pipeline run (open-loop payments) of orders with an
// external line: Pipeline holds the acknowledgement and the inbox stage
// (its ack→fulfilled is ack→processed: the order is fulfilling, its line
// message queued); Line and Announced are ack→delivered at the receiver,
// of the line and of the order.fulfilled announcement that its delivery
// causes.
type OutboxLag struct {
	Pipeline
	Concurrency int             `json:"concurrency"`
	Line        loadgen.Summary `json:"ack_to_line_delivered"`
	Announced   loadgen.Summary `json:"ack_to_order_fulfilled_delivered"`
	Missing     int             `json:"not_delivered"`
	// The line's ack→delivered p50 over the first and the last quarter of
	// the payments: growing, the dispatcher fell behind the offered rate.
	LineFirstQuarterP50 float64 `json:"ack_to_line_delivered_p50_first_quarter_ms"`
	LineLastQuarterP50  float64 `json:"ack_to_line_delivered_p50_last_quarter_ms"`
}

// outboxTune configures the destinations, all posting to url: lineDest at
// concurrency conc (0: the default), with events also eventsDest
// subscribed to order.fulfilled; paused runs no dispatcher
// (outbox.disabled), so that messages wait.
func outboxTune(url string, conc int, events, paused bool) func(*config.Config) {
	idempotent := true
	dest := func(id string, conc int, events ...string) config.Destination {
		return config.Destination{ID: id, URL: url, Secrets: []config.Secret{{Env: envOutbox}},
			Idempotent: &idempotent, Concurrency: conc, Events: events}
	}
	return func(c *config.Config) {
		c.Destinations = []config.Destination{dest(lineDest, conc)}
		if events {
			c.Destinations = append(c.Destinations, dest(eventsDest, 0, string(fulfillment.TopicOrderFulfilled)))
		}
		c.Outbox.Disabled = paused
	}
}

// outboxPhase measures the outbox against one receiver in this process:
// drains of a backlog at each concurrency, then the ack→delivered lag.
func (b *bench) outboxPhase(ctx context.Context) error {
	secret, err := stdwebhooks.ParseSecret(outboxSecret)
	if err != nil {
		return err
	}
	arr := loadgen.NewArrivals()
	rcv, err := receiver.New(receiver.Options{Secrets: []stdwebhooks.Secret{secret}, Idempotent: true, Plan: arr.Plan})
	if err != nil {
		return err
	}
	defer func() { _ = rcv.Close() }()
	db, err := loadgen.ConnectDB(ctx, b.cluster.URL(outboxDB))
	if err != nil {
		return err
	}
	defer db.Close()
	main := b.t
	defer b.use(main)
	rep := &Outbox{Backlog: b.o.outboxBacklog}
	b.rep.Outbox = rep
	o := &outboxRun{bench: b, rcv: rcv, arr: arr, db: db,
		dest: outbox.Destination{ID: lineDest, URL: rcv.URL(), Secrets: []stdwebhooks.Secret{secret},
			Idempotent: true, Timeout: config.DefaultDestinationTimeout}}
	for _, c := range b.o.outboxConc {
		if b.o.outboxBacklog <= 0 {
			break
		}
		if err := b.phase(fmt.Sprintf("outbox: %d line messages drained at concurrency %d, and POSTed directly", b.o.outboxBacklog, c), func() error {
			d, err := o.backlog(ctx, c)
			if err != nil {
				return err
			}
			rep.Drains = append(rep.Drains, d)
			return ctx.Err()
		}); err != nil {
			return err
		}
	}
	if b.o.outboxRate > 0 {
		if err := b.phase(fmt.Sprintf("outbox: ack→delivered at %d payments/s open loop", b.o.outboxRate), func() error {
			l, err := o.lag(ctx, b.o.outboxRate)
			rep.Lag = l
			return err
		}); err != nil {
			return err
		}
	}
	if b.o.outboxBacklog > 0 {
		// Last: its messages stay pending, retried, in the database.
		if err := b.phase(fmt.Sprintf("outbox: %d line messages to a destination answering 503", b.o.outboxBacklog), func() error {
			f, err := o.failing(ctx)
			rep.Failing = f
			return err
		}); err != nil {
			return err
		}
	}
	rep.Repeats, rep.Forged = arr.Repeats(), rcv.Forged()
	if rep.Repeats > 0 || rep.Forged > 0 {
		b.warn("outbox: the receiver got %d repeated and %d unverifiable requests (expected none)", rep.Repeats, rep.Forged)
	}
	return nil
}

// outboxRun is the state of the outbox phase.
type outboxRun struct {
	*bench
	rcv  *receiver.Receiver
	arr  *loadgen.Arrivals
	db   *pgxpool.Pool // the outbox database, for measurements
	dest outbox.Destination
}

// externalOrders creates n orders with one external line for lineDest.
func (o *outboxRun) externalOrders(ctx context.Context, n int) ([]loadgen.Order, error) {
	return o.createOrdersOf(ctx, n, func(mid string) *fulfillmentv1.CreateOrderRequest {
		return loadgen.ExternalOrderRequest(benchOrg, benchEnv, mid, lineDest)
	})
}

// fill has a fulfillmentd named name, its dispatcher paused (line
// destination url at concurrency c, 0 for the default), take n orders with
// an external line and their payments, and returns the line messages left
// pending (with a warning when there are fewer than n) and how long the
// payments took.
func (o *outboxRun) fill(ctx context.Context, name, url string, c, n int) ([]outbox.Message, time.Duration, error) {
	paused, err := o.startTarget(ctx, name, outboxDB, outboxTune(url, c, false, true))
	if err != nil {
		return nil, 0, err
	}
	defer paused.close()
	o.use(paused)
	orders, err := o.externalOrders(ctx, n)
	if err != nil {
		return nil, 0, err
	}
	o.drain(ctx, "creating orders")
	t0 := time.Now()
	mix := loadgen.NewMix(o.src, orders, 0, 0)
	mix.StopWhenExhausted = true
	fill := loadgen.RunClosed(ctx, loadgen.ClosedConfig{Workers: fillWorkers, Duration: o.o.drainTimeout},
		func(ctx context.Context, _ int) (int, error) { return mix.Send(ctx, paused.sender, false) })
	o.drain(ctx, "paying the backlog's orders")
	took := time.Since(t0)
	msgs, err := loadgen.PendingMessages(ctx, o.db, lineDest, n)
	if err != nil {
		return nil, 0, err
	}
	if len(msgs) < n {
		o.warn("outbox %s: %d of %d orders have a pending message (payments %s)", name, len(msgs), n, statusNote(fill.StatusCounts()))
	}
	return msgs, took, nil
}

// backlog fills a backlog with a paused dispatcher, POSTs the same
// messages straight to the receiver (the baseline), then starts a
// dispatcher at concurrency c and times the backlog's deliveries at the
// receiver.
func (o *outboxRun) backlog(ctx context.Context, c int) (OutboxDrain, error) {
	d := OutboxDrain{Concurrency: c}
	n := o.o.outboxBacklog
	msgs, took, err := o.fill(ctx, fmt.Sprintf("outbox-paused-%d", c), o.rcv.URL(), c, n)
	if err != nil {
		return d, err
	}
	d.FillSeconds = round1(took.Seconds())
	d.Messages = len(msgs)
	keys := make([]string, len(msgs))
	for i, m := range msgs {
		keys[i] = m.Key
	}
	o.directBaseline(ctx, &d, msgs)
	// Each drain starts from the same state, as autovacuum leaves a running
	// service between bursts: the dead rows of the previous drain and of
	// this backlog's payments vacuumed, the statistics current. Without it
	// the second drain ran with the first one's garbage, and autovacuum got
	// to it during the drain: at concurrency 16, measured after 4, 2,879 to
	// 3,111 deliveries/s and 121 to 143 buffers per delivery in three runs;
	// 6,933/s and 100 buffers after this VACUUM.
	if _, err := o.db.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		return d, fmt.Errorf("vacuuming before the drain: %w", err)
	}

	before, err := loadgen.ReadDBCounters(ctx, o.db)
	if err != nil {
		return d, err
	}
	waits := o.sampleWaits(ctx)
	t, err := o.startTarget(ctx, fmt.Sprintf("outbox-%d", c), outboxDB, outboxTune(o.rcv.URL(), c, false, false))
	if err != nil {
		waits()
		return d, err
	}
	o.use(t)
	cpu1 := o.cpu.sample()
	prof := o.profile(ctx, fmt.Sprintf("outbox-drain-%d", c), 4*time.Second)
	if missing := o.arr.Wait(ctx, keys, o.drainWait()); missing > 0 {
		o.warn("outbox at concurrency %d: %d of %d messages not delivered", c, missing, len(keys))
	}
	d.CPU = o.cpu.since(cpu1)
	d.Waits = waits()
	prof()
	t.close() // its sessions report their statistics as they end
	after, err := loadgen.ReadDBCounters(ctx, o.db)
	if err != nil {
		return d, err
	}
	times, _ := o.arr.Times(keys)
	d.Delivered = len(times)
	d.DrainSeconds = round2(loadgen.Span(times).Seconds())
	d.PerSecond = round1(loadgen.SteadyRate(times))
	d.PerDelivery = after.Sub(before).Per(d.Delivered)
	if d.BaselinePerSecond > 0 {
		d.Ratio = round2(d.PerSecond / d.BaselinePerSecond)
	}
	o.logWaits(fmt.Sprintf("outbox drain %d", c), d.Waits)
	o.logf("outbox concurrency %d: %d deliveries in %.1fs, %.0f/s steady; direct POSTs %.0f/s (median of %v; %s); ratio %.2f; per delivery %s; cpu %s, direct %s",
		c, d.Delivered, d.DrainSeconds, d.PerSecond, d.BaselinePerSecond, d.BaselineRuns, d.BaselineLatency, d.Ratio, d.PerDelivery, d.CPU, d.BaselineCPU)
	return d, ctx.Err()
}

// directRuns is how many times the baseline runs: the median counts, as
// one short run is at the mercy of the shared machine.
const directRuns = 3

// directBaseline POSTs msgs (under fresh keys) straight to the receiver
// with the service's own sender at the drain's concurrency, with no
// database, directRuns times, and records the median run in d.
func (o *outboxRun) directBaseline(ctx context.Context, d *OutboxDrain, msgs []outbox.Message) {
	type run struct {
		rate float64
		res  loadgen.Result
		cpu  CPUShare
	}
	sender := outbox.NewSender()
	defer sender.CloseIdleConnections()
	runs := make([]run, directRuns)
	for r := range runs {
		direct, keys := slices.Clone(msgs), make([]string, len(msgs))
		for i := range direct {
			direct[i].Key = fmt.Sprintf("direct%d.%d_%s", d.Concurrency, r, direct[i].Key)
			keys[i] = direct[i].Key
		}
		cpu0 := o.cpu.sample()
		runs[r].res = loadgen.RunDirect(ctx, sender, o.dest, direct, d.Concurrency, o.o.drainTimeout)
		runs[r].cpu = o.cpu.since(cpu0)
		times, _ := o.arr.Times(keys)
		runs[r].rate = round1(loadgen.SteadyRate(times))
		d.BaselineRuns = append(d.BaselineRuns, runs[r].rate)
	}
	slices.SortFunc(runs, func(a, b run) int { return cmp.Compare(a.rate, b.rate) })
	med := runs[len(runs)/2]
	d.BaselinePerSecond, d.BaselineCPU = med.rate, med.cpu
	d.BaselineLatency, d.BaselineNon200 = med.res.Latency(), med.res.StatusCounts()
}

// drainWait is how long to wait for deliveries: the drain timeout, cut
// short near the end of the run's budget.
func (o *outboxRun) drainWait() time.Duration {
	timeout := o.o.drainTimeout
	if left := o.o.budget - time.Since(o.start) - time.Minute; left < timeout {
		timeout = max(left, 5*time.Second)
	}
	return timeout
}

// lag pays fresh orders open loop at rate/s with the dispatcher running
// (default concurrency, plus the order.fulfilled subscriber) and measures,
// for each acknowledged payment, the time to its deliveries.
func (o *outboxRun) lag(ctx context.Context, rate int) (*OutboxLag, error) {
	t, err := o.startTarget(ctx, "outbox-lag", outboxDB, outboxTune(o.rcv.URL(), 0, true, false))
	if err != nil {
		return nil, err
	}
	defer t.close()
	o.use(t)
	var orders []loadgen.Order // kept for their ids
	p, mix, err := o.pipelineOf(ctx, rate, "external line", func(ctx context.Context, n int) ([]loadgen.Order, error) {
		created, err := o.externalOrders(ctx, n)
		orders = created
		return created, err
	})
	if err != nil {
		return nil, err
	}
	l := &OutboxLag{Pipeline: *p, Concurrency: config.DefaultDestinationConcurrency}
	ids := make(map[string]string, len(orders))
	for _, ord := range orders {
		ids[ord.MerchantOrderID] = ord.ID
	}
	acks := mix.Acks()
	lineKeys, eventKeys, at := make([]string, len(acks)), make([]string, len(acks)), make([]time.Time, len(acks))
	for i, a := range acks {
		id := ids[a.MerchantOrderID]
		lineKeys[i], eventKeys[i], at[i] = fulfillment.LineKey(id, 0), fulfillment.EventKey(id, fulfillment.TopicOrderFulfilled), a.At
	}
	l.Missing = o.arr.Wait(ctx, append(slices.Clone(lineKeys), eventKeys...), o.drainWait())
	if l.Missing > 0 {
		o.warn("outbox lag at %d/s: %d of %d deliveries missing", rate, l.Missing, 2*len(acks))
	}
	lags, _ := o.arr.Lags(lineKeys, at)
	l.Line = loadgen.Summarize(lags)
	if q := len(lags) / 4; q > 0 {
		l.LineFirstQuarterP50 = round2(loadgen.Ms(loadgen.Summarize(lags[:q]).P50))
		l.LineLastQuarterP50 = round2(loadgen.Ms(loadgen.Summarize(lags[len(lags)-q:]).P50))
	}
	lags, _ = o.arr.Lags(eventKeys, at)
	l.Announced = loadgen.Summarize(lags)
	o.logf("outbox lag at %d/s: ack→line delivered %s | ack→order.fulfilled delivered %s", rate, l.Line, l.Announced)
	return l, ctx.Err()
}

// failing fills a backlog with a paused dispatcher, as a drain does, then
// starts one whose line destination answers every request 503 and
// counts what the database did until each message was attempted once
// (retries fall due a second or more later; those that came meanwhile
// count as attempts too).
func (o *outboxRun) failing(ctx context.Context) (*OutboxFailing, error) {
	var answered, firsts atomic.Int64 // requests, and messages attempted
	down, err := receiver.New(receiver.Options{Secrets: o.dest.Secrets, Idempotent: true,
		Plan: func(_ string, n int) receiver.Action {
			answered.Add(1)
			if n == 1 {
				firsts.Add(1)
			}
			return receiver.Action{Status: 503}
		}})
	if err != nil {
		return nil, err
	}
	defer func() { _ = down.Close() }()
	msgs, _, err := o.fill(ctx, "outbox-failing-paused", down.URL(), 0, o.o.outboxBacklog)
	if err != nil {
		return nil, err
	}
	f := &OutboxFailing{Concurrency: config.DefaultDestinationConcurrency, Messages: len(msgs)}
	if _, err := o.db.Exec(ctx, "VACUUM ANALYZE"); err != nil {
		return f, fmt.Errorf("vacuuming before the failing run: %w", err)
	}
	before, err := loadgen.ReadDBCounters(ctx, o.db)
	if err != nil {
		return f, err
	}
	t, err := o.startTarget(ctx, "outbox-failing", outboxDB, outboxTune(down.URL(), 0, false, false))
	if err != nil {
		return f, err
	}
	o.use(t)
	t0 := time.Now()
	deadline := t0.Add(o.drainWait())
	for firsts.Load() < int64(len(msgs)) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	f.Seconds = round2(time.Since(t0).Seconds())
	t.close()
	after, err := loadgen.ReadDBCounters(ctx, o.db)
	if err != nil {
		return f, err
	}
	f.Attempts = int(answered.Load())
	if n := int(firsts.Load()); n < len(msgs) {
		o.warn("outbox failing run: %d of %d messages attempted", n, len(msgs))
	}
	f.PerAttempt = after.Sub(before).Per(f.Attempts)
	o.logf("outbox failing destination: %d failed attempts of %d messages in %.1fs; per failed attempt %s",
		f.Attempts, f.Messages, f.Seconds, f.PerAttempt)
	return f, ctx.Err()
}
