package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// newPollStore is a store whose started payments are due for a poll at
// once.
func newPollStore(t *testing.T) (*storage.Store, *pgx.Conn) {
	t.Helper()
	url := pgtest.DB(t)
	ctx := context.Background()
	s, err := storage.Open(ctx, url, storage.Options{MaxConns: 10, StatusPollAfter: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return s, conn
}

// startedPayment starts payment paymentID for a new order; it returns the
// start.
func startedPayment(t *testing.T, s *storage.Store, merchantID, paymentID string) fulfillment.PaymentStart {
	t.Helper()
	ctx := context.Background()
	st, _, err := s.StartBegin(ctx, startRequest(rubOrder(t, s, merchantID), false))
	if err != nil {
		t.Fatal(err)
	}
	if st, err = s.StartFinish(ctx, st.ID, fulfillment.StartOutcome{State: fulfillment.StartStarted, PaymentID: paymentID}); err != nil {
		t.Fatal(err)
	}
	return st
}

// polled is what a poll of st's payment in status tells: a confirmation or
// an attempt still under way.
func polled(st fulfillment.PaymentStart, status string) fulfillment.ProviderEvent {
	kind := fulfillment.EventAttemptCreated
	if status == "CONFIRMED" {
		kind = fulfillment.EventPaymentConfirmed
	}
	return fulfillment.ProviderEvent{
		Provider: fulfillment.ProviderTBank, EndpointID: "tbank-live", OrgID: "org_a", Environment: fulfillment.EnvLive,
		EventID: "poll:T1:" + st.PaymentID + ":" + status, Type: status, Kind: kind,
		Payment: fulfillment.PaymentInfo{AttemptRef: st.PaymentID, PaymentID: st.PaymentID,
			CheckoutSessionID: st.ProviderOrderID, Amount: fulfillment.MinorAmount(19200, "RUB")},
	}
}

// A started payment is polled until its outcome is known; each answer is an
// inbox event (once per event id), processed by the same rules: polled and
// notified confirmations of one payment fulfil the order once.
func TestPollFeedsTheInbox(t *testing.T) {
	t.Parallel()
	s, conn := newPollStore(t)
	ctx := context.Background()
	st := startedPayment(t, s, "m-1", "501")

	claims, err := s.PollQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 5})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %v, %v; want the started payment's poll", claims, err)
	}
	got, known, err := s.PollLoad(ctx, claims[0].ID, "w")
	if err != nil || known || got.PaymentID != "501" {
		t.Fatalf("load = %+v, %v, %v", got, known, err)
	}
	if _, _, err := s.PollLoad(ctx, claims[0].ID, "other"); !errors.Is(err, worker.ErrLeaseLost) {
		t.Errorf("load by another owner = %v, want ErrLeaseLost", err)
	}
	// Not settled yet: the answer is stored, the poll stays pending.
	if err := s.PollRecord(ctx, claims[0].ID, "w", fulfillment.PollAnswer{Event: polled(st, "NEW"), Raw: []byte(`{"Status":"NEW"}`)}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := retryOne(ctx, s.PollQueue(), "w", worker.Claim{ID: claims[0].ID}, "payment 501 is NEW", time.Now(), 5); err != nil {
		t.Fatal(err)
	}
	// The notification comes, then the poll finds the same confirmation.
	if _, err := s.InboxInsert(ctx, confirmedRUB("n", "", st.ProviderOrderID, "501"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	claims, err = s.PollQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 5})
	if err != nil || len(claims) != 1 {
		t.Fatalf("second claim = %v, %v", claims, err)
	}
	for range 2 { // a poll answered twice stores one event
		if err := s.PollRecord(ctx, claims[0].ID, "w", fulfillment.PollAnswer{Event: polled(st, "CONFIRMED"), Raw: []byte(`{"Status":"CONFIRMED"}`)}, false); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PollRecord(ctx, claims[0].ID, "w", fulfillment.PollAnswer{}, true); err != nil {
		t.Fatal(err)
	}
	if got := processAll(t, s, 3); got != "attempt_recorded,fulfilled,already_applied" {
		t.Errorf("decisions %s", got)
	}
	if n := count(t, conn, "SELECT count(*) FROM entitlements WHERE order_id = $1::uuid", st.OrderID); n != 1 {
		t.Errorf("%d licenses, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM payment_polls WHERE state = 'done'"); n != 1 {
		t.Errorf("%d polls done, want 1", n)
	}
	if claims, err := s.PollQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 5}); err != nil || len(claims) != 0 {
		t.Errorf("claim after done = %v, %v; want none", claims, err)
	}
}

