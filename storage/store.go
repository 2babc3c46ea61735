// Package storage keeps the service's state in PostgreSQL through pgx v5:
// embedded migrations, queries next to the methods that run them, and the one
// place where driver errors become domain errors.
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// Store is the PostgreSQL implementation of the domain's stores.
type Store struct {
	// giveUpAfter is Options.GiveUpAfter.
	giveUpAfter time.Duration
	pool        *pgxpool.Pool
	leasePool   *pgxpool.Pool // claims, releases and reclaims only
	log         *slog.Logger
	// sessionCfg connects the session-bound connections (sessionConn);
	// poolProbe and sessionProbe tell what stands between the pools and the
	// sessions and PostgreSQL (the same probe when they share a URL).
	sessionCfg              *pgx.ConnConfig
	poolProbe, sessionProbe *poolingProbe
	// reach says when the database is unreachable, once.
	reach    reachability
	inserter *inserter
	// handoff is this process's inbox queue, which takes the events the
	// group commit stores (HandInboxTo), when set.
	handoff atomic.Pointer[InboxHandoff]
	// decideOnReceipt decides the events the group commit stores in its
	// own transaction (Options.DecideOnReceipt); decidedObserver, when
	// set, observes each event decided so.
	decideOnReceipt bool
	// workLockWait is the lock_timeout of a queue's work (inbox batch,
	// sweep). decideSettings and workSettings start the pipelined
	// transactions of a decided batch and of an inbox batch
	// (batchSettings, each with its lock wait: defaultDecideLockWait,
	// workLockWait).
	workLockWait                 string
	decideSettings, workSettings string
	// unreadResults, set by tests only, is the failure of reading the
	// results of a pipelined transaction's last batch after its COMMIT
	// ran (pipelinedTx.commitWith).
	unreadResults   error
	decidedObserver atomic.Pointer[DecidedObserver]
	decidedCount    decidedCounts
	// diskFullRefusals counts the writes the database refused for want of
	// disk space (fulfillment_db_disk_full_refusals_total).
	diskFullRefusals atomic.Int64

	// inboxSignal, outboxSignal and feedSignal wake the processors of the
	// inbox and the outbox, and the readers of the order event feed.
	inboxSignal, outboxSignal, feedSignal *queueSignal
	// bg runs the signals' goroutines until bgCtx ends (Close).
	bg     sync.WaitGroup
	bgCtx  context.Context
	bgStop context.CancelFunc
	// subscriptions are the destinations of each order event.
	subscriptions map[fulfillment.Topic][]string
	// pollAfter delays the first status poll of a started payment.
	pollAfter time.Duration
	// plans are the subscription plans, by id.
	plans fulfillment.Plans
	// lateMatch is how old an unmatched event may be and still be queued
	// again when the order it names is created.
	lateMatch time.Duration
}

var _ fulfillment.OrderStore = (*Store)(nil)

// Options tunes the connection pool.
type Options struct {
	// MaxConns caps the pool; 0 keeps pgx's default (4 or the number of CPUs).
	MaxConns int32
	// ConnectTimeout bounds every new connection, so that a database outage
	// fails requests quickly instead of hanging them. Default 2s.
	ConnectTimeout time.Duration
	// GiveUpAfter closes GaveUp once the database has been unreachable this
	// long; 0 never gives up.
	GiveUpAfter time.Duration
	// Logger receives the store's own warnings (nil: discarded).
	Logger *slog.Logger
	// InsertFlushers is the number of concurrent group commits of inbox
	// inserts (default 2); InsertBatch caps the rows of one (default 256).
	InsertFlushers, InsertBatch int
	// InsertLinger is how long at most a group commit that finds only a
	// few requests waits for more while another one is in flight (see
	// inserter); 0: it never waits (the service's default is the
	// configuration's, inbox.receipt_linger).
	InsertLinger time.Duration
	// Subscriptions lists, for each order or subscription event, the ids
	// of the destinations it is delivered to.
	Subscriptions map[fulfillment.Topic][]string
	// Plans are the subscription plans, by id: a subscription's events are
	// applied with its plan.
	Plans fulfillment.Plans
	// StatusPollAfter is how long after a payment start the status poller
	// first asks the provider about it; 0 queues no polls.
	StatusPollAfter time.Duration
	// TracerProvider, when set, traces every query (see queryTracer).
	TracerProvider trace.TracerProvider
	// SessionURL, when set, is where the connections that need a server
	// session of their own go (queue liveness, LISTEN): a direct or
	// session-pooled URL of the same database, for when the main URL goes
	// through a transaction-mode pooler. Empty: the main URL.
	SessionURL string
	// LateMatchWindow is how long after it was received an event that
	// matched no order is queued again when its order is created (default
	// DefaultLateMatchWindow).
	LateMatchWindow time.Duration
	// DecideOnReceipt decides the events the group commit stores in the
	// transaction that stores them, as a batch (see storeDecided): an
	// event is then acknowledged decided, with its effects committed. A
	// batch that cannot be decided so is stored queued, for the inbox
	// processors. Off: every event is queued.
	DecideOnReceipt bool
}

