// Command fulfillctl is the admin CLI of the fulfillment service. It talks
// gRPC to fulfillmentd with a bearer token.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fulfillplatform/fulfillment/internal/buildinfo"
	"github.com/fulfillplatform/fulfillment/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.ExecuteContext(ctx, newRootCmd())
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
	cli.RequireSubcommands(root)
	return root
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
