package main

// The reads phase: GetOrder over gRPC and REST on orders the pipeline
// fulfilled, and CheckAccess over gRPC for customers of seeded paid
// subscriptions.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/rig/loadgen"
)

func (b *bench) readsPhase(ctx context.Context) error {
	if len(b.readable) == 0 {
		return errors.New("no orders to read")
	}
	ids := make([]string, len(b.readable))
	for i, o := range b.readable {
		ids[i] = o.ID
	}
	runs := []struct {
		name string
		do   func(ctx context.Context, id string) (int, error)
	}{
		{"GetOrder gRPC", b.t.api.GetOrder},
		{"GetOrder REST (GET /v1/orders/{id})", b.t.rest.GetOrder},
	}
	for _, r := range runs {
		if err := b.readRun(ctx, r.name, "", b.o.readWorkers, ids, r.do); err != nil {
			return err
		}
	}
	if b.o.subscriptions == 0 {
		return nil
	}
	customers, err := b.seedSubscriptions(ctx, b.o.subscriptions)
	if err != nil {
		return err
	}
	var denied atomic.Int64
	check := func(ctx context.Context, customer string) (int, error) {
		resp, err := b.t.api.Client.CheckAccess(b.t.api.Ctx(ctx), &fulfillmentv1.CheckAccessRequest{
			OrgId: benchOrg, Environment: benchEnv, CustomerRef: customer, PlanId: benchPlan})
		if err == nil && !resp.GetHasAccess() {
			denied.Add(1)
		}
		return loadgen.GRPCStatus(err)
	}
	note := fmt.Sprintf("random customers of %s paid subscriptions", humanCount(len(customers)))
	if err := b.readRun(ctx, "CheckAccess gRPC", note, b.o.accessWorkers, customers, check); err != nil {
		return err
	}
	if n := denied.Load(); n > 0 {
		b.warn("CheckAccess answered %d times without access for customers of paid subscriptions", n)
	}
	return nil
}

// readRun is one closed-loop read run, reported as a reads row: workers
// clients call do, each time on a key picked at random among keys.
func (b *bench) readRun(ctx context.Context, name, note string, workers int, keys []string,
	do func(ctx context.Context, key string) (int, error)) error {
	pick := func(i int) string { return keys[(i*7919+int(time.Now().UnixNano()))%len(keys)] }
	var seq [256]int
	cpu0 := b.cpu.sample()
	res := loadgen.RunClosed(ctx, loadgen.ClosedConfig{Workers: workers, Warmup: b.o.warmup, Duration: b.o.reads},
		func(ctx context.Context, w int) (int, error) {
			seq[w%256]++
			return do(ctx, pick(w*100003+seq[w%256]))
		})
	lvl := LoadLevel{Name: name, Concurrency: workers, Seconds: round2(res.Elapsed.Seconds()), OK: res.OK,
		PerSecond: round1(res.Throughput()), Latency: res.Latency(), Non200: res.StatusCounts(), CPU: b.cpu.since(cpu0), Note: note}
	b.rep.Reads = append(b.rep.Reads, lvl)
	b.logf("%s, %d workers: %.0f req/s  %s  cpu %s  non-200 %d", name, lvl.Concurrency, lvl.PerSecond, lvl.Latency, lvl.CPU, lvl.Non200Total())
	return ctx.Err()
}

// seedSubscriptions stores n active subscriptions of benchOrg to
// benchPlan, each of its own customer with one paid period around now, as
// the rules store them (COPY into the service's database, then ANALYZE),
// and returns their customers.
func (b *bench) seedSubscriptions(ctx context.Context, n int) ([]string, error) {
	t0 := time.Now()
	now := time.Now().UTC()
	start, end := now.AddDate(0, 0, -10), now.AddDate(0, 0, 20)
	customers := make([]string, n)
	subs, periods := make([][]any, n), make([][]any, n)
	for i := range n {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, err
		}
		customers[i] = fmt.Sprintf("bench-%s-customer-%d", b.runID, i)
		subs[i] = []any{id, benchOrg, benchEnv, "yolfi", fmt.Sprintf("bench-%s-sub-%d", b.runID, i), customers[i], benchPlan,
			"active", 1, start, end, start}
		periods[i] = []any{id, 1, fmt.Sprintf("invoice:bench-%s-%d", b.runID, i), fmt.Sprintf("bench-pay-%d", i), start, end}
	}
	err := pgx.BeginFunc(ctx, b.t.db, func(tx pgx.Tx) error {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"subscriptions"}, []string{"id", "org_id", "environment", "provider",
			"provider_subscription_id", "customer_ref", "plan_id", "state", "periods", "period_start", "period_end", "last_event_at"},
			pgx.CopyFromRows(subs)); err != nil {
			return fmt.Errorf("seeding subscriptions: %w", err)
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"subscription_periods"}, []string{"subscription_id", "period", "period_key",
			"payment_id", "starts_at", "ends_at"}, pgx.CopyFromRows(periods)); err != nil {
			return fmt.Errorf("seeding subscription periods: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if _, err := b.t.db.Exec(ctx, "ANALYZE subscriptions, subscription_periods"); err != nil {
		return nil, err
	}
	b.logf("seeded %d paid subscriptions in %.1fs", n, time.Since(t0).Seconds())
	return customers, nil
}
