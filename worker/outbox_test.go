package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// fakeOutbox is a fulfillment.OutboxWork over messages by id, recording
// what it was asked to record.
type fakeOutbox struct {
	mu        sync.Mutex // guards recorded
	msgs      map[int64]fulfillment.OutboxMessage
	recordErr error
	// recordFails is how many calls recordErr answers (0: every one).
	recordFails int
	recorded    [][]fulfillment.MessageAttempt
	disabled    atomic.Bool
	checks      atomic.Int32 // calls of OutboxDisabled
}

func (f *fakeOutbox) OutboxLoad(_ context.Context, ids []int64, _ string) ([]fulfillment.OutboxMessage, error) {
	var out []fulfillment.OutboxMessage
	for _, id := range ids {
		if m, ok := f.msgs[id]; ok {
			out = append(out, m)
		}
	}
	return out, nil
}

func (*fakeOutbox) OutboxSending(context.Context, int64, string) error { return nil }

func (f *fakeOutbox) OutboxDisabled(context.Context, string) (bool, error) {
	f.checks.Add(1)
	return f.disabled.Load(), nil
}

func (f *fakeOutbox) OutboxRecord(_ context.Context, _ string, attempts []fulfillment.MessageAttempt) ([]int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.recorded = append(f.recorded, attempts)
	if f.recordFails > 0 && len(f.recorded) > f.recordFails {
		return nil, nil
	}
	return nil, f.recordErr
}

// A claim's messages are sent concurrently, never more at once than the
// destination's concurrency across its workers, and recorded together.
func TestOutboxSenderSendsWithinConcurrency(t *testing.T) {
	t.Parallel()
	const concurrency, perClaim, workers = 3, 10, 2
	msgs := map[int64]fulfillment.OutboxMessage{}
	for id := range int64(perClaim * workers) {
		msgs[id+1] = fulfillment.OutboxMessage{ID: id + 1}
	}
	work := &fakeOutbox{msgs: msgs}
	var inFlight, most atomic.Int32
	release := make(chan struct{})
	s := newSender(work, Destination{ID: "crm", Idempotent: true, Concurrency: concurrency,
		Deliver: func(context.Context, fulfillment.OutboxMessage) fulfillment.DeliveryAttempt {
			n := inFlight.Add(1)
			for m := most.Load(); n > m; m = most.Load() {
				if most.CompareAndSwap(m, n) {
					break
				}
			}
			<-release
			inFlight.Add(-1)
			return fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeDelivered, Status: 200}
		}}, slog.New(slog.DiscardHandler))
	var wg sync.WaitGroup
	for w := range workers {
		claims := make([]Claim, perClaim)
		for i := range claims {
			claims[i] = Claim{ID: int64(w*perClaim + i + 1), Attempts: 1}
		}
		wg.Go(func() {
			if err := s.Process(context.Background(), "w", claims); err != nil {
				t.Errorf("Process: %v", err)
			}
		})
	}
	// Until the first requests are let through, exactly the slots are taken.
	for inFlight.Load() < concurrency {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // room for a request past the limit to start
	close(release)
	wg.Wait()
	if got := most.Load(); got != concurrency {
		t.Errorf("at most %d requests in flight, want %d", got, concurrency)
	}
	work.mu.Lock()
	defer work.mu.Unlock()
	if len(work.recorded) != workers {
		t.Fatalf("%d record calls, want one per claim", len(work.recorded))
	}
	for _, r := range work.recorded {
		if len(r) != perClaim {
			t.Errorf("a record of %d attempts, want %d", len(r), perClaim)
		}
	}
}

