package storage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// newOutboxStore is newStore with crm subscribed to every order and
// subscription event, and the plans subPlan and yearPlan.
func newOutboxStore(t *testing.T) (*storage.Store, *pgx.Conn) {
	t.Helper()
	s, conn, _ := openStore(t, outboxStoreOptions())
	return s, conn
}

// outboxStoreOptions are newOutboxStore's.
func outboxStoreOptions() storage.Options {
	subs := map[fulfillment.Topic][]string{}
	for _, topic := range fulfillment.EventTopics {
		subs[topic] = []string{"crm"}
	}
	return storage.Options{MaxConns: 10, Subscriptions: subs, Plans: fulfillment.Plans{subPlan.ID: subPlan, yearPlan.ID: yearPlan}}
}

// externalOrder stores an order with a license line and two external lines,
// to licenses and shipping, and returns its id.
func externalOrder(t *testing.T, s *storage.Store, merchantID string) string {
	t.Helper()
	spec, err := fulfillment.OrderDraft{
		OrgID: "org_a", Environment: "live", MerchantOrderID: merchantID,
		Lines: []fulfillment.LineDraft{
			{SKU: "pro-license", Kind: "license", Quantity: 1, Currency: "USD", MinorUnits: 1000},
			{SKU: "key-server", Kind: "external", Quantity: 1, Currency: "USD", MinorUnits: 1000, Destination: "licenses"},
			{SKU: "box", Kind: "external", Quantity: 2, Currency: "USD", MinorUnits: 500, Destination: "shipping"},
		},
		Settlement: &fulfillment.SettlementDraft{Token: "USDT", Network: "TRON", Amount: "30.000000"},
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

// paidExternalOrder stores externalOrder's order of merchantID and the
// payment eventID confirms, processed: its lines' messages are queued. It
// returns the order's id.
func paidExternalOrder(t *testing.T, s *storage.Store, merchantID, eventID string) string {
	t.Helper()
	id := externalOrder(t, s, merchantID)
	if _, err := s.InboxInsert(context.Background(), confirmedEvent(eventID, merchantID), []byte("{}")); err != nil {
		t.Fatal(err)
	}
	processAll(t, s, 1)
	return id
}

// deliverNext claims destination's next message under owner and records
// outcome for it; it returns the message.
func deliverNext(t *testing.T, s *storage.Store, destination string, outcome fulfillment.DeliveryOutcome) fulfillment.OutboxMessage {
	t.Helper()
	ctx := context.Background()
	claims, err := s.OutboxQueue(destination).Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 1, Lease: time.Minute, MaxAttempts: 5})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim for %s = %v, %v; want one message", destination, claims, err)
	}
	msgs, err := s.OutboxLoad(ctx, []int64{claims[0].ID}, "w")
	if err != nil || len(msgs) != 1 {
		t.Fatalf("load = %v, %v; want the claimed message", msgs, err)
	}
	m := msgs[0]
	status := map[fulfillment.DeliveryOutcome]int{fulfillment.OutcomeDelivered: 204, fulfillment.OutcomeGone: 410}[outcome]
	if err := recordOne(s, m.ID, "w", fulfillment.DeliveryAttempt{
		Outcome: outcome, Status: status, Reason: "test", StartedAt: time.Now(),
	}); err != nil {
		t.Fatal(err)
	}
	return m
}

// failNext claims destination's next message and fails it past its only
// attempt (which opens its failed_delivery item); it returns the claim.
func failNext(t *testing.T, s *storage.Store, destination string) worker.Claim {
	t.Helper()
	ctx := context.Background()
	claims, err := s.OutboxQueue(destination).Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 1, Lease: time.Minute, MaxAttempts: 1})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim for %s = %v, %v; want one message", destination, claims, err)
	}
	if failed, err := retryOne(ctx, s.OutboxQueue(destination), "w", claims[0], "boom", time.Now(), 1); err != nil || !failed {
		t.Fatalf("retry past its attempts = %v, %v; want failed", failed, err)
	}
	return claims[0]
}

// recordOne records attempt a at message id alone, returning
// ErrLeaseLost when owner no longer holds it.
func recordOne(s *storage.Store, id int64, owner string, a fulfillment.DeliveryAttempt) error {
	lost, err := s.OutboxRecord(context.Background(), owner, []fulfillment.MessageAttempt{{ID: id, DeliveryAttempt: a}})
	if err == nil && len(lost) > 0 {
		err = worker.ErrLeaseLost
	}
	return err
}

