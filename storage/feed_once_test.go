package storage_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
)

// An order publishes a topic once and a subscription once per period,
// whichever rows share the statement that stores them: a subscription's
// repeated period inserts nothing, an order's repeat fails the statement,
// with or without a subscription's event beside it (the conflict clause is
// sent only then), and never stores a second event.
func TestFeedEventsOncePerOrderAndPeriodWhateverTheStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, conn, _ := openStore(t, storage.Options{MaxConns: 4, Plans: fulfillment.Plans{subPlan.ID: subPlan}})
	first := fulfillment.SubscriptionEvent{Kind: fulfillment.SubRenewalPaid, OccurredAt: subJan1, InvoiceID: "inv_1", PaymentID: "pay_1"}
	_, sub, err := s.SubscriptionApply(ctx, subRef, first, "evt_1", subPlan)
	if err != nil {
		t.Fatal(err)
	}
	const orderA, orderB = "01900000-0000-7000-8000-00000000000a", "01900000-0000-7000-8000-00000000000b"
	fulfilled := func(order string) storage.FeedRow {
		return storage.FeedRow{Order: order, Topic: fulfillment.TopicOrderFulfilled}
	}
	renewed := storage.FeedRow{Subscription: sub.ID, Period: 7, Topic: fulfillment.TopicSubscriptionRenewed}

	for _, step := range []struct {
		name    string
		rows    []storage.FeedRow
		repeats bool // an order's event is stored already: the statement fails
	}{
		{"an order's event alone", []storage.FeedRow{fulfilled(orderA)}, false},
		{"its repeat alone", []storage.FeedRow{fulfilled(orderA)}, true},
		{"an order's event beside a period twice", []storage.FeedRow{fulfilled(orderB), renewed, renewed}, false},
		{"the period again alone", []storage.FeedRow{renewed}, false},
		{"the order's repeat beside the period", []storage.FeedRow{renewed, fulfilled(orderB)}, true},
	} {
		err := s.PublishForTest(ctx, subRef.OrgID, step.rows)
		var pgErr *pgconn.PgError
		refused := errors.As(err, &pgErr) && pgErr.ConstraintName == "order_events_order_once"
		switch {
		case step.repeats && !refused:
			t.Errorf("%s: %v, want order_events_order_once refusing it", step.name, err)
		case !step.repeats && err != nil:
			t.Errorf("%s: %v", step.name, err)
		}
	}

	for what, q := range map[string]string{
		"order A's events":      `SELECT count(*) FROM order_events WHERE order_id = '` + orderA + `'`,
		"order B's events":      `SELECT count(*) FROM order_events WHERE order_id = '` + orderB + `'`,
		"the period's renewals": `SELECT count(*) FROM order_events WHERE subscription_id = '` + sub.ID + `' AND period = 7`,
	} {
		if n := count(t, conn, q); n != 1 {
			t.Errorf("%s: %d, want 1", what, n)
		}
	}
}
