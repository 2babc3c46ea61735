package main

// The services measured: each fulfillmentd started on a database of the
// cluster, which of them is measured now, and the steps every phase takes on
// it (orders, drains, profiles).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/rig/loadgen"
)

// target is one running fulfillmentd with its database and clients.
type target struct {
	name   string
	dbName string
	svc    *service
	db     *pgxpool.Pool // the service's database, for measurements
	api    *loadgen.API
	sender *loadgen.Sender // to the Yolfi endpoint
	tbank  *loadgen.Sender // to the T-Bank endpoint, same connections
	rest   *loadgen.REST
}

func (t *target) close() {
	if t.api != nil {
		_ = t.api.Close()
	}
	if t.sender != nil {
		t.sender.Close()
	}
	if t.db != nil {
		t.db.Close()
	}
	if t.svc != nil {
		t.svc.stop()
	}
}

// startTarget starts fulfillmentd on database dbName, its configuration
// changed by tune (nil: the default), and connects to it.
func (b *bench) startTarget(ctx context.Context, name, dbName string, tune func(*config.Config)) (*target, error) {
	t := &target{name: name, dbName: dbName}
	b.targets = append(b.targets, t)
	dir := filepath.Join(b.tmp, "svc-"+name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	svc, err := startService(b.bin, dir, b.cluster.URL(dbName), b.o.maxConns, b.o.pprof, tune)
	if err != nil {
		return nil, err
	}
	t.svc = svc
	b.logf("fulfillmentd %q pid %d on database %s: grpc %s, http %s, ingest %s (log %s)",
		name, svc.pid(), dbName, svc.grpcAddr, svc.httpAddr, svc.ingestAddr, svc.logPath)
	if t.db, err = loadgen.ConnectDB(ctx, b.cluster.URL(dbName)); err != nil {
		return nil, err
	}
	if b.o.statements {
		if err := loadgen.EnableStatements(ctx, t.db); err != nil {
			b.warn("pg_stat_statements unavailable, statement costs not reported: %v", err)
			b.o.statements = false
		}
	}
	if t.api, err = loadgen.DialAPI(svc.grpcAddr, benchToken); err != nil {
		return nil, err
	}
	t.sender = loadgen.NewSender("http://"+svc.ingestAddr+"/webhooks/"+endpointID, 512)
	t.tbank = &loadgen.Sender{URL: "http://" + svc.ingestAddr + "/webhooks/" + tbankEndpointID, Client: t.sender.Client}
	t.rest = loadgen.NewREST("http://"+svc.httpAddr, benchToken, 64)
	return t, nil
}

// use makes t the measured service (the CPU column follows it).
func (b *bench) use(t *target) {
	b.t = t
	b.cpu.servicePID = t.svc.pid()
}

// on runs fn with p's service as the measured one.
func (b *bench) on(p *provider, fn func() error) error {
	if p.on == nil {
		return fn()
	}
	main := b.t
	b.use(p.on)
	defer b.use(main)
	return fn()
}

// createOrders pre-creates n orders (loadgen.OrderRequest) over gRPC with
// 16 concurrent callers.
func (b *bench) createOrders(ctx context.Context, n int) ([]loadgen.Order, error) {
	return b.createOrdersOf(ctx, n, func(mid string) *fulfillmentv1.CreateOrderRequest {
		return loadgen.OrderRequest(benchOrg, benchEnv, mid)
	})
}

// createOrdersOf pre-creates n orders, each request built by request from
// its merchant order id, over gRPC with 16 concurrent callers.
func (b *bench) createOrdersOf(ctx context.Context, n int, request func(mid string) *fulfillmentv1.CreateOrderRequest) ([]loadgen.Order, error) {
	b.orderSeq++
	t0 := time.Now()
	orders, err := b.t.api.CreateOrdersWith(ctx, fmt.Sprintf("bench-%s-%d", b.runID, b.orderSeq), n, 16, request)
	if err != nil {
		return nil, err
	}
	d := time.Since(t0)
	b.logf("created %d orders in %.1fs (%.0f/s)", n, d.Seconds(), float64(n)/d.Seconds())
	return orders, nil
}

// profile starts a CPU profile of fulfillmentd over d (with --pprof); the
// returned function waits for it, saves it into --out and logs its top.
func (b *bench) profile(ctx context.Context, name string, d time.Duration) func() {
	if !b.o.pprof || b.t == nil || b.t.svc == nil || b.t.svc.debugAddr == "" {
		return func() {}
	}
	path := filepath.Join(b.o.out, "pprof-"+name+".pb.gz")
	if err := os.MkdirAll(b.o.out, 0o755); err != nil {
		b.warn("profile %s: %v", name, err)
		return func() {}
	}
	done := make(chan struct{})
	var top string
	var err error
	go func() {
		defer close(done)
		top, err = b.t.svc.cpuProfile(ctx, d, path)
	}()
	return func() {
		<-done
		if err != nil {
			b.warn("profile %s: %v", name, err)
			return
		}
		b.rep.Profiles = append(b.rep.Profiles, path)
		b.logf("fulfillmentd CPU profile during %s: %s\n%s", name, path, top)
	}
}

// drain waits for the inbox backlog to be processed, so that each
// measurement starts from the same state.
func (b *bench) drain(ctx context.Context, what string) float64 {
	timeout := b.o.drainTimeout
	if left := b.o.budget - time.Since(b.start) - time.Minute; left < timeout {
		timeout = max(left, 5*time.Second)
	}
	d, err := loadgen.Drain(ctx, b.t.db, timeout)
	if err != nil && ctx.Err() == nil {
		b.warn("after %s: %v", what, err)
	}
	if d > 500*time.Millisecond {
		b.logf("drained the inbox backlog after %s in %.1fs", what, d.Seconds())
	}
	return round1(d.Seconds())
}

// ready prepares a measured run on orders just created: it drains the
// inbox, then ANALYZEs the service's database, as autovacuum does within a
// minute in a running service. Without it, the first runs would measure
// plans cached while the tables were nearly empty (sequential scans that
// grow with each table), which only a later ANALYZE replaces.
func (b *bench) ready(ctx context.Context) {
	b.drain(ctx, "creating orders")
	if _, err := b.t.db.Exec(ctx, "ANALYZE"); err != nil && ctx.Err() == nil {
		b.warn("analyzing the service's database: %v", err)
	}
}
