package storage_test

import (
	"context"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/worker"
)

// A message whose request may have been on the wire (its sending mark),
// claimed again and handed back unsent by a worker that was stopping
// (ReleaseClaims), keeps its mark: the next worker finds it interrupted,
// and a destination that does not honour idempotency keys is not sent it
// again. The claim handed back is not counted.
func TestHandedBackKeepsTheSendingMark(t *testing.T) {
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
	// w2 is stopping before it sends: the queue hands the claim back.
	if err := q.ReleaseClaims(ctx, "w2", []int64{id}); err != nil {
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
	if claims[0].Attempts != 2 {
		t.Errorf("claimed again at attempt %d, want 2: the claim handed back is not counted", claims[0].Attempts)
	}
	if !msgs[0].Interrupted {
		t.Errorf("message %d lost its sending mark when handed back not_sent: the next worker sends it again to a non-idempotent destination", id)
	}
}
