// Package config loads the service configuration: one YAML file, then
// environment overrides. Secrets are only ever referenced (an environment
// variable or a file), resolved at load time, and never printed.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	neturl "net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// Scopes a bearer token can hold. ScopeAdmin implies every other scope but
// ScopeIngest: only a webhook gateway records provider events.
const (
	ScopeOrdersWrite         = "orders:write"
	ScopeOrdersRead          = "orders:read"
	ScopeReconciliationRead  = "reconciliation:read"
	ScopeReconciliationWrite = "reconciliation:write"
	ScopeOutboxRead          = "outbox:read"
	ScopeIngest              = "ingest"
	ScopeAdmin               = "admin"
)

// AllScopes lists every known scope.
var AllScopes = []string{
	ScopeOrdersWrite, ScopeOrdersRead, ScopeReconciliationRead,
	ScopeReconciliationWrite, ScopeOutboxRead, ScopeIngest, ScopeAdmin,
}

// AllOrgs in a token's orgs list allows every org.
const AllOrgs = "*"

// Config is the whole service configuration.
type Config struct {
	Listen    Listen     `yaml:"listen,omitempty"`
	TLS       *TLS       `yaml:"tls,omitempty"`
	HTTP      HTTP       `yaml:"http,omitempty"`
	GRPC      GRPC       `yaml:"grpc,omitempty"`
	Database  Database   `yaml:"database,omitempty"`
	Auth      Auth       `yaml:"auth,omitempty"`
	Log       Log        `yaml:"log,omitempty"`
	Tracing   Tracing    `yaml:"tracing,omitempty"`
	Endpoints []Endpoint `yaml:"endpoints,omitempty"`
	Ingest    Ingest     `yaml:"ingest,omitempty"`
	Inbox     Inbox      `yaml:"inbox,omitempty"`
	// Destinations receive outbox deliveries; Outbox tunes their
	// dispatcher (max_attempts is set per destination).
	Destinations []Destination `yaml:"destinations,omitempty"`
	Outbox       Queue         `yaml:"outbox,omitempty"`
	// StatusPoll tunes the poller that asks providers about the payments
	// the service started whose outcome no notification brought.
	StatusPoll StatusPoll `yaml:"status_poll,omitempty"`
	// Plans are the subscription plans.
	Plans []Plan `yaml:"plans,omitempty"`
	// SubscriptionSweep tunes the sweeper that ends subscriptions' access.
	SubscriptionSweep Queue `yaml:"subscription_sweep,omitempty"`
	// Housekeeping tunes the housekeeper: items for paid orders past the
	// fulfillment SLA, raw event bodies purged past their retention.
	Housekeeping Housekeeping `yaml:"housekeeping,omitempty"`
	// Worker is the former name of Inbox. Load accepts it (not together
	// with inbox), copies it into Inbox and leaves it set, so that serve
	// warns at start.
	Worker *Inbox `yaml:"worker,omitempty"`
	// Console configures the admin console (config/console.go).
	Console Console `yaml:"console,omitempty"`
}

// Endpoint is one webhook receiver: POST /webhooks/{id} on the ingest
// listener. It fixes the provider, org and environment of what it receives.
type Endpoint struct {
	ID          string   `yaml:"id"`
	Provider    string   `yaml:"provider"`
	Org         string   `yaml:"org"`
	Environment string   `yaml:"environment"`
	Secrets     []Secret `yaml:"secrets"`
	// Options are the provider's own settings for this endpoint (a
	// terminal key, a policy), checked by the provider's adapter at load.
	Options yaml.Node `yaml:"options,omitempty"`
}

// Domain returns what the endpoint fixes of the events it receives.
func (e Endpoint) Domain() fulfillment.Endpoint {
	return fulfillment.Endpoint{
		ID: e.ID, Provider: fulfillment.Provider(e.Provider), OrgID: e.Org,
		Environment: fulfillment.Environment(e.Environment),
	}
}

// Secret references one signing secret; several are accepted at once during
// a rotation.
type Secret struct {
	Env  string `yaml:"env"`
	File string `yaml:"file"`

	// Value is resolved at load time. It is never logged.
	Value []byte `yaml:"-"`
}

// Ingest tunes the webhook gateway.
type Ingest struct {
	// MaxBodyBytes caps a webhook body (default 256 KiB); larger is 413.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// Timeout bounds storing one event; past it the provider gets 503 and
	// retries (default 2s).
	Timeout time.Duration `yaml:"timeout"`
	// Upstream is the FulfillmentService that `fulfillmentd ingest` forwards
	// to; `serve` calls its own service in-process and ignores it.
	Upstream Upstream `yaml:"upstream"`
}

