package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fulfillplatform/fulfillment/rig/loadgen"
)

// Report is everything one bench run measured; it is written as JSON and
// rendered as the table (text and Markdown).
type Report struct {
	Started      time.Time   `json:"started"`
	TotalSeconds float64     `json:"total_seconds"`
	Machine      Machine     `json:"machine"`
	Settings     Settings    `json:"settings"`
	Methods      []string    `json:"methods"`
	Baseline     []LoadLevel `json:"baseline"`
	// BaselineNoNotify is the same insert with the table's NOTIFY trigger
	// disabled: informational, it shows what the trigger costs.
	BaselineNoNotify []LoadLevel   `json:"baseline_no_notify,omitempty"`
	Ingest           []IngestLevel `json:"ingest"`                  // Yolfi's
	IngestTBank      []IngestLevel `json:"ingest_tbank"`            // the same sweep of T-Bank notifications
	IngestPaused     []IngestLevel `json:"ingest_processor_paused"` // Yolfi's, inbox processor paused (1, 32, 64 clients)
	HalfPeak         *OpenIngest   `json:"ingest_half_peak,omitempty"`
	Pipeline         []Pipeline    `json:"pipeline"`
	Sustained        *Sustained    `json:"max_sustained,omitempty"`
	Replicas         []ReplicaRun  `json:"replicas,omitempty"`
	Reads            []LoadLevel   `json:"reads"`
	// Console is the admin console's pages on the history database
	// (rig/cmd/bench/console.go).
	Console []LoadLevel `json:"console,omitempty"`
	Outbox  *Outbox     `json:"outbox,omitempty"`
	History *History    `json:"history,omitempty"`
	Goals   []Goal      `json:"goals"`
	// GoalsByKey holds the same goals by key.
	GoalsByKey map[string]Goal `json:"goals_by_key"`
	Phases     []Phase         `json:"phases"`
	Warnings   []string        `json:"warnings,omitempty"`
	Profiles   []string        `json:"pprof_files,omitempty"`
	Table      []Row           `json:"table"`
}

// Machine describes where the run happened.
type Machine struct {
	Date        string `json:"date"`
	NProc       int    `json:"nproc"`
	CPUModel    string `json:"cpu_model"`
	Kernel      string `json:"kernel"`
	GoVersion   string `json:"go_version"`
	PostgreSQL  string `json:"postgresql"`
	PGSettings  string `json:"postgresql_settings"`
	Commit      string `json:"commit"`
	ServiceLog  string `json:"service_log_bytes"`
	Description string `json:"description"`
	// SpeedStart and SpeedEnd are the machine's speed before anything was
	// measured and after everything was (nil: not taken).
	SpeedStart *Speed `json:"speed_start,omitempty"`
	SpeedEnd   *Speed `json:"speed_end,omitempty"`
}

// Settings are the knobs of the run.
type Settings struct {
	Quick         bool    `json:"quick"`
	Concurrencies []int   `json:"concurrencies"`
	WarmupSeconds float64 `json:"warmup_seconds"`
	PhaseSeconds  float64 `json:"phase_seconds"`
	// HalfPeakWindows is how many windows of PhaseSeconds the half-peak
	// run pooled.
	HalfPeakWindows int     `json:"half_peak_windows"`
	PipelineSeconds float64 `json:"pipeline_seconds"`
	PipelineRates   []int   `json:"pipeline_rates"`
	Redeliver       float64 `json:"redeliver_share"`
	OutOfOrder      float64 `json:"out_of_order_share"`
	BodyBytes       int     `json:"body_bytes"`
	HistoryRows     int     `json:"history_rows"`
	ServiceMaxConns int     `json:"service_max_conns"`
	ReadWorkers     int     `json:"read_workers"`
	AccessWorkers   int     `json:"access_workers"`
	Subscriptions   int     `json:"subscriptions"`
	PushWorkers     int     `json:"push_workers"`
	OutboxConc      []int   `json:"outbox_concurrencies"`
	OutboxBacklog   int     `json:"outbox_backlog"`
	OutboxRate      int     `json:"outbox_rate"`
}

// LoadLevel is one closed-loop run.
type LoadLevel struct {
	Name        string              `json:"name"`
	Concurrency int                 `json:"concurrency"`
	Seconds     float64             `json:"seconds"`
	OK          int                 `json:"ok"`
	PerSecond   float64             `json:"per_second"`
	Latency     loadgen.Summary     `json:"latency"`
	Non200      map[int]int         `json:"non_200,omitempty"`
	CPU         CPUShare            `json:"cpu"`
	Waits       []loadgen.WaitShare `json:"pg_activity,omitempty"`
	// Note says what the run read (reads rows).
	Note string `json:"note,omitempty"`
}