// A payment whose outcome a notification brought is known: the poller
// asks nothing.
func TestPollKnownOutcome(t *testing.T) {
	t.Parallel()
	s, _ := newPollStore(t)
	ctx := context.Background()
	st := startedPayment(t, s, "m-1", "601")
	if _, err := s.InboxInsert(ctx, confirmedRUB("n", "", st.ProviderOrderID, "601"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	processAll(t, s, 1)
	claims, err := s.PollQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 5})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim = %v, %v", claims, err)
	}
	if _, known, err := s.PollLoad(ctx, claims[0].ID, "w"); err != nil || !known {
		t.Errorf("load = known %v, %v; want the outcome known", known, err)
	}
}

// A started payment's order detail shows what became of its payment — the
// attempt as its notifications and polls recorded it, one row each — beside
// the start, which stays started: confirmed by a notification, confirmed
// by a poll, cancelled, not paid yet.
func TestStartedPaymentShowsItsOutcome(t *testing.T) {
	t.Parallel()
	s, conn := newPollStore(t)
	ctx := context.Background()
	notified := startedPayment(t, s, "m-1", "701")
	viaPoll := startedPayment(t, s, "m-2", "702")
	cancelled := startedPayment(t, s, "m-3", "703")
	unpaid := startedPayment(t, s, "m-4", "704")

	if _, err := s.InboxInsert(ctx, confirmedRUB("n", "", notified.ProviderOrderID, "701"), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	cancel := polled(cancelled, "CANCELED")
	cancel.EventID, cancel.Kind = "T1:703:CANCELED", fulfillment.EventAttemptCancelled
	if _, err := s.InboxInsert(ctx, cancel, []byte("{}")); err != nil {
		t.Fatal(err)
	}
	claims, err := s.PollQueue().Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 5})
	if err != nil || len(claims) != 4 {
		t.Fatalf("claim = %v, %v; want the four started payments' polls", claims, err)
	}
	for _, c := range claims {
		st, _, err := s.PollLoad(ctx, c.ID, "w")
		if err != nil {
			t.Fatal(err)
		}
		if st.ID == viaPoll.ID {
			if err := s.PollRecord(ctx, c.ID, "w", fulfillment.PollAnswer{Event: polled(st, "CONFIRMED"), Raw: []byte(`{"Status":"CONFIRMED"}`)}, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	processAll(t, s, 3)

	for _, tc := range []struct {
		start     fulfillment.PaymentStart
		order     fulfillment.State
		payment   fulfillment.AttemptState
		confirmed int
	}{
		{notified, fulfillment.StateFulfilled, fulfillment.AttemptConfirmed, 1},
		{viaPoll, fulfillment.StateFulfilled, fulfillment.AttemptConfirmed, 1},
		{cancelled, fulfillment.StatePendingPayment, fulfillment.AttemptCancelled, 0},
		{unpaid, fulfillment.StatePendingPayment, fulfillment.AttemptCreated, 0},
	} {
		d, err := s.OrderDetail(ctx, tc.start.OrderID)
		if err != nil {
			t.Fatal(err)
		}
		if d.State != tc.order || len(d.Starts) != 1 || d.Starts[0].State != fulfillment.StartStarted || d.Starts[0].PaymentState != tc.payment {
			t.Errorf("payment %s: order %s, starts %+v; want the order %s, its start started with its payment %s",
				tc.start.PaymentID, d.State, d.Starts, tc.order, tc.payment)
		}
		if n := count(t, conn, "SELECT count(*) FROM payment_attempts WHERE order_id = $1::uuid AND attempt_ref = $2 AND state = $3",
			tc.start.OrderID, tc.start.PaymentID, tc.payment); n != 1 {
			t.Errorf("payment %s: %d attempts %s, want 1", tc.start.PaymentID, n, tc.payment)
		}
		if n := count(t, conn, "SELECT count(*) FROM entitlements WHERE order_id = $1::uuid", tc.start.OrderID); n != tc.confirmed {
			t.Errorf("payment %s: %d licenses, want %d", tc.start.PaymentID, n, tc.confirmed)
		}
	}
}
