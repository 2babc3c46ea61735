package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
)

// Credentials of the bench's fulfillmentd: environment variables of the child
// only, never written into its configuration file.
const (
	envToken    = "BENCH_TOKEN"
	envSecret   = "BENCH_YOLFI_SECRET"
	envOutbox   = "BENCH_OUTBOX_SECRET"
	envTBank    = "BENCH_TBANK_PASSWORD"
	benchOrg    = "org_bench"
	benchEnv    = "live"
	benchPlan   = "bench-monthly"
	endpointID  = "yolfi-live"
	benchToken  = "bench-token-0123456789abcdef"
	benchSecret = "ywhsec_bench_0123456789abcdef"
	// The T-Bank endpoint: the terminal and its password.
	tbankEndpointID = "tbank-live"
	tbankTerminal   = "BenchTerminalDEMO"
	tbankPassword   = "bench-terminal-pw"
	// outboxSecret signs the outbox's deliveries to the bench's receiver
	// (the Standard Webhooks documentation's example secret).
	outboxSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// service is a running fulfillmentd process.
type service struct {
	proc       *daemon.Process
	logPath    string
	grpcAddr   string
	httpAddr   string
	ingestAddr string
	debugAddr  string // pprof listener, when enabled
}

// moduleRoot is the folder of the module's go.mod.
func moduleRoot() (string, error) {
	root, err := daemon.ModuleRoot()
	if err != nil {
		return "", fmt.Errorf("%w; run the bench from the repository", err)
	}
	return root, nil
}

// buildService builds ./cmd/fulfillmentd into dir.
func buildService(ctx context.Context, root, dir string) (string, error) {
	out := filepath.Join(dir, "fulfillmentd")
	if err := daemon.Build(ctx, root, out); err != nil {
		return "", err
	}
	return out, nil
}

// serviceConfig is the configuration of the bench's fulfillmentd: a live
// Yolfi endpoint and a live T-Bank one, one token, a pool of maxConns connections, default inbox
// and ingest settings.
func serviceConfig(grpcAddr, httpAddr, ingestAddr, debugAddr string, maxConns int) *config.Config {
	return &config.Config{
		Listen:   config.Listen{GRPC: grpcAddr, HTTP: httpAddr, Ingest: ingestAddr, Debug: debugAddr},
		Database: config.Database{URLEnv: "DATABASE_URL", Migrate: true, MaxConns: int32(maxConns)},
		Log:      config.Log{Level: "info"},
		Auth: config.Auth{Tokens: []config.Token{daemon.EnvToken("bench", envToken, []string{benchOrg},
			config.ScopeOrdersRead, config.ScopeOrdersWrite, config.ScopeReconciliationRead)}},
		Endpoints: []config.Endpoint{daemon.YolfiEndpoint(endpointID, benchOrg, benchEnv, envSecret),
			daemon.TBankEndpoint(tbankEndpointID, benchOrg, benchEnv, envTBank, tbankTerminal)},
		Plans: []config.Plan{{ID: benchPlan, Months: 1}},
	}
}

// startService runs `fulfillmentd serve` on dbURL and waits for /readyz.
// With pprof, the service also serves /debug/pprof/ (listen.debug). tune,
// when not nil, changes the configuration (destinations, outbox).
func startService(bin, dir, dbURL string, maxConns int, pprof bool, tune func(*config.Config)) (*service, error) {
	ports, err := daemon.FreeAddrs(4)
	if err != nil {
		return nil, err
	}
	s := &service{logPath: filepath.Join(dir, "fulfillmentd.log"),
		grpcAddr: ports[0], httpAddr: ports[1], ingestAddr: ports[2]}
	if pprof {
		s.debugAddr = ports[3]
	}
	cfgPath := filepath.Join(dir, "fulfillmentd.yaml")
	cfg := serviceConfig(s.grpcAddr, s.httpAddr, s.ingestAddr, s.debugAddr, maxConns)
	if tune != nil {
		tune(cfg)
	}
	if err := daemon.WriteConfig(cfgPath, cfg); err != nil {
		return nil, err
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }() // the child has its own copy
	env := daemon.ChildEnv("DATABASE_URL="+dbURL, envToken+"="+benchToken, envSecret+"="+benchSecret, envOutbox+"="+outboxSecret,
		envTBank+"="+tbankPassword)
	if s.proc, err = daemon.Start(bin, []string{"serve", "--config", cfgPath}, env, logFile); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.proc.WaitReady(ctx, s.httpAddr, s.ingestAddr); err != nil {
		s.stop()
		return nil, fmt.Errorf("waiting for fulfillmentd: %w\n%s", err, daemon.FileTail(s.logPath, 4096))
	}
	return s, nil
}

func (s *service) pid() int { return s.proc.Pid() }

// stop asks fulfillmentd to shut down (SIGTERM) and kills it after 15s.
func (s *service) stop() { _, _ = s.proc.Stop(15 * time.Second) }

// cpuProfile fetches a CPU profile of the service over d into path and
// returns `go tool pprof -top` of it.
func (s *service) cpuProfile(ctx context.Context, d time.Duration, path string) (string, error) {
	secs := int(d.Round(time.Second) / time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet,
		fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", s.debugAddr, max(secs, 1)), http.NoBody)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Timeout: d + 30*time.Second}).Do(req)
	if err != nil {
		return "", err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /debug/pprof/profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close() // the copy error is the one to report
		return "", err
	}
	if err := f.Close(); err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", path).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %w\n%s", err, out)
	}
	return string(out), nil
}

// receiptBatches reads the service's count of webhook group commits by
// outcome (fulfillment_inbox_receipt_batches_total: decided on receipt, or
// queued because an event was stored meanwhile, a lock was held or
// deciding failed); nil when it exports none (its inbox processor is off).
func (s *service) receiptBatches(ctx context.Context) (map[string]float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.httpAddr+"/metrics", http.NoBody)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("reading /metrics: %w", err)
	}
	f, ok := families["fulfillment_inbox_receipt_batches_total"]
	if !ok {
		return nil, nil
	}
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "outcome" {
				out[l.GetValue()] = m.GetCounter().GetValue()
			}
		}
	}
	return out, nil
}
