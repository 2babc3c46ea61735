package storage_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// A payment that arrives before its order is decided unmatched with an
// item; creating the order queues it again in the same transaction, and it
// is then applied once: its item is resolved as matched_later with the
// order, the event's replays say the service queued it, and a replay by
// hand or a redelivery grants nothing more. An unmatched event older than
// the window, one of another org and one naming another order stay
// unmatched, their items open.
func TestLateMatchAppliesAPaymentThatCameFirst(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	first := refundEvent("early", "m-late", fulfillment.EventPaymentConfirmed, 20000)
	old := refundEvent("old", "m-old", fulfillment.EventPaymentConfirmed, 20000)
	otherOrg := refundEvent("other-org", "m-late", fulfillment.EventPaymentConfirmed, 20000)
	otherOrg.OrgID = "org_b"
	otherOrder := refundEvent("other-order", "m-nobody", fulfillment.EventPaymentConfirmed, 20000)
	ids := map[string]int64{}
	for _, ev := range []fulfillment.ProviderEvent{first, old, otherOrg, otherOrder} {
		r, err := s.InboxInsert(ctx, ev, []byte("{}"))
		if err != nil {
			t.Fatal(err)
		}
		ids[ev.EventID] = r.ID
	}
	processAll(t, s, 4)
	if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE state = 'unmatched'"); n != 4 {
		t.Fatalf("%d unmatched events, want 4", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment' AND state = 'open'"); n != 4 {
		t.Fatalf("%d open unmatched_payment items, want 4", n)
	}
	if _, err := conn.Exec(ctx, "UPDATE inbox_events SET received_at = now() - interval '8 days' WHERE id = $1", ids["old"]); err != nil {
		t.Fatal(err)
	}

	order := creditLicenseOrder(t, s, "m-late")
	creditLicenseOrder(t, s, "m-old")
	if n := count(t, conn, "SELECT count(*) FROM inbox_work WHERE state = 'pending'"); n != 1 {
		t.Fatalf("%d events queued by the orders' creation, want the one that came first", n)
	}
	if n := count(t, conn, `SELECT count(*) FROM reconciliation_items
		WHERE inbox_event_id = $1 AND state = 'resolved' AND resolution = 'matched_later' AND resolved_by = $2
			AND order_id = $3::uuid`, ids["early"], storage.LateMatchActor, order.ID); n != 1 {
		t.Errorf("the early payment's item is not resolved as matched_later with its order")
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_replays WHERE inbox_event_id = $1 AND replayed_by = $2 AND previous_state = 'unmatched'",
		ids["early"], storage.LateMatchActor); n != 1 {
		t.Errorf("the early payment's timeline does not show it was queued again when its order came")
	}
	if got := processAll(t, s, 1); got != string(fulfillment.DecisionFulfilled) {
		t.Fatalf("the early payment, processed again: %s, want fulfilled", got)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE id = $1 AND decision_reason LIKE $2",
		ids["early"], "%(late match: order "+order.ID+" was created after this event)"); n != 1 {
		t.Errorf("the early payment's decision does not say it came before its order")
	}

	// Replayed by hand, and delivered again: nothing more is granted.
	if _, err := s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: ids["early"], Actor: "admin"}); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 1); got != string(fulfillment.DecisionAlreadyApplied) {
		t.Errorf("replayed by hand: %s, want already_applied", got)
	}
	if r, err := s.InboxInsert(ctx, first, []byte("{}")); err != nil || !r.Duplicate {
		t.Errorf("delivered again: %+v, %v; want a duplicate", r, err)
	}
	if n := count(t, conn, "SELECT count(*) FROM entitlements WHERE order_id = $1::uuid", order.ID); n != 2 {
		t.Errorf("licenses = %d, want 2", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM ledger_entries WHERE order_id = $1::uuid", order.ID); n != 1 {
		t.Errorf("ledger entries = %d, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE state = 'unmatched' AND id = ANY($1)",
		[]int64{ids["old"], ids["other-org"], ids["other-order"]}); n != 3 {
		t.Errorf("%d of the old, other org's and other order's events still unmatched, want 3", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'unmatched_payment' AND state = 'open'"); n != 3 {
		t.Errorf("%d unmatched_payment items open, want 3 (the ones that stay for a person)", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_work"); n != 0 {
		t.Errorf("%d work rows left", n)
	}
}

// Creates of the order racing each other and a replay of the payment by
// hand: the payment is queued again once and applied once, whoever wins.
func TestLateMatchConcurrentCreatesAndReplay(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	r, err := s.InboxInsert(ctx, refundEvent("early", "m-race", fulfillment.EventPaymentConfirmed, 20000), []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	processAll(t, s, 1)
	spec := creditLicenseSpec(t, "m-race")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, _, err := s.OrderCreate(ctx, spec); err != nil {
				t.Errorf("create: %v", err)
			}
		})
	}
	wg.Go(func() {
		// Refused when a create queued it first: it is pending then.
		_, _ = s.EventReplay(ctx, fulfillment.EventReplayRequest{ID: r.ID, Actor: "admin"})
	})
	wg.Wait()
	for n := count(t, conn, "SELECT count(*) FROM inbox_work WHERE state = 'pending'"); n > 0; n = count(t, conn,
		"SELECT count(*) FROM inbox_work WHERE state = 'pending'") {
		processAll(t, s, n)
	}
	if n := count(t, conn, "SELECT count(*) FROM orders WHERE merchant_order_id = 'm-race'"); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM entitlements"); n != 2 {
		t.Errorf("licenses = %d, want 2", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM ledger_entries"); n != 1 {
		t.Errorf("ledger entries = %d, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_replays WHERE replayed_by = $1", storage.LateMatchActor); n > 1 {
		t.Errorf("the service queued the payment %d times, want at most once", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE id = $1 AND state = 'processed'", r.ID); n != 1 {
		t.Errorf("the payment is not processed")
	}
}

// A payment decided unmatched while another transaction creates its
// order (or registers the payment attempt it names): neither sees what the
// other has not committed, yet the payment is queued again (by the
// creator, or by the decision itself) and applied. Each round races the
// decision of a payment with the creation.
func TestLateMatchPaymentRacesItsOrder(t *testing.T) {
	t.Parallel()
	for _, byStart := range []bool{false, true} {
		name := map[bool]string{false: "order", true: "payment start"}[byStart]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, conn := newOutboxStore(t)
			ctx := context.Background()
			const rounds = 20
			for i := range rounds {
				merchant := fmt.Sprintf("m-race-%d", i)
				ev := refundEvent("early-"+merchant, merchant, fulfillment.EventPaymentConfirmed, 20000)
				create := func() error {
					_, _, err := s.OrderCreate(ctx, creditLicenseSpec(t, merchant))
					return err
				}
				if byStart {
					order := creditLicenseOrder(t, s, merchant)
					ev.Payment.MerchantOrderID, ev.Payment.CheckoutSessionID = "", fulfillment.ProviderOrderID(order.ID, 1)
					create = func() error {
						_, _, err := s.StartBegin(ctx, startRequest(order.ID, false))
						return err
					}
				}
				r, err := s.InboxInsert(ctx, ev, []byte("{}"))
				if err != nil {
					t.Fatal(err)
				}
				if claims, err := s.InboxQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 10}); err != nil ||
					len(claims) != 1 {
					t.Fatalf("claim = %v, %v; want the payment", claims, err)
				}
				var wg sync.WaitGroup
				wg.Go(func() {
					if _, err := s.InboxProcess(ctx, []int64{r.ID}, "w"); err != nil {
						t.Error(err)
					}
				})
				wg.Go(func() {
					if err := create(); err != nil {
						t.Error(err)
					}
				})
				wg.Wait()
				if n := count(t, conn, "SELECT count(*) FROM inbox_work WHERE state = 'pending'"); n > 0 {
					processAll(t, s, n)
				}
			}
			if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE state <> 'processed'"); n != 0 {
				t.Errorf("%d payments left unmatched or unprocessed", n)
			}
			if n := count(t, conn, "SELECT count(*) FROM ledger_entries"); n != rounds {
				t.Errorf("%d orders paid, want %d", n, rounds)
			}
		})
	}
}