// A destination's claims are sent and recorded in one call; the attempts
// that ask to be retried come back as ItemErrors, and when the record
// fails every message sent does, so that the queue retries each after its
// backoff rather than sending the batch again at once.
func TestOutboxSenderRecordsBatchAndRetriesPerMessage(t *testing.T) {
	t.Parallel()
	claims := []Claim{{ID: 1, Attempts: 1}, {ID: 2, Attempts: 1}, {ID: 3, Attempts: 2}}
	unavailable := fmt.Errorf("%w: the database went away", fulfillment.ErrUnavailable)
	for _, tc := range []struct {
		name        string
		recordErr   error
		recordFails int
		want        []int64 // the messages to retry
		records     int     // calls of OutboxRecord
	}{
		{"recorded", nil, 0, []int64{2}, 1},
		{"record failed", errors.New("connection reset"), 0, []int64{1, 2, 3}, 1},
		// A failover: the outcomes are recorded once the database is back,
		// not thrown away (which sends the delivered ones again).
		{"record unavailable twice, then recorded", unavailable, 2, []int64{2}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			work := &fakeOutbox{msgs: map[int64]fulfillment.OutboxMessage{1: {ID: 1}, 2: {ID: 2}, 3: {ID: 3}},
				recordErr: tc.recordErr, recordFails: tc.recordFails}
			var sent []int64
			// One request slot: the messages go one after the other.
			s := newSender(work, Destination{ID: "crm", Idempotent: true, Concurrency: 1,
				Deliver: func(_ context.Context, m fulfillment.OutboxMessage) fulfillment.DeliveryAttempt {
					sent = append(sent, m.ID)
					if m.ID == 2 {
						return fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeRetry, Status: 503, Reason: "HTTP 503"}
					}
					return fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeDelivered, Status: 200}
				}}, slog.New(slog.DiscardHandler))
			err := s.Process(context.Background(), "w", claims)
			if !slices.Equal(sent, []int64{1, 2, 3}) {
				t.Errorf("sent %v, want each message once, in order", sent)
			}
			if len(work.recorded) != tc.records || len(work.recorded[0]) != 3 {
				t.Errorf("recorded %v, want the three attempts in one call, %d times", work.recorded, tc.records)
			}
			var items ItemErrors
			if !errors.As(err, &items) {
				t.Fatalf("Process = %v, want ItemErrors", err)
			}
			if got := slices.Sorted(maps.Keys(items)); !slices.Equal(got, tc.want) {
				t.Errorf("to retry %v, want %v", got, tc.want)
			}
			if tc.want[0] == 2 && fmt.Sprint(items[2]) != "HTTP 503" {
				t.Errorf("retry cause %q, want the attempt's reason", items[2])
			}
		})
	}
}

// A batch stops starting requests when its worker stops, when one of them
// is answered 410, or once a person disabled the destination: the
// messages not sent come back ErrNotStarted (for the queue to hand back
// uncounted), and a line says why; those whose request started are
// recorded with their outcome.
func TestOutboxSenderCutsABatchShort(t *testing.T) {
	t.Parallel()
	const n = 6
	for _, tc := range []struct {
		name string
		// act runs while the first request is in flight.
		act    func(cancel func(), work *fakeOutbox)
		answer fulfillment.DeliveryAttempt // of the first request
		reason string
		sent   int
	}{
		{"stopping", func(cancel func(), _ *fakeOutbox) { cancel() }, delivered, "the worker is stopping", 1},
		{"410 Gone", func(func(), *fakeOutbox) {}, fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeGone, Status: 410},
			"the destination answered 410 Gone", 1},
		{"429 with Retry-After", func(func(), *fakeOutbox) {}, fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeRetry,
			Status: 429, RetryAfter: time.Minute}, "the destination asked to wait", 1},
		{"429 without Retry-After", func(func(), *fakeOutbox) {}, fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeRetry,
			Status: 429}, "the destination asked to wait", 1},
		{"503 with Retry-After", func(func(), *fakeOutbox) {}, fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeRetry,
			Status: 503, RetryAfter: time.Minute}, "the destination asked to wait", 1},
		// Asked again after checkEvery: the first two requests take longer.
		{"disabled by a person", func(_ func(), w *fakeOutbox) { w.disabled.Store(true) }, delivered,
			"the destination was disabled", 1},
		{"503 without Retry-After", func(func(), *fakeOutbox) {}, fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeRetry,
			Status: 503}, "", n},
		{"nothing happens", func(func(), *fakeOutbox) {}, delivered, "", n},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msgs := map[int64]fulfillment.OutboxMessage{}
			claims := make([]Claim, n)
			for i := range claims {
				msgs[int64(i+1)] = fulfillment.OutboxMessage{ID: int64(i + 1)}
				claims[i] = Claim{ID: int64(i + 1), Attempts: 1}
			}
			work := &fakeOutbox{msgs: msgs}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var (
				sent atomic.Int32
				logs bytes.Buffer
			)
			s := newSender(work, Destination{ID: "crm", Idempotent: true, Concurrency: 1,
				Deliver: func(context.Context, fulfillment.OutboxMessage) fulfillment.DeliveryAttempt {
					if sent.Add(1) == 1 {
						tc.act(cancel, work)
						time.Sleep(20 * time.Millisecond)
						return tc.answer
					}
					return delivered
				}}, slog.New(slog.NewTextHandler(&logs, nil)))
			s.checkEvery = 10 * time.Millisecond
			err := s.Process(ctx, "w", claims)
			if got := int(sent.Load()); got != tc.sent {
				t.Errorf("%d requests, want %d", got, tc.sent)
			}
			items, _ := errors.AsType[ItemErrors](err)
			notStarted := 0
			for _, cause := range items {
				if errors.Is(cause, ErrNotStarted) {
					notStarted++
				}
			}
			if err != nil && items == nil || notStarted != n-tc.sent {
				t.Fatalf("Process = %v, want the %d messages not sent handed back", err, n-tc.sent)
			}
			for id := int64(tc.sent + 1); id <= n; id++ {
				if !errors.Is(items[id], ErrNotStarted) {
					t.Errorf("message %d: %v, want it not started", id, items[id])
				}
			}
			if said := strings.Contains(logs.String(), "outbox batch cut short"); said != (tc.reason != "") ||
				!strings.Contains(logs.String(), tc.reason) {
				t.Errorf("log %q; want it to say the batch was cut short because %q", logs.String(), tc.reason)
			}
			work.mu.Lock()
			defer work.mu.Unlock()
			if len(work.recorded) != 1 || len(work.recorded[0]) != tc.sent {
				t.Fatalf("records %v; want one of the %d messages sent", work.recorded, tc.sent)
			}
			for i, a := range work.recorded[0] {
				want := fulfillment.OutcomeDelivered
				if i == 0 {
					want = tc.answer.Outcome
				}
				if a.ID != int64(i+1) || a.Outcome != want {
					t.Errorf("message %d recorded %s, want %s", a.ID, a.Outcome, want)
				}
			}
		})
	}
}

