package storage_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// tbankEvent is a T-Bank-like event of kind about payment pay-1 of the
// order with merchant order id m-1, for amount kopecks.
func tbankEvent(id string, kind fulfillment.EventKind, kopecks int64) fulfillment.ProviderEvent {
	return fulfillment.ProviderEvent{
		Provider: fulfillment.ProviderTBank, EndpointID: "tbank-live", OrgID: "org_a", Environment: fulfillment.EnvLive,
		EventID: id, Type: string(kind), Kind: kind,
		Payment: fulfillment.PaymentInfo{AttemptRef: "pay-1", PaymentID: "pay-1", MerchantOrderID: "m-1",
			Amount: fulfillment.MinorAmount(kopecks, "RUB")},
	}
}

// pollOfNoAmount is a status poll's answer that payment pay-1 is partly
// refunded: GetState does not say by how much.
func pollOfNoAmount() fulfillment.ProviderEvent {
	ev := tbankEvent("poll:T:pay-1:PARTIAL_REFUNDED:20000", fulfillment.EventPartiallyRefunded, 0)
	ev.Payment.Amount = fulfillment.Amount{}
	return ev
}

// A payment larger than the order's total, confirmed in a batch of its
// own: the partial refunds decided in later batches return its excess
// first, taking nothing back for it, then their share of the price; what is
// left to refund is what the payment paid (orders.paid_amount).
func TestPartialRefundsOfAnOverpayment(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	order := creditLicenseOrder(t, s, "m-1")
	steps := []struct {
		ev       fulfillment.ProviderEvent
		decision string
		sum      int
	}{
		{tbankEvent("confirmed", fulfillment.EventPaymentConfirmed, 24000), "fulfilled", 10000},
		// The 4000 paid beyond the total of 20000.
		{tbankEvent("partial-4000", fulfillment.EventPartiallyRefunded, 4000), "partially_refunded", 10000},
		// 6000 of the price: 3000 of the 10000 credit.
		{tbankEvent("partial-6000", fulfillment.EventPartiallyRefunded, 6000), "partially_refunded", 7000},
		// The rest of the payment, more than is left of the total.
		{tbankEvent("partial-14000", fulfillment.EventPartiallyRefunded, 14000), "partially_refunded", 0},
		{tbankEvent("partial-1", fulfillment.EventPartiallyRefunded, 1), "refund_not_applicable", 0},
	}
	for _, st := range steps {
		if _, err := s.InboxInsert(ctx, st.ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if got := processAll(t, s, 1); got != st.decision {
			t.Fatalf("%s: decision %s, want %s", st.ev.EventID, got, st.decision)
		}
		if sum := count(t, conn, "SELECT coalesce(sum(minor_units), 0)::int FROM ledger_entries WHERE order_id = $1", order.ID); sum != st.sum {
			t.Errorf("after %s: the ledger sums to %d, want %d", st.ev.EventID, sum, st.sum)
		}
	}
}

// Partial refunds take back their share of a balance credit, once each; the
// full refund what is left, and revokes the licenses (still listed); a
// refund announced again changes nothing. The ledger of the order ends at
// zero.
func TestRefundsReverseOnce(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	order := creditLicenseOrder(t, s, "m-1")
	ledger := func() (rows, sum int) {
		t.Helper()
		return count(t, conn, "SELECT count(*) FROM ledger_entries WHERE order_id = $1", order.ID),
			count(t, conn, "SELECT coalesce(sum(minor_units), 0)::int FROM ledger_entries WHERE order_id = $1", order.ID)
	}
	steps := []struct {
		ev             fulfillment.ProviderEvent
		decision       string
		rows, sum      int
		revoked, items int
	}{
		{tbankEvent("confirmed", fulfillment.EventPaymentConfirmed, 20000), "fulfilled", 1, 10000, 0, 0},
		// 5000 of 20000: a quarter of the 10000 credit.
		{tbankEvent("partial-5000", fulfillment.EventPartiallyRefunded, 5000), "partially_refunded", 2, 7500, 0, 1},
		{tbankEvent("partial-6000", fulfillment.EventPartiallyRefunded, 6000), "partially_refunded", 3, 4500, 0, 2},
		{tbankEvent("refunded", fulfillment.EventRefunded, 9000), "refunded", 4, 0, 2, 3},
		{tbankEvent("refunded-again", fulfillment.EventRefunded, 9000), "already_applied", 4, 0, 2, 3},
		// After the full refund, nothing is left to refund: its own
		// decision and item (TestRefundNotApplicableOnce), no ledger row.
		{tbankEvent("partial-late", fulfillment.EventPartiallyRefunded, 1000), "refund_not_applicable", 4, 0, 2, 3},
	}
	for _, st := range steps {
		if _, err := s.InboxInsert(ctx, st.ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if got := processAll(t, s, 1); got != st.decision {
			t.Fatalf("%s: decision %s, want %s", st.ev.EventID, got, st.decision)
		}
		if rows, sum := ledger(); rows != st.rows || sum != st.sum {
			t.Errorf("after %s: %d ledger rows summing to %d, want %d summing to %d", st.ev.EventID, rows, sum, st.rows, st.sum)
		}
		if n := count(t, conn, "SELECT count(*) FROM entitlements WHERE order_id = $1 AND revoked_at IS NOT NULL AND revoked_reason LIKE 'refunded: tbank event %'", order.ID); n != st.revoked {
			t.Errorf("after %s: %d licenses revoked, want %d", st.ev.EventID, n, st.revoked)
		}
		if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE order_id = $1 AND kind = 'refund_after_fulfillment'", order.ID); n != st.items {
			t.Errorf("after %s: %d refund_after_fulfillment items, want %d", st.ev.EventID, n, st.items)
		}
	}
	if n := count(t, conn, "SELECT count(*) FROM entitlements WHERE order_id = $1", order.ID); n != 2 {
		t.Errorf("%d licenses listed, want both, revoked", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM order_events WHERE order_id = $1 AND topic = 'order.refunded'", order.ID); n != 1 {
		t.Errorf("%d order.refunded events, want 1", n)
	}
}

// A refund that cannot apply is decided refund_not_applicable and opens
// exactly one refund_not_applicable item per refund — however often it is
// announced (a notification, a status poll's answer) or replayed — and
// moves no money: no ledger row, no recorded refund. Two ways: a partial
// refund after the full refund, and one larger than what is left of the
// order's total after the partial refunds recorded.
func TestRefundNotApplicableOnce(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// before are the events that leave the order as it is when the
		// refund comes, with the ledger rows and sum they leave.
		before    []fulfillment.ProviderEvent
		rows, sum int
		// refunds recorded before it.
		refunds int
		refund  fulfillment.ProviderEvent
	}{
		{"a partial refund after the full refund",
			[]fulfillment.ProviderEvent{tbankEvent("T:pay-1:CONFIRMED", fulfillment.EventPaymentConfirmed, 20000),
				tbankEvent("T:pay-1:REFUNDED", fulfillment.EventRefunded, 20000)},
			2, 0, 0, tbankEvent("T:pay-1:PARTIAL_REFUNDED:5000", fulfillment.EventPartiallyRefunded, 5000)},
		{"a partial refund larger than what is left",
			[]fulfillment.ProviderEvent{tbankEvent("T:pay-1:CONFIRMED", fulfillment.EventPaymentConfirmed, 20000),
				tbankEvent("T:pay-1:PARTIAL_REFUNDED:15000", fulfillment.EventPartiallyRefunded, 15000)},
			// 15000 of 20000: three quarters of the 10000 credit.
			2, 2500, 1, tbankEvent("T:pay-1:PARTIAL_REFUNDED:6000", fulfillment.EventPartiallyRefunded, 6000)},
		{"a status poll's partial refund, of no amount",
			[]fulfillment.ProviderEvent{tbankEvent("T:pay-1:CONFIRMED", fulfillment.EventPaymentConfirmed, 20000)},
			1, 10000, 0, pollOfNoAmount()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, conn := newOutboxStore(t)
			ctx := context.Background()
			order := creditLicenseOrder(t, s, "m-1")
			for _, ev := range tc.before {
				deliver(t, s, ev)
			}
			effects := func(when string) {
				t.Helper()
				rows := count(t, conn, "SELECT count(*) FROM ledger_entries WHERE order_id = $1", order.ID)
				sum := count(t, conn, "SELECT coalesce(sum(minor_units), 0)::int FROM ledger_entries WHERE order_id = $1", order.ID)
				if rows != tc.rows || sum != tc.sum {
					t.Errorf("%s: %d ledger rows summing to %d, want %d summing to %d (the refund moves nothing)", when, rows, sum, tc.rows, tc.sum)
				}
				if n := count(t, conn, "SELECT count(*) FROM payment_refunds WHERE order_id = $1", order.ID); n != tc.refunds {
					t.Errorf("%s: %d refunds recorded, want %d", when, n, tc.refunds)
				}
				if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE order_id = $1 AND kind = 'refund_not_applicable'", order.ID); n != 1 {
					t.Errorf("%s: %d refund_not_applicable items, want 1", when, n)
				}
				if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE order_id = $1 AND decision = 'refund_not_applicable'", order.ID); n < 1 {
					t.Errorf("%s: %d events decided refund_not_applicable", when, n)
				}
			}
			if got := deliver(t, s, tc.refund); got != "refund_not_applicable" {
				t.Fatalf("the refund: %s, want refund_not_applicable", got)
			}
			effects("the refund")
			polled := tc.refund
			polled.EventID = "poll:" + polled.EventID // the same refund, found by a status poll
			if got := deliver(t, s, polled); got != "refund_not_applicable" {
				t.Errorf("the refund announced again: %s, want refund_not_applicable", got)
			}
			effects("the refund announced again")
			var id int64
			if err := conn.QueryRow(ctx, "SELECT id FROM inbox_events WHERE event_id = $1", tc.refund.EventID).Scan(&id); err != nil {
				t.Fatal(err)
			}
			if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: id, Actor: "admin"}); err != nil {
				t.Fatal(err)
			}
			processAll(t, s, 1)
			effects("the refund replayed")
		})
	}
}

