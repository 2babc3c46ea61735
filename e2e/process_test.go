package e2e_test

// Helpers that run the real fulfillmentd binary as a child process, for the
// crash tests: build it (once per test binary), write its YAML
// configuration, start it, wait until it serves, stop or kill it.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/failpoint"
	"github.com/fulfillplatform/fulfillment/internal/pgtest"
)

// Environment variables the child's configuration references: secrets are
// never written into the YAML file.
const (
	procEnvAdminToken = "E2E_ADMIN_TOKEN"
	procEnvOrgAToken  = "E2E_ORG_A_TOKEN"
	procEnvLiveSecret = "E2E_YOLFI_LIVE_SECRET"
)

// procBuild is one fulfillmentd binary, built at most once per test binary.
type procBuild struct {
	tags string // "" or "failpoints"
	once sync.Once
	path string
	err  error
}

var (
	// procFailpointBuild honours FULFILLMENT_FAILPOINT.
	procFailpointBuild = &procBuild{tags: "failpoints"}
	// procPlainBuild is the production build: failpoints compile to nothing.
	procPlainBuild = &procBuild{}

	// procBinDir holds the binaries of this test binary. No hook runs after
	// the last test (TestMain belongs to the harness), so each run removes
	// instead what the runs before it left behind: the folder is named after
	// the test process, and removed once that process is gone.
	procBinDir = sync.OnceValues(func() (string, error) {
		const prefix = "fulfillmentd-e2e-"
		entries, _ := os.ReadDir(os.TempDir())
		for _, e := range entries {
			rest, ok := strings.CutPrefix(e.Name(), prefix)
			if !e.IsDir() || !ok {
				continue
			}
			pidText, _, _ := strings.Cut(rest, "-")
			pid, err := strconv.Atoi(pidText)
			if err != nil || pid <= 0 || pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
				continue // not ours, or its test process still runs
			}
			_ = os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
		}
		return os.MkdirTemp("", fmt.Sprintf("%s%d-", prefix, os.Getpid()))
	})
)

// binary returns the path of the built binary, building it on first use.
func (b *procBuild) binary(t *testing.T) string {
	t.Helper()
	b.once.Do(func() { b.path, b.err = b.build() })
	if b.err != nil {
		t.Fatalf("building fulfillmentd (tags %q): %v", b.tags, b.err)
	}
	return b.path
}

func (b *procBuild) build() (string, error) {
	dir, err := procBinDir()
	if err != nil {
		return "", err
	}
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "fulfillmentd")
	args := []string{"build"}
	if b.tags != "" {
		out += "-" + b.tags
		args = append(args, "-tags", b.tags)
	}
	args = append(args, "-o", out, "./cmd/fulfillmentd")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...) // go test puts GOROOT/bin first in PATH
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// moduleRoot is the directory of the module's go.mod (tests run in e2e/).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside a module")
	}
	return filepath.Dir(gomod), nil
}

// procService is one database that successive fulfillmentd processes share:
// a process is killed and another one started on the same data.
type procService struct {
	bin   string
	dbURL string
	db    *pgxpool.Pool // for counting effects behind the service's back
	n     int           // processes started
}

func newProcService(t *testing.T, bin string) *procService {
	t.Helper()
	dbURL := pgtest.DB(t)
	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return &procService{bin: bin, dbURL: dbURL, db: db}
}

// proc is one running (or dead) fulfillmentd process. Its embedded stack
// talks to it like the in-process harness does: webhooks over HTTP, the API
// over gRPC, counts straight from the database.
type proc struct {
	*stack
	cmd      *exec.Cmd
	exited   chan struct{} // closed once the process has been reaped
	output   *lockedBuffer // stdout and stderr
	httpAddr string
	webhooks *http.Client
}

// start runs fulfillmentd serve against the service's database, with the
// failpoint spec in FULFILLMENT_FAILPOINT when it is not empty, and waits
// until it serves. The process is stopped when the test ends.
func (ps *procService) start(t *testing.T, failpointSpec string, extraEnv ...string) *proc {
	t.Helper()
	// The ports are free when picked but may be taken before the child binds
	// them: pick again when that happens.
	for try := 1; ; try++ {
		p, err := ps.startOnce(t, failpointSpec, extraEnv)
		if err == nil {
			return p
		}
		if try < 3 && strings.Contains(p.output.String(), "address already in use") {
			t.Logf("fulfillmentd could not bind its ports, retrying: %v", err)
			continue
		}
		t.Fatalf("starting fulfillmentd: %v\noutput:\n%s", err, p.output.tail(16<<10))
	}
}

