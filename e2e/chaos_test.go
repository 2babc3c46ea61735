package e2e_test

// The short fault-injection run (issue: make chaos; the full run is
// rig/cmd/chaos): provider-like webhook load against a real fulfillmentd on a
// durable PostgreSQL of its own, while fulfillmentd is SIGKILLed and
// restarted at random moments and PostgreSQL is stopped in immediate mode
// and restarted. Nothing acknowledged may be lost, nothing granted twice,
// and during the database outage the webhook endpoint answers 503 within 2s
// and recovers within 5s of the database returning.

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/rig/chaos"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
)

// TestChaosShort runs the short profile: 300 orders, 3000 events (plus 20%
// redeliveries) offered over about 30s — subscription charges refunded
// among them, some refunds before their charge — at least 5 kills and one
// PostgreSQL restart — about 45s on an idle machine, bounded at 75s so that a loaded
// machine slows it down without failing it. CHAOS_SEED reproduces a run
// (its seed is logged). It starts its own PostgreSQL and ignores
// DATABASE_URL. Not parallel: its timing assertions want the CPU this
// package's other tests would take.
func TestChaosShort(t *testing.T) { //nolint:paralleltest // see above: alone on the CPU
	if testing.Short() {
		t.Skip("the chaos run takes about a minute")
	}
	bin := procPlainBuild.binary(t)
	var seed int64
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
	}
	log := &daemon.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	rep, err := chaos.Run(ctx, chaos.Options{
		Orders:      300,
		Events:      3000,
		Duration:    75 * time.Second,
		Kills:       5,
		PGRestarts:  1,
		Concurrency: 16,
		Binary:      bin,
		Log:         log,
		Seed:        seed,
	})
	if err != nil || !rep.OK() || testing.Verbose() {
		t.Logf("chaos log:\n%s", log.String())
	}
	if err != nil {
		t.Fatalf("chaos run could not be carried out: %v\n%s", err, rep.String())
	}
	if !rep.OK() {
		t.Fatalf("chaos run found violations (reproduce with CHAOS_SEED=%d):\n%s", rep.Seed, rep.String())
	}
	if rep.Kills < 5 || rep.PGRestarts < 1 {
		t.Fatalf("only %d kills and %d PostgreSQL restarts, want at least 5 and 1", rep.Kills, rep.PGRestarts)
	}
	// The refunds of subscription charges, some sent before their charge,
	// are part of the short run too (a few dozen at 300 orders).
	if sb := rep.Subscriptions; sb.RefundsFirst == 0 || sb.RefundsApplied == 0 || sb.RefundedPeriods == 0 {
		t.Fatalf("charge refunds: %d sent before their charge, %d applied, %d periods refunded; want some of each (CHAOS_SEED=%d)",
			sb.RefundsFirst, sb.RefundsApplied, sb.RefundedPeriods, rep.Seed)
	}
	// Renewals that name their subscription's order too, decided by the
	// subscription rules (renewed, the order untouched): a third of the
	// Yolfi renewals, a dozen or so at 300 orders.
	if sb := rep.Subscriptions; sb.NamingOrder == 0 || sb.NamingRenewed == 0 || sb.NamingInvoices == 0 {
		t.Fatalf("renewals naming their order: %d sent, %d renewed by the subscription rules, %d of their invoices' events naming it; want some of each (CHAOS_SEED=%d)",
			sb.NamingOrder, sb.NamingRenewed, sb.NamingInvoices, rep.Seed)
	}
	// Overpaid T-Bank orders refunded in parts (a dozen or so at 300
	// orders): refunds of the excess alone, and of the price.
	if ov := rep.Overpaid; ov.Orders == 0 || ov.NothingBack == 0 || ov.TookBack == 0 {
		t.Fatalf("overpaid orders: %d, %d refunds of the excess only, %d taking a share back; want some of each (CHAOS_SEED=%d)",
			ov.Orders, ov.NothingBack, ov.TookBack, rep.Seed)
	}
	// A registered subscription's first payment, claimed by its order
	// created after it: at least one such order per run.
	if lf := rep.LateFirst; lf.Claimed == 0 {
		t.Fatalf("late first payments: %d orders fit of %d stories, none claimed its payment (CHAOS_SEED=%d)", lf.Fit, lf.Stories, rep.Seed)
	}
	t.Logf("%s (seed %d, %d kills, %d PostgreSQL restarts, slowest 503 %v, recovery %v, %v)",
		rep.Summary(), rep.Seed, rep.Kills, rep.PGRestarts, rep.Max503Latency.Round(time.Millisecond),
		rep.Recoveries, time.Since(start).Round(100*time.Millisecond))
}
