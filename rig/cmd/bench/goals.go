package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/rig/loadgen"
)

// goals evaluates the performance targets against what was measured:
// first the processing core's, per event of the saturating push
// (acknowledged and processed) — the machine-independent counters, then
// time — then the rest.
func (b *bench) goals() []Goal {
	gs := b.coreGoals()
	for _, c := range pausedGoalAt {
		in, ok := b.paused.levels[c]
		g := Goal{Key: fmt.Sprintf("ingest_alone_c%d", c), Goal: fmt.Sprintf("ingest alone (processor paused) ≥ 1.0× baseline at %d clients", c)}
		if !ok || in.BaselinePerSec == 0 {
			g.Value, g.Margin = "not measured", "-"
		} else {
			g.Met = in.Ratio >= 1.0
			g.Value = fmt.Sprintf("%.2f× (%.0f req/s ÷ %.0f rows/s)", in.Ratio, in.PerSecond, in.BaselinePerSec)
			g.Margin = ratioMargin(in.Ratio, 1.0) + noisy(in.CPU, b.baseline[c].CPU)
		}
		gs = append(gs, g)
	}

	g := Goal{Key: "one_client_ack_p50", Goal: "one client: ack p50 ≤ 2× the baseline's p50"}
	if in, ok := b.yolfi.levels[1]; ok && b.baseline[1].Latency.N > 0 {
		limit := 2 * b.baseline[1].Latency.P50
		g.Met = in.Latency.P50 <= limit
		g.Value = fmt.Sprintf("p50 %.2f ms (baseline %.2f ms: limit %.2f ms)", loadgen.Ms(in.Latency.P50),
			loadgen.Ms(b.baseline[1].Latency.P50), loadgen.Ms(limit))
		g.Margin = msMargin(in.Latency.P50, limit) + noisy(in.CPU, b.baseline[1].CPU)
		if alone, ok := b.paused.levels[1]; ok && alone.Latency.N > 0 {
			g.Margin += fmt.Sprintf("; with the processor paused p50 %.2f ms", loadgen.Ms(alone.Latency.P50))
		}
	} else {
		g.Value, g.Margin = "not measured", "-"
	}
	gs = append(gs, g)

	g = Goal{Key: "half_peak_ack_p99", Goal: "ack p99 ≤ 25 ms at half of peak throughput"}
	if h := b.rep.HalfPeak; h != nil && h.Latency.N > 0 {
		p99 := h.Latency.P99
		g.Met = p99 <= 25*time.Millisecond
		g.Value = fmt.Sprintf("p99 %.2f ms at %.0f/s offered (peak %.0f req/s)", loadgen.Ms(p99), h.Offered, b.peakIngest)
		g.Margin = msMargin(p99, 25*time.Millisecond) + noisy(append([]CPUShare{h.CPU}, h.WindowCPU...)...) + windowsNote(h.WindowP99)
	} else {
		g.Value, g.Margin = "not measured", "-"
	}
	gs = append(gs, g)

	g = Goal{Key: "history_1m_ingest", Goal: "ingest throughput with 1M historical events within 10% of the empty inbox"}
	if h := b.rep.History; h != nil && h.IngestRatio > 0 {
		g.Met = h.IngestRatio >= 0.9
		g.Value = fmt.Sprintf("%.2f× (median of %d back-to-back pairs %v; pooled %.0f req/s with %s history vs %.0f without; %d clients)",
			h.IngestRatio, len(h.RoundRatios), h.RoundRatios, h.HistoryPerSecond, humanCount(h.Rows), h.EmptyPerSecond, h.Concurrency)
		var cpus []CPUShare
		for _, run := range h.Runs {
			cpus = append(cpus, run.CPU)
		}
		g.Margin = ratioMargin(h.IngestRatio, 0.9) + noisy(cpus...)
		if h.Rows < 1_000_000 {
			g.Margin += fmt.Sprintf("; only %d history rows: not the goal's 1M", h.Rows)
			g.Met = false
		}
		if h.Pipeline != nil && h.EmptyPipeline != nil {
			g.Margin += fmt.Sprintf("; ack→fulfilled @%.0f/s p50 %.2f→%.2f ms, p99 %.2f→%.2f ms",
				h.Pipeline.Ack.Offered, loadgen.Ms(h.EmptyPipeline.Fulfilled.Latency.P50), loadgen.Ms(h.Pipeline.Fulfilled.Latency.P50),
				loadgen.Ms(h.EmptyPipeline.Fulfilled.Latency.P99), loadgen.Ms(h.Pipeline.Fulfilled.Latency.P99))
		}
	} else {
		g.Value, g.Margin = "not measured", "-"
	}
	gs = append(gs, g)
	return gs
}