// Upstream is a remote FulfillmentService. Only `fulfillmentd ingest` uses
// it, so its token is resolved by ResolveToken, not by Load.
type Upstream struct {
	Addr      string `yaml:"addr"`
	TokenEnv  string `yaml:"token_env"`
	TokenFile string `yaml:"token_file"`
	TLS       bool   `yaml:"tls"`
	CAFile    string `yaml:"ca_file"`

	// Token is resolved by ResolveToken. It is never logged.
	Token string `yaml:"-"`
}

// ResolveToken checks that the upstream is complete and reads its token
// from the environment variable or file it references.
func (u *Upstream) ResolveToken(getenv func(string) string) error {
	if u.Addr == "" || (u.TokenEnv == "" && u.TokenFile == "") {
		return errors.New("config: ingest.upstream: set addr and token_env or token_file for fulfillmentd ingest")
	}
	v, err := secret("ingest.upstream", "token", u.TokenEnv, u.TokenFile, getenv)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	u.Token = v
	return nil
}

// Queue tunes the processor of one leased queue, such as the inbox (see
// worker.Config for the defaults).
type Queue struct {
	// Disabled runs no processor of this queue in this process: items are
	// stored, and processed by other replicas (or later).
	Disabled    bool          `yaml:"disabled"`
	Workers     int           `yaml:"workers"`
	Batch       int           `yaml:"batch"`
	Lease       time.Duration `yaml:"lease"`
	Poll        time.Duration `yaml:"poll"`
	MaxAttempts int           `yaml:"max_attempts"`
	BaseBackoff time.Duration `yaml:"base_backoff"`
	MaxBackoff  time.Duration `yaml:"max_backoff"`
}

// Inbox tunes the inbox processor, and how long a payment that arrived
// before its order waits for it.
type Inbox struct {
	Queue `yaml:",inline"`
	// LateMatchWindow is how long after it was received an event that
	// matched no order is processed again, by itself, when the order it
	// names is created (default 7 days; older ones wait for a person).
	LateMatchWindow time.Duration `yaml:"late_match_window"`
	// QueueOnly stores every received event queued, for the inbox
	// processors to decide. By default a group commit of received events
	// decides them in the transaction that stores them, and queues only
	// what it cannot decide there.
	QueueOnly bool `yaml:"queue_only"`
	// ReceiptFlushers is the number of group commits of received events
	// that run at once, each on a connection of its own (0: the default,
	// DefaultReceiptFlushers).
	ReceiptFlushers int `yaml:"receipt_flushers"`
	// ReceiptLinger is how long at most a group commit that finds only a
	// few received events waits for more while another group commit is
	// in flight (unset: DefaultReceiptLinger; 0s: it never waits).
	ReceiptLinger *time.Duration `yaml:"receipt_linger"`
}

// DefaultReceiptFlushers is inbox.receipt_flushers when unset: on 2 cores,
// fewer and larger group commits cost less CPU per event than more and
// smaller ones (docs/performance.md). MaxReceiptFlushers bounds it.
const (
	DefaultReceiptFlushers = 2
	MaxReceiptFlushers     = 16
)

// Flushers is the number of group commits of received events that run at
// once, its default when unset.
func (i Inbox) Flushers() int {
	if i.ReceiptFlushers == 0 {
		return DefaultReceiptFlushers
	}
	return i.ReceiptFlushers
}

// DefaultReceiptLinger is inbox.receipt_linger when unset; MaxReceiptLinger
// bounds it: every webhook of a lingering batch waits that long at most
// before its commit starts.
const (
	DefaultReceiptLinger = 2 * time.Millisecond
	MaxReceiptLinger     = 20 * time.Millisecond
)

// Linger is inbox.receipt_linger, its default when unset.
func (i Inbox) Linger() time.Duration {
	if i.ReceiptLinger == nil {
		return DefaultReceiptLinger
	}
	return *i.ReceiptLinger
}

// DefaultLateMatchWindow is inbox.late_match_window when unset.
const DefaultLateMatchWindow = 7 * 24 * time.Hour

// LateMatch is the late match window, its default when unset.
func (i Inbox) LateMatch() time.Duration {
	if i.LateMatchWindow == 0 {
		return DefaultLateMatchWindow
	}
	return i.LateMatchWindow
}

// StatusPoll tunes the status poller: a leased queue of the started
// payments (its backoff is the polling cadence, max_attempts the number of
// polls of one payment).
type StatusPoll struct {
	Queue `yaml:",inline"`
	// After is how long after a payment start it is first asked about.
	After time.Duration `yaml:"after"`
}

// WithDefaults fills in the zero values: first poll after 10 minutes, then
// every 1 minute doubling to 1 hour, 60 polls (about 2½ days: past the
// bank's day of retried notifications), 2 workers, claims every 5 s.
func (p StatusPoll) WithDefaults() StatusPoll {
	if p.After == 0 {
		p.After = 10 * time.Minute
	}
	p.Queue = p.orDefaults(Queue{Workers: 2, MaxAttempts: 60, Poll: 5 * time.Second, Lease: 30 * time.Second,
		BaseBackoff: time.Minute, MaxBackoff: time.Hour})
	return p
}

