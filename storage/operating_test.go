package storage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// effects counts everything processing may write, overall: a replay that
// duplicated or undid anything changes one of them.
func effects(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var parts []string
	for _, q := range []struct{ name, sql string }{
		{"licenses", "SELECT count(*) FROM entitlements"},
		{"revoked", "SELECT count(*) FROM entitlements WHERE revoked_at IS NOT NULL"},
		{"ledger rows", "SELECT count(*) FROM ledger_entries"},
		{"ledger sum", "SELECT coalesce(sum(minor_units), 0)::int FROM ledger_entries"},
		{"outbox messages", "SELECT count(*) FROM outbox_messages"},
		{"order events", "SELECT count(*) FROM order_events"},
		{"items", "SELECT count(*) FROM reconciliation_items"},
		{"attempts", "SELECT count(*) FROM payment_attempts"},
		{"order lines", "SELECT count(*) FROM order_lines"},
		{"orders fulfilled", "SELECT count(*) FROM orders WHERE state = 'fulfilled'"},
		{"orders refunded", "SELECT count(*) FROM orders WHERE state = 'refunded'"},
		{"orders fulfilling", "SELECT count(*) FROM orders WHERE state = 'fulfilling'"},
	} {
		parts = append(parts, fmt.Sprintf("%s=%d", q.name, count(t, conn, q.sql)))
	}
	return strings.Join(parts, " ")
}

// Every event of a fulfilled order with external lines (paid, then paid
// again: an extra payment), of an order paid by a payment naming its
// invoice and no payment id, and of a refunded T-Bank order (paid, partially
// refunded twice, refunded, refunded again), and an unmatched payment,
// replayed 10 times each through the real processor: every effect is
// unchanged, and each replay is recorded. One body is purged first: its
// replay works the same.
func TestReplayNeverDuplicatesEffects(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	externalOrder(t, s, "m-ext")
	creditLicenseOrder(t, s, "m-1")
	if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", "m-inv")); err != nil {
		t.Fatal(err)
	}
	// A payment naming its invoice and no payment id of its own.
	invoiceOnly := confirmedEvent("evt_invoice_only", "m-inv")
	invoiceOnly.Payment.PaymentID = ""
	events := []struct {
		ev                fulfillment.ProviderEvent
		first, afterwards string // the decisions
	}{
		{confirmedEvent("evt_paid", "m-ext"), "fulfilled", "already_applied"},
		{confirmedEvent("evt_extra", "m-ext"), "duplicate_payment", "duplicate_payment"},
		{confirmedEvent("evt_nobody", "m-none"), "unmatched", "unmatched"},
		{invoiceOnly, "fulfilled", "already_applied"},
		{tbankEvent("confirmed", fulfillment.EventPaymentConfirmed, 20000), "fulfilled", ""},
		{tbankEvent("partial-5000", fulfillment.EventPartiallyRefunded, 5000), "partially_refunded", ""},
		{tbankEvent("partial-6000", fulfillment.EventPartiallyRefunded, 6000), "partially_refunded", ""},
		{tbankEvent("refunded", fulfillment.EventRefunded, 9000), "refunded", ""},
		{tbankEvent("refunded-again", fulfillment.EventRefunded, 9000), "already_applied", "already_applied"},
	}
	ids := map[string]int64{}
	for _, e := range events {
		r, err := s.InboxInsert(ctx, e.ev, []byte(`{"id":"`+e.ev.EventID+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		ids[e.ev.EventID] = r.ID
		if got := processAll(t, s, 1); got != e.first {
			t.Fatalf("%s: decision %s, want %s", e.ev.EventID, got, e.first)
		}
	}
	before := effects(t, conn)
	t.Logf("before the replays: %s", before)
	// Purged as the housekeeper purges bodies (migration 014).
	if _, err := conn.Exec(ctx, "UPDATE inbox_events SET raw_body = NULL, raw_body_purged_at = now() WHERE id = $1", ids["evt_paid"]); err != nil {
		t.Fatal(err)
	}

	for _, e := range events {
		id := ids[e.ev.EventID]
		for i := range 10 {
			got, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: id, Actor: "admin", ActorDetail: "test"})
			if err != nil {
				t.Fatalf("replay %d of %s: %v", i+1, e.ev.EventID, err)
			}
			if got.State != fulfillment.InboxPending || got.Attempts != 0 || got.ReplayCount != i+1 {
				t.Fatalf("replay %d of %s: state %s, attempts %d, replays %d", i+1, e.ev.EventID, got.State, got.Attempts, got.ReplayCount)
			}
			// Pending: a second replay is refused and changes nothing.
			if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: id, Actor: "admin"}); !errors.Is(err, fulfillment.ErrFailedPrecondition) ||
				!strings.Contains(err.Error(), "pending already") {
				t.Fatalf("replay of a pending event: %v", err)
			}
			decision := processAll(t, s, 1)
			if e.afterwards != "" && decision != e.afterwards {
				t.Errorf("replay %d of %s decided %s, want %s", i+1, e.ev.EventID, decision, e.afterwards)
			}
			if now := effects(t, conn); now != before {
				t.Fatalf("replay %d of %s (decided %s) changed effects:\n  before %s\n  after  %s", i+1, e.ev.EventID, decision, before, now)
			}
		}
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_replays WHERE replayed_by = 'admin' AND replayed_by_detail = 'test'"); n != 10*len(events) {
		t.Errorf("%d replays recorded, want %d", n, 10*len(events))
	}
	got, err := s.EventGet(ctx, ids["evt_paid"], true)
	if err != nil {
		t.Fatal(err)
	}
	if !got.RawBodyPurged || got.RawBody != nil || got.ReplayCount != 10 || len(got.Replays) != 10 ||
		got.Replays[0].PreviousDecision != fulfillment.DecisionFulfilled || got.Replays[9].PreviousDecision != fulfillment.DecisionFulfilled ||
		got.State != fulfillment.InboxProcessed || got.Decision != fulfillment.DecisionFulfilled || got.OrderID == "" {
		t.Errorf("the purged event after its replays: %+v", got)
	}
	if got, err := s.EventGet(ctx, ids["evt_extra"], true); err != nil || string(got.RawBody) != `{"id":"evt_extra"}` || got.RawBodyPurged {
		t.Errorf("a stored body: %q, purged %v, %v", got.RawBody, got.RawBodyPurged, err)
	}
	if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: 999999, Actor: "admin"}); !errors.Is(err, fulfillment.ErrNotFound) {
		t.Errorf("replay of an unknown event: %v", err)
	}
}

