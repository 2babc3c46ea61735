package storage_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// stuck is outbox_stuck: the failed and uncertain messages.
var stuck = keptTable("outbox_stuck", `SELECT destination_id, state FROM outbox_stuck ORDER BY 1, 2`)

// The failed and uncertain messages are rows of their own, which a trigger
// keeps with the messages; the readers that list or count messages by
// state read them (and the queue's work rows for the pending ones).
// Migration 034 builds the same rows from the messages, and its down
// migration gives back the three indexes.
func TestOutboxStuckFollowTheMessages(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	paidExternalOrder(t, s, "s-1", "p1")
	licenses := failNext(t, s, "licenses")
	deliverNext(t, s, "shipping", fulfillment.OutcomeUncertain)
	const failed = "licenses=failed shipping=uncertain "
	if got, wrong := stuck.rows(t, conn); got != failed || wrong != 0 {
		t.Fatalf("after a failed and an uncertain delivery: %q (%d wrong), want %q", got, wrong, failed)
	}
	list := func(state fulfillment.DeliveryState) string {
		t.Helper()
		ds, err := s.DeliveryList(ctx, fulfillment.DeliveryListParams{Filter: fulfillment.DeliveryFilter{State: state}, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		out := ""
		for _, d := range ds {
			out += d.DestinationID + " "
		}
		return out
	}
	if got := list(fulfillment.DeliveryFailed); got != "licenses " {
		t.Errorf("failed messages: %q, want licenses", got)
	}
	if got := list(fulfillment.DeliveryUncertain); got != "shipping " {
		t.Errorf("uncertain messages: %q, want shipping", got)
	}
	statuses, err := s.DestinationStatuses(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st := statuses["licenses"]; st.Failed != 1 || st.Pending != 0 || st.Uncertain != 0 {
		t.Errorf("licenses: %+v, want one failed", st)
	}

	if _, err := s.DeliveryRetry(ctx, licenses.ID, "test", false); err != nil {
		t.Fatal(err)
	}
	if got, wrong := stuck.rows(t, conn); got != "shipping=uncertain " || wrong != 0 {
		t.Fatalf("after a retry: %q (%d wrong), want the uncertain one", got, wrong)
	}
	if got := list(fulfillment.DeliveryPending); got != "licenses " {
		t.Errorf("pending messages: %q, want licenses", got)
	}
	if statuses, err = s.DestinationStatuses(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if st := statuses["licenses"]; st.Failed != 0 || st.Pending != 1 {
		t.Errorf("licenses after the retry: %+v, want one pending", st)
	}
	// An operator's fix in SQL is followed too.
	if _, err := conn.Exec(ctx, `UPDATE outbox_messages SET state = 'failed' WHERE destination_id = 'crm'`); err != nil {
		t.Fatal(err)
	}
	if _, wrong := stuck.rows(t, conn); wrong != 0 {
		t.Fatalf("after a fix by hand: %d wrong", wrong)
	}

	m, v := migrator(t, conn, "_outbox_stuck.sql")
	want, _ := stuck.rows(t, conn)
	if err := m.MigrateTo(ctx, v-1); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, `SELECT count(*) FROM pg_indexes WHERE indexname IN
		('outbox_messages_list_idx', 'outbox_messages_stuck_idx', 'outbox_messages_stuck_destination_idx')`); n != 3 {
		t.Errorf("at version %d: %d of the three indexes on outbox_messages", v-1, n)
	}
	if err := m.MigrateTo(ctx, int32(len(m.Migrations))); err != nil {
		t.Fatal(err)
	}
	if got, wrong := stuck.rows(t, conn); got != want || wrong != 0 {
		t.Errorf("migrated down and up again: %q (%d wrong), want %q", got, wrong, want)
	}
}

// Recording a delivery is a HOT update of the message: no index covers a
// column it changes, and its page has room (fillfactor). Each delivery
// here is its own transaction, as the pages are pruned between a
// dispatcher's batches. As for orders (TestOrderUpdateAtPaymentIsHOT), the
// count asks for some HOT updates, and no index may cover a column the
// update changes.
func TestDeliveryRecordIsHOT(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	const orders = 12
	payExternalOrders(t, s, orders, "hot-%d", "key-server")
	processAll(t, s, orders)
	for range orders {
		deliverNext(t, s, "licenses", fulfillment.OutcomeDelivered)
	}
	updates, hot := tableUpdates(t, s, conn, "outbox_messages", orders)
	delivered := count(t, conn, `SELECT count(*) FROM outbox_messages WHERE destination_id = 'licenses' AND state = 'delivered'`)
	if delivered != orders || updates < orders || hot == 0 {
		t.Errorf("outbox_messages: %d delivered, %d updates, %d of them HOT; want %d delivered, HOT updates",
			delivered, updates, hot, orders)
	}
	noIndexCovers(t, conn, "outbox_messages", "state", "processed_at", "attempts", "last_status", "last_error")
}

// A dispatcher records a batch of deliveries in one transaction, in which
// no page can be pruned: every message of the batch needs room for its
// new version on its own page (fillfactor, migration 039) for its update to
// be HOT. Forty messages of a realistic payload (fulfillment.requested of
// an order whose merchant id and SKU are of a real size) fill several
// pages; all forty updates must be HOT.
func TestDeliveryBatchIsHOT(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	const orders = 40
	payExternalOrders(t, s, orders, "order-2027-01-%05d-web-checkout", "enterprise-license-key-server-annual")
	processAll(t, s, orders)
	var size int
	if err := conn.QueryRow(ctx, `SELECT avg(pg_column_size(m.*))::int FROM outbox_messages m`).Scan(&size); err != nil {
		t.Fatal(err)
	}
	claims, err := s.OutboxQueue("licenses").Claim(ctx, worker.ClaimParams{Owner: "w", Limit: orders, Lease: time.Minute, MaxAttempts: 5})
	if err != nil || len(claims) != orders {
		t.Fatalf("claim = %d messages, %v; want %d", len(claims), err, orders)
	}
	batch := make([]fulfillment.MessageAttempt, len(claims))
	for i, c := range claims {
		batch[i] = fulfillment.MessageAttempt{ID: c.ID, DeliveryAttempt: fulfillment.DeliveryAttempt{
			Outcome: fulfillment.OutcomeDelivered, Status: 204, Reason: "test", StartedAt: time.Now()}}
	}
	if lost, err := s.OutboxRecord(ctx, "w", batch); err != nil || len(lost) > 0 {
		t.Fatalf("record = %v lost, %v", lost, err)
	}
	updates, hot := tableUpdates(t, s, conn, "outbox_messages", orders)
	if updates != orders || hot != orders {
		t.Errorf("outbox_messages of %d bytes: %d updates recording one batch, %d of them HOT; want %d, all HOT", size, updates, hot, orders)
	}
}

// payExternalOrders creates n orders, each with one external line of sku
// for the licenses destination and a merchant order id of format (from
// its number), and stores a payment of each.
func payExternalOrders(t *testing.T, s *storage.Store, n int, format, sku string) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		mo := fmt.Sprintf(format, i)
		spec, err := fulfillment.OrderDraft{
			OrgID: "org_a", Environment: "live", MerchantOrderID: mo,
			Lines: []fulfillment.LineDraft{{SKU: sku, Kind: "external", Quantity: 1, Currency: "USD", MinorUnits: 3000,
				Destination: "licenses"}},
			Settlement: &fulfillment.SettlementDraft{Token: "USDT", Network: "TRON", Amount: "30.000000"},
		}.Validate()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.OrderCreate(ctx, spec); err != nil {
			t.Fatal(err)
		}
		if _, err := s.InboxInsert(ctx, confirmedEvent(fmt.Sprintf("p%d", i), mo), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
}
