package chaos

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// Report is what a chaos run did and found.
type Report struct {
	Seed int64
	// Pooler is the PgBouncer pool mode fulfillmentd ran behind ("": none).
	Pooler string

	// The workload.
	Orders         int // orders created
	TestOnlyOrders int // orders that only ever receive test-mode events
	Events         int // distinct provider events planned (probes excluded)
	TestModeEvents int // of which test-mode events (live and test endpoint)
	ExtraPayments  int // second (and third) confirmed payments on another invoice
	StaleEvents    int // invoice.overdue of the paying invoice, sent after its confirmation
	Redeliveries   int // extra deliveries of the same bytes
	Concurrent     int // of which sent at the same moment as another copy
	Deliveries     int // planned deliveries: events + redeliveries
	ExternalLines  int // order lines fulfilled through the outbox
	// LateOrders are created only after every event of theirs was
	// processed (decided unmatched): their payments come first.
	LateOrders int
	// LateFirst: the registered subscriptions paid before their order is
	// created (late_first.go).
	LateFirst LateFirstReport
	// RacingOrders (of LateOrders) are created as soon as one of their
	// events is acknowledged, racing its processing: matched at once or
	// late, never left unmatched.
	RacingOrders int
	// RacingAtOnce and RacingLate count the racing orders' confirmed
	// payments matched when first processed, and queued again by the
	// service, at the check: both show the race was run.
	RacingAtOnce, RacingLate int
	// LateMatched counts the events the service queued again itself when
	// their order or subscription was created (inbox_replays by the
	// service), at the check.
	LateMatched int
	// TBank is the T-Bank traffic, and what became of it.
	TBank TBankReport
	// Overpaid is the T-Bank orders paid more than their total and their
	// refunds (part of TBank's), and what became of them.
	Overpaid OverpaymentReport
	// Subscriptions is the subscription traffic, and what became of it.
	Subscriptions SubscriptionReport

	// The sender.
	Acked    int              // distinct events acknowledged with 2xx, probes included
	Requests int64            // HTTP requests sent (every try of every delivery)
	Retries  int64            // tries after the first, as a provider retries
	Answers  map[string]int64 // answers by HTTP status ("200", "503", …; "error": no answer)

	// The faults.
	Kills           int // SIGKILLs of fulfillmentd (each followed by a restart)
	PGRestarts      int // immediate stops of PostgreSQL, each followed by a restart
	UnexpectedExits int // fulfillmentd exits nobody asked for
	Starts          int // fulfillmentd processes started
	// Reclaimed counts inbox events claimed more than once: their worker
	// died, or the database went away, before the processing committed.
	Reclaimed   int
	MaxAttempts int // most claims of one inbox event

	// The database outage contract.
	OutageProbes  int             // webhook probes sent while PostgreSQL was down
	Max503Latency time.Duration   // slowest of their answers
	Recoveries    []time.Duration // database back → first 200, per outage
	// The REST API (GET /v1/orders/{id}) during the same outages, by HTTP
	// status: for the record (the contract binds webhooks; a 200 is a
	// violation).
	OutageAPIAnswers    map[string]int64
	MaxAPIOutageLatency time.Duration

	// The outbox, by destination, and its attempts by outcome.
	Destinations   []DestinationReport
	OutboxAttempts map[string]int64

	// Timing.
	SendWindow time.Duration // over which first deliveries were spread
	SendPhase  time.Duration // first delivery → every event acknowledged, faults done
	Settle     time.Duration // → no inbox event pending
	Drain      time.Duration // → then no outbox message pending
	Elapsed    time.Duration

	// The verdict.
	// Lost counts acknowledged events without an inbox row, and the
	// subscription effects (periods, events, items) the rules require that
	// are missing.
	Lost              int
	DuplicatedEffects int // entitlements, ledger rows, periods, events, items or inbox rows beyond what is due
	// Unitemized counts uncertain and failed outbox messages without
	// exactly one open item of their kind.
	Unitemized int
	Checks     []Check
	Violations []string
	// Incomplete says why the run stopped before its verdict (setup
	// failure, interruption); empty when it completed.
	Incomplete string
}

