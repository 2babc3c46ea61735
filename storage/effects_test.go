package storage_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/tern/v2/migrate"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// The effects of a batch are written with one statement per kind of
// effect. Whatever a batch holds — several events of one order (partial
// refunds, whose shares read each other's, then the full refund; partial
// refunds that cannot apply: one larger than what is left, one after the
// full refund),
// a refund before its payment, deliveries requested then withdrawn, an
// unmatched payment, a subscription's first payment and its renewal — one
// batch writes exactly what the same events write processed one at a
// time: the same rows, with the same values, and the feed's events in the
// same order, each with the state its decision left.
func TestOneBatchWritesWhatOneByOneWrites(t *testing.T) {
	t.Parallel()
	events := batchScenario()

	written := func(batch bool) (string, string) {
		s, conn := newOutboxStore(t)
		ctx := context.Background()
		scenarioOrders(t, s)
		var decisions []string
		for _, ev := range events {
			if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
				t.Fatal(err)
			}
			if !batch {
				decisions = append(decisions, processAll(t, s, 1))
			}
		}
		if batch {
			decisions = append(decisions, processAll(t, s, len(events)))
		}
		return strings.Join(decisions, ","), writtenRows(t, conn)
	}
	oneByOne, want := written(false)
	batched, got := written(true)
	if batched != oneByOne {
		t.Errorf("decisions in one batch:\n  %s\none by one:\n  %s", batched, oneByOne)
	}
	if got != want {
		t.Errorf("one batch wrote:\n%s\none by one:\n%s", got, want)
	}
	for _, must := range []string{"partial_reversal", "refund_reversal", "revoked", "m-b|licenses|order.refunded",
		"subscription.renewed", "period 2", "unmatched", "refund_not_applicable"} {
		if !strings.Contains(want, must) {
			t.Errorf("the scenario no longer writes %q: it tests less than it says", must)
		}
	}
}

// refundEvent is tbankEvent for the order merchantID.
func refundEvent(id, merchantID string, kind fulfillment.EventKind, kopecks int64) fulfillment.ProviderEvent {
	ev := tbankEvent(id, kind, kopecks)
	ev.Payment.MerchantOrderID = merchantID
	ev.Payment.AttemptRef, ev.Payment.PaymentID = "pay-"+merchantID, "pay-"+merchantID
	return ev
}

