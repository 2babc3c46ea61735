package storage_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// claimSent claims the licenses destination's message of order m, paid,
// marks it as being sent by owner "dead" (its request may be on the wire),
// and reclaims it as that owner's process died; it returns the message id.
func claimSent(t *testing.T, s *storage.Store, m string, maxAttempts int) int64 {
	t.Helper()
	ctx := context.Background()
	paidExternalOrder(t, s, m, "e-"+m)
	q := s.OutboxQueue("licenses")
	claims, err := q.Claim(ctx, worker.ClaimParams{Owner: "dead", Limit: 1, Lease: time.Minute, MaxAttempts: maxAttempts})
	if err != nil || len(claims) != 1 {
		t.Fatal(claims, err)
	}
	if err := s.OutboxSending(ctx, claims[0].ID, "dead"); err != nil {
		t.Fatal(err)
	}
	if n, err := q.Reclaim(ctx); err != nil || n != 1 {
		t.Fatalf("reclaimed %d, %v; want the dead owner's message", n, err)
	}
	return claims[0].ID
}

// A message whose request may have been on the wire when its worker died
// is never sent again by itself, even when an operator hurries it while it
// waits: a retry of a pending message keeps its sending mark, and the next
// claim loads it as interrupted (the dispatcher records it uncertain
// without sending). A person who retries it once it is uncertain decides
// to send it again.
func TestRetryOfAPendingMessageKeepsItsSendingMark(t *testing.T) {
	t.Parallel()
	s, _ := newOutboxStore(t)
	ctx := context.Background()
	id := claimSent(t, s, "m-retry", 5)
	if _, err := s.DeliveryRetry(ctx, id, "op", false); err != nil {
		t.Fatal(err)
	}
	claims, err := s.OutboxQueue("licenses").Claim(ctx, worker.ClaimParams{Owner: "w2", Limit: 1, Lease: time.Minute, MaxAttempts: 5})
	if err != nil || len(claims) != 1 || claims[0].ID != id {
		t.Fatal(claims, err)
	}
	msgs, err := s.OutboxLoad(ctx, []int64{id}, "w2")
	if err != nil || len(msgs) != 1 {
		t.Fatal(msgs, err)
	}
	if !msgs[0].Interrupted {
		t.Errorf("message %d loaded as never sent after an operator hurried it: its request may have been on the wire", id)
	}
}

// A worker that dies with a request possibly on the wire during the last
// attempt leaves a message that may have been delivered: uncertain, not
// failed. The claim leaves it to the dispatcher, which records it
// uncertain without sending it, instead of failing it as abandoned.
func TestACrashDuringTheLastAttemptLeavesTheMessageToTheDispatcher(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	id := claimSent(t, s, "m-last", 1)
	claims, err := s.OutboxQueue("licenses").Claim(ctx, worker.ClaimParams{Owner: "w2", Limit: 1, Lease: time.Minute, MaxAttempts: 1})
	if err != nil || len(claims) != 1 || claims[0].ID != id {
		t.Fatalf("claimed %v, %v; want the interrupted message %d, to record it", claims, err, id)
	}
	if got := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'failed_delivery'"); got != 0 {
		t.Errorf("%d failed_delivery items for a message that may have been delivered", got)
	}
	msgs, err := s.OutboxLoad(ctx, []int64{id}, "w2")
	if err != nil || len(msgs) != 1 || !msgs[0].Interrupted {
		t.Fatalf("loaded %+v, %v; want it interrupted", msgs, err)
	}
	// What the dispatcher records for it (worker/outbox.go: not sent again).
	if err := recordOne(s, id, "w2", fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeInterrupted,
		Reason: "test", StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if got := count(t, conn, "SELECT count(*) FROM outbox_messages WHERE id = $1 AND state = 'uncertain'", id); got != 1 {
		t.Errorf("message %d not uncertain", id)
	}
	if got := count(t, conn, "SELECT count(*) FROM reconciliation_items WHERE kind = 'uncertain_delivery' AND outbox_message_id = $1", id); got != 1 {
		t.Errorf("%d uncertain_delivery items for message %d, want 1", got, id)
	}
}

// A record whose commit went through but whose answer was lost is sent
// again by the dispatcher (worker: sender.record): the second finds the
// message no longer its owner's, and adds nothing. The delivery is
// recorded once, and the order it completes is fulfilled once.
func TestARecordRepeatedAfterItsCommitAddsNothing(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	ctx := context.Background()
	orderID := paidExternalOrder(t, s, "m-twice", "e-twice")
	deliverNext(t, s, "shipping", fulfillment.OutcomeDelivered)
	claims, err := s.OutboxQueue("licenses").Claim(ctx, worker.ClaimParams{Owner: "w", Limit: 1, Lease: time.Minute, MaxAttempts: 5})
	if err != nil || len(claims) != 1 {
		t.Fatal(claims, err)
	}
	id := claims[0].ID
	delivered := fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeDelivered, Status: 204, Reason: "test", StartedAt: time.Now()}
	if err := recordOne(s, id, "w", delivered); err != nil {
		t.Fatal(err)
	}
	if err := recordOne(s, id, "w", delivered); !errors.Is(err, worker.ErrLeaseLost) {
		t.Fatalf("the repeated record: %v, want the message no longer held", err)
	}
	if got := count(t, conn, "SELECT count(*) FROM outbox_attempts WHERE message_id = $1", id); got != 1 {
		t.Errorf("%d attempts recorded, want 1", got)
	}
	if got := count(t, conn, "SELECT count(*) FROM order_events WHERE order_id = $1 AND topic = 'order.fulfilled'", orderID); got != 1 {
		t.Errorf("the order fulfilled %d times, want once", got)
	}
	if got := count(t, conn, "SELECT count(*) FROM outbox_messages WHERE order_id = $1 AND topic = 'order.fulfilled'", orderID); got > 1 {
		t.Errorf("%d order.fulfilled messages, want at most one", got)
	}
}