// TBankReport is the T-Bank share of a run: its orders and notifications
// (planned), how many were acknowledged, lost or had an effect doubled.
type TBankReport struct {
	Orders         int // orders paid through the T-Bank endpoint
	Notifications  int // distinct notifications planned (redeliveries come on top)
	PartialRefunds int // PARTIAL_REFUNDED notifications, each of another amount
	FullRefunds    int // REFUNDED notifications
	Refunded       int // orders refunded at the end
	Acked          int // distinct notifications answered 200 OK
	Lost           int // acknowledged notifications not stored
	Duplicated     int // their inbox rows, and their orders' effects, beyond what is due
}

// SubscriptionReport is the subscription share of a run: the subscription
// orders and the events about them (planned), how many were acknowledged,
// lost or had an effect doubled, and what the subscriptions hold at the
// end.
type SubscriptionReport struct {
	Orders         int // subscription orders, each starting one subscription
	Events         int // distinct events about them, first payments included
	Renewals       int // renewal payments, each of one more period
	Reannounced    int // payments announced again under another event id
	ExtraPayments  int // second payments of a renewal invoice
	OutOfOrder     int // renewals planned before the renewal of the period before theirs
	Overdue        int // subscription.overdue events
	Cancelled      int // subscription.cancelled events
	InvoiceOverdue int // invoice.overdue of paid renewal invoices
	// Early counts renewals and lifecycle events delivered (and decided
	// unmatched) before the first payment that creates their subscription
	// is sent.
	Early      int
	Lapsing    int // subscriptions whose access must be over at the check
	Acked      int // distinct events acknowledged
	Lost       int // acknowledged events not stored, and effects missing
	Duplicated int // their inbox rows, and effects, beyond what is due
	Stale      int // lifecycle events the rules ignored as stale
	Periods    int // periods paid at the end
	Ended      int // subscriptions whose access the sweeper ended
	// NamingOrder counts the renewal payments (announcements again and
	// second payments of a bill among them) that name the subscription's
	// merchant order too; at the check, NamingRenewed those of them the
	// subscription rules decided renewed, NamingExtra duplicate_payment
	// (a bill paid already, a charge after the cancellation), and
	// NamingApplied already_applied (the same payment again) — none linked
	// to the order.
	NamingOrder, NamingRenewed, NamingExtra, NamingApplied int
	// NamingInvoices counts the events of those renewals' invoices
	// (created, overdue) that name the order too: the subscription rules'
	// as well, recording no attempt of the order.
	NamingInvoices int

	// The charged subscriptions (charges.go): registered, then paid by
	// T-Bank recurrent charges, some refunded.
	Registered           int // subscriptions registered ahead of their charges
	Charges              int // recurrent charges, each of one more period
	RefundedCharges      int // charges with refunds
	ChargeRefunds        int // refund notifications of charges
	PartialChargeRefunds int // of which PARTIAL_REFUNDED
	RefundsFirst         int // refunds delivered (and decided unmatched) before their charge is sent
	RefundsRacing        int // refunds delivered at the same moment as their charge
	// At the check: refunds decided subscription_refunded or
	// partially_refunded, of which queued again by their charge's
	// transaction; periods marked refunded.
	RefundsApplied, RefundsRequeued, RefundedPeriods int
	// ChargeLost and ChargeDuplicated are what a refund of a charge should
	// have left and did not (a period not marked refunded, a refund left
	// unmatched, an item), and what it left beyond: part of Lost and
	// Duplicated.
	ChargeLost, ChargeDuplicated int
}

// Check is the result of one verification over many subjects.
type Check struct {
	Name    string
	Checked int // subjects checked (events, orders, …)
	Failed  int
}

