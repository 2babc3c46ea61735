package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/internal/buildinfo"
	"github.com/fulfillplatform/fulfillment/internal/cli"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
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

func TestMain(m *testing.M) { pgtest.Main(m) }

// A typo in a subcommand fails, naming what it may have meant, as in
// fulfillctl: config's, and completion's shell, which names every shell.
// Both printed their help and exited 0. main runs the command line as
// this test does (cli.ExecuteContext).
func TestUnknownSubcommand(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"config", "chek"}, "unknown command \"chek\" for \"fulfillmentd config\"\n\nDid you mean this?\n\tcheck\n"},
		{[]string{"completion", "zsh2"}, "unknown command \"zsh2\" for \"fulfillmentd completion\"\n\nShells: bash, fish, powershell, zsh\n"},
		{[]string{"completion", "bsh"}, "unknown command \"bsh\" for \"fulfillmentd completion\"\n\nShells: bash, fish, powershell, zsh\n"},
	} {
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		cmd.SetArgs(c.args)
		err := cli.ExecuteContext(t.Context(), cmd)
		if err == nil || err.Error() != c.want || out.Len() != 0 {
			t.Errorf("%v: %v, printed %q; want the error %q", c.args, err, out.String(), c.want)
		}
	}
	// Without a subcommand, config still prints its help, naming its
	// subcommands only; migrate, which runs itself, keeps its own usage.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"config"}, "Usage:\n  fulfillmentd config [command]\n\n"},
		{[]string{"migrate", "--help"}, "Usage:\n  fulfillmentd migrate [flags]\n  fulfillmentd migrate [command]\n"},
	} {
		out, err := run(t, nil, c.args...)
		if err != nil || !strings.Contains(out, c.want) {
			t.Errorf("%v: %v, printed\n%s", c.args, err, out)
		}
	}
}

// run runs fulfillmentd with args and environment env, returning what it
// printed and its error.
func run(t *testing.T, env map[string]string, args ...string) (string, error) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	cmd := newRootCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

// config check validates without connecting; a mistake is one line naming
// the key.
func TestConfigCheck(t *testing.T) { //nolint:paralleltest // sets the environment (DATABASE_URL wins over the file)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	if err := os.WriteFile(good, []byte("database:\n  url_env: DATABASE_URL\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, map[string]string{"DATABASE_URL": "postgres://nowhere.invalid/db"}, "config", "check", "--config", good)
	if err != nil || !strings.HasPrefix(out, "configuration valid: 0 endpoints, 0 tokens, 0 destinations, 0 plans; database URL set") {
		t.Errorf("config check of a valid file: %q, %v", out, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("database:\n  max_conns: -3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := run(t, nil, "config", "check", "--config", bad); err == nil || !strings.Contains(err.Error(), "max_conns") || strings.Contains(err.Error(), "\n") {
		t.Errorf("config check of a bad file: %v, want one line naming database.max_conns", err)
	}
	// A key read and ignored: valid, with a warning on stderr.
	ignored := filepath.Join(dir, "ignored.yaml")
	if err := os.WriteFile(ignored, []byte("database:\n  url_env: DATABASE_URL\noutbox:\n  max_attempts: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := newRootCmd()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs([]string{"config", "check", "--config", ignored})
	if err := cmd.Execute(); err != nil || !strings.HasPrefix(stdout.String(), "configuration valid") ||
		stderr.String() != "warning: config: outbox.max_attempts is ignored: set destinations[].max_attempts\n" {
		t.Errorf("config check of a file setting outbox.max_attempts: %v, stdout %q, stderr %q; want it valid, with a warning",
			err, stdout.String(), stderr.String())
	}
}

// migrate status says what is pending and changes nothing; after migrate,
// it says the schema is current.
func TestMigrateStatus(t *testing.T) { //nolint:paralleltest // sets the environment (DATABASE_URL wins over the file)
	url := pgtest.DB(t)
	ctx := context.Background()
	conn := pgtest.Conn(t, url)
	// A database with nothing migrated.
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgtest.Database(url)+"_empty"); err != nil {
		t.Fatal(err)
	}
	emptyURL := strings.Replace(url, "/"+pgtest.Database(url), "/"+pgtest.Database(url)+"_empty", 1)
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgtest.Database(url)+"_empty WITH (FORCE)")
	})
	out, err := run(t, map[string]string{"DATABASE_URL": emptyURL}, "migrate", "status")
	if err != nil || !strings.Contains(out, "schema at version 0 of ") || !strings.Contains(out, "001_orders.sql") {
		t.Errorf("status of an empty database: %q, %v", out, err)
	}
	var tables int
	if err := pgxConnCount(ctx, emptyURL, &tables); err != nil || tables != 0 {
		t.Errorf("status created %d tables (%v), want none", tables, err)
	}
	out, err = run(t, map[string]string{"DATABASE_URL": url}, "migrate", "status")
	if err != nil || !strings.Contains(out, ": current") {
		t.Errorf("status of a migrated database: %q, %v", out, err)
	}
}