// order.refunded goes to the destinations of the order's external lines,
// subscribed or not, once each.
func TestRefundTellsLineDestinations(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t) // crm subscribes to every order event
	ctx := context.Background()
	orderID := paidExternalOrder(t, s, "m-1", "e1")
	refund := confirmedEvent("e2", "m-1")
	refund.Kind, refund.Type = fulfillment.EventRefunded, "payment.refunded"
	refund.Payment = confirmedEvent("e1", "m-1").Payment // the payment that paid
	if _, err := s.InboxInsert(ctx, refund, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 1); got != "refunded" {
		t.Fatalf("decision %s", got)
	}
	for _, dest := range []string{"licenses", "shipping", "crm"} {
		if n := count(t, conn, "SELECT count(*) FROM outbox_messages WHERE order_id = $1 AND topic = 'order.refunded' AND destination_id = $2", orderID, dest); n != 1 {
			t.Errorf("%d order.refunded messages to %s, want 1", n, dest)
		}
	}
}

// A partial refund processed before the payment's confirmation, then
// replayed, is still a recorded refund: the confirmation that comes later
// takes its share back from the credit, and the refund announced again
// adds nothing. (Re-deciding a replayed refund finds it already applied;
// that must not erase what its decision records.)
func TestReplayedPartialRefundStaysRecorded(t *testing.T) {
	t.Parallel()
	s, conn, order, deliver := creditOrder(t)
	ctx := context.Background()
	refund, got := deliver(tbankEvent("partial-5000", fulfillment.EventPartiallyRefunded, 5000))
	if got != "partially_refunded" {
		t.Fatalf("partial refund before the confirmation: %s", got)
	}
	for range 3 {
		if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: refund, Actor: "admin"}); err != nil {
			t.Fatal(err)
		}
		processAll(t, s, 1)
	}
	if _, got := deliver(tbankEvent("confirmed", fulfillment.EventPaymentConfirmed, 20000)); got != "fulfilled" {
		t.Fatalf("confirmation: %s", got)
	}
	if sum := count(t, conn, "SELECT coalesce(sum(minor_units), 0)::int FROM ledger_entries WHERE order_id = $1", order.ID); sum != 15000 {
		t.Errorf("after the confirmation the credit is %d, want 15000: 20000 less the refund's quarter", sum)
	}
	if _, got := deliver(tbankEvent("partial-5000-again", fulfillment.EventPartiallyRefunded, 5000)); got != "already_applied" {
		t.Errorf("the refund announced again: %s, want already_applied", got)
	}
	// The credit of 20000, less the refund's quarter: 15000, in two rows.
	sum := count(t, conn, "SELECT coalesce(sum(minor_units), 0)::int FROM ledger_entries WHERE order_id = $1", order.ID)
	rows := count(t, conn, "SELECT count(*) FROM ledger_entries WHERE order_id = $1", order.ID)
	if rows != 2 || sum != 15000 {
		t.Errorf("%d ledger rows summing to %d, want the credit and the refund's share: 2 rows, 15000", rows, sum)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE id = $1 AND decision = 'partially_refunded'", refund); n != 1 {
		t.Errorf("the replayed refund's decision no longer records it (%d rows)", n)
	}
}

