// Package app assembles the service from its configuration: storage, the
// gRPC API and REST gateway, the webhook gateway, the inbox processor and the outbox dispatcher,
// run together by one supervisor. cmd/fulfillmentd and end-to-end tests use
// it alike.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
	"github.com/fulfillplatform/fulfillment/internal/httpmetrics"
	"github.com/fulfillplatform/fulfillment/server"
	"github.com/fulfillplatform/fulfillment/storage"
	"github.com/fulfillplatform/fulfillment/worker"
)

// ErrNoDatabase means the configuration names no database.
var ErrNoDatabase = errors.New("config: database: set DATABASE_URL (or database.url_env / database.url_file)")

// App is the whole service in one process.
type App struct {
	log       *slog.Logger
	store     *storage.Store
	srv       *server.Server
	gateway   *ingest.Gateway
	webhooks  http.Handler         // the gateway's, counted and timed
	liveness  *storage.Liveness    // the owner the queues claim under
	inbox     *worker.Queue        // nil when inbox.disabled
	outbox    []*worker.Queue      // one per destination; none without destinations, or when outbox.disabled
	poller    *worker.Queue        // nil without providers to poll, or when status_poll.disabled
	sweeper   *worker.Queue        // nil without plans, or when subscription_sweep.disabled
	housekeep *worker.Queue        // nil when housekeeping.disabled
	vacuum    *storage.QueueVacuum // nil when database.queue_vacuum.disabled
	health    *queueHealth         // whether each queue can claim work
	ingestLis net.Listener
	debugLis  net.Listener // nil unless listen.debug is set
	// tls is the listeners' TLS (nil: plain), loaded once.
	tls  *tls.Config
	http config.HTTP
	// tracer is nil when tracing is off; stopTracing flushes it.
	tracer      trace.TracerProvider
	stopTracing func(context.Context) error
	// migrateURL is where Run applies the migrations before its queues
	// start, when they could not be applied at New ("": none to apply).
	migrateURL  string
	migrateWait storage.LockWait
}