// Non200Total counts the non-200 answers and errors.
func (l LoadLevel) Non200Total() int {
	n := 0
	for _, c := range l.Non200 {
		n += c
	}
	return n
}

// IngestLevel is one closed-loop webhook run.
type IngestLevel struct {
	Provider string `json:"provider"` // Yolfi, T-Bank
	LoadLevel
	NewPerSecond   float64 `json:"new_events_per_second"`
	Redeliveries   int     `json:"redeliveries_acked"`
	OutOfOrder     int     `json:"out_of_order_acked"`
	New            int     `json:"new_acked"`
	BaselinePerSec float64 `json:"baseline_rows_per_second"`
	Ratio          float64 `json:"ratio_ingest_over_baseline"`
	RatioYolfi     float64 `json:"ratio_over_yolfi,omitempty"` // T-Bank's, over Yolfi's at the same concurrency
	DrainSeconds   float64 `json:"drain_seconds_after"`
	// With one client, PostgreSQL's statements per webhook acknowledged
	// (pg_stat_statements reset before the level), the costliest and all.
	Statements      []loadgen.StatementCost `json:"pg_statements_per_webhook,omitempty"`
	StatementsTotal *loadgen.StatementCost  `json:"pg_statements_total_per_webhook,omitempty"`
}

// OpenIngest is an open-loop webhook run at a fixed rate.
type OpenIngest struct {
	Offered   float64         `json:"offered_per_second"`
	Seconds   float64         `json:"seconds"`
	OK        int             `json:"ok"`
	PerSecond float64         `json:"per_second"`
	Latency   loadgen.Summary `json:"ack_latency"`
	// WindowP99 is each window's p99 (ms) when the run pooled several
	// windows (Latency is over all of them).
	WindowP99 []float64 `json:"window_p99_ms,omitempty"`
	// WindowCPU is each window's CPU share then.
	WindowCPU []CPUShare          `json:"window_cpu,omitempty"`
	Late      int                 `json:"late"`
	Unsent    int                 `json:"unsent"`
	Non200    map[int]int         `json:"non_200,omitempty"`
	CPU       CPUShare            `json:"cpu"`
	Waits     []loadgen.WaitShare `json:"pg_activity,omitempty"`
	// GroupCommits counts the service's group commits of webhooks during
	// the run by outcome: decided on receipt, or queued (locked,
	// redelivered, failed); none when it decides nothing on receipt.
	GroupCommits map[string]float64 `json:"group_commits,omitempty"`
}

// groupCommitNote says how the group commits of an open-loop run stored
// their events, when any was queued: "queued group commits 3 of 120
// (locked 3)".
func groupCommitNote(g map[string]float64) string {
	var all, queued float64
	var why []string
	for _, k := range []string{"decided", "locked", "redelivered", "failed"} {
		all += g[k]
		if k != "decided" && g[k] > 0 {
			queued += g[k]
			why = append(why, fmt.Sprintf("%s %.0f", k, g[k]))
		}
	}
	if queued == 0 {
		return ""
	}
	return fmt.Sprintf("queued group commits %.0f of %.0f (%s)", queued, all, strings.Join(why, ", "))
}

// Pipeline is an open-loop run of new payment.confirmed events with their
// database-side ack→fulfilled latency.
type Pipeline struct {
	Label        string                  `json:"label"`
	Ack          OpenIngest              `json:"ack"`
	Fulfilled    loadgen.FulfilledReport `json:"ack_to_fulfilled"`
	DrainSeconds float64                 `json:"drain_seconds_after"`
}

