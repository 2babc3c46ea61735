package storage

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics of the database's state, read when /metrics is scraped.
var (
	descInboxPending = prometheus.NewDesc("fulfillment_inbox_pending_events",
		"Inbox events waiting to be processed.", nil, nil)
	descInboxOldest = prometheus.NewDesc("fulfillment_inbox_oldest_pending_age_seconds",
		"Age of the oldest pending inbox event (0 when none).", nil, nil)
	descOutbox = prometheus.NewDesc("fulfillment_outbox_messages",
		"Outbox messages that are not delivered, by destination and state (pending, failed, uncertain).", []string{"destination", "state"}, nil)
	descDestinationDisabled = prometheus.NewDesc("fulfillment_outbox_destination_disabled",
		"1 while deliveries to the destination are stopped (disabled by a person, or by its answer 410 Gone), 0 while they go on.", []string{"destination"}, nil)
	descHousekeepingLast = prometheus.NewDesc("fulfillment_housekeeping_last_success_timestamp_seconds",
		"When the housekeeping task last completed a run, on any replica (0: never).", []string{"task"}, nil)
	descRecon = prometheus.NewDesc("fulfillment_reconciliation_open_items",
		"Open reconciliation items, by kind.", []string{"kind"}, nil)
	descReconOldest = prometheus.NewDesc("fulfillment_reconciliation_oldest_open_age_seconds",
		"Age of the oldest open reconciliation item, by kind (kinds without open items are left out).", []string{"kind"}, nil)
	descScrapeOK = prometheus.NewDesc("fulfillment_db_scrape_success",
		"1 when the database's gauges were read at this scrape, 0 when they could not be (they are then left out).", nil, nil)
	descScrapeDuration = prometheus.NewDesc("fulfillment_db_scrape_duration_seconds",
		"Time the database's gauges took to read at this scrape.", nil, nil)

	descPoolAcquired = prometheus.NewDesc("fulfillment_db_pool_acquired_connections",
		"Connections of the pool in use.", []string{"pool"}, nil)
	descPoolIdle = prometheus.NewDesc("fulfillment_db_pool_idle_connections",
		"Idle connections of the pool.", []string{"pool"}, nil)
	descPoolTotal = prometheus.NewDesc("fulfillment_db_pool_total_connections",
		"Connections of the pool (acquired, idle and being opened).", []string{"pool"}, nil)
	descPoolMax = prometheus.NewDesc("fulfillment_db_pool_max_connections",
		"Most connections the pool opens.", []string{"pool"}, nil)
	descPoolAcquires = prometheus.NewDesc("fulfillment_db_pool_acquires_total",
		"Connections acquired from the pool.", []string{"pool"}, nil)
	descPoolWaits = prometheus.NewDesc("fulfillment_db_pool_acquire_waits_total",
		"Acquisitions that had to wait for a connection (none was idle).", []string{"pool"}, nil)
	descPoolWait = prometheus.NewDesc("fulfillment_db_pool_acquire_wait_seconds_total",
		"Time spent acquiring connections from the pool.", []string{"pool"}, nil)
	descReceiptBatches = prometheus.NewDesc("fulfillment_inbox_receipt_batches_total",
		"Group commits of received events by how they were stored: decided (in the transaction that stored them), or queued for the inbox processors because an event was stored before (redelivered), what they name stayed locked (locked) or deciding failed (failed).",
		[]string{"outcome"}, nil)
	descDiskFull = prometheus.NewDesc("fulfillment_db_disk_full_refusals_total",
		"Writes of this process the database refused for want of disk space (SQLSTATE 53100): group commits of webhooks (answered 503), queue claims, and attempts of queued work (retried without using their attempts).",
		nil, nil)
)

// DefaultMetricsTimeout bounds the database reads of one scrape.
const DefaultMetricsTimeout = time.Second

// metricsSQL reads every database gauge in one round trip, each part on a
// partial or leading-column index: pending inbox events (the inbox's work
// rows, each event found by primary key),
// undelivered outbox messages by destination (pending: the due index;
// failed and uncertain: their index by destination), the destinations
// disabled (a row per destination), open reconciliation items and the
// oldest one's age by kind (the open indexes), and the housekeeping tasks'
// last runs (a row per task). Their cost grows with the backlog, never with
// history. The age column carries the last run's time for housekeeping.
const metricsSQL = `
	SELECT 'inbox' AS what, '' AS label, '' AS label2, count(*)::float8 AS n,
		coalesce(extract(epoch FROM clock_timestamp() - min(received_at)), 0)::float8 AS age
	FROM inbox_work JOIN inbox_events USING (id) WHERE inbox_work.state = 'pending'
	UNION ALL
	(SELECT 'outbox', destination_id, 'pending', count(*), 0 FROM outbox_work WHERE state = 'pending' GROUP BY destination_id)
	UNION ALL
	(SELECT 'outbox', destination_id, state, count(*), 0 FROM outbox_stuck GROUP BY destination_id, state)
	UNION ALL
	(SELECT 'destination', id, '', CASE WHEN disabled_at IS NULL THEN 0 ELSE 1 END, 0 FROM outbox_destinations)
	UNION ALL
	(SELECT 'recon', kind, '', count(*), extract(epoch FROM clock_timestamp() - min(created_at))::float8
		FROM reconciliation_items WHERE state = 'open' GROUP BY kind)
	UNION ALL
	SELECT 'housekeeping', task, '', 0, coalesce(extract(epoch FROM last_run_at), 0)::float8 FROM housekeeping_tasks`