// New opens the database (migrating first when configured) and binds every
// listener, so that addresses are known before Run.
func New(ctx context.Context, cfg *config.Config, log *slog.Logger, opts ...Option) (*App, error) {
	if cfg.Database.URL == "" {
		return nil, ErrNoDatabase
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	// What only the configuration decides fails before the database is
	// touched: a mistyped provider or a short secret migrates nothing.
	endpoints, err := Endpoints(cfg)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := LoadTLS(cfg.TLS)
	if err != nil {
		return nil, err
	}
	tracer, stopTracing := o.tracer, func(context.Context) error { return nil }
	if tracer == nil {
		if tracer, stopTracing, err = newTracerProvider(ctx, cfg.Tracing); err != nil {
			return nil, err
		}
	}
	migrateLater, migrateWait := "", MigrateLockWait(cfg.Database, func(lt *storage.LockTimeoutError) {
		log.Warn("migration gave way to a lock it waited for", "error", lt)
	})
	if cfg.Database.Migrate {
		switch err := migrate(ctx, SessionURL(cfg), migrateWait, log); {
		case errors.Is(err, fulfillment.ErrUnavailable):
			// As the service waits for a database that does not answer, it
			// migrates once it does (Run), its queues waiting until then.
			log.Warn("database unavailable (unreachable, or taking no writes): migrations are applied once it answers and takes writes", "error", err)
			migrateLater = SessionURL(cfg)
		case err != nil:
			return nil, err
		}
	}
	store, err := storage.Open(ctx, cfg.Database.URL, storage.Options{
		SessionURL:     cfg.Database.SessionURL,
		MaxConns:       cfg.Database.MaxConns,
		ConnectTimeout: cfg.Database.ConnectTimeout,
		GiveUpAfter:    cfg.Database.ExitAfterUnreachable,
		Logger:         log,
		Subscriptions:  subscriptions(cfg),
		Plans:          cfg.DomainPlans(),
		// Polls are queued whether or not this process runs the poller.
		StatusPollAfter: cfg.StatusPoll.WithDefaults().After,
		TracerProvider:  tracer,
		LateMatchWindow: cfg.Inbox.LateMatch(),
		// (A replica with no inbox processor decides nothing either.)
		DecideOnReceipt: !cfg.Inbox.QueueOnly && !cfg.Inbox.Disabled,
		InsertFlushers:  cfg.Inbox.Flushers(),
		InsertLinger:    cfg.Inbox.Linger(),
	})
	if err != nil {
		_ = stopTracing(ctx)
		return nil, PoolerError(err)
	}
	warnUnreachable(cfg, log)
	for _, d := range cfg.Deprecated() {
		log.Warn(d)
	}
	a := &App{log: log, store: store, http: cfg.HTTP, tracer: tracer, stopTracing: stopTracing, tls: tlsCfg,
		migrateURL: migrateLater, migrateWait: migrateWait}
	if err := a.build(cfg, endpoints); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// SessionURL is where the connections that need a session of their own
// go: database.session_url, else database.url.
func SessionURL(cfg *config.Config) string {
	if cfg.Database.SessionURL != "" {
		return cfg.Database.SessionURL
	}
	return cfg.Database.URL
}

// PoolerError says which key to set when err is storage's refusal of a
// transaction-pooled session URL; other errors are returned as they are.
func PoolerError(err error) error {
	if !errors.Is(err, storage.ErrTransactionPooled) {
		return err
	}
	return errors.New("database: the URL used for sessions goes through a transaction-mode pooler, which cannot hold the sessions that queue liveness, LISTEN and migrations need: set database.session_url (session_url_env or session_url_file, or DATABASE_SESSION_URL) to a direct or session-pooled URL of the same database")
}

func (a *App) build(cfg *config.Config, endpoints []ingest.Endpoint) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		a.store.MetricsCollector(storage.DefaultMetricsTimeout), BuildInfo())

	payments, err := PaymentProviders(endpoints)
	if err != nil {
		return err
	}
	a.health = newQueueHealth(reg, a.log)
	mountConsole, err := newConsole(cfg, a.store, a.log)
	if err != nil {
		return err
	}
	a.srv, err = server.New(ServerConfig(cfg, endpoints, a.tls), a.store, a.log, server.Options{
		Metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), Payments: payments, TracerProvider: a.tracer,
		Queues: a.health.Down, Console: mountConsole, Registerer: reg})
	if err != nil {
		return err
	}
	if err := a.srv.Listen(); err != nil {
		return err
	}
	// The webhook gateway records events in-process, through RecordEvent's
	// checks without its gRPC hop.
	a.gateway = NewGateway(cfg, endpoints, a.srv.LocalRecorder(), reg, a.log)
	a.webhooks = httpmetrics.New(reg, "ingest").Handler(a.gateway.Handler())
	if a.ingestLis, err = net.Listen("tcp", cfg.Listen.Ingest); err != nil {
		return fmt.Errorf("listening for webhooks on %s: %w", cfg.Listen.Ingest, err)
	}
	if cfg.Listen.Debug != "" {
		if a.debugLis, err = net.Listen("tcp", cfg.Listen.Debug); err != nil {
			return fmt.Errorf("listening for pprof on %s: %w", cfg.Listen.Debug, err)
		}
		if addr, ok := a.debugLis.Addr().(*net.TCPAddr); ok && !addr.IP.IsLoopback() {
			// Profiles and heap dumps hold what the process holds:
			// secrets, tokens, payloads. Nothing guards this listener.
			a.log.Warn("listen.debug serves Go's profiles, unauthenticated, beyond loopback: keep it on 127.0.0.1",
				"address", addr.String())
		}
	}

	a.liveness = a.store.NewLiveness()
	observers := inboxObservers(reg, a.tracer)
	// The events decided as they are stored are seen as the processor's.
	a.store.ObserveDecided(worker.InboxObserver(a.log, observers))
	if !cfg.Inbox.Disabled {
		a.inbox = worker.NewInboxWith(a.store.InboxQueue(), a.store, a.liveness, QueueConfig(cfg.Inbox.Queue), a.log, observers)
		// The events this process stores go straight to its processor,
		// as far as it has room: no claim.
		a.store.HandInboxTo(a.inbox)
	}
	if len(cfg.Destinations) > 0 && !cfg.Outbox.Disabled {
		a.outbox = newOutbox(cfg, a.store, a.liveness, reg, a.log)
	}
	pollers := map[string]fulfillment.StatePoller{}
	for id, p := range payments {
		if sp, ok := p.(fulfillment.StatePoller); ok {
			pollers[id] = sp
		}
	}
	if poll := cfg.StatusPoll.WithDefaults(); len(pollers) > 0 && !poll.Disabled {
		a.poller = worker.NewPollerWith(a.store.PollQueue(), a.store, pollers, a.liveness, QueueConfig(poll.Queue), a.log, pollObservers(reg, pollers))
	}
	if sweep := config.SweepDefaults(cfg.SubscriptionSweep); len(cfg.Plans) > 0 && !sweep.Disabled {
		a.sweeper = worker.NewSweeperWith(a.store.SweepQueue(), a.store, a.liveness, QueueConfig(sweep), nil, a.log, sweepObservers(reg))
	}
	if v := cfg.Database.QueueVacuum; !v.Disabled {
		a.vacuum = &storage.QueueVacuum{Interval: v.Interval, DeadRows: v.DeadRows}
	}
	if hk := cfg.Housekeeping.WithDefaults(); !hk.Disabled {
		a.housekeep = worker.NewHousekeeperWith(a.store.HousekeepingQueue(), a.store, a.liveness, worker.HousekeepingConfig{
			Interval: hk.Interval, FulfillmentSLA: hk.FulfillmentSLA, RawBodyRetention: hk.RawBodyRetention, Batch: hk.Batch,
		}, nil, a.log, housekeepingObservers(reg))
	}
	return nil
}

