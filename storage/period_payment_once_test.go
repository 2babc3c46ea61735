package storage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// One payment pays one period of a subscription, in the database: a
// period paid by a payment that paid another of the subscription's is
// refused (migration 059). Migration 058 finds the periods stored twice under one payment
// before it (made here by hand, as rules before the constraint could),
// changes neither, marks the later one and opens one extra_payment item
// per payment, under the key the service would give it.
func TestPeriodPaymentOnce(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	notice := tbankSubscriptionOrder(t, s)
	feb1, mar1 := subJan1.AddDate(0, 1, 0), subJan1.AddDate(0, 2, 0)
	deliver(t, s, notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "700", "m-t-1", subJan1))
	for _, c := range []fulfillment.ProviderEvent{
		notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "70|1", "charge-2", feb1),
		notice("CONFIRMED", fulfillment.EventPaymentConfirmed, "702", "charge-3", mar1),
	} {
		if got := deliver(t, s, c); got != "renewed" {
			t.Fatalf("the charge %s: %s", c.Payment.PaymentID, got)
		}
	}
	var sub string
	if err := conn.QueryRow(ctx, `SELECT id::text FROM subscriptions`).Scan(&sub); err != nil {
		t.Fatal(err)
	}
	again := `UPDATE subscription_periods SET payment_id = '70|1' WHERE period = 3`
	if _, err := conn.Exec(ctx, again); !isUniqueViolation(err) {
		t.Fatalf("a second period paid by payment 70|1: %v; want a unique violation", err)
	}

	m, v := migratedBefore(t, conn, "_period_payment_once.sql")
	if _, err := conn.Exec(ctx, again); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, int32(len(m.Migrations))); err != nil { // 058, and 059's index
		t.Fatal(err)
	}
	key := fulfillment.ItemKey(fulfillment.ReconExtraPayment, fulfillment.ItemSubject{SubscriptionID: sub, PaymentID: "70|1"})
	wantCounts(t, conn, []countCheck{
		{"periods kept, payments unchanged", `SELECT count(*) FROM subscription_periods WHERE payment_id = '70|1'`, 2},
		{"the later one marked", `SELECT count(*) FROM subscription_periods WHERE payment_repeated AND period = 3`, 1},
		{"marked in all", `SELECT count(*) FROM subscription_periods WHERE payment_repeated`, 1},
		{"items in all", `SELECT count(*) FROM reconciliation_items`, 1},
	})
	wantCounts(t, conn, []countCheck{
		{"the item, under the service's key", `SELECT count(*) FROM reconciliation_items WHERE kind = 'extra_payment'
			AND state = 'open' AND subscription_id = $1::uuid AND payment_id = '70|1' AND dedupe_key = $2
			AND detail LIKE 'payment 70|1 paid periods 2, 3 of this subscription%'`, 1},
	}, sub, key)

	// From here on, the database refuses a third.
	if _, err := conn.Exec(ctx, `UPDATE subscription_periods SET payment_id = '70|1' WHERE period = 1`); !isUniqueViolation(err) {
		t.Fatalf("a third period paid by payment 70|1: %v; want a unique violation", err)
	}
	// Down and up again: the same marks, no second item.
	if err := m.MigrateTo(ctx, v-1); err != nil {
		t.Fatal(err)
	}
	if err := m.MigrateTo(ctx, int32(len(m.Migrations))); err != nil {
		t.Fatal(err)
	}
	wantCounts(t, conn, []countCheck{
		{"marked", `SELECT count(*) FROM subscription_periods WHERE payment_repeated`, 1},
		{"items", `SELECT count(*) FROM reconciliation_items`, 1},
	})
}

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}
