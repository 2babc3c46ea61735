package chaos

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
)

// Environment variables the generated configuration references: secrets
// are never written into the file.
const (
	envDatabaseURL = "DATABASE_URL"
	envAdminToken  = "CHAOS_ADMIN_TOKEN"
	envOrgToken    = "CHAOS_ORG_TOKEN"
	envLiveSecret  = "CHAOS_YOLFI_LIVE_SECRET"
	envTestSecret  = "CHAOS_YOLFI_TEST_SECRET"
	// envTBankPassword is the T-Bank terminal's password.
	envTBankPassword = "CHAOS_TBANK_PASSWORD"
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
	destinations          []config.Destination
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
	*daemon.Process
	n        int         // start number
	ready    atomic.Bool // it served: its exit is the watcher's business
	expected atomic.Bool // we killed or stopped it
}

// running reports whether a fulfillmentd process is alive now.
func (s *service) running() bool {
	p := s.cur.Load()
	return p != nil && p.Running()
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
		readyCtx, cancel := context.WithTimeout(ctx, readyTimeout)
		err = p.WaitReady(readyCtx, s.httpAddr, s.ingestAddr)
		cancel()
		if err == nil {
			p.ready.Store(true)
			s.cur.Store(p)
			return nil
		}
		p.expected.Store(true)
		if _, kerr := p.Kill(); kerr != nil {
			return fmt.Errorf("fulfillmentd #%d: %w", p.n, kerr)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		out := s.logSince(offset)
		if !strings.Contains(out, "address already in use") {
			return fmt.Errorf("fulfillmentd #%d did not become ready: %w\n%s", p.n, err, daemon.Tail(out, 4096))
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
	defer func() { _ = logFile.Close() }() // the child has its own copy
	offset, _ := logFile.Seek(0, io.SeekEnd)
	_, _ = fmt.Fprintf(logFile, "=== chaos: fulfillmentd #%d started at %s ===\n", n, time.Now().Format(time.RFC3339Nano))

	// Its own process group: a Ctrl-C meant for chaos does not reach it
	// (chaos stops it). Should chaos die without stopping it, the kernel
	// kills it.
	child, err := daemon.Start(s.bin, []string{"serve", "--config", s.cfgPath}, s.env, logFile, daemon.OwnProcessGroup())
	if err != nil {
		return nil, 0, err
	}
	p := &proc{Process: child, n: n}
	s.watchers.Add(1)
	go s.watch(p, offset)
	return p, offset, nil
}

// watch reports an exit of p that nobody asked for, once it served, and
// asks for a restart. (A process that exits before it is ready is
// startLocked's business.)
func (s *service) watch(p *proc, offset int64) {
	defer s.watchers.Done()
	<-p.Exited()
	if p.expected.Load() || !p.ready.Load() {
		return
	}
	s.surprise.Add(1)
	s.viol.add("unexpected exit", "fulfillmentd #%d (pid %d) exited by itself: %v; last output:\n%s",
		p.n, p.Pid(), p.State(), indent(daemon.Tail(s.logSince(offset), 2048)))
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
	if p := s.cur.Load(); p != nil && p.Running() {
		p.expected.Store(true)
		st, err := p.Kill()
		if err != nil {
			return fmt.Errorf("fulfillmentd #%d: %w", p.n, err)
		}
		if !daemon.Killed(st) {
			s.viol.add("unexpected exit", "fulfillmentd #%d had exited by itself (%v) before it was killed", p.n, st)
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
	if p == nil || !p.Running() {
		return nil, nil
	}
	p.expected.Store(true)
	st, err := p.Stop(grace)
	if err != nil {
		return st, fmt.Errorf("fulfillmentd #%d: %w", p.n, err)
	}
	return st, nil
}

// logSince is what the processes logged from offset on.
func (s *service) logSince(offset int64) string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	b, _ := io.ReadAll(io.NewSectionReader(f, offset, 4<<20))
	return string(b)
}

// config is the configuration of every process of the run: the same
// ports each time, so the sender keeps its URL; every secret is an
// environment variable reference. The outbox retries quickly, as the
// inbox does, so that the run drains within seconds.
func (s *service) config() *config.Config {
	return &config.Config{
		Listen:   config.Listen{GRPC: s.grpcAddr, HTTP: s.httpAddr, Ingest: s.ingestAddr},
		Database: config.Database{URLEnv: envDatabaseURL, Migrate: true, MaxConns: 12, ConnectTimeout: time.Second},
		Log:      config.Log{Level: "info"},
		Auth: config.Auth{Tokens: []config.Token{
			daemon.EnvToken("chaos-admin", envAdminToken, []string{"*"}, config.ScopeAdmin),
			daemon.EnvToken("chaos-checkout", envOrgToken, []string{orgID},
				config.ScopeOrdersWrite, config.ScopeOrdersRead, config.ScopeReconciliationRead),
		}},
		Endpoints: []config.Endpoint{
			daemon.YolfiEndpoint(liveEP, orgID, "live", envLiveSecret),
			daemon.YolfiEndpoint(testEP, orgID, "test", envTestSecret),
			// The run starts no payment: the bank's API is never called.
			daemon.TBankEndpoint(tbankEP, orgID, "live", envTBankPassword, tbankTerminal),
		},
		Ingest: config.Ingest{Timeout: 2 * time.Second},
		Inbox: config.Inbox{Queue: config.Queue{Workers: 4, Batch: 16, Lease: 2 * time.Second, Poll: 100 * time.Millisecond,
			BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, MaxAttempts: 50}},
		Destinations: s.destinations,
		Outbox:       config.Queue{Lease: 2 * time.Second, Poll: 100 * time.Millisecond, BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second},
		// The subscription orders' plans, and a sweeper that ends access
		// within moments of its end (subscriptions.go).
		Plans:             []config.Plan{planMonthly, planWeekly},
		SubscriptionSweep: sweepQueue,
	}
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
}