// SweepDefaults fills in the zero values of the subscription sweeper's
// queue: 1 worker claiming due sweeps every 5 s; a sweep that fails (its
// plan left the configuration, the database is gone) is retried after 1
// minute doubling to 1 hour. It is never given up: after 10 attempts
// (about 4 hours) it opens a sweep_failing item and starts another round.
func SweepDefaults(q Queue) Queue {
	return q.orDefaults(Queue{Workers: 1, MaxAttempts: 10, Poll: 5 * time.Second, Lease: 30 * time.Second,
		BaseBackoff: time.Minute, MaxBackoff: time.Hour})
}

// Housekeeping tunes the housekeeper: recurring tasks that one replica or
// another runs about once per interval.
type Housekeeping struct {
	// Disabled runs no housekeeper in this process: other replicas do the
	// tasks.
	Disabled bool `yaml:"disabled"`
	// Interval is how often each task runs (default 1m, at least 1s).
	Interval time.Duration `yaml:"interval"`
	// FulfillmentSLA is how long a paid order may wait for its fulfillment
	// (paid or fulfilling) before a paid_not_fulfilled item is opened for it
	// (default 1h).
	FulfillmentSLA time.Duration `yaml:"fulfillment_sla"`
	// DeprecatedFulfilmentSLA is FulfillmentSLA's first spelling, still
	// accepted (DeprecatedSpelling is logged at start).
	DeprecatedFulfilmentSLA *time.Duration `yaml:"fulfilment_sla,omitempty"`
	// RawBodyRetention is how long the raw bodies of stored provider events
	// are kept; past it, those of events no longer pending are purged
	// (default 720h: 30 days).
	RawBodyRetention time.Duration `yaml:"raw_body_retention"`
	// Batch is the number of rows one statement of a task handles
	// (default 1000, at most 10000).
	Batch int `yaml:"batch"`
}

// MaxHousekeepingBatch bounds the rows one housekeeping statement handles.
const MaxHousekeepingBatch = 10000

// WithDefaults fills in the zero values.
func (h Housekeeping) WithDefaults() Housekeeping {
	for _, f := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&h.Interval, fulfillment.DefaultHousekeepingInterval}, {&h.FulfillmentSLA, fulfillment.DefaultFulfillmentSLA}, {&h.RawBodyRetention, fulfillment.DefaultRawBodyRetention}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if h.Batch == 0 {
		h.Batch = fulfillment.DefaultHousekeepingBatch
	}
	return h
}

// MinRawBodyRetention is the shortest housekeeping.raw_body_retention.
const MinRawBodyRetention = time.Minute

func (h Housekeeping) validate() error {
	switch {
	case h.Interval < 0 || h.FulfillmentSLA < 0 || h.RawBodyRetention < 0 || h.Batch < 0:
		return errors.New("housekeeping: interval, fulfillment_sla, raw_body_retention and batch must not be negative")
	case h.Interval > 0 && h.Interval < time.Second:
		return errors.New("housekeeping.interval: at least 1s")
	case h.RawBodyRetention > 0 && h.RawBodyRetention < MinRawBodyRetention:
		// The purge walks the events in id order and passes those received
		// longer than the retention ago; an event takes up to seconds to
		// be stored, so a shorter retention could pass one not committed yet.
		return fmt.Errorf("housekeeping.raw_body_retention: at least %s", MinRawBodyRetention)
	case h.Batch > MaxHousekeepingBatch:
		return fmt.Errorf("housekeeping.batch: at most %d (one statement's rows)", MaxHousekeepingBatch)
	}
	return nil
}

// orDefaults is q with each zero value taken from d.
func (q Queue) orDefaults(d Queue) Queue {
	for _, f := range []struct{ v, def *time.Duration }{
		{&q.Lease, &d.Lease}, {&q.Poll, &d.Poll}, {&q.BaseBackoff, &d.BaseBackoff}, {&q.MaxBackoff, &d.MaxBackoff},
	} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	for _, f := range []struct{ v, def *int }{{&q.Workers, &d.Workers}, {&q.Batch, &d.Batch}, {&q.MaxAttempts, &d.MaxAttempts}} {
		if *f.v == 0 {
			*f.v = *f.def
		}
	}
	return q
}

// DeprecatedWorker is the warning serve logs at start when the
// configuration uses the worker key.
const DeprecatedWorker = "config: the worker key is deprecated: rename it to inbox (same keys)"

// DeprecatedSpelling is the warning serve logs at start when the
// configuration uses housekeeping.fulfilment_sla.
const DeprecatedSpelling = "config: housekeeping.fulfilment_sla is deprecated: rename it to fulfillment_sla (same value)"

