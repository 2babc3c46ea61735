package e2e_test

// The outbox API: a person finds an uncertain delivery, looks at its
// attempts, checks with the destination and retries it under the same key;
// destinations are disabled and enabled by hand; every read is org-scoped.

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

func TestOutboxAPI(t *testing.T) {
	t.Parallel()
	// The first request of every key is applied, and its answer lost.
	blind := startReceiver(t, false, slowOnce)
	s := startReplicaWith(t, pgtest.DB(t), withDestinations(destination(t, "blind", blind, false, 300*time.Millisecond)))
	order := s.createExternalOrder(t, "api-1", "blind")
	s.pay(t, "api-1")
	key := fulfillment.LineKey(order.GetId(), 1)
	waitFor(t, "uncertain", func() bool { return s.message(t, key) == "uncertain" })

	admin := authed(adminToken)
	list, err := s.client.ListOutboxMessages(admin, &fulfillmentv1.ListOutboxMessagesRequest{State: "uncertain"})
	if err != nil || len(list.GetMessages()) != 1 {
		t.Fatalf("uncertain messages: %v, %v; want 1", list, err)
	}
	m := list.GetMessages()[0]
	for env, want := range map[string]int{m.GetEnvironment(): 1, map[string]string{"live": "test", "test": "live"}[m.GetEnvironment()]: 0} {
		if l, err := s.client.ListOutboxMessages(admin, &fulfillmentv1.ListOutboxMessagesRequest{State: "uncertain", Environment: env}); err != nil || len(l.GetMessages()) != want {
			t.Errorf("uncertain messages of environment %s: %v, %v; want %d", env, l, err, want)
		}
	}
	_, err = s.client.ListOutboxMessages(admin, &fulfillmentv1.ListOutboxMessagesRequest{Environment: "prod"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "environment: must be") {
		t.Errorf("messages of environment prod: %v, want InvalidArgument", err)
	}
	if m.GetIdempotencyKey() != key || m.GetOrderId() != order.GetId() || m.GetLineNo() != 1 || !m.GetRequired() || m.GetPayload() != "" {
		t.Errorf("listed message = %v", m)
	}
	got, err := s.client.GetOutboxMessage(admin, &fulfillmentv1.GetOutboxMessageRequest{MessageId: m.GetId()})
	if err != nil {
		t.Fatal(err)
	}
	h := got.GetMessage().GetAttemptHistory()
	if len(h) != 1 || h[0].GetOutcome() != "uncertain" || got.GetMessage().GetPayload() == "" {
		t.Errorf("message history = %v, payload %q; want one uncertain attempt", h, got.GetMessage().GetPayload())
	}
	// The item names the message.
	items, err := s.client.ListReconciliationItems(admin, &fulfillmentv1.ListReconciliationItemsRequest{Kind: "uncertain_delivery"})
	if err != nil || len(items.GetItems()) != 1 || items.GetItems()[0].GetOutboxMessageId() != m.GetId() {
		t.Errorf("uncertain_delivery items = %v, %v; want one naming message %s", items, err, m.GetId())
	}
	// GetOrder shows the delivery.
	detail, err := s.client.GetOrder(authed(orgAToken), &fulfillmentv1.GetOrderRequest{OrderId: order.GetId()})
	if err != nil || len(detail.GetOrder().GetHistory().GetDeliveries()) != 1 ||
		detail.GetOrder().GetHistory().GetDeliveries()[0].GetState() != "uncertain" {
		t.Errorf("GetOrder deliveries = %v, %v", detail.GetOrder().GetHistory().GetDeliveries(), err)
	}

	// Only admin retries; a delivered message is not retried.
	if _, err := s.client.RetryOutboxMessage(authed(orgAToken), &fulfillmentv1.RetryOutboxMessageRequest{MessageId: m.GetId()}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("retry by org-a: %v, want PermissionDenied", err)
	}
	code, body := s.rest(t, "POST", "/v1/outbox/messages/"+m.GetId()+":retry", adminToken, map[string]any{})
	if code != http.StatusOK || body["message"].(map[string]any)["state"] != "pending" {
		t.Fatalf("REST retry = %d %v", code, body)
	}
	waitFor(t, "delivered after the retry", func() bool { return s.message(t, key) == "delivered" })
	if n, e := blind.Requests(key), blind.Effects(key); n != 2 || e != 2 {
		t.Errorf("receiver: %d requests, %d effects; want 2 of each (the person retried a message that had arrived)", n, e)
	}
	if st := s.effects(t, order.GetId()).State; st != "fulfilled" {
		t.Errorf("order is %s after the retried delivery, want fulfilled", st)
	}
	// Its item is answered: the service resolved it.
	item, err := s.client.GetReconciliationItem(admin, &fulfillmentv1.GetReconciliationItemRequest{ItemId: items.GetItems()[0].GetId()})
	if it := item.GetItem(); err != nil || it.GetState() != "resolved" || it.GetResolution() != "retried" || it.GetResolvedBy() != "service" ||
		!strings.Contains(it.GetResolutionNote(), "delivered to blind") {
		t.Errorf("the uncertain_delivery item after the retried delivery: %v, %v; want resolved retried by the service", item, err)
	}
	_, err = s.client.RetryOutboxMessage(admin, &fulfillmentv1.RetryOutboxMessageRequest{MessageId: m.GetId()})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("retry of a delivered message: %v, want FailedPrecondition", err)
	}

	// Bad input: a clear error, nothing changed.
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/v1/outbox/messages/abc", http.StatusBadRequest},
		{"/v1/outbox/messages/999999", http.StatusNotFound},
		{"/v1/outbox/messages?state=lost", http.StatusBadRequest},
		{"/v1/outbox/messages?destination_id=Bad%20Id", http.StatusBadRequest},
	} {
		if code, body := s.rest(t, "GET", tc.path, adminToken, nil); code != tc.want {
			t.Errorf("GET %s = %d %v, want %d", tc.path, code, body, tc.want)
		}
	}
	if code, _ := s.rest(t, "GET", "/v1/outbox/messages", orgAToken, nil); code != http.StatusForbidden {
		t.Errorf("listing without outbox:read = %d, want 403", code)
	}

	// Disable by hand (with a reason), then enable.
	if code, body := s.rest(t, "POST", "/v1/outbox/destinations/blind:disable", adminToken, map[string]any{}); code != http.StatusBadRequest {
		t.Errorf("disable without a reason = %d %v, want 400", code, body)
	}
	if code, _ := s.rest(t, "POST", "/v1/outbox/destinations/nope:disable", adminToken, map[string]any{"reason": "x"}); code != http.StatusNotFound {
		t.Errorf("disable of an unknown destination = %d, want 404", code)
	}
	code, body = s.rest(t, "POST", "/v1/outbox/destinations/blind:disable", adminToken, map[string]any{"reason": "maintenance"})
	if enabled, _ := body["destination"].(map[string]any)["enabled"].(bool); code != http.StatusOK || enabled {
		t.Fatalf("disable = %d %v", code, body)
	}
	second := s.createExternalOrder(t, "api-2", "blind")
	s.pay(t, "api-2")
	key2 := fulfillment.LineKey(second.GetId(), 1)
	waitFor(t, "queued", func() bool { return s.message(t, key2) == "pending" })
	time.Sleep(200 * time.Millisecond) // several claim polls
	if n := blind.Requests(key2); n != 0 {
		t.Fatalf("a disabled destination received %d requests", n)
	}
	dests, err := s.client.ListDestinations(admin, &fulfillmentv1.ListDestinationsRequest{})
	if err != nil || len(dests.GetDestinations()) != 1 || dests.GetDestinations()[0].GetEnabled() || dests.GetDestinations()[0].GetPending() != 1 {
		t.Errorf("destinations = %v, %v; want blind disabled with 1 pending", dests, err)
	}
	if _, err := s.client.EnableDestination(admin, &fulfillmentv1.EnableDestinationRequest{DestinationId: "blind"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "uncertain after enabling (the receiver loses the first answer)", func() bool { return s.message(t, key2) == "uncertain" })
}