// Sustained is the maximum processing rate under saturating ingest.
type Sustained struct {
	Workers           int      `json:"workers"`
	PushSeconds       float64  `json:"push_seconds"`
	IngestPerSecond   float64  `json:"ingest_per_second"`
	FulfilledPerSec   float64  `json:"fulfilled_per_second_under_load"`
	PerSecondBuckets  []int    `json:"processed_per_second_buckets"`
	DrainPerSecond    float64  `json:"drain_fulfilled_per_second"`
	BacklogAtPushEnd  int      `json:"backlog_at_push_end"`
	ProcessingKeptUp  bool     `json:"processing_kept_up"`
	Decisions         any      `json:"decisions"`
	DrainSeconds      float64  `json:"drain_seconds"`
	CPU               CPUShare `json:"cpu_push"`
	CPUDrain          CPUShare `json:"cpu_drain"`
	FulfilledPerSecMd float64  `json:"fulfilled_per_second_median_bucket"`
	// CPU per event over push and drain, from the processes' own counters:
	// every event of the push acknowledged and processed.
	Events             int     `json:"events"`
	ServiceUsPerEvent  float64 `json:"service_cpu_us_per_event"`
	PostgresUsPerEvent float64 `json:"postgres_cpu_us_per_event"`
	// WALBytesPerEvent is the cluster's WAL (pg_stat_wal) written over
	// push and drain, per event.
	WALBytesPerEvent float64 `json:"wal_bytes_per_event"`
	// WALImagesPerEvent are the full-page images among that WAL, per event,
	// and Checkpoints the checkpoints that began meanwhile: the WAL figure
	// moves with them from run to run.
	WALImagesPerEvent float64 `json:"wal_full_page_images_per_event"`
	Checkpoints       int64   `json:"checkpoints"`
	// WAL is that WAL by relation and kind of record (pg_waldump), largest
	// first.
	WAL []WALShare `json:"wal_per_event_by_record,omitempty"`
	// Updates are the rows each table had updated over push and drain,
	// and the HOT ones (pg_stat_user_tables, once the backends reported them).
	Updates    loadgen.TableUpdates `json:"table_updates,omitempty"`
	Waits      []loadgen.WaitShare  `json:"pg_activity_push,omitempty"`
	DrainWaits []loadgen.WaitShare  `json:"pg_activity_drain,omitempty"`
	// Statements are the costliest statements of push and drain, per event
	// (pg_stat_statements), and StatementsTotal the sum of all of them.
	Statements      []loadgen.StatementCost `json:"pg_statements_per_event,omitempty"`
	StatementsTotal *loadgen.StatementCost  `json:"pg_statements_total_per_event,omitempty"`
}

// History compares the service with a large processed history against
// the same service without it, measured in alternation.
type History struct {
	Rows                int          `json:"rows"`
	InsertSeconds       float64      `json:"insert_seconds"`
	VacuumSeconds       float64      `json:"vacuum_analyze_checkpoint_seconds"`
	InboxRows           int64        `json:"inbox_rows_with_history"`
	InboxSize           string       `json:"inbox_total_size_with_history"`
	EmptyInboxRows      int64        `json:"inbox_rows_without_history"`
	Concurrency         int          `json:"concurrency"`
	Runs                []HistoryRun `json:"ingest_runs"`
	EmptyPerSecond      float64      `json:"ingest_per_second_without_history"`
	HistoryPerSecond    float64      `json:"ingest_per_second_with_history"`
	IngestRatio         float64      `json:"ingest_ratio_with_over_without"` // median of RoundRatios
	RoundRatios         []float64    `json:"ingest_ratio_per_round"`
	PooledRatio         float64      `json:"ingest_ratio_pooled"`
	Pipeline            *Pipeline    `json:"pipeline_with_history,omitempty"`
	EmptyPipeline       *Pipeline    `json:"pipeline_without_history,omitempty"`
	FulfilledP50Ratio   float64      `json:"ack_to_fulfilled_p50_ratio,omitempty"`
	FulfilledP99Ratio   float64      `json:"ack_to_fulfilled_p99_ratio,omitempty"`
	PipelineAckP99Ratio float64      `json:"pipeline_ack_p99_ratio,omitempty"`
}

// HistoryRun is one ingest run of the alternation.
type HistoryRun struct {
	Round   int  `json:"round"`
	History bool `json:"with_history"`
	IngestLevel
}

// Goal is one performance target, met or missed, by how much. Key names it
// in results (goals_by_key); WhenSet is what was measured when it was set.
type Goal struct {
	Key     string `json:"key"`
	Goal    string `json:"goal"`
	Met     bool   `json:"met"`
	Value   string `json:"value"`
	Margin  string `json:"margin"`
	WhenSet string `json:"when_set,omitempty"`
}

// Phase is how long one step took.
type Phase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// Row is one line of the table.
type Row struct {
	Phase    string `json:"phase"`
	Scenario string `json:"scenario"`
	Conc     string `json:"concurrency"`
	Offered  string `json:"offered_per_s"`
	Result   string `json:"result_per_s"`
	P50      string `json:"p50_ms"`
	P99      string `json:"p99_ms"`
	P999     string `json:"p999_ms"`
	Non200   string `json:"non_200"`
	CPU      string `json:"cpu_svc_pg_gen_other"`
	Notes    string `json:"notes"`
}

var header = Row{"PHASE", "SCENARIO", "CONC", "OFFERED/s", "RESULT/s", "P50 ms", "P99 ms", "P99.9 ms", "NON-200", "CPU svc/pg/gen/other", "NOTES"}

