// Command pgrun runs a command against a throwaway PostgreSQL server.
//
//	go run ./rig/cmd/pgrun [--dir DIR] [--durable] [--keep] [--ready URL --banner FILE] -- COMMAND ARGS...
//	go run ./rig/cmd/pgrun --dir DIR --clean
//
// If DATABASE_URL is set, the command runs as is. Otherwise pgrun starts a
// cluster from the local PostgreSQL server binaries (see rig/pgcluster),
// runs the command with DATABASE_URL (database "fulfillment") and
// PGRUN_ADMIN_URL (database "postgres") set, stops the cluster and exits
// with the command's exit code. Without --dir the cluster lives in a new
// temporary folder, deleted afterwards unless --keep is given. With --ready,
// the banner is printed once the URL answers 200 — never when the command
// exits first. SIGINT, SIGTERM and SIGHUP are passed on to the command.
// --clean removes the cluster folder DIR stands for (which is elsewhere
// when the postgres OS user cannot reach DIR) and exits.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fulfillplatform/fulfillment/rig/pgcluster"
)

// exitCode is returned by run to exit with a given status, silently.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	err := run(ctx)
	stop()
	var code exitCode
	switch {
	case err == nil:
	case errors.As(err, &code):
		os.Exit(int(code))
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "pgrun:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	flags := flag.NewFlagSet("pgrun", flag.ContinueOnError)
	flags.Usage = func() {
		_, _ = fmt.Fprintln(flags.Output(), "usage: pgrun [--dir DIR] [--durable] [--keep] -- COMMAND ARGS...")
		flags.PrintDefaults()
	}
	dir := flags.String("dir", "", "cluster folder, kept between runs (default: a new temporary folder)")
	durable := flags.Bool("durable", false, "keep PostgreSQL's crash-safe defaults (fsync etc.)")
	keep := flags.Bool("keep", false, "keep the temporary cluster folder afterwards")
	clean := flags.Bool("clean", false, "remove the cluster folder --dir stands for, and exit")
	ready := flags.String("ready", "", "URL that answers 200 once the command serves (with --banner)")
	banner := flags.String("banner", "", "file printed once --ready answers")
	if err := flags.Parse(os.Args[1:]); err != nil {
		return flag.ErrHelp
	}
	if *clean {
		return removeCluster(*dir)
	}
	args := flags.Args()
	if len(args) == 0 {
		flags.Usage()
		return flag.ErrHelp
	}
	announce := func() {}
	if *ready != "" {
		// Before anything starts: a server that already answers there
		// (another instance on the same ports) would be announced as this one.
		if err := notServing(*ready); err != nil {
			return err
		}
		announce = func() { go announceReady(ctx, *ready, *banner) }
	}

	// Subscribe now, so a signal arriving after the cluster is up but before
	// the command starts is still forwarded to it.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)

	if os.Getenv("DATABASE_URL") != "" {
		return runCommand(args, nil, sigs, announce)
	}

	clusterDir, cleanup, err := chooseDir(*dir, *keep)
	if err != nil {
		return err
	}
	defer cleanup()
	c, err := pgcluster.Start(ctx, pgcluster.Options{Dir: clusterDir, Durable: *durable})
	if err != nil {
		return err
	}
	if ctx.Err() != nil { // interrupted as the cluster came up
		return errors.Join(errors.New("interrupted"), c.Stop())
	}
	fmt.Fprintf(os.Stderr, "pgrun: PostgreSQL %s on 127.0.0.1:%d (data: %s)\n", c.Version(), c.Port(), clusterDir)
	runErr := runCommand(args, []string{
		"DATABASE_URL=" + c.URL("fulfillment"),
		"PGRUN_ADMIN_URL=" + c.URL("postgres"),
	}, sigs, announce)
	stopErr := c.Stop()
	if *ready != "" { // an interactive run: say how it ended
		fmt.Fprintf(os.Stderr, "pgrun: %s %s; PostgreSQL stopped\n", filepath.Base(args[0]), ended(runErr))
	}
	if stopErr != nil && runErr == nil {
		return stopErr
	}
	return runErr
}

