package storage_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
)

// rubOrder stores a live order of org_a for 192 RUB and returns its id.
func rubOrder(t *testing.T, s *storage.Store, merchantID string) string {
	t.Helper()
	spec, err := fulfillment.OrderDraft{
		OrgID: "org_a", Environment: "live", MerchantOrderID: merchantID,
		Lines: []fulfillment.LineDraft{{SKU: "gift-card", Kind: "license", Quantity: 1, Currency: "RUB", MinorUnits: 19200}},
	}.Validate()
	if err != nil {
		t.Fatal(err)
	}
	o, _, err := s.OrderCreate(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	return o.ID
}

func startRequest(orderID string, newAttempt bool) fulfillment.StartRequest {
	return fulfillment.StartRequest{OrderID: orderID, EndpointID: "tbank-live", Provider: fulfillment.ProviderTBank,
		NewAttempt: newAttempt, Busy: time.Minute}
}

// Concurrent calls for one order: one asks the provider, the others are
// told it is busy; none creates a second attempt.
func TestStartBeginConcurrent(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	order := rubOrder(t, s, "m-1")
	const callers = 10
	var (
		wg            sync.WaitGroup
		mu            sync.Mutex
		asked, busy   int
		start         = make(chan struct{})
		ctx           = context.Background()
		providerOrder string
	)
	for range callers {
		wg.Go(func() {
			<-start
			st, ask, err := s.StartBegin(ctx, startRequest(order, false))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, fulfillment.ErrStartBusy):
				busy++
			case err != nil:
				t.Error(err)
			case ask:
				asked++
				providerOrder = st.ProviderOrderID
			default:
				t.Errorf("a call returned %+v without asking", st)
			}
		})
	}
	close(start)
	wg.Wait()
	if asked != 1 || busy != callers-1 {
		t.Errorf("%d calls asked the provider, %d were told it is busy; want 1 and %d", asked, busy, callers-1)
	}
	if n := count(t, conn, "SELECT count(*) FROM payment_starts"); n != 1 {
		t.Errorf("%d payment starts, want 1", n)
	}
	if want := fulfillment.ProviderOrderID(order, 1); providerOrder != want {
		t.Errorf("provider order id %q, want %q", providerOrder, want)
	}
}

// A start the provider answered is returned as it is; one whose answer was
// lost is asked about again under the same id; a new attempt gets the next
// id; a finished start cannot be finished again.
func TestStartLifecycle(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	order := rubOrder(t, s, "m-1")

	req := startRequest(order, false)
	req.Busy = 0 // a call that dies leaves the attempt to the next one at once
	first, ask, err := s.StartBegin(ctx, req)
	if err != nil || !ask || first.Attempt != 1 || first.State != fulfillment.StartStarting || first.Amount != (fulfillment.Money{Currency: "RUB", MinorUnits: 19200}) {
		t.Fatalf("first start = %+v, %v, %v", first, ask, err)
	}
	again, ask, err := s.StartBegin(ctx, req)
	if err != nil || !ask || again.ID != first.ID || again.ProviderOrderID != first.ProviderOrderID {
		t.Fatalf("after a lost answer = %+v, %v, %v; want the same attempt asked about again", again, ask, err)
	}
	started, err := s.StartFinish(ctx, first.ID, fulfillment.StartOutcome{State: fulfillment.StartStarted, PaymentID: "8742591", PaymentURL: "https://pay.example/8742591"})
	if err != nil || started.State != fulfillment.StartStarted || started.PaymentURL != "https://pay.example/8742591" {
		t.Fatalf("finish = %+v, %v", started, err)
	}
	if _, err := s.StartFinish(ctx, first.ID, fulfillment.StartOutcome{State: fulfillment.StartFailed}); !errors.Is(err, fulfillment.ErrStartBusy) {
		t.Errorf("second finish = %v, want ErrStartBusy", err)
	}
	if n := count(t, conn, "SELECT count(*) FROM payment_attempts WHERE attempt_ref = '8742591' AND state = 'created'"); n != 1 {
		t.Errorf("%d payment attempts for the started payment, want 1", n)
	}
	repeat, ask, err := s.StartBegin(ctx, startRequest(order, false))
	if err != nil || ask || repeat.ID != first.ID || repeat.PaymentURL != started.PaymentURL {
		t.Errorf("repeated call = %+v, %v, %v; want the started attempt, not asked again", repeat, ask, err)
	}
	second, ask, err := s.StartBegin(ctx, startRequest(order, true))
	if err != nil || !ask || second.Attempt != 2 || second.ProviderOrderID == first.ProviderOrderID {
		t.Errorf("new attempt = %+v, %v, %v", second, ask, err)
	}
}