func (r Row) cells() []string {
	return []string{r.Phase, r.Scenario, r.Conc, r.Offered, r.Result, r.P50, r.P99, r.P999, r.Non200, r.CPU, r.Notes}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", loadgen.Ms(d)) }

func rate(x float64) string { return fmt.Sprintf("%.0f", x) }

// non200 is the table's NON-200 cell: the count, with the statuses.
func non200(m map[int]int) string {
	if n := statusNote(m); n != "" {
		return strings.TrimPrefix(n, "non-200 ")
	}
	return "0"
}

func statusNote(m map[int]int) string {
	n := 0
	keys := make([]int, 0, len(m))
	for k, c := range m {
		n += c
		keys = append(keys, k)
	}
	if n == 0 {
		return ""
	}
	sort.Ints(keys)
	parts := []string{}
	for _, k := range keys {
		name := fmt.Sprint(k)
		switch {
		case k == -1:
			name = "err"
		case k >= 1000:
			name = fmt.Sprintf("grpc%d", k-1000)
		}
		parts = append(parts, fmt.Sprintf("%s×%d", name, m[k]))
	}
	return fmt.Sprintf("non-200 %d (%s)", n, strings.Join(parts, " "))
}

func joinNotes(ns ...string) string {
	var out []string
	for _, n := range ns {
		if n != "" {
			out = append(out, n)
		}
	}
	return strings.Join(out, "; ")
}

// buildTable renders the report's results as rows.
func (r *Report) buildTable() {
	var rows []Row
	for _, b := range r.Baseline {
		rows = append(rows, Row{"baseline", "INSERT…ON CONFLICT, 1 commit/row", fmt.Sprint(b.Concurrency), "-",
			rate(b.PerSecond) + " rows", ms(b.Latency.P50), ms(b.Latency.P99), ms(b.Latency.P999), non200(b.Non200), b.CPU.String(),
			joinNotes(waitNote(b.Waits))})
	}
	for _, b := range r.BaselineNoNotify {
		rows = append(rows, Row{"(info)", "same, NOTIFY trigger disabled", fmt.Sprint(b.Concurrency), "-",
			rate(b.PerSecond) + " rows", ms(b.Latency.P50), ms(b.Latency.P99), ms(b.Latency.P999), non200(b.Non200), b.CPU.String(),
			joinNotes(waitNote(b.Waits))})
	}
	// Each T-Bank level next to Yolfi's at the same concurrency.
	tbank, paused := map[int]IngestLevel{}, map[int]IngestLevel{}
	for _, in := range r.IngestTBank {
		tbank[in.Concurrency] = in
	}
	for _, in := range r.IngestPaused {
		paused[in.Concurrency] = in
	}
	for _, in := range r.Ingest {
		if pa, ok := paused[in.Concurrency]; ok {
			rows = append(rows, ingestRow("ingest", pa))
		}
		rows = append(rows, ingestRow("ingest", in))
		if tb, ok := tbank[in.Concurrency]; ok {
			rows = append(rows, ingestRow("ingest", tb))
		}
	}
	if h := r.HalfPeak; h != nil {
		rows = append(rows, Row{"ingest", "Yolfi webhook mix, open loop at ½ peak", "-", rate(h.Offered), rate(h.PerSecond) + " req",
			ms(h.Latency.P50), ms(h.Latency.P99), ms(h.Latency.P999), non200(h.Non200), h.CPU.String(),
			joinNotes(fmt.Sprintf("late %d", h.Late), strings.TrimPrefix(windowsNote(h.WindowP99), "; "), unsentNote(h.Unsent),
				groupCommitNote(h.GroupCommits), waitNote(h.Waits))})
	}
	for _, p := range r.Pipeline {
		rows = append(rows, pipelineRows("pipeline", p)...)
	}
	if s := r.Sustained; s != nil {
		note := fmt.Sprintf("median 1-s bucket %.0f; drain (no ingest) %.0f/s; ingest %.0f/s; backlog at push end %d",
			s.FulfilledPerSecMd, s.DrainPerSecond, s.IngestPerSecond, s.BacklogAtPushEnd)
		if s.ProcessingKeptUp {
			note += "; processing kept up: ingest-bound, a lower bound"
		}
		if s.Events > 0 {
			note += fmt.Sprintf("; CPU per event (push + drain, %d events) svc %.0f µs, pg %.0f µs", s.Events, s.ServiceUsPerEvent, s.PostgresUsPerEvent)
			note += fmt.Sprintf("; WAL per event %.0f B and %.2f full-page images; checkpoints begun: %d", s.WALBytesPerEvent, s.WALImagesPerEvent, s.Checkpoints)
		}
		if u := updatesNote(s.Updates); u != "" {
			note += "; " + u
		}
		rows = append(rows, Row{"pipeline", "max sustained fulfilled (saturating push)", fmt.Sprint(s.Workers), "-",
			rate(s.FulfilledPerSec) + " fulfilled", "", "", "", "", s.CPU.String(), note})
	}
	for _, rr := range r.Replicas {
		rows = append(rows, Row{"replicas", fmt.Sprintf("saturating push, %d fulfillmentd on one database", rr.Replicas), "-", "-",
			rate(rr.FulfilledPerSec) + " fulfilled", "", "", "", "", rr.CPU.String(),
			fmt.Sprintf("%.2f× one replica; ingest %.0f/s; CPU per event (push + drain, %d events) svc %.0f µs (all replicas), pg %.0f µs",
				rr.RatioToOne, rr.IngestPerSecond, rr.Events, rr.ServiceUsPerEvent, rr.PostgresUsPerEvent)})
	}
	for _, rd := range r.Reads {
		rows = append(rows, Row{"reads", rd.Name, fmt.Sprint(rd.Concurrency), "-", rate(rd.PerSecond) + " req",
			ms(rd.Latency.P50), ms(rd.Latency.P99), ms(rd.Latency.P999), non200(rd.Non200), rd.CPU.String(), rd.Note})
	}
	if ob := r.Outbox; ob != nil {
		rows = append(rows, outboxRows(ob)...)
	}
	for _, c := range r.Console {
		rows = append(rows, Row{"console", c.Name, fmt.Sprint(c.Concurrency), "-", rate(c.PerSecond) + " req",
			ms(c.Latency.P50), ms(c.Latency.P99), ms(c.Latency.P999), non200(c.Non200), c.CPU.String(), c.Note})
	}
	if h := r.History; h != nil {
		label := fmt.Sprintf("%s hist", humanCount(h.Rows))
		for _, run := range h.Runs {
			row := ingestRow("history", run.IngestLevel)
			row.Notes = strings.Replace(row.Notes, fmt.Sprintf("÷ baseline %.2f; ", run.Ratio), "", 1)
			if run.History {
				row.Scenario = fmt.Sprintf("webhook mix, %s (run %d)", label, run.Round)
			} else {
				row.Scenario = fmt.Sprintf("webhook mix, no hist (run %d)", run.Round)
			}
			rows = append(rows, row)
		}
		rows = append(rows, Row{Phase: "history", Scenario: fmt.Sprintf("ingest with ÷ without %s hist", humanCount(h.Rows)),
			Conc: fmt.Sprint(h.Concurrency), Offered: "-", Result: fmt.Sprintf("%.2f×", h.IngestRatio),
			Notes: fmt.Sprintf("median of the rounds' ratios %v; pooled %.2f (%.0f vs %.0f req/s); inbox at the start %d vs %d rows",
				h.RoundRatios, h.PooledRatio, h.HistoryPerSecond, h.EmptyPerSecond, h.InboxRows, h.EmptyInboxRows)})
		for _, p := range []*Pipeline{h.EmptyPipeline, h.Pipeline} {
			if p == nil {
				continue
			}
			prs := pipelineRows("history", *p)
			suffix := ", no hist"
			if p == h.Pipeline {
				suffix = ", " + label
				if h.EmptyPipeline != nil {
					prs[1].Notes = joinNotes(fmt.Sprintf("÷ no hist: p50 %.2f p99 %.2f", h.FulfilledP50Ratio, h.FulfilledP99Ratio), prs[1].Notes)
				}
			}
			for i := range prs {
				prs[i].Scenario += suffix
			}
			rows = append(rows, prs...)
		}
	}
	r.Table = rows
}

// waitNote names the two wait events (or CPU) the most backends were in.
func waitNote(ws []loadgen.WaitShare) string {
	by := map[string]float64{}
	var order []string
	for _, w := range ws {
		if _, ok := by[w.Wait]; !ok {
			order = append(order, w.Wait)
		}
		by[w.Wait] += w.Avg
	}
	if len(order) == 0 {
		return ""
	}
	sort.SliceStable(order, func(i, j int) bool { return by[order[i]] > by[order[j]] })
	var parts []string
	for _, k := range order[:min(2, len(order))] {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, by[k]))
	}
	return "pg busy: " + strings.Join(parts, ", ")
}

