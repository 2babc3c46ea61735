// Package pgcluster runs a throwaway PostgreSQL server from the locally
// installed server binaries (Debian's postgresql-15 package), for `make run`
// and tests on machines with neither Docker nor a running server.
//
// The server listens on 127.0.0.1 only, trusts every local connection and
// logs in as the "postgres" role. When the caller is root, initdb and
// postgres run as the OS user postgres, since both refuse to run as root.
package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// appDatabase is the application database Start creates when missing.
const appDatabase = "fulfillment"

// Options configures a throwaway cluster.
//
// Without Durable, data survives Kill (a server crash) but not an OS crash.
// synchronous_commit stays on: with fsync off it costs only a write(2) per
// commit, while turning it off lets Kill lose the last acknowledged commits.
type Options struct {
	Dir     string    // data folder root; created if missing. The cluster lives in Dir/data, socket + log in Dir.
	Port    int       // 0 = pick a free loopback port
	Durable bool      // false (tests): fsync=off, full_page_writes=off, initdb --no-sync for speed. true (make run): defaults.
	Log     io.Writer // where progress lines go (nil = discard); server log goes to Dir/postgres.log
	// Settings are further server settings, "name=value" each (e.g.
	// "shared_preload_libraries=pg_stat_statements"), given on the command
	// line of every start.
	Settings []string
	// StandbyOf, when set, makes the cluster a streaming-replication
	// standby of that running cluster: its data folder is a base backup of
	// it (pg_basebackup -R) instead of a new cluster, and no database is
	// created (a standby is read-only). See Promote.
	StandbyOf *Cluster
}

// Cluster is a PostgreSQL cluster started by Start, listening on 127.0.0.1.
// Its methods are safe for concurrent use.
type Cluster struct {
	binDir   string
	dir      string // Options.Dir, absolute
	data     string // dir/data
	logPath  string // dir/postgres.log
	port     int
	durable  bool
	settings []string
	log      io.Writer
	acct     *account
	version  string
	primary  *Cluster // StandbyOf

	mu  sync.Mutex
	srv *server // nil when the server is not running
}

// Start starts a cluster in o.Dir, creating it with initdb unless
// o.Dir/data already holds one, waits until it accepts connections and
// creates the database "fulfillment" if missing. If Start fails, no server
// is left running. Errors wrap ErrNoBinaries when PostgreSQL is not
// installed, and ErrInaccessible when the server's OS user cannot reach
// o.Dir (see Accessible).
func Start(ctx context.Context, o Options) (*Cluster, error) {
	binDir, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	if o.Dir == "" {
		return nil, errors.New("starting cluster: Options.Dir is empty")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", o.Dir, err)
	}
	acct, err := serverAccount()
	if err != nil {
		return nil, err
	}
	if err := checkAccess(dir, acct); err != nil {
		return nil, err
	}
	if err := prepareDir(dir, acct); err != nil {
		return nil, err
	}
	c := &Cluster{
		binDir:   binDir,
		dir:      dir,
		data:     filepath.Join(dir, "data"),
		logPath:  filepath.Join(dir, "postgres.log"),
		port:     o.Port,
		durable:  o.Durable,
		settings: o.Settings,
		log:      o.Log,
		acct:     acct,
		primary:  o.StandbyOf,
	}
	if c.log == nil {
		c.log = io.Discard
	}
	if c.port == 0 {
		if c.port, err = freePort(); err != nil {
			return nil, err
		}
	} else if err := checkPortFree(c.port); err != nil { // before a slow initdb
		return nil, fmt.Errorf("starting postgres: %w", err)
	}
	if err := c.initdb(ctx); err != nil {
		return nil, err
	}
	v, err := os.ReadFile(filepath.Join(c.data, "PG_VERSION"))
	if err != nil {
		return nil, fmt.Errorf("reading cluster version: %w", err)
	}
	c.version = strings.TrimSpace(string(v))

	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.start(ctx); err != nil {
		return nil, err
	}
	if c.primary != nil {
		return c, nil
	}
	if err := c.createDatabase(ctx, appDatabase); err != nil {
		_ = c.srv.stop(syscall.SIGINT)
		c.srv = nil
		return nil, err
	}
	return c, nil
}

// URL returns the connection URL of database on this cluster, e.g.
// "postgres://postgres@127.0.0.1:PORT/fulfillment?sslmode=disable".
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, url.PathEscape(database))
}

// Port returns the TCP port the server listens on at 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// Version returns the cluster's PostgreSQL major version, e.g. "15".
func (c *Cluster) Version() string { return c.version }

