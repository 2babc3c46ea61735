package pgcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoPgBouncer is returned by StartBouncer when PgBouncer is not installed
// (Debian's pgbouncer package).
var ErrNoPgBouncer = errors.New("pgbouncer not found: install Debian's pgbouncer package")

// BouncerOptions configures a PgBouncer in front of a cluster.
type BouncerOptions struct {
	// Dir holds its configuration, log and socket; created if missing.
	Dir string
	// Upstream is the PostgreSQL server it pools, host:port (loopback).
	Upstream string
	// Mode is its pool_mode: "session" or "transaction".
	Mode string
	// Settings are further lines of its [pgbouncer] section ("key = value");
	// without any, PgBouncer's defaults hold apart from the listen address,
	// the port, the mode and trust authentication.
	Settings []string
}

// Bouncer is a PgBouncer started by StartBouncer, listening on 127.0.0.1 and
// pooling every database of its upstream server for the postgres role.
type Bouncer struct {
	dir     string
	port    int
	ini     string
	logPath string
	acct    *account

	srv *server
}

// StartBouncer starts a PgBouncer in front of o.Upstream and waits until it
// passes a login through. It runs as the OS user postgres runs as:
// PgBouncer refuses to run as root.
func StartBouncer(ctx context.Context, o BouncerOptions) (*Bouncer, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/pgbouncer"); err != nil {
			return nil, ErrNoPgBouncer
		}
	}
	if o.Mode != "session" && o.Mode != "transaction" {
		return nil, fmt.Errorf("starting pgbouncer: mode %q: want session or transaction", o.Mode)
	}
	host, upPort, err := net.SplitHostPort(o.Upstream)
	if err != nil {
		return nil, fmt.Errorf("starting pgbouncer: upstream %q: %w", o.Upstream, err)
	}
	acct, err := serverAccount()
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", o.Dir, err)
	}
	if err := checkAccess(dir, acct); err != nil {
		return nil, err
	}
	if err := prepareDir(dir, acct); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	b := &Bouncer{dir: dir, port: port, ini: filepath.Join(dir, "pgbouncer.ini"),
		logPath: filepath.Join(dir, "pgbouncer.log"), acct: acct}
	users := filepath.Join(dir, "users.txt")
	if err := os.WriteFile(users, []byte(`"postgres" ""`+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("writing pgbouncer users: %w", err)
	}
	sockets := dir
	if len(dir)+len("/.s.PGSQL.65535") > 107 {
		sockets = "" // too deep for a socket path: TCP only
	}
	lines := []string{
		"[databases]",
		fmt.Sprintf("* = host=%s port=%s", host, upPort),
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(port),
		"unix_socket_dir = " + sockets,
		"auth_type = trust",
		"auth_file = " + users,
		"pool_mode = " + o.Mode,
		"logfile = " + b.logPath,
		"pidfile = " + filepath.Join(dir, "pgbouncer.pid"),
	}
	lines = append(lines, o.Settings...)
	if err := os.WriteFile(b.ini, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("writing pgbouncer.ini: %w", err)
	}
	for _, f := range []string{users, b.ini} {
		if err := acct.chown(f); err != nil {
			return nil, err
		}
	}
	if err := b.start(ctx, bin); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *Bouncer) start(ctx context.Context, bin string) error {
	out, err := os.OpenFile(filepath.Join(b.dir, "pgbouncer.out"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening pgbouncer output: %w", err)
	}
	defer func() { _ = out.Close() }()
	cmd := exec.Command(bin, b.ini)
	cmd.Dir = b.dir
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = b.acct.sysProcAttr()
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	srv, err := launch(cmd)
	if err != nil {
		return fmt.Errorf("starting pgbouncer: %w", err)
	}
	deadline := time.Now().Add(startTimeout)
	for {
		conn, err := dial(ctx, "127.0.0.1:"+strconv.Itoa(b.port), "postgres", appDatabase)
		if err == nil {
			_ = conn.Close(ctx)
			b.srv = srv
			return nil
		}
		select {
		case <-srv.done:
			return fmt.Errorf("starting pgbouncer: it exited: %w%s", srv.err, tail(filepath.Join(b.dir, "pgbouncer.out")))
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			_ = srv.stop(syscall.SIGKILL)
			return fmt.Errorf("starting pgbouncer: no answer within %v: %w%s", startTimeout, err, tail(b.logPath))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL returns the connection URL of database through the bouncer.
func (b *Bouncer) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", b.port, url.PathEscape(database))
}

// Port returns the TCP port the bouncer listens on at 127.0.0.1.
func (b *Bouncer) Port() int { return b.port }

// Stop shuts the bouncer down at once, its clients disconnected (SIGTERM;
// SIGINT would wait for every client to leave), and waits for it to exit.
func (b *Bouncer) Stop() error {
	if b.srv == nil {
		return nil
	}
	err := b.srv.stop(syscall.SIGTERM)
	b.srv = nil
	return err
}

// tail returns the end of the file at path, for an error message.
func tail(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	if st, err := f.Stat(); err == nil && st.Size() > 2048 {
		_, _ = f.Seek(-2048, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	if len(b) == 0 {
		return ""
	}
	return "\n" + string(b)
}
