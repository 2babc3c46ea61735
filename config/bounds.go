// The bounds of the API listeners: HTTP and gRPC sizes, times and
// connections, with their defaults and checks.

package config

import (
	"errors"
	"fmt"
	"time"
)

// HTTP bounds the REST gateway's listener (listen.http).
type HTTP struct {
	// MaxBodyBytes caps a request body (default 1 MiB); a larger one is
	// answered 413 without being read.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	ReadHeaderTimeout time.Duration `yaml:"read_header_timeout"`
	// ReadTimeout bounds reading a whole request, body included (default 30s).
	ReadTimeout time.Duration `yaml:"read_timeout"`
	// WriteTimeout bounds handling a request and writing its response
	// (default 60s).
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes a keep-alive connection idle this long (default 2m).
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// MaxConnections caps the connections open at once on each HTTP
	// listener, the API's and the webhooks' (default 1024): past it, a new
	// connection takes the place of an idle keep-alive one, or is closed
	// when none is idle, so that clients holding connections open cannot
	// take every file the process may open (its database connections and
	// deliveries need some).
	MaxConnections int `yaml:"max_connections"`
}

// GRPC bounds the gRPC listener (listen.grpc) and the responses of the API,
// which the REST gateway reads through gRPC too.
type GRPC struct {
	// MaxRecvBytes caps one request message (default 4 MiB).
	MaxRecvBytes int `yaml:"max_recv_bytes"`
	// MaxSendBytes caps one response message (default 4 MiB, what gRPC
	// clients accept by default).
	MaxSendBytes int `yaml:"max_send_bytes"`
	// MaxPageBytes caps the encoded items of one listing page (default
	// 1 MiB): a page may hold fewer than page_size items and still have a
	// next page.
	MaxPageBytes int `yaml:"max_page_bytes"`
	// MaxConcurrentStreams caps the calls in flight on one connection
	// (default 100).
	MaxConcurrentStreams uint32 `yaml:"max_concurrent_streams"`
	// MaxConnections caps the connections open at once on the gRPC
	// listener (default 1024): more wait to be accepted.
	MaxConnections int `yaml:"max_connections"`
	// ConnectionTimeout bounds a new connection's handshake (default 10s).
	ConnectionTimeout time.Duration `yaml:"connection_timeout"`
	// MaxConnectionIdle closes a connection without calls for this long
	// (default 5m).
	MaxConnectionIdle time.Duration `yaml:"max_connection_idle"`
	// KeepaliveTime: the server pings a connection quiet for this long
	// (default 1m) ...
	KeepaliveTime time.Duration `yaml:"keepalive_time"`
	// KeepaliveTimeout: ... and closes it when the ping is not answered in
	// this time (default 20s).
	KeepaliveTimeout time.Duration `yaml:"keepalive_timeout"`
	// KeepaliveMinTime: a client pinging more often than this is
	// disconnected (default 10s).
	KeepaliveMinTime time.Duration `yaml:"keepalive_min_time"`
	// MaxCallDuration bounds the handling of one unary call (default 30s):
	// a call without a deadline, or with a later one, gets this one, so
	// that no call holds a database connection without end. Streams (the
	// order event feed) are not bounded by it.
	MaxCallDuration time.Duration `yaml:"max_call_duration"`
}

// Defaults of the listener bounds.
const (
	DefaultHTTPMaxBodyBytes = 1 << 20
	DefaultGRPCMaxMsgBytes  = 4 << 20
	DefaultGRPCMaxPageBytes = 1 << 20
	DefaultMaxConnections   = 1024
)

// WithDefaults returns h with the defaults in place of zero values (Load
// applies them; code building a Config by hand calls it).
func (h HTTP) WithDefaults() HTTP {
	setInt(&h.MaxBodyBytes, DefaultHTTPMaxBodyBytes)
	setInt(&h.ReadHeaderTimeout, 10*time.Second)
	setInt(&h.ReadTimeout, 30*time.Second)
	setInt(&h.WriteTimeout, 60*time.Second)
	setInt(&h.IdleTimeout, 2*time.Minute)
	setInt(&h.MaxConnections, DefaultMaxConnections)
	return h
}

