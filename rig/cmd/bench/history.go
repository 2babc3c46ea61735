package main

// The history phase: ingest and the pipeline on a service whose inbox holds
// a large processed history, measured in alternation with one whose inbox
// does not; the console phase (console.go) follows on that history.

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// historyInsert adds n processed events, with small bodies and random-looking
// ids spread over the unique index like real ones, in one statement.
const historyInsert = `
	INSERT INTO inbox_events (provider, endpoint_id, org_id, environment, event_id, event_type, kind, test_mode,
		occurred_at, received_at, attempt_ref, payment_id, invoice_id, merchant_order_id, amount, token, network,
		raw_body, state, decision, attempts, processed_at)
	SELECT 'yolfi', $1, $2, $3, 'evt_' || substr(md5('hist' || g), 1, 24), 'payment.confirmed', 'payment_confirmed', false,
		ts, ts, 'inv_hist_' || g, 'pay_hist_' || g, 'inv_hist_' || g, 'hist-' || g, 25, 'USDT', 'TRON',
		convert_to('{"id":"hist-' || g || '","type":"payment.confirmed"}', 'UTF8'), 'processed', 'fulfilled', 1,
		ts + interval '4 milliseconds'
	FROM generate_series(1, $4::int) AS g, LATERAL (SELECT now() - interval '180 days' + g * interval '10 seconds' AS ts) AS t`