func unsentNote(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("unsent %d", n)
}

func ingestRow(phase string, in IngestLevel) Row {
	notes := joinNotes(fmt.Sprintf("new %.0f/s", in.NewPerSecond))
	if in.BaselinePerSec > 0 {
		notes = joinNotes(notes, fmt.Sprintf("÷ baseline %.2f", in.Ratio))
	}
	if in.RatioYolfi > 0 {
		notes = joinNotes(notes, fmt.Sprintf("÷ Yolfi %.2f", in.RatioYolfi))
	}
	notes = joinNotes(notes, waitNote(in.Waits))
	return Row{phase, in.Provider + " webhook mix, closed loop", fmt.Sprint(in.Concurrency), "-", rate(in.PerSecond) + " req",
		ms(in.Latency.P50), ms(in.Latency.P99), ms(in.Latency.P999), non200(in.Non200), in.CPU.String(), notes}
}

func pipelineRows(phase string, p Pipeline) []Row {
	a, f := p.Ack, p.Fulfilled
	pending := ""
	if f.Pending > 0 {
		pending = fmt.Sprintf("%d still pending", f.Pending)
	}
	return []Row{
		{phase, fmt.Sprintf("ack @%s/s open loop", rate(a.Offered)), "-", rate(a.Offered), rate(a.PerSecond) + " req",
			ms(a.Latency.P50), ms(a.Latency.P99), ms(a.Latency.P999), non200(a.Non200), a.CPU.String(),
			joinNotes(fmt.Sprintf("late %d", a.Late), unsentNote(a.Unsent), groupCommitNote(a.GroupCommits), waitNote(a.Waits))},
		{phase, fmt.Sprintf("ack→fulfilled @%s/s (DB clock)", rate(a.Offered)), "-", rate(a.Offered), "",
			ms(f.Latency.P50), ms(f.Latency.P99), ms(f.Latency.P999), "", "",
			joinNotes(fmt.Sprintf("n=%d", f.Latency.N), pending, fmt.Sprintf("drain %.1fs", p.DrainSeconds))},
	}
}