// migrate --to takes the schema back to a version (undoing the newest
// migrations), and migrate brings it forward again. A schema newer than the
// binary's (an older binary during an upgrade, or rolled back) is left as
// it is: migrate and status say so and succeed, and --to refuses.
func TestMigrateToAndSchemaAhead(t *testing.T) { //nolint:paralleltest // sets the environment (DATABASE_URL wins over the file)
	url := pgtest.DB(t)
	ctx := context.Background()
	env := map[string]string{"DATABASE_URL": url}
	out, err := run(t, env, "migrate", "status")
	var latest int
	if _, scanErr := fmt.Sscanf(out, "schema at version %d of", &latest); err != nil || scanErr != nil || latest < 3 {
		t.Fatalf("status: %q, %v, %v", out, err, scanErr)
	}
	back := strconv.Itoa(latest - 2)
	if out, err := run(t, env, "migrate", "--to", back); err != nil || !strings.Contains(out, "schema at version "+back) {
		t.Fatalf("migrate --to %s: %q, %v", back, out, err)
	}
	if out, err := run(t, env, "migrate", "status"); err != nil || !strings.Contains(out, ": 2 pending") {
		t.Errorf("status after going back two: %q, %v", out, err)
	}
	if out, err := run(t, env, "migrate"); err != nil || !strings.Contains(out, "migrations applied") {
		t.Fatalf("migrate: %q, %v", out, err)
	}
	if out, err := run(t, env, "migrate", "status"); err != nil || !strings.Contains(out, ": current") {
		t.Errorf("status after migrating again: %q, %v", out, err)
	}
	for _, bad := range []string{"-1", strconv.Itoa(latest + 1)} {
		if _, err := run(t, env, "migrate", "--to", bad); err == nil || !strings.Contains(err.Error(), "is not one of this binary's") {
			t.Errorf("migrate --to %s: %v, want a refusal", bad, err)
		}
	}

	// A newer release migrated the database.
	conn := pgtest.Conn(t, url)
	if _, err := conn.Exec(ctx, "UPDATE schema_version SET version = version + 1"); err != nil {
		t.Fatal(err)
	}
	ahead := fmt.Sprintf("schema at version %d, newer than this binary's latest (%d)", latest+1, latest)
	if out, err := run(t, env, "migrate", "status"); err != nil || !strings.Contains(out, ahead) {
		t.Errorf("status of a newer schema: %q, %v; want it to say %q", out, err, ahead)
	}
	if out, err := run(t, env, "migrate"); err != nil || !strings.Contains(out, "newer than this binary's latest") ||
		!strings.Contains(out, fmt.Sprintf("migrate --to %d", latest)) {
		t.Errorf("migrate on a newer schema: %q, %v; want success saying so", out, err)
	}
	if _, err := run(t, env, "migrate", "--to", back); err == nil || !strings.Contains(err.Error(), "newer than this binary's latest") {
		t.Errorf("migrate --to on a newer schema: %v, want a refusal saying so", err)
	}
}

func pgxConnCount(ctx context.Context, url string, n *int) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close(ctx) }()
	return c.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").Scan(n)
}

// migrate gives way to a long transaction as --lock-timeout and
// --lock-attempts say: each attempt that gave way is told on stderr, and
// the error names the migration and the session it waited for. A timeout
// too short to take any lock is refused.
func TestMigrateLockFlags(t *testing.T) { //nolint:paralleltest // sets the environment (DATABASE_URL wins over the file)
	url := pgtest.DB(t)
	ctx := context.Background()
	t.Setenv("DATABASE_URL", url)
	if out, err := run(t, nil, "migrate", "--to", "59"); err != nil {
		t.Fatalf("migrate --to 59: %q, %v", out, err)
	}
	report := pgtest.Conn(t, url)
	if _, err := report.Exec(ctx, "SET application_name = 'report'"); err != nil {
		t.Fatal(err)
	}
	tx, err := report.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM orders"); err != nil {
		t.Fatal(err)
	}

	cmd := newRootCmd()
	var out, errOut bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	cmd.SetArgs([]string{"migrate", "--lock-timeout", "1s", "--lock-attempts", "2"})
	err = cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "migration 060_order_paid_amount.sql waited 1s for a lock and gave way (attempt 2 of 2") ||
		!strings.Contains(err.Error(), fmt.Sprintf("pid %d (application report", report.PgConn().PID())) {
		t.Errorf("migrate behind a long transaction: %v", err)
	}
	if n := strings.Count(errOut.String(), "; trying again in 1s\n"); n != 1 || !strings.Contains(errOut.String(), "(attempt 1 of 2") {
		t.Errorf("stderr told of %d retries: %q", n, errOut.String())
	}
	if _, err := run(t, nil, "migrate", "--lock-timeout", "10ms"); err == nil ||
		!strings.Contains(err.Error(), "database.migrate_lock_timeout: at least 100ms") {
		t.Errorf("migrate --lock-timeout 10ms: %v, want a refusal", err)
	}
}