// GRPCAddr is the bound gRPC address.
func (a *App) GRPCAddr() string { return a.srv.GRPCAddr() }

// HTTPAddr is the bound REST gateway address.
func (a *App) HTTPAddr() string { return a.srv.HTTPAddr() }

// IngestAddr is the bound webhook gateway address.
func (a *App) IngestAddr() string { return a.ingestLis.Addr().String() }

// Ready is closed once the API serves.
func (a *App) Ready() <-chan struct{} { return a.srv.Ready() }

// Run serves until ctx ends or a component fails, then stops every
// component gracefully and closes the database pool.
func (a *App) Run(ctx context.Context) error {
	defer a.Close()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return a.srv.Run(ctx) })
	g.Go(func() error {
		return ServeHTTP(ctx, "webhooks", a.ingestLis, traceHTTP(a.webhooks, "webhook", a.tracer), a.tls, a.http, a.log)
	})
	var queues []*worker.Queue
	if a.inbox != nil {
		queues = append(queues, a.inbox)
	}
	if a.poller != nil {
		queues = append(queues, a.poller)
	}
	if a.sweeper != nil {
		queues = append(queues, a.sweeper)
	}
	if a.housekeep != nil {
		queues = append(queues, a.housekeep)
	}
	queues = append(queues, a.outbox...)
	if len(queues) > 0 {
		g.Go(func() error {
			// The queues run against the schema they were written for:
			// while migrations are pending, they wait (and /readyz says so).
			if ok, err := a.awaitSchema(ctx); !ok {
				return err
			}
			return runQueues(ctx, a.liveness, queues...)
		})
		g.Go(func() error { a.health.watch(ctx, queues); return nil })
	}
	if a.vacuum != nil {
		g.Go(func() error { return a.store.VacuumQueues(ctx, *a.vacuum) })
	}
	g.Go(func() error { a.warnPlansMissing(ctx); return nil })
	g.Go(func() error { a.warnUndurable(ctx); return nil })
	g.Go(func() error {
		select {
		case <-ctx.Done():
			return nil
		case <-a.store.GaveUp():
			return fmt.Errorf("the database has not answered, or taken writes, for %s (database.exit_after_unreachable): exiting", a.store.GiveUpAfter())
		}
	})
	if a.debugLis != nil {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		g.Go(func() error { return ServeHTTP(ctx, "pprof", a.debugLis, mux, nil, a.http, a.log) })
	}
	return g.Wait()
}