// An item is resolved once: a second resolution, even racing the first,
// fails naming who resolved it and when, and the first is kept.
func TestReconResolveOnce(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	ctx := context.Background()
	if _, err := s.InboxInsert(ctx, confirmedEvent("evt_nobody", "m-none"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 1); got != "unmatched" {
		t.Fatalf("decision %s", got)
	}
	items, err := s.ReconList(ctx, fulfillment.ReconListParams{Limit: 10})
	if err != nil || len(items) != 1 || items[0].Kind != fulfillment.ReconUnmatchedPayment || items[0].InboxID == 0 {
		t.Fatalf("items %+v, %v", items, err)
	}
	id := items[0].ID

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		won      []string
		refusals []error
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			by := fmt.Sprintf("person-%d", i)
			_, err := s.ReconResolve(ctx, fulfillment.ReconResolve{ID: id, Resolution: fulfillment.ResolutionRefunded,
				Note: "refunded at the provider", Actor: by, ActorDetail: "ticket 7"})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won = append(won, by)
			} else {
				refusals = append(refusals, err)
			}
		}()
	}
	wg.Wait()
	if len(won) != 1 || len(refusals) != 7 {
		t.Fatalf("%d resolutions succeeded (%v), %d refused", len(won), won, len(refusals))
	}
	for _, err := range refusals {
		if !errors.Is(err, fulfillment.ErrFailedPrecondition) ||
			!strings.Contains(err.Error(), fmt.Sprintf("reconciliation item %d was resolved as refunded at ", id)) ||
			!strings.Contains(err.Error(), " by "+won[0]+"; its resolution is kept") {
			t.Errorf("refusal: %v", err)
		}
	}
	_, err = s.ReconResolve(ctx, fulfillment.ReconResolve{ID: id, Resolution: fulfillment.ResolutionNoAction, Note: "again", Actor: "late"})
	if !errors.Is(err, fulfillment.ErrFailedPrecondition) {
		t.Errorf("a later resolution: %v", err)
	}
	it, err := s.ReconGet(ctx, id)
	if err != nil || it.State != fulfillment.ReconResolved || it.Resolution != fulfillment.ResolutionRefunded ||
		it.ResolvedBy != won[0] || it.ResolvedByDetail != "ticket 7" || it.ResolutionNote != "refunded at the provider" ||
		it.ResolvedAt == nil || it.EventID != "evt_nobody" {
		t.Errorf("item after the resolutions: %+v, %v", it, err)
	}
	if _, err := s.ReconResolve(ctx, fulfillment.ReconResolve{ID: 999999, Resolution: fulfillment.ResolutionNoAction, Note: "x", Actor: "a"}); !errors.Is(err, fulfillment.ErrNotFound) {
		t.Errorf("unknown item: %v", err)
	}
}

