package fulfillment

import (
	"errors"
	"testing"
	"time"
)

func TestActivityWindow(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 4, 31, 5, time.UTC)
	for _, tc := range []struct {
		minutes   int
		wantStart time.Time
		wantN     int
		wantErr   bool
	}{
		{0, time.Date(2026, 12, 1, 11, 4, 0, 0, time.UTC), 61, false},
		{1, time.Date(2026, 12, 1, 12, 3, 0, 0, time.UTC), 2, false},
		{180, time.Date(2026, 12, 1, 9, 4, 0, 0, time.UTC), 181, false},
		{181, time.Time{}, 0, true},
		{-1, time.Time{}, 0, true},
	} {
		start, n, err := ActivityWindow(now, tc.minutes)
		if (err != nil) != tc.wantErr || !start.Equal(tc.wantStart) || n != tc.wantN {
			t.Errorf("ActivityWindow(%d) = %v, %d, %v; want %v, %d, error %v", tc.minutes, start, n, err, tc.wantStart, tc.wantN, tc.wantErr)
		}
		if ve := (*ValidationError)(nil); err != nil && !errors.As(err, &ve) {
			t.Errorf("ActivityWindow(%d) error %v is not a ValidationError", tc.minutes, err)
		}
	}
}

func TestActivityMinutes(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	m := func(i int) time.Time { return start.Add(time.Duration(i) * time.Minute) }
	got := ActivityMinutes(start, 3, []ActivityCount{
		{m(0), ActivityEventsReceived, 5},
		{m(2), ActivityEventsReceived, 1},
		{m(2), ActivityOrdersFulfilled, 2},
		{m(1), ActivityMessagesDelivered, 7},
		{m(-1), ActivityEventsReceived, 100}, // before the window
		{m(3), ActivityEventsReceived, 100},  // after it
		{m(1), "unknown", 100},
	})
	want := []ActivityMinute{
		{Start: m(0), EventsReceived: 5},
		{Start: m(1), MessagesDelivered: 7},
		{Start: m(2), EventsReceived: 1, OrdersFulfilled: 2},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d minutes, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("minute %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
