// Command fulfillmentd is the fulfillment service. `serve` runs everything:
// the gRPC API and its REST gateway, the webhook gateway and the inbox
// processor; `ingest` runs only the webhook gateway against a remote
// service; `migrate` applies database migrations.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/internal/buildinfo"
	"github.com/fulfillplatform/fulfillment/internal/cli"
	"github.com/fulfillplatform/fulfillment/internal/english"
	"github.com/fulfillplatform/fulfillment/internal/logging"
	"github.com/fulfillplatform/fulfillment/server"
	"github.com/fulfillplatform/fulfillment/storage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	err := cli.ExecuteContext(ctx, newRootCmd())
	stop() // not deferred: os.Exit below would skip it
	if err != nil {
		fmt.Fprintln(os.Stderr, "fulfillmentd:", err)
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	var configPath string
	root := &cobra.Command{
		Use:           "fulfillmentd",
		Short:         "Turns payment provider webhooks into exactly one business effect per order",
		Version:       buildinfo.Read().String(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("fulfillmentd {{.Version}}\n")
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
			log := newLogger(cfg.Log)
			if configPath == "" && os.Getenv(config.EnvConfig) == "" {
				log.Warn("no configuration file (--config or $" + config.EnvConfig + "): running on defaults; see config/example.yaml")
			}
			tuneGC(os.Getenv)
			return runServe(cmd.Context(), cfg, log)
		},
	}
	serve.Flags().BoolVar(&migrate, "migrate", false, "apply pending migrations before serving (default: database.migrate)")

	// loadMigrations is the configuration migrations run by, and the URL
	// they run on (see app.SessionURL).
	loadMigrations := func() (*config.Config, string, error) {
		cfg, err := load()
		if err != nil {
			return nil, "", err
		}
		if cfg.Database.URL == "" {
			return nil, "", app.ErrNoDatabase
		}
		return cfg, app.SessionURL(cfg), nil
	}
	var (
		migrateTo    int32
		lockTimeout  time.Duration
		lockAttempts int
	)
	migrateCmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply pending database migrations and exit",
		Long: "Apply pending database migrations and exit.\n\n" +
			"With --to, bring the schema to that version instead, undoing the migrations after it (newest first) " +
			"when it is older: before rolling the binary back to a release whose schema that is, once no replica " +
			"of the newer release runs. A migration that moved data undoes what it can; read its down section first.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, sessionURL, err := loadMigrations()
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("lock-timeout") {
				cfg.Database.MigrateLockTimeout = lockTimeout
			}
			if cmd.Flags().Changed("lock-attempts") {
				cfg.Database.MigrateLockAttempts = lockAttempts
			}
			if err := cfg.Database.ValidateMigrateLock(); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			wait := app.MigrateLockWait(cfg.Database, func(lt *storage.LockTimeoutError) {
				_, _ = fmt.Fprintln(cmd.ErrOrStderr(), lt.Error())
			})
			if cmd.Flags().Changed("to") {
				if err := storage.MigrateTo(cmd.Context(), sessionURL, migrateTo, wait); err != nil {
					return app.PoolerError(err)
				}
				_, _ = fmt.Fprintf(out, "schema at version %d\n", migrateTo)
				return nil
			}
			var ahead *storage.SchemaAheadError
			switch err := storage.Migrate(cmd.Context(), sessionURL, wait); {
			case errors.As(err, &ahead):
				_, _ = fmt.Fprintln(out, ahead.Error())
				return nil
			case err != nil:
				return app.PoolerError(err)
			}
			_, _ = fmt.Fprintln(out, "migrations applied")
			return nil
		},
	}
	migrateCmd.Flags().Int32Var(&migrateTo, "to", 0, "bring the schema to this version, applying or undoing migrations (see migrate status)")
	migrateCmd.Flags().DurationVar(&lockTimeout, "lock-timeout", 0,
		"how long a migration waits for a lock, holding up the tables it changes, before it gives way (default: database.migrate_lock_timeout, 5s)")
	migrateCmd.Flags().IntVar(&lockAttempts, "lock-attempts", 0,
		"how many attempts a run of the migrations makes in all, each starting again from the one that gave way (default: database.migrate_lock_attempts, 10)")
	migrateCmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Say which migrations the database has applied and which are pending; change nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, sessionURL, err := loadMigrations()
			if err != nil {
				return err
			}
			st, err := storage.MigrationStatusOf(cmd.Context(), sessionURL)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if st.Applied > st.Latest {
				_, _ = fmt.Fprintf(out, "schema at version %d, newer than this binary's latest (%d): nothing pending; "+
					"this binary runs on it (to take the schema back, run the newer binary's `fulfillmentd migrate --to %d`)\n",
					st.Applied, st.Latest, st.Latest)
				return nil
			}
			if len(st.Pending) == 0 {
				_, _ = fmt.Fprintf(out, "schema at version %d of %d: current\n", st.Applied, st.Latest)
				return nil
			}
			_, _ = fmt.Fprintf(out, "schema at version %d of %d: %d pending (fulfillmentd migrate applies them):\n",
				st.Applied, st.Latest, len(st.Pending))
			for _, f := range st.Pending {
				_, _ = fmt.Fprintln(out, "  "+f)
			}
			return nil
		},
	})
	configCmd := &cobra.Command{Use: "config", Short: "Work with the configuration"}
	configCmd.AddCommand(&cobra.Command{
		Use:   "check",
		Short: "Load and validate the configuration (file, environment, secrets) and exit; connect to nothing",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := load()
			if err != nil {
				return err
			}
			if err := app.CheckConfig(cfg); err != nil {
				return err
			}
			for _, w := range cfg.Deprecated() {
				_, _ = fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
			}
			db := "set"
			if cfg.Database.URL == "" {
				db = "not set (" + app.ErrNoDatabase.Error() + ")"
			}
			_, _ = fmt.Fprintf(cmd.OutOrStdout(), "configuration valid: %s, %s, %s, %s; database URL %s\n",
				english.Plural(len(cfg.Endpoints), "endpoint"), english.Plural(len(cfg.Auth.Tokens), "token"),
				english.Plural(len(cfg.Destinations), "destination"), english.Plural(len(cfg.Plans), "plan"), db)
			return nil
		},
	})
	ingestCmd := &cobra.Command{
		Use:   "ingest",
		Short: "Serve only the webhook gateway, forwarding to a remote FulfillmentService",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := load()
			if err != nil {
				return err
			}
			tuneGC(os.Getenv)
			return runIngest(cmd.Context(), cfg, newLogger(cfg.Log))
		},
	}
	root.AddCommand(serve, migrateCmd, configCmd, ingestCmd)
	cli.RequireSubcommands(root)
	return root
}

// newLogger writes JSON lines (or, with log.format text, key=value lines)
// on stderr, each value on one line, durations in milliseconds, each cause
// of warnings once per log.repeat_interval, with the request id of the
// context.
func newLogger(c config.Log) *slog.Logger {
	var l slog.Level
	_ = l.UnmarshalText([]byte(c.Level)) // validated by config
	h := logging.NewFormatHandler(os.Stderr, c.Format, l, c.RepeatInterval)
	return slog.New(server.ContextHandler{Handler: h})
}