// A T-Bank payment naming an attempt's provider order id that arrives
// before the attempt is registered is decided unmatched; registering the
// attempt queues it again, and it is applied once, its item resolved as
// matched_later with the order.
func TestLateMatchPaymentBeforeItsStart(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	order := creditLicenseOrder(t, s, "m-start")
	ev := tbankEvent("early-start", fulfillment.EventPaymentConfirmed, 20000)
	ev.Payment.MerchantOrderID, ev.Payment.CheckoutSessionID = "", fulfillment.ProviderOrderID(order.ID, 1)
	r, err := s.InboxInsert(ctx, ev, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 1); got != string(fulfillment.DecisionUnmatched) {
		t.Fatalf("the payment before its attempt: %s, want unmatched", got)
	}

	start, ask, err := s.StartBegin(ctx, startRequest(order.ID, false))
	if err != nil || !ask || start.ProviderOrderID != ev.Payment.CheckoutSessionID {
		t.Fatalf("starting the payment: %+v, ask %v, %v; want attempt %s", start, ask, err, ev.Payment.CheckoutSessionID)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_work WHERE id = $1 AND state = 'pending'", r.ID); n != 1 {
		t.Fatalf("the payment is not queued again by its attempt's registration")
	}
	if n := count(t, conn, `SELECT count(*) FROM reconciliation_items
		WHERE inbox_event_id = $1 AND state = 'resolved' AND resolution = 'matched_later' AND order_id = $2::uuid`, r.ID, order.ID); n != 1 {
		t.Errorf("the payment's item is not resolved as matched_later with its order")
	}
	if got := processAll(t, s, 1); got != string(fulfillment.DecisionFulfilled) {
		t.Fatalf("the payment, processed again: %s, want fulfilled", got)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_events WHERE id = $1 AND decision_reason LIKE $2",
		r.ID, "%(late match: payment attempt "+start.ProviderOrderID+" of order "+order.ID+" was registered after this event)"); n != 1 {
		t.Errorf("the payment's decision does not say it came before its attempt")
	}
	// A second call for the attempt registers nothing, and queues nothing.
	if _, _, err := s.StartBegin(ctx, startRequest(order.ID, false)); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_work"); n != 0 {
		t.Errorf("%d work rows after the second call", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM entitlements WHERE order_id = $1::uuid", order.ID); n != 2 {
		t.Errorf("licenses = %d, want 2", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM ledger_entries WHERE order_id = $1::uuid", order.ID); n != 1 {
		t.Errorf("ledger entries = %d, want 1", n)
	}
}

// The one cycle the late-match locks leave: an order's creation holds its
// key's lock and waits to queue an event that a batch is deciding again,
// while the batch waits for that lock. PostgreSQL rolls the creation back
// (it waited first); the creation runs again, succeeds, and queues the
// event once.
func TestLateMatchCreateRunsAgainAfterADeadlock(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	r, err := s.InboxInsert(ctx, refundEvent("early", "m-deadlock", fulfillment.EventPaymentConfirmed, 20000), []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	processAll(t, s, 1)

	// The batch: it has written its decision of the event.
	bconn, err := pgx.Connect(ctx, conn.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bconn.Close(ctx) }()
	// The creation waits first, so its deadlock check runs first, unless
	// a loaded machine delays it past the batch's: the batch checks late.
	// (Only a superuser may set it; make test's is one.)
	if _, err := bconn.Exec(ctx, "SET deadlock_timeout = '60s'"); err != nil {
		t.Logf("the batch checks for deadlocks after the default time: %v", err)
	}
	batch, err := bconn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = batch.Rollback(ctx) }()
	if _, err := batch.Exec(ctx, "UPDATE inbox_events SET state = 'unmatched' WHERE id = $1", r.ID); err != nil {
		t.Fatal(err)
	}
	created := make(chan error, 1)
	go func() {
		_, _, err := s.OrderCreate(ctx, creditLicenseSpec(t, "m-deadlock"))
		created <- err
	}()
	// The creation waits for the event's row.
	deadline := time.Now().Add(10 * time.Second)
	for count(t, conn, `SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the order's creation did not come to wait for the event's row")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The batch takes the key's lock at its end, as a decision does.
	key := storage.OrderLockKey(fulfillment.OrderKey{OrgID: "org_a", Environment: fulfillment.EnvLive,
		Field: fulfillment.ByMerchantOrderID, Value: "m-deadlock"})
	if _, err := batch.Exec(ctx, "SELECT pg_advisory_xact_lock_shared($1, hashtext($2))", storage.LateMatchLock, key); err != nil {
		t.Fatalf("the batch's lock: %v (PostgreSQL chose the batch to roll back; the test means the creation, which waited first)", err)
	}
	if err := batch.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-created; err != nil {
		t.Fatalf("the order's creation after the deadlock: %v", err)
	}
	if n := count(t, conn, "SELECT count(*) FROM orders WHERE merchant_order_id = 'm-deadlock'"); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM inbox_replays WHERE inbox_event_id = $1 AND replayed_by = $2", r.ID, storage.LateMatchActor); n != 1 {
		t.Errorf("the service queued the payment %d times, want once", n)
	}
	if got := processAll(t, s, 1); got != string(fulfillment.DecisionFulfilled) {
		t.Errorf("the payment, processed again: %s, want fulfilled", got)
	}
	if n := count(t, conn, "SELECT count(*) FROM entitlements"); n != 2 {
		t.Errorf("licenses = %d, want 2", n)
	}
}