// coreGoals are the processing core's goals, one line each, in this order:
// what PostgreSQL does per event (statements, WAL, buffers: the same on
// any machine), then CPU per event, sustained throughput, ack→fulfilled
// latency, and the outbox.
func (b *bench) coreGoals() []Goal {
	s := b.rep.Sustained
	pushed := s != nil && s.Events > 0
	counted := pushed && s.StatementsTotal != nil
	atMost := func(got, limit float64, unit string) (bool, string) {
		if got <= limit {
			return true, fmt.Sprintf("met with %.1f%s to spare", limit-got, unit)
		}
		return false, fmt.Sprintf("missed by %.1f%s (%.1f× the limit)", got-limit, unit, got/limit)
	}
	perEvent := func(key, goal, whenSet string, ok bool, limit float64, unit string, got func() float64) Goal {
		g := Goal{Key: key, Goal: goal, WhenSet: whenSet}
		if !ok {
			g.Value, g.Margin = "not measured", "-"
			return g
		}
		v := got()
		g.Met, g.Margin = atMost(v, limit, unit)
		g.Value = fmt.Sprintf("%.2f%s per event (%d events of the saturating push, over push and drain)", v, unit, s.Events)
		return g
	}
	gs := []Goal{
		perEvent("statements_per_event", "statements executed per event ≤ 1.0 (pg_stat_statements)", "5.8",
			counted, 1.0, "", func() float64 { return s.StatementsTotal.Calls }),
		walGoal(perEvent("wal_bytes_per_event", "WAL bytes per event ≤ 2,500 (the cluster's WAL position, over push and drain)", "6,824 B",
			pushed && s.WALBytesPerEvent > 0, 2500, " B", func() float64 { return s.WALBytesPerEvent }), s),
		perEvent("buffers_per_event", "shared buffers touched per event ≤ 60 (pg_stat_statements: hit, read, dirtied, written)", "206",
			counted, 60, "", func() float64 { return s.StatementsTotal.Buffers }),
	}

	g := Goal{Key: "cpu_us_per_event", Goal: "CPU per event, PostgreSQL ≤ 200 µs and service ≤ 120 µs (acknowledged and processed)",
		WhenSet: "836 / 340 µs"}
	if pushed {
		pgOK, pgM := atMost(s.PostgresUsPerEvent, 200, " µs")
		svcOK, svcM := atMost(s.ServiceUsPerEvent, 120, " µs")
		g.Met = pgOK && svcOK
		g.Value = fmt.Sprintf("PostgreSQL %.0f µs, service %.0f µs (%d events of the saturating push, over push and drain)",
			s.PostgresUsPerEvent, s.ServiceUsPerEvent, s.Events)
		g.Margin = "PostgreSQL " + pgM + "; service " + svcM + noisy(s.CPU, s.CPUDrain)
	} else {
		g.Value, g.Margin = "not measured", "-"
	}
	gs = append(gs, g)

	g = Goal{Key: "sustained_over_baseline", Goal: "sustained fulfilled/s while ingest runs at its peak ≥ 1.0× the 32-client one-commit baseline, the inbox backlog not growing",
		WhenSet: "0.27–0.63×"}
	if base := b.baseline[32].PerSecond; s != nil && base > 0 && len(s.PerSecondBuckets) > 0 {
		ratio := s.FulfilledPerSec / base
		g.Met = ratio >= 1.0 && s.ProcessingKeptUp
		g.Value = fmt.Sprintf("%.2f× (%.0f fulfilled/s ÷ %.0f rows/s) with ingest at %.0f/s; backlog at push end %d",
			ratio, s.FulfilledPerSec, base, s.IngestPerSecond, s.BacklogAtPushEnd)
		g.Margin = ratioMargin(ratio, 1.0) + noisy(s.CPU)
		if !s.ProcessingKeptUp {
			g.Margin += "; the backlog grew"
		}
	} else if s != nil && base > 0 {
		g.Value, g.Margin = "not measured: the push's receipts spanned less than a whole second after its ramp-up", "-"
	} else {
		g.Value, g.Margin = "not measured", "-"
	}
	gs = append(gs, g)

	g = Goal{Key: "ack_to_fulfilled_1000", Goal: "ack→fulfilled p50 ≤ 10 ms and p99 ≤ 50 ms at 1,000 events/s", WhenSet: "449 / 790 ms"}
	if p, ok := b.emptyPipe[1000]; ok && p.Fulfilled.Latency.N > 0 {
		l := p.Fulfilled.Latency
		g.Met = l.P50 <= 10*time.Millisecond && l.P99 <= 50*time.Millisecond && p.Fulfilled.Pending == 0
		g.Value = fmt.Sprintf("p50 %.2f ms, p99 %.2f ms", loadgen.Ms(l.P50), loadgen.Ms(l.P99))
		g.Margin = "p50 " + msMargin(l.P50, 10*time.Millisecond) + "; p99 " + msMargin(l.P99, 50*time.Millisecond) + noisy(p.Ack.CPU)
		if p.Fulfilled.Pending > 0 {
			g.Margin += fmt.Sprintf("; %d events still pending", p.Fulfilled.Pending)
		}
	} else {
		g.Value, g.Margin = "not measured (no 1000/s pipeline rate)", "-"
	}
	gs = append(gs, g)

	g = Goal{Key: "outbox_over_direct", Goal: "outbox deliveries/s ≥ 0.25× direct signed POSTs, ≤ 0.5 commits per delivery (the best destination concurrency measured)",
		WhenSet: "0.02×; 4.8–5.7 commits"}
	var best *OutboxDrain
	if ob := b.rep.Outbox; ob != nil {
		for i := range ob.Drains {
			if d := &ob.Drains[i]; d.BaselinePerSecond > 0 && (best == nil || d.Ratio > best.Ratio) {
				best = d
			}
		}
	}
	if best != nil {
		commits := best.PerDelivery.Transactions
		g.Met = best.Ratio >= 0.25 && commits <= 0.5
		g.Value = fmt.Sprintf("%.2f× (%.0f deliveries/s ÷ %.0f POSTs/s) at concurrency %d; %.2f commits per delivery",
			best.Ratio, best.PerSecond, best.BaselinePerSecond, best.Concurrency, commits)
		_, cm := atMost(commits, 0.5, " commits")
		g.Margin = ratioMargin(best.Ratio, 0.25) + "; " + cm + noisy(best.CPU, best.BaselineCPU)
	} else {
		g.Value, g.Margin = "not measured", "-"
	}
	return append(gs, g)
}

