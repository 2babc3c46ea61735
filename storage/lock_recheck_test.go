package storage_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// A batch locks the rows it decides on (orders, subscriptions) and, when
// another transaction holds one of them, waits for it. Once that holder
// commits an update of the row, PostgreSQL rechecks the row's new version
// against the locking statement (see lockSubscriptions). The subscription
// lock reached its table through a join with a UNION ALL of ids, and the
// recheck left the row out: the batch decided a charge naming its card
// binding "unmatched" (make chaos found it). Here each row locked is one
// that another transaction has just updated, in a database whose
// statistics (thousands of rows, nested loops preferred) favour such
// plans; every event must be decided as if no one had held it. The charge
// beside a refund naming no binding (the statement that lost its row) is
// tried eight times, on eight subscriptions: before the fix, about half the
// tries kept the row. So is a Yolfi order's lock by merchant order id,
// which still joins the orders with the batch's keys.
func TestALockWaitedForKeepsItsRowOnceTheHolderUpdatesIt(t *testing.T) {
	t.Parallel()
	setup, conn, url := openStore(t, outboxStoreOptions())
	ctx := context.Background()
	feb1 := subJan1.AddDate(0, 1, 0)
	notices := make([]func(string, fulfillment.EventKind, string, string, time.Time) fulfillment.ProviderEvent, 12)
	for i := range notices {
		merchant := fmt.Sprintf("m-r%d", i)
		notices[i] = tbankSubscriptionOrderOf(t, setup, merchant, fmt.Sprintf("user_r%d", i), fmt.Sprintf("2010%02d", i))
		if got := deliver(t, setup, notices[i]("CONFIRMED", fulfillment.EventPaymentConfirmed, fmt.Sprintf("70%02d", i), merchant+"-1", subJan1)); got != "fulfilled" {
			t.Fatalf("order %s's payment: %s", merchant, got)
		}
	}
	if got := deliver(t, setup, notices[0]("CONFIRMED", fulfillment.EventPaymentConfirmed, "8000", "charge-8000", feb1)); got != "renewed" {
		t.Fatalf("the first subscription's charge: %s", got)
	}
	for k := 1; k <= 9; k++ {
		mo := fmt.Sprintf("m-y%d", k)
		if _, _, err := setup.OrderCreate(ctx, spec(t, "org_a", mo)); err != nil {
			t.Fatal(err)
		}
		if got := deliver(t, setup, confirmedEvent("evt_"+mo, mo)); got != "fulfilled" {
			t.Fatalf("order %s's payment: %s", mo, got)
		}
	}
	// Rows of other orders and subscriptions, for the statistics; the store
	// under test, opened from here on, plans nested loops wherever it can.
	if _, err := conn.Exec(ctx, `
		INSERT INTO subscriptions (id, org_id, environment, provider, provider_subscription_id, customer_ref, plan_id, periods)
		SELECT gen_random_uuid(), 'org_a', 'live', 'tbank', 'filler-' || n, 'filler-' || n, 'pro-monthly', 1
		FROM generate_series(1, 2000) n;
		INSERT INTO orders (id, org_id, environment, merchant_order_id, checkout_session_id, state, total_currency,
			total_minor_units, fingerprint)
		SELECT gen_random_uuid(), 'org_a', 'live', 'filler-' || n, 'filler-' || n, 'pending_payment', 'USD', 100, 'f'
		FROM generate_series(1, 2000) n;
		ANALYZE;
		DO $$ BEGIN
			EXECUTE format('ALTER DATABASE %I SET enable_hashjoin = off', current_database());
			EXECUTE format('ALTER DATABASE %I SET enable_mergejoin = off', current_database());
		END $$`); err != nil {
		t.Fatal(err)
	}
	s, err := storage.Open(ctx, url, outboxStoreOptions())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	charge := func(n int) fulfillment.ProviderEvent {
		return notices[n]("CONFIRMED", fulfillment.EventPaymentConfirmed, fmt.Sprintf("81%02d", n), fmt.Sprintf("charge-81%02d", n), feb1)
	}
	// A charge of subscription n beside a refund naming no binding: the
	// subscriptions are also found by the payments their periods were paid
	// by (the lock with the UNION ALL).
	besideARefund := func(n int) []fulfillment.ProviderEvent {
		refund := notices[0]("PARTIAL_REFUNDED", fulfillment.EventPartiallyRefunded, "8000", "charge-8000", feb1.AddDate(0, 0, 1))
		refund.EventID += fmt.Sprintf(":%d", n)
		refund.Payment.SubscriptionID, refund.Payment.Amount = "", fulfillment.MinorAmount(100, "RUB")
		return []fulfillment.ProviderEvent{refund, charge(n)}
	}
	type lockCase struct {
		name   string
		events []fulfillment.ProviderEvent
		update string // the row the holder updates
		want   string // the last event's decision
	}
	byCheckout := notices[3]("CONFIRMED", fulfillment.EventPaymentConfirmed, "7003", "m-r3-1", subJan1)
	byCheckout.EventID += ":again"
	cases := []lockCase{{
		name:   "a charge found by its card binding",
		events: []fulfillment.ProviderEvent{charge(1)},
		update: `UPDATE subscriptions SET updated_at = clock_timestamp() WHERE provider_subscription_id = '201001'`,
		want:   "renewed",
	}, {
		// A T-Bank order, found by its checkout session.
		name:   "an order's payment announced again, by checkout",
		events: []fulfillment.ProviderEvent{byCheckout},
		update: `UPDATE orders SET updated_at = clock_timestamp() WHERE merchant_order_id = 'm-r3'`,
		want:   "already_applied",
	}}
	for _, n := range []int{2, 5, 6, 7, 8, 9, 10, 11} {
		cases = append(cases, lockCase{
			name:   fmt.Sprintf("a charge beside a refund naming no binding, subscription %d", n),
			events: besideARefund(n),
			update: fmt.Sprintf(`UPDATE subscriptions SET updated_at = clock_timestamp() WHERE provider_subscription_id = '2010%02d'`, n),
			want:   "renewed",
		})
	}
	// A Yolfi order, found by its merchant order id, beside another's
	// payment (the lock of the orders by the batch's keys, which keeps its
	// join with them).
	for k := 2; k <= 9; k++ {
		again := confirmedEvent(fmt.Sprintf("evt_m-y%d", k), fmt.Sprintf("m-y%d", k))
		again.EventID += ":again"
		cases = append(cases, lockCase{
			name:   fmt.Sprintf("an order's payment announced again, by merchant order id, order %d", k),
			events: []fulfillment.ProviderEvent{confirmedEvent(fmt.Sprintf("evt_m-y1:again:%d", k), "m-y1"), again},
			update: fmt.Sprintf(`UPDATE orders SET updated_at = clock_timestamp() WHERE merchant_order_id = 'm-y%d'`, k),
			want:   "already_applied",
		})
	}
	for _, c := range cases { //nolint:paralleltest // the cases share one store, and each claims what the inbox holds
		t.Run(c.name, func(t *testing.T) {
			items := count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment'`)
			got := decideWhileUpdated(t, s, conn, c.events, c.update)
			if got[len(got)-1].Decision != fulfillment.Decision(c.want) {
				t.Errorf("decided %s (%s), want %s", got[len(got)-1].Decision, got[len(got)-1].Reason, c.want)
			}
			if n := count(t, conn, `SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment'`); n != items {
				t.Errorf("%d unmatched_payment items opened, want none", n-items)
			}
			// Whatever was queued again (a late match) is decided, so that
			// the next case claims its own events alone.
			if n := count(t, conn, "SELECT count(*) FROM inbox_work WHERE state = 'pending'"); n > 0 {
				processAll(t, s, n)
			}
		})
	}
}

