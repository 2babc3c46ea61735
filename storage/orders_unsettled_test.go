package storage_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
)

// kept is a table of storage.KeptTables with a listing of its rows for
// messages (two text columns).
type kept struct {
	storage.KeptTable
	list string
}

// keptTable is the kept table named table, listed by list.
func keptTable(table, list string) kept {
	for _, k := range storage.KeptTables {
		if k.Table == table {
			return kept{k, list}
		}
	}
	panic("no kept table " + table)
}

// unsettled is orders_unsettled: the paid orders waiting for their
// fulfillment or a person.
var unsettled = keptTable("orders_unsettled",
	`SELECT o.merchant_order_id, u.state FROM orders_unsettled u JOIN orders o ON o.id = u.order_id ORDER BY 1`)

// rows lists k's table ("a=b " per row), and how many rows it misses or
// holds wrongly: zero when it is what its source says.
func (k kept) rows(t *testing.T, conn *pgx.Conn) (rows string, wrong int) {
	t.Helper()
	wrong = count(t, conn, `SELECT count(*) FROM ((`+k.Want+` EXCEPT `+k.Got+`) UNION ALL (`+k.Got+` EXCEPT `+k.Want+`)) x`)
	r, err := conn.Query(context.Background(), k.list)
	if err != nil {
		t.Fatal(err)
	}
	for r.Next() {
		var a, b string
		if err := r.Scan(&a, &b); err != nil {
			t.Fatal(err)
		}
		rows += a + "=" + b + " "
	}
	if err := r.Err(); err != nil {
		t.Fatal(err)
	}
	return rows, wrong
}

// The paid orders whose fulfillment is not settled are rows of their own,
// which a trigger keeps with the orders: an order fulfilled at once never
// has one, an order delivering its external lines or on hold has one until
// it is settled (here: refunded, and by hand). Migration 033 builds the
// same rows from the orders, and its down migration gives back the two
// partial indexes.
func TestOrdersUnsettledFollowTheOrders(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	for _, mo := range []string{"u-lic", "u-hold"} {
		if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", mo)); err != nil {
			t.Fatal(err)
		}
	}
	externalOrder(t, s, "u-ext")
	externalOrder(t, s, "u-refunded")
	short := confirmedEvent("h1", "u-hold")
	short.Payment.Amount = fulfillment.TokenAmount(decimal.RequireFromString("20"), "USDT", "TRON")
	events := []fulfillment.ProviderEvent{confirmedEvent("l1", "u-lic"), short, confirmedEvent("e1", "u-ext"),
		confirmedEvent("r1", "u-refunded")}
	for _, ev := range events {
		if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, len(events))
	const want = "u-ext=fulfilling u-hold=on_hold u-refunded=fulfilling "
	if got, wrong := unsettled.rows(t, conn); got != want || wrong != 0 {
		t.Fatalf("after the payments: %q (%d wrong), want %q", got, wrong, want)
	}
	refund := confirmedEvent("r2", "u-refunded")
	refund.Kind, refund.Type = fulfillment.EventRefunded, "payment.refunded"
	refund.Payment = confirmedEvent("r1", "u-refunded").Payment
	if _, err := s.InboxInsert(ctx, refund, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	processAll(t, s, 1)
	const refunded = "u-ext=fulfilling u-hold=on_hold "
	if got, wrong := unsettled.rows(t, conn); got != refunded || wrong != 0 {
		t.Fatalf("after the refund: %q (%d wrong), want %q", got, wrong, refunded)
	}
	// An operator's fix in SQL is followed too.
	if _, err := conn.Exec(ctx, `UPDATE orders SET state = 'cancelled' WHERE merchant_order_id = 'u-hold'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE orders SET state = 'paid', paid_at = now() - interval '1 day',
		paid_payment_id = 'by-hand' WHERE merchant_order_id = 'u-lic'`); err != nil {
		t.Fatal(err)
	}
	const settled = "u-ext=fulfilling u-lic=paid "
	if got, wrong := unsettled.rows(t, conn); got != settled || wrong != 0 {
		t.Fatalf("after the fixes by hand: %q (%d wrong), want %q", got, wrong, settled)
	}

	m, v := migratedBefore(t, conn, "_orders_unsettled.sql")
	if n := count(t, conn, `SELECT count(*) FROM pg_indexes
		WHERE indexname IN ('orders_awaiting_fulfillment_idx', 'orders_paid_unfulfilled_idx')`); n != 2 {
		t.Errorf("at version %d: %d of the two partial indexes on orders", v-1, n)
	}
	if n := count(t, conn, `SELECT count(*) FROM pg_tables WHERE tablename = 'orders_unsettled'`); n != 0 {
		t.Errorf("at version %d orders_unsettled exists", v-1)
	}
	if err := m.MigrateTo(ctx, int32(len(m.Migrations))); err != nil {
		t.Fatal(err)
	}
	if got, wrong := unsettled.rows(t, conn); got != settled || wrong != 0 {
		t.Errorf("migrated down and up again: %q (%d wrong), want %q", got, wrong, settled)
	}
}

