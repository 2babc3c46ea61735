package main

import (
	"strings"
	"testing"
)

func TestWALGoalSaysWhenACheckpointBeganInThePush(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		checkpoints int64
		want        string
	}{
		{0, ""},
		{1, "1 checkpoint(s) began during the push: 0.12 full-page images per event are in this figure"},
	} {
		b := &bench{}
		b.rep.Sustained = &Sustained{Events: 1000, WALBytesPerEvent: 3631, WALImagesPerEvent: 0.12, Checkpoints: tc.checkpoints}
		var wal *Goal
		for _, g := range b.coreGoals() {
			if g.Key == "wal_bytes_per_event" {
				wal = &g
			}
		}
		if wal == nil || wal.Met {
			t.Fatalf("checkpoints %d: WAL goal %+v", tc.checkpoints, wal)
		}
		if got := strings.Contains(wal.Margin, "checkpoint"); got != (tc.want != "") || !strings.Contains(wal.Margin, tc.want) {
			t.Errorf("checkpoints %d: margin %q, want it to say %q", tc.checkpoints, wal.Margin, tc.want)
		}
	}
}
