// Package worker runs the service's background work: the inbox processor
// turning stored provider events into order effects.
package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/internal/failpoint"
)

// InboxConfig tunes the inbox processor.
type InboxConfig struct {
	// Workers process claims concurrently (default 4).
	Workers int
	// Batch is the number of events one claim leases (default 16).
	Batch int
	// Lease is how long a claim is exclusive; an event whose worker died is
	// reclaimed after it (default 30s).
	Lease time.Duration
	// Poll is the fallback claim interval when no notification arrives
	// (default 1s).
	Poll time.Duration
	// MaxAttempts is the retry budget of one event (default 10); past it the
	// event is failed and a failed_event item opened.
	MaxAttempts int
	// BaseBackoff and MaxBackoff bound the exponential retry delay
	// (defaults 1s and 5m); a random jitter of up to half the delay is added.
	BaseBackoff, MaxBackoff time.Duration
}

func (c *InboxConfig) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.Batch <= 0 {
		c.Batch = 16
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 10
	}
	set(&c.Lease, 30*time.Second)
	set(&c.Poll, time.Second)
	set(&c.BaseBackoff, time.Second)
	set(&c.MaxBackoff, 5*time.Minute)
}

// InboxProcessor claims pending inbox events and processes each in one
// transaction. Any number of processors may run against one database.
type InboxProcessor struct {
	work  fulfillment.InboxWork
	cfg   InboxConfig
	log   *slog.Logger
	owner string
	wake  chan struct{}
	// OnOutcome, when set, observes every processed event (metrics).
	OnOutcome func(fulfillment.Outcome)
}

// NewInboxProcessor returns a processor over work.
func NewInboxProcessor(work fulfillment.InboxWork, cfg InboxConfig, log *slog.Logger) *InboxProcessor {
	cfg.defaults()
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &InboxProcessor{
		work:  work,
		cfg:   cfg,
		log:   log,
		owner: fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:])),
		wake:  make(chan struct{}, cfg.Workers),
	}
}

// Run processes events until ctx ends. Events in flight when it ends are
// rolled back and reclaimed by a processor after their lease.
func (p *InboxProcessor) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = p.work.InboxListen(ctx, p.notify)
	}()
	for range p.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.loop(ctx)
		}()
	}
	p.log.Info("inbox processor started", "owner", p.owner, "workers", p.cfg.Workers)
	wg.Wait()

	// Hand back what was claimed but not processed, so that another
	// processor need not wait for the lease to expire.
	releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if n, err := p.work.InboxRelease(releaseCtx, p.owner); err != nil {
		p.log.Warn("releasing inbox leases", "error", err)
	} else if n > 0 {
		p.log.Info("released unprocessed inbox events", "count", n)
	}
	return nil
}

// notify wakes idle workers; extra notifications are dropped.
func (p *InboxProcessor) notify() {
	for range cap(p.wake) {
		select {
		case p.wake <- struct{}{}:
		default:
			return
		}
	}
}

func (p *InboxProcessor) loop(ctx context.Context) {
	poll := time.NewTimer(p.cfg.Poll)
	defer poll.Stop()
	for ctx.Err() == nil {
		claims, err := p.work.InboxClaim(ctx, p.owner, p.cfg.Batch, p.cfg.Lease, p.cfg.MaxAttempts)
		if err != nil && ctx.Err() == nil {
			p.log.Warn("claiming inbox events", "error", err)
		}
		if len(claims) > 0 {
			failpoint.Inject("after-claim")
			p.process(ctx, claims)
			if len(claims) == p.cfg.Batch {
				continue // more may be waiting
			}
		}
		poll.Reset(p.cfg.Poll)
		select {
		case <-ctx.Done():
		case <-p.wake:
		case <-poll.C:
		}
	}
}

// process applies a batch of claims in one transaction. When the batch
// fails, each event is tried alone, so that one failing event is retried
// (and eventually failed) on its own without holding back the others.
func (p *InboxProcessor) process(ctx context.Context, claims []fulfillment.InboxClaim) {
	ids := make([]int64, len(claims))
	for i, c := range claims {
		ids[i] = c.ID
	}
	outs, err := p.work.InboxProcess(ctx, ids, p.owner)
	if err == nil {
		p.observe(claims, outs)
		return
	}
	if ctx.Err() != nil {
		return // shutting down: the leases are released or expire
	}
	if len(claims) > 1 {
		for _, c := range claims {
			p.process(ctx, []fulfillment.InboxClaim{c})
		}
		return
	}
	c := claims[0]
	next := time.Now().Add(p.backoff(c.Attempts))
	failed, rerr := p.work.InboxRetry(ctx, c.ID, p.owner, err.Error(), next, p.cfg.MaxAttempts)
	switch {
	case errors.Is(rerr, fulfillment.ErrLeaseLost):
		p.log.Info("inbox event taken over by another worker", "inbox_id", c.ID)
	case rerr != nil:
		p.log.Warn("recording failed inbox attempt", "inbox_id", c.ID, "error", rerr)
	case failed:
		p.log.Error("inbox event failed past its retry budget", "inbox_id", c.ID, "attempts", c.Attempts, "error", err)
	default:
		p.log.Warn("inbox event processing failed; will retry", "inbox_id", c.ID, "attempt", c.Attempts, "retry_at", next, "error", err)
	}
}

func (p *InboxProcessor) observe(claims []fulfillment.InboxClaim, outs map[int64]fulfillment.Outcome) {
	for _, c := range claims {
		out, ok := outs[c.ID]
		if !ok {
			p.log.Info("inbox event taken over by another worker", "inbox_id", c.ID)
			continue
		}
		if p.OnOutcome != nil {
			p.OnOutcome(out)
		}
	}
}

// backoff is the capped exponential delay before retry number attempt, with
// jitter so that events failing together do not retry together.
func (p *InboxProcessor) backoff(attempt int) time.Duration {
	d := float64(p.cfg.BaseBackoff) * math.Pow(2, float64(max(attempt-1, 0)))
	if d > float64(p.cfg.MaxBackoff) {
		d = float64(p.cfg.MaxBackoff)
	}
	return time.Duration(d + mrand.Float64()*d/2)
}