// WithDefaults returns g with the defaults in place of zero values.
func (g GRPC) WithDefaults() GRPC {
	setInt(&g.MaxRecvBytes, DefaultGRPCMaxMsgBytes)
	setInt(&g.MaxSendBytes, DefaultGRPCMaxMsgBytes)
	setInt(&g.MaxPageBytes, DefaultGRPCMaxPageBytes)
	setInt(&g.MaxConcurrentStreams, 100)
	setInt(&g.MaxConnections, DefaultMaxConnections)
	setInt(&g.ConnectionTimeout, 10*time.Second)
	setInt(&g.MaxConnectionIdle, 5*time.Minute)
	setInt(&g.KeepaliveTime, time.Minute)
	setInt(&g.KeepaliveTimeout, 20*time.Second)
	setInt(&g.KeepaliveMinTime, 10*time.Second)
	setInt(&g.MaxCallDuration, 30*time.Second)
	return g
}

// setInt sets *dst to def when the file left it out (zero).
func setInt[T ~int | ~int64 | ~uint32](dst *T, def T) {
	if *dst == 0 {
		*dst = def
	}
}

// Smallest values of the message bounds: the largest valid order, with its
// history, must be readable, one listing page must hold at least one of the
// largest items, and the largest webhook must fit in a request.
const (
	minGRPCSendBytes = 1 << 20
	minGRPCPageBytes = 256 << 10
	// minGRPCRecvBytes fits the largest request: a webhook's raw body (at
	// most fulfillment.MaxRawBodyBytes) with its event, as RecordEvent.
	minGRPCRecvBytes = 2 << 20
)

func (c *Config) validateBounds() error {
	h, g := c.HTTP, c.GRPC
	for key, d := range map[string]time.Duration{
		"http.read_header_timeout": h.ReadHeaderTimeout, "http.read_timeout": h.ReadTimeout,
		"http.write_timeout": h.WriteTimeout, "http.idle_timeout": h.IdleTimeout,
		"grpc.connection_timeout": g.ConnectionTimeout, "grpc.max_connection_idle": g.MaxConnectionIdle,
		"grpc.keepalive_time": g.KeepaliveTime, "grpc.keepalive_timeout": g.KeepaliveTimeout,
		"grpc.keepalive_min_time": g.KeepaliveMinTime, "grpc.max_call_duration": g.MaxCallDuration,
	} {
		if d < 0 {
			return fmt.Errorf("%s: must not be negative", key)
		}
	}
	switch {
	case h.MaxBodyBytes < 0:
		return errors.New("http.max_body_bytes: must not be negative")
	case h.MaxConnections < 0:
		return errors.New("http.max_connections: must not be negative")
	case g.MaxConnections < 0:
		return errors.New("grpc.max_connections: must not be negative")
	case g.MaxRecvBytes < minGRPCRecvBytes:
		return fmt.Errorf("grpc.max_recv_bytes: at least %d, so that the largest webhook can be recorded", minGRPCRecvBytes)
	case h.MaxBodyBytes > int64(g.MaxRecvBytes):
		return fmt.Errorf("http.max_body_bytes: at most grpc.max_recv_bytes (%d): the REST gateway forwards bodies over gRPC", g.MaxRecvBytes)
	case g.MaxSendBytes < minGRPCSendBytes:
		return fmt.Errorf("grpc.max_send_bytes: at least %d, so that the largest order is readable", minGRPCSendBytes)
	case g.MaxPageBytes < minGRPCPageBytes || g.MaxPageBytes > g.MaxSendBytes/2:
		return fmt.Errorf("grpc.max_page_bytes: between %d and half of grpc.max_send_bytes (%d)", minGRPCPageBytes, g.MaxSendBytes/2)
	}
	return nil
}