// historyPhase compares the service without and with a large processed
// history. The machine is shared, so figures measured minutes apart differ
// by more than the 10% the goal allows: a second fulfillmentd runs on a
// second database that holds the history, and the two are measured in
// alternation (A B A B …), each run seconds from its counterpart.
func (b *bench) historyPhase(ctx context.Context) error {
	h := &History{Rows: b.o.historyRows}
	b.rep.History = h
	main := b.t
	var empty, hist *target
	if err := b.phase(fmt.Sprintf("history: two fresh fulfillmentd, insert %d processed events into one", h.Rows), func() error {
		// Both sides start alike (fresh process, fresh database, same
		// cluster), so that the history is the only difference.
		var err error
		if empty, err = b.startTarget(ctx, "empty", "service_empty", consoleScopes); err != nil {
			return err
		}
		if hist, err = b.startTarget(ctx, "history", "service_history", consoleScopes); err != nil {
			return err
		}
		t0 := time.Now()
		if _, err := hist.db.Exec(ctx, historyInsert, endpointID, benchOrg, benchEnv, h.Rows); err != nil {
			return err
		}
		h.InsertSeconds = round1(time.Since(t0).Seconds())
		b.logf("inserted %d historical events in %.1fs", h.Rows, h.InsertSeconds)
		t1 := time.Now()
		for _, t := range []*target{empty, hist} {
			if _, err := t.db.Exec(ctx, "VACUUM ANALYZE inbox_events"); err != nil {
				return err
			}
		}
		// A checkpoint now, rather than in the middle of a measurement.
		if _, err := hist.db.Exec(ctx, "CHECKPOINT"); err != nil {
			return err
		}
		h.VacuumSeconds = round1(time.Since(t1).Seconds())
		if err := hist.db.QueryRow(ctx, `SELECT count(*), pg_size_pretty(pg_total_relation_size('inbox_events')) FROM inbox_events`).
			Scan(&h.InboxRows, &h.InboxSize); err != nil {
			return err
		}
		if err := empty.db.QueryRow(ctx, `SELECT count(*) FROM inbox_events`).Scan(&h.EmptyInboxRows); err != nil {
			return err
		}
		b.logf("VACUUM ANALYZE + CHECKPOINT in %.1fs; inbox_events with history: %d rows, %s with indexes; without: %d rows",
			h.VacuumSeconds, h.InboxRows, h.InboxSize, h.EmptyInboxRows)
		return nil
	}); err != nil {
		return err
	}
	c := 32
	if _, ok := b.yolfi.levels[c]; !ok {
		c = b.o.concurrencies[len(b.o.concurrencies)-1]
	}
	var emptyOK, histOK int
	var emptySecs, histSecs float64
	for round := 1; round <= max(b.o.rounds, 1); round++ {
		order := []*target{empty, hist} // A B, then B A, …: order effects cancel
		if round%2 == 0 {
			order = []*target{hist, empty}
		}
		for _, t := range order {
			label := "without history"
			if t == hist {
				label = "with " + humanCount(h.Rows) + " history"
			}
			if err := b.phase(fmt.Sprintf("history: ingest %d clients %s (round %d)", c, label, round), func() error {
				b.use(t)
				defer b.use(main)
				orders, err := b.createOrders(ctx, b.ordersFor(b.yolfi, c, (b.o.warmup+b.o.phase).Seconds()))
				if err != nil {
					return err
				}
				b.ready(ctx)
				// Fresh statistics on both sides alike: the history database's
				// other tables are new, and autovacuum may not have seen them.
				if _, err := t.db.Exec(ctx, "ANALYZE"); err != nil {
					return err
				}
				lvl := b.closedIngest(ctx, b.yolfi, c, orders)
				lvl.Name = label
				lvl.DrainSeconds = b.drain(ctx, "the history ingest run")
				if t == hist {
					h.Runs = append(h.Runs, HistoryRun{Round: round, History: true, IngestLevel: lvl})
					histOK, histSecs = histOK+lvl.OK, histSecs+lvl.Seconds
				} else {
					h.Runs = append(h.Runs, HistoryRun{Round: round, IngestLevel: lvl})
					emptyOK, emptySecs = emptyOK+lvl.OK, emptySecs+lvl.Seconds
				}
				b.logf("history round %d, %s: %.0f req/s  %s", round, label, lvl.PerSecond, lvl.Latency)
				return ctx.Err()
			}); err != nil {
				return err
			}
		}
	}
	if emptySecs > 0 && histSecs > 0 {
		h.EmptyPerSecond = round1(float64(emptyOK) / emptySecs)
		h.HistoryPerSecond = round1(float64(histOK) / histSecs)
		h.PooledRatio = round2(h.HistoryPerSecond / h.EmptyPerSecond)
	}
	// Each round's pair ran back to back: its ratio sees the same machine.
	// The median over rounds shrugs off one round hit by a burst of other
	// work; the pooled ratio is reported too.
	var ratios []float64
	for round := 1; round <= max(b.o.rounds, 1); round++ {
		var e, w float64
		for _, run := range h.Runs {
			if run.Round == round && run.History {
				w = run.PerSecond
			} else if run.Round == round {
				e = run.PerSecond
			}
		}
		if e > 0 {
			ratios = append(ratios, round2(w/e))
		}
	}
	h.RoundRatios = ratios
	if len(ratios) > 0 {
		sorted := slices.Clone(ratios)
		slices.Sort(sorted)
		h.IngestRatio = sorted[len(sorted)/2]
		if len(sorted)%2 == 0 {
			h.IngestRatio = round2((sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2)
		}
	}
	h.Concurrency = c
	r := b.o.rates[0]
	for _, t := range []*target{empty, hist} {
		label := "without history"
		if t == hist {
			label = fmt.Sprintf("%d historical events", h.Rows)
		}
		if err := b.phase(fmt.Sprintf("history: pipeline %d events/s, %s", r, label), func() error {
			b.use(t)
			defer b.use(main)
			p, err := b.pipelinePoint(ctx, r, label)
			if err != nil {
				return err
			}
			if t == hist {
				h.Pipeline = p
			} else {
				h.EmptyPipeline = p
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if p, e := h.Pipeline, h.EmptyPipeline; p != nil && e != nil && e.Fulfilled.Latency.P50 > 0 && e.Fulfilled.Latency.P99 > 0 {
		h.FulfilledP50Ratio = round2(float64(p.Fulfilled.Latency.P50) / float64(e.Fulfilled.Latency.P50))
		h.FulfilledP99Ratio = round2(float64(p.Fulfilled.Latency.P99) / float64(e.Fulfilled.Latency.P99))
		if e.Ack.Latency.P99 > 0 {
			h.PipelineAckP99Ratio = round2(float64(p.Ack.Latency.P99) / float64(e.Ack.Latency.P99))
		}
	}
	return b.consolePhase(ctx, hist)
}