// DefaultLateMatchWindow is Options.LateMatchWindow when unset.
const DefaultLateMatchWindow = 7 * 24 * time.Hour

// Open connects a pool to the database at url and checks it answers.
//
// url may go through a pooler in either mode: under transaction pooling
// (found by a probe, see probePooling) statements are described and cached
// by pgx but never prepared by name, since a named statement lives in one
// server session. The connections that need a session of their own — queue
// liveness and LISTEN — go to o.SessionURL (url when empty), which must
// keep sessions: Open fails with ErrTransactionPooled when it does not. When
// the database does not answer yet, Open does not wait: the probes run on
// first use.
func Open(ctx context.Context, url string, o Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// The URL may hold a password: never echo it.
		return nil, errors.New("parsing database URL: malformed connection string")
	}
	sessionCfg := cfg.ConnConfig.Copy()
	if o.SessionURL != "" {
		if sessionCfg, err = parseConnConfig("database session URL", o.SessionURL); err != nil {
			return nil, err
		}
	}
	if o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	if o.InsertFlushers <= 0 {
		o.InsertFlushers = defaultInsertFlushers
	}
	if int32(o.InsertFlushers) >= cfg.MaxConns {
		// Each group commit holds a connection while it runs.
		return nil, fmt.Errorf("%d group commits of received webhooks (inbox.receipt_flushers) need a connection pool larger than %d (database.max_conns)",
			o.InsertFlushers, cfg.MaxConns)
	}
	connectTimeout := o.ConnectTimeout
	if connectTimeout == 0 {
		connectTimeout = 2 * time.Second
	}
	cfg.ConnConfig.ConnectTimeout, sessionCfg.ConnectTimeout = connectTimeout, connectTimeout
	if o.TracerProvider != nil {
		cfg.ConnConfig.Tracer = newQueryTracer(o.TracerProvider)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Store{log: log, subscriptions: o.Subscriptions, pollAfter: o.StatusPollAfter, plans: o.Plans,
		sessionCfg: sessionCfg, lateMatch: o.LateMatchWindow, decideOnReceipt: o.DecideOnReceipt,
		workLockWait:   defaultWorkLockWait,
		decideSettings: batchSettings(defaultDecideLockWait), workSettings: batchSettings(defaultWorkLockWait)}
	if s.lateMatch == 0 {
		s.lateMatch = DefaultLateMatchWindow
	}
	s.reach.s, s.reach.gaveUp, s.giveUpAfter = s, make(chan struct{}), o.GiveUpAfter
	s.poolProbe = newPoolingProbe(cfg.ConnConfig.Copy())
	s.sessionProbe = s.poolProbe
	if o.SessionURL != "" {
		s.sessionProbe = newPoolingProbe(sessionCfg)
	}
	if err := s.checkSessions(ctx); err != nil {
		return nil, err
	}
	cfg.BeforeConnect = s.beforeConnect
	cfg.AfterConnect = encodeUUIDStrings
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("creating connection pool: %w", err)
	}
	// Lease bookkeeping commits asynchronously (each lease statement sets
	// synchronous_commit off for its own transaction, see asyncCommit): a
	// claim lost in a crash only means the event is claimed again, so it
	// need not wait for a WAL flush. The pool of its own keeps claims from
	// queueing behind the inbox's transactions.
	leaseCfg := cfg.Copy()
	leaseCfg.MaxConns = 4
	leasePool, err := pgxpool.NewWithConfig(ctx, leaseCfg)
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("creating connection pool: %w", err)
	}
	s.pool, s.leasePool = pool, leasePool
	if o.InsertBatch <= 0 {
		o.InsertBatch = defaultInsertBatch
	}
	s.inboxSignal, s.outboxSignal = newQueueSignal(s, inboxChannel), newQueueSignal(s, outboxChannel)
	s.feedSignal = newQueueSignal(s, feedChannel)
	s.bgCtx, s.bgStop = context.WithCancel(context.Background())
	for _, sig := range []*queueSignal{s.inboxSignal, s.outboxSignal, s.feedSignal} {
		s.bg.Go(func() { sig.run(s.bgCtx) })
	}
	s.inserter = newInserter(s, o.InsertFlushers, o.InsertBatch, max(o.InsertLinger, 0))
	return s, nil
}