// A start left for review opens one duplicate_order_id item.
func TestStartReviewItem(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	st, _, err := s.StartBegin(ctx, startRequest(rubOrder(t, s, "m-1"), false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartFinish(ctx, st.ID, fulfillment.StartOutcome{State: fulfillment.StartReview, Detail: "amount differs"}); err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'duplicate_order_id' AND payment_start_id = $1 AND detail = 'amount differs'", st.ID); n != 1 {
		t.Errorf("%d duplicate_order_id items, want 1", n)
	}
}

// Only an order awaiting payment starts a payment; an order of an org the
// caller may not see is not found. A paid order's latest start is returned
// to a repeated call.
func TestStartBeginRefusals(t *testing.T) {
	t.Parallel()
	s, _ := newOutboxStore(t)
	ctx := context.Background()
	order := rubOrder(t, s, "m-1")
	hidden := startRequest(order, false)
	hidden.VisibleOrgs = []string{"org_b"}
	if _, _, err := s.StartBegin(ctx, hidden); !errors.Is(err, fulfillment.ErrNotFound) {
		t.Errorf("another org's order: %v, want ErrNotFound", err)
	}
	if _, _, err := s.StartBegin(ctx, startRequest("00000000-0000-0000-0000-000000000000", false)); !errors.Is(err, fulfillment.ErrNotFound) {
		t.Errorf("no such order: %v, want ErrNotFound", err)
	}
	if _, err := s.InboxInsert(ctx, confirmedRUB("e1", "m-1", "", "1"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	processAll(t, s, 1)
	if _, _, err := s.StartBegin(ctx, startRequest(order, false)); !errors.Is(err, fulfillment.ErrFailedPrecondition) {
		t.Errorf("a paid order: %v, want ErrFailedPrecondition", err)
	}
}

// A provider's notification names the attempt by its provider order id:
// it finds the order that started it, once, and an unknown id none.
func TestStartedPaymentMatchesItsOrder(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	order := rubOrder(t, s, "m-1")
	first, _, err := s.StartBegin(ctx, startRequest(order, false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StartFinish(ctx, first.ID, fulfillment.StartOutcome{State: fulfillment.StartStarted, PaymentID: "100"}); err != nil {
		t.Fatal(err)
	}
	second, _, err := s.StartBegin(ctx, startRequest(order, true))
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range []fulfillment.ProviderEvent{
		confirmedRUB("a", "", "unknown-1", "99"),
		confirmedRUB("b", "", second.ProviderOrderID, "101"), // the second attempt pays
		confirmedRUB("c", "", second.ProviderOrderID, "101"), // announced again
	} {
		if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
			t.Fatal(i, err)
		}
	}
	if got := processAll(t, s, 3); got != "unmatched,fulfilled,already_applied" {
		t.Errorf("decisions %s", got)
	}
	if n := count(t, conn, "SELECT count(*) FROM entitlements WHERE order_id = $1::uuid", order); n != 1 {
		t.Errorf("%d licenses, want 1", n)
	}
	if id, err := s.StartKnownPaymentID(ctx, second); err != nil || id != "101" {
		t.Errorf("known payment id of the second attempt = %q, %v; want 101", id, err)
	}
	if id, err := s.StartKnownPaymentID(ctx, first); err != nil || id != "" {
		t.Errorf("known payment id of the first attempt = %q, %v; want none", id, err)
	}
	// The first start recorded its payment's attempt (created); the
	// second's was recorded by its confirmation, once, and a later
	// confirmation of the first payment updates the row the start wrote.
	if _, err := s.InboxInsert(ctx, confirmedRUB("d", "", first.ProviderOrderID, "100"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	processAll(t, s, 1)
	var attempts string
	if err := conn.QueryRow(ctx, `SELECT string_agg(attempt_ref || '=' || state, ',' ORDER BY attempt_ref)
		FROM payment_attempts WHERE order_id = $1::uuid`, order).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	if attempts != "100=confirmed,101=confirmed" {
		t.Errorf("attempts %s, want 100=confirmed,101=confirmed", attempts)
	}
}

// confirmedRUB is a T-Bank-like confirmation of 192 RUB naming its order by
// merchant order id or by checkout session (the provider order id).
func confirmedRUB(id, merchantOrderID, session, paymentID string) fulfillment.ProviderEvent {
	return fulfillment.ProviderEvent{
		Provider: fulfillment.ProviderTBank, EndpointID: "tbank-live", OrgID: "org_a", Environment: fulfillment.EnvLive,
		EventID: "T1:" + paymentID + ":CONFIRMED:" + id, Type: "CONFIRMED", Kind: fulfillment.EventPaymentConfirmed,
		Payment: fulfillment.PaymentInfo{AttemptRef: paymentID, PaymentID: paymentID, CheckoutSessionID: session,
			MerchantOrderID: merchantOrderID, Amount: fulfillment.MinorAmount(19200, "RUB")},
	}
}

// Finishing a payment start records its payment's attempt under the order's
// row lock, as every decision about the order writes its attempts: a
// decision that read the order's attempts under that lock cannot meet the
// attempt inserted meanwhile. StartFinish waits for a holder of the lock.
func TestStartFinishTakesTheOrderLock(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	order := rubOrder(t, s, "m-1")
	st, _, err := s.StartBegin(ctx, startRequest(order, false))
	if err != nil {
		t.Fatal(err)
	}
	holder, holderPID := holdOrderLock(t, conn, "id = $1::uuid", order)
	done := make(chan error, 1)
	go func() {
		_, err := s.StartFinish(ctx, st.ID, fulfillment.StartOutcome{State: fulfillment.StartStarted, PaymentID: "100"})
		done <- err
	}()
	waitForLockWaiter(t, conn, holderPID, "StartFinish", done)
	if n := count(t, conn, "SELECT count(*) FROM payment_attempts WHERE order_id = $1::uuid", order); n != 0 {
		t.Errorf("%d attempts recorded while the order was locked, want none", n)
	}
	if err := holder.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := count(t, conn, "SELECT count(*) FROM payment_attempts WHERE order_id = $1::uuid AND attempt_ref = '100'", order); n != 1 {
		t.Errorf("%d attempts recorded, want 1", n)
	}
}