// delivered is a request's answer 200.
var delivered = fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeDelivered, Status: 200}

// A destination that asked to wait is left alone until the longest wait it
// asked for ends (the queue claims nothing until then: heldUntil), and a
// line says so once per wait, not once per answer.
func TestOutboxSenderHoldsTheDestination(t *testing.T) {
	t.Parallel()
	var (
		logs bytes.Buffer
		told calls[time.Time]
	)
	s := newSender(&fakeOutbox{}, Destination{ID: "crm", Idempotent: true, Concurrency: 4, Held: told.add},
		slog.New(slog.NewTextHandler(&logs, nil)))
	if !s.heldUntil().IsZero() {
		t.Fatalf("held until %v before any answer", s.heldUntil())
	}
	for _, a := range []fulfillment.DeliveryAttempt{
		{Outcome: fulfillment.OutcomeRetry, Status: 500},
		{Outcome: fulfillment.OutcomeRetry, Status: 503},
		delivered,
	} {
		s.hold(a)
		if !s.heldUntil().IsZero() {
			t.Fatalf("held after HTTP %d, which asked for no wait", a.Status)
		}
	}
	start := time.Now()
	s.hold(fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeRetry, Status: 429, RetryAfter: time.Minute})
	s.hold(fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeRetry, Status: 429}) // shorter: changes nothing
	time.Sleep(time.Millisecond)                                                        // so that the next hold ends later
	if got := s.heldUntil().Sub(start); got < time.Minute || got > time.Minute+time.Second {
		t.Errorf("held for %v after a minute's Retry-After and a 429 without one, want a minute", got)
	}
	// An hour asked holds the destination maxHold (the message itself
	// waits the hour: the queue's retry); asked later, it extends the hold.
	s.hold(fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeUncertain, Status: 503, RetryAfter: time.Hour})
	if got := s.heldUntil().Sub(start); got < maxHold || got > maxHold+time.Second {
		t.Errorf("held for %v after an hour's Retry-After, want %v", got, maxHold)
	}
	if n := strings.Count(logs.String(), "destination asked to wait"); n != 1 {
		t.Errorf("%d lines about the wait, want 1 (one wait, extended): %s", n, logs.String())
	}
	if got := told.all(); len(got) != 2 || !got[1].Equal(s.heldUntil()) || !got[0].Before(got[1]) {
		t.Errorf("told of holds until %v, want the first minute's end and then the second's (%v)", got, s.heldUntil())
	}
}

// The wait a destination asked for (Retry-After) travels with the failed
// attempt to the queue, which schedules the message's retry no sooner.
func TestOutboxSenderPassesRetryAfter(t *testing.T) {
	t.Parallel()
	work := &fakeOutbox{msgs: map[int64]fulfillment.OutboxMessage{1: {ID: 1}, 2: {ID: 2}}}
	s := newSender(work, Destination{ID: "crm", Idempotent: true, Concurrency: 1,
		Deliver: func(_ context.Context, m fulfillment.OutboxMessage) fulfillment.DeliveryAttempt {
			if m.ID == 1 {
				return fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeRetry, Status: 429, Reason: "HTTP 429",
					RetryAfter: 30 * time.Second}
			}
			return fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeRetry, Status: 500, Reason: "HTTP 500"}
		}}, slog.New(slog.DiscardHandler))
	err := s.Process(context.Background(), "w", []Claim{{ID: 1, Attempts: 1}, {ID: 2, Attempts: 1}})
	items, ok := errors.AsType[ItemErrors](err)
	if !ok || len(items) != 2 {
		t.Fatalf("Process = %v, want both messages to retry", err)
	}
	if ra, ok := errors.AsType[RetryAfterer](items[1]); !ok || ra.RetryAfter() != 30*time.Second || ra.Error() != "HTTP 429" {
		t.Errorf("message 1's cause %v, want HTTP 429 asking for 30s", items[1])
	}
	if ra, ok := errors.AsType[RetryAfterer](items[2]); ok && ra.RetryAfter() != 0 {
		t.Errorf("message 2's cause asks for %v, want nothing", ra.RetryAfter())
	}
}

