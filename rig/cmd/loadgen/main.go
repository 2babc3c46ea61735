// Command loadgen drives a running fulfillmentd like a payment provider
// would: it creates orders over gRPC, then sends their signed Yolfi
// payment.confirmed webhooks — open loop at a fixed rate, or closed loop
// from a number of workers — optionally mixed with redeliveries and
// out-of-order invoice events, and reports the acknowledgement latency and,
// reading the service's database, the ack→fulfilled latency of every new
// event.
//
//	go run ./rig/cmd/loadgen --grpc 127.0.0.1:9090 --token-file T --ingest http://127.0.0.1:8081/webhooks/yolfi-live \
//	    --secret-file S --org org_a --env live --events 2000 --rate 200
//	go run ./rig/cmd/loadgen ... --mode closed --concurrency 32 --duration 10s --events 20000 --redeliver 0.2 --out-of-order 0.05
//
// Open loop: latency is measured from each request's scheduled send time,
// so a generator that falls behind cannot hide delay. The pieces live in
// rig/loadgen; rig/cmd/bench runs the whole benchmark with them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/loadgen"
)

type options struct {
	grpcAddr, tokenFile, ingestURL, secretFile, org, env, dbURL, mode string
	events, rate, concurrency, createWorkers, bodySize                int
	duration, warmup                                                  time.Duration
	redeliver, outOfOrder                                             float64
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var o options
	flag.StringVar(&o.grpcAddr, "grpc", "127.0.0.1:9090", "gRPC address of fulfillmentd")
	flag.StringVar(&o.tokenFile, "token-file", "", "bearer token with orders:write for --org")
	flag.StringVar(&o.ingestURL, "ingest", "http://127.0.0.1:8081/webhooks/yolfi-test", "webhook endpoint URL")
	flag.StringVar(&o.secretFile, "secret-file", "", "the endpoint's signing secret")
	flag.StringVar(&o.org, "org", "org_demo", "org of the endpoint")
	flag.StringVar(&o.env, "env", "test", "environment of the endpoint: live or test")
	flag.StringVar(&o.dbURL, "database-url", os.Getenv("DATABASE_URL"), "the service's database, to read ack→fulfilled latency (optional)")
	flag.StringVar(&o.mode, "mode", "open", "open: --rate events/s whatever the answers; closed: --concurrency workers, each waiting for its answer")
	flag.IntVar(&o.events, "events", 1000, "orders to create; open mode: also the events to send (unless --duration is set)")
	flag.IntVar(&o.rate, "rate", 200, "open mode: requests per second")
	flag.IntVar(&o.concurrency, "concurrency", 64, "open mode: maximum requests in flight; closed mode: workers")
	flag.DurationVar(&o.duration, "duration", 0, "how long to send (open mode default: events/rate; closed mode default: 10s)")
	flag.DurationVar(&o.warmup, "warmup", 0, "sent before measuring, not measured")
	flag.Float64Var(&o.redeliver, "redeliver", 0, "share of requests that resend an already acknowledged event byte for byte, e.g. 0.2")
	flag.Float64Var(&o.outOfOrder, "out-of-order", 0, "share of requests that are invoice.created/invoice.overdue after the order's confirmation, e.g. 0.05")
	flag.IntVar(&o.createWorkers, "create-workers", 16, "concurrent CreateOrder calls while preparing")
	flag.IntVar(&o.bodySize, "body-size", loadgen.DefaultBodySize, "approximate webhook body size in bytes (0: minimal bodies)")
	flag.Parse()
	err := run(ctx, o)
	stop() // not deferred: os.Exit below would skip it
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.mode != "open" && o.mode != "closed" {
		return fmt.Errorf("--mode must be open or closed, not %q", o.mode)
	}
	if o.rate <= 0 || o.concurrency <= 0 || o.events <= 0 {
		return errors.New("--rate, --concurrency and --events must be positive")
	}
	if o.redeliver < 0 || o.outOfOrder < 0 || o.redeliver+o.outOfOrder >= 1 {
		return errors.New("--redeliver and --out-of-order must be ≥ 0 and add up to less than 1")
	}
	token, err := readSecret(o.tokenFile)
	if err != nil {
		return err
	}
	secret, err := readSecret(o.secretFile)
	if err != nil {
		return err
	}
	api, err := loadgen.DialAPI(o.grpcAddr, token)
	if err != nil {
		return err
	}
	defer func() { _ = api.Close() }()

	orders := o.events
	if o.mode == "open" && o.duration > 0 {
		orders = int(float64(o.rate) * (o.duration + o.warmup).Seconds())
	}
	fmt.Fprintf(os.Stderr, "loadgen: creating %d orders (%d at a time)\n", orders, o.createWorkers)
	t0 := time.Now()
	created, err := api.CreateOrders(ctx, o.org, o.env, "lg-"+yolfi.NewID("")[:8], orders, o.createWorkers)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "loadgen: created %d orders in %v\n", len(created), time.Since(t0).Round(time.Millisecond))

	src := loadgen.YolfiSource{Org: o.org, Live: o.env == "live", Secret: []byte(secret), BodySize: o.bodySize}
	mix := loadgen.NewMix(src, created, o.redeliver, o.outOfOrder)
	sender := loadgen.NewSender(o.ingestURL, o.concurrency)
	defer sender.Close()

	var res loadgen.Result
	if o.mode == "open" {
		d := o.duration
		if d <= 0 {
			d = time.Duration(float64(o.events) / float64(o.rate) * float64(time.Second))
		}
		cfg := loadgen.OpenConfig{Rate: float64(o.rate), Duration: d, Warmup: o.warmup, MaxInFlight: o.concurrency}
		first := cfg.FirstMeasured()
		fmt.Fprintf(os.Stderr, "loadgen: open loop, %d requests at %d/s (at most %d in flight)\n", cfg.OpenTotal(), o.rate, o.concurrency)
		res = loadgen.RunOpen(ctx, cfg, func(ctx context.Context, i int) (int, error) {
			return mix.Send(ctx, sender, i >= first)
		})
		fmt.Printf("open loop: offered %d/s for %v; %d answered 200 (%.0f/s); late %d, unsent %d\n",
			o.rate, d, res.OK, res.Throughput(), res.Late, res.Unsent)
		fmt.Printf("ack latency (from scheduled send): %s\n", res.Latency())
	} else {
		d := o.duration
		if d <= 0 {
			d = 10 * time.Second
		}
		fmt.Fprintf(os.Stderr, "loadgen: closed loop, %d workers for %v\n", o.concurrency, d)
		res = loadgen.RunClosed(ctx, loadgen.ClosedConfig{Workers: o.concurrency, Warmup: o.warmup, Duration: d},
			func(ctx context.Context, _ int) (int, error) { return mix.Send(ctx, sender, true) })
		fmt.Printf("closed loop: %d workers for %v; %d answered 200 (%.0f/s)\n", o.concurrency, res.Elapsed.Round(time.Millisecond), res.OK, res.Throughput())
		fmt.Printf("ack latency (request start → 200): %s\n", res.Latency())
	}
	fmt.Printf("acknowledged: %d new, %d redeliveries, %d out-of-order\n",
		mix.Acked(loadgen.KindNew), mix.Acked(loadgen.KindRedelivery), mix.Acked(loadgen.KindOutOfOrder))
	if n := res.Non200(); n > 0 {
		fmt.Printf("not 200: %d %s\n", n, formatStatuses(res.StatusCounts()))
	}
	if n := mix.Exhausted(); n > 0 {
		fmt.Printf("warning: orders ran out %d times (sent redeliveries instead): raise --events\n", n)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if o.dbURL == "" {
		return nil
	}
	return fulfilledLatency(ctx, o.dbURL, loadgen.EventKey{Provider: "yolfi", Org: o.org, Environment: o.env}, mix.NewIDs())
}

// fulfilledLatency waits until every new event is processed and reports
// processed_at − received_at (see loadgen.FulfilledMethod).
func fulfilledLatency(ctx context.Context, dbURL string, key loadgen.EventKey, ids []string) error {
	db, err := loadgen.ConnectDB(ctx, dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := loadgen.Drain(ctx, db, 2*time.Minute); err != nil {
		return err
	}
	ts, err := loadgen.Timings(ctx, db, key, ids)
	if err != nil {
		return err
	}
	r := loadgen.Fulfilled(ts)
	fmt.Printf("ack→fulfilled latency (database clock): %s\n", r.Latency)
	fmt.Printf("decisions: %v\n", r.Decisions)
	fmt.Printf("method: %s\n", loadgen.FulfilledMethod)
	return nil
}

func formatStatuses(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		name := fmt.Sprint(k)
		if k == -1 {
			name = "error"
		}
		parts[i] = fmt.Sprintf("%s×%d", name, m[k])
	}
	return "(" + strings.Join(parts, " ") + ")"
}

func readSecret(path string) (string, error) {
	if path == "" {
		return "", errors.New("--token-file and --secret-file are required")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
