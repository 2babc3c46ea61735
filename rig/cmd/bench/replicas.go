package main

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/rig/loadgen"
)

// ReplicaRun is the saturating push against n fulfillmentd replicas sharing
// one database: where the ratio to one replica stops growing, the database
// (not the service) bounds the throughput.
type ReplicaRun struct {
	Replicas        int     `json:"replicas"`
	Events          int     `json:"events"`
	IngestPerSecond float64 `json:"ingest_per_s"`
	// FulfilledPerSec is every event of the push processed, over the span
	// from its first receipt to its last processing (push and drain).
	FulfilledPerSec float64 `json:"fulfilled_per_s"`
	// RatioToOne is FulfilledPerSec over the one-replica run's.
	RatioToOne float64 `json:"ratio_to_one_replica"`
	// CPU per event over the push and its drain: every replica's, and
	// PostgreSQL's.
	ServiceUsPerEvent  float64  `json:"service_us_per_event"`
	PostgresUsPerEvent float64  `json:"postgres_us_per_event"`
	CPU                CPUShare `json:"cpu_push"`
}

// replicasPhase runs the saturating push against 1, 2 and 3 replicas, each
// count on a database of its own (same cluster), the push's clients spread
// over the replicas' webhook listeners.
func (b *bench) replicasPhase(ctx context.Context) error {
	var one float64
	for _, n := range b.o.replicas {
		if err := b.phase(fmt.Sprintf("replicas: saturating push against %d fulfillmentd", n), func() error {
			run, err := b.replicaRun(ctx, n)
			if err != nil {
				return err
			}
			if n == 1 {
				one = run.FulfilledPerSec
			}
			if one > 0 {
				run.RatioToOne = round2(run.FulfilledPerSec / one)
			}
			b.rep.Replicas = append(b.rep.Replicas, *run)
			b.logf("%d replicas: ingest %.0f/s, fulfilled %.0f/s (%.2f× one), CPU per event svc %.0f µs, pg %.0f µs",
				n, run.IngestPerSecond, run.FulfilledPerSec, run.RatioToOne, run.ServiceUsPerEvent, run.PostgresUsPerEvent)
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) replicaRun(ctx context.Context, n int) (*ReplicaRun, error) {
	dbName := fmt.Sprintf("replicas_%d", n)
	conn, err := pgx.Connect(ctx, b.cluster.URL("postgres"))
	if err != nil {
		return nil, err
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+dbName)
	_ = conn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("creating database %s: %w", dbName, err)
	}
	targets := make([]*target, n)
	for i := range targets {
		t, err := b.startTarget(ctx, fmt.Sprintf("replicas%d-%d", n, i+1), dbName, nil)
		if err != nil {
			return nil, err
		}
		targets[i] = t
	}
	defer func() {
		for _, t := range targets {
			t.close()
		}
	}()
	main := b.t
	b.use(targets[0])
	defer b.use(main)

	guess := max(b.peakIngest, b.maxAccepted, 300) * 1.15
	orders, err := b.createOrders(ctx, int(guess*b.o.replicaPush.Seconds())+200)
	if err != nil {
		return nil, err
	}
	b.ready(ctx)
	mix := loadgen.NewMix(b.src, orders, 0, 0)
	mix.StopWhenExhausted = true
	pids := make([]int, n)
	for i, t := range targets {
		pids[i] = t.svc.pid()
	}
	svc0, cpu0 := servicesCPU(pids), b.cpu.sample()
	res := loadgen.RunClosed(ctx, loadgen.ClosedConfig{Workers: b.o.pushWorkers, Duration: b.o.replicaPush},
		func(ctx context.Context, w int) (int, error) { return mix.Send(ctx, targets[w%n].sender, true) })
	cpuPush, svcPush := b.cpu.since(cpu0), servicesCPU(pids)
	// The meter's service column is the first replica's: count them all.
	cpuPush.Service = round2((svcPush - svc0) / max(res.Elapsed.Seconds(), 1e-9))
	b.drain(ctx, fmt.Sprintf("the push against %d replicas", n))
	svc1, cpu1 := servicesCPU(pids), b.cpu.sample()

	ts, err := loadgen.Timings(ctx, targets[0].db, b.key, mix.NewIDs())
	if err != nil {
		return nil, err
	}
	f := loadgen.Fulfilled(ts)
	run := &ReplicaRun{Replicas: n, Events: f.Latency.N, IngestPerSecond: round1(res.Throughput())}
	run.CPU = cpuPush
	first, _ := loadgen.ReceivedSpan(ts)
	if last := loadgen.LastProcessed(ts); run.Events > 0 && last.After(first) {
		run.FulfilledPerSec = round1(float64(run.Events) / last.Sub(first).Seconds())
		run.ServiceUsPerEvent = round1((svc1 - svc0) / float64(run.Events) * 1e6)
		run.PostgresUsPerEvent = round1((cpu1.postgres - cpu0.postgres) / float64(run.Events) * 1e6)
	}
	return run, nil
}

// servicesCPU is the CPU seconds the processes pids have used.
func servicesCPU(pids []int) float64 {
	var s float64
	for _, pid := range pids {
		s += procTimes(pid, true)
	}
	return s
}