// decideWhileUpdated stores events and processes them in one batch while
// another transaction, on a connection of its own, has run update (as a
// batch deciding other events of the same rows would) and holds it; the
// holder commits once the batch waits for its lock. It returns the
// outcomes in the events' order.
func decideWhileUpdated(t *testing.T, s *storage.Store, conn *pgx.Conn, events []fulfillment.ProviderEvent, update string) []fulfillment.Outcome {
	t.Helper()
	ctx := context.Background()
	for _, ev := range events {
		if _, err := s.InboxInsert(ctx, ev, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 10})
	if err != nil || len(claims) != len(events) {
		t.Fatalf("claim = %v, %v; want %d events", claims, err, len(events))
	}
	ids := make([]int64, len(claims))
	for i, c := range claims {
		ids[i] = c.ID
	}
	slices.Sort(ids)
	// A transaction on a connection of its own, holding nothing yet.
	holder, pid := holdOrderLock(t, conn, "false")
	if tag, err := holder.Exec(ctx, update); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("%s: %v, %v", update, tag, err)
	}
	done := make(chan error, 1)
	var outs map[int64]fulfillment.Outcome
	go func() {
		var err error
		outs, err = s.InboxProcess(ctx, ids, "w")
		done <- err
	}()
	waitForLockWaiter(t, conn, pid, "the batch", done)
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := make([]fulfillment.Outcome, len(ids))
	for i, id := range ids {
		got[i] = outs[id]
	}
	return got
}