// Deprecated returns the warnings serve logs at start (and config check
// prints) about deprecated or ignored keys the configuration uses.
func (c *Config) Deprecated() []string {
	var out []string
	if c.Worker != nil {
		out = append(out, DeprecatedWorker)
	}
	if c.Housekeeping.DeprecatedFulfilmentSLA != nil {
		out = append(out, DeprecatedSpelling)
	}
	return append(out, c.ignoredQueueKeys()...)
}

// renameSpelling moves housekeeping.fulfilment_sla into fulfillment_sla;
// the file may not set both.
func (c *Config) renameSpelling() error {
	old := c.Housekeeping.DeprecatedFulfilmentSLA
	if old == nil {
		return nil
	}
	if c.Housekeeping.FulfillmentSLA != 0 {
		return errors.New("housekeeping.fulfilment_sla: the deprecated spelling of fulfillment_sla: set only fulfillment_sla")
	}
	c.Housekeeping.FulfillmentSLA = *old
	return nil
}

// renameWorker moves the deprecated worker section into inbox; the file may
// not set both.
func (c *Config) renameWorker(data []byte) error {
	if c.Worker == nil {
		return nil
	}
	var present struct {
		Inbox *struct{} `yaml:"inbox"`
	}
	_ = yaml.Unmarshal(data, &present) // it decoded strictly already
	if present.Inbox != nil {
		return errors.New("worker: the deprecated name of inbox: set only inbox")
	}
	c.Inbox = *c.Worker
	return nil
}

func (q Queue) validate(key string) error {
	for _, f := range []struct {
		name     string
		negative bool
	}{
		{"workers", q.Workers < 0}, {"batch", q.Batch < 0}, {"lease", q.Lease < 0}, {"poll", q.Poll < 0},
		{"max_attempts", q.MaxAttempts < 0}, {"base_backoff", q.BaseBackoff < 0}, {"max_backoff", q.MaxBackoff < 0},
	} {
		if f.negative {
			return fmt.Errorf("%s.%s: must not be negative", key, f.name)
		}
	}
	if q.Batch > MaxQueueBatch {
		return fmt.Errorf("%s.batch: at most %d (the items one claim and one transaction take)", key, MaxQueueBatch)
	}
	return nil
}

// MaxQueueBatch bounds the items one claim of a queue takes (and, for the
// inbox, one transaction processes).
const MaxQueueBatch = 1000

// Listen holds the listener addresses (host:port).
type Listen struct {
	GRPC   string `yaml:"grpc"`
	HTTP   string `yaml:"http"`
	Ingest string `yaml:"ingest"`
	// Debug, when set, serves Go's pprof profiles (/debug/pprof/) on its
	// own listener; keep it on loopback.
	Debug string `yaml:"debug"`
}

// TLS enables TLS on the gRPC and HTTP listeners.
type TLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// QueueVacuum tunes the service's own VACUUM of its queue tables (the
// inbox's, the outbox's and the other leased tables): every Interval it
// counts their dead rows, and vacuums those past DeadRows. It keeps the
// claims' index scans short between autovacuum runs.
type QueueVacuum struct {
	Disabled bool          `yaml:"disabled"`
	Interval time.Duration `yaml:"interval"`  // default 1s
	DeadRows int64         `yaml:"dead_rows"` // default 2000
}

// Database configures PostgreSQL. The connection URL may hold a password, so
// it is referenced like every other secret; DATABASE_URL wins when set.
type Database struct {
	URLEnv  string `yaml:"url_env"`
	URLFile string `yaml:"url_file"`
	// MaxConns caps the connection pool (0: pgx's default).
	MaxConns int32 `yaml:"max_conns"`
	// Migrate applies pending migrations when serve starts.
	Migrate bool `yaml:"migrate"`
	// MigrateLockTimeout bounds how long a migration waits for a lock
	// (and so holds up the tables it changes) before it gives way and is
	// tried again; a run of the migrations makes MigrateLockAttempts
	// attempts in all (defaults 5s and 10).
	MigrateLockTimeout  time.Duration `yaml:"migrate_lock_timeout"`
	MigrateLockAttempts int           `yaml:"migrate_lock_attempts"`
	// ConnectTimeout bounds each new connection (default 2s).
	ConnectTimeout time.Duration `yaml:"connect_timeout"`
	// ExitAfterUnreachable makes serve exit (status 1) once the database
	// has not answered for this long, for a supervisor to act on; 0 (the
	// default) waits for it however long, answering webhooks 503.
	ExitAfterUnreachable time.Duration `yaml:"exit_after_unreachable"`
	// QueueVacuum is how the service vacuums its queue tables.
	QueueVacuum QueueVacuum `yaml:"queue_vacuum"`

	// SessionURLEnv and SessionURLFile reference the optional
	// database.session_url: where the connections that need a server
	// session of their own go (queue liveness, LISTEN, migrations) when the
	// main URL goes through a transaction-mode pooler — a direct or
	// session-pooled URL of the same database. DATABASE_SESSION_URL wins
	// when set.
	SessionURLEnv  string `yaml:"session_url_env"`
	SessionURLFile string `yaml:"session_url_file"`

	// URL and SessionURL are resolved at load time. They are never logged.
	URL        string `yaml:"-"`
	SessionURL string `yaml:"-"`
}

