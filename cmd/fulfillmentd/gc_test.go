package main

import (
	"runtime/debug"
	"testing"
)

// The long-running commands set the collector's target unless GOGC is in
// the environment.
func TestTuneGC(t *testing.T) { //nolint:paralleltest // sets the process's collector target
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	env := func(gogc string) func(string) string {
		return func(k string) string {
			if k == "GOGC" {
				return gogc
			}
			return ""
		}
	}
	tuneGC(env(""))
	if got := debug.SetGCPercent(100); got != defaultGCPercent {
		t.Errorf("without GOGC: target %d, want %d", got, defaultGCPercent)
	}
	tuneGC(env("50"))
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC set: target %d, want it left alone (100)", got)
	}
}