// A paid order with external lines gets one message per line, in the
// transaction that pays it, under the line's key — and never a second, however
// often the payment is announced. It is fulfilled, and says so once, when
// the last line is delivered.
func TestOutboxDeliveriesFulfilOrder(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	orderID := externalOrder(t, s, "m-ext")
	for _, id := range []string{"e1", "e1-again"} {
		ev := confirmedEvent("e1", "m-ext")
		ev.EventID = id
		if _, err := s.InboxInsert(ctx, ev, []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	if got := processAll(t, s, 2); got != "fulfilled,already_applied" {
		t.Fatalf("decisions = %s", got)
	}
	messages := func(query string) int {
		return count(t, conn, "SELECT count(*) FROM outbox_messages WHERE order_id = $1 AND "+query, orderID)
	}
	if n := messages("required AND topic = 'fulfillment.requested'"); n != 2 {
		t.Fatalf("%d fulfillment requests, want 2 (one per external line)", n)
	}
	if n := messages("NOT required"); n != 0 {
		t.Fatalf("%d order events before the order is fulfilled", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM outbox_messages WHERE idempotency_key = $1 AND destination_id = 'licenses'",
		fulfillment.LineKey(orderID, 1)); n != 1 {
		t.Fatalf("the licenses line's message is not under its key %s", fulfillment.LineKey(orderID, 1))
	}
	state := func() string {
		var st string
		if err := conn.QueryRow(ctx, "SELECT state FROM orders WHERE id = $1", orderID).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := state(); st != "fulfilling" {
		t.Fatalf("order is %s, want fulfilling", st)
	}

	m := deliverNext(t, s, "shipping", fulfillment.OutcomeDelivered)
	var body struct {
		Type string `json:"type"`
		Data struct {
			OrderID string `json:"order_id"`
			Line    struct {
				LineNo    int    `json:"line_no"`
				SKU       string `json:"sku"`
				Quantity  int    `json:"quantity"`
				UnitPrice struct {
					MinorUnits string `json:"minor_units"`
				} `json:"unit_price"`
			} `json:"line"`
		} `json:"data"`
	}
	if err := json.Unmarshal(m.Payload, &body); err != nil {
		t.Fatal(err)
	}
	if body.Type != "fulfillment.requested" || body.Data.OrderID != orderID || body.Data.Line.LineNo != 2 ||
		body.Data.Line.SKU != "box" || body.Data.Line.Quantity != 2 || body.Data.Line.UnitPrice.MinorUnits != "500" {
		t.Errorf("payload = %s", m.Payload)
	}
	if st := state(); st != "fulfilling" {
		t.Fatalf("order is %s after one of two deliveries, want fulfilling", st)
	}
	deliverNext(t, s, "licenses", fulfillment.OutcomeDelivered)
	if st := state(); st != "fulfilled" {
		t.Fatalf("order is %s after every delivery, want fulfilled", st)
	}
	if n := messages("topic = 'order.fulfilled' AND destination_id = 'crm'"); n != 1 {
		t.Fatalf("%d order.fulfilled messages, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM outbox_attempts"); n != 2 {
		t.Errorf("%d attempts recorded, want 2", n)
	}
}

// Concurrent deliveries of an order's last two lines fulfil it: whichever
// commits second sees the first.
func TestOutboxConcurrentLastDeliveries(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	for i := range 10 {
		orderID := externalOrder(t, s, "m-"+string(rune('a'+i)))
		if _, err := s.InboxInsert(ctx, confirmedEvent("c"+string(rune('a'+i)), "m-"+string(rune('a'+i))), []byte("{}")); err != nil {
			t.Fatal(err)
		}
		processAll(t, s, 1)
		var ids [2]int64
		for j, d := range []string{"licenses", "shipping"} {
			claims, err := s.OutboxQueue(d).Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 1, Lease: time.Minute, MaxAttempts: 5})
			if err != nil || len(claims) != 1 {
				t.Fatalf("claim: %v %v", claims, err)
			}
			ids[j] = claims[0].ID
		}
		errs := make(chan error, 2)
		for _, id := range ids {
			go func() {
				errs <- recordOne(s, id, "w", fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeDelivered, Status: 200, Reason: "ok", StartedAt: time.Now()})
			}()
		}
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if n := count(t, conn, "SELECT count(*) FROM orders WHERE id = $1 AND state = 'fulfilled'", orderID); n != 1 {
			t.Fatalf("order %d not fulfilled after both deliveries committed concurrently", i)
		}
	}
}

// An uncertain delivery leaves the order fulfilling, with one
// uncertain_delivery item; a message past its attempts is failed with one
// failed_delivery item; 410 disables the destination, whose messages then
// wait, their attempt not counted.
func TestOutboxUncertainFailedGone(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	orderID := paidExternalOrder(t, s, "m-1", "e1")

	m := deliverNext(t, s, "licenses", fulfillment.OutcomeUncertain)
	if n := count(t, conn, `SELECT count(*) FROM reconciliation_items
		WHERE kind = 'uncertain_delivery' AND outbox_message_id = $1 AND order_id = $2`, m.ID, orderID); n != 1 {
		t.Errorf("%d uncertain_delivery items, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM outbox_messages WHERE id = $1 AND state = 'uncertain'", m.ID); n != 1 {
		t.Error("message not uncertain")
	}

	m = deliverNext(t, s, "shipping", fulfillment.OutcomeGone)
	if n := count(t, conn, "SELECT count(*) FROM outbox_destinations WHERE id = 'shipping' AND disabled_at IS NOT NULL"); n != 1 {
		t.Error("shipping not disabled by 410")
	}
	if n := count(t, conn, "SELECT count(*) FROM outbox_messages WHERE id = $1 AND state = 'pending' AND attempts = 0", m.ID); n != 1 {
		t.Error("the message answered 410 is not pending with its attempt uncounted")
	}
	if claims, err := s.OutboxQueue("shipping").Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 1, Lease: time.Minute, MaxAttempts: 5}); err != nil || len(claims) != 0 {
		t.Errorf("claim on a disabled destination = %v, %v; want nothing", claims, err)
	}
	if _, err := conn.Exec(ctx, "UPDATE outbox_destinations SET disabled_at = NULL"); err != nil {
		t.Fatal(err)
	}
	// Retried to its last attempt: failed, with an item.
	for attempt := 1; attempt <= 2; attempt++ {
		claims, err := s.OutboxQueue("shipping").Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 1, Lease: time.Minute, MaxAttempts: 2})
		if err != nil || len(claims) != 1 {
			t.Fatalf("attempt %d: claim = %v, %v", attempt, claims, err)
		}
		failed, err := retryOne(ctx, s.OutboxQueue(""), "w", worker.Claim{ID: claims[0].ID}, "HTTP 503", time.Now(), 2)
		if err != nil || failed != (attempt == 2) {
			t.Fatalf("attempt %d: retry = %v, %v", attempt, failed, err)
		}
	}
	if n := count(t, conn, `SELECT count(*) FROM reconciliation_items
		WHERE kind = 'failed_delivery' AND outbox_message_id = $1 AND order_id = $2`, m.ID, orderID); n != 1 {
		t.Errorf("%d failed_delivery items, want 1", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM orders WHERE id = $1 AND state = 'fulfilling'", orderID); n != 1 {
		t.Error("an order with an uncertain and a failed delivery left fulfilling")
	}
	// A record for a message the worker no longer holds changes nothing.
	err := recordOne(s, m.ID, "w", fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeDelivered, Status: 200, Reason: "late"})
	if !errors.Is(err, worker.ErrLeaseLost) {
		t.Errorf("record of a failed message = %v, want ErrLeaseLost", err)
	}
}