// creditLicenseOrder stores an order of org_a for 20000 kopecks: two
// licenses and a credit of 10000 to acct-1.
func creditLicenseOrder(t *testing.T, s *storage.Store, merchantID string) fulfillment.Order {
	t.Helper()
	o, _, err := s.OrderCreate(context.Background(), creditLicenseSpec(t, merchantID))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// creditLicenseSpec is the order creditLicenseOrder stores.
func creditLicenseSpec(t *testing.T, merchantID string) fulfillment.OrderSpec {
	t.Helper()
	spec, err := fulfillment.OrderDraft{
		OrgID: "org_a", Environment: "live", MerchantOrderID: merchantID,
		Lines: []fulfillment.LineDraft{
			{SKU: "pro", Kind: "license", Quantity: 2, Currency: "RUB", MinorUnits: 5000},
			{SKU: "credits", Kind: "balance_credit", Quantity: 1, Currency: "RUB", MinorUnits: 10000, AccountRef: "acct-1"},
		},
	}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

// writtenRows renders every row processing writes, named by what does not
// change from one database to another (merchant order ids, event ids,
// provider subscription ids — not generated ids, keys or times), in an
// order of their own: the feed's events in the order they were recorded.
func writtenRows(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []struct{ name, sql string }{
		{"order", `SELECT merchant_order_id, state, coalesce(paid_attempt_ref, '-'), coalesce(paid_payment_id, '-'),
			paid_at IS NOT NULL FROM orders ORDER BY merchant_order_id`},
		{"attempt", `SELECT o.merchant_order_id, a.provider, a.attempt_ref, a.state, coalesce(a.amount::text, '-')
			FROM payment_attempts a JOIN orders o ON o.id = a.order_id ORDER BY 1, 2, 3`},
		{"refund", `SELECT o.merchant_order_id, r.provider, coalesce(r.attempt_ref, '-'), r.amount::text, e.event_id
			FROM payment_refunds r JOIN orders o ON o.id = r.order_id JOIN inbox_events e ON e.id = r.inbox_event_id
			ORDER BY r.id`},
		{"license", `SELECT o.merchant_order_id, l.line_no, l.unit, l.revoked_at IS NOT NULL, coalesce(l.revoked_reason, '-')
			FROM entitlements l JOIN orders o ON o.id = l.order_id ORDER BY 1, 2, 3`},
		{"ledger", `SELECT o.merchant_order_id, l.line_no, l.movement, l.minor_units, coalesce(l.refund_ref, '-')
			FROM ledger_entries l JOIN orders o ON o.id = l.order_id ORDER BY 1, 2, 3, 4`},
		// (An order event stored without its body, since migration 040,
		// announces its topic's state.)
		{"event", `SELECT coalesce(o.merchant_order_id, s.provider_subscription_id), e.topic,
			coalesce(e.payload->'data'->>'state', replace(e.topic, 'order.', '')), coalesce(e.period::text, '-'),
			coalesce(e.payload->'data'->>'periods', '-'), coalesce(e.payload->'data'->>'period_end', '-')
			FROM order_events e LEFT JOIN orders o ON o.id = e.order_id LEFT JOIN subscriptions s ON s.id = e.subscription_id
			ORDER BY e.id`},
		{"message", `SELECT coalesce(o.merchant_order_id, s.provider_subscription_id), m.destination_id, m.topic,
			coalesce(m.line_no::text, '-'), m.required, m.state, (m.payload->'data') - 'order_id'::text - 'subscription_id'::text
			FROM outbox_messages m LEFT JOIN orders o ON o.id = m.order_id LEFT JOIN subscriptions s ON s.id = m.subscription_id
			ORDER BY 1, 2, 3, 4, m.id`},
		{"item", `SELECT i.kind, coalesce(o.merchant_order_id, '-'), coalesce(s.provider_subscription_id, '-'),
			coalesce(e.event_id, '-'), coalesce(i.amount::text, '-'), coalesce(i.expected_amount::text, '-'), i.detail
			FROM reconciliation_items i LEFT JOIN orders o ON o.id = i.order_id
				LEFT JOIN subscriptions s ON s.id = i.subscription_id LEFT JOIN inbox_events e ON e.id = i.inbox_event_id
			ORDER BY 1, 2, 3, 4`},
		{"subscription", `SELECT provider_subscription_id, customer_ref, plan_id, state, periods, period_start, period_end,
			last_event_at, access_ended_at IS NOT NULL FROM subscriptions ORDER BY 1`},
		{"period", `SELECT s.provider_subscription_id, 'period ' || p.period, p.period_key, coalesce(p.payment_id, '-'),
			p.starts_at, p.ends_at FROM subscription_periods p JOIN subscriptions s ON s.id = p.subscription_id ORDER BY 1, 2`},
		{"sweep", `SELECT s.provider_subscription_id, w.state, w.next_attempt_at
			FROM subscription_sweeps w JOIN subscriptions s ON s.id = w.subscription_id ORDER BY 1`},
		{"decision", `SELECT event_id, state, decision, decision_reason FROM inbox_events ORDER BY event_id`},
	} {
		rows, err := conn.Query(context.Background(), q.sql)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		for rows.Next() {
			values, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			var cells []string
			for _, v := range values {
				cells = append(cells, fmt.Sprint(v))
			}
			fmt.Fprintf(&b, "%s %s\n", q.name, strings.Join(cells, "|"))
		}
		if err := rows.Err(); err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
	}
	return b.String()
}

// A batch that waits for an order's lock decides against what the holder
// of the lock committed: the order's attempts are read after the lock is
// granted. (Read in the statement that waited, they would be as they were
// when it began: under READ COMMITTED only the locked row is read again.)
// Here the holder records the attempt as expired; the batch, which waited,
// reports it created: it stays expired.
func TestBatchWaitingForAnOrderSeesWhatItsHolderWrote(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	creditLicenseOrder(t, s, "m-1")
	created := refundEvent("e1", "m-1", fulfillment.EventAttemptCreated, 20000)
	if _, err := s.InboxInsert(ctx, created, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 10})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %v, %v", claims, err)
	}
	holder, holderPID := holdOrderLock(t, conn, `merchant_order_id = 'm-1'`)
	if _, err := holder.Exec(ctx, `
		INSERT INTO payment_attempts (order_id, provider, attempt_ref, state)
		SELECT id, 'tbank', 'pay-m-1', 'expired' FROM orders WHERE merchant_order_id = 'm-1'`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.InboxProcess(ctx, []int64{claims[0].ID}, "w")
		done <- err
	}()
	// Once the batch waits for the order's lock, the holder commits. A
	// batch that ends before it waits has failed the test.
	waitForLockWaiter(t, conn, holderPID, "the batch", done)
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var state string
	if err := conn.QueryRow(ctx, `SELECT state FROM payment_attempts WHERE attempt_ref = 'pay-m-1'`).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != "expired" {
		t.Errorf("the attempt is %s after the batch, want expired: the batch did not see what the lock's holder wrote", state)
	}
}

