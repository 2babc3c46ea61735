package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Environment variables the generated configuration references: secrets
// are never written into the file.
const (
	envDatabaseURL = "DATABASE_URL"
	envAdminToken  = "CHAOS_ADMIN_TOKEN"
	envOrgToken    = "CHAOS_ORG_TOKEN"
	envLiveSecret  = "CHAOS_YOLFI_LIVE_SECRET"
	envTestSecret  = "CHAOS_YOLFI_TEST_SECRET"
)

// readyTimeout bounds how long a started fulfillmentd may take to serve.
const readyTimeout = 45 * time.Second

// service runs successive fulfillmentd processes on the same configuration
// and ports: one at a time, killed and restarted by the fault injector,
// restarted by itself after an exit nobody asked for.
type service struct {
	bin, cfgPath, logPath string
	env                   []string
	grpcAddr, httpAddr    string
	ingestAddr            string
	logf                  func(format string, args ...any)
	viol                  *violations

	mu       sync.Mutex // serializes starting and stopping
	cur      atomic.Pointer[proc]
	starts   atomic.Int32
	kills    atomic.Int32
	surprise atomic.Int32   // unexpected exits
	restart  chan struct{}  // an unexpected exit happened
	watchers sync.WaitGroup // exit watchers
}

// proc is one fulfillmentd process.
type proc struct {
	cmd      *exec.Cmd
	n        int           // start number
	exited   chan struct{} // closed once reaped
	ready    atomic.Bool   // it served: its exit is the watcher's business
	expected atomic.Bool   // we killed or stopped it
}

func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// running reports whether a fulfillmentd process is alive now.
func (s *service) running() bool {
	p := s.cur.Load()
	return p != nil && p.running()
}

// start launches fulfillmentd and waits until it serves. Ports taken by
// someone else in the meantime are retried for a while.
func (s *service) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.startLocked(ctx)
}

func (s *service) startLocked(ctx context.Context) error {
	var err error
	for try := 1; try <= 10; try++ {
		var p *proc
		var offset int64
		p, offset, err = s.launch()
		if err != nil {
			return err
		}
		if err = s.waitReady(ctx, p); err == nil {
			p.ready.Store(true)
			s.cur.Store(p)
			return nil
		}
		p.expected.Store(true)
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		if ctx.Err() != nil {
			return ctx.Err()
		}
		out := s.logSince(offset)
		if !strings.Contains(out, "address already in use") {
			return fmt.Errorf("fulfillmentd #%d did not become ready: %w\n%s", p.n, err, tail(out, 4096))
		}
		s.logf("fulfillmentd #%d could not bind its ports (try %d); retrying", p.n, try)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return err
}

// launch starts one process, its output appended to the service log.
func (s *service) launch() (*proc, int64, error) {
	n := int(s.starts.Add(1))
	logFile, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, 0, err
	}
	defer logFile.Close() // the child has its own copy
	offset, _ := logFile.Seek(0, io.SeekEnd)
	fmt.Fprintf(logFile, "=== chaos: fulfillmentd #%d started at %s ===\n", n, time.Now().Format(time.RFC3339Nano))

	cmd := exec.Command(s.bin, "serve", "--config", s.cfgPath)
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its own process group: a Ctrl-C meant for chaos does not reach it
	// (chaos stops it). Should chaos die without stopping it, the kernel
	// kills it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &proc{cmd: cmd, n: n, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that forked the child exits, not
		// the process: keep this goroutine on its thread for the child's
		// whole life (the thread is discarded when the goroutine ends).
		runtime.LockOSThread()
		defer close(p.exited)
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, 0, fmt.Errorf("starting %s: %w", s.bin, err)
	}
	s.watchers.Add(1)
	go s.watch(p, offset)
	return p, offset, nil
}

// watch reports an exit of p that nobody asked for, once it served, and
// asks for a restart. (A process that exits before it is ready is
// startLocked's business.)
func (s *service) watch(p *proc, offset int64) {
	defer s.watchers.Done()
	<-p.exited
	if p.expected.Load() || !p.ready.Load() {
		return
	}
	s.surprise.Add(1)
	s.viol.add("unexpected exit", "fulfillmentd #%d (pid %d) exited by itself: %v; last output:\n%s",
		p.n, p.cmd.Process.Pid, p.cmd.ProcessState, indent(tail(s.logSince(offset), 2048)))
	select {
	case s.restart <- struct{}{}:
	default:
	}
}

