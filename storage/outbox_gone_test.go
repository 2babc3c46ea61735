package storage_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/worker"
)

// splitClaims is a destination's outbox queue whose first claim takes two
// messages and whose second takes two once secondClaim is closed, so that
// a test decides which worker holds which messages, and when. The claims
// after them are the queue's own. It reports the claims handed back.
type splitClaims struct {
	worker.Table
	calls       atomic.Int32
	secondClaim chan struct{} // closed by the test: the second claim may run
	secondDone  chan struct{} // closed once the second claim returned
	handedBack  chan []int64
}

func (s *splitClaims) Claim(ctx context.Context, p worker.ClaimParams) ([]worker.Claim, error) {
	switch s.calls.Add(1) {
	case 1:
		p.Limit = 2
	case 2:
		select {
		case <-s.secondClaim:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		defer close(s.secondDone)
		p.Limit = 2
	}
	return s.Table.Claim(ctx, p)
}

func (s *splitClaims) ReleaseClaims(ctx context.Context, owner string, ids []int64) error {
	err := s.Table.ReleaseClaims(ctx, owner, ids)
	select {
	case s.handedBack <- ids:
	default:
	}
	return err
}

// A destination that answered 410 Gone gets no new request from this
// process, whichever of its workers claimed the messages: with concurrency
// 2, one worker's batch holds both request slots; another worker claims a
// batch of its own (before the 410, the destination enabled) and waits for
// a slot. The first request is answered 410 and its slot freed: the
// waiting batch starts nothing and hands its messages back, uncounted —
// it does not wait for the 410 to be recorded (the disable commits only
// once the first batch's other request ends). Enabled again, the
// destination gets every message, once.
func TestOutboxStopsEveryBatchAfterA410(t *testing.T) {
	t.Parallel()
	s, conn := newOutboxStore(t)
	l, _, _ := live(t, s)
	ctx := context.Background()
	const n = 4
	payExternalOrders(t, s, n, "gone-%d", "box")
	processAll(t, s, n)

	var (
		requests atomic.Int32
		enabled  atomic.Bool // answers 200 from now on
		answers  = make(chan fulfillment.DeliveryAttempt)
		testDone = make(chan struct{})
	)
	gone := fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeGone, Status: 410, Reason: "HTTP 410"}
	table := &splitClaims{Table: s.OutboxQueue("licenses"), secondClaim: make(chan struct{}),
		secondDone: make(chan struct{}), handedBack: make(chan []int64, 8)}
	d := worker.Destination{ID: "licenses", Idempotent: true, Concurrency: 2, MaxAttempts: 5,
		Deliver: func(context.Context, fulfillment.OutboxMessage) fulfillment.DeliveryAttempt {
			switch {
			case enabled.Load():
				return fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeDelivered, Status: 200}
			case requests.Add(1) > 2:
				return gone // a request past the concurrency: the failure
			}
			select {
			case a := <-answers:
				return a
			case <-testDone:
				return gone
			}
		}}
	queues := worker.NewOutbox(s, func(string) worker.Table { return table }, []worker.Destination{d}, l,
		worker.Config{Poll: 20 * time.Millisecond, Lease: time.Minute, BaseBackoff: 10 * time.Millisecond,
			MaxBackoff: 50 * time.Millisecond, Reclaim: time.Hour}, slog.New(slog.DiscardHandler))
	runQueue(t, queues[0])
	t.Cleanup(func() { close(testDone) }) // before the queue stops: cleanups run last first

	waitFor(t, "the first batch's two requests", func() bool { return requests.Load() == 2 })
	close(table.secondClaim)
	<-table.secondDone
	answers <- gone
	// The second batch's outcome: its messages handed back, all of them
	// when it sent nothing.
	var back []int64
	select {
	case back = <-table.handedBack:
	case <-time.After(30 * time.Second):
		t.Fatal("after 30s: the second batch handed nothing back")
	}
	if got := requests.Load(); got != 2 || len(back) != 2 {
		t.Errorf("after the 410, %d requests and %d messages of the second batch handed back; "+
			"want none started past the 2 in flight (its concurrency), both handed back", got, len(back))
	}
	answers <- gone
	waitFor(t, "the destination disabled, no message leased", func() bool {
		return count(t, conn, "SELECT count(*) FROM outbox_destinations WHERE id = 'licenses' AND disabled_at IS NOT NULL") == 1 &&
			count(t, conn, "SELECT count(*) FROM outbox_work WHERE lease_owner IS NOT NULL") == 0
	})
	if got := count(t, conn, `SELECT count(*) FROM outbox_work w JOIN outbox_messages m ON m.id = w.id
		WHERE m.destination_id = 'licenses' AND m.state = 'pending' AND w.attempts = 0`); got != n {
		t.Errorf("%d messages wait with no attempt counted, want %d", got, n)
	}
	if got, sent := count(t, conn, "SELECT count(*) FROM outbox_attempts"), int(requests.Load()); got != sent {
		t.Errorf("%d attempts recorded, want one per request made (%d)", got, sent)
	}

	enabled.Store(true)
	if err := s.DestinationEnable(ctx, "licenses"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every message delivered once enabled", func() bool {
		return count(t, conn, "SELECT count(*) FROM outbox_messages WHERE destination_id = 'licenses' AND state = 'delivered'") == n
	})
}
