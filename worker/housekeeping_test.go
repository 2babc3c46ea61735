package worker

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// fakeHousekeeping is a HousekeepingWork over counters: rows left to open
// items for and to purge, and what the housekeeper asked.
type fakeHousekeeping struct {
	fulfillment.HousekeepingWork // the queue methods are not called here
	overdue, bodies              int
	tasks                        map[int64]fulfillment.HousekeepingTask
	nows                         []time.Time
	statements                   int
	done                         map[int64]int
	interval                     time.Duration
}

func (f *fakeHousekeeping) HousekeepingTask(_ context.Context, id int64, _ string) (fulfillment.HousekeepingTask, error) {
	task, ok := f.tasks[id]
	if !ok {
		return "", ErrLeaseLost
	}
	return task, nil
}

func (f *fakeHousekeeping) HousekeepingDone(_ context.Context, id int64, _ string, n int, interval time.Duration) error {
	f.done[id], f.interval = n, interval
	return nil
}

func (f *fakeHousekeeping) OpenOverdueFulfillments(_ context.Context, now time.Time, _ time.Duration, limit int) (seen, opened int, err error) {
	f.nows, f.statements = append(f.nows, now), f.statements+1
	n := min(f.overdue, limit)
	f.overdue -= n
	return n, n, nil
}

func (f *fakeHousekeeping) PurgeRawBodies(_ context.Context, now time.Time, _ time.Duration, limit int) (seen, purged int, err error) {
	f.nows, f.statements = append(f.nows, now), f.statements+1
	n := min(f.bodies, limit)
	f.bodies -= n
	return n, n, nil
}

// A run works in batches until one comes back short, at most MaxBatches of
// them, at the housekeeper's clock; a task whose claim was lost is skipped;
// each run is recorded with what it did and the interval.
func TestHousekeepingRunsInBatches(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	work := &fakeHousekeeping{overdue: 25, bodies: 1000, done: map[int64]int{},
		tasks: map[int64]fulfillment.HousekeepingTask{1: fulfillment.TaskFulfillmentSLA, 2: fulfillment.TaskRawBodyPurge}}
	table := &housekeeper{work: work, now: func() time.Time { return at }, log: slog.New(slog.DiscardHandler),
		cfg: HousekeepingConfig{Interval: 7 * time.Second, Batch: 10, MaxBatches: 5}.WithDefaults()}
	if err := table.Process(context.Background(), "w", []Claim{{ID: 1}, {ID: 2}, {ID: 3}}); err != nil {
		t.Fatal(err)
	}
	if work.done[1] != 25 || work.overdue != 0 {
		t.Errorf("SLA run opened %d, %d left; want 25 in 3 batches", work.done[1], work.overdue)
	}
	if work.done[2] != 50 || work.bodies != 950 {
		t.Errorf("purge run purged %d, %d left; want 50 (5 batches of 10)", work.done[2], work.bodies)
	}
	if _, ok := work.done[3]; ok || work.statements != 3+5 {
		t.Errorf("%d statements, a lost claim done: %v", work.statements, ok)
	}
	if work.interval != 7*time.Second {
		t.Errorf("next run after %v, want the interval", work.interval)
	}
	for _, now := range work.nows {
		if !now.Equal(at) {
			t.Errorf("a batch ran at %v, want the housekeeper's clock %v", now, at)
		}
	}
}

// Without a clock, the tasks take the database's (the zero time); an
// unknown task fails its run.
func TestHousekeepingDatabaseClock(t *testing.T) {
	t.Parallel()
	work := &fakeHousekeeping{overdue: 1, done: map[int64]int{},
		tasks: map[int64]fulfillment.HousekeepingTask{1: fulfillment.TaskFulfillmentSLA, 2: "vacuum"}}
	table := &housekeeper{work: work, log: slog.New(slog.DiscardHandler), cfg: HousekeepingConfig{}.WithDefaults()}
	if err := table.Process(context.Background(), "w", []Claim{{ID: 1}}); err != nil || len(work.nows) != 1 || !work.nows[0].IsZero() {
		t.Errorf("Process = %v at %v, want the zero time", err, work.nows)
	}
	if err := table.Process(context.Background(), "w", []Claim{{ID: 2}}); err == nil || errors.Is(err, ErrLeaseLost) {
		t.Errorf("an unknown task: %v", err)
	}
}