// A recorded refund is a row of its own, not a decision's label: with
// every decision of the order's events rewritten (by hand, by a replay, by
// a future migration), a confirmation processed later still takes the
// refund's share back, and the refund announced again adds nothing.
func TestRefundIsAFactNotALabel(t *testing.T) {
	t.Parallel()
	_, conn, order, deliverID := creditOrder(t)
	ctx := context.Background()
	deliver := func(ev fulfillment.ProviderEvent) string {
		t.Helper()
		_, decision := deliverID(ev)
		return decision
	}
	if got := deliver(tbankEvent("partial-5000", fulfillment.EventPartiallyRefunded, 5000)); got != "partially_refunded" {
		t.Fatalf("partial refund before the confirmation: %s", got)
	}
	if _, err := conn.Exec(ctx, "UPDATE inbox_events SET decision = 'ignored_type', decision_reason = 'rewritten' WHERE decision IS NOT NULL"); err != nil {
		t.Fatal(err)
	}
	if got := deliver(tbankEvent("confirmed", fulfillment.EventPaymentConfirmed, 20000)); got != "fulfilled" {
		t.Fatalf("confirmation: %s", got)
	}
	if got := deliver(tbankEvent("partial-5000-again", fulfillment.EventPartiallyRefunded, 5000)); got != "already_applied" {
		t.Errorf("the refund announced again: %s, want already_applied", got)
	}
	sum := count(t, conn, "SELECT coalesce(sum(minor_units), 0)::int FROM ledger_entries WHERE order_id = $1", order.ID)
	rows := count(t, conn, "SELECT count(*) FROM ledger_entries WHERE order_id = $1", order.ID)
	if rows != 2 || sum != 15000 {
		t.Errorf("%d ledger rows summing to %d, want the credit and the refund's share: 2 rows, 15000", rows, sum)
	}
	if n := count(t, conn, "SELECT count(*) FROM payment_refunds WHERE order_id = $1", order.ID); n != 1 {
		t.Errorf("%d recorded refunds, want 1", n)
	}
}

