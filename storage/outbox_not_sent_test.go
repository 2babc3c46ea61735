package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/worker"
)

// A message whose request may have been on the wire (its sending mark),
// claimed again and handed back not_sent by a worker that was stopping,
// keeps its mark: the next worker finds it interrupted, and a destination
// that does not honour idempotency keys is not sent it again.
func TestNotSentKeepsTheSendingMark(t *testing.T) {
	t.Parallel()
	s, _ := newOutboxStore(t)
	ctx := context.Background()
	id := claimSent(t, s, "m-notsent", 5)
	q := s.OutboxQueue("licenses")
	claims, err := q.Claim(ctx, worker.ClaimParams{Owner: "w2", Limit: 1, Lease: time.Minute, MaxAttempts: 5})
	if err != nil || len(claims) != 1 || claims[0].ID != id {
		t.Fatal(claims, err)
	}
	msgs, err := s.OutboxLoad(ctx, []int64{id}, "w2")
	if err != nil || len(msgs) != 1 || !msgs[0].Interrupted {
		t.Fatal(msgs, err)
	}
	// w2 is stopping: attemptAll hands it back not_sent.
	if err := recordOne(s, id, "w2", fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeNotSent,
		Reason: "the worker is stopping", StartedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	claims, err = q.Claim(ctx, worker.ClaimParams{Owner: "w3", Limit: 1, Lease: time.Minute, MaxAttempts: 5})
	if err != nil || len(claims) != 1 || claims[0].ID != id {
		t.Fatal(claims, err)
	}
	msgs, err = s.OutboxLoad(ctx, []int64{id}, "w3")
	if err != nil || len(msgs) != 1 {
		t.Fatal(msgs, err)
	}
	if !msgs[0].Interrupted {
		t.Errorf("message %d lost its sending mark when handed back not_sent: the next worker sends it again to a non-idempotent destination", id)
	}
}