// supervise restarts fulfillmentd after unexpected exits until ctx ends.
func (s *service) supervise(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.restart:
		}
		for ctx.Err() == nil {
			err := s.ensureRunning(ctx)
			if err == nil {
				break
			}
			s.logf("restarting fulfillmentd after an unexpected exit: %v", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// ensureRunning starts fulfillmentd unless a process is alive.
func (s *service) ensureRunning(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running() {
		return nil
	}
	return s.startLocked(ctx)
}

// kill SIGKILLs the running process, reaps it and starts another one.
func (s *service) kill(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.cur.Load(); p != nil && p.running() {
		p.expected.Store(true)
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			return fmt.Errorf("fulfillmentd #%d not reaped 10s after SIGKILL", p.n)
		}
		if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			s.viol.add("unexpected exit", "fulfillmentd #%d had exited by itself (%v) before it was killed", p.n, p.cmd.ProcessState)
		}
		s.kills.Add(1)
	}
	return s.startLocked(ctx)
}

// stop shuts the running process down with SIGTERM and returns how it
// ended; after grace it is killed.
func (s *service) stop(grace time.Duration) (*os.ProcessState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.cur.Load()
	if p == nil || !p.running() {
		return nil, nil
	}
	p.expected.Store(true)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.cmd.ProcessState, nil
	case <-time.After(grace):
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		return p.cmd.ProcessState, fmt.Errorf("fulfillmentd #%d ignored SIGTERM for %v and was killed", p.n, grace)
	}
}

// waitReady polls GET /readyz until 200 and the webhook port until it
// accepts connections; it fails early when the process exits.
func (s *service) waitReady(ctx context.Context, p *proc) error {
	deadline := time.Now().Add(readyTimeout)
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	last := errors.New("not polled yet")
	for {
		last = func() error {
			resp, err := client.Get("http://" + s.httpAddr + "/readyz")
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET /readyz: %d", resp.StatusCode)
			}
			c, err := net.DialTimeout("tcp", s.ingestAddr, time.Second)
			if err != nil {
				return err
			}
			return c.Close()
		}()
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %v", readyTimeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.exited:
			return fmt.Errorf("exited before it was ready (%v); last check: %v", p.cmd.ProcessState, last)
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// logSince is what the processes logged from offset on.
func (s *service) logSince(offset int64) string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.NewSectionReader(f, offset, 4<<20))
	return string(b)
}

// config is the YAML configuration of every process of the run: the same
// ports each time, so the sender keeps its URL; every secret is an
// environment variable reference.
func (s *service) config() string {
	return fmt.Sprintf(`listen:
  grpc: %q
  http: %q
  ingest: %q
database:
  url_env: %s
  migrate: true
  max_conns: 12
  connect_timeout: 1s
log:
  level: info
auth:
  tokens:
    - name: chaos-admin
      token_env: %s
      scopes: [admin]
      orgs: ["*"]
    - name: chaos-checkout
      token_env: %s
      scopes: [orders:write, orders:read, reconciliation:read]
      orgs: [%s]
endpoints:
  - id: %s
    provider: yolfi
    org: %s
    environment: live
    secrets:
      - env: %s
  - id: %s
    provider: yolfi
    org: %s
    environment: test
    secrets:
      - env: %s
ingest:
  timeout: 2s
worker:
  workers: 4
  batch: 16
  lease: 2s
  poll: 100ms
  base_backoff: 100ms
  max_backoff: 1s
  max_attempts: 50
`, s.grpcAddr, s.httpAddr, s.ingestAddr, envDatabaseURL, envAdminToken, envOrgToken, orgID,
		liveEP, orgID, envLiveSecret, testEP, orgID, envTestSecret)
}

// childEnv is this process's environment without anything that would
// configure fulfillmentd behind the run's back, plus extra.
func childEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, envDatabaseURL+"=") || strings.HasPrefix(kv, "FULFILLMENT_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// freeAddrs returns n distinct loopback addresses, free now, whose ports lie
// outside the kernel's ephemeral range: a client connection (ours, or
// fulfillmentd's own to PostgreSQL) can then never take one as its source
// port while the process that listens on it is down.
func freeAddrs(n int) ([]string, error) {
	// Candidates: below the ephemeral range, else above it, else anywhere.
	first, last := 1024, 65535
	switch lo, hi := ephemeralRange(); {
	case lo-first >= 5000:
		first, last = max(first, lo-22000), lo-1
	case last-hi >= 5000:
		first = hi + 1
	}
	var addrs []string
	seen := map[int]bool{}
	for tries := 0; len(addrs) < n; tries++ {
		if tries > 2000 {
			return nil, errors.New("no free loopback port found")
		}
		port := first + rand.IntN(last-first+1)
		if seen[port] {
			continue
		}
		seen[port] = true
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		l.Close()
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

// ephemeralRange is the kernel's range of automatically assigned ports.
func ephemeralRange() (lo, hi int) {
	lo, hi = 32768, 60999
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return lo, hi
	}
	f := strings.Fields(string(b))
	if len(f) == 2 {
		l, err1 := strconv.Atoi(f[0])
		h, err2 := strconv.Atoi(f[1])
		if err1 == nil && err2 == nil {
			return l, h
		}
	}
	return lo, hi
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