// Stop shuts the server down (fast mode: clients are disconnected, then a
// clean shutdown) and waits for it to exit. Stopping a stopped cluster is a
// no-op. The data folder is kept.
func (c *Cluster) Stop() error { return c.halt(syscall.SIGINT) }

// Kill stops the server in immediate mode, like a crash: no shutdown
// checkpoint, so the next start runs crash recovery, and committed data
// survives. Use Restart to bring the cluster back.
func (c *Cluster) Kill() error { return c.halt(syscall.SIGQUIT) }

// Crash kills the postmaster with SIGKILL, as when its host fails: its
// backends end once they notice. Committed data survives on disk.
func (c *Cluster) Crash() error { return c.halt(syscall.SIGKILL) }

// Promote turns a standby into a primary (pg_promote) and waits until it
// accepts writes.
func (c *Cluster) Promote(ctx context.Context) error {
	cn, err := dial(ctx, c.addr(), "postgres", "postgres")
	if err != nil {
		return fmt.Errorf("promoting: %w", err)
	}
	defer func() { _ = cn.Close(context.WithoutCancel(ctx)) }()
	var ok bool
	if err := cn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&ok); err != nil {
		return fmt.Errorf("promoting: %w", err)
	}
	if !ok {
		return errors.New("promoting: not promoted within 60s")
	}
	return nil
}

// Restart starts the server again on the same port and data folder (after
// stopping it if it is running) and waits until it accepts connections.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv != nil {
		if err := c.srv.stop(syscall.SIGINT); err != nil {
			return fmt.Errorf("stopping postgres: %w", err)
		}
		c.srv = nil
	}
	return c.start(ctx)
}

// halt signals the postmaster (SIGINT: fast shutdown, SIGQUIT: immediate)
// and waits for it to exit.
func (c *Cluster) halt(sig syscall.Signal) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.srv == nil {
		return nil
	}
	err := c.srv.stop(sig)
	c.srv = nil
	if err != nil {
		return fmt.Errorf("stopping postgres: %w", err)
	}
	return nil
}

// initdb creates the cluster in c.data unless one is there already.
func (c *Cluster) initdb(ctx context.Context) error {
	_, err := os.Stat(filepath.Join(c.data, "PG_VERSION"))
	if err == nil {
		c.logf("reusing cluster in %s", c.data)
		// A cluster made by another user, or copied in, must belong to the
		// server user and be private, or postgres refuses to start.
		if err := c.acct.chownTree(c.data); err != nil {
			return err
		}
		if err := os.Chmod(c.data, 0o700); err != nil {
			return fmt.Errorf("setting mode of %s: %w", c.data, err)
		}
		return nil
	}
	if _, err := os.Stat(c.data); !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checking %s: it exists but holds no cluster (no PG_VERSION); remove it or choose another folder", c.data)
	}

	c.logf("initializing cluster in %s", c.data)
	// initdb works in a side folder that is renamed when complete, so an
	// interrupted initdb never leaves a half-made cluster to be reused.
	tmp := c.data + ".init"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("removing leftover %s: %w", tmp, err)
	}
	tool := "initdb"
	args := []string{"-D", tmp, "-U", "postgres", "--auth=trust", "--encoding=UTF8", "--locale=C"}
	if c.primary != nil {
		// A base backup of the primary, streaming its WAL meanwhile, with
		// standby.signal and primary_conninfo written (-R).
		tool = "pg_basebackup"
		args = []string{"-D", tmp, "-h", "127.0.0.1", "-p", strconv.Itoa(c.primary.port), "-U", "postgres",
			"-X", "stream", "-R", "--checkpoint=fast"}
	}
	if !c.durable {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, tool), args...)
	cmd.Dir = c.dir // our own working folder may be closed to the server user
	cmd.SysProcAttr = c.acct.sysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("running %s: %w\n%s", tool, err, out)
	}
	if err := os.Rename(tmp, c.data); err != nil {
		return fmt.Errorf("moving new cluster into place: %w", err)
	}
	return nil
}

// createDatabase creates database name unless it exists.
func (c *Cluster) createDatabase(ctx context.Context, name string) error {
	cn, err := dial(ctx, c.addr(), "postgres", "postgres")
	if err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	defer func() { _ = cn.Close(context.WithoutCancel(ctx)) }()
	_, err = cn.Exec(ctx, `CREATE DATABASE "`+name+`"`)
	if sqlState(err) == codeDuplicateDatabase {
		return nil
	}
	if err != nil {
		return fmt.Errorf("creating database %s: %w", name, err)
	}
	c.logf("created database %s", name)
	return nil
}

// logf writes one progress line to Options.Log.
func (c *Cluster) logf(format string, args ...any) {
	_, _ = fmt.Fprintf(c.log, "pgcluster: "+format+"\n", args...)
}