// ValidateMigrateLock checks MigrateLockTimeout and MigrateLockAttempts,
// which fulfillmentd migrate's flags can set after Load.
func (d Database) ValidateMigrateLock() error {
	if t := d.MigrateLockTimeout; t < 100*time.Millisecond {
		return errors.New("database.migrate_lock_timeout: at least 100ms (a migration that waits less may never take its lock)")
	}
	if d.MigrateLockAttempts < 1 {
		return errors.New("database.migrate_lock_attempts: at least 1")
	}
	return nil
}

// Auth lists the bearer tokens callers authenticate with.
type Auth struct {
	Tokens []Token `yaml:"tokens"`
}

// Token is one caller credential.
type Token struct {
	Name      string   `yaml:"name"`
	TokenEnv  string   `yaml:"token_env"`
	TokenFile string   `yaml:"token_file"`
	Scopes    []string `yaml:"scopes"`
	Orgs      []string `yaml:"orgs"`

	// Secret is the token value, resolved at load time. It is never logged.
	Secret string `yaml:"-"`
}

// Log configures logging.
type Log struct {
	// Level is debug, info, warn or error (default info).
	Level string `yaml:"level"`
	// RepeatInterval: warnings and errors with the same cause are written
	// at most once per interval, the next one with the count of those
	// suppressed (default 10s).
	RepeatInterval time.Duration `yaml:"repeat_interval"`
	// Format is json (one JSON object per line, the default) or text
	// (key=value lines, for a terminal).
	Format string `yaml:"format,omitempty"`
}

// Log formats.
const (
	LogFormatJSON = "json"
	LogFormatText = "text"
)

// Tracing configures OpenTelemetry tracing. Without an OTLP endpoint it is
// off: no exporter, a no-op tracer.
type Tracing struct {
	// OTLPEndpoint is the OTLP/gRPC collector, host:port or a URL
	// (http:// is plaintext, https:// is TLS); empty turns tracing off.
	OTLPEndpoint string `yaml:"otlp_endpoint,omitempty"`
	// SampleRatio is the share of new traces recorded, 0 to 1 (default
	// 0.1); a caller's sampled trace is always followed.
	SampleRatio *float64 `yaml:"sample_ratio,omitempty"`
	// ServiceName names the service in traces (default fulfillmentd).
	ServiceName string `yaml:"service_name,omitempty"`
}

// Tracing defaults.
const (
	DefaultTraceSampleRatio = 0.1
	DefaultTraceServiceName = "fulfillmentd"
)

// WithDefaults fills the keys left out.
func (t Tracing) WithDefaults() Tracing {
	if t.SampleRatio == nil {
		r := DefaultTraceSampleRatio
		t.SampleRatio = &r
	}
	if t.ServiceName == "" {
		t.ServiceName = DefaultTraceServiceName
	}
	return t
}

// Defaults used for keys the file leaves out.
const (
	DefaultGRPC   = "127.0.0.1:9090"
	DefaultHTTP   = "127.0.0.1:8080"
	DefaultIngest = "127.0.0.1:8081"
)

// Env names read by Load.
const (
	EnvConfig          = "FULFILLMENT_CONFIG"
	EnvDatabaseURL     = "DATABASE_URL"
	EnvSessionURL      = "DATABASE_SESSION_URL"
	EnvListenGRPC      = "FULFILLMENT_LISTEN_GRPC"
	EnvListenHTTP      = "FULFILLMENT_LISTEN_HTTP"
	EnvListenIngest    = "FULFILLMENT_LISTEN_INGEST"
	EnvListenDebug     = "FULFILLMENT_LISTEN_DEBUG"
	EnvLogLevel        = "FULFILLMENT_LOG_LEVEL"
	EnvDatabaseMigrate = "FULFILLMENT_DATABASE_MIGRATE"
)

// Load reads the file at path (empty: no file, defaults only), applies
// environment overrides from getenv, resolves secrets and validates the
// result. Every error is one line naming the offending key.
func Load(path string, getenv func(string) string) (*Config, error) {
	var data []byte
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("config: reading %w", unwrapPathError(err))
		}
	}
	cfg, err := parse(data, getenv)
	if err != nil {
		if path != "" {
			return nil, fmt.Errorf("config %s: %w", path, err)
		}
		return nil, fmt.Errorf("config: %w", err)
	}
	return cfg, nil
}

