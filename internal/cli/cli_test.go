package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// newRoot is a command line like the binaries': a group ("orders") and a
// command that runs itself and has one below it ("migrate").
func newRoot(out *bytes.Buffer) *cobra.Command {
	root := &cobra.Command{Use: "tool", SilenceUsage: true, SilenceErrors: true}
	orders := &cobra.Command{Use: "orders", Short: "Work with orders"}
	orders.AddCommand(&cobra.Command{Use: "get", RunE: func(*cobra.Command, []string) error { return nil }})
	migrate := &cobra.Command{Use: "migrate", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }}
	migrate.AddCommand(&cobra.Command{Use: "status", RunE: func(*cobra.Command, []string) error { return nil }})
	root.AddCommand(orders, migrate)
	RequireSubcommands(root)
	root.SetOut(out)
	root.SetErr(out)
	return root
}

// A typo in a group's subcommand or in completion's shell fails, naming
// what it may have meant (completion: every shell); without an argument,
// or with help, the group prints its help and succeeds. Cobra's completion
// printed its help and exited 0 for any shell it did not know.
func TestUnknownSubcommandsFail(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		err  string // "" for none
		out  string // what the output holds
	}{
		{[]string{"orders", "gte"}, "unknown command \"gte\" for \"tool orders\"\n\nDid you mean this?\n\tget\n", ""},
		{[]string{"orders", "zzz"}, "unknown command \"zzz\" for \"tool orders\"", ""},
		{[]string{"orders"}, "", "Usage:\n  tool orders [command]\n\n"},
		{[]string{"orders", "help"}, "", "Usage:\n  tool orders [command]\n\n"},
		{[]string{"migrate", "--help"}, "", "Usage:\n  tool migrate [flags]\n  tool migrate [command]\n"},
		{[]string{"completion", "bsh"}, "unknown command \"bsh\" for \"tool completion\"\n\nShells: bash, fish, powershell, zsh\n", ""},
		{[]string{"completion", "zsh2"}, "unknown command \"zsh2\" for \"tool completion\"\n\nShells: bash, fish, powershell, zsh\n", ""},
		{[]string{"completion"}, "", "Usage:\n  tool completion [command]\n\n"},
		{[]string{"completion", "help"}, "", "Usage:\n  tool completion [command]\n\n"},
		{[]string{"completion", "bash"}, "", "# bash completion V2 for tool"},
	} {
		var out bytes.Buffer
		root := newRoot(&out)
		root.SetArgs(c.args)
		err := ExecuteContext(t.Context(), root)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%v: %v, want no error", c.args, err)
		case c.err != "" && (err == nil || err.Error() != c.err):
			t.Errorf("%v: error %v, want %q", c.args, err, c.err)
		case !strings.Contains(out.String(), c.out):
			t.Errorf("%v printed\n%s\nwant it to hold %q", c.args, out.String(), c.out)
		}
	}
}