// noisy warns when other work on the shared machine took a noticeable
// share of the CPU during the runs a goal rests on.
func noisy(cpus ...CPUShare) string {
	worst := 0.0
	for _, c := range cpus {
		worst = max(worst, c.Other)
	}
	if worst < 0.3 {
		return ""
	}
	return fmt.Sprintf("; NOISY: other work on the machine used up to %.2f cores meanwhile", worst)
}

func ratioMargin(got, want float64) string {
	if got >= want {
		return fmt.Sprintf("met by %+.2f×", got-want)
	}
	return fmt.Sprintf("missed by %.2f× (%.0f%% short)", want-got, (1-got/want)*100)
}

func msMargin(got, limit time.Duration) string {
	if got <= limit {
		return fmt.Sprintf("met with %.2f ms to spare", loadgen.Ms(limit-got))
	}
	return fmt.Sprintf("missed by %.2f ms (%.1f× the limit)", loadgen.Ms(got-limit), float64(got)/float64(limit))
}

// methods says how each figure is measured; written into the outputs.
func methods(o options) []string {
	return []string{
		"database statistics: each run on orders created for it starts after the inbox drained and an ANALYZE of the service's database (what autovacuum does within a minute in a running service), so that PostgreSQL's plans — cached per connection — reflect the tables as they are, not as they were when nearly empty.",
		fmt.Sprintf("baseline: N goroutines, each on its OWN pgx.Conn (no pool), run the service's own inbox insert (same columns, ON CONFLICT ON CONSTRAINT inbox_events_event_key DO NOTHING RETURNING id, state; ~%d-byte raw_body; unique event id) in autocommit — one commit per row, synchronous_commit=on, fsync on — against a storage.Migrate'd database, so the real table, indexes and triggers (if any); closed loop, %v warm-up then %v measured; rows/s = inserts completed in the window ÷ window; latency = statement round trip including the commit. At each concurrency the baseline runs right before the ingest level (fulfillmentd idle, its inbox drained), so a ratio's two figures are measured seconds apart on the same shared disk. '(info)' rows: the same with the table's NOTIFY trigger disabled, to show what the trigger costs.", loadgen.DefaultBodySize, o.warmup, o.phase),
		fmt.Sprintf("ingest (Yolfi): C closed-loop clients POST signed Yolfi webhooks (~%d bytes) to /webhooks/yolfi-live (gateway → RecordEvent in-process → group commit → 200): first deliveries of payment.confirmed for pre-created orders, %.0f%% redeliveries (an already acknowledged event's exact bytes), %.0f%% invoice.created/invoice.overdue for orders already confirmed (out of order); RESULT = 200 answers/s in the window (redeliveries included), new/s = that × the share of first deliveries among the 200s; latency = request start → response; ratio = ingest req/s ÷ baseline rows/s at the same C. The inbox is drained before each level; the processor runs concurrently, as in production. 'Yolfi (processor paused)': at %v clients, right after the baseline, the same level against a second fulfillmentd on its own database of the same cluster with inbox.disabled (ingest alone, like for like with the baseline: nothing processes its inbox, whose backlog stays — as the baseline's table keeps its rows).", loadgen.DefaultBodySize, o.redeliver*100, o.outOfOrder*100, pausedAt),
		fmt.Sprintf("ingest (T-Bank): the same, right after Yolfi's level at each C, with T-Bank notifications POSTed to /webhooks/tbank-live as the bank sends them (fakebank.NoticeBody: Token inside the JSON body, ~%d bytes): CONFIRMED of a new payment for %d kopecks whose OrderId is the checkout session of a pre-created RUB order, the same shares of redeliveries and of out-of-order notifications (AUTHORIZED of a payment already confirmed); a request counts only when answered 200 with the body exactly OK; ÷ Yolfi = T-Bank req/s ÷ Yolfi req/s at the same C. After each level (both providers) every payment confirmation it sent must have fulfilled its order, or the run warns.",
			len(loadgen.NewTBankSource(tbankTerminal, []byte(tbankPassword)).Confirmed("bench-abcde-1-1000").Body), loadgen.TBankAmount),
		"open loop (½-peak ingest, pipeline): requests are scheduled at a fixed rate whatever the answers; latency runs from the SCHEDULED send time (no coordinated omission); at most 256 in flight — a request that could not start within 5 ms of its schedule counts as late; requests scheduled during the warm-up are sent but not measured. The ½-peak run is several such runs (--half-peak-windows, 3 by default), each prepared as a run alone (its own orders, the inbox drained, ANALYZE), their answers pooled: one 6-second window's p99 rests on about a hundred answers, and repeated 10-second runs at 2,000/s against one kept cluster, the service unchanged, measured p99s from 18.4 to 42.5 ms.",
		"pipeline ack→fulfilled: " + loadgen.FulfilledMethod + "; over the measured new payment.confirmed events of the run, read after the backlog drained (pending ones are reported, not hidden).",
		"queued group commits (notes of the open-loop runs): the service's fulfillment_inbox_receipt_batches_total read from its /metrics before and after the run; a group commit of webhooks decides its events in its own transaction, or stores them queued for the inbox processor when an event of it was stored meanwhile (redelivered), a lock stayed held past the wait (locked) or deciding failed (failed). Shown only when any was queued.",
		"max sustained fulfilled/s: push-workers closed-loop clients send only new payment.confirmed events; the rate is the number of those events the processor completed per second, counted from processed_at, from 1 s after the first receipt (a quarter of the receipts' span when it is shorter than 4 s, as in --quick runs) to the last receipt (the backlog is never empty then, so the processor is saturated while ingest competes for the CPU); the drain rate afterwards (no ingest) is shown too. CPU per event: CPU seconds (utime+stime from /proc/PID/stat) of fulfillmentd, and of PostgreSQL (postmaster, its backends and the reaped ones; the bench's pg_stat_activity sampler included), from the push's start to the end of the drain, ÷ the push's events processed by then — each acknowledged and processed once. PostgreSQL per event (with --statements, the default): pg_stat_statements is preloaded for the whole run (baseline included) and reset right before the push; read right after the drain, each statement's counters over the service's database ÷ the push's events; statements = executions (BEGIN and COMMIT included: pg_stat_statements does not see most of those sent pipelined, so the bench adds 2 per group commit decided on receipt and 1 per one queued instead, from the service's fulfillment_inbox_receipt_batches_total; an estimate: it leaves out the inbox processor's transactions, which the push does not run, the group commits of redeliveries alone, which it does not send, and counts twice the first pipelined BEGIN and COMMIT of each connection, which pg_stat_statements sees), buffers = shared blocks hit, read, dirtied and written (planning's included: pg_stat_statements.track_planning is on). WAL per event: the cluster's WAL insert position (pg_current_wal_insert_lsn) read right before the push and right after its drain, the difference ÷ the push's events (the cluster's other databases are idle meanwhile; checkpoints' full-page images included, as in production; the row's notes say how many full-page images (pg_stat_wal.wal_fpi) and how many checkpoints began (pg_stat_bgwriter) meanwhile, which move the figure from run to run). The report's \"WAL per event\" table splits that WAL by the table or index each record changes and the record's kind, read back with pg_waldump over the same two positions (a replication slot created before the push keeps those WAL files until then). Rows updated: each table's updates over push and drain and the HOT ones among them (pg_stat_user_tables, read 11 s after the drain: a busy backend reports its counts at most once a second, an idle one within 10 s); an update that is not HOT writes an entry into every index of its table.",
		fmt.Sprintf("replicas: for each count N of --replicas, N fulfillmentd processes (the same configuration) on a fresh database of their own in the same cluster; %d closed-loop clients, worker i posting to replica i mod N, send only new payment.confirmed events for %v; fulfilled/s = the push's events processed ÷ (last processing − first receipt), push and drain together; × one replica = that ÷ the one-replica run's; CPU per event = all N processes' CPU, and PostgreSQL's, over the push and its drain ÷ those events. All processes share the machine's two cores with PostgreSQL and the load generator: a ratio that stops growing says the database and the machine, not one service process, bound the rate.", o.pushWorkers, o.replicaPush),
		fmt.Sprintf("reads: %d closed-loop clients call GetOrder (gRPC) or GET /v1/orders/{id} (REST, Bearer token) on random fulfilled orders (with their attempts, entitlement and event timeline); then %d closed-loop clients call CheckAccess (gRPC) for random customers of %d active subscriptions seeded into the service's database with COPY (each its own customer, one paid period around now; ANALYZE after), every answer expected to grant access — one indexed read of the customer's subscriptions to the plan per call, the same harness as GetOrder's.", o.readWorkers, o.accessWorkers, o.subscriptions),
		"history: two fresh fulfillmentd processes start on two fresh databases of the same cluster; into one, ≥1M processed events (state processed, decision fulfilled, small raw_body, random-looking event ids spread over the unique index, no order link) are added with one INSERT … SELECT generate_series, then both get VACUUM ANALYZE and a CHECKPOINT. The 32-client ingest level then runs alternately on the empty one and the one with history, A B then B A (the shared machine drifts by more than 10% over minutes, and the order effects cancel), each run seconds from its counterpart after a fresh ANALYZE; the ratio is the median over the rounds of each back-to-back pair's ratio (robust to a burst of other work hitting one round); the pooled ratio (200 answers ÷ measured seconds, per side) is shown too. The first pipeline rate runs once on each.",
		fmt.Sprintf("speed (Machine): a fixed piece of CPU work on one thread, timed %d times and the median kept, right after PostgreSQL starts and fulfillmentd is built (before anything is measured) and again after the last phase: an HMAC-SHA256 of 600 bytes in the bench's process, and SELECT sum(i) FROM generate_series(1, 1000000) in PostgreSQL (its executor, memory, and a temporary file: the generated rows spill at the default work_mem; it cannot tell a slow disk from slow memory). The machine's cores are shared with other tenants, whose load does not show in /proc (the CPU columns' 'other'); in a slow hour each statement takes about twice as long, which moves every figure in time. Figures in time of two runs compare only at like speeds; statements, WAL and buffers at any. The run warns when either moved by more than %.0f%% from start to end.", speedRounds, speedDrift*100),
		"CPU svc/pg/gen/other: average cores used during the run by fulfillmentd, by PostgreSQL (postmaster and all backends), by this bench process (the load generator), and by everything else on the machine (/proc/stat busy time minus the three: other engineers' work on a shared machine — the noise indicator; it also holds kernel interrupt time, some of it from the bench's own loopback traffic); 2.00 in total saturates a 2-core machine.",
		fmt.Sprintf("outbox: one receiver in the bench process (rig/receiver: real loopback HTTP server, Standard Webhooks verification, idempotent) records when it first verifies each webhook-id. Destinations are idempotent, default timeout and attempts. Drain, at each destination concurrency: a fulfillmentd with outbox.disabled takes %d orders with one external line and their signed payment.confirmed webhooks (%d closed-loop clients) until every line message is pending; it is stopped, the same payloads are POSTed straight to the receiver with the service's own outbox.Sender at the same concurrency (the baseline: signing + HTTP, no database; keys made distinct; three runs, the median counts), then the outbox database gets a VACUUM ANALYZE (each drain starts from the state autovacuum leaves between bursts, not with the previous drain's dead rows), and a fulfillmentd with the dispatcher enabled starts and drains the backlog. deliveries/s = the middle 80%% of arrivals at the receiver (10th to 90th percentile) ÷ the time between them, for both (no ramp-up, no stragglers); ratio = outbox ÷ direct. Per delivery: pg_stat_database of the outbox database (commits, rows inserted and updated, shared buffers hit or read) and the cluster's WAL (pg_stat_wal), before the dispatcher starts and after it stops, ÷ deliveries (includes the process's start-up and idle polling: a few dozen transactions). Round trips, counted from the code (not measured): a worker of an idempotent destination claims up to 64 messages (1 round trip, committed asynchronously), loads them (1), sends them concurrently (the destination's workers share its concurrency in request slots), then records them in one transaction — begin, lock the messages, insert the attempts + mark the delivered (one pipelined batch), lock the orders whose lines were delivered, count their undelivered lines, update them and queue their order.fulfilled (one batch), commit: 7 — about 9 round trips and 3 commits per claim; a non-idempotent destination: one message per claim, +1 (the sending mark, committed before the request). Lag: a fulfillmentd with the line destination (default concurrency %d) and a second destination subscribed to order.fulfilled; new payment.confirmed webhooks open loop at the stated rate; ack = the moment the client read the 200; ack→delivered = the receiver's first verification of the line's key (and of the order.fulfilled key) − ack, one host, one monotonic clock; ack→processed = inbox_events.processed_at − received_at (database clock) of the same payments: the inbox stage before the outbox. The line lag's p50 over the first and the last quarter of the payments shows whether the dispatcher kept up (it grows when it falls behind). Failing destination, last: a backlog filled as for a drain is sent, at the default concurrency, to a second receiver that answers every request 503, until each message was attempted once (retries fall due a second or more later; any that came meanwhile count as attempts); per failed attempt = the outbox database's counters over that run ÷ the requests answered 503.", o.outboxBacklog, fillWorkers, config.DefaultDestinationConcurrency),
		"pg busy (notes) and the PostgreSQL activity section: pg_stat_activity sampled every 50 ms during the run — the average number of active client backends in each wait event (CPU = running, not waiting) and statement; a poor man's profile of the server.",
	}
}

// walGoal is g, the WAL goal, saying when a checkpoint began during the
// push of s: from then on the first change of each page writes the whole
// page, and the figure holds those images too.
func walGoal(g Goal, s *Sustained) Goal {
	if s != nil && s.Checkpoints > 0 {
		g.Margin += fmt.Sprintf("; %d checkpoint(s) began during the push or its drain: %.2f full-page images per event are in this figure",
			s.Checkpoints, s.WALImagesPerEvent)
	}
	return g
}

// windowsNote lists the p99 of each window an open-loop run pooled, when
// there were several: "; 3 windows pooled, each's p99 18.9, 32.3, 27.9 ms".
func windowsNote(p99 []float64) string {
	if len(p99) < 2 {
		return ""
	}
	each := make([]string, len(p99))
	for i, v := range p99 {
		each[i] = fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("; %d windows pooled, each's p99 %s ms", len(p99), strings.Join(each, ", "))
}