// checkSessions fails with ErrTransactionPooled when the session
// connection string goes through a transaction-mode pooler. A database
// that does not answer is no failure here: the probe runs again before
// every session is opened (see sessionConn).
func (s *Store) checkSessions(ctx context.Context) error {
	p, err := s.sessionProbe.pooling(ctx)
	if err != nil {
		// Told once the store runs (see unreachable); probed again on
		// first use.
		s.log.Debug("database: could not probe for a pooler yet", "error", err)
		return nil
	}
	if p == PoolingTransaction {
		return ErrTransactionPooled
	}
	if s.poolProbe != s.sessionProbe {
		if p, err := s.poolProbe.pooling(ctx); err == nil && p == PoolingTransaction {
			s.log.Info("database: the pool goes through a transaction-mode pooler: statements are described, not prepared; sessions go to the session URL")
		}
	}
	return nil
}

// beforeConnect readies each new pooled connection for what stands between
// it and PostgreSQL: under transaction pooling, no named prepared
// statements (pgx still caches each statement's description, so a query
// costs one round trip).
func (s *Store) beforeConnect(ctx context.Context, cc *pgx.ConnConfig) error {
	p, err := s.poolProbe.pooling(ctx)
	if err != nil {
		return err
	}
	if p == PoolingTransaction {
		cc.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	return nil
}

// sessionConn opens a connection of its own that keeps its server session,
// for session-bound work: LISTEN, the liveness lock. It fails with
// ErrTransactionPooled when the session URL turns out to be transaction
// pooled, and with errStandby when it reached a hot standby: advisory locks
// are taken there too, where the primary's claims would not see them (the
// liveness's owner would look dead, its claims free to others), and a
// session on a running primary never becomes a standby's.
func (s *Store) sessionConn(ctx context.Context, params map[string]string) (*pgx.Conn, error) {
	p, err := s.sessionProbe.pooling(ctx)
	if err != nil {
		return nil, err
	}
	if p == PoolingTransaction {
		return nil, ErrTransactionPooled
	}
	cfg := s.sessionCfg.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	for k, v := range params {
		cfg.RuntimeParams[k] = v
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, interpret(err)
	}
	if onStandby(conn.PgConn()) {
		_ = conn.Close(context.WithoutCancel(ctx))
		return nil, errStandby
	}
	return conn, nil
}

// Close stops the group commits and closes every connection of the pool.
func (s *Store) Close() {
	s.inserter.close()
	s.bgStop()
	s.bg.Wait()
	s.leasePool.Close()
	s.pool.Close()
}

// SynchronousCommit is the synchronous_commit the service's transactions
// commit with unless they set their own (the queues' lease bookkeeping
// does): the server's, or a database's or role's setting.
func (s *Store) SynchronousCommit(ctx context.Context) (string, error) {
	var v string
	err := s.pool.QueryRow(ctx, "SELECT current_setting('synchronous_commit')").Scan(&v)
	return v, interpret(err)
}

// Ping checks the database answers.
func (s *Store) Ping(ctx context.Context) error {
	err := interpret(s.pool.Ping(ctx))
	s.unreachable(err)
	return err
}

// withTx runs fn in one transaction: committed when fn returns nil, rolled
// back otherwise (and on panic).
func (s *Store) withTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("beginning transaction: %w", interpret(err))
	}
	defer func() { _ = tx.Rollback(ctx) }() // no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("committing transaction: %w", interpret(err))
	}
	return nil
}

// withRetriedTx is withTx, run again (three runs at most) when PostgreSQL
// rolled the transaction back to break a deadlock or a serialization
// failure, which a second run does not meet. fn must be safe to run again:
// it must set, not accumulate, what it leaves behind.
func (s *Store) withRetriedTx(ctx context.Context, fn func(pgx.Tx) error) error {
	for run := 1; ; run++ {
		err := s.withTx(ctx, fn)
		if run == 3 || !rolledBack(err) || ctx.Err() != nil {
			return err
		}
	}
}

// rolledBack reports whether err is PostgreSQL's rollback of a
// transaction it chose to break a deadlock or a serialization failure
// (SQLSTATE class 40).
func rolledBack(err error) bool {
	code := sqlstateOf(err)
	return len(code) == 5 && code[:2] == "40"
}