// outboxRows renders the outbox phase: each drain after its baseline, then
// the lag run.
func outboxRows(ob *Outbox) []Row {
	var rows []Row
	for _, d := range ob.Drains {
		c := fmt.Sprint(d.Concurrency)
		rows = append(rows,
			Row{"outbox", "baseline: direct signed POSTs (outbox.Sender, no DB)", c, "-", rate(d.BaselinePerSecond) + " POSTs",
				ms(d.BaselineLatency.P50), ms(d.BaselineLatency.P99), ms(d.BaselineLatency.P999), non200(d.BaselineNon200), d.BaselineCPU.String(),
				fmt.Sprintf("%d messages; median of runs at %v/s", d.Messages, d.BaselineRuns)},
			Row{"outbox", fmt.Sprintf("drain a backlog of %d to the receiver", d.Messages), c, "-", rate(d.PerSecond) + " deliveries",
				"", "", "", fmt.Sprint(d.Messages - d.Delivered), d.CPU.String(),
				joinNotes(fmt.Sprintf("÷ direct %.2f", d.Ratio), fmt.Sprintf("%d in %.1fs", d.Delivered, d.DrainSeconds),
					"per delivery "+d.PerDelivery.String(), waitNote(d.Waits))})
	}
	if l := ob.Lag; l != nil {
		off := rate(l.Ack.Offered)
		missing := ""
		if l.Missing > 0 {
			missing = fmt.Sprintf("%d not delivered", l.Missing)
		}
		lagRow := func(what string, s loadgen.Summary, note string) Row {
			return Row{"outbox", fmt.Sprintf("ack→%s @%s/s (receiver)", what, off), fmt.Sprint(l.Concurrency), off, "",
				ms(s.P50), ms(s.P99), ms(s.P999), "", "", joinNotes(fmt.Sprintf("p90 %s; n=%d", ms(s.P90), s.N), note)}
		}
		prs := pipelineRows("outbox", l.Pipeline)
		prs[0].Scenario += ", external-line orders"
		prs[1].Scenario = fmt.Sprintf("ack→processed @%s/s (DB clock, inbox stage)", off)
		prs[1].Notes = joinNotes(fmt.Sprintf("p90 %s", ms(l.Fulfilled.Latency.P90)), prs[1].Notes)
		rows = append(rows, prs...)
		rows = append(rows,
			lagRow("line delivered", l.Line, joinNotes(missing, fmt.Sprintf("p50 of the first ¼ of payments %.2f, of the last ¼ %.2f",
				l.LineFirstQuarterP50, l.LineLastQuarterP50))),
			lagRow("order.fulfilled delivered", l.Announced, "the line's delivery fulfils the order, which is announced to a 2nd destination"))
	}
	if f := ob.Failing; f != nil {
		rows = append(rows, Row{"outbox", fmt.Sprintf("a backlog of %d to a destination answering 503", f.Messages),
			fmt.Sprint(f.Concurrency), "-", fmt.Sprintf("%d failed attempts", f.Attempts), "", "", "", "", "",
			joinNotes(fmt.Sprintf("in %.1fs", f.Seconds), "per failed attempt "+f.PerAttempt.String())})
	}
	return rows
}

func humanCount(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 1000:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// Text renders the table aligned, then the goals.
func (r *Report) Text() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, row := range append([]Row{header}, r.Table...) {
		_, _ = fmt.Fprintln(tw, strings.Join(row.cells(), "\t"))
	}
	_ = tw.Flush() // into a bytes.Buffer: cannot fail
	b.WriteString("\nGoals:\n")
	for _, g := range r.Goals {
		fmt.Fprintf(&b, "  %-6s %s: %s (%s)%s\n", metWord(g.Met), g.Goal, g.Value, g.Margin, whenSet(g))
	}
	return b.String()
}

