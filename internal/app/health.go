package app

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fulfillplatform/fulfillment/worker"
)

// queueHealth watches whether each queue of this process can claim work:
// fulfillment_queue_up{queue} says so, one log line says when a queue stops
// claiming (with the cause) and one when it claims again, and Down lists
// the queues that cannot (for readiness).
type queueHealth struct {
	queues []*worker.Queue
	up     *prometheus.GaugeVec
	log    *slog.Logger
	every  time.Duration

	mu     sync.Mutex
	down   map[string]error // by queue name; nil until the first check
	logged map[string]bool  // the queues said to be down in the log
}

func newQueueHealth(reg prometheus.Registerer, log *slog.Logger) *queueHealth {
	h := &queueHealth{
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fulfillment_queue_up",
			Help: "1 while the queue can claim work in this process (its liveness session is held and its last claim worked), else 0.",
		}, []string{"queue"}),
		log:    log,
		every:  time.Second,
		logged: map[string]bool{},
	}
	reg.MustRegister(h.up)
	return h
}

// watch checks the queues every second until ctx ends.
func (h *queueHealth) watch(ctx context.Context, queues []*worker.Queue) {
	h.mu.Lock()
	h.queues = queues
	h.mu.Unlock()
	tick := time.NewTicker(h.every)
	defer tick.Stop()
	// A queue starting up is given a few checks to take its liveness and
	// claim once before it is said to be down.
	grace := time.Now().Add(5 * time.Second)
	for {
		h.check(time.Now().Before(grace))
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (h *queueHealth) check(starting bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.down = map[string]error{}
	for _, q := range h.queues {
		name := q.Name()
		err := q.Down()
		if err == nil {
			h.up.WithLabelValues(name).Set(1)
			if h.logged[name] {
				h.log.Info("queue claims work again", "queue", name)
				delete(h.logged, name)
			}
			continue
		}
		h.down[name] = err
		h.up.WithLabelValues(name).Set(0)
		if !h.logged[name] && !starting {
			h.log.Error("queue cannot claim work: this process acknowledges webhooks but does not process them", "queue", name, "cause", err)
			h.logged[name] = true
		}
	}
}

// Down lists the queues that cannot claim work, by name, with the cause.
func (h *queueHealth) Down() map[string]error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.down == nil {
		return nil
	}
	out := make(map[string]error, len(h.down))
	for k, v := range h.down {
		out[k] = v
	}
	return out
}