// Each destination's dispatcher hands back its own claims only: another
// one may still be sending what it claimed.
func TestOutboxReleasePerDestination(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	paidExternalOrder(t, s, "m-1", "e1")
	for _, d := range []string{"licenses", "shipping"} {
		if claims, err := s.OutboxQueue(d).Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 1, Lease: time.Minute, MaxAttempts: 5}); err != nil || len(claims) != 1 {
			t.Fatalf("claim for %s: %v %v", d, claims, err)
		}
	}
	if n, err := s.OutboxQueue("licenses").Release(ctx, "w"); err != nil || n != 1 {
		t.Fatalf("release = %d, %v; want 1", n, err)
	}
	if n := count(t, conn, "SELECT count(*) FROM outbox_work WHERE lease_owner = 'w'"); n != 1 {
		t.Errorf("%d messages still leased, want shipping's", n)
	}
}

// A worker records the attempts of its claimed messages in one
// transaction: each attempt once, the delivered messages delivered, the
// orders whose last line was delivered fulfilled and announced once each,
// the message to retry left pending, and a message it no longer holds left
// alone and returned.
func TestOutboxRecordsAttemptsTogether(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	const orders = 4
	for i := range orders {
		m := fmt.Sprintf("m-%d", i)
		externalOrder(t, s, m)
		if _, err := s.InboxInsert(ctx, confirmedEvent("e-"+m, m), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, s, orders)
	record := func(destination string, outcome func(i int) fulfillment.DeliveryOutcome) []int64 {
		t.Helper()
		claims, err := s.OutboxQueue(destination).Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 10, Lease: time.Minute, MaxAttempts: 5})
		if err != nil || len(claims) != orders {
			t.Fatalf("claim for %s = %v, %v; want %d messages", destination, claims, err, orders)
		}
		var attempts []fulfillment.MessageAttempt
		for i, c := range claims {
			attempts = append(attempts, fulfillment.MessageAttempt{ID: c.ID, DeliveryAttempt: fulfillment.DeliveryAttempt{
				Outcome: outcome(i), Status: 200, Reason: "test", StartedAt: time.Now()}})
		}
		// And one the worker does not hold.
		attempts = append(attempts, fulfillment.MessageAttempt{ID: 1 << 40, DeliveryAttempt: fulfillment.DeliveryAttempt{
			Outcome: fulfillment.OutcomeDelivered, Status: 200, Reason: "test", StartedAt: time.Now()}})
		lost, err := s.OutboxRecord(ctx, "w", attempts)
		if err != nil || len(lost) != 1 || lost[0] != 1<<40 {
			t.Fatalf("record = lost %v, %v; want the message it does not hold", lost, err)
		}
		return []int64{claims[0].ID}
	}
	delivered := func(int) fulfillment.DeliveryOutcome { return fulfillment.OutcomeDelivered }
	record("licenses", delivered)
	// The first order's shipping message is to be retried.
	retried := record("shipping", func(i int) fulfillment.DeliveryOutcome {
		if i == 0 {
			return fulfillment.OutcomeRetry
		}
		return fulfillment.OutcomeDelivered
	})
	if n := count(t, conn, "SELECT count(*) FROM outbox_attempts"); n != 2*orders {
		t.Errorf("%d attempts recorded, want %d", n, 2*orders)
	}
	if n := count(t, conn, "SELECT count(*) FROM orders WHERE state = 'fulfilled'"); n != orders-1 {
		t.Errorf("%d orders fulfilled, want %d (all but the one whose shipping is retried)", n, orders-1)
	}
	if n := count(t, conn, "SELECT count(*) FROM order_events WHERE topic = 'order.fulfilled'"); n != orders-1 {
		t.Errorf("%d order.fulfilled events, want %d", n, orders-1)
	}
	if n := count(t, conn, "SELECT count(*) FROM outbox_messages m JOIN outbox_work w USING (id) WHERE m.id = $1 AND m.state = 'pending' AND w.lease_owner = 'w'", retried[0]); n != 1 {
		t.Error("the message to retry is no longer pending, held by its worker (for its retry to be scheduled)")
	}
}

