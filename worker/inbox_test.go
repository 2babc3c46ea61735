package worker

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// fakeInbox is a fulfillment.InboxWork whose InboxProcess calls process.
type fakeInbox struct {
	process func(ids []int64, owner string) (map[int64]fulfillment.Outcome, error)
}

func (f *fakeInbox) InboxProcess(_ context.Context, ids []int64, owner string) (map[int64]fulfillment.Outcome, error) {
	return f.process(ids, owner)
}

// The inbox processor passes claims, owners and retries through to the
// inbox's table and storage, and reports the outcome of every event it processed —
// not of those another worker took over.
func TestInboxProcessor(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		var (
			outcomes calls[string]
			retried  calls[string]
			released calls[string]
			claimed  bool
		)
		work := &fakeInbox{
			process: func(ids []int64, _ string) (map[int64]fulfillment.Outcome, error) {
				switch {
				case slices.Contains(ids, 3):
					return nil, fmt.Errorf("event 3 breaks its batch")
				case ids[0] == 1:
					return map[int64]fulfillment.Outcome{1: {Decision: fulfillment.DecisionFulfilled}}, nil
				}
				return map[int64]fulfillment.Outcome{}, nil // 2 was taken over
			},
		}
		table := &fakeTable{
			claim: func(_ string, _ int, _ time.Duration, _ int) ([]Claim, error) {
				if claimed {
					return nil, nil
				}
				claimed = true
				return []Claim{{ID: 1, Attempts: 1}, {ID: 2, Attempts: 1}, {ID: 3, Attempts: 4}}, nil
			},
			retry: func(owner string, c Claim, cause string, _ time.Time, maxAttempts int) (bool, error) {
				retried.add(fmt.Sprintf("%d by %s at attempt budget %d: %s", c.ID, owner, maxAttempts, cause))
				return false, nil
			},
			release: func(owner string) (int, error) {
				released.add(owner)
				return 0, nil
			},
		}
		q := NewInbox(table, work, liveOwner("w1"), Config{Workers: 1, MaxAttempts: 9}, discard,
			func(o fulfillment.Outcome) { outcomes.add(string(o.Decision)) })
		stop := start(q)
		synctest.Wait()
		stop()
		if got := outcomes.all(); !slices.Equal(got, []string{"fulfilled"}) {
			t.Errorf("outcomes %q, want one fulfilled", got)
		}
		if got := retried.all(); !slices.Equal(got, []string{"3 by w1 at attempt budget 9: event 3 breaks its batch"}) {
			t.Errorf("retries %q", got)
		}
		if got := released.all(); !slices.Equal(got, []string{"w1"}) {
			t.Errorf("released %q, want w1", got)
		}
	})
}
