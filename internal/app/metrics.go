package app

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/worker"
)

// The metrics of the status poller, the subscription sweeper and the
// housekeeper: what each did in this process, and when it last did it
// without error. Every label value is one of a fixed set, each series
// exported (at 0) from the start. The housekeeping tasks' last successful
// runs, wherever they ran, are read from the database (storage's
// collector).

// unconfiguredEndpoint labels the polls of payments started through an
// endpoint that is no longer configured.
const unconfiguredEndpoint = "unconfigured"

// pollObservers count the status poller's polls by endpoint (one of
// pollers', the configured endpoints that report payment states) and
// outcome.
func pollObservers(reg prometheus.Registerer, pollers map[string]fulfillment.StatePoller) worker.PollOptions {
	polls := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fulfillment_status_polls_total",
		Help: "Payment status polls made, by endpoint and outcome (settled, pending, known, error).",
	}, []string{"endpoint", "outcome"})
	last := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "fulfillment_status_poll_last_success_timestamp_seconds",
		Help: "When this process last made a poll of the endpoint without error (0: not yet); it moves only while payments await their outcome.",
	}, []string{"endpoint"})
	reg.MustRegister(polls, last)
	known := map[string]bool{}
	for _, ep := range append(slices.Sorted(maps.Keys(pollers)), unconfiguredEndpoint) {
		known[ep] = true
		for _, o := range []worker.PollOutcome{worker.PollSettled, worker.PollPending, worker.PollKnown, worker.PollFailed} {
			polls.WithLabelValues(ep, string(o))
		}
		last.WithLabelValues(ep)
	}
	return worker.PollOptions{OnPoll: func(endpoint string, o worker.PollOutcome) {
		if !known[endpoint] {
			endpoint = unconfiguredEndpoint
		}
		polls.WithLabelValues(endpoint, string(o)).Inc()
		if o != worker.PollFailed {
			last.WithLabelValues(endpoint).SetToCurrentTime()
		}
	}}
}

// sweepObservers count the sweeper's sweeps by outcome.
func sweepObservers(reg prometheus.Registerer) worker.SweepOptions {
	sweeps := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fulfillment_subscription_sweeps_total",
		Help: "Subscription sweeps made, by outcome: ended (the access ended), unchanged (extended meanwhile, or ended already), error.",
	}, []string{"outcome"})
	last := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "fulfillment_subscription_sweep_last_success_timestamp_seconds",
		Help: "When this process last made a sweep without error (0: not yet); it moves only when accesses fall due.",
	})
	reg.MustRegister(sweeps, last)
	for _, o := range []worker.SweepOutcome{worker.SweepEnded, worker.SweepUnchanged, worker.SweepFailed} {
		sweeps.WithLabelValues(string(o))
	}
	return worker.SweepOptions{OnSweep: func(o worker.SweepOutcome) {
		sweeps.WithLabelValues(string(o)).Inc()
		if o != worker.SweepFailed {
			last.SetToCurrentTime()
		}
	}}
}

// housekeepingObservers count the housekeeper's runs by task and outcome,
// and what the runs did by task.
func housekeepingObservers(reg prometheus.Registerer) worker.HousekeepingOptions {
	runs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fulfillment_housekeeping_runs_total",
		Help: "Housekeeping task runs made by this process, by task and outcome (ok, error).",
	}, []string{"task", "outcome"})
	rows := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fulfillment_housekeeping_rows_total",
		Help: "Rows the housekeeping runs of this process changed, by task: paid_not_fulfilled items opened (fulfillment_sla), raw event bodies purged (raw_body_purge).",
	}, []string{"task"})
	reg.MustRegister(runs, rows)
	known := map[fulfillment.HousekeepingTask]bool{}
	for _, task := range []fulfillment.HousekeepingTask{fulfillment.TaskFulfillmentSLA, fulfillment.TaskRawBodyPurge} {
		known[task] = true
		runs.WithLabelValues(string(task), "ok")
		runs.WithLabelValues(string(task), "error")
		rows.WithLabelValues(string(task))
	}
	return worker.HousekeepingOptions{OnRun: func(task fulfillment.HousekeepingTask, done int, err error) {
		if !known[task] {
			task = "unknown"
		}
		outcome := "ok"
		if err != nil {
			outcome = "error"
		}
		runs.WithLabelValues(string(task), outcome).Inc()
		rows.WithLabelValues(string(task)).Add(float64(done))
	}}
}
