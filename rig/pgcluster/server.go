package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// startTimeout bounds how long start waits for the server, like pg_ctl -w.
const startTimeout = 60 * time.Second

// server is a running postmaster process started by this package.
type server struct {
	proc *os.Process
	done chan struct{} // closed once the process has exited
	err  error         // exit status, set before done is closed
}

// addr is the server's TCP address.
func (c *Cluster) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)) }

// start launches postgres on c.port and waits until it accepts connections.
// On failure no server is left running. c.mu must be held.
func (c *Cluster) start(ctx context.Context) error {
	if err := checkStale(c.data); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	if err := checkPortFree(c.port); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	logFile, err := os.OpenFile(c.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("opening server log: %w", err)
	}
	defer func() { _ = logFile.Close() }() // the server has its own copy
	if err := c.acct.chown(c.logPath); err != nil {
		return err
	}
	logStart, _ := logFile.Seek(0, io.SeekEnd)

	cmd := exec.Command(filepath.Join(c.binDir, "postgres"), c.serverArgs()...)
	cmd.Dir = c.data
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = c.acct.sysProcAttr()
	// Should this process die without stopping the server (a test binary
	// timing out, SIGKILL), the kernel asks the server for an immediate
	// shutdown instead of leaving it orphaned.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	c.logf("starting PostgreSQL %s on %s", c.version, c.addr())
	srv, err := launch(cmd)
	if err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	if err := c.waitReady(ctx, srv); err != nil {
		_ = srv.stop(syscall.SIGINT)
		return fmt.Errorf("starting postgres: %w%s", err, logTail(c.logPath, logStart))
	}
	c.srv = srv
	return nil
}

// serverArgs returns the postgres command line.
func (c *Cluster) serverArgs() []string {
	// Unix socket paths are limited to 107 bytes; clients here use TCP
	// anyway, so a folder too deep for one simply gets no socket.
	sockets := `"` + strings.ReplaceAll(c.dir, `"`, `""`) + `"`
	if len(c.dir)+len("/.s.PGSQL.65535.lock") > 107 {
		sockets = ""
	}
	args := []string{"-D", c.data,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port=" + strconv.Itoa(c.port),
		"-c", "unix_socket_directories=" + sockets,
		"-c", "max_connections=200",
	}
	if !c.durable {
		args = append(args, "-c", "fsync=off", "-c", "full_page_writes=off")
	}
	for _, kv := range c.settings {
		args = append(args, "-c", kv)
	}
	return args
}

// launch starts cmd and returns once the process exists.
func launch(cmd *exec.Cmd) (*server, error) {
	s := &server{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that forked the child exits, not
		// the process: keep this goroutine on its thread for the server's
		// whole life (the thread is discarded when the goroutine ends).
		runtime.LockOSThread()
		defer close(s.done)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		s.proc = cmd.Process
		started <- nil
		s.err = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return s, nil
}

// stop sends sig to the postmaster (SIGINT: fast shutdown, SIGQUIT:
// immediate) and waits for it to exit, escalating to an immediate shutdown
// after a minute.
func (s *server) stop(sig syscall.Signal) error {
	if err := s.proc.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-s.done:
	case <-time.After(time.Minute):
		_ = s.proc.Signal(syscall.SIGQUIT)
		<-s.done
	}
	return nil
}

// waitReady waits until srv accepts connections: its postmaster.pid says
// "ready" (what pg_ctl -w checks, and proof that the server on the port is
// ours) and a login over TCP succeeds.
func (c *Cluster) waitReady(ctx context.Context, srv *server) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-srv.done:
			return fmt.Errorf("server exited: %w", srv.err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for server: %w", ctx.Err())
		case <-tick.C:
		}
		if !pidFileReady(c.data, srv.proc.Pid) {
			continue
		}
		cn, err := dial(ctx, c.addr(), "postgres", "postgres")
		if err == nil {
			return cn.Close(ctx)
		}
		if state := sqlState(err); state != "" && state != codeCannotConnectNow {
			return fmt.Errorf("logging in: %w", err)
		}
	}
}

// pidFileReady reports whether data/postmaster.pid names pid and, on its
// eighth line, status "ready".
func pidFileReady(data string, pid int) bool {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	return len(lines) >= 8 && lines[0] == strconv.Itoa(pid) && strings.TrimSpace(lines[7]) == "ready"
}

// checkStale looks at a postmaster.pid left in data by an earlier server. A
// server still running there is reported rather than stopped, as it may be
// in use. A pid file naming a live process that is not a server for data (a
// pid reused after a crash) is removed, since postgres would refuse to
// start. One naming a dead process is left to postgres, which replaces it.
func checkStale(data string) error {
	pidPath := filepath.Join(data, "postmaster.pid")
	b, err := os.ReadFile(pidPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("reading %s: %w", pidPath, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 || errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return nil
	}
	cwd, err := os.Stat(fmt.Sprintf("/proc/%d/cwd", pid)) // a postmaster works in its data folder
	if err != nil {
		return nil // cannot tell; let postgres decide
	}
	if fi, err := os.Stat(data); err == nil && os.SameFile(cwd, fi) {
		return fmt.Errorf("a server is already running in %s (pid %d); stop it or use another folder", data, pid)
	}
	if err := os.Remove(pidPath); err != nil {
		return fmt.Errorf("removing stale %s: %w", pidPath, err)
	}
	return nil
}

// freePort returns a TCP port that is free on 127.0.0.1 right now.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("picking a free port: %w", err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// checkPortFree fails clearly when something else listens on the port.
func checkPortFree(port int) error {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return fmt.Errorf("port %d on 127.0.0.1 is already in use (%w)", port, err)
	}
	return ln.Close()
}

// logTail returns the last lines the server logged since offset, formatted
// to be appended to an error, or "" when there are none.
func logTail(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.NewSectionReader(f, offset, 1<<20))
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 10 {
		lines = lines[len(lines)-10:]
	}
	return fmt.Sprintf("\nlast lines of %s:\n  %s", path, strings.Join(lines, "\n  "))
}
