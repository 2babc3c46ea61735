package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/internal/app"
	"github.com/fulfillplatform/fulfillment/internal/httpmetrics"
	"github.com/fulfillplatform/fulfillment/server"
)

// runServe runs everything in one process.
func runServe(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	a, err := app.New(ctx, cfg, log)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// upstreamKeepalive makes the gateway ping its upstream connection when it
// has heard nothing on it for 10 s (the most often the service lets a
// client ping, grpc.keepalive_min_time by default), and drop it when the
// ping is not answered within 5 s. A connection whose far end vanished
// without a reset (a host gone, a flow dropped by a NAT or load balancer)
// would otherwise be kept for as long as the kernel keeps retrying, about
// a quarter of an hour, every webhook answered 503 meanwhile, however
// reachable the service is on a new connection.
var upstreamKeepalive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}

// upstreamReconnect bounds the wait between the gateway's attempts to
// connect to an unreachable upstream to 2 s (gRPC's default grows to two
// minutes), and each attempt to 5 s (20 s by default): after an outage,
// webhooks are stored again within seconds, where they were answered 503
// for up to two minutes more — long enough for a provider that retries a
// few times over minutes to give up.
var upstreamReconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 250 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
	MinConnectTimeout: 5 * time.Second,
}

// runIngest runs only the webhook gateway, forwarding to a remote
// FulfillmentService (ingest.upstream).
func runIngest(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	up := cfg.Ingest.Upstream
	if err := up.ResolveToken(os.Getenv); err != nil {
		return err
	}
	creds, err := clientCredentials(up)
	if err != nil {
		return err
	}
	traceHTTP, traceDial, stopTracing, err := app.IngestTracing(ctx, cfg.Tracing)
	if err != nil {
		return err
	}
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = stopTracing(flushCtx)
	}()
	conn, err := grpc.NewClient(up.Addr, append(traceDial, grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(upstreamKeepalive), grpc.WithConnectParams(upstreamReconnect))...)
	if err != nil {
		return fmt.Errorf("connecting to %s: %w", up.Addr, err)
	}
	defer func() { _ = conn.Close() }()
	reg := prometheus.NewRegistry()
	endpoints, err := app.Endpoints(cfg)
	if err != nil {
		return err
	}
	gateway := app.NewGateway(cfg, endpoints, server.NewEventRecorder(conn, up.Token), reg, log)
	lis, err := net.Listen("tcp", cfg.Listen.Ingest)
	if err != nil {
		return fmt.Errorf("listening for webhooks on %s: %w", cfg.Listen.Ingest, err)
	}
	mux := http.NewServeMux()
	reg.MustRegister(app.BuildInfo())
	mux.Handle("/", traceHTTP(httpmetrics.New(reg, "ingest").Handler(gateway.Handler())))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	tlsCfg, err := app.LoadTLS(cfg.TLS)
	if err != nil {
		return err
	}
	return app.ServeHTTP(ctx, "webhooks", lis, mux, tlsCfg, cfg.HTTP, log)
}