// Migration 024 narrows the feed's two uniquenesses to their own kind of
// event. From a database holding data of every kind — the orders,
// attempts, refunds, licenses, ledger, events, messages, items,
// subscriptions, periods and sweeps of the one-batch scenario, written at
// the latest version (processing reads columns that version 23 does not
// have) — migrating down to 23, up to 24, down and up again keeps every
// row; every event delivered again at the latest version then writes
// nothing new; and the narrowed indexes still refuse an event recorded
// twice.
func TestMigration024KeepsEveryKindOfData(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	m, err := migrate.NewMigrator(ctx, conn, "schema_version")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(storage.Migrations()); err != nil {
		t.Fatal(err)
	}
	latest := int32(len(m.Migrations))
	scenarioOrders(t, s)
	// Version 23 has no kind for the items of refunds that cannot apply
	// (migration 027): the scenario without them.
	events := slices.DeleteFunc(batchScenario(), func(ev fulfillment.ProviderEvent) bool {
		return ev.EventID == "c4" || ev.EventID == "a6"
	})
	for _, ev := range events {
		if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, len(events))
	want := writtenRows(t, conn)
	for _, v := range []int32{23, 24, 23, 24, latest} {
		if err := m.MigrateTo(ctx, v); err != nil {
			t.Fatalf("migrating to %d: %v", v, err)
		}
		if got := writtenRows(t, conn); got != want {
			t.Fatalf("at version %d the rows are:\n%s\nwant:\n%s", v, got, want)
		}
	}
	deliveredAgainWriteNothing(t, s, conn, events)
	// Each kind's uniqueness holds: an event of a topic its order (or its
	// subscription's period) has already is refused.
	for what, insert := range map[string]string{
		"an order event": `INSERT INTO order_events (org_id, environment, order_id, topic, payload)
			SELECT org_id, environment, order_id, topic, payload FROM order_events WHERE order_id IS NOT NULL LIMIT 1`,
		"a subscription event": `INSERT INTO order_events (org_id, environment, subscription_id, period, topic, payload)
			SELECT org_id, environment, subscription_id, period, topic, payload FROM order_events
			WHERE subscription_id IS NOT NULL LIMIT 1`,
	} {
		_, err := conn.Exec(ctx, insert)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			t.Errorf("%s recorded twice: %v, want a unique violation", what, err)
		}
	}
}

