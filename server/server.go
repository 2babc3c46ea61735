// Package server is the gRPC FulfillmentService and its REST gateway:
// proto ↔ domain translation, authentication, logging and recovery
// interceptors, and the one table mapping errors to status codes.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/netutil"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/test/bufconn"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// Store is what the server needs from storage.
type Store interface {
	fulfillment.OrderStore
	fulfillment.InboxStore
	fulfillment.ReconStore
	fulfillment.OutboxStore
	fulfillment.FeedStore
	fulfillment.PaymentStore
	fulfillment.SubscriptionReader
	fulfillment.RedriveStore
	Readiness
}

// Server runs the gRPC API and the HTTP gateway until its context ends.
type Server struct {
	cfg   Config
	store Store
	log   *slog.Logger

	opts             Options
	grpcLis, httpLis net.Listener
	ready            chan struct{}

	auth *Authenticator
	// refusedLog lets a few lines a second through of the REST requests
	// refused before they reach a call (which logs its own): anyone can
	// send those.
	refusedLog *rate.Limiter
	grpcSrv    *grpc.Server
	svc        *Service
	inproc     *bufconn.Listener
	local      *grpc.ClientConn
}

// Options adds optional parts to the server.
type Options struct {
	// Metrics, when set, is served at GET /metrics on the HTTP listener.
	Metrics http.Handler
	// Queues, when set, lists the queues of this process that cannot claim
	// work, with the cause: while any cannot, the process is not ready.
	Queues func() map[string]error
	// Payments are the providers of the endpoints that take payments the
	// service starts (StartPayment), by endpoint id.
	Payments map[string]fulfillment.PaymentProvider
	// TracerProvider, when set, traces every call (server spans, their
	// callers' trace context from gRPC metadata) and the in-process
	// clients' calls (the context sent along).
	TracerProvider trace.TracerProvider
	// Console, when set, builds the admin console on the in-process
	// connection; it is served under /console/ on the HTTP listener.
	Console func(*grpc.ClientConn) http.Handler
	// Registerer, when set, takes the per-call gRPC metrics (see
	// rpcMetrics) and the per-request metrics of the HTTP listener (see
	// newHTTPHandler).
	Registerer prometheus.Registerer
}

// New prepares a server; listeners open in Listen.
func New(cfg Config, store Store, log *slog.Logger, opts Options) (*Server, error) {
	s := &Server{cfg: cfg, store: store, log: log, opts: opts, ready: make(chan struct{}), refusedLog: rate.NewLimiter(5, 10)}
	s.auth = NewAuthenticator(cfg.Tokens)
	g := cfg.GRPC.WithDefaults()
	var srvTrace []grpc.ServerOption
	var dialTrace []grpc.DialOption
	if tp := opts.TracerProvider; tp != nil {
		prop := otelgrpc.WithPropagators(propagation.TraceContext{})
		srvTrace = append(srvTrace, grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithTracerProvider(tp), prop)))
		dialTrace = append(dialTrace, grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithTracerProvider(tp), prop)))
	}
	unaryMetrics, streamMetrics := rpcMetrics(opts.Registerer)
	codec := newRequestCodec()
	s.grpcSrv = grpc.NewServer(append(srvTrace,
		grpc.ForceServerCodecV2(codec),
		grpc.MaxRecvMsgSize(g.MaxRecvBytes),
		grpc.MaxSendMsgSize(g.MaxSendBytes),
		grpc.MaxConcurrentStreams(g.MaxConcurrentStreams),
		grpc.ConnectionTimeout(g.ConnectionTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle: g.MaxConnectionIdle,
			Time:              g.KeepaliveTime,
			Timeout:           g.KeepaliveTimeout,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: g.KeepaliveMinTime, PermitWithoutStream: true}),
		grpc.ChainUnaryInterceptor(append(unaryMetrics, recoverUnary(log), logUnary(log), boundUnary(g.MaxCallDuration),
			codec.noteUndecodable, s.auth.UnaryInterceptor, refuseUndecodable, limitResponse(g.MaxSendBytes, log))...),
		grpc.ChainStreamInterceptor(append(streamMetrics, s.auth.StreamInterceptor, codec.refuseUndecodableStream)...),
	)...)
	s.svc = newService(store, &s.cfg, log)
	s.svc.payments = opts.Payments
	fulfillmentv1.RegisterFulfillmentServiceServer(s.grpcSrv, s.svc)
	reflection.Register(s.grpcSrv)

	// In-process callers (the REST gateway, the webhook gateway in serve
	// mode) reach gRPC in memory: same interceptors, no TLS to ourselves, no
	// TCP hop. They accept whatever the server may send.
	s.inproc = bufconn.Listen(1 << 20)
	var err error
	s.local, err = grpc.NewClient("passthrough:///inproc", append(dialTrace,
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return s.inproc.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(g.MaxSendBytes), grpc.MaxCallSendMsgSize(g.MaxRecvBytes)))...)
	if err != nil {
		return nil, fmt.Errorf("connecting in-process client: %w", err)
	}
	return s, nil
}

// LocalConn is an in-process connection to the gRPC service, valid while
// Run serves.
func (s *Server) LocalConn() *grpc.ClientConn { return s.local }