// Migration 021 moves the refunds the decisions recorded into rows of
// their own: from a database whose refunds were only labels (at version
// 20), migrating up records each refund once (not the one announced
// again), and a confirmation processed afterwards takes their shares back.
// Migrating down and up again loses nothing either.
func TestMigration021RefundsBecomeRows(t *testing.T) {
	t.Parallel()
	_, conn, order, deliverID := creditOrder(t)
	ctx := context.Background()
	deliver := func(ev fulfillment.ProviderEvent) string {
		t.Helper()
		_, decision := deliverID(ev)
		return decision
	}
	for _, ev := range []struct {
		ev   fulfillment.ProviderEvent
		want string
	}{
		{tbankEvent("partial-5000", fulfillment.EventPartiallyRefunded, 5000), "partially_refunded"},
		{tbankEvent("partial-5000-again", fulfillment.EventPartiallyRefunded, 5000), "already_applied"},
		{tbankEvent("partial-2000", fulfillment.EventPartiallyRefunded, 2000), "partially_refunded"},
	} {
		if got := deliver(ev.ev); got != ev.want {
			t.Fatalf("%s: %s, want %s", ev.ev.EventID, got, ev.want)
		}
	}
	m, err := migrate.NewMigrator(ctx, conn, "schema_version")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(storage.Migrations()); err != nil {
		t.Fatal(err)
	}
	// Down to the schema that had only the labels, then up twice over, and
	// on to the latest, which this version's store writes.
	for _, v := range []int32{20, 21, 20, 21} {
		if err := m.MigrateTo(ctx, v); err != nil {
			t.Fatalf("migrating to %d: %v", v, err)
		}
	}
	if err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count(*) FROM payment_refunds WHERE order_id = $1", order.ID); n != 2 {
		t.Fatalf("%d refunds recorded after migrating up, want the two refunds once each", n)
	}
	if got := deliver(tbankEvent("confirmed", fulfillment.EventPaymentConfirmed, 20000)); got != "fulfilled" {
		t.Fatalf("confirmation: %s", got)
	}
	// The credit of 20000, less 5000/20000 and 2000/20000 of it.
	sum := count(t, conn, "SELECT coalesce(sum(minor_units), 0)::int FROM ledger_entries WHERE order_id = $1", order.ID)
	rows := count(t, conn, "SELECT count(*) FROM ledger_entries WHERE order_id = $1", order.ID)
	if rows != 3 || sum != 13000 {
		t.Errorf("%d ledger rows summing to %d, want the credit and the two refunds' shares: 3 rows, 13000", rows, sum)
	}
	if got := deliver(tbankEvent("partial-2000-again", fulfillment.EventPartiallyRefunded, 2000)); got != "already_applied" {
		t.Errorf("a migrated refund announced again: %s, want already_applied", got)
	}
}

