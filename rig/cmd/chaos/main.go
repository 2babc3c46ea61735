// Command chaos is the fault-injection run of fulfillmentd (make chaos): it
// drives a real fulfillmentd on a real, durable PostgreSQL with
// provider-like webhook load (Yolfi events, T-Bank notifications with
// refunds for a quarter of the orders, a fifth of those overpaid and
// refunded the excess first, subscriptions' renewals,
// lifecycle events and lapses for one Yolfi order in eight, and T-Bank
// subscriptions' recurrent charges, half of them refunded, some refunds
// before their charge) while
// SIGKILLing fulfillmentd and stopping PostgreSQL in immediate mode at
// random moments, then checks that nothing acknowledged was lost and
// nothing was granted, reversed or ended twice, and that the outbox
// delivered each external line's message to its (flaky) receiver once — or
// left it uncertain, with an open item, where the receiver does not honour
// idempotency keys. It prints the report, then the summary line last, and
// exits 1 on any violation.
//
//	go build -o .cache/fulfillmentd ./cmd/fulfillmentd
//	go run ./rig/cmd/chaos --binary .cache/fulfillmentd
//
// The defaults are the full run: 2000 orders, 20000 events, 20 kills,
// 2 PostgreSQL restarts, 8 minutes at most. Without --binary, fulfillmentd
// is built from the module into a temporary folder.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/fulfillplatform/fulfillment/rig/chaos"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
)

// errViolations means the run completed and found violations: the report
// says which.
var errViolations = errors.New("violations found")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop() // not deferred: os.Exit below would skip it
	if err != nil {
		if !errors.Is(err, errViolations) {
			fmt.Fprintln(os.Stderr, "chaos:", err)
		}
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o chaos.Options
	fs.StringVar(&o.Binary, "binary", "", "fulfillmentd binary to run (default: build it from this module)")
	fs.IntVar(&o.Orders, "orders", 2000, "orders to create")
	fs.IntVar(&o.Events, "events", 20000, "distinct provider events to deliver, at least (20% redeliveries come on top)")
	fs.DurationVar(&o.Duration, "duration", 8*time.Minute, "upper bound of the run")
	fs.IntVar(&o.Kills, "kills", 20, "SIGKILLs of fulfillmentd, each followed by a restart")
	fs.IntVar(&o.PGRestarts, "pg-restarts", 2, "immediate stops of PostgreSQL, each followed by a restart")
	fs.IntVar(&o.Concurrency, "concurrency", 16, "webhook requests in flight, at most")
	fs.Float64Var(&o.Rate, "rate", 120, "offered deliveries per second (sets the length of the send phase)")
	fs.Int64Var(&o.Seed, "seed", 0, "seed of the workload and fault schedule (0: random, printed)")
	fs.StringVar(&o.WorkDir, "workdir", "", "where to create the run's folder (default: the system temp folder)")
	fs.BoolVar(&o.KeepOnFailure, "keep", false, "keep the run's folder (database, logs) when the run fails")
	fs.StringVar(&o.Pooler, "pgbouncer", "", "run fulfillmentd behind PgBouncer in this pool mode: transaction (sessions go to PostgreSQL directly) or session")
	quiet := fs.Bool("quiet", false, "no progress lines on stderr")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil
	} else if err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	o.Log = stderr
	if *quiet {
		o.Log = io.Discard
	}

	if o.Binary == "" {
		dir, err := os.MkdirTemp("", "chaos-bin-")
		if err != nil {
			return err
		}
		defer func() { _ = os.RemoveAll(dir) }() // a temporary folder: best effort
		o.Binary = filepath.Join(dir, "fulfillmentd")
		_, _ = fmt.Fprintf(o.Log, "chaos: building fulfillmentd into %s\n", o.Binary)
		root, err := daemon.ModuleRoot()
		if err != nil {
			return fmt.Errorf("building fulfillmentd: run chaos inside the module, or pass --binary: %w", err)
		}
		if err := daemon.Build(ctx, root, o.Binary); err != nil {
			return fmt.Errorf("building fulfillmentd: %w", err)
		}
	}

	rep, err := chaos.Run(ctx, o)
	if _, werr := rep.WriteTo(stdout); werr != nil {
		return werr
	}
	_, _ = fmt.Fprintln(stdout, rep.Summary())
	switch {
	case err != nil:
		return err
	case !rep.OK():
		return errViolations
	}
	return nil
}
