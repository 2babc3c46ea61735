package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// livenessApplication names liveness sessions in pg_stat_activity.
const livenessApplication = "fulfillmentd liveness"

// Liveness proves to every replica that this process's queue workers are
// alive, for exactly as long as they are: it holds a session-level advisory
// lock, keyed by a random owner id, on a connection of its own outside the
// pools. Workers claim under that owner id. PostgreSQL releases the lock
// when the session ends — the process died, its connection broke, the
// server restarted — and from then on the owner's claims are free to any
// replica (see leasedTable), whatever their lease.
//
// An owner id is used once: when its lock's connection fails, the owner is
// lost for good (others may already be reclaiming its rows) and Run takes a
// new id and lock as soon as the database answers.
type Liveness struct {
	store   *Store
	log     *slog.Logger
	prefix  string        // host/pid/ of owner ids
	check   time.Duration // how often the connection is checked
	timeout time.Duration // how long a check may take

	mu      sync.Mutex
	owner   string        // "" while no lock is held
	changed chan struct{} // closed when owner changes
	lastErr error         // why no owner is live, while none is
}

// NewLiveness returns the liveness of this process's queue workers; Run
// holds it.
func (s *Store) NewLiveness() *Liveness {
	host, _ := os.Hostname()
	return &Liveness{
		store:   s,
		log:     s.log,
		prefix:  fmt.Sprintf("%s/%d/", host, os.Getpid()),
		check:   time.Second,
		timeout: 5 * time.Second,
		changed: make(chan struct{}),
		lastErr: errors.New("not taken yet"),
	}
}

// keepalives end the liveness session on the server within about 11 s of
// its host vanishing, instead of the system's default of hours (a process
// that dies has its connections closed by its kernel, and the server ends
// the session at once). They are session settings, not startup
// parameters, which poolers refuse; behind a session pooler they apply
// between the pooler and the server, and the pooler's own keepalives
// (PgBouncer's tcp_keepidle, tcp_keepintvl, tcp_keepcnt) cover the hop
// from this process.
const keepalives = `SELECT set_config('tcp_keepalives_idle', '5', false),
	set_config('tcp_keepalives_interval', '2', false), set_config('tcp_keepalives_count', '3', false)`

// Owner returns the live owner to claim under — "" while there is none (the
// lock is not held yet, or the database is unreachable) — and a channel
// closed when that changes. Work claimed under an owner must not be
// completed once the channel is closed: the owner is lost.
func (l *Liveness) Owner() (owner string, lost <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.owner, l.changed
}

// Down returns why no owner is live, nil while one is.
func (l *Liveness) Down() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.owner != "" {
		return nil
	}
	return l.lastErr
}

// set records the live owner, or (owner "") why there is none.
func (l *Liveness) set(owner string, why error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if owner == "" && why == nil {
		why = errors.New("stopped")
	}
	l.owner, l.lastErr = owner, why
	close(l.changed)
	l.changed = make(chan struct{})
}

// Run holds the liveness until ctx ends, then lets it go. It retries after
// every failure, so it returns nil.
func (l *Liveness) Run(ctx context.Context) error {
	const minDelay, maxDelay = 100 * time.Millisecond, 2 * time.Second
	delay := minDelay
	for {
		held, err := l.hold(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case held && l.store.unreachable(err):
			delay = minDelay
			l.log.Info("queue liveness lost with the database: claims of this process are free to other replicas; taking a new owner", "error", err)
		case held:
			delay = minDelay
			l.log.Warn("queue liveness lost: claims of this process are free to other replicas; taking a new owner", "error", err)
		case l.store.unreachable(err):
		default:
			l.log.Warn("taking queue liveness; workers wait until it is held", "error", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, maxDelay)
	}
}

// hold connects, takes the lock of a new owner, and checks the connection
// until it fails or ctx ends. held reports whether an owner was live.
func (l *Liveness) hold(ctx context.Context) (held bool, err error) {
	conn, err := l.store.sessionConn(ctx, map[string]string{"application_name": livenessApplication})
	if err != nil {
		err = fmt.Errorf("connecting: %w", err)
		l.set("", err)
		return false, err
	}
	defer func() {
		// Ending the session releases the lock.
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	owner, err := l.lock(ctx, conn)
	if err != nil {
		l.set("", err)
		return false, err
	}
	l.set(owner, nil)
	defer func() { l.set("", err) }() // before the lock is released
	l.log.Info("queue workers live", "owner", owner)

	tick := time.NewTicker(l.check)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return true, nil
		case <-tick.C:
		}
		checkCtx, cancel := context.WithTimeout(ctx, l.timeout)
		err := conn.Ping(checkCtx)
		cancel()
		if err != nil {
			return true, fmt.Errorf("checking the liveness connection: %w", interpret(err))
		}
	}
}

// lock takes the advisory lock of a new random owner id on conn. An id whose
// key another session holds (a collision) is not used.
func (l *Liveness) lock(ctx context.Context, conn *pgx.Conn) (string, error) {
	if _, err := conn.Exec(ctx, keepalives); err != nil {
		return "", fmt.Errorf("setting the liveness session's keepalives: %w", interpret(err))
	}
	for range 3 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		owner := l.prefix + hex.EncodeToString(b[:])
		var ok bool
		err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock("+ownerKey("$1::text")+")", owner).Scan(&ok)
		if err != nil {
			return "", fmt.Errorf("taking the liveness lock: %w", interpret(err))
		}
		if ok {
			return owner, nil
		}
	}
	return "", errors.New("taking the liveness lock: three owner ids in a row were taken")
}
