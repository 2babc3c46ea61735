package storage

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/tern/v2/migrate"
)

// LockWait bounds how long a migration holds up the tables it changes. A
// migration that alters a table waits for its lock behind every transaction
// that has touched the table, and every reader and writer of the table waits
// behind the migration: one long transaction (a report, a psql session left
// open) would stop the service's writes for as long as it stays open. With
// a Timeout, a migration waits that long at most, then gives way (its
// transaction rolled back, nothing of it applied), and is tried again after
// a pause, Attempts times in all. A migration that runs outside a
// transaction (a CREATE INDEX CONCURRENTLY) holds up no writer and waits
// without a bound: a build stopped halfway leaves an invalid index.
type LockWait struct {
	// Timeout bounds each attempt's wait for one lock; 0 waits as long as
	// it takes.
	Timeout time.Duration
	// Attempts is how many times a migration is tried (at least once).
	Attempts int
	// Pause is the pause after the first attempt, doubling up to
	// maxLockPause (default 1 s).
	Pause time.Duration
	// Retrying, when set, is told of each timeout tried again.
	Retrying func(*LockTimeoutError)
}

// maxLockPause caps the pause between two attempts of a migration.
const maxLockPause = 30 * time.Second

// LockTimeoutError is a migration that waited LockWait.Timeout for a lock
// and gave way. Blockers are the sessions it waited for, when seen.
type LockTimeoutError struct {
	Migration         string
	Attempt, Attempts int
	Timeout           time.Duration
	Blockers          []LockBlocker
	// WatchErr is why the watcher could not connect, or stopped (nil
	// while it watched): a session it did not see is not named.
	WatchErr error
	// Next is the pause before the next attempt; 0 after the last.
	Next time.Duration
}

// LockBlocker is a session a migration waited for.
type LockBlocker struct {
	PID         int32
	Application string
	User        string
	State       string
	// Open is how long its transaction had been open (0: none).
	Open time.Duration
}

func (b LockBlocker) String() string {
	s := fmt.Sprintf("pid %d", b.PID)
	var about []string
	if b.Application != "" {
		about = append(about, "application "+b.Application)
	}
	if b.User != "" {
		about = append(about, "user "+b.User)
	}
	if b.State != "" {
		about = append(about, b.State)
	}
	if b.Open > 0 {
		about = append(about, "transaction open "+b.Open.Round(time.Second).String())
	}
	if len(about) > 0 {
		s += " (" + strings.Join(about, ", ") + ")"
	}
	return s
}

func (e *LockTimeoutError) Error() string {
	who := "the sessions holding the tables it changes were not seen"
	switch {
	case len(e.Blockers) == 0 && e.WatchErr != nil:
		who = "the sessions it waited for could not be named, watching them failed: " + e.WatchErr.Error()
	case len(e.Blockers) > 0:
		names := make([]string, len(e.Blockers))
		for i, b := range e.Blockers {
			names[i] = b.String()
		}
		who = "it waited for " + strings.Join(names, "; ")
	}
	s := fmt.Sprintf("migration %s waited %s for a lock and gave way (attempt %d of %d): %s",
		e.Migration, e.Timeout, e.Attempt, e.Attempts, who)
	if e.Next > 0 {
		return s + "; trying again in " + e.Next.String()
	}
	return s + ". It was rolled back whole (what this run did before it stays done): end or wait out the transaction " +
		"it waited for (pg_stat_activity shows it), then migrate again"
}

// migrateWaiting runs step (a migrator's Migrate or MigrateTo) on m, whose
// connection is conn, under w: each migration in a transaction waits
// w.Timeout at most for a lock, and one that gave way is tried again.
func migrateWaiting(ctx context.Context, conn *pgx.Conn, m *migrate.Migrator, w LockWait, step func() error) error {
	if w.Timeout <= 0 {
		return step()
	}
	// The server's pid, which pg_blocking_pids knows: through a session
	// pooler, the connection's own (PgConn().PID()) is the pooler's.
	var pid int32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return fmt.Errorf("reading the migrations' session: %w", interpret(err))
	}
	// Connected before the first migration starts (not at its first look):
	// an attempt shorter than connecting under load would otherwise end
	// before the watcher saw it wait.
	watch := watchBlockers(ctx, conn.Config(), pid, w.Timeout)
	defer watch.close()
	var (
		current string
		inTx    bool
	)
	m.OnStart = func(_ int32, name, _, _ string) {
		current = name
		// What was seen before is an earlier migration's (one step runs
		// several): a migration that gives way names only its own blockers.
		watch.begin()
		// tern begins a migration's transaction before it calls OnStart, and
		// resets the session's settings after each migration.
		inTx = conn.PgConn().TxStatus() == 'T'
		if inTx {
			_, _ = conn.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", max(w.Timeout.Milliseconds(), 1)))
		}
	}
	attempts := max(w.Attempts, 1)
	pause := w.Pause
	if pause <= 0 {
		pause = time.Second
	}
	for attempt := 1; ; attempt++ {
		inTx = false
		err := step()
		blockers, watchErr := watch.take()
		// Only a migration in a transaction gave way: its rollback undid
		// it. One outside a transaction (a lock_timeout of the database's
		// or the role's, a NOWAIT) may have done part of its work, and is
		// not ours to run again.
		if !inTx || sqlstateOf(err) != sqlstateLockNotAvailable {
			return err
		}
		lt := &LockTimeoutError{Migration: current, Attempt: attempt, Attempts: attempts, Timeout: w.Timeout,
			Blockers: blockers, WatchErr: watchErr}
		if attempt == attempts {
			return lt
		}
		lt.Next = pause
		if w.Retrying != nil {
			w.Retrying(lt)
		}
		select {
		case <-ctx.Done():
			lt.Next = 0
			return errors.Join(lt, ctx.Err())
		case <-time.After(pause):
		}
		pause = min(2*pause, maxLockPause)
	}
}