// The summary counts per org and environment, and only the orgs asked for.
func TestReconSummary(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	for _, org := range []string{"org_a", "org_b"} {
		if _, _, err := s.OrderCreate(ctx, spec(t, org, "m-1")); err != nil {
			t.Fatal(err)
		}
	}
	evs := []fulfillment.ProviderEvent{confirmedEvent("a1", "none-1"), confirmedEvent("a2", "none-2"), confirmedEvent("a3", "m-1")}
	b := confirmedEvent("b1", "none-3")
	b.OrgID = "org_b"
	evs = append(evs, b)
	for _, ev := range evs {
		if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, 4)
	// One pending event of org_a, one failed of org_b, an order of org_b
	// paid but not fulfilled.
	if _, err := s.InboxInsert(ctx, confirmedEvent("a4", "none-4"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "UPDATE inbox_events SET state = 'failed' WHERE event_id = 'b1'"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE orders SET state = 'paid', paid_at = now(), paid_payment_id = 'p' WHERE org_id = 'org_b'`); err != nil {
		t.Fatal(err)
	}
	rows, err := s.ReconSummary(ctx, fulfillment.ReconFilter{})
	if err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(summaryText(rows))
	want := "[org_a/live open=2 unmatched_payment=2 oldest=true pending=1 failed=0 paid=0 outbox=0/0 " +
		"org_b/live open=1 unmatched_payment=1 oldest=true pending=0 failed=1 paid=1 outbox=0/0]"
	if got != want {
		t.Errorf("summary\n got %s\nwant %s", got, want)
	}
	rows, err = s.ReconSummary(ctx, fulfillment.ReconFilter{VisibleOrgs: []string{"org_b"}})
	if err != nil || len(rows) != 1 || rows[0].OrgID != "org_b" {
		t.Errorf("org_b's summary: %v, %v", summaryText(rows), err)
	}
	rows, err = s.ReconSummary(ctx, fulfillment.ReconFilter{OrgID: "org_a", Environment: fulfillment.EnvTest})
	if err != nil || len(rows) != 0 {
		t.Errorf("org_a's test summary: %v, %v", summaryText(rows), err)
	}
}

func summaryText(rows []fulfillment.ReconSummaryRow) []string {
	var out []string
	for _, r := range rows {
		s := fmt.Sprintf("%s/%s open=%d", r.OrgID, r.Environment, r.OpenItems())
		for _, k := range fulfillment.ReconKinds {
			if n := r.OpenByKind[k]; n > 0 {
				s += fmt.Sprintf(" %s=%d", k, n)
			}
		}
		s += fmt.Sprintf(" oldest=%v pending=%d failed=%d paid=%d outbox=%d/%d", r.OldestOpen != nil,
			r.EventsPending, r.EventsFailed, r.PaidNotFulfilled, r.OutboxFailed, r.OutboxUncertain)
		out = append(out, s)
	}
	return out
}
