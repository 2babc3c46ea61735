package main

// The pipeline phase: new payment confirmations offered open loop at fixed
// rates, their acknowledgement and ack→fulfilled latency.

import (
	"context"
	"fmt"

	"github.com/fulfillplatform/fulfillment/rig/loadgen"
)

// pipelinePoint sends new payment.confirmed events open loop at rate/s and
// measures ack and ack→fulfilled latency.
func (b *bench) pipelinePoint(ctx context.Context, rate int, label string) (*Pipeline, error) {
	p, _, err := b.pipelineOf(ctx, rate, label, b.createOrders)
	return p, err
}

// pipelineOf is pipelinePoint over orders made by create; it also returns
// the mix that paid them, with the time of each acknowledgement.
func (b *bench) pipelineOf(ctx context.Context, rate int, label string, create func(context.Context, int) ([]loadgen.Order, error)) (*Pipeline, *loadgen.Mix, error) {
	n := int(float64(rate)*(b.o.warmup+b.o.pipeline).Seconds()) + 10
	orders, err := create(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	b.ready(ctx)
	mix := loadgen.NewMix(b.src, orders, 0, 0)
	p := &Pipeline{Label: label}
	p.Ack = b.openIngest(ctx, float64(rate), b.o.pipeline, mix)
	p.DrainSeconds = b.drain(ctx, fmt.Sprintf("the %d/s pipeline run", rate))
	ts, err := loadgen.Timings(ctx, b.t.db, b.key, mix.NewIDs())
	if err != nil {
		return nil, nil, err
	}
	p.Fulfilled = loadgen.Fulfilled(ts)
	if p.Fulfilled.Decisions["fulfilled"] < p.Fulfilled.Latency.N {
		b.warn("pipeline at %d/s: decisions %v (expected all fulfilled)", rate, p.Fulfilled.Decisions)
	}
	if b.t == b.targets[0] {
		b.readable = append(b.readable, orders[:min(len(orders), 2000)]...)
	}
	b.logf("pipeline %d/s (%s): ack %s  late %d | ack→fulfilled %s  pending %d  cpu %s",
		rate, label, p.Ack.Latency, p.Ack.Late, p.Fulfilled.Latency, p.Fulfilled.Pending, p.Ack.CPU)
	return p, mix, ctx.Err()
}