func whenSet(g Goal) string {
	if g.WhenSet == "" {
		return ""
	}
	return "; when set: " + g.WhenSet
}

func metWord(met bool) string {
	if met {
		return "MET"
	}
	return "MISSED"
}

// Markdown renders the whole report for humans.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# fulfillment bench — %s\n\n", r.Machine.Date)
	fmt.Fprintf(&b, "%s\n\n", r.Machine.Description)
	b.WriteString("| " + strings.Join(header.cells(), " | ") + " |\n")
	b.WriteString(strings.Repeat("|---", len(header.cells())) + "|\n")
	for _, row := range r.Table {
		cells := row.cells()
		for i, c := range cells {
			cells[i] = strings.ReplaceAll(c, "|", "\\|")
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	b.WriteString("\n## Goals\n\n")
	for _, g := range r.Goals {
		fmt.Fprintf(&b, "- **%s** — %s: %s (%s)%s\n", metWord(g.Met), g.Goal, g.Value, g.Margin, whenSet(g))
	}
	b.WriteString("\n## Machine\n\n")
	m := r.Machine
	fmt.Fprintf(&b, "- date: %s\n- nproc: %d (%s)\n- kernel: %s\n- Go: %s\n- PostgreSQL: %s\n- PostgreSQL settings: %s\n- commit: %s\n- speed: %s\n",
		m.Date, m.NProc, m.CPUModel, m.Kernel, m.GoVersion, m.PostgreSQL, m.PGSettings, m.Commit, speedLine(m.SpeedStart, m.SpeedEnd))
	b.WriteString("\n## How each figure is measured\n\n")
	for _, s := range r.Methods {
		fmt.Fprintf(&b, "- %s\n", s)
	}
	b.WriteString("\n## PostgreSQL activity\n\nSampled from pg_stat_activity every 50 ms: average number of active client backends per wait event (CPU = running) and statement.\n")
	for _, a := range r.activity() {
		fmt.Fprintf(&b, "\n**%s**\n\n| backends | wait | statement |\n|---|---|---|\n", a.name)
		for _, w := range a.waits {
			fmt.Fprintf(&b, "| %.2f | %s | `%s` |\n", w.Avg, w.Wait, strings.ReplaceAll(w.Query, "|", "\\|"))
		}
	}
	if s := r.Sustained; s != nil && s.StatementsTotal != nil {
		b.WriteString("\n## PostgreSQL per event\n\nThe saturating push and its drain, from pg_stat_statements (reset before the push): per event acknowledged and processed, each statement's executions, execution time (lock waits and time off the CPU included, the commit's WAL flush not), planning time (a statement on a custom plan is planned at each run), shared buffers touched (planning's included) — hit + read + dirtied + written, each shown — and WAL written; the costliest statements by execution and planning time, then all of them.\n\n")
		statementTable(&b, s.Statements, *s.StatementsTotal)
	}
	if s := r.Sustained; s != nil && len(s.WAL) > 0 {
		b.WriteString("\n## WAL per event\n\nThe saturating push and its drain, read back with pg_waldump: each record's bytes (full-page images included, shown apart) under the table or index it changes (its first block) and its kind, per event acknowledged and processed; records of no relation (commits) have none, and the last row is the WAL that no record accounts for (page headers, alignment).\n\n| records | bytes | of which page images | relation | record |\n|---|---|---|---|---|\n")
		var records, bytes float64
		for _, w := range s.WAL {
			fmt.Fprintf(&b, "| %.2f | %.1f | %.1f | %s | %s |\n", w.Records, w.Bytes, w.ImageBytes, w.Relation, w.Record)
			records += w.Records
			bytes += w.Bytes
		}
		fmt.Fprintf(&b, "| **%.2f** | **%.1f** | | | **total** |\n", records, bytes)
	}
	var one []IngestLevel
	for _, levels := range [][]IngestLevel{r.IngestPaused, r.Ingest, r.IngestTBank} {
		for _, l := range levels {
			if l.Concurrency == 1 && l.StatementsTotal != nil {
				one = append(one, l)
			}
		}
	}
	if len(one) > 0 {
		b.WriteString("\n## PostgreSQL per webhook, one client\n\nThe one-client ingest levels, from pg_stat_statements (reset before each level): per webhook acknowledged (redeliveries and out-of-order ones included), the same columns as above; the costliest statements, then all of them. A lone webhook's batch pays each statement's fixed cost alone, and these levels run on a new database, whose tables are young: their statistics follow them as the service's queue vacuum analyzes them, about every doubling.\n")
		for _, l := range one {
			fmt.Fprintf(&b, "\n**%s**\n\n", l.Provider)
			statementTable(&b, l.Statements, *l.StatementsTotal)
		}
	}
	b.WriteString("\n## Phase durations\n\n| phase | seconds |\n|---|---|\n")
	for _, p := range r.Phases {
		fmt.Fprintf(&b, "| %s | %.1f |\n", p.Name, p.Seconds)
	}
	fmt.Fprintf(&b, "| **total** | %.1f |\n", r.TotalSeconds)
	if len(r.Warnings) > 0 {
		b.WriteString("\n## Warnings\n\n")
		for _, w := range r.Warnings {
			fmt.Fprintf(&b, "- %s\n", w)
		}
	}
	b.WriteString("\nChart: `bench.png` (throughput and p99 against concurrency).\n")
	return b.String()
}

// statementTable writes the rows of a per-event (or per-webhook) table of
// statements, then their total.
func statementTable(b *strings.Builder, rows []loadgen.StatementCost, total loadgen.StatementCost) {
	b.WriteString("| calls | exec µs | plan µs | buffers | hit | read | dirtied | written | WAL bytes | statement |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range append(rows, total) {
		q := c.Query
		if len(q) > 110 {
			q = q[:110] + "…"
		}
		fmt.Fprintf(b, "| %.2f | %.0f | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f | `%s` |\n", c.Calls, c.ExecUs, c.PlanUs, c.Buffers,
			c.Hit, c.Read, c.Dirtied, c.Written, c.WALBytes, strings.ReplaceAll(q, "|", "\\|"))
	}
}

// write stores the report as results/bench-<timestamp>.{json,md} and
// results/latest.{json,md}.
func (r *Report) write(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	md := []byte(r.Markdown())
	stamp := r.Started.UTC().Format("20060102-150405")
	var paths []string
	for name, data := range map[string][]byte{
		"bench-" + stamp + ".json": js, "bench-" + stamp + ".md": md,
		"latest.json": js, "latest.md": md,
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

type activity struct {
	name  string
	waits []loadgen.WaitShare
}

// activity lists the sampled PostgreSQL activity of each run.
func (r *Report) activity() []activity {
	var out []activity
	add := func(name string, ws []loadgen.WaitShare) {
		if len(ws) > 0 {
			out = append(out, activity{name, ws})
		}
	}
	for _, l := range r.Baseline {
		add(fmt.Sprintf("baseline, %d clients", l.Concurrency), l.Waits)
	}
	for _, l := range r.BaselineNoNotify {
		add(fmt.Sprintf("baseline without NOTIFY, %d clients", l.Concurrency), l.Waits)
	}
	for _, l := range append(slices.Clone(r.Ingest), r.IngestTBank...) {
		add(fmt.Sprintf("ingest (%s), %d clients", l.Provider, l.Concurrency), l.Waits)
	}
	if h := r.HalfPeak; h != nil {
		add(fmt.Sprintf("ingest open loop %.0f/s", h.Offered), h.Waits)
	}
	for _, p := range r.Pipeline {
		add(fmt.Sprintf("pipeline %.0f/s", p.Ack.Offered), p.Ack.Waits)
	}
	if s := r.Sustained; s != nil {
		add("saturating push", s.Waits)
		add("drain after the push (processing only)", s.DrainWaits)
	}
	if ob := r.Outbox; ob != nil {
		for _, d := range ob.Drains {
			add(fmt.Sprintf("outbox: drain at concurrency %d", d.Concurrency), d.Waits)
		}
		if ob.Lag != nil {
			add(fmt.Sprintf("outbox: payments %.0f/s, deliveries following", ob.Lag.Ack.Offered), ob.Lag.Ack.Waits)
		}
	}
	if h := r.History; h != nil {
		for _, run := range h.Runs {
			add(fmt.Sprintf("history: ingest %s, run %d", run.Name, run.Round), run.Waits)
		}
		if h.EmptyPipeline != nil {
			add("history: pipeline without history", h.EmptyPipeline.Ack.Waits)
		}
		if h.Pipeline != nil {
			add("history: pipeline with history", h.Pipeline.Ack.Waits)
		}
	}
	return out
}

// updatesNote says, for each table with rows updated, how many updates
// and how many of them HOT: an update that is not HOT writes an entry into
// every index of its table.
func updatesNote(u loadgen.TableUpdates) string {
	names := slices.Sorted(maps.Keys(u))
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %d (%d HOT)", n, u[n].Updates, u[n].HOT))
	}
	if len(parts) == 0 {
		return ""
	}
	return "rows updated: " + strings.Join(parts, ", ")
}