// DestinationReport is what happened to one destination's messages, as its
// receiver counted them.
type DestinationReport struct {
	ID         string
	Idempotent bool
	Messages   int // messages the workload called for, stored
	Delivered  int // delivered, and applied exactly once at the receiver
	Doubled    int // keys the receiver applied more than once
	// Uncertain messages (only to a destination that does not honour
	// keys), of which UncertainReached had been applied (once).
	Uncertain, UncertainReached int
	Failed                      int // failed past the destination's attempts
	Requests                    int // verified requests the receiver got for them
	Resent                      int // keys the receiver got more than one request for
	// The faults the receiver injected: 500s, hangs past the timeout
	// before and after the effect, connections reset after the effect.
	Refused, HungBefore, HungAfter, Dropped int64
}

// outboxTotals sums the destinations.
func (r *Report) outboxTotals() (t DestinationReport) {
	for _, d := range r.Destinations {
		t.Messages += d.Messages
		t.Delivered += d.Delivered
		t.Doubled += d.Doubled
		t.Uncertain += d.Uncertain
		t.UncertainReached += d.UncertainReached
		t.Failed += d.Failed
	}
	return t
}

// OK reports whether the run completed and found no violation.
func (r *Report) OK() bool { return len(r.Violations) == 0 && r.Incomplete == "" }

// Summary is one line on success — "chaos: N acked, 0 lost, 0 duplicated
// effects; outbox: X delivered once, 0 doubled, U uncertain (all with
// items)", with ", F failed" before the parenthesis when messages failed,
// then "; tbank: T acked, 0 lost, 0 duplicated" when the run had T-Bank
// traffic (its share of the totals before), "; overpaid: O orders, R
// refunds (C recorded, E of the excess only), 0 lost, 0 duplicated" when
// some of it was overpaid (part of the totals too), "; subscriptions: S acked,
// 0 lost, 0 duplicated" likewise (then, in parentheses, what became of the
// renewals that named their order), and "; charge refunds: A applied, 0
// lost, 0 duplicated" when charges were refunded — and otherwise that line marked
// FAILED (or NOT COMPLETED) followed by one line per violation.
func (r *Report) Summary() string {
	t := r.outboxTotals()
	items := "all with items"
	if r.Unitemized > 0 {
		items = fmt.Sprintf("%d without their item", r.Unitemized)
	}
	failed := ""
	if t.Failed > 0 {
		failed = fmt.Sprintf(", %d failed", t.Failed)
	}
	head := fmt.Sprintf("chaos: %d acked, %d lost, %d duplicated effects; outbox: %d delivered once, %d doubled, %d uncertain%s (%s)",
		r.Acked, r.Lost, r.DuplicatedEffects, t.Delivered, t.Doubled, t.Uncertain, failed, items)
	if tb := r.TBank; tb.Notifications > 0 {
		head += fmt.Sprintf("; tbank: %d acked, %d lost, %d duplicated", tb.Acked, tb.Lost, tb.Duplicated)
	}
	if ov := r.Overpaid; ov.Orders > 0 {
		head += fmt.Sprintf("; overpaid: %d orders, %d refunds (%d recorded, %d of the excess only), %d lost, %d duplicated",
			ov.Orders, ov.Refunds, ov.Recorded, ov.NothingBack, ov.Lost, ov.Duplicated)
	}
	if sb := r.Subscriptions; sb.Events > 0 {
		head += fmt.Sprintf("; subscriptions: %d acked, %d lost, %d duplicated", sb.Acked, sb.Lost, sb.Duplicated)
		if sb.NamingOrder > 0 {
			head += fmt.Sprintf(" (%d renewal payments naming their order: %d renewed, %d duplicate_payment, %d already_applied)",
				sb.NamingOrder, sb.NamingRenewed, sb.NamingExtra, sb.NamingApplied)
		}
	}
	if sb := r.Subscriptions; sb.ChargeRefunds > 0 {
		head += fmt.Sprintf("; charge refunds: %d applied, %d lost, %d duplicated", sb.RefundsApplied, sb.ChargeLost, sb.ChargeDuplicated)
	}
	if lf := r.LateFirst; lf.Stories > 0 {
		head += fmt.Sprintf("; late first payments: %d claimed, %d lost, %d duplicated", lf.Claimed, lf.Lost, lf.Duplicated)
	}
	if r.OK() {
		return head
	}
	var b strings.Builder
	if r.Incomplete != "" {
		fmt.Fprintf(&b, "%s; NOT COMPLETED (%s), %d violation(s) so far", head, r.Incomplete, len(r.Violations))
	} else {
		fmt.Fprintf(&b, "%s; FAILED with %d violation(s)", head, len(r.Violations))
	}
	if len(r.Violations) > 0 {
		b.WriteString(":")
	}
	for _, v := range r.Violations {
		b.WriteString("\n  - ")
		b.WriteString(v)
	}
	return b.String()
}