func (ps *procService) startOnce(t *testing.T, failpointSpec string, extraEnv []string) (*proc, error) {
	t.Helper()
	ps.n++
	ports := freePorts(t, 3)
	grpcAddr, httpAddr, ingestAddr := ports[0], ports[1], ports[2]
	cfgPath := filepath.Join(t.TempDir(), fmt.Sprintf("fulfillmentd-%d.yaml", ps.n))
	if err := os.WriteFile(cfgPath, []byte(procConfig(grpcAddr, httpAddr, ingestAddr)), 0o600); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(ps.bin, "serve", "--config", cfgPath)
	env := []string{
		"DATABASE_URL=" + ps.dbURL,
		procEnvAdminToken + "=" + adminToken,
		procEnvOrgAToken + "=" + orgAToken,
		procEnvLiveSecret + "=" + liveSecret,
	}
	if failpointSpec != "" {
		env = append(env, failpoint.EnvVar+"="+failpointSpec)
	}
	cmd.Env = append(childEnv(), append(env, extraEnv...)...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	p := &proc{cmd: cmd, exited: make(chan struct{}), output: out, httpAddr: httpAddr,
		webhooks: &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	// Should the test binary die without its cleanups (a timeout panic), the
	// kernel kills the child instead of leaving it orphaned.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
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
		_ = cmd.Wait() // the exit status is in cmd.ProcessState
	}()
	if err := <-started; err != nil {
		t.Fatalf("starting %s: %v", ps.bin, err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		p.stop(t)
		p.webhooks.CloseIdleConnections()
		if t.Failed() {
			t.Logf("fulfillmentd pid %d (failpoint %q) output:\n%s", pid, failpointSpec, p.output.tail(16<<10))
		}
	})

	if err := p.waitReady(ingestAddr, 20*time.Second); err != nil {
		return p, err
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	p.stack = &stack{
		ingestURL: "http://" + ingestAddr,
		client:    fulfillmentv1.NewFulfillmentServiceClient(conn),
		db:        ps.db,
	}
	return p, nil
}

// procConfig is the YAML configuration of one process: every secret is an
// environment variable reference.
func procConfig(grpcAddr, httpAddr, ingestAddr string) string {
	return fmt.Sprintf(`listen:
  grpc: %q
  http: %q
  ingest: %q
database:
  url_env: DATABASE_URL
  migrate: true
  max_conns: 10
log:
  level: info
auth:
  tokens:
    - name: admin
      token_env: %s
      scopes: [admin]
      orgs: ["*"]
    - name: org-a
      token_env: %s
      scopes: [orders:read, orders:write, reconciliation:read]
      orgs: [%s]
endpoints:
  - id: %s
    provider: yolfi
    org: %s
    environment: live
    secrets:
      - env: %s
ingest:
  timeout: 2s
worker:
  workers: 2
  batch: 8
  lease: 1s
  poll: 50ms
  max_attempts: 10
  base_backoff: 50ms
  max_backoff: 500ms
`, grpcAddr, httpAddr, ingestAddr, procEnvAdminToken, procEnvOrgAToken, orgA, liveEP, orgA, procEnvLiveSecret)
}

// childEnv is this process's environment without anything that would
// configure the child behind the test's back.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "DATABASE_URL=") || strings.HasPrefix(kv, "FULFILLMENT_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// freePorts returns n distinct loopback addresses that were free a moment ago.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	addrs := make([]string, n)
	lis := make([]net.Listener, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lis[i], addrs[i] = l, l.Addr().String()
	}
	for _, l := range lis {
		l.Close()
	}
	return addrs
}

// waitReady polls GET /readyz until 200 and the webhook port until it
// accepts connections; it fails early when the process exits.
func (p *proc) waitReady(ingestAddr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	last := errors.New("not polled yet")
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("fulfillmentd exited before it was ready (%v); last check: %v", p.cmd.ProcessState, last)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fulfillmentd not ready after %v: %v", timeout, last)
		}
		last = func() error {
			resp, err := client.Get("http://" + p.httpAddr + "/readyz")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET /readyz: %d", resp.StatusCode)
			}
			c, err := net.DialTimeout("tcp", ingestAddr, time.Second)
			if err != nil {
				return err
			}
			return c.Close()
		}()
		if last == nil {
			return nil
		}
		select {
		case <-p.exited:
		case <-tick.C:
		}
	}
}

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// waitExit waits until the process exits by itself and returns its state.
func (p *proc) waitExit(t *testing.T, timeout time.Duration) *os.ProcessState {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState
	case <-time.After(timeout):
		t.Fatalf("fulfillmentd still running %v after the event was sent: the failpoint did not fire", timeout)
		return nil
	}
}

// kill SIGKILLs the process and reaps it.
func (p *proc) kill(t *testing.T) *os.ProcessState {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL) // fails only when already reaped
	select {
	case <-p.exited:
		return p.cmd.ProcessState
	case <-time.After(10 * time.Second):
		t.Fatalf("fulfillmentd pid %d not reaped 10s after SIGKILL", p.cmd.Process.Pid)
		return nil
	}
}

// stop shuts the process down gracefully (SIGTERM), killing it if that
// takes too long. It is safe to call on a dead process.
func (p *proc) stop(t *testing.T) *os.ProcessState {
	t.Helper()
	if !p.running() {
		return p.cmd.ProcessState
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return p.cmd.ProcessState
	case <-time.After(15 * time.Second):
		t.Errorf("fulfillmentd pid %d ignored SIGTERM for 15s; killing it", p.cmd.Process.Pid)
		return p.kill(t)
	}
}

// deliver signs ev with the live secret and posts it, without failing the
// test on a transport error: the process may die while answering.
func (p *proc) deliver(ev yolfi.Payload) (int, error) {
	body, err := json.Marshal(ev)
	if err != nil {
		return 0, err
	}
	req, err := yolfi.NewRequest(context.Background(), p.ingestURL+"/webhooks/"+liveEP, []byte(liveSecret), body, ev.ID)
	if err != nil {
		return 0, err
	}
	resp, err := p.webhooks.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

// killedBySIGKILL reports whether st is the state of a process that SIGKILL
// ended.
func killedBySIGKILL(st *os.ProcessState) bool {
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// lockedBuffer collects a child's output; exec writes it from its own
// goroutine while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tail is the last n bytes of the output.
func (b *lockedBuffer) tail(n int) string {
	s := b.String()
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