// creditOrder is an order of org_a crediting 20000 RUB kopecks to acct-1,
// and a function that stores an event and processes it, returning its
// stored id and decision.
func creditOrder(t *testing.T) (*storage.Store, *pgx.Conn, fulfillment.Order, func(fulfillment.ProviderEvent) (int64, string)) {
	t.Helper()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	spec, err := fulfillment.OrderDraft{
		OrgID: "org_a", Environment: "live", MerchantOrderID: "m-1",
		Lines: []fulfillment.LineDraft{
			{SKU: "credits", Kind: "balance_credit", Quantity: 1, Currency: "RUB", MinorUnits: 20000, AccountRef: "acct-1"},
		},
	}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	order, _, err := s.OrderCreate(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	return s, conn, order, func(ev fulfillment.ProviderEvent) (int64, string) {
		t.Helper()
		r, err := s.InboxInsert(ctx, ev, []byte("{}"))
		if err != nil {
			t.Fatal(err)
		}
		return r.ID, processAll(t, s, 1)
	}
}

// migrator is a migrator of conn's database loaded with the embedded
// migrations, and the version of the migration whose file name ends in
// suffix (so that a migration renumbered keeps its test).
func migrator(t *testing.T, conn *pgx.Conn, suffix string) (m *migrate.Migrator, version int32) {
	t.Helper()
	m, err := migrate.NewMigrator(context.Background(), conn, "schema_version")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(storage.Migrations()); err != nil {
		t.Fatal(err)
	}
	for _, mig := range m.Migrations {
		if strings.HasSuffix(mig.Name, suffix) {
			return m, mig.Sequence
		}
	}
	t.Fatalf("no migration named *%s", suffix)
	return nil, 0
}

// migratedBefore brings the database conn is on to the version before
// the migration whose file name ends with suffix, and returns the
// migrator and that migration's version.
func migratedBefore(t *testing.T, conn *pgx.Conn, suffix string) (m *migrate.Migrator, version int32) {
	t.Helper()
	m, version = migrator(t, conn, suffix)
	if err := m.MigrateTo(context.Background(), version-1); err != nil {
		t.Fatal(err)
	}
	return m, version
}

// kindRollback checks that the migration v, which adds the item kind
// kind, rolls back only while no item of that kind exists (items are
// evidence, the previous schema has no kind for them), and that the
// version before it refuses such an item and v takes it again. The
// database holds one item of kind.
func kindRollback(t *testing.T, conn *pgx.Conn, m *migrate.Migrator, v int32, kind string) {
	t.Helper()
	ctx := context.Background()
	if err := m.MigrateTo(ctx, v-1); err == nil || !strings.Contains(err.Error(), kind+" reconciliation items exist") {
		t.Fatalf("migrating down with a %s item: %v, want it refused", kind, err)
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = $1", kind); n != 1 {
		t.Fatalf("%d %s items after the refused rollback, want 1", n, kind)
	}
	if _, err := conn.Exec(ctx, "DELETE FROM reconciliation_items"); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, v-1); err != nil {
		t.Fatalf("migrating down without items: %v", err)
	}
	insert := `INSERT INTO reconciliation_items (kind, org_id, environment, detail, dedupe_key) VALUES ($1, 'org_a', 'live', 'd', 'k')`
	if _, err := conn.Exec(ctx, insert, kind); err == nil {
		t.Errorf("version %d took a %s item", v-1, kind)
	}
	if err := m.MigrateTo(ctx, v); err != nil {
		t.Fatalf("migrating up again: %v", err)
	}
	if _, err := conn.Exec(ctx, insert, kind); err != nil {
		t.Errorf("version %d refused a %s item: %v", v, kind, err)
	}
}

// Migration 027 (refund_not_applicable items) rolls back only while no
// such item exists.
func TestMigration027RefundNotApplicable(t *testing.T) {
	t.Parallel()
	_, conn, _, deliver := creditOrder(t)
	deliver(tbankEvent("confirmed", fulfillment.EventPaymentConfirmed, 20000))
	if _, got := deliver(tbankEvent("partial-too-much", fulfillment.EventPartiallyRefunded, 20001)); got != "refund_not_applicable" {
		t.Fatalf("a refund larger than the payment: %s", got)
	}
	m, v := migrator(t, conn, "_refund_not_applicable.sql")
	kindRollback(t, conn, m, v, "refund_not_applicable")
}

