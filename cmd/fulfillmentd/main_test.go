package main

import (
	"bytes"
	"testing"

	"github.com/fulfillplatform/fulfillment/internal/buildinfo"
)

// --version prints the build: version, commit, build time, Go.
func TestVersion(t *testing.T) {
	t.Parallel()
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs([]string{"--version"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if want := "fulfillmentd " + buildinfo.Read().String() + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
}