// MigrateLockWait is how long a migration waits for its locks, by db's
// configuration; retrying is told of each lock it gave way to.
func MigrateLockWait(db config.Database, retrying func(*storage.LockTimeoutError)) storage.LockWait {
	return storage.LockWait{Timeout: db.MigrateLockTimeout, Attempts: db.MigrateLockAttempts, Retrying: retrying}
}

// migrate applies the pending migrations at url, a session URL, waiting
// for locks as w says. A schema newer than this binary's is left alone: an
// older binary during an upgrade, or one rolled back, runs on it.
func migrate(ctx context.Context, url string, w storage.LockWait, log *slog.Logger) error {
	var ahead *storage.SchemaAheadError
	switch err := storage.Migrate(ctx, url, w); {
	case errors.As(err, &ahead):
		log.Warn("database schema newer than this binary", "schema_version", ahead.Applied, "latest_version", ahead.Latest)
	case err != nil:
		return PoolerError(err)
	default:
		log.Info("migrations applied")
	}
	return nil
}

// schemaPoll is how often Run looks at the schema again while migrations
// are pending.
const schemaPoll = 2 * time.Second

// awaitSchema returns true once the schema is this binary's or newer,
// having applied the migrations when New could not (migrateURL); false
// when ctx ended first, or with the error of migrations that failed once
// the database answered (which stops the service, as it would have at
// New). While migrations are pending it says so once.
func (a *App) awaitSchema(ctx context.Context) (bool, error) {
	said := false
	for {
		if a.migrateURL != "" {
			switch err := migrate(ctx, a.migrateURL, a.migrateWait, a.log); {
			case err == nil:
				a.migrateURL = ""
			case ctx.Err() != nil:
				return false, nil
			case !errors.Is(err, fulfillment.ErrUnavailable):
				return false, err
			}
		}
		applied, latest, err := a.store.SchemaVersion(ctx)
		if err == nil && applied >= latest {
			return true, nil
		}
		if err == nil && !said {
			said = true
			a.log.Warn("queues wait for the database's migrations: run fulfillmentd migrate",
				"schema_version", applied, "latest_version", latest)
		}
		select {
		case <-ctx.Done():
			return false, nil
		case <-time.After(schemaPoll):
		}
	}
}

// Close releases the database pool (Run does it when it returns) and
// flushes the traces.
func (a *App) Close() {
	a.store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.stopTracing(ctx); err != nil {
		a.log.Warn("tracing: flushing spans", "error", err)
	}
}

// inboxObservers count the inbox's decisions and time each event from its
// receipt to its decision, and trace its processing when tp is set.
func inboxObservers(reg prometheus.Registerer, tp trace.TracerProvider) worker.InboxOptions {
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fulfillment_inbox_events_processed_total",
		Help: "Inbox events processed, by decision.",
	}, []string{"decision"})
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "fulfillment_inbox_processing_latency_seconds",
		Help:    "Time from an inbox event's receipt (committed, acknowledged) to its decision committed.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	})
	reg.MustRegister(decisions, latency)
	o := worker.InboxOptions{
		OnOutcome: func(o fulfillment.Outcome) { decisions.WithLabelValues(string(o.Decision)).Inc() },
		OnProcessed: func(p fulfillment.ProcessedEvent) {
			if p.ReceivedAt.IsZero() {
				return // not read back (a test-mode event stored ignored): no sample, rather than a false one
			}
			latency.Observe(max(time.Since(p.ReceivedAt), 0).Seconds())
		},
	}
	if tp != nil {
		o.Tracer = tp.Tracer("github.com/fulfillplatform/fulfillment/worker")
	}
	return o
}

// NewGateway builds the webhook gateway of the endpoints (Endpoints).
func NewGateway(cfg *config.Config, eps []ingest.Endpoint, rec ingest.Recorder, reg prometheus.Registerer, log *slog.Logger) *ingest.Gateway {
	return ingest.NewGateway(eps, rec, ingest.Options{
		MaxBodyBytes: cfg.Ingest.MaxBodyBytes,
		Timeout:      cfg.Ingest.Timeout,
		Registerer:   reg,
	}, log)
}