func parse(data []byte, getenv func(string) string) (*Config, error) {
	cfg := &Config{}
	if len(bytes.TrimSpace(data)) > 0 {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(cfg); err != nil {
			return nil, errors.New(yamlMessage(data, err))
		}
	}
	if err := cfg.renameSpelling(); err != nil {
		return nil, err
	}
	if err := cfg.renameWorker(data); err != nil {
		return nil, err
	}
	if err := cfg.applyEnv(getenv); err != nil {
		return nil, err
	}
	if err := cfg.resolve(getenv); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (c *Config) applyEnv(getenv func(string) string) error {
	set := func(dst *string, env string) {
		if v := getenv(env); v != "" {
			*dst = v
		}
	}
	set(&c.Listen.GRPC, EnvListenGRPC)
	set(&c.Listen.HTTP, EnvListenHTTP)
	set(&c.Listen.Ingest, EnvListenIngest)
	set(&c.Listen.Debug, EnvListenDebug)
	set(&c.Log.Level, EnvLogLevel)
	if v := getenv(EnvDatabaseMigrate); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%s: must be true or false", EnvDatabaseMigrate)
		}
		c.Database.Migrate = b
	}
	if c.Listen.GRPC == "" {
		c.Listen.GRPC = DefaultGRPC
	}
	if c.Listen.HTTP == "" {
		c.Listen.HTTP = DefaultHTTP
	}
	if c.Listen.Ingest == "" {
		c.Listen.Ingest = DefaultIngest
	}
	if c.Log.Level == "" {
		c.Log.Level = "info"
	}
	if c.Log.Format == "" {
		c.Log.Format = LogFormatJSON
	}
	if c.Database.ConnectTimeout == 0 {
		c.Database.ConnectTimeout = 2 * time.Second
	}
	if c.Database.MigrateLockTimeout == 0 {
		c.Database.MigrateLockTimeout = 5 * time.Second
	}
	if c.Database.MigrateLockAttempts == 0 {
		c.Database.MigrateLockAttempts = 10
	}
	if c.Ingest.MaxBodyBytes == 0 {
		c.Ingest.MaxBodyBytes = 256 << 10
	}
	if c.Ingest.Timeout == 0 {
		c.Ingest.Timeout = 2 * time.Second
	}
	if c.Log.RepeatInterval == 0 {
		c.Log.RepeatInterval = 10 * time.Second
	}
	c.HTTP = c.HTTP.WithDefaults()
	c.GRPC = c.GRPC.WithDefaults()
	return nil
}

func (c *Config) resolve(getenv func(string) string) error {
	if url := getenv(EnvDatabaseURL); url != "" {
		c.Database.URL = url
	} else if c.Database.URLEnv != "" || c.Database.URLFile != "" {
		url, err := secret("database", "url", c.Database.URLEnv, c.Database.URLFile, getenv)
		if err != nil {
			return err
		}
		c.Database.URL = url
	}
	if url := getenv(EnvSessionURL); url != "" {
		c.Database.SessionURL = url
	} else if c.Database.SessionURLEnv != "" || c.Database.SessionURLFile != "" {
		url, err := secret("database", "session_url", c.Database.SessionURLEnv, c.Database.SessionURLFile, getenv)
		if err != nil {
			return err
		}
		c.Database.SessionURL = url
	}
	for i := range c.Auth.Tokens {
		t := &c.Auth.Tokens[i]
		key := fmt.Sprintf("auth.tokens[%d]", i)
		if t.TokenEnv == "" && t.TokenFile == "" {
			return fmt.Errorf("%s: set token_env or token_file (tokens are never written in the file)", key)
		}
		s, err := secret(key, "token", t.TokenEnv, t.TokenFile, getenv)
		if err != nil {
			return err
		}
		t.Secret = s
	}
	for i := range c.Endpoints {
		ep := &c.Endpoints[i]
		for j := range ep.Secrets {
			sec := &ep.Secrets[j]
			key := fmt.Sprintf("endpoints[%d].secrets[%d]", i, j)
			if sec.Env == "" && sec.File == "" {
				return fmt.Errorf("%s: set env or file (secrets are never written in the file)", key)
			}
			v, err := secret(key, "", sec.Env, sec.File, getenv)
			if err != nil {
				return err
			}
			sec.Value = []byte(v)
		}
	}
	return c.resolveDestinations(getenv)
}

// secret reads a referenced secret: exactly one of env and file is set.
// The keys are named prefix_env and prefix_file (env and file when prefix is
// empty).
func secret(key, prefix, env, file string, getenv func(string) string) (string, error) {
	envKey, fileKey := "env", "file"
	if prefix != "" {
		envKey, fileKey = prefix+"_env", prefix+"_file"
	}
	switch {
	case env != "" && file != "":
		return "", fmt.Errorf("%s: set only one of %s and %s", key, envKey, fileKey)
	case env != "":
		v := getenv(env)
		if v == "" {
			return "", fmt.Errorf("%s.%s: environment variable %s is not set", key, envKey, env)
		}
		return v, nil
	default:
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s.%s: %w", key, fileKey, unwrapPathError(err))
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("%s.%s: %s is empty", key, fileKey, file)
		}
		return v, nil
	}
}