// The bank returned payment pay-2 in full before its confirmation came;
// pay-1 paid the order meanwhile. pay-2's confirmation, arriving after,
// grants nothing and opens no extra_payment item (nothing is owed: an
// item asking for its refund would have it refunded twice), and the same
// when every event is replayed after; a third payment is an extra payment.
func TestPaymentRefundedBeforeItsConfirmationAfterAnotherPaid(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	order := creditLicenseOrder(t, s, "m-1")
	effects := func() string { t.Helper(); return orderEffects(t, conn, order.ID) }
	steps := []struct {
		ev       fulfillment.ProviderEvent
		decision string
	}{
		{namedEvent("refunded-2", fulfillment.EventRefunded, "", "pay-2"), "refunded_before_payment"},
		{namedEvent("confirmed-1", fulfillment.EventPaymentConfirmed, "", "pay-1"), "fulfilled"},
		{namedEvent("confirmed-2", fulfillment.EventPaymentConfirmed, "", "pay-2"), "stale_ignored"},
	}
	for _, st := range steps {
		if _, err := s.InboxInsert(ctx, st.ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if got := processAll(t, s, 1); got != st.decision {
			t.Fatalf("%s: decision %s, want %s", st.ev.EventID, got, st.decision)
		}
	}
	const want = "entitlements 2, ledger 1, extra_payment items 0, items 0"
	if got := effects(); got != want {
		t.Fatalf("after the three events: %s; want %s", got, want)
	}
	for _, st := range steps {
		replayStored(t, s, conn, st.ev.EventID)
	}
	if got := effects(); got != want {
		t.Fatalf("after replaying them: %s; want %s", got, want)
	}
	if _, err := s.InboxInsert(ctx, namedEvent("confirmed-3", fulfillment.EventPaymentConfirmed, "", "pay-3"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 1); got != "duplicate_payment" {
		t.Fatalf("a third payment: %s, want duplicate_payment", got)
	}
	if got, want := effects(), "entitlements 2, ledger 1, extra_payment items 1, items 1"; got != want {
		t.Errorf("after a third payment: %s; want %s", got, want)
	}
}

// A provider names a payment under its invoice in one event and by its own
// id alone in another. Two payments of invoice inv-1 are refunded in full
// before any confirmation (in one batch); their confirmations then name
// the payments alone, another attempt each: nothing is granted, no item
// opens, and the same when every event is replayed. A third payment pays.
func TestPaymentRefundedUnderItsInvoiceBeforeItsConfirmation(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	order := creditLicenseOrder(t, s, "m-1")
	effects := func() string { t.Helper(); return orderEffects(t, conn, order.ID) }
	batches := []struct {
		events    []fulfillment.ProviderEvent
		decisions string
	}{
		{[]fulfillment.ProviderEvent{
			namedEvent("refunded-1", fulfillment.EventRefunded, "inv-1", "pay-1"),
			namedEvent("refunded-2", fulfillment.EventRefunded, "inv-1", "pay-2"),
		}, "refunded_before_payment,refunded_before_payment"},
		{[]fulfillment.ProviderEvent{
			namedEvent("confirmed-1", fulfillment.EventPaymentConfirmed, "", "pay-1"),
			namedEvent("confirmed-2", fulfillment.EventPaymentConfirmed, "", "pay-2"),
		}, "stale_ignored,stale_ignored"},
	}
	for _, b := range batches {
		if got := deliver(t, s, b.events...); got != b.decisions {
			t.Fatalf("decisions %s, want %s", got, b.decisions)
		}
	}
	refundedIDs := func() string {
		t.Helper()
		var ids []string
		if err := conn.QueryRow(ctx, `SELECT refunded_payment_ids FROM payment_attempts WHERE order_id = $1 AND attempt_ref = 'inv-1'`,
			order.ID).Scan(&ids); err != nil {
			t.Fatal(err)
		}
		return strings.Join(ids, ",")
	}
	if ids := refundedIDs(); ids != "pay-1,pay-2" {
		t.Errorf("inv-1 records refunded payments %q, want pay-1,pay-2", ids)
	}
	const want = "entitlements 0, ledger 0, extra_payment items 0, items 0"
	if got := effects(); got != want {
		t.Fatalf("after the refunds and the confirmations: %s; want %s", got, want)
	}
	for _, b := range batches {
		for _, ev := range b.events {
			replayStored(t, s, conn, ev.EventID)
		}
	}
	if got := effects(); got != want {
		t.Fatalf("after replaying them: %s; want %s", got, want)
	}
	if ids := refundedIDs(); ids != "pay-1,pay-2" {
		t.Errorf("after the replays inv-1 records refunded payments %q, want pay-1,pay-2 once each", ids)
	}
	if got := deliver(t, s, namedEvent("confirmed-3", fulfillment.EventPaymentConfirmed, "", "pay-3")); got != "fulfilled" {
		t.Fatalf("a third payment: %s, want fulfilled", got)
	}
	if got, want := effects(), "entitlements 2, ledger 1, extra_payment items 0, items 0"; got != want {
		t.Errorf("after a third payment: %s; want %s", got, want)
	}
}

// Migration 061 adds the refunded payments of an attempt (and the payment
// a partial refund names). An attempt refunded before it records none: its
// refund decided again records its payment, and the payment's confirmation
// under its own id then grants nothing. Migrating down drops what was
// recorded.
func TestMigration061AttemptRefundedPayments(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	m, v := migratedBefore(t, conn, "_refunds_by_payment.sql")
	order := creditLicenseOrder(t, s, "m-1")
	if _, err := conn.Exec(ctx, `INSERT INTO payment_attempts (order_id, provider, attempt_ref, state) VALUES ($1, 'tbank', 'inv-1', 'refunded')`,
		order.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, v); err != nil {
		t.Fatal(err)
	}
	refund := tbankEvent("refunded-1", fulfillment.EventRefunded, 20000)
	refund.Payment.InvoiceID, refund.Payment.AttemptRef = "inv-1", "inv-1"
	confirm := tbankEvent("confirmed-1", fulfillment.EventPaymentConfirmed, 20000)
	for _, st := range []struct {
		ev   fulfillment.ProviderEvent
		want string
	}{{refund, "refunded_before_payment"}, {confirm, "stale_ignored"}} {
		if got := deliver(t, s, st.ev); got != st.want {
			t.Fatalf("%s: %s, want %s", st.ev.EventID, got, st.want)
		}
	}
	if n := count(t, conn, "SELECT count(*) FROM entitlements WHERE order_id = $1", order.ID); n != 0 {
		t.Errorf("%d entitlements, want none", n)
	}
	if err := m.MigrateTo(ctx, v-1); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count(*) FROM payment_attempts WHERE order_id = $1 AND state = 'refunded'", order.ID); n != 1 {
		t.Errorf("%d refunded attempts after migrating down, want 1", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM information_schema.columns
		WHERE (table_name, column_name) IN (('payment_attempts', 'refunded_payment_ids'), ('payment_refunds', 'payment_id'))`); n != 0 {
		t.Errorf("%d of the columns 061 adds are left after migrating down", n)
	}
	if err := m.MigrateTo(ctx, v); err != nil {
		t.Fatal(err)
	}
}

// A partial refund names the payment under its invoice before the
// confirmation, which names the payment alone: the confirmation takes the
// refund's share back, and the refund announced again by the payment's id
// is the same refund (one row, nothing more taken back).
func TestPartialRefundUnderItsInvoiceBeforeItsConfirmation(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	order := creditLicenseOrder(t, s, "m-1")
	refund := tbankEvent("partial-inv", fulfillment.EventPartiallyRefunded, 4000)
	refund.Payment.InvoiceID, refund.Payment.AttemptRef = "inv-1", "inv-1"
	for _, st := range []struct {
		ev       fulfillment.ProviderEvent
		decision string
		sum      int
	}{
		{refund, "partially_refunded", 0},
		// 4000 of the total of 20000: 2000 of the 10000 credit.
		{tbankEvent("confirmed", fulfillment.EventPaymentConfirmed, 20000), "fulfilled", 8000},
		{tbankEvent("partial-pay", fulfillment.EventPartiallyRefunded, 4000), "already_applied", 8000},
	} {
		if got := deliver(t, s, st.ev); got != st.decision {
			t.Fatalf("%s: decision %s, want %s", st.ev.EventID, got, st.decision)
		}
		if sum := count(t, conn, "SELECT coalesce(sum(minor_units), 0)::int FROM ledger_entries WHERE order_id = $1", order.ID); sum != st.sum {
			t.Errorf("after %s: the ledger sums to %d, want %d", st.ev.EventID, sum, st.sum)
		}
	}
	if n := count(t, conn, "SELECT count(*) FROM payment_refunds WHERE order_id = $1 AND attempt_ref = 'inv-1' AND payment_id = 'pay-1'",
		order.ID); n != 1 {
		t.Errorf("%d refunds of inv-1 recorded with their payment, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM payment_refunds WHERE order_id = $1", order.ID); n != 1 {
		t.Errorf("%d refunds recorded, want 1", n)
	}
}

// Another payment of the invoice that paid the order is refunded in full:
// the invoice's attempt stays confirmed and records the refunded payment,
// whose confirmation by its id alone is then owed nothing (no extra_payment
// item asking to refund it again).
func TestOtherPaymentOfThePayingInvoiceRefunded(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	order := creditLicenseOrder(t, s, "m-1")
	for _, st := range []struct {
		ev       fulfillment.ProviderEvent
		decision string
	}{
		{namedEvent("confirmed-1", fulfillment.EventPaymentConfirmed, "inv-1", "pay-1"), "fulfilled"},
		{namedEvent("refunded-2", fulfillment.EventRefunded, "inv-1", "pay-2"), "other_payment_refunded"},
		{namedEvent("confirmed-2", fulfillment.EventPaymentConfirmed, "", "pay-2"), "stale_ignored"},
	} {
		if got := deliver(t, s, st.ev); got != st.decision {
			t.Fatalf("%s: decision %s, want %s", st.ev.EventID, got, st.decision)
		}
	}
	var (
		state string
		ids   []string
	)
	if err := conn.QueryRow(ctx, `SELECT state, refunded_payment_ids FROM payment_attempts WHERE order_id = $1 AND attempt_ref = 'inv-1'`,
		order.ID).Scan(&state, &ids); err != nil || state != "confirmed" || strings.Join(ids, ",") != "pay-2" {
		t.Errorf("inv-1 is %s and records refunded payments %v (%v), want confirmed, pay-2", state, ids, err)
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE order_id = $1", order.ID); n != 0 {
		t.Errorf("%d items, want none", n)
	}
}

// namedEvent is tbankEvent of 20000 kopecks naming invoice and payment pay
// (either may be ""), its attempt the invoice, else the payment.
func namedEvent(id string, kind fulfillment.EventKind, invoice, pay string) fulfillment.ProviderEvent {
	ev := tbankEvent(id, kind, 20000)
	ev.Payment.InvoiceID, ev.Payment.PaymentID = invoice, pay
	ev.Payment.AttemptRef = ev.Payment.Attempt()
	return ev
}

// A payment's full refund naming its invoice and its confirmation naming
// the payment alone, decided at the same time by two workers (several
// rounds, each a new order): whichever takes the order's lock first, the
// order keeps nothing — no license left active, the ledger back at zero —
// and a payment id is recorded refunded once at most.
func TestRefundAndConfirmationNamedOtherwiseAtOnce(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	const rounds = 6
	for i := range rounds {
		m := fmt.Sprintf("m-%d", i)
		order := creditLicenseOrder(t, s, m)
		refund := namedEvent("refunded-"+m, fulfillment.EventRefunded, "inv-"+m, "pay-"+m)
		confirm := namedEvent("confirmed-"+m, fulfillment.EventPaymentConfirmed, "", "pay-"+m)
		refund.Payment.MerchantOrderID, confirm.Payment.MerchantOrderID = m, m
		if i%2 == 1 {
			refund, confirm = confirm, refund
		}
		decideTogether(t, s, conn, refund, confirm)
		if n := count(t, conn, "SELECT count(*) FROM entitlements WHERE order_id = $1 AND revoked_at IS NULL", order.ID); n != 0 {
			t.Errorf("%s: %d licenses left active, want none", m, n)
		}
		if sum := count(t, conn, "SELECT coalesce(sum(minor_units), 0)::int FROM ledger_entries WHERE order_id = $1", order.ID); sum != 0 {
			t.Errorf("%s: the ledger sums to %d, want 0", m, sum)
		}
	}
	if n := count(t, conn, `SELECT count(*) FROM (SELECT 1 FROM payment_attempts a, unnest(a.refunded_payment_ids) AS p (id)
		GROUP BY a.order_id, p.id HAVING count(*) > 1) twice`); n != 0 {
		t.Errorf("%d payments recorded refunded twice", n)
	}

}

// orderEffects counts what an order was granted and what it opened, from
// the tables.
func orderEffects(t *testing.T, conn *pgx.Conn, orderID string) string {
	t.Helper()
	return fmt.Sprintf("entitlements %d, ledger %d, extra_payment items %d, items %d",
		count(t, conn, "SELECT count(*) FROM entitlements WHERE order_id = $1", orderID),
		count(t, conn, "SELECT count(*) FROM ledger_entries WHERE order_id = $1", orderID),
		count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE order_id = $1 AND kind = 'extra_payment'", orderID),
		count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE order_id = $1", orderID))
}
