package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fulfillplatform/fulfillment/internal/buildinfo"
	"github.com/fulfillplatform/fulfillment/worker"
)

// queueHealth tells whether each queue of this process can claim work:
// fulfillment_queue_up{queue} says so at every scrape, Down lists the queues
// that cannot (for readiness), and while watch runs one log line says when
// a queue stops claiming (with the cause) and one when it claims again.
type queueHealth struct {
	log   *slog.Logger
	every time.Duration
	desc  *prometheus.Desc

	mu     sync.Mutex
	queues []*worker.Queue
	logged map[string]bool // the queues said to be down in the log
	wasUp  map[string]bool // the queues that have claimed work once
}

func newQueueHealth(reg prometheus.Registerer, log *slog.Logger) *queueHealth {
	h := &queueHealth{
		log:   log,
		every: time.Second,
		desc: prometheus.NewDesc("fulfillment_queue_up",
			"1 while the queue can claim work in this process (its liveness session is held and its last claim worked), else 0.",
			[]string{"queue"}, nil),
		logged: map[string]bool{},
		wasUp:  map[string]bool{},
	}
	reg.MustRegister(h)
	return h
}

// Describe implements prometheus.Collector.
func (h *queueHealth) Describe(ch chan<- *prometheus.Desc) { ch <- h.desc }

// Collect implements prometheus.Collector.
func (h *queueHealth) Collect(ch chan<- prometheus.Metric) {
	for _, q := range h.running() {
		up := 1.0
		if q.Down() != nil {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(h.desc, prometheus.GaugeValue, up, q.Name())
	}
}

func (h *queueHealth) running() []*worker.Queue {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.queues
}

// watch follows the queues until ctx ends, logging when one stops or starts
// claiming again.
func (h *queueHealth) watch(ctx context.Context, queues []*worker.Queue) {
	h.mu.Lock()
	h.queues = queues
	h.mu.Unlock()
	tick := time.NewTicker(h.every)
	defer tick.Stop()
	// A queue starting up is given a few seconds to take its liveness and
	// claim once before it is said to be down in the log; once it has
	// claimed, it is said at once.
	grace := time.Now().Add(5 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		h.check(time.Now().Before(grace))
	}
}

func (h *queueHealth) check(starting bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, q := range h.queues {
		name, err := q.Name(), q.Down()
		if err == nil {
			h.wasUp[name] = true
		}
		switch {
		case err == nil && h.logged[name]:
			h.log.Info("queue claims work again", "queue", name)
			delete(h.logged, name)
		case err != nil && !h.logged[name] && (h.wasUp[name] || !starting):
			h.log.Error("queue cannot claim work: its work waits until it claims again (webhooks are still acknowledged while the database answers)", "queue", name, "cause", err)
			h.logged[name] = true
		}
	}
}

// Down lists the queues that cannot claim work now, by name, with the cause.
func (h *queueHealth) Down() map[string]error {
	down := map[string]error{}
	for _, q := range h.running() {
		if err := q.Down(); err != nil {
			down[q.Name()] = err
		}
	}
	return down
}

// BuildInfo is fulfillment_build_info: 1, labelled with the build.
func BuildInfo() prometheus.Collector {
	bi := buildinfo.Read()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fulfillment_build_info",
		Help: "1, labelled with the running build: version, git commit, commit time, build time and Go version.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "commit": bi.Commit, "commit_time": bi.CommitTime,
			"built_at": bi.BuiltAt, "go_version": bi.Go},
	})
	g.Set(1)
	return g
}