// A message waiting out a long backoff is sent at once when a person asks;
// a delivered one is sent again under its key only when resend is asked,
// and a second resend while the first is queued sends nothing more.
func TestOutboxRetryNowAndResend(t *testing.T) {
	t.Parallel()
	crm := startReceiver(t, true, receiver.FailFirst(1, 503))
	s := startReplicaWith(t, pgtest.DB(t), func(c *config.Config) {
		withDestinations(destination(t, "crm", crm, true, time.Second))(c)
		c.Outbox.BaseBackoff, c.Outbox.MaxBackoff = time.Hour, time.Hour
	})
	order := s.createExternalOrder(t, "now-1", "crm")
	s.pay(t, "now-1")
	key := fulfillment.LineKey(order.GetId(), 1)
	waitFor(t, "the first attempt", func() bool { return crm.Requests(key) == 1 })
	admin := authed(adminToken)
	var id string
	waitFor(t, "the message waiting out its backoff", func() bool {
		list, err := s.client.ListOutboxMessages(admin, &fulfillmentv1.ListOutboxMessagesRequest{State: "pending", DestinationId: "crm"})
		if err != nil || len(list.GetMessages()) != 1 || list.GetMessages()[0].GetAttempts() != 1 {
			return false
		}
		id = list.GetMessages()[0].GetId()
		return list.GetMessages()[0].GetNextAttemptTime().AsTime().After(time.Now().Add(30 * time.Minute))
	})

	resp, err := s.client.RetryOutboxMessage(admin, &fulfillmentv1.RetryOutboxMessageRequest{MessageId: id})
	if err != nil || resp.GetMessage().GetState() != "pending" {
		t.Fatalf("retry now = %v, %v; want pending", resp, err)
	}
	waitFor(t, "delivered at once", func() bool { return s.message(t, key) == "delivered" })
	// Its attempts were kept: the delivery is its second attempt.
	got, err := s.client.GetOutboxMessage(admin, &fulfillmentv1.GetOutboxMessageRequest{MessageId: id})
	if h := got.GetMessage().GetAttemptHistory(); err != nil || len(h) != 2 || h[0].GetAttempt() != 1 || h[1].GetAttempt() != 2 || h[1].GetOutcome() != "delivered" {
		t.Fatalf("attempts after the retry now: %v, %v; want 1 (503) then 2 (delivered)", h, err)
	}
	if st := s.effects(t, order.GetId()).State; st != "fulfilled" {
		t.Fatalf("order is %s, want fulfilled", st)
	}

	// Delivered: refused without resend, nothing changes.
	_, err = s.client.RetryOutboxMessage(admin, &fulfillmentv1.RetryOutboxMessageRequest{MessageId: id})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(status.Convert(err).Message(), "pass resend") {
		t.Fatalf("retry of a delivered message = %v, want FailedPrecondition naming resend", err)
	}
	if n := crm.Requests(key); n != 2 || s.message(t, key) != "delivered" {
		t.Fatalf("after a refused retry: %d requests, message %s; want 2, delivered", n, s.message(t, key))
	}

	// Two people resend while the first resend is still queued (the
	// destination is disabled meanwhile, so it cannot be sent in between):
	// one more request, under the same key.
	if _, err := s.client.DisableDestination(admin, &fulfillmentv1.DisableDestinationRequest{DestinationId: "crm", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() {
			_, errs[i] = s.client.RetryOutboxMessage(admin, &fulfillmentv1.RetryOutboxMessageRequest{MessageId: id, Resend: true})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Errorf("concurrent resend: %v", err)
		}
	}
	if _, err := s.client.EnableDestination(admin, &fulfillmentv1.EnableDestinationRequest{DestinationId: "crm"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "delivered again", func() bool { return crm.Requests(key) >= 3 && s.message(t, key) == "delivered" })
	time.Sleep(300 * time.Millisecond) // several claim polls: a second resend would have been sent by now
	if n, e := crm.Requests(key), crm.Effects(key); n != 3 || e != 1 {
		t.Errorf("receiver: %d requests, %d effects of %s; want 3 and 1 (one resend, applied once by key)", n, e, key)
	}
	if st := s.effects(t, order.GetId()).State; st != "fulfilled" {
		t.Errorf("order is %s after the resend, want fulfilled", st)
	}
	var fulfilledEvents int
	if err := s.db.QueryRow(context.Background(), `SELECT count(*) FROM order_events WHERE order_id = $1 AND topic = 'order.fulfilled'`,
		order.GetId()).Scan(&fulfilledEvents); err != nil || fulfilledEvents != 1 {
		t.Errorf("order.fulfilled events = %d, %v; want 1", fulfilledEvents, err)
	}
	code, body := s.rest(t, "POST", "/v1/outbox/messages/"+id+":retry", adminToken, map[string]any{"resend": "yes"})
	if code != http.StatusBadRequest {
		t.Errorf("REST resend with a string = %d %v, want 400", code, body)
	}
}
