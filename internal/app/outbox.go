package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/outbox"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// subscriptions lists, for each order event, the destinations subscribed
// to it.
func subscriptions(cfg *config.Config) map[fulfillment.Topic][]string {
	subs := map[fulfillment.Topic][]string{}
	for _, d := range cfg.Destinations {
		for _, e := range d.Events {
			subs[fulfillment.Topic(e)] = append(subs[fulfillment.Topic(e)], d.ID)
		}
	}
	return subs
}

// newOutbox builds the dispatcher of the configured destinations, counting
// attempts by destination and outcome.
func newOutbox(cfg *config.Config, store *storage.Store, owners worker.Owners, reg prometheus.Registerer, log *slog.Logger) []*worker.Queue {
	attempts := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fulfillment_outbox_attempts_total",
		Help: "Outbox delivery attempts, by destination and outcome.",
	}, []string{"destination", "outcome"})
	took := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fulfillment_outbox_attempt_duration_seconds",
		Help:    "Time of one delivery attempt (signing, the HTTP request and its answer), by destination.",
		Buckets: prometheus.DefBuckets,
	}, []string{"destination"})
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fulfillment_outbox_delivery_latency_seconds",
		Help:    "Time from an outbox message's creation to its delivery (2xx), by destination.",
		Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600},
	}, []string{"destination"})
	held := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fulfillment_outbox_destination_held_until_timestamp_seconds",
		Help: "When the last wait a destination asked for (429, or 503 with Retry-After) ends, as a Unix time: " +
			"until then this process sends it nothing. Absent while it has asked for none.",
	}, []string{"destination"})
	reg.MustRegister(attempts, took, latency, held)
	sender := outbox.NewSender()
	dests := make([]worker.Destination, len(cfg.Destinations))
	for i, d := range cfg.Destinations {
		d = d.WithDefaults()
		target := outbox.Destination{ID: d.ID, URL: d.URL, Secrets: d.Keys, Idempotent: *d.Idempotent, Timeout: d.Timeout}
		dests[i] = worker.Destination{
			ID: d.ID, Idempotent: *d.Idempotent, Concurrency: d.Concurrency, MaxAttempts: d.MaxAttempts,
			Deliver: func(ctx context.Context, m fulfillment.OutboxMessage) fulfillment.DeliveryAttempt {
				start := time.Now()
				r := sender.Send(ctx, target, outbox.Message{Key: m.Key, Topic: string(m.Topic), Payload: m.Payload})
				a := fulfillment.DeliveryAttempt{Outcome: outcomeOf(r.Verdict), Status: r.Status, Reason: r.Reason,
					RetryAfter: r.RetryAfter}
				attempts.WithLabelValues(d.ID, string(a.Outcome)).Inc()
				took.WithLabelValues(d.ID).Observe(time.Since(start).Seconds())
				if a.Outcome == fulfillment.OutcomeDelivered && !m.CreatedAt.IsZero() {
					latency.WithLabelValues(d.ID).Observe(max(time.Since(m.CreatedAt), 0).Seconds())
				}
				return a
			},
			Held: func(until time.Time) { held.WithLabelValues(d.ID).Set(float64(until.UnixNano()) / 1e9) },
		}
	}
	table := func(destination string) worker.Table { return store.OutboxQueue(destination) }
	return worker.NewOutbox(store, table, dests, owners, QueueConfig(cfg.Outbox), log)
}

// outcomeOf is what the dispatcher does after an attempt with verdict v.
// An attempt that could not be made (Invalid) is retried like any failure,
// so that it ends failed, with an item, if it never can be.
func outcomeOf(v outbox.Verdict) fulfillment.DeliveryOutcome {
	switch v {
	case outbox.Delivered:
		return fulfillment.OutcomeDelivered
	case outbox.Uncertain:
		return fulfillment.OutcomeUncertain
	case outbox.Gone:
		return fulfillment.OutcomeGone
	default:
		return fulfillment.OutcomeRetry
	}
}
