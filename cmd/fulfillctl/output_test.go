package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/internal/buildinfo"
	"github.com/fulfillplatform/fulfillment/internal/cli"
	"github.com/fulfillplatform/fulfillment/internal/english"
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
		if cmd.Runnable() && !cmd.HasSubCommands() && cmd.Example == "" && cmd.Name() != "help" && cmd.Name() != "completion" {
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

// A typo in a subcommand fails, as one in a command does: exit 1 (an
// error), nothing on stdout, cobra's words and its suggestions. It printed
// the group's help and succeeded. Every group does so; a group without
// arguments still prints its help, and its usage names its subcommands
// only.
func TestUnknownSubcommand(t *testing.T) {
	t.Parallel()
	run := func(args ...string) (string, error) {
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(args)
		err := cmd.Execute()
		return out.String(), err
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"orders", "gte", "1"}, "unknown command \"gte\" for \"fulfillctl orders\"\n\nDid you mean this?\n\tget\n"},
		{[]string{"redrive", "watch", "1"}, "unknown command \"watch\" for \"fulfillctl redrive\"\n\nDid you mean this?\n\tget\n"},
		{[]string{"access", "chek"}, "unknown command \"chek\" for \"fulfillctl access\"\n\nDid you mean this?\n\tcheck\n"},
		{[]string{"webhook", "--json"}, "unknown flag: --json"},
		{[]string{"ordres"}, "unknown command \"ordres\" for \"fulfillctl\"\n\nDid you mean this?\n\torders\n"},
	} {
		out, err := run(c.args...)
		if err == nil || err.Error() != c.want || out != "" {
			t.Errorf("%v: %v, printed %q; want the error %q", c.args, err, out, c.want)
		}
	}
	var groups []*cobra.Command
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			if sub.HasSubCommands() {
				groups = append(groups, sub)
			}
			walk(sub)
		}
	}
	walk(newRootCmd())
	if len(groups) < 9 { // orders, subscriptions, access, outbox, destinations, recon, events, redrive, webhook
		t.Fatalf("%d groups of commands found", len(groups))
	}
	for _, g := range groups {
		path := strings.Fields(g.CommandPath())[1:]
		if _, err := run(append(path, "nosuch")...); err == nil || !strings.HasPrefix(err.Error(), `unknown command "nosuch" for "`+g.CommandPath()+`"`) {
			t.Errorf("%s nosuch: %v", g.CommandPath(), err)
		}
		for _, args := range [][]string{path, append(path, "help")} {
			out, err := run(args...)
			if err != nil || !strings.Contains(out, "Usage:\n  "+g.CommandPath()+" [command]\n") || strings.Contains(out, g.CommandPath()+" [flags]") {
				t.Errorf("%v: %v, printed\n%s", args, err, out)
			}
		}
	}
}

// A typo in completion's shell fails as one in a subcommand does, naming
// the shells; it printed completion's help and exited 0. main runs the
// command line as this test does (cli.ExecuteContext).
func TestUnknownShell(t *testing.T) {
	t.Parallel()
	for _, shell := range []string{"bsh", "zsh2"} {
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs([]string{"completion", shell})
		err := cli.ExecuteContext(t.Context(), cmd)
		want := "unknown command \"" + shell + "\" for \"fulfillctl completion\"\n\nShells: bash, fish, powershell, zsh\n"
		if err == nil || err.Error() != want || out.Len() != 0 {
			t.Errorf("completion %s: %v, printed %q; want the error %q", shell, err, out.String(), want)
		}
	}
}

// The customer's flag is --customer-ref everywhere, as in orders list,
// webhook send and the API; --customer, its first name in subscriptions,
// access check and trigger, still works, hidden, and says it is
// deprecated, as redrive's --env (now --environment) does: it sets the new
// flag, which counts as given for a required one.
func TestDeprecatedFlagNames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ path, old, name string }{
		{"subscriptions list", "customer", "customer-ref"},
		{"subscriptions create", "customer", "customer-ref"},
		{"access check", "customer", "customer-ref"},
		{"trigger", "customer", "customer-ref"},
		{"redrive plan", "env", "environment"},
		{"redrive start", "env", "environment"},
	} {
		cmd, _, err := newRootCmd().Find(strings.Fields(c.path))
		if err != nil {
			t.Fatal(err)
		}
		old, flag := cmd.Flags().Lookup(c.old), cmd.Flags().Lookup(c.name)
		if old == nil || flag == nil || !old.Hidden || old.Deprecated != "use --"+c.name {
			t.Errorf("%s: --%s %+v, --%s %+v", c.path, c.old, old, c.name, flag)
			continue
		}
		var warned bytes.Buffer
		cmd.Flags().SetOutput(&warned)
		if err := cmd.Flags().Parse([]string{"--" + c.old, "v1"}); err != nil {
			t.Errorf("%s --%s v1: %v", c.path, c.old, err)
			continue
		}
		if flag.Value.String() != "v1" || !flag.Changed || warned.String() != "Flag --"+c.old+" has been deprecated, use --"+c.name+"\n" {
			t.Errorf("%s --%s v1: --%s is %q (changed %v); warned %q", c.path, c.old, c.name, flag.Value, flag.Changed, warned.String())
		}
	}
}

// --json writes what the REST gateway answers: every field, a false or
// empty one too (has_access was left out when false), under its proto name,
// indented by encoding/json (protojson's spacing varies by build: it put
// two spaces after some colons).
func TestJSONOutputHasEveryField(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := printJSON(&out, &fulfillmentv1.CheckAccessResponse{Reason: "no subscription of this customer to this plan"}); err != nil {
		t.Fatal(err)
	}
	want := `{
  "has_access": false,
  "until": null,
  "reason": "no subscription of this customer to this plan",
  "subscription_id": "",
  "check_time": null
}
`
	if out.String() != want {
		t.Errorf("printJSON wrote\n%s\nwant\n%s", out.String(), want)
	}
	out.Reset()
	if err := printEventJSON(&out, &fulfillmentv1.WatchOrderEventsResponse{Cursor: "7.1", Topic: "order.fulfilled", OrderId: "o1",
		Payload: `{"type": "order.fulfilled"}`}); err != nil {
		t.Fatal(err)
	}
	want = `{"create_time":null,"cursor":"7.1","environment":"","order_id":"o1","org_id":"","payload":{"type":"order.fulfilled"},"subscription_id":"","topic":"order.fulfilled"}` + "\n"
	if out.String() != want {
		t.Errorf("printEventJSON wrote\n%s\nwant\n%s", out.String(), want)
	}
}

// Counts agree with their nouns ("re-drive 7 started with 1 item", not
// "1 items").
func TestPlural(t *testing.T) {
	t.Parallel()
	if got := english.Plural(int64(1), "item") + ", " + english.Plural(int32(0), "period") + ", " + english.Plural(2, "attempt"); got != "1 item, 0 periods, 2 attempts" {
		t.Errorf("plural: %q", got)
	}
}
