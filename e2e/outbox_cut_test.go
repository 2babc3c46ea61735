package e2e_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

// payLines creates a live order of n external lines to destination dest
// and pays it: n messages to dest.
func (s *stack) payLines(t *testing.T, merchantOrderID, dest string, n int) *fulfillmentv1.Order {
	t.Helper()
	req := &fulfillmentv1.CreateOrderRequest{
		OrgId: orgA, Environment: "live", MerchantOrderId: merchantOrderID,
		Settlement: &fulfillmentv1.Settlement{Token: "USDT", Network: "TRON", Amount: "25.000000"},
	}
	for range n {
		req.Lines = append(req.Lines, &fulfillmentv1.OrderLine{Sku: "box", Kind: "external", Quantity: 1,
			UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 100}, Destination: dest})
	}
	resp, err := s.client.CreateOrder(authed(orgAToken), req)
	if err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	s.pay(t, merchantOrderID)
	return resp.GetOrder()
}

// deliveredOnce waits until the receiver applied each of order's n lines,
// and checks each once.
func deliveredOnce(t *testing.T, r *receiver.Receiver, order *fulfillmentv1.Order, n int) {
	t.Helper()
	waitFor(t, "every line delivered", func() bool { return r.TotalEffects() >= n })
	for line := range n { // the lines, numbered from 0
		if e := r.Effects(fulfillment.LineKey(order.GetId(), line)); e != 1 {
			t.Errorf("line %d applied %d times, want once", line, e)
		}
	}
}

// A claimed batch of an idempotent destination starts no more requests
// once the destination answers 410 or a person disables it: the messages
// not sent wait, their claims not counted, and each is delivered once
// when the destination is enabled again.
func TestOutboxBatchStopsForADisabledDestination(t *testing.T) {
	t.Parallel()
	t.Run("410 Gone", func(t *testing.T) {
		t.Parallel()
		r := startReceiver(t, true, receiver.Always(receiver.Action{Status: 410}))
		d := destination(t, "gone", r, true, 5*time.Second)
		d.Concurrency = 2
		s := startReplicaWith(t, pgtest.DB(t), withDestinations(d))
		order := s.payLines(t, "gone-batch", "gone", 40)
		waitFor(t, "disabled", func() bool {
			return s.count(t, "SELECT count(*) FROM outbox_destinations WHERE id = 'gone' AND disabled_at IS NOT NULL") == 1
		})
		time.Sleep(300 * time.Millisecond) // several claim polls
		if n := r.TotalRequests(); n > d.Concurrency {
			t.Errorf("the destination answered 410 and received %d requests, want at most its concurrency (%d)", n, d.Concurrency)
		}
		if n := s.count(t, `SELECT count(*) FROM outbox_work w JOIN outbox_messages m ON m.id = w.id
			WHERE m.destination_id = 'gone' AND m.state = 'pending' AND w.attempts = 0 AND w.lease_owner IS NULL`); n != 40 {
			t.Errorf("%d messages wait unleased with no attempt counted, want 40", n)
		}
		if n, sent := s.count(t, `SELECT count(*) FROM outbox_attempts a JOIN outbox_messages m ON m.id = a.message_id
			WHERE m.destination_id = 'gone'`), r.TotalRequests(); n != sent {
			t.Errorf("%d attempts recorded, want one per request made (%d)", n, sent)
		}
		r.SetPlan(nil)
		if _, err := s.client.EnableDestination(authed(adminToken), &fulfillmentv1.EnableDestinationRequest{DestinationId: "gone"}); err != nil {
			t.Fatal(err)
		}
		deliveredOnce(t, r, order, 40)
	})
	t.Run("disabled by a person", func(t *testing.T) {
		t.Parallel()
		r := startReceiver(t, true, receiver.Always(receiver.Action{Before: 200 * time.Millisecond}))
		d := destination(t, "slow", r, true, 5*time.Second)
		d.Concurrency = 1
		s := startReplicaWith(t, pgtest.DB(t), withDestinations(d))
		order := s.payLines(t, "slow-batch", "slow", 30)
		waitFor(t, "the first request", func() bool { return r.TotalRequests() >= 1 })
		if _, err := s.client.DisableDestination(authed(adminToken),
			&fulfillmentv1.DisableDestinationRequest{DestinationId: "slow", Reason: "incident: stop now"}); err != nil {
			t.Fatal(err)
		}
		at := r.TotalRequests()
		time.Sleep(2 * time.Second)
		// Within about a second (disabledCheck) of requests of 200 ms each:
		// the one in flight and at most five more.
		if after := r.TotalRequests(); after-at > 6 {
			t.Errorf("%d requests started in the 2 s after the destination was disabled, want at most 6 (those of about a second)", after-at)
		}
		if n := s.count(t, "SELECT count(*) FROM outbox_work WHERE lease_owner IS NOT NULL"); n != 0 {
			t.Errorf("%d messages still leased, want the ones not sent handed back", n)
		}
		r.SetPlan(nil)
		if _, err := s.client.EnableDestination(authed(adminToken), &fulfillmentv1.EnableDestinationRequest{DestinationId: "slow"}); err != nil {
			t.Fatal(err)
		}
		deliveredOnce(t, r, order, 30)
	})
}

// A worker that stops starts no more requests of its claimed batch: the
// service stops within about the destination's timeout (the request in
// flight), not after every message's, and another instance delivers the
// rest, each once.
func TestOutboxBatchStopsWithItsWorker(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	r := startReceiver(t, true, receiver.Always(receiver.Action{Before: time.Hour}))
	d := destination(t, "hang", r, true, time.Second)
	d.Concurrency = 1
	cfg := testConfig(db)
	withDestinations(d)(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, err := app.New(ctx, cfg, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	<-a.Ready()
	s := stackOf(t, a, db)
	order := s.payLines(t, "hang-batch", "hang", 30)
	waitFor(t, "the first request", func() bool { return r.TotalRequests() >= 1 })
	at, start := r.TotalRequests(), time.Now()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("stopping: %v", err)
	}
	took := time.Since(start)
	if after := r.TotalRequests(); after-at > 1 || took > 5*time.Second {
		t.Errorf("the stop took %v and started %d requests, want about the 1 s timeout of the one in flight and none new",
			took.Round(time.Millisecond), after-at)
	}
	r.SetPlan(nil)
	startReplicaWith(t, db, withDestinations(d))
	deliveredOnce(t, r, order, 30)
}