// deliveredAgainWriteNothing delivers every event of events again, as new
// deliveries of other ids, and checks that each, decided again, finds its
// effects applied: no effect row changes.
func deliveredAgainWriteNothing(t *testing.T, s *storage.Store, conn *pgx.Conn, events []fulfillment.ProviderEvent) {
	t.Helper()
	effectsBefore := effectRows(t, conn)
	for _, ev := range events {
		ev.EventID += "-again"
		if _, err := s.InboxInsert(context.Background(), ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, len(events))
	if got := effectRows(t, conn); got != effectsBefore {
		t.Errorf("the events delivered again wrote effects: %s, before %s", got, effectsBefore)
	}
}

// scenarioOrders stores the orders of batchScenario.
func scenarioOrders(t *testing.T, s *storage.Store) {
	t.Helper()
	creditLicenseOrder(t, s, "m-a")
	externalOrder(t, s, "m-b")
	creditLicenseOrder(t, s, "m-c")
	subscriptionOrder(t, s, "m-sub")
}

// processedScenario stores batchScenario's events for the orders of
// scenarioOrders, on a store with outbox destinations, and processes them
// in one batch.
func processedScenario(t *testing.T) (*storage.Store, *pgx.Conn, []fulfillment.ProviderEvent) {
	t.Helper()
	s, conn := newOutboxStore(t)
	scenarioOrders(t, s)
	events := batchScenario()
	for _, ev := range events {
		if _, err := s.InboxInsert(context.Background(), ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, len(events))
	return s, conn, events
}

// batchScenario is the events of TestOneBatchWritesWhatOneByOneWrites, for
// the orders of scenarioOrders.
func batchScenario() []fulfillment.ProviderEvent {
	events := []fulfillment.ProviderEvent{
		refundEvent("a1", "m-a", fulfillment.EventPaymentConfirmed, 20000),
		refundEvent("c1", "m-c", fulfillment.EventPartiallyRefunded, 5000),
		refundEvent("a2", "m-a", fulfillment.EventPartiallyRefunded, 5000),
		refundEvent("a3", "m-a", fulfillment.EventPartiallyRefunded, 6000),
		confirmedEvent("b1", "m-b"),
		refundEvent("c2", "m-c", fulfillment.EventPaymentConfirmed, 20000),
		refundEvent("c3", "m-c", fulfillment.EventPartiallyRefunded, 12000),
		refundEvent("a4", "m-a", fulfillment.EventRefunded, 9000),
		refundEvent("c4", "m-c", fulfillment.EventPartiallyRefunded, 8000), // more than the 3000 left: cannot apply
		refundEvent("a5", "m-a", fulfillment.EventRefunded, 9000),
		confirmedEvent("x1", "m-nobody"),
		refundEvent("a6", "m-a", fulfillment.EventPartiallyRefunded, 1000), // after the full refund: cannot apply
		firstPayment("s1", "sub_1", "m-sub"),
		subEvent("s2", "sub_1", fulfillment.EventPaymentConfirmed, subJan1.AddDate(0, 1, 0), "inv_sub_1_2"),
	}
	refund := confirmedEvent("b2", "m-b")
	refund.Kind, refund.Type = fulfillment.EventRefunded, "payment.refunded"
	refund.Payment = confirmedEvent("b1", "m-b").Payment
	events = append(events, refund)
	return events
}

// effectRows counts the rows of every effect processing writes.
func effectRows(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var parts []string
	for _, table := range []string{"order_events", "outbox_messages", "entitlements", "ledger_entries",
		"payment_refunds", "payment_attempts", "subscription_periods", "subscriptions"} {
		parts = append(parts, fmt.Sprintf("%s=%d", table, count(t, conn, "SELECT count(*) FROM "+table)))
	}
	parts = append(parts, fmt.Sprintf("ledger sum=%d", count(t, conn, "SELECT coalesce(sum(minor_units), 0)::int FROM ledger_entries")))
	return strings.Join(parts, " ")
}

// holdOrderLock begins a transaction that locks the orders where selects
// (FOR UPDATE), on a connection of its own — pg_stat_activity, read inside
// a transaction, stays as its first read found it, so the test's own
// connection must not hold the lock — and returns it with its backend's
// pid. The transaction is rolled back and the connection closed at the
// test's end, unless the test commits it first.
func holdOrderLock(t *testing.T, conn *pgx.Conn, where string, args ...any) (holder pgx.Tx, pid uint32) {
	t.Helper()
	ctx := context.Background()
	holderConn, err := pgx.ConnectConfig(ctx, conn.Config().Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holderConn.Close(context.Background()) })
	holder, err = holderConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Rollback(context.Background()) })
	if _, err := holder.Exec(ctx, `SELECT 1 FROM orders WHERE `+where+` FOR UPDATE`, args...); err != nil {
		t.Fatal(err)
	}
	return holder, holderConn.PgConn().PID()
}

