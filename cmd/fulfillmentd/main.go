// Command fulfillmentd is the fulfillment service: `serve` runs the gRPC API
// and its REST gateway, `migrate` applies database migrations.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/server"
	"github.com/fulfillplatform/fulfillment/storage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "fulfillmentd:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	var configPath string
	root := &cobra.Command{
		Use:           "fulfillmentd",
		Short:         "Turns payment provider webhooks into exactly one business effect per order",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&configPath, "config", "", "configuration file (default: $"+config.EnvConfig+")")
	load := func() (*config.Config, error) {
		path := configPath
		if path == "" {
			path = os.Getenv(config.EnvConfig)
		}
		return config.Load(path, os.Getenv)
	}

	var migrate bool
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve the gRPC API and the REST gateway",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := load()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("migrate") {
				cfg.Database.Migrate = migrate
			}
			return runServe(cmd.Context(), cfg)
		},
	}
	serve.Flags().BoolVar(&migrate, "migrate", false, "apply pending migrations before serving (default: database.migrate)")

	migrateCmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending database migrations and exit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := load()
			if err != nil {
				return err
			}
			if cfg.Database.URL == "" {
				return errNoDatabase
			}
			if err := storage.Migrate(cmd.Context(), cfg.Database.URL); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "migrations applied")
			return nil
		},
	}
	root.AddCommand(serve, migrateCmd)
	return root
}

var errNoDatabase = errors.New("config: database: set DATABASE_URL (or database.url_env / database.url_file)")

func runServe(ctx context.Context, cfg *config.Config) error {
	log := newLogger(cfg.Log.Level)
	if cfg.Database.URL == "" {
		return errNoDatabase
	}
	if cfg.Database.Migrate {
		if err := storage.Migrate(ctx, cfg.Database.URL); err != nil {
			return err
		}
		log.Info("migrations applied")
	}
	store, err := storage.Open(ctx, cfg.Database.URL, storage.Options{
		MaxConns:       cfg.Database.MaxConns,
		ConnectTimeout: cfg.Database.ConnectTimeout,
	})
	if err != nil {
		return err
	}
	defer store.Close()
	return server.New(cfg, store, log).Run(ctx)
}

func newLogger(level string) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(level)) // validated by config
	h := slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: l})
	return slog.New(server.ContextHandler{Handler: h})
}