// checkOTLPEndpoint refuses a collector address that holds credentials or
// a URL that does not parse, never quoting it: the OTLP/gRPC exporter sends
// no credentials from it, and prints a URL it cannot parse, whole, on
// stderr.
func checkOTLPEndpoint(v string) error {
	if !strings.Contains(v, "://") {
		if strings.Contains(v, "@") {
			return errors.New("must not hold credentials (host:port, or http(s)://host:port)")
		}
		return nil
	}
	u, err := neturl.Parse(v)
	switch {
	case err != nil:
		return errors.New("not a valid URL (http(s)://host:port; the value is not quoted, it may hold credentials)")
	case u.User != nil:
		return errors.New("must not hold credentials: the exporter does not send them")
	}
	return nil
}

var tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

func (c *Config) validate() error {
	for _, l := range []struct{ key, addr string }{
		{"listen.grpc", c.Listen.GRPC},
		{"listen.http", c.Listen.HTTP},
		{"listen.ingest", c.Listen.Ingest},
	} {
		if err := checkAddr(l.addr); err != nil {
			return fmt.Errorf("%s: %q is not a valid host:port address: %w", l.key, l.addr, err)
		}
	}
	if c.Listen.Debug != "" {
		if err := checkAddr(c.Listen.Debug); err != nil {
			return fmt.Errorf("listen.debug: %q is not a valid host:port address: %w", c.Listen.Debug, err)
		}
	}
	if c.Listen.GRPC == c.Listen.HTTP || c.Listen.GRPC == c.Listen.Ingest || c.Listen.HTTP == c.Listen.Ingest {
		return errors.New("listen: grpc, http and ingest must use different addresses")
	}
	if t := c.TLS; t != nil {
		if t.CertFile == "" || t.KeyFile == "" {
			return errors.New("tls: set both cert_file and key_file")
		}
		for key, f := range map[string]string{"tls.cert_file": t.CertFile, "tls.key_file": t.KeyFile} {
			if _, err := os.Stat(f); err != nil {
				return fmt.Errorf("%s: %w", key, unwrapPathError(err))
			}
		}
	}
	for _, u := range []struct{ key, url string }{
		{"database.url (or DATABASE_URL)", c.Database.URL},
		{"database.session_url (or " + EnvSessionURL + ")", c.Database.SessionURL},
	} {
		// Parsed as the service parses it, connecting to nothing; never
		// quoted: it may hold a password. Parsing reads the files it names
		// (sslrootcert, sslcert, sslkey): one that is not on this machine
		// is not the string's fault, and the service reads it where it runs.
		_, err := pgconn.ParseConfig(u.url)
		if _, noFile := errors.AsType[*fs.PathError](err); u.url != "" && err != nil && !noFile {
			return fmt.Errorf("%s: not a valid PostgreSQL connection string (a URL postgres://user@host:port/database, or key=value pairs)", u.key)
		}
	}
	if c.Database.MaxConns < 0 {
		return errors.New("database.max_conns: must not be negative")
	}
	if c.Database.ConnectTimeout < 0 {
		return errors.New("database.connect_timeout: must not be negative")
	}
	if err := c.Database.ValidateMigrateLock(); err != nil {
		return err
	}
	if e := c.Database.ExitAfterUnreachable; e < 0 || (e > 0 && e < 5*time.Second) {
		return errors.New("database.exit_after_unreachable: 0 (never exit) or at least 5s")
	}
	if v := c.Database.QueueVacuum; v.Interval < 0 || (v.Interval > 0 && v.Interval < 100*time.Millisecond) || v.DeadRows < 0 {
		return errors.New("database.queue_vacuum: interval 0 (the default, 1s) or at least 100ms; dead_rows not negative")
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("log.level: %q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "", LogFormatJSON, LogFormatText:
	default:
		return fmt.Errorf("log.format: %q is not one of json, text", c.Log.Format)
	}
	if err := checkOTLPEndpoint(c.Tracing.OTLPEndpoint); err != nil {
		return fmt.Errorf("tracing.otlp_endpoint: %w", err)
	}
	if r := c.Tracing.SampleRatio; r != nil && (*r < 0 || *r > 1) {
		return fmt.Errorf("tracing.sample_ratio: %v is not between 0 and 1", *r)
	}
	if err := c.validateEndpoints(); err != nil {
		return err
	}
	if c.Ingest.MaxBodyBytes < 0 || c.Ingest.Timeout < 0 {
		return errors.New("ingest: max_body_bytes and timeout must not be negative")
	}
	if c.Ingest.MaxBodyBytes > fulfillment.MaxRawBodyBytes {
		return fmt.Errorf("ingest.max_body_bytes: at most %d (the largest raw body an event may keep)", fulfillment.MaxRawBodyBytes)
	}
	if c.Log.RepeatInterval < 0 {
		return errors.New("log.repeat_interval: must not be negative")
	}
	if err := c.validateBounds(); err != nil {
		return err
	}
	inboxKey := "inbox"
	if c.Worker != nil {
		inboxKey = "worker"
	}
	if err := c.Inbox.validate(inboxKey); err != nil {
		return err
	}
	if c.Inbox.LateMatchWindow < 0 {
		return fmt.Errorf("%s.late_match_window: must not be negative (0: the default, %v)", inboxKey, DefaultLateMatchWindow)
	}
	if f := c.Inbox.ReceiptFlushers; f < 0 || f > MaxReceiptFlushers {
		return fmt.Errorf("%s.receipt_flushers: from 1 to %d (0: the default, %d)", inboxKey, MaxReceiptFlushers, DefaultReceiptFlushers)
	}
	if l := c.Inbox.ReceiptLinger; l != nil && (*l < 0 || *l > MaxReceiptLinger) {
		return fmt.Errorf("%s.receipt_linger: from 0s (never) to %s (unset: the default, %s)", inboxKey, MaxReceiptLinger, DefaultReceiptLinger)
	}
	if err := c.validateDestinations(); err != nil {
		return err
	}
	if err := c.StatusPoll.validate("status_poll"); err != nil {
		return err
	}
	if err := c.validatePlans(); err != nil {
		return err
	}
	if err := c.SubscriptionSweep.validate("subscription_sweep"); err != nil {
		return err
	}
	if err := c.Housekeeping.validate(); err != nil {
		return err
	}
	if err := c.Console.validate(); err != nil {
		return err
	}
	if c.StatusPoll.After < 0 {
		return errors.New("status_poll.after: must not be negative")
	}
	names := map[string]bool{}
	secrets := map[string]string{}
	for i, t := range c.Auth.Tokens {
		key := fmt.Sprintf("auth.tokens[%d]", i)
		if !tokenName.MatchString(t.Name) {
			return fmt.Errorf("%s.name: required, letters, digits and _ . - only", key)
		}
		if names[t.Name] {
			return fmt.Errorf("%s.name: %q is used twice", key, t.Name)
		}
		names[t.Name] = true
		if other, ok := secrets[t.Secret]; ok {
			return fmt.Errorf("%s: same token value as %q: each caller needs its own token", key, other)
		}
		secrets[t.Secret] = t.Name
		if len(t.Secret) < 16 {
			return fmt.Errorf("%s: the token must be at least 16 characters", key)
		}
		if len(t.Scopes) == 0 {
			return fmt.Errorf("%s.scopes: at least one scope is required", key)
		}
		for j, s := range t.Scopes {
			if !slices.Contains(AllScopes, s) {
				return fmt.Errorf("%s.scopes[%d]: unknown scope %q (known: %s)", key, j, s, strings.Join(AllScopes, ", "))
			}
		}
		if len(t.Orgs) == 0 {
			return fmt.Errorf("%s.orgs: list the orgs this token may act for, or \"*\" for all", key)
		}
		for j, o := range t.Orgs {
			if o == "" || (o == AllOrgs && len(t.Orgs) > 1) {
				return fmt.Errorf("%s.orgs[%d]: an org id, or \"*\" alone", key, j)
			}
		}
	}
	return nil
}

func (c *Config) validateEndpoints() error {
	ids := map[string]bool{}
	for i, ep := range c.Endpoints {
		key := fmt.Sprintf("endpoints[%d]", i)
		switch {
		case !fulfillment.ConfigIDPattern.MatchString(ep.ID):
			return fmt.Errorf("%s.id: required; lowercase letters, digits, _ and - (it is the URL path /webhooks/{id})", key)
		case ids[ep.ID]:
			return fmt.Errorf("%s.id: %q is used twice", key, ep.ID)
		case !fulfillment.ConfigIDPattern.MatchString(ep.Provider):
			return fmt.Errorf("%s.provider: required: a provider name such as yolfi or tbank", key)
		case ep.Org == "" || ep.Org == AllOrgs:
			return fmt.Errorf("%s.org: the org this endpoint receives events for is required", key)
		case fulfillment.ValidateOrgID("org", ep.Org) != nil:
			return fmt.Errorf("%s.org: %q is not an org id: letters, digits and _ . : - only, starting with a letter or digit, at most %d bytes",
				key, ep.Org, fulfillment.MaxIDLen)
		case ep.Environment != "live" && ep.Environment != "test":
			return fmt.Errorf("%s.environment: must be live or test", key)
		case len(ep.Secrets) == 0:
			return fmt.Errorf("%s.secrets: at least one signing secret is required", key)
		}
		ids[ep.ID] = true
	}
	return nil
}

func checkAddr(addr string) error {
	// Host names are resolved when listening; no DNS lookups at load time.
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q must be a number from 0 to 65535", port)
	}
	return nil
}

// unwrapPathError drops the path an *os.PathError repeats, keeping the cause.
func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}