// blockersSQL names the sessions the backend pid waits for.
const blockersSQL = `
	SELECT pid, coalesce(application_name, ''), coalesce(usename::text, ''), coalesce(state, ''),
		coalesce(extract(epoch FROM now() - xact_start), 0)
	FROM pg_stat_activity WHERE pid = ANY(pg_blocking_pids($1)) ORDER BY xact_start LIMIT 5`

// blockerWatchConnectTimeout bounds how long the watcher may take to
// connect: the migrations wait for it (it must be connected before their
// first lock wait, or a short wait ends before it looks), and without it
// they still run.
const blockerWatchConnectTimeout = 5 * time.Second

// blockerLookTimeout bounds one look (a query of pg_stat_activity, which
// takes milliseconds): the end of an attempt waits for a look under way.
const blockerLookTimeout = 2 * time.Second

// blockerWatch looks, from one connection of its own opened before the
// migrations start, at which sessions the migrating backend waits for,
// every quarter of the lock timeout. A migration's attempt is told only
// what was seen while it ran (begin to take): what a look saw is kept if
// no other began while the look ran, and dropped if one did (it may be an
// earlier migration's blocker, not this one's).
type blockerWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	// looking is held through each look, so that take waits for a look
	// under way (one the ending attempt's wait may have been seen by).
	looking sync.Mutex

	mu sync.Mutex
	// tries counts the migrations' attempts begun, each one's seen anew.
	tries uint64
	seen  []LockBlocker
	// err is why no look is made (the watcher could not connect, or its
	// connection broke): blockers are then not named, and the report says
	// why.
	err error
}

// watchBlockers starts watching which sessions the backend pid waits for,
// connecting with cfg at once. A watcher that cannot connect does not fail
// the migrations: it names no blocker, and says why. close ends it.
func watchBlockers(ctx context.Context, cfg *pgx.ConnConfig, pid int32, timeout time.Duration) *blockerWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &blockerWatch{cancel: cancel, done: make(chan struct{})}
	connectCtx, connected := context.WithTimeout(ctx, blockerWatchConnectTimeout)
	conn, err := pgx.ConnectConfig(connectCtx, cfg.Copy())
	connected()
	if err != nil {
		w.err = fmt.Errorf("connecting: %w", err)
		close(w.done)
		return w
	}
	every := min(max(timeout/4, 20*time.Millisecond), time.Second)
	go w.run(ctx, conn, pid, every)
	return w
}

func (w *blockerWatch) run(ctx context.Context, conn *pgx.Conn, pid int32, every time.Duration) {
	defer close(w.done)
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !w.look(ctx, conn, pid) {
			return
		}
	}
}

// look asks once which sessions pid waits for, and keeps them for the
// migration's attempt under way if it is still the one the look started
// in. It reports whether the watcher may look again.
func (w *blockerWatch) look(ctx context.Context, conn *pgx.Conn, pid int32) bool {
	w.looking.Lock()
	defer w.looking.Unlock()
	w.mu.Lock()
	try := w.tries
	w.mu.Unlock()
	lookCtx, cancel := context.WithTimeout(ctx, blockerLookTimeout)
	bs, err := blockersOf(lookCtx, conn, pid)
	cancel()
	if ctx.Err() != nil {
		return false // closed: the run is over
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		w.err = fmt.Errorf("looking: %w", err)
		return false
	}
	if len(bs) > 0 && try == w.tries {
		w.seen = bs
	}
	return true
}

// begin starts a migration's attempt: what is seen from now on is its. It
// does not wait for a look under way (the migration's transaction is
// open), whose result is then dropped.
func (w *blockerWatch) begin() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.tries++
	w.seen = nil
}

// take ends the migration's attempt under way, once a look under way has
// ended (a wait seen just before the attempt gave way counts), and
// returns the last sessions it saw the backend wait for during it, and
// why it could not look if so.
func (w *blockerWatch) take() ([]LockBlocker, error) {
	w.looking.Lock()
	defer w.looking.Unlock()
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := w.seen
	w.tries++
	w.seen = nil
	return seen, w.err
}

// close stops the watcher and closes its connection.
func (w *blockerWatch) close() {
	w.cancel()
	<-w.done
}

func blockersOf(ctx context.Context, conn *pgx.Conn, pid int32) ([]LockBlocker, error) {
	rows, err := conn.Query(ctx, blockersSQL, pid)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (LockBlocker, error) {
		var b LockBlocker
		var open float64
		err := row.Scan(&b.PID, &b.Application, &b.User, &b.State, &open)
		b.Open = time.Duration(open * float64(time.Second))
		return b, err
	})
}