// The record of a batch's attempts runs its statements on generic plans,
// planned once per connection, not at every record (their arrays would
// have PostgreSQL plan each anew): the store under test only records, on
// one connection; another store of the database makes the orders and
// claims their messages.
func TestOutboxRecordRunsOnGenericPlans(t *testing.T) {
	t.Parallel()
	other, _, url := openStore(t, outboxStoreOptions())
	opts := outboxStoreOptions()
	opts.MaxConns, opts.InsertFlushers = 2, 1
	s, err := storage.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx := context.Background()
	const batches, per = 8, 2
	for i := range batches * per {
		m := fmt.Sprintf("g-%d", i)
		externalOrder(t, other, m)
		if _, err := other.InboxInsert(ctx, confirmedEvent("e-"+m, m), []byte("{}")); err != nil {
			t.Fatal(err)
		}
	}
	processAll(t, other, batches*per)
	for range batches {
		claims, err := other.OutboxQueue("licenses").Claim(ctx, worker.ClaimParams{Owner: "w", Limit: per, Lease: time.Minute, MaxAttempts: 5})
		if err != nil || len(claims) != per {
			t.Fatalf("claim = %v, %v; want %d messages", claims, err, per)
		}
		var attempts []fulfillment.MessageAttempt
		for _, c := range claims {
			attempts = append(attempts, fulfillment.MessageAttempt{ID: c.ID, DeliveryAttempt: fulfillment.DeliveryAttempt{
				Outcome: fulfillment.OutcomeDelivered, Status: 200, Reason: "test", StartedAt: time.Now()}})
		}
		if lost, err := s.OutboxRecord(ctx, "w", attempts); err != nil || len(lost) > 0 {
			t.Fatalf("record = lost %v, %v", lost, err)
		}
	}
	plans, err := s.PreparedPlans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	recorded := 0
	for _, p := range plans {
		if p.Custom > 0 {
			t.Errorf("planned for its parameters %d times of %d: %s", p.Custom, p.Custom+p.Generic, strings.Join(strings.Fields(p.Statement), " "))
		}
		if p.Custom+p.Generic >= batches {
			recorded++
		}
	}
	// The lock, the attempts, the delivered, the orders' lock, their
	// count and their update, at least.
	if recorded < 6 {
		t.Errorf("%d prepared statements ran in each of the %d records; want 6 or more", recorded, batches)
	}
}
