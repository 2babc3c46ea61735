package storage_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// Two inbox batches that each pay the first periods of the same two new
// customer subscriptions, in opposite orders, create them one batch after
// the other, not each one of them and then wait for the other's: no
// deadlock for PostgreSQL to break (which rolls one batch back after
// deadlock_timeout), and both batches' periods recorded.
func TestBatchesCreatingTheSameSubscriptionsInOppositeOrdersDoNotDeadlock(t *testing.T) {
	t.Parallel()
	s, conn, url := openStore(t, storage.Options{MaxConns: 10, Plans: fulfillment.Plans{subPlan.ID: subPlan}})
	ctx := context.Background()
	order := func(m, customer string) {
		spec, err := fulfillment.OrderDraft{OrgID: "org_a", Environment: "live", MerchantOrderID: m,
			Lines: []fulfillment.LineDraft{{SKU: "pro", Kind: "subscription", Quantity: 1, Currency: "USD", MinorUnits: 1000,
				AccountRef: customer, PlanID: subPlan.ID}},
			Settlement: &fulfillment.SettlementDraft{Token: "USDT", Network: "TRON", Amount: "10"}}.Validate()
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.OrderCreate(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	pay := func(id, m string) {
		ev := confirmedEvent(id, m)
		ev.Payment.Amount = fulfillment.TokenAmount(decimal.RequireFromString("10"), "USDT", "TRON")
		if _, err := s.InboxInsert(ctx, ev, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range [][2]string{{"m-a1", "alice"}, {"m-b1", "bob"}, {"m-b2", "bob"}, {"m-a2", "alice"}} {
		order(o[0], o[1])
		pay("e-"+o[0], o[0])
	}
	claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 10})
	if err != nil || len(claims) != 4 {
		t.Fatal(claims, err)
	}
	// A transaction that inserted both subscriptions holds each batch at
	// its first creation (alice's for one, bob's for the other); its
	// rollback lets them go on together.
	holder := holderTx(ctx, t, url)
	for _, c := range []string{"alice", "bob"} {
		if _, err := holder.Exec(ctx, `INSERT INTO subscriptions (id, org_id, environment, provider, provider_subscription_id, customer_ref, plan_id)
			VALUES ($1, 'org_a', 'live', 'yolfi', $2, $3, $4)`, uuid.New(), fulfillment.CustomerSubscriptionID(subPlan.ID, c), c, subPlan.ID); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, ids := range [][]int64{{claims[0].ID, claims[1].ID}, {claims[2].ID, claims[3].ID}} {
		wg.Go(func() { _, errs[i] = s.InboxProcess(ctx, ids, "w") })
	}
	time.Sleep(300 * time.Millisecond)
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("a batch failed: %v", err)
	}
	if got := count(t, conn, "SELECT count(*) FROM subscriptions"); got != 2 {
		t.Errorf("%d subscriptions, want alice's and bob's", got)
	}
	// Each customer's two orders paid a period each.
	if got := count(t, conn, "SELECT count(*) FROM subscription_periods"); got != 4 {
		t.Errorf("%d periods, want 4", got)
	}
}
