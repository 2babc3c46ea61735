package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Credentials of the bench's fulfillmentd: environment variables of the child
// only, never written into its configuration file.
const (
	envToken    = "BENCH_TOKEN"
	envSecret   = "BENCH_YOLFI_SECRET"
	benchOrg    = "org_bench"
	benchEnv    = "live"
	endpointID  = "yolfi-live"
	benchToken  = "bench-token-0123456789abcdef"
	benchSecret = "ywhsec_bench_0123456789abcdef"
)

// service is a running fulfillmentd process.
type service struct {
	cmd        *exec.Cmd
	exited     chan struct{}
	logPath    string
	grpcAddr   string
	httpAddr   string
	ingestAddr string
	debugAddr  string // pprof listener, when enabled
}

// moduleRoot is the folder of the module's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("go env GOMOD: not inside the module; run the bench from the repository")
	}
	return filepath.Dir(gomod), nil
}

// buildService builds ./cmd/fulfillmentd into dir.
func buildService(ctx context.Context, root, dir string) (string, error) {
	out := filepath.Join(dir, "fulfillmentd")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/fulfillmentd")
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/fulfillmentd: %v\n%s", err, msg)
	}
	return out, nil
}

// serviceConfig is the YAML configuration of the bench's fulfillmentd: one
// live Yolfi endpoint, one token, a 40-connection pool, default worker and
// ingest settings.
func serviceConfig(grpcAddr, httpAddr, ingestAddr, debugAddr string, maxConns int) string {
	debug := ""
	if debugAddr != "" {
		debug = fmt.Sprintf("  debug: %q\n", debugAddr)
	}
	return fmt.Sprintf(`listen:
  grpc: %q
  http: %q
  ingest: %q
%sdatabase:
  url_env: DATABASE_URL
  migrate: true
  max_conns: %d
log:
  level: info
auth:
  tokens:
    - name: bench
      token_env: %s
      scopes: [orders:read, orders:write, reconciliation:read]
      orgs: [%s]
endpoints:
  - id: %s
    provider: yolfi
    org: %s
    environment: %s
    secrets:
      - env: %s
`, grpcAddr, httpAddr, ingestAddr, debug, maxConns, envToken, benchOrg, endpointID, benchOrg, benchEnv, envSecret)
}

// startService runs `fulfillmentd serve` on dbURL and waits for /readyz.
// With pprof, the service also serves /debug/pprof/ (listen.debug).
func startService(bin, dir, dbURL string, maxConns int, pprof bool) (*service, error) {
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	s := &service{exited: make(chan struct{}), logPath: filepath.Join(dir, "fulfillmentd.log"),
		grpcAddr: ports[0], httpAddr: ports[1], ingestAddr: ports[2]}
	if pprof {
		s.debugAddr = ports[3]
	}
	cfgPath := filepath.Join(dir, "fulfillmentd.yaml")
	if err := os.WriteFile(cfgPath, []byte(serviceConfig(s.grpcAddr, s.httpAddr, s.ingestAddr, s.debugAddr, maxConns)), 0o600); err != nil {
		return nil, err
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own copy
	s.cmd = exec.Command(bin, "serve", "--config", cfgPath)
	s.cmd.Env = append(childEnv(), "DATABASE_URL="+dbURL, envToken+"="+benchToken, envSecret+"="+benchSecret)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	// Should the bench die without stopping it, the kernel kills the child.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the forking thread exits: keep this goroutine
		// on its thread for the child's whole life.
		runtime.LockOSThread()
		defer close(s.exited)
		if err := s.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = s.cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("starting fulfillmentd: %w", err)
	}
	if err := s.waitReady(30 * time.Second); err != nil {
		s.stop()
		return nil, fmt.Errorf("%w\n%s", err, s.logTail(4096))
	}
	return s, nil
}

func (s *service) pid() int { return s.cmd.Process.Pid }

func (s *service) running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

func (s *service) waitReady(timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(timeout)
	last := errors.New("not polled yet")
	for time.Now().Before(deadline) {
		if !s.running() {
			return fmt.Errorf("fulfillmentd exited before it was ready (%v)", s.cmd.ProcessState)
		}
		last = func() error {
			resp, err := client.Get("http://" + s.httpAddr + "/readyz")
			if err != nil {
				return err
			}
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
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("fulfillmentd not ready after %v: %v", timeout, last)
}

// stop asks fulfillmentd to shut down (SIGTERM) and kills it after 15s.
func (s *service) stop() {
	if !s.running() {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

func (s *service) logTail(n int64) string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(fi.Size()-n, 0)
	buf := make([]byte, fi.Size()-off)
	_, _ = f.ReadAt(buf, off)
	return string(buf)
}

// childEnv is this process's environment without anything that would
// configure the child behind the bench's back.
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
func freePorts(n int) ([]string, error) {
	addrs := make([]string, n)
	lis := make([]net.Listener, n)
	for i := range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lis[i], addrs[i] = l, l.Addr().String()
	}
	for _, l := range lis {
		l.Close()
	}
	return addrs, nil
}

// cpuProfile fetches a CPU profile of the service over d into path and
// returns `go tool pprof -top` of it.
func (s *service) cpuProfile(ctx context.Context, d time.Duration, path string) (string, error) {
	secs := int(d.Round(time.Second) / time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", s.debugAddr, max(secs, 1)), nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Timeout: d + 30*time.Second}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /debug/pprof/profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", path).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %v\n%s", err, out)
	}
	return string(out), nil
}
