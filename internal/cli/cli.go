// Package cli is what the command lines of fulfillctl and fulfillmentd
// share: a command that only groups others (fulfillctl orders,
// fulfillmentd config, cobra's completion) refuses an unknown subcommand
// instead of printing its help and exiting 0, so a typo does not look like
// success.
package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// groupAnnotation marks a command RequireSubcommands made refuse unknown
// subcommands: it runs only to say so, so its usage line names its
// subcommands only ("fulfillctl orders [command]").
const groupAnnotation = "cli.group"

// RequireSubcommands makes every command under root that only groups
// others refuse an unknown subcommand as cobra refuses one of root:
// `unknown command "gte" for "fulfillctl orders"`, with the names it may
// have meant. Without arguments, or with "help", it still prints its help.
func RequireSubcommands(root *cobra.Command) {
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(), "{{if .Runnable}}",
		`{{if and .Runnable (not (index .Annotations "`+groupAnnotation+`"))}}`, 1))
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, sub := range cmd.Commands() {
			if sub.HasSubCommands() && !sub.Runnable() {
				refuseUnknown(sub, unknownSubcommand)
			}
			walk(sub)
		}
	}
	walk(root)
}

// ExecuteContext runs root (ExecuteContext) with cobra's completion
// command refusing an unknown shell ("completion bsh") as the groups of
// RequireSubcommands refuse an unknown subcommand, naming the shells.
// Cobra adds that command only as it executes, after RequireSubcommands
// ran; it is added here first to be changed.
func ExecuteContext(ctx context.Context, root *cobra.Command) error {
	root.InitDefaultCompletionCmd() // the arguments matter only to a root without subcommands
	for _, sub := range root.Commands() {
		if sub.Name() == "completion" && sub.HasSubCommands() && !sub.Runnable() {
			refuseUnknown(sub, unknownShell)
		}
	}
	return root.ExecuteContext(ctx)
}

func refuseUnknown(cmd *cobra.Command, run func(*cobra.Command, []string) error) {
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = run
	if cmd.Annotations == nil {
		cmd.Annotations = map[string]string{}
	}
	cmd.Annotations[groupAnnotation] = "true"
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
	msg := unknown(cmd, args[0])
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t") + "\n"
	}
	return errors.New(msg)
}

// unknownShell is completion's unknownSubcommand: it names every shell,
// as there are few, where a group names the subcommands near the typo.
func unknownShell(cmd *cobra.Command, args []string) error {
	if len(args) == 0 || args[0] == "help" {
		return cmd.Help()
	}
	var shells []string
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() {
			shells = append(shells, sub.Name())
		}
	}
	return errors.New(unknown(cmd, args[0]) + "\n\nShells: " + strings.Join(shells, ", ") + "\n")
}

func unknown(cmd *cobra.Command, name string) string {
	return fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
}
