package e2e_test

// The outbox against real HTTP receivers that count effects by idempotency
// key and fail on demand: what a receiver applied, counted, after flaky
// answers, timeouts, 410 and a destination that never answers.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
	"github.com/fulfillplatform/fulfillment/rig/receiver"
)

// outboxSecret signs every delivery of these tests (the Standard Webhooks
// documentation's example secret).
const outboxSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func outboxKey(t *testing.T) stdwebhooks.Secret {
	t.Helper()
	k, err := stdwebhooks.ParseSecret(outboxSecret)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// startReceiver runs a receiver verifying outboxSecret.
func startReceiver(t *testing.T, idempotent bool, plan receiver.Plan) *receiver.Receiver {
	t.Helper()
	return receiver.Start(t, receiver.Options{Secrets: []stdwebhooks.Secret{outboxKey(t)}, Idempotent: idempotent, Plan: plan})
}

// destination posts to r, subscribed to events.
func destination(t *testing.T, id string, r *receiver.Receiver, idempotent bool, timeout time.Duration, events ...string) config.Destination {
	t.Helper()
	return config.Destination{
		ID: id, URL: r.URL(), Idempotent: &idempotent, Timeout: timeout, Events: events,
		Keys: []stdwebhooks.Secret{outboxKey(t)},
	}.WithDefaults()
}

// withDestinations configures dests, with a dispatcher that retries fast.
func withDestinations(dests ...config.Destination) func(*config.Config) {
	return func(c *config.Config) {
		c.Destinations = dests
		c.Outbox = config.Queue{Lease: 5 * time.Second, Poll: 50 * time.Millisecond,
			BaseBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	}
}

// createExternalOrder creates a live order for org_a, paid by event(...):
// one license, and one external line per destination.
func (s *stack) createExternalOrder(t *testing.T, merchantOrderID string, destinations ...string) *fulfillmentv1.Order {
	t.Helper()
	req := &fulfillmentv1.CreateOrderRequest{
		OrgId: orgA, Environment: "live", MerchantOrderId: merchantOrderID,
		Lines: []*fulfillmentv1.OrderLine{
			{Sku: defaultSKU, Kind: "license", Quantity: 1, UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 500}},
		},
		Settlement: &fulfillmentv1.Settlement{Token: "USDT", Network: "TRON", Amount: "25.000000"},
	}
	for _, d := range destinations {
		req.Lines = append(req.Lines, &fulfillmentv1.OrderLine{Sku: "box-" + d, Kind: "external", Quantity: 1,
			UnitPrice: &fulfillmentv1.Money{Currency: "USD", MinorUnits: 500}, Destination: d})
	}
	resp, err := s.client.CreateOrder(authed(orgAToken), req)
	if err != nil {
		t.Fatalf("CreateOrder: %v", err)
	}
	return resp.GetOrder()
}

// pay sends the confirmation paying the order with merchantOrderID.
func (s *stack) pay(t *testing.T, merchantOrderID string) {
	t.Helper()
	s.sendOK(t, event(yolfi.TypePaymentConfirmed, merchantOrderID, "inv_"+merchantOrderID))
}

// waitFor polls cond until it holds, for at most 30s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s after 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// message is the state of the message under key.
func (s *stack) message(t *testing.T, key string) string {
	t.Helper()
	var st string
	_ = s.db.QueryRow(context.Background(), "SELECT state FROM outbox_messages WHERE idempotency_key = $1", key).Scan(&st)
	return st
}

// Flaky 500s then success: one effect per message, every attempt recorded,
// and the order fulfilled once its line is delivered — announced to the
// subscribers, like the fulfillment of an order without external lines.
func TestOutboxFlakyReceiverOneEffect(t *testing.T) {
	t.Parallel()
	flaky := startReceiver(t, true, receiver.FailFirst(2, 500))
	crm := startReceiver(t, false, nil)
	s := startReplicaWith(t, pgtest.DB(t), withDestinations(
		destination(t, "licenses", flaky, true, 5*time.Second),
		destination(t, "crm", crm, false, 5*time.Second, "order.fulfilled")))

	order := s.createExternalOrder(t, "ext-flaky", "licenses")
	plain := s.createOrder(t, "live", "plain-1")
	s.pay(t, "ext-flaky")
	s.sendOK(t, event(yolfi.TypePaymentConfirmed, "plain-1", "inv_plain-1"))

	line := fulfillment.LineKey(order.GetId(), 1)
	fulfilled := fulfillment.EventKey(order.GetId(), fulfillment.TopicOrderFulfilled)
	plainFulfilled := fulfillment.EventKey(plain.GetId(), fulfillment.TopicOrderFulfilled)
	waitFor(t, "announced as fulfilled", func() bool { return crm.Effects(fulfilled) == 1 && crm.Effects(plainFulfilled) == 1 })

	if n, e := flaky.Requests(line), flaky.Effects(line); n != 3 || e != 1 {
		t.Errorf("line message: %d requests, %d effects; want 3 requests (500, 500, 200) and 1 effect", n, e)
	}
	if got := s.effects(t, order.GetId()); got.State != "fulfilled" || got.Licenses != 1 {
		t.Errorf("order: %v, want fulfilled with its license", got)
	}
	if n := s.count(t, `SELECT count(*) FROM outbox_attempts a JOIN outbox_messages m ON m.id = a.message_id
		WHERE m.idempotency_key = $1`, line); n != 3 {
		t.Errorf("%d attempts recorded for the line message, want 3", n)
	}
	d, _ := flaky.Last(line)
	if !strings.Contains(string(d.Body), `"type": "fulfillment.requested"`) || d.Header.Get("Idempotency-Key") != line {
		t.Errorf("delivery: key %q, body %s", d.Header.Get("Idempotency-Key"), d.Body)
	}
	if got := crm.Doubled(); len(got) != 0 || crm.TotalEffects() != 2 || flaky.Forged() != 0 {
		t.Errorf("crm: doubled %v, %d effects (want 2); forged %d", got, crm.TotalEffects(), flaky.Forged())
	}
}

// slowOnce answers the first request of every key after 3 s, longer than
// the destinations' timeouts here: the receiver applied it, and its answer
// is lost. Later requests are answered at once.
func slowOnce(_ string, n int) receiver.Action {
	if n == 1 {
		return receiver.Action{After: 3 * time.Second}
	}
	return receiver.Action{}
}

// A timeout after the receiver applied the message: retried with the same
// key when the receiver honours it (one effect); never sent again when it
// does not — the message is uncertain, with an item, after exactly one
// request.
func TestOutboxTimeouts(t *testing.T) {
	t.Parallel()
	idem := startReceiver(t, true, slowOnce)
	blind := startReceiver(t, false, slowOnce)
	s := startReplicaWith(t, pgtest.DB(t), withDestinations(
		destination(t, "idem", idem, true, 300*time.Millisecond),
		destination(t, "blind", blind, false, 300*time.Millisecond)))
	order := s.createExternalOrder(t, "ext-slow", "idem", "blind")
	s.pay(t, "ext-slow")

	idemKey, blindKey := fulfillment.LineKey(order.GetId(), 1), fulfillment.LineKey(order.GetId(), 2)
	waitFor(t, "delivered to idem", func() bool { return s.message(t, idemKey) == "delivered" })
	waitFor(t, "uncertain at blind", func() bool { return s.message(t, blindKey) == "uncertain" })
	if n, e := idem.Requests(idemKey), idem.Effects(idemKey); n < 2 || e != 1 {
		t.Errorf("idempotent receiver: %d requests, %d effects; want a retry and 1 effect", n, e)
	}
	if n, e := blind.Requests(blindKey), blind.Effects(blindKey); n != 1 || e != 1 {
		t.Errorf("non-idempotent receiver: %d requests, %d effects; want exactly 1 of each", n, e)
	}
	got := s.effects(t, order.GetId())
	if got.State != "fulfilling" || got.Items["uncertain_delivery"] != 1 {
		t.Errorf("order: %v; want fulfilling with one uncertain_delivery item", got)
	}
}

// 410 Gone disables the destination, which is then left alone, while
// another destination goes on.
func TestOutboxGoneDisablesDestination(t *testing.T) {
	t.Parallel()
	gone := startReceiver(t, true, receiver.Always(receiver.Action{Status: 410}))
	ok := startReceiver(t, true, nil)
	s := startReplicaWith(t, pgtest.DB(t), withDestinations(
		destination(t, "gone", gone, true, 5*time.Second),
		destination(t, "ok", ok, true, 5*time.Second)))
	first := s.createExternalOrder(t, "gone-1", "gone")
	s.pay(t, "gone-1")
	waitFor(t, "disabled", func() bool {
		return s.count(t, "SELECT count(*) FROM outbox_destinations WHERE id = 'gone' AND disabled_at IS NOT NULL") == 1
	})
	// More for both; the healthy one's are delivered, then the disabled
	// one still has had its one request only.
	second := s.createExternalOrder(t, "gone-2", "gone", "ok")
	s.pay(t, "gone-2")
	waitFor(t, "delivered to ok", func() bool { return ok.Effects(fulfillment.LineKey(second.GetId(), 2)) == 1 })
	time.Sleep(300 * time.Millisecond) // several claim polls
	if n := gone.Requests(fulfillment.LineKey(first.GetId(), 1)) + gone.Requests(fulfillment.LineKey(second.GetId(), 1)); n != 1 {
		t.Errorf("the disabled destination received %d requests, want 1 (the one answered 410)", n)
	}
	if n := s.count(t, "SELECT count(*) FROM outbox_messages WHERE destination_id = 'gone' AND state = 'pending'"); n != 2 {
		t.Errorf("%d messages wait for the disabled destination, want 2", n)
	}
}

// A destination that answers 429 with a Retry-After is sent nothing else
// until that wait ends — messages that came meanwhile included — and then
// each message is delivered once; the one refused is attempted twice, the
// others once.
func TestOutboxRetryAfterHoldsTheDestination(t *testing.T) {
	t.Parallel()
	const wait = 2 * time.Second
	var (
		mu      sync.Mutex
		refused time.Time   // when the 429 was answered
		after   []time.Time // when each other request came
	)
	busy := startReceiver(t, true, func(string, int) receiver.Action {
		mu.Lock()
		defer mu.Unlock()
		if refused.IsZero() {
			refused = time.Now()
			return receiver.Action{Status: 429, RetryAfter: strconv.Itoa(int(wait / time.Second))}
		}
		after = append(after, time.Now())
		return receiver.Action{}
	})
	d := destination(t, "busy", busy, true, 5*time.Second)
	d.Concurrency = 1
	s := startReplicaWith(t, pgtest.DB(t), withDestinations(d))
	first := s.createExternalOrder(t, "busy-0", "busy")
	s.pay(t, "busy-0")
	waitFor(t, "the first request refused", func() bool { mu.Lock(); defer mu.Unlock(); return !refused.IsZero() })
	// The hold is on /metrics once the answer is read.
	const heldUntil = "fulfillment_outbox_destination_held_until_timestamp_seconds"
	waitFor(t, "the hold on /metrics", func() bool { return strings.Contains(scrape(t, s.restURL).text, heldUntil) })
	mu.Lock()
	ends := time.Unix(0, int64(scrape(t, s.restURL).value(t, heldUntil, "destination", "busy")*1e9))
	if ends.Before(refused.Add(wait)) || ends.After(refused.Add(wait+5*time.Second)) {
		t.Errorf("%s = %v, want about %v after the 429 (%v)", heldUntil, ends, wait, ends.Sub(refused))
	}
	mu.Unlock()
	keys := []string{fulfillment.LineKey(first.GetId(), 1)}
	for i := 1; i <= 4; i++ {
		mid := fmt.Sprintf("busy-%d", i)
		o := s.createExternalOrder(t, mid, "busy")
		s.pay(t, mid)
		keys = append(keys, fulfillment.LineKey(o.GetId(), 1))
	}
	deadline := time.Now().Add(30 * time.Second)
	for !delivered(busy, keys) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !delivered(busy, keys) {
		for _, k := range keys {
			t.Logf("%s: %d requests, %d effects, state %s", k, busy.Requests(k), busy.Effects(k), s.message(t, k))
		}
		t.Fatal("not every message delivered after 30s")
	}
	mu.Lock()
	defer mu.Unlock()
	for i, at := range after {
		if at.Before(refused.Add(wait)) {
			t.Errorf("request %d came %v after the 429, within the %v it asked for", i+2, at.Sub(refused), wait)
		}
	}
	for i, k := range keys {
		want := 1
		if i == 0 {
			want = 2
		}
		if n := busy.Requests(k); n != want {
			t.Errorf("message %s: %d requests, want %d", k, n, want)
		}
		// Its attempts are recorded once its batch's requests ended: a
		// moment after the receiver applied it.
		recorded := func() int {
			return s.count(t, `SELECT count(*) FROM outbox_attempts a JOIN outbox_messages m ON m.id = a.message_id
				WHERE m.idempotency_key = $1`, k)
		}
		for end := time.Now().Add(5 * time.Second); recorded() < want && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond)
		}
		if n := recorded(); n != want {
			t.Errorf("message %s: %d attempts recorded, want %d", k, n, want)
		}
	}
}