// PaymentProviders are the providers of the endpoints (Endpoints) that
// take payments the service starts, by endpoint id.
func PaymentProviders(eps []ingest.Endpoint) (map[string]fulfillment.PaymentProvider, error) {
	out := map[string]fulfillment.PaymentProvider{}
	for _, e := range eps {
		taker, ok := e.Adapter.(ingest.PaymentTaker)
		if !ok {
			continue
		}
		p, err := taker.Payments(nil)
		if err != nil {
			return nil, fmt.Errorf("config: endpoint %s: %w", e.ID, err)
		}
		out[e.ID] = p
	}
	return out, nil
}

// warnUnreachable says when the configuration leaves the service with no
// caller able to reach it, which is otherwise silent.
func warnUnreachable(cfg *config.Config, log *slog.Logger) {
	if len(cfg.Auth.Tokens) == 0 {
		log.Warn("no API tokens are configured (auth.tokens): every gRPC and REST call will be refused as unauthenticated; see config/example.yaml")
	}
	if len(cfg.Endpoints) == 0 {
		log.Warn("no webhook endpoints are configured (endpoints): every webhook will be answered 404; see config/example.yaml")
	}
}

// plansCheckTimeout bounds the start's count of subscriptions by plan.
const plansCheckTimeout = 10 * time.Second

// warnPlansMissing says, once at start, which plans live subscriptions are
// on that the configuration does not have: their events fail, after their
// retries, and their access is never ended, until the plan is configured
// again — a plan taken out of plans: by mistake shows now, not when the
// first renewal fails. A database that does not answer is said elsewhere.
func (a *App) warnPlansMissing(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, plansCheckTimeout)
	defer cancel()
	missing, err := a.store.SubscriptionsOnUnconfiguredPlans(ctx)
	switch {
	case err != nil:
		a.log.Debug("counting subscriptions by plan", "error", err)
	case len(missing) > 0:
		a.log.Warn("live subscriptions are on plans that the configuration does not have: their events fail and their access "+
			"is not ended until each plan is in plans: again", "subscriptions_by_plan", missing)
	}
}

// warnUndurable says once, at start, when the database lets the service's
// commits be acknowledged before they are durable: a webhook answered 200
// just before a crash of the database would be lost, and providers do not
// send it again.
func (a *App) warnUndurable(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, plansCheckTimeout)
	defer cancel()
	switch v, err := a.store.SynchronousCommit(ctx); {
	case err != nil:
		a.log.Debug("reading synchronous_commit", "error", err)
	case v == "off":
		a.log.Warn("synchronous_commit is off for this service's transactions (a setting of the server, its database or "+
			"role): a webhook answered 200 just before a crash of the database can be lost, and providers do not send it "+
			"again; set it back to on, PostgreSQL's default", "synchronous_commit", v)
	}
}

// ServeHTTP serves h on lis, within the timeouts of bounds, until ctx ends,
// then shuts down gracefully.
func ServeHTTP(ctx context.Context, name string, lis net.Listener, h http.Handler, t *tls.Config, bounds config.HTTP, log *slog.Logger) error {
	srv, lis := server.NewHTTPServer(h, bounds, log, lis)
	if t != nil {
		lis = tls.NewListener(lis, t.Clone())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	log.Info("serving "+name, "addr", lis.Addr().String())
	select {
	case err := <-errc:
		return fmt.Errorf("serving %s: %w", name, err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	return nil
}

// runQueues runs the queues under one liveness until ctx ends. The
// liveness outlives them, so that they hand back their claims as a live
// owner.
func runQueues(ctx context.Context, live *storage.Liveness, queues ...*worker.Queue) error {
	liveCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	liveDone := make(chan error, 1)
	go func() { liveDone <- live.Run(liveCtx) }()
	g, ctx := errgroup.WithContext(ctx)
	for _, q := range queues {
		g.Go(func() error { return q.Run(ctx) })
	}
	err := g.Wait()
	stop()
	if lerr := <-liveDone; err == nil {
		err = lerr
	}
	return err
}

// QueueConfig translates the configuration of a queue.
func QueueConfig(q config.Queue) worker.Config {
	return worker.Config{
		Workers: q.Workers, Batch: q.Batch, Lease: q.Lease, Poll: q.Poll,
		MaxAttempts: q.MaxAttempts, BaseBackoff: q.BaseBackoff, MaxBackoff: q.MaxBackoff,
	}
}
