package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"testing"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// fakeOutbox is a fulfillment.OutboxWork over messages by id, recording
// what it was asked to record.
type fakeOutbox struct {
	msgs      map[int64]fulfillment.OutboxMessage
	recordErr error
	recorded  [][]fulfillment.MessageAttempt
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

func (f *fakeOutbox) OutboxRecord(_ context.Context, _ string, attempts []fulfillment.MessageAttempt) ([]int64, error) {
	f.recorded = append(f.recorded, attempts)
	return nil, f.recordErr
}

// A destination's claims are sent one after the other and recorded in one
// call; the attempts that ask to be retried come back as ItemErrors, and
// when the record fails every message sent does, so that the queue retries
// each after its backoff rather than sending the batch again at once.
func TestOutboxSenderRecordsBatchAndRetriesPerMessage(t *testing.T) {
	t.Parallel()
	claims := []Claim{{ID: 1, Attempts: 1}, {ID: 2, Attempts: 1}, {ID: 3, Attempts: 2}}
	for _, tc := range []struct {
		name      string
		recordErr error
		want      []int64 // the messages to retry
	}{
		{"recorded", nil, []int64{2}},
		{"record failed", errors.New("connection reset"), []int64{1, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			work := &fakeOutbox{msgs: map[int64]fulfillment.OutboxMessage{1: {ID: 1}, 2: {ID: 2}, 3: {ID: 3}}, recordErr: tc.recordErr}
			var sent []int64
			s := &sender{work: work, log: slog.New(slog.DiscardHandler), dest: Destination{ID: "crm", Idempotent: true,
				Deliver: func(_ context.Context, m fulfillment.OutboxMessage) fulfillment.DeliveryAttempt {
					sent = append(sent, m.ID)
					if m.ID == 2 {
						return fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeRetry, Status: 503, Reason: "HTTP 503"}
					}
					return fulfillment.DeliveryAttempt{Outcome: fulfillment.OutcomeDelivered, Status: 200}
				}}}
			err := s.Process(context.Background(), "w", claims)
			if !slices.Equal(sent, []int64{1, 2, 3}) {
				t.Errorf("sent %v, want each message once, in order", sent)
			}
			if len(work.recorded) != 1 || len(work.recorded[0]) != 3 {
				t.Errorf("recorded %v, want the three attempts in one call", work.recorded)
			}
			var items ItemErrors
			if !errors.As(err, &items) {
				t.Fatalf("Process = %v, want ItemErrors", err)
			}
			if got := slices.Sorted(maps.Keys(items)); !slices.Equal(got, tc.want) {
				t.Errorf("to retry %v, want %v", got, tc.want)
			}
			if tc.recordErr == nil && fmt.Sprint(items[2]) != "HTTP 503" {
				t.Errorf("retry cause %q, want the attempt's reason", items[2])
			}
		})
	}
}