// WriteTo writes the report's figures and checks (not the summary line).
func (r *Report) WriteTo(w io.Writer) (int64, error) {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	p("seed:            %d", r.Seed)
	if r.Pooler != "" {
		p("database:        through PgBouncer, pool_mode %s", r.Pooler)
	}
	p("workload:        %d orders (%d test-mode only), %d events (%d test-mode, %d extra payments, %d stale overdue)",
		r.Orders, r.TestOnlyOrders, r.Events, r.TestModeEvents, r.ExtraPayments, r.StaleEvents)
	p("external lines:  %d, each to %s or %s", r.ExternalLines, destIdempotent, destPlain)
	p("late matching:   %d orders created after their events (%d while the first was being processed: %d payments matched at once, %d later), %d subscription events sent before their subscription; %d events queued again by the service",
		r.LateOrders, r.RacingOrders, r.RacingAtOnce, r.RacingLate, r.Subscriptions.Early, r.LateMatched)
	lf := r.LateFirst
	p("late first pay:  %d subscriptions registered and paid before their order (%d orders fit, %d of them racing the payment; %d of another price, %d license only); %d orders claimed their payment (%d queued again); %d lost, %d duplicated",
		lf.Stories, lf.Fit, lf.Racing, lf.OtherPrice, lf.LicenseOnly, lf.Claimed, lf.ClaimedLate, lf.Lost, lf.Duplicated)
	p("tbank:           %d notifications acked of %d, %d orders, %d refunds (%d partial, %d full); %d orders refunded",
		r.TBank.Acked, r.TBank.Notifications, r.TBank.Orders, r.TBank.PartialRefunds+r.TBank.FullRefunds,
		r.TBank.PartialRefunds, r.TBank.FullRefunds, r.TBank.Refunded)
	ov := r.Overpaid
	p("overpaid:        %d orders paid more than their total, %d refunds (%d partial of the excess, %d of the rest of it and the price, %d of the price, %d full; %d planned before their CONFIRMED; %d orders refunded all they paid in parts); %d recorded (%d before their CONFIRMED), %d of the excess only, %d taking a share back",
		ov.Orders, ov.Refunds, ov.Excess, ov.Straddling, ov.Price, ov.Full, ov.Early, ov.InParts, ov.Recorded, ov.RecordedFirst, ov.NothingBack, ov.TookBack)
	sb := r.Subscriptions
	p("subscriptions:   %d events acked of %d, %d orders (%d to lapse); %d renewals (%d out of order, %d announced again, %d extra payments), %d overdue, %d cancelled, %d invoice.overdue; %d stale ignored; %d periods, %d ended",
		sb.Acked, sb.Events, sb.Orders, sb.Lapsing, sb.Renewals, sb.OutOfOrder, sb.Reannounced, sb.ExtraPayments,
		sb.Overdue, sb.Cancelled, sb.InvoiceOverdue, sb.Stale, sb.Periods, sb.Ended)
	p("naming order:    %d renewal payments named their subscription's order; decided by the subscription rules: %d renewed, %d duplicate_payment, %d already_applied; %d events of their invoices named it too",
		sb.NamingOrder, sb.NamingRenewed, sb.NamingExtra, sb.NamingApplied, sb.NamingInvoices)
	p("charges:         %d subscriptions registered, %d recurrent charges, %d of them refunded: %d refunds (%d partial; %d sent before their charge, %d with it); %d applied (%d queued again by their charge), %d periods refunded",
		sb.Registered, sb.Charges, sb.RefundedCharges, sb.ChargeRefunds, sb.PartialChargeRefunds, sb.RefundsFirst, sb.RefundsRacing,
		sb.RefundsApplied, sb.RefundsRequeued, sb.RefundedPeriods)
	p("deliveries:      %d planned (%d redeliveries, %d of them concurrent) over %v", r.Deliveries, r.Redeliveries, r.Concurrent, r.SendWindow.Round(time.Second))
	p("sender:          %d requests, %d retries; answers %s", r.Requests, r.Retries, formatAnswers(r.Answers))
	p("faults:          %d fulfillmentd SIGKILLs, %d PostgreSQL immediate stops, %d unexpected exits, %d processes started",
		r.Kills, r.PGRestarts, r.UnexpectedExits, r.Starts)
	p("interrupted:     %d inbox events claimed again after a fault interrupted their processing (at most %d claims)", r.Reclaimed, r.MaxAttempts)
	rec := make([]string, len(r.Recoveries))
	for i, d := range r.Recoveries {
		rec[i] = d.Round(time.Millisecond).String()
	}
	p("outage:          %d probes while the database was down, slowest answer %v; recovered after %s",
		r.OutageProbes, r.Max503Latency.Round(time.Millisecond), strings.Join(rec, ", "))
	p("outage (API):    GET /v1/orders/{id} answered %s, slowest %v", formatAnswers(r.OutageAPIAnswers), r.MaxAPIOutageLatency.Round(time.Millisecond))
	p("outbox attempts: %s", formatAnswers(r.OutboxAttempts))
	for _, d := range r.Destinations {
		kind := "idempotent"
		if !d.Idempotent {
			kind = "not idempotent"
		}
		p("destination:     %s (%s): %d messages, %d delivered once, %d doubled, %d uncertain (%d applied, %d not), %d failed",
			d.ID, kind, d.Messages, d.Delivered, d.Doubled, d.Uncertain, d.UncertainReached, d.Uncertain-d.UncertainReached, d.Failed)
		p("  its receiver:  %d requests, %d keys sent more than once; faults: %d×500, %d hung before the effect, %d hung after it, %d reset after it",
			d.Requests, d.Resent, d.Refused, d.HungBefore, d.HungAfter, d.Dropped)
	}
	p("timing:          send phase %v, settle %v, outbox drain %v, total %v", r.SendPhase.Round(100*time.Millisecond),
		r.Settle.Round(100*time.Millisecond), r.Drain.Round(100*time.Millisecond), r.Elapsed.Round(100*time.Millisecond))
	for _, c := range r.Checks {
		status := "ok"
		if c.Failed > 0 {
			status = fmt.Sprintf("FAILED %d", c.Failed)
		}
		p("check:           %-58s %6d checked, %s", c.Name, c.Checked, status)
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// String is the report followed by its summary.
func (r *Report) String() string {
	var b strings.Builder
	_, _ = r.WriteTo(&b)
	b.WriteString(r.Summary())
	return b.String()
}

func formatAnswers(m map[string]int64) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s×%d", k, m[k])
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}

// violations collects what went wrong, by category, keeping the first few
// examples of each so that a systematic failure does not flood the report.
type violations struct {
	mu       sync.Mutex
	order    []string
	examples map[string][]string
	counts   map[string]int
}

const examplesPerCategory = 8

func newViolations() *violations {
	return &violations{examples: map[string][]string{}, counts: map[string]int{}}
}

// add records one violation of category, described by the formatted text.
func (v *violations) add(category, format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.counts[category]; !ok {
		v.order = append(v.order, category)
	}
	v.counts[category]++
	if len(v.examples[category]) < examplesPerCategory {
		v.examples[category] = append(v.examples[category], category+": "+fmt.Sprintf(format, args...))
	}
}

// list is every example, each category followed by how many more it had.
func (v *violations) list() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []string
	for _, c := range v.order {
		out = append(out, v.examples[c]...)
		if more := v.counts[c] - len(v.examples[c]); more > 0 {
			out = append(out, fmt.Sprintf("%s: … and %d more", c, more))
		}
	}
	return out
}