// When the record of a batch cut short fails, the messages sent come back
// to be retried (counted), the ones not sent to be handed back: they were
// never attempted.
func TestOutboxSenderFailedRecordHandsBackTheNotSent(t *testing.T) {
	t.Parallel()
	work := &fakeOutbox{msgs: map[int64]fulfillment.OutboxMessage{1: {ID: 1}, 2: {ID: 2}, 3: {ID: 3}},
		recordErr: errors.New("connection reset")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newSender(work, Destination{ID: "crm", Idempotent: true, Concurrency: 1,
		Deliver: func(context.Context, fulfillment.OutboxMessage) fulfillment.DeliveryAttempt {
			cancel() // the worker stops during the first request
			return fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeDelivered, Status: 200}
		}}, slog.New(slog.DiscardHandler))
	err := s.Process(ctx, "w", []Claim{{ID: 1, Attempts: 1}, {ID: 2, Attempts: 1}, {ID: 3, Attempts: 1}})
	items, ok := errors.AsType[ItemErrors](err)
	if !ok || len(items) != 3 || items[1] == nil || errors.Is(items[1], ErrNotStarted) ||
		!errors.Is(items[2], ErrNotStarted) || !errors.Is(items[3], ErrNotStarted) {
		t.Errorf("Process = %v, want message 1 to retry and 2 and 3 handed back", err)
	}
}

// A 410 answer stops the batches of every worker of the destination, not
// only the one whose request got it: another batch waiting for a request
// slot starts nothing when the 410 frees one, and the workers claim
// nothing, while the 410 is being recorded; afterwards a batch asks the
// database whether the destination is still disabled, and sends once a
// person enabled it.
func TestOutboxSenderStopsEveryBatchAfterA410(t *testing.T) {
	t.Parallel()
	msgs := map[int64]fulfillment.OutboxMessage{}
	for id := range int64(8) {
		msgs[id+1] = fulfillment.OutboxMessage{ID: id + 1}
	}
	work := &fakeOutbox{msgs: msgs}
	var (
		requests atomic.Int32
		answers  = make(chan fulfillment.DeliveryAttempt)
	)
	gone := fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeGone, Status: 410}
	s := newSender(work, Destination{ID: "crm", Idempotent: true, Concurrency: 2,
		Deliver: func(context.Context, fulfillment.OutboxMessage) fulfillment.DeliveryAttempt {
			if requests.Add(1) <= 2 {
				return <-answers
			}
			return delivered
		}}, slog.New(slog.DiscardHandler))
	process := func(ids ...int64) <-chan error {
		claims := make([]Claim, len(ids))
		for i, id := range ids {
			claims[i] = Claim{ID: id, Attempts: 1}
		}
		done := make(chan error, 1)
		go func() { done <- s.Process(context.Background(), "w", claims) }()
		return done
	}
	handedBack := func(err error) int {
		items, _ := errors.AsType[ItemErrors](err)
		n := 0
		for _, cause := range items {
			if errors.Is(cause, ErrNotStarted) {
				n++
			}
		}
		return n
	}

	first := process(1, 2)
	for requests.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	second := process(3, 4) // waits for a slot
	answers <- gone
	if err := <-second; requests.Load() != 2 || handedBack(err) != 2 {
		t.Errorf("another batch: %d requests in all, Process = %v; want none past the 2 in flight, both handed back",
			requests.Load(), err)
	}
	if until := s.claimsHeldUntil(); !time.Now().Before(until) {
		t.Errorf("claims held until %v while the 410 is not recorded, want a moment ahead", until)
	}
	answers <- gone
	if err := <-first; handedBack(err) != 0 {
		t.Errorf("the first batch: Process = %v, want both its messages recorded", err)
	}
	if until := s.claimsHeldUntil(); !until.IsZero() {
		t.Errorf("claims held until %v once the 410 is recorded, want not held", until)
	}

	work.disabled.Store(true) // what the record did
	checks := work.checks.Load()
	if err := <-process(5, 6); requests.Load() != 2 || handedBack(err) != 2 || work.checks.Load() != checks+1 {
		t.Errorf("a batch claimed before the disable committed: %d requests in all, %d checks, Process = %v; "+
			"want it to ask once and hand both back", requests.Load(), work.checks.Load()-checks, err)
	}
	work.disabled.Store(false) // a person enabled it
	if err := <-process(7, 8); err != nil || requests.Load() != 4 {
		t.Errorf("once enabled: %d requests in all, Process = %v; want both sent", requests.Load(), err)
	}
}
