package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// counted returns n fresh minutes from since, each counting v events.
func counted(since time.Time, n int, v int64) []fulfillment.ActivityMinute {
	out := make([]fulfillment.ActivityMinute, n)
	for i := range out {
		out[i] = fulfillment.ActivityMinute{Start: since.Add(time.Duration(i) * time.Minute), EventsReceived: v}
	}
	return out
}

// Minutes that ended activitySettle ago are counted once and kept; the
// rest, and the current minute, are counted on every call.
func TestActivityMemoKeepsSettledMinutes(t *testing.T) {
	t.Parallel()
	m := newActivityMemo()
	start := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	const n = 61 // 11:00 … 12:00, the current minute
	now := start.Add(60*time.Minute + 10*time.Second)
	if s, _ := m.since("k", start, n); !s.Equal(start) {
		t.Fatalf("first call counts from %v, want the window's start", s)
	}
	got := m.window("k", start, n, nil, counted(start, n, 1), now)
	if len(got) != n || got[0].EventsReceived != 1 || got[n-1].EventsReceived != 1 {
		t.Fatalf("first window = %d minutes %+v … %+v", len(got), got[0], got[n-1])
	}
	// 10 s into 12:00, 11:59 ended 10 s ago: not settled, counted again.
	if s, _ := m.since("k", start, n); !s.Equal(start.Add(59 * time.Minute)) {
		t.Fatalf("second call counts from %v, want 11:59", s)
	}
	// 40 s into 12:00: 11:59 is counted once more (2 now) and kept.
	now = now.Add(30 * time.Second)
	since, kept := m.since("k", start, n)
	got = m.window("k", start, n, kept, counted(since, 2, 2), now)
	if got[58].EventsReceived != 1 || got[59].EventsReceived != 2 || got[60].EventsReceived != 2 {
		t.Fatalf("window after 11:59 settled: 11:58 %d, 11:59 %d, 12:00 %d", got[58].EventsReceived, got[59].EventsReceived, got[60].EventsReceived)
	}
	s, kept := m.since("k", start, n)
	if !s.Equal(start.Add(60 * time.Minute)) {
		t.Fatalf("third call counts from %v, want the current minute only", s)
	}
	got = m.window("k", start, n, kept, counted(start.Add(60*time.Minute), 1, 7), now)
	if got[59].EventsReceived != 2 || got[60].EventsReceived != 7 {
		t.Errorf("kept 11:59 = %d, current 12:00 = %d; want 2 and 7", got[59].EventsReceived, got[60].EventsReceived)
	}
	// The key forgotten between since and window (another filter's call
	// made room): the window still holds what since saw kept.
	s, kept = m.since("k", start, n)
	delete(m.keys, "k")
	got = m.window("k", start, n, kept, counted(s, 1, 8), now)
	if len(got) != n || !got[0].Start.Equal(start) || got[0].EventsReceived != 1 || got[59].EventsReceived != 2 || got[60].EventsReceived != 8 {
		t.Errorf("window after its key was forgotten: %d minutes, first %+v, 11:59 %d, 12:00 %d", len(got), got[0], got[59].EventsReceived, got[60].EventsReceived)
	}
	// Another filter keeps its own minutes.
	if s, _ := m.since("other", start, n); !s.Equal(start) {
		t.Errorf("another key counts from %v, want the start", s)
	}
}

func TestActivityMemoBounded(t *testing.T) {
	t.Parallel()
	m := newActivityMemo()
	start := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	now := start.Add(10 * time.Minute)
	for i := range activityKeys + 1 {
		m.window(fmt.Sprint(i), start, 3, nil, counted(start, 3, 1), now.Add(time.Duration(i)*time.Millisecond))
	}
	if len(m.keys) != activityKeys {
		t.Fatalf("%d keys kept, want %d", len(m.keys), activityKeys)
	}
	if _, ok := m.keys["0"]; ok {
		t.Errorf("the least recently used key was kept")
	}
	// Minutes older than any window are forgotten.
	later := now.Add(time.Duration(fulfillment.MaxActivityMinutes+5) * time.Minute)
	m.window("1", later, 2, nil, counted(later, 2, 1), later.Add(2*time.Minute))
	for ts := range m.keys["1"].minutes {
		if time.Unix(ts, 0).Before(later.Add(-time.Duration(fulfillment.MaxActivityMinutes+1) * time.Minute)) {
			t.Errorf("a minute %v older than any window is kept", time.Unix(ts, 0).UTC())
		}
	}
}

func TestActivityKey(t *testing.T) {
	t.Parallel()
	all := activityKey(fulfillment.ReconFilter{})
	some := activityKey(fulfillment.ReconFilter{VisibleOrgs: []string{}})
	a := activityKey(fulfillment.ReconFilter{VisibleOrgs: []string{"org_a"}, Environment: fulfillment.EnvLive})
	if all == some || all == a || some == a {
		t.Errorf("keys collide: %q %q %q", all, some, a)
	}
}

// A whole answer is reused for activityFresh, for the same window only,
// with the time it was counted.
func TestActivityMemoReusesRecentAnswer(t *testing.T) {
	t.Parallel()
	m := newActivityMemo()
	start := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	now := start.Add(60*time.Minute + 10*time.Second)
	if _, _, ok := m.recent("k", start, 61, now); ok {
		t.Fatal("an answer before any count")
	}
	m.window("k", start, 61, nil, counted(start, 61, 1), now)
	if got, at, ok := m.recent("k", start, 61, now.Add(4*time.Second)); !ok || len(got) != 61 || !at.Equal(now) {
		t.Errorf("4 s later: %d minutes counted at %v, %v; want the answer counted at %v", len(got), at, ok, now)
	}
	if _, _, ok := m.recent("k", start, 61, now.Add(activityFresh)); ok {
		t.Error("an answer reused past activityFresh")
	}
	if _, _, ok := m.recent("k", start.Add(time.Minute), 60, now.Add(time.Second)); ok {
		t.Error("an answer reused for another window")
	}
}