// An order's update at payment is HOT: no index covers a column it
// changes, and its page has room (fillfactor). Each payment here is its
// own transaction, so that the page is pruned between them, as it is
// between payments in production. An update that finds its page full (its
// dead versions not prunable yet, which other work in the cluster can
// delay) is not HOT, so the count asks for some; what must hold is that
// no index covers a column the update changes — the order's state, its
// payment's time or references —, which would make none HOT: every one of
// them would write an entry into every index of the table again.
func TestOrderUpdateAtPaymentIsHOT(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	const orders = 24
	for i := range orders {
		if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", fmt.Sprintf("hot-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range orders {
		if _, err := s.InboxInsert(ctx, confirmedEvent(fmt.Sprintf("p%d", i), fmt.Sprintf("hot-%d", i)), []byte("{}")); err != nil {
			t.Fatal(err)
		}
		if got := processAll(t, s, 1); got != string(fulfillment.DecisionFulfilled) {
			t.Fatalf("payment %d: %s, want fulfilled", i, got)
		}
	}
	updates, hot := tableUpdates(t, s, conn, "orders", orders)
	if updates != orders || hot == 0 {
		t.Errorf("orders: %d updates, %d of them HOT; want %d, HOT", updates, hot, orders)
	}
	noIndexCovers(t, conn, "orders", "state", "paid_at", "paid_attempt_ref", "paid_invoice_id", "paid_payment_id", "updated_at")
}

// A batch pays many orders in one transaction, in which no page can be
// pruned: every order of the batch needs room for its paid version on its
// own page (fillfactor, migration 042) for its update to be HOT. Orders
// created one after another fill their pages together, and their payments
// arrive together too (a checkout's burst): forty of them, created in a
// row and paid by one batch of the inbox processor (the same statements
// as a group commit deciding on receipt), must all be updated HOT. With
// orders' former fillfactor of 80, only 12 or 13 of the 40 were; the
// others each wrote an entry into every index of the table.
func TestOrderBatchPaymentIsHOT(t *testing.T) {
	t.Parallel()
	s, conn := newStore(t)
	ctx := context.Background()
	const orders = 40
	queuePayments(t, s, orders, "order-2027-01-%05d-web-checkout", []byte("{}"))
	var pages int
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT (ctid::text::point)[0]) FROM orders`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, orders); strings.Count(got, string(fulfillment.DecisionFulfilled)) != orders {
		t.Fatalf("decisions %s, want %d fulfilled", got, orders)
	}
	updates, hot := tableUpdates(t, s, conn, "orders", orders)
	if updates != orders || hot != orders {
		t.Errorf("orders on %d pages: %d updates paying them in one batch, %d of them HOT; want %d, all HOT", pages, updates, hot, orders)
	}
}

// queuePayments creates n orders, their merchant order ids of format (from
// their number), and stores a payment of each, with body, queued for the
// inbox processor (s does not decide on receipt).
func queuePayments(t *testing.T, s *storage.Store, n int, format string, body []byte) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		mo := fmt.Sprintf(format, i)
		if _, _, err := s.OrderCreate(ctx, spec(t, "org_a", mo)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.InboxInsert(ctx, confirmedEvent(fmt.Sprintf("p%d", i), mo), body); err != nil {
			t.Fatal(err)
		}
	}
}

// tableUpdates closes s and reads how many rows of table were updated, and
// how many of those updates were HOT, waiting up to 30 s for want updates
// to be counted: a backend reports its statistics when it exits (an idle
// one only every few seconds), and closing the store ends its backends.
func tableUpdates(t *testing.T, s *storage.Store, conn *pgx.Conn, table string, want int64) (updates, hot int64) {
	t.Helper()
	s.Close()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := conn.QueryRow(context.Background(), `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE relname = $1`, table).Scan(&updates, &hot); err != nil {
			t.Fatal(err)
		}
		if updates >= want || time.Now().After(deadline) {
			return updates, hot
		}
	}
}

// noIndexCovers fails the test when an index of table names one of
// columns, in its key, its expressions or its predicate.
func noIndexCovers(t *testing.T, conn *pgx.Conn, table string, columns ...string) {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = $1::regclass`, table)
	if err != nil {
		t.Fatal(err)
	}
	defs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, def := range defs {
		for _, c := range columns {
			if regexp.MustCompile(`\b` + c + `\b`).MatchString(def) {
				t.Errorf("%s: covers %s, which the update changes: it cannot be HOT", def, c)
			}
		}
	}
}