// Listen opens the gRPC and HTTP listeners, so that a caller (a test) can
// learn the bound addresses before Run.
func (s *Server) Listen() error {
	var err error
	if s.grpcLis, err = net.Listen("tcp", s.cfg.GRPCAddr); err != nil {
		return fmt.Errorf("listening for gRPC on %s: %w", s.cfg.GRPCAddr, err)
	}
	if s.httpLis, err = net.Listen("tcp", s.cfg.HTTPAddr); err != nil {
		_ = s.grpcLis.Close() // the listen error is the one to report
		return fmt.Errorf("listening for HTTP on %s: %w", s.cfg.HTTPAddr, err)
	}
	s.grpcLis = netutil.LimitListener(s.grpcLis, s.cfg.GRPC.WithDefaults().MaxConnections)
	return nil
}

// GRPCAddr is the bound gRPC address (after Listen).
func (s *Server) GRPCAddr() string { return s.grpcLis.Addr().String() }

// HTTPAddr is the bound HTTP address (after Listen).
func (s *Server) HTTPAddr() string { return s.httpLis.Addr().String() }

// Run serves until ctx ends, then stops gracefully: health turns
// NOT_SERVING, in-flight calls finish (bounded by shutdownGrace).
func (s *Server) Run(ctx context.Context) error {
	if s.grpcLis == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	tlsCfg := s.cfg.TLS

	grpcSrv, inproc := s.grpcSrv, s.inproc
	defer func() { _ = s.local.Close() }()
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(grpcSrv, healthSrv)
	handler, err := s.newHTTPHandler(ctx)
	if err != nil {
		return fmt.Errorf("building gateway: %w", err)
	}
	httpSrv, httpLis := NewHTTPServer(handler, s.cfg.HTTP, s.log, s.httpLis)

	grpcLis := s.grpcLis
	if tlsCfg != nil {
		grpcLis = tlsListener(grpcLis, tlsCfg, "h2")
		httpLis = tls.NewListener(httpLis, tlsCfg.Clone())
	}

	errc := make(chan error, 3)
	var wg sync.WaitGroup
	serve := func(name string, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("serving %s: %w", name, err)
			}
		}()
	}
	serve("gRPC", func() error { return grpcSrv.Serve(grpcLis) })
	serve("gateway", func() error { return grpcSrv.Serve(inproc) })
	serve("HTTP", func() error { return httpSrv.Serve(httpLis) })
	redriveCtx, stopRedrive := context.WithCancel(ctx)
	defer stopRedrive()
	serve("re-drive", func() error { return s.svc.redriveLoop(redriveCtx) })
	s.setHealth(ctx, healthSrv)
	s.log.Info("serving", "grpc", s.GRPCAddr(), "http", s.HTTPAddr(), "tls", tlsCfg != nil)
	close(s.ready)
	healthDone := make(chan struct{})
	go func() { defer close(healthDone); s.followHealth(ctx, healthSrv) }()
	defer func() { <-healthDone }()

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}
	s.log.Info("shutting down")
	stopRedrive() // a batch in flight rolls back or commits whole
	healthSrv.Shutdown()
	close(s.svc.stopping) // GracefulStop waits for streams: end the feeds
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	_ = httpSrv.Shutdown(shutdownCtx)
	stopped := make(chan struct{})
	go func() { grpcSrv.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-shutdownCtx.Done():
		grpcSrv.Stop()
	}
	wg.Wait()
	return runErr
}

// healthEvery is how often the gRPC health service checks readiness.
const healthEvery = 2 * time.Second

// followHealth keeps the gRPC health service's status on readiness until
// ctx ends.
func (s *Server) followHealth(ctx context.Context, h *health.Server) {
	tick := time.NewTicker(healthEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.svc.stopping:
			return
		case <-tick.C:
		}
		s.setHealth(ctx, h)
	}
}

// setHealth sets the status of the service and of the whole server ("") to
// SERVING when the process is ready, NOT_SERVING otherwise.
func (s *Server) setHealth(ctx context.Context, h *health.Server) {
	checkCtx, cancel := context.WithTimeout(ctx, healthEvery)
	code, _ := s.readiness(checkCtx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	st := healthpb.HealthCheckResponse_SERVING
	if code != http.StatusOK {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	h.SetServingStatus("", st)
	h.SetServingStatus(fulfillmentv1.FulfillmentService_ServiceDesc.ServiceName, st)
}

// NewHTTPServer returns an HTTP server for h bounded by c's timeouts (its
// zero values are the defaults), and lis holding at most
// c.MaxConnections of its connections open (connLimit), for it to serve
// (with TLS, if any, on top).
func NewHTTPServer(h http.Handler, c config.HTTP, log *slog.Logger, lis net.Listener) (*http.Server, net.Listener) {
	c = c.WithDefaults()
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		ReadTimeout:       c.ReadTimeout,
		WriteTimeout:      c.WriteTimeout,
		IdleTimeout:       c.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return srv, limitConnections(srv, lis, c.MaxConnections, log)
}

// Ready is closed once Run serves.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// shutdownGrace bounds how long in-flight calls may finish after a signal.
const shutdownGrace = 10 * time.Second

// tlsListener terminates TLS on the gRPC listener only (the in-memory
// gateway connection stays plain), advertising h2 through ALPN as gRPC
// clients require.
func tlsListener(l net.Listener, cfg *tls.Config, protos ...string) net.Listener {
	c := cfg.Clone()
	c.NextProtos = protos
	return tls.NewListener(l, c)
}