// waitForLockWaiter waits, for up to 30 s, until a backend of the test's
// database other than the holder's waits for a lock; who (running in the
// background, its result on done) failing to wait fails the test.
func waitForLockWaiter(t *testing.T, conn *pgx.Conn, holderPID uint32, who string, done <-chan error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for count(t, conn, `SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND datname = current_database() AND pid <> $1`, holderPID) == 0 {
		select {
		case err := <-done:
			t.Fatalf("%s ended (%v) without waiting for the order's lock", who, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never waited for the order's lock", who)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The writer updates an order at the row version its lock read. Should
// the row have been replaced since (no decision does that), the update
// finds nothing, and the writer fails the transaction rather than lose
// the order's new state.
func TestOrderUpdatedAtTheVersionLocked(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	id := externalOrder(t, s, "m-version")
	state := func() string {
		t.Helper()
		var st string
		if err := conn.QueryRow(ctx, `SELECT state FROM orders WHERE id = $1`, id).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if err := s.MoveLockedOrder(ctx, id, fulfillment.StateCancelled, true); err == nil || !strings.Contains(err.Error(), "0 of 1 found") {
		t.Errorf("moving an order whose row was replaced after its lock: %v, want 0 of 1 found", err)
	}
	if st := state(); st != string(fulfillment.StatePendingPayment) {
		t.Errorf("after the failed move the order is %s, want pending_payment", st)
	}
	// Nothing of the failed move's transaction was committed: the COMMIT
	// went in the round trip of the update, and PostgreSQL refused it.
	var touched bool
	if err := conn.QueryRow(ctx, `SELECT updated_at = '2000-01-01' FROM orders WHERE id = $1`, id).Scan(&touched); err != nil {
		t.Fatal(err)
	}
	if touched {
		t.Error("the failed move's transaction committed what it wrote before the update")
	}
	if err := s.MoveLockedOrder(ctx, id, fulfillment.StateCancelled, false); err != nil {
		t.Fatal(err)
	}
	if st := state(); st != string(fulfillment.StateCancelled) {
		t.Errorf("after the move the order is %s, want cancelled", st)
	}
}

// A license key is "LIC-", its time of issue in milliseconds (12
// hexadecimal digits), then 80 random bits (20 digits): keys of later
// batches sort after earlier ones, so that new keys go to the end of the
// unique index (random keys went all over it, each insert after a
// checkpoint writing its page whole to the WAL); no two random parts alike.
func TestLicenseKeysGoInTimeOrder(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	before := time.Now().Add(-time.Second)
	const orders = 4
	for i := range orders {
		mid := fmt.Sprintf("keys-%d", i)
		creditLicenseOrder(t, s, mid)
		if _, err := s.InboxInsert(ctx, refundEvent("pay-ev-"+mid, mid, fulfillment.EventPaymentConfirmed, 20000), []byte("{}")); err != nil {
			t.Fatal(err)
		}
		processAll(t, s, 1)
		time.Sleep(2 * time.Millisecond) // the next batch's keys are of a later millisecond
	}
	after := time.Now().Add(time.Second)
	rows, err := conn.Query(ctx, "SELECT value FROM entitlements ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2*orders {
		t.Fatalf("%d licenses, want %d", len(keys), 2*orders)
	}
	shape := regexp.MustCompile(`^LIC-([0-9A-F]{12})([0-9A-F]{20})$`)
	random := map[string]bool{}
	for i, k := range keys {
		m := shape.FindStringSubmatch(k)
		if m == nil {
			t.Fatalf("license key %q is not LIC- and 32 hexadecimal digits", k)
		}
		ms, err := strconv.ParseInt(m[1], 16, 64)
		if issued := time.UnixMilli(ms); err != nil || issued.Before(before) || issued.After(after) {
			t.Errorf("license key %q: issued %v, want between %v and %v", k, issued, before, after)
		}
		if random[m[2]] {
			t.Errorf("license key %q: its random part again", k)
		}
		random[m[2]] = true
		// The two keys of an order are of one batch: each sorts after
		// every key of the batches before.
		if earlier := keys[:i-i%2]; len(earlier) > 0 && k <= slices.Max(earlier) {
			t.Errorf("license key %q of a later batch sorts before %q", k, slices.Max(earlier))
		}
	}
}