// SQLSTATE codes the store reacts to.
const (
	sqlstateUniqueViolation = "23505"
	sqlstateUndefinedTable  = "42P01"
	sqlstateQueryCanceled   = "57014"
	// sqlstateReadOnly: the server refused a write — a standby (during or
	// after a failover), or one set to default_transaction_read_only.
	sqlstateReadOnly = "25006"
	// sqlstateDiskFull: a table or index could not grow.
	sqlstateDiskFull = "53100"
)

// errStandby: a session of the service reached a hot standby, where it
// writes nothing and holds no queue liveness.
var errStandby = unavailable(errors.New("the database is a hot standby (in_hot_standby is on)"), down)

// outage is what a database error tells of the database.
type outage uint8

const (
	// up: nothing; the call failed on its own, or may have.
	up outage = iota
	// down: the database is down for every call
	// (fulfillment.ErrDatabaseDown).
	down
	// lost: the call's connection ended under it, as in an outage, or by
	// the call's own doing (fulfillment.ErrConnectionLost too).
	lost
)

// downError is a database error that tells of an outage; its message is
// the error's own.
type downError struct {
	error
	lost bool
}

func (e downError) Unwrap() error { return e.error }

func (e downError) Is(target error) bool {
	return target == fulfillment.ErrDatabaseDown || e.lost && target == fulfillment.ErrConnectionLost
}

// unavailable is err as fulfillment.ErrUnavailable, and as what o tells.
func unavailable(err error, o outage) error {
	if o != up {
		err = downError{err, o == lost}
	}
	return fmt.Errorf("%w: %w", fulfillment.ErrUnavailable, err)
}

// readOnly reports whether err is the database refusing writes.
func readOnly(err error) bool {
	return sqlstateOf(err) == sqlstateReadOnly || errors.Is(err, errStandby)
}

// onStandby reports whether the server c is connected to is a hot standby.
// PostgreSQL 14 and later report in_hot_standby to every session, and
// again when it changes (a standby promoted).
func onStandby(c *pgconn.PgConn) bool { return c.ParameterStatus("in_hot_standby") == "on" }

// sqlstateOf is the SQLSTATE of a database error, "" for other errors.
func sqlstateOf(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// interpret turns driver errors into domain sentinels. It is the only place
// that knows about pgx error types; everything else wraps what it returns.
// An error it classified already is returned as it is, so that a mechanism
// (a transaction's runner) may interpret what its callers' callbacks did.
func interpret(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, fulfillment.ErrUnavailable) || errors.Is(err, fulfillment.ErrConflict) || errors.Is(err, fulfillment.ErrNotFound) {
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", fulfillment.ErrNotFound, err)
	}
	// A connection that could not be made, whatever the server said (a
	// refused login during a password rotation, a database not created
	// yet): the database is unavailable to this service, not the call
	// wrong.
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return unavailable(err, down)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == sqlstateUniqueViolation:
			return fmt.Errorf("%w: %w", fulfillment.ErrConflict, err)
		case outageOf(pgErr.Code) != up:
			return unavailable(err, outageOf(pgErr.Code))
		case pgErr.Code[:2] == "08", // connection exception (a protocol violation among them, which no outage causes)
			pgErr.Code[:2] == "57", // operator intervention: a statement timeout or cancel, a session ended
			pgErr.Code[:2] == "53", // insufficient resources: memory, a temporary file past temp_file_limit
			pgErr.Code[:2] == "40": // rolled back to break a deadlock or a serialization failure: a retry runs anew
			// Worth a retry, and no outage: the call itself may cause
			// these, over and over.
			return unavailable(err, up)
		}
		return err
	}
	// The call ran out of time (the database may be slow for it alone), or
	// the database is unreachable or went away mid-call: the caller should
	// retry, not see an internal error. A call pgx did not send, as it
	// says of one made on a busy connection (a bug of the caller's), is
	// worth a retry but says nothing of the database.
	if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return unavailable(err, up)
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		return unavailable(err, lost)
	}
	if pgconn.SafeToRetry(err) {
		return unavailable(err, up)
	}
	return err
}

// outageOf is what SQLSTATE code tells of the database.
func outageOf(code string) outage {
	switch code {
	case "08000", "08003", "08006", // the connection failed or is gone
		"57P01", "57P02": // the server shuts down or crashed, or the session was ended
		return lost
	case "57P03", // the server is starting
		sqlstateDiskFull,
		"53300",          // too many connections
		"3D000",          // the database does not exist
		sqlstateReadOnly: // a standby, or a server set read-only: writes wait for a primary
		return down
	}
	if code[:2] == "28" { // invalid authorization: a login refused
		return down
	}
	return up
}

// constraintName returns the name of the constraint a database error broke.
func constraintName(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.ConstraintName
	}
	return ""
}
