// Command fulfillctl is the admin CLI of the fulfillment service. It talks
// gRPC to fulfillmentd with a bearer token.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fulfillplatform/fulfillment/internal/buildinfo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop() // not deferred: os.Exit below would skip it
	if err != nil {
		fmt.Fprintln(os.Stderr, "fulfillctl:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	var c conn
	root := &cobra.Command{
		Use:           "fulfillctl",
		Short:         "Administer the fulfillment service",
		Version:       buildinfo.Read().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("fulfillctl {{.Version}}\n")
	f := root.PersistentFlags()
	f.StringVar(&c.addr, "addr", envOr("FULFILLCTL_ADDR", "127.0.0.1:9090"), "gRPC address of fulfillmentd ($FULFILLCTL_ADDR)")
	f.StringVar(&c.tokenFile, "token-file", os.Getenv("FULFILLCTL_TOKEN_FILE"), "file holding the bearer token ($FULFILLCTL_TOKEN_FILE; or set $FULFILLCTL_TOKEN)")
	f.BoolVar(&c.tls, "tls", false, "connect with TLS")
	f.StringVar(&c.caFile, "ca-file", "", "PEM file of the CA that signed the server certificate (with --tls; default: system roots)")
	var output string
	f.StringVarP(&output, "output", "o", "table", "output format: table (for people) or json (for scripts; the same as --json)")
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return applyOutput(cmd, output) }
	root.AddCommand(newOrdersCmd(&c), newSubscriptionsCmd(&c), newAccessCmd(&c), newOutboxCmd(&c), newDestinationsCmd(&c),
		newReconCmd(&c), newEventsCmd(&c), newRedriveCmd(&c), newWatchCmd(&c), newWebhookCmd(), newListenCmd(), newTriggerCmd(&c))
	requireSubcommands(root)
	return root
}

// requireSubcommands makes every command under root that only groups
// others (orders, redrive, …) refuse an unknown subcommand as cobra refuses
// one of root: `unknown command "gte" for "fulfillctl orders"`, with the
// names it may have meant, and exit 1. Cobra runs no such command: it
// printed its help and exited 0, so a typo looked like success. Without
// arguments, or with "help", it still prints its help, whose usage line
// names its subcommands only ("fulfillctl orders [command]"), as before.
func requireSubcommands(root *cobra.Command) {
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "{{if .Runnable}}",
		"{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			if sub.HasSubCommands() && !sub.Runnable() {
				sub.Args = cobra.ArbitraryArgs
				sub.RunE = unknownSubcommand
			}
			walk(sub)
		}
	}
	walk(root)
}

// unknownSubcommand is the RunE of a command that groups others, run when
// no subcommand matched its first argument.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 || args[0] == "help" {
		return cmd.Help()
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's default, which it sets only for root's own check
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t") + "\n"
	}
	return errors.New(msg)
}

// applyOutput turns --output json into the command's own --json flag.
func applyOutput(cmd *cobra.Command, output string) error {
	switch output {
	case "table", "text":
		return nil
	case "json":
		if cmd.Flags().Lookup("json") == nil {
			return fmt.Errorf("%s prints no JSON: leave out -o json", cmd.CommandPath())
		}
		return cmd.Flags().Set("json", "true")
	}
	return fmt.Errorf("-o %q: use -o table or -o json", output)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
