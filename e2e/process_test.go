package e2e_test

// Helpers that run the real fulfillmentd binary as a child process, for the
// crash tests: build it (once per test binary), write its YAML
// configuration, start it, wait until it serves, stop or kill it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/internal/failpoint"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
	"github.com/fulfillplatform/fulfillment/rig/pgtest"
)

// Environment variables the child's configuration references: secrets are
// never written into the YAML file.
const (
	procEnvAdminToken = "E2E_ADMIN_TOKEN"
	procEnvOrgAToken  = "E2E_ORG_A_TOKEN"
	procEnvLiveSecret = "E2E_YOLFI_LIVE_SECRET"
	// procEnvOutboxSecret holds outboxSecret, for destinations.
	procEnvOutboxSecret = "E2E_OUTBOX_SECRET"
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
	root, err := daemon.ModuleRoot() // tests run in e2e/
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "fulfillmentd")
	var tags []string
	if b.tags != "" {
		out += "-" + b.tags
		tags = append(tags, b.tags)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := daemon.Build(ctx, root, out, tags...); err != nil { // go test puts GOROOT/bin first in PATH
		return "", err
	}
	return out, nil
}

// procService is one database that successive fulfillmentd processes share:
// a process is killed and another one started on the same data.
type procService struct {
	bin   string
	dbURL string
	db    *pgxpool.Pool // for counting effects behind the service's back
	n     int           // processes started
	// lease is inbox.lease of the processes started next: 60s by default,
	// so that no test can pass by waiting for a dead worker's lease.
	lease time.Duration
	// configure, when set, changes the configuration of the processes
	// started next.
	configure func(*config.Config)
	// queueOnly stores every event queued (inbox.queue_only): for the
	// tests of the inbox processor's claims and failpoints.
	queueOnly bool
	// serveURL and sessionURL, when set, are the processes' DATABASE_URL
	// (dbURL otherwise) and DATABASE_SESSION_URL: a pooler's, say.
	serveURL, sessionURL string
}

func newProcService(t *testing.T, bin string) *procService {
	t.Helper()
	dbURL := pgtest.DB(t)
	db, err := pgxpool.New(context.Background(), dbURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return &procService{bin: bin, dbURL: dbURL, db: db, lease: time.Minute}
}

// proc is one running (or dead) fulfillmentd process. Its embedded stack
// talks to it like the in-process harness does: webhooks over HTTP, the API
// over gRPC, counts straight from the database.
type proc struct {
	*stack
	child    *daemon.Process
	output   *daemon.Buffer // stdout and stderr
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
		t.Fatalf("starting fulfillmentd: %v\noutput:\n%s", err, p.output.Tail(16<<10))
	}
}

func (ps *procService) startOnce(t *testing.T, failpointSpec string, extraEnv []string) (*proc, error) {
	t.Helper()
	ps.n++
	ports, err := daemon.FreeAddrs(3)
	if err != nil {
		t.Fatal(err)
	}
	grpcAddr, httpAddr, ingestAddr := ports[0], ports[1], ports[2]
	cfgPath := filepath.Join(t.TempDir(), fmt.Sprintf("fulfillmentd-%d.yaml", ps.n))
	cfg := procConfig(grpcAddr, httpAddr, ingestAddr, ps.lease)
	cfg.Inbox.QueueOnly = ps.queueOnly
	if ps.configure != nil {
		ps.configure(cfg)
	}
	if err := daemon.WriteConfig(cfgPath, cfg); err != nil {
		t.Fatal(err)
	}

	serveURL := ps.dbURL
	if ps.serveURL != "" {
		serveURL = ps.serveURL
	}
	env := []string{
		"DATABASE_URL=" + serveURL,
		procEnvAdminToken + "=" + adminToken,
		procEnvOrgAToken + "=" + orgAToken,
		procEnvLiveSecret + "=" + liveSecret,
		procEnvOutboxSecret + "=" + outboxSecret,
	}
	if ps.sessionURL != "" {
		env = append(env, config.EnvSessionURL+"="+ps.sessionURL)
	}
	if failpointSpec != "" {
		env = append(env, failpoint.EnvVar+"="+failpointSpec)
	}
	out := &daemon.Buffer{}
	child, err := daemon.Start(ps.bin, []string{"serve", "--config", cfgPath}, daemon.ChildEnv(append(env, extraEnv...)...), out)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{child: child, output: out, httpAddr: httpAddr,
		webhooks: &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	t.Cleanup(func() {
		p.stop(t)
		p.webhooks.CloseIdleConnections()
		if t.Failed() {
			t.Logf("fulfillmentd pid %d (failpoint %q) output:\n%s", child.Pid(), failpointSpec, p.output.Tail(16<<10))
		}
	})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := child.WaitReady(ctx, httpAddr, ingestAddr); err != nil {
		return p, fmt.Errorf("waiting for fulfillmentd: %w", err)
	}
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	p.stack = &stack{
		ingestURL: "http://" + ingestAddr,
		client:    fulfillmentv1.NewFulfillmentServiceClient(conn),
		db:        ps.db,
	}
	return p, nil
}

// procConfig is the configuration of one process: every secret is an
// environment variable reference.
func procConfig(grpcAddr, httpAddr, ingestAddr string, lease time.Duration) *config.Config {
	return &config.Config{
		Listen:   config.Listen{GRPC: grpcAddr, HTTP: httpAddr, Ingest: ingestAddr},
		Database: config.Database{URLEnv: "DATABASE_URL", Migrate: true, MaxConns: 10},
		Log:      config.Log{Level: "info"},
		Auth: config.Auth{Tokens: []config.Token{
			daemon.EnvToken("admin", procEnvAdminToken, []string{"*"}, config.ScopeAdmin),
			daemon.EnvToken("org-a", procEnvOrgAToken, []string{orgA},
				config.ScopeOrdersRead, config.ScopeOrdersWrite, config.ScopeReconciliationRead),
		}},
		Endpoints: []config.Endpoint{daemon.YolfiEndpoint(liveEP, orgA, "live", procEnvLiveSecret)},
		Ingest:    config.Ingest{Timeout: 2 * time.Second},
		Inbox: config.Inbox{Queue: config.Queue{Workers: 2, Batch: 8, Lease: lease, Poll: 50 * time.Millisecond, MaxAttempts: 10,
			BaseBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond}},
	}
}

// running reports whether the process has not exited.
func (p *proc) running() bool { return p.child.Running() }

// waitExit waits until the process exits by itself and returns its state.
func (p *proc) waitExit(t *testing.T, timeout time.Duration) *os.ProcessState {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := p.child.Wait(ctx)
	if err != nil {
		t.Fatalf("fulfillmentd still running %v after the event was sent: the failpoint did not fire", timeout)
	}
	return st
}

// kill SIGKILLs the process and reaps it.
func (p *proc) kill(t *testing.T) *os.ProcessState {
	t.Helper()
	st, err := p.child.Kill()
	if err != nil {
		t.Fatalf("fulfillmentd: %v", err)
	}
	return st
}

// stop shuts the process down gracefully (SIGTERM), killing it if that
// takes more than 15s. It is safe to call on a dead process.
func (p *proc) stop(t *testing.T) *os.ProcessState {
	t.Helper()
	st, err := p.child.Stop(15 * time.Second)
	if err != nil {
		t.Errorf("fulfillmentd: %v", err)
	}
	return st
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
	defer func() { _ = resp.Body.Close() }() // read to the end: nothing is lost
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}