// outboxStates are the states fulfillment_outbox_messages reports, each
// for every destination events are delivered to (0 when it has none).
var outboxStates = []string{"pending", "failed", "uncertain"}

// MetricsCollector returns a collector of the database's gauges (inbox
// backlog and its oldest event's age, undelivered outbox messages,
// open reconciliation items) and of the pools' statistics. The gauges are
// read at each scrape with one indexed query bounded by timeout (0:
// DefaultMetricsTimeout); when the database does not answer, the scrape
// still succeeds, without them, with fulfillment_db_scrape_success 0, and a
// warning is logged (the log's handler writes it once per interval).
func (s *Store) MetricsCollector(timeout time.Duration) prometheus.Collector {
	if timeout <= 0 {
		timeout = DefaultMetricsTimeout
	}
	return &dbCollector{s: s, timeout: timeout, log: s.log}
}

type dbCollector struct {
	s       *Store
	timeout time.Duration
	log     *slog.Logger
}

func (*dbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descInboxPending, descInboxOldest, descOutbox, descDestinationDisabled, descHousekeepingLast, descRecon, descReconOldest, descScrapeOK,
		descScrapeDuration, descPoolAcquired, descPoolIdle, descPoolTotal, descPoolMax, descPoolAcquires,
		descPoolWaits, descPoolWait, descReceiptBatches, descDiskFull} {
		ch <- d
	}
}

func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descDiskFull, prometheus.CounterValue, float64(c.s.diskFullRefusals.Load()))
	poolStats(ch, "main", c.s.pool.Stat())
	poolStats(ch, "lease", c.s.leasePool.Stat())
	if c.s.decideOnReceipt {
		n := &c.s.decidedCount
		for outcome, v := range map[string]int64{"decided": n.decided.Load(), "redelivered": n.redelivered.Load(),
			"locked": n.locked.Load(), "failed": n.failed.Load()} {
			ch <- prometheus.MustNewConstMetric(descReceiptBatches, prometheus.CounterValue, float64(v), outcome)
		}
	}

	start := time.Now()
	metrics, err := c.read()
	ch <- prometheus.MustNewConstMetric(descScrapeDuration, prometheus.GaugeValue, time.Since(start).Seconds())
	if err != nil {
		if !c.s.unreachable(err) {
			c.log.Warn("metrics: could not read the database's gauges", "error", err)
		}
		ch <- prometheus.MustNewConstMetric(descScrapeOK, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descScrapeOK, prometheus.GaugeValue, 1)
	for _, m := range metrics {
		ch <- m
	}
}

// read runs metricsSQL, returning every metric or none.
func (c *dbCollector) read() ([]prometheus.Metric, error) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	rows, err := c.s.pool.Query(ctx, metricsSQL)
	if err != nil {
		return nil, interpret(err)
	}
	defer rows.Close()
	var out []prometheus.Metric
	// Every destination events go to has each state, at 0 when the
	// database has none; a destination no longer configured has those it
	// has messages in.
	outbox := map[[2]string]float64{}
	disabled := map[string]float64{}
	for _, dests := range c.s.subscriptions {
		for _, d := range dests {
			for _, st := range outboxStates {
				outbox[[2]string{d, st}] = 0
			}
			disabled[d] = 0
		}
	}
	for rows.Next() {
		var (
			what, label, label2 string
			n, age              float64
		)
		if err := rows.Scan(&what, &label, &label2, &n, &age); err != nil {
			return nil, err
		}
		switch what {
		case "inbox":
			out = append(out,
				prometheus.MustNewConstMetric(descInboxPending, prometheus.GaugeValue, n),
				prometheus.MustNewConstMetric(descInboxOldest, prometheus.GaugeValue, max(age, 0)))
		case "outbox":
			outbox[[2]string{label, label2}] = n
		case "destination":
			disabled[label] = n
		case "housekeeping":
			out = append(out, prometheus.MustNewConstMetric(descHousekeepingLast, prometheus.GaugeValue, age, label))
		case "recon":
			out = append(out, prometheus.MustNewConstMetric(descRecon, prometheus.GaugeValue, n, label),
				prometheus.MustNewConstMetric(descReconOldest, prometheus.GaugeValue, max(age, 0), label))
		}
	}
	if err := rows.Err(); err != nil {
		return nil, interpret(err)
	}
	for k, n := range outbox {
		out = append(out, prometheus.MustNewConstMetric(descOutbox, prometheus.GaugeValue, n, k[0], k[1]))
	}
	for d, n := range disabled {
		out = append(out, prometheus.MustNewConstMetric(descDestinationDisabled, prometheus.GaugeValue, n, d))
	}
	return out, nil
}

func poolStats(ch chan<- prometheus.Metric, pool string, st *pgxpool.Stat) {
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, pool)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, pool)
	}
	gauge(descPoolAcquired, float64(st.AcquiredConns()))
	gauge(descPoolIdle, float64(st.IdleConns()))
	gauge(descPoolTotal, float64(st.TotalConns()))
	gauge(descPoolMax, float64(st.MaxConns()))
	counter(descPoolAcquires, float64(st.AcquireCount()))
	counter(descPoolWaits, float64(st.EmptyAcquireCount()))
	counter(descPoolWait, st.AcquireDuration().Seconds())
}