// delivered says whether r applied each of keys once.
func delivered(r *receiver.Receiver, keys []string) bool {
	for _, k := range keys {
		if r.Effects(k) != 1 {
			return false
		}
	}
	return true
}

// A destination that never answers holds its own deliveries only, no more
// of them at once than its concurrency.
func TestOutboxDeadDestinationDoesNotDelayOthers(t *testing.T) {
	t.Parallel()
	dead := startReceiver(t, true, receiver.Always(receiver.Action{Before: time.Minute}))
	healthy := startReceiver(t, true, nil)
	deadDest := destination(t, "dead", dead, true, 30*time.Second)
	deadDest.Concurrency = 2
	s := startReplicaWith(t, pgtest.DB(t), withDestinations(deadDest, destination(t, "healthy", healthy, true, 5*time.Second)))
	t.Cleanup(func() { _ = dead.Close() }) // before the service stops: its held requests end
	var keys []string
	for i := range 6 {
		mid := "dead-" + string(rune('a'+i))
		o := s.createExternalOrder(t, mid, "dead", "healthy")
		s.pay(t, mid)
		keys = append(keys, fulfillment.LineKey(o.GetId(), 2))
	}
	waitFor(t, "delivered to the healthy destination", func() bool {
		for _, k := range keys {
			if healthy.Effects(k) != 1 {
				return false
			}
		}
		return true
	})
	if dead.TotalEffects() != 0 || dead.MaxInFlight() > 2 {
		t.Errorf("dead destination: %d effects, %d requests at once; want 0 effects, at most 2 at once",
			dead.TotalEffects(), dead.MaxInFlight())
	}
}
