package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/fulfillplatform/fulfillment/internal/buildinfo"
)

// -o json is every listing's --json; -o table the default; anything else,
// or JSON from a command that prints none, is an error naming the fix.
func TestOutputFlag(t *testing.T) {
	t.Parallel()
	for _, path := range [][]string{{"recon", "list"}, {"events", "get"}, {"outbox", "list"}, {"subscriptions", "list"}} {
		cmd, _, err := newRootCmd().Find(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := applyOutput(cmd, "json"); err != nil {
			t.Errorf("%v -o json: %v", path, err)
			continue
		}
		if v := cmd.Flags().Lookup("json").Value.String(); v != "true" {
			t.Errorf("%v -o json left --json %s", path, v)
		}
	}
	get, _, _ := newRootCmd().Find([]string{"orders", "get"})
	if err := applyOutput(get, "json"); err != nil {
		t.Errorf("orders get (JSON anyway) -o json: %v", err)
	}
	send, _, _ := newRootCmd().Find([]string{"webhook", "send"})
	if err := applyOutput(send, "json"); err == nil || !strings.Contains(err.Error(), "prints no JSON") {
		t.Errorf("webhook send -o json: %v", err)
	}
	list, _, _ := newRootCmd().Find([]string{"recon", "list"})
	if err := applyOutput(list, "yaml"); err == nil || !strings.Contains(err.Error(), "-o table or -o json") {
		t.Errorf("-o yaml: %v", err)
	}
	if err := applyOutput(list, "table"); err != nil || list.Flags().Lookup("json").Value.String() != "false" {
		t.Errorf("-o table: %v", err)
	}
}

// Every command a person runs shows examples in its --help.
func TestEveryCommandHasExamples(t *testing.T) {
	t.Parallel()
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		if cmd.Runnable() && cmd.Example == "" && cmd.Name() != "help" && cmd.Name() != "completion" {
			t.Errorf("%s has no examples", cmd.CommandPath())
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
}

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
	if want := "fulfillctl " + buildinfo.Read().String() + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
}