// ended says how a command that returned err ended.
func ended(err error) string {
	var code exitCode
	switch {
	case err == nil:
		return "stopped"
	case errors.As(err, &code) && int(code) > 128:
		return fmt.Sprintf("stopped by signal %d", int(code)-128)
	}
	return "failed (" + err.Error() + ")"
}

// notServing fails when something already answers at url.
func notServing(url string) error {
	resp, err := (&http.Client{Timeout: time.Second}).Get(url)
	if err != nil {
		return nil
	}
	_ = resp.Body.Close()
	return fmt.Errorf("something already answers at %s (another instance?): stop it, or give this one other ports "+
		"(make run: FULFILLMENT_LISTEN_GRPC, FULFILLMENT_LISTEN_HTTP, FULFILLMENT_LISTEN_INGEST, and for its listener and fake bank "+
		"FULFILLCTL_LISTEN_ADDR, FAKEBANK_LISTEN_ADDR; docs/development.md)", url)
}

// announceReady prints the banner file once url answers 200, polling until
// ctx ends.
func announceReady(ctx context.Context, url, banner string) {
	client := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		resp, err := client.Get(url)
		if err != nil {
			continue
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			continue
		}
		text, err := os.ReadFile(banner)
		if err != nil {
			fmt.Fprintf(os.Stderr, "pgrun: serving (%s answers); the banner is missing: %v\n", url, err)
			return
		}
		_, _ = os.Stdout.Write(text)
		return
	}
}

// removeCluster removes the cluster folder dir stands for.
func removeCluster(dir string) error {
	if dir == "" {
		return errors.New("--clean needs --dir")
	}
	path, _, err := chooseDir(dir, true)
	if err != nil {
		return err
	}
	if err := os.RemoveAll(path); err != nil {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	fmt.Fprintf(os.Stderr, "pgrun: removed %s\n", path)
	return nil
}

// chooseDir returns the cluster folder and a function removing it when it
// is temporary. A --dir the postgres user cannot reach (say, a checkout in a
// private folder) is replaced by a stable folder under os.TempDir(), so its
// data is still reused from run to run.
func chooseDir(dir string, keep bool) (path string, cleanup func(), err error) {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "pgrun-")
		if err != nil {
			return "", nil, fmt.Errorf("creating cluster folder: %w", err)
		}
		cleanup := func() {
			if keep {
				fmt.Fprintf(os.Stderr, "pgrun: keeping %s\n", tmp)
				return
			}
			if err := os.RemoveAll(tmp); err != nil {
				fmt.Fprintf(os.Stderr, "pgrun: removing %s: %v\n", tmp, err)
			}
		}
		// MkdirTemp makes it private; the server's OS user must enter it.
		if err := os.Chmod(tmp, 0o755); err != nil {
			cleanup()
			return "", nil, fmt.Errorf("opening cluster folder: %w", err)
		}
		return tmp, cleanup, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", nil, fmt.Errorf("resolving %s: %w", dir, err)
	}
	if !pgcluster.Accessible(abs) {
		sum := sha256.Sum256([]byte(abs))
		fallback := filepath.Join(os.TempDir(), "pgrun-"+hex.EncodeToString(sum[:6]))
		fmt.Fprintf(os.Stderr, "pgrun: %s is not reachable by the postgres OS user; using %s instead\n", abs, fallback)
		abs = fallback
	}
	return abs, func() {}, nil
}

// runCommand runs args with our standard streams and extra environment
// variables, forwarding the signals received on sigs to it, and returns its
// exit status as an exitCode.
func runCommand(args, env []string, sigs <-chan os.Signal, started func()) error {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("running %s: %w", args[0], err)
	}
	started()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for {
		select {
		case sig := <-sigs:
			// A Ctrl-C in a terminal already reached the command, which
			// shares our process group; sending it again would count as a
			// second Ctrl-C for programs that treat that as "quit now".
			if sig == os.Interrupt && terminalForeground() {
				continue
			}
			_ = cmd.Process.Signal(sig)
		case err := <-done:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
					return exitCode(128 + int(ws.Signal()))
				}
				return exitCode(ee.ExitCode())
			}
			if err != nil {
				return fmt.Errorf("running %s: %w", args[0], err)
			}
			return nil
		}
	}
}
