package storage_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
)

// Every field of the neutral event survives the trip through inbox_events:
// stored by the group-commit insert, read back by processing.
func TestInboxRowRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn := newStore(t)
	occurred := time.Date(2026, 11, 29, 10, 15, 30, 123456000, time.UTC)
	full := fulfillment.ProviderEvent{
		Provider: fulfillment.ProviderYolfi, EndpointID: "yolfi-live", OrgID: "org_a", Environment: fulfillment.EnvLive,
		EventID: "evt_full", Type: "payment.confirmed", Kind: fulfillment.EventPaymentConfirmed, TestMode: false,
		OccurredAt: occurred,
		Payment: fulfillment.PaymentInfo{
			AttemptRef: "inv_1", InvoiceID: "inv_1", PaymentID: "pay_1", CheckoutSessionID: "cs_1",
			MerchantOrderID: "заказ 1", SubscriptionID: "sub_1",
			Amount: fulfillment.TokenAmount(decimal.RequireFromString("25.123456789012345678"), "USDT", "TRON"),
		},
		Refs: map[string]string{"paylink_id": "pl_1", "tx_hash": "0xabc"},
	}
	fiat := fulfillment.ProviderEvent{
		Provider: fulfillment.ProviderTBank, EndpointID: "tbank-test", OrgID: "org_a", Environment: fulfillment.EnvTest,
		EventID: "T1:42:REFUNDED", Type: "REFUNDED", Kind: fulfillment.EventRefunded, TestMode: true,
		Payment: fulfillment.PaymentInfo{AttemptRef: "42", PaymentID: "42", MerchantOrderID: "m-2",
			Amount: fulfillment.MinorAmount(250000, "RUB")},
	}
	bare := fulfillment.ProviderEvent{
		Provider: fulfillment.ProviderYolfi, EndpointID: "yolfi-live", OrgID: "org_a", Environment: fulfillment.EnvLive,
		EventID: "evt_bare", Type: "payout.sent", Kind: fulfillment.EventOther,
	}
	for _, want := range []fulfillment.ProviderEvent{full, fiat, bare} {
		if _, err := s.InboxInsert(ctx, want, []byte(`{}`)); err != nil {
			t.Fatalf("%s: %v", want.EventID, err)
		}
	}
	if _, err := conn.Exec(ctx, "UPDATE inbox_work SET lease_owner = 'me'"); err != nil {
		t.Fatal(err)
	}
	got, err := s.LeasedEvents(ctx, []int64{1, 2, 3}, "me")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("read %d events, want 3", len(got))
	}
	for i, want := range []fulfillment.ProviderEvent{full, fiat, bare} {
		ev := got[i]
		if !ev.Payment.Amount.Value.Equal(want.Payment.Amount.Value) {
			t.Errorf("%s: amount %s, want %s", want.EventID, ev.Payment.Amount, want.Payment.Amount)
		}
		ev.Payment.Amount.Value, want.Payment.Amount.Value = decimal.Zero, decimal.Zero
		if !ev.OccurredAt.Equal(want.OccurredAt) {
			t.Errorf("%s: occurred %v, want %v", want.EventID, ev.OccurredAt, want.OccurredAt)
		}
		ev.OccurredAt, want.OccurredAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(ev, want) {
			t.Errorf("round trip of %s:\n got %+v\nwant %+v", want.EventID, ev, want)
		}
	}
}

// Migration 005 moves Yolfi's paylink and transaction hash columns into the
// event's refs, and back.
func TestMigration005Refs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, conn := newStore(t)
	m, err := migrate.NewMigrator(ctx, conn, "schema_version")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.LoadMigrations(storage.Migrations()); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 4); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `
		INSERT INTO inbox_events (provider, endpoint_id, org_id, environment, event_id, event_type, kind, test_mode,
			paylink_id, tx_hash, amount, token, network, raw_body)
		VALUES ('yolfi', 'ep', 'org_a', 'live', 'evt_1', 'payment.confirmed', 'payment_confirmed', false,
				'pl_1', '0xabc', 25, 'USDT', 'TRON', '{}'),
			('yolfi', 'ep', 'org_a', 'live', 'evt_2', 'invoice.created', 'attempt_created', false,
				NULL, NULL, NULL, NULL, NULL, '{}'),
			-- earlier versions kept an amount without its unit
			('yolfi', 'ep', 'org_a', 'live', 'evt_3', 'invoice.created', 'attempt_created', false,
				NULL, NULL, 10, NULL, NULL, '{}')`)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, 5); err != nil {
		t.Fatalf("migrating up to 5: %v", err)
	}
	var refs []string
	rows, _ := conn.Query(ctx, "SELECT refs::text FROM inbox_events ORDER BY id")
	if refs, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if want := `[{"tx_hash": "0xabc", "paylink_id": "pl_1"} {} {}]`; fmt.Sprint(refs) != want {
		t.Errorf("refs after 005 = %v, want %s", refs, want)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE amount IS NOT NULL"); n != 1 {
		t.Errorf("%d events keep an amount after 005, want 1 (the unit-less one dropped)", n)
	}
	if err := m.MigrateTo(ctx, 4); err != nil {
		t.Fatalf("migrating 005 down: %v", err)
	}
	var paylink, tx string
	if err := conn.QueryRow(ctx, "SELECT paylink_id, tx_hash FROM inbox_events WHERE event_id = 'evt_1'").Scan(&paylink, &tx); err != nil ||
		paylink != "pl_1" || tx != "0xabc" {
		t.Errorf("after 005 down: %q %q %v", paylink, tx, err)
	}
	if err := m.MigrateTo(ctx, 5); err != nil {
		t.Fatalf("migrating up to 5 again: %v", err)
	}
}
