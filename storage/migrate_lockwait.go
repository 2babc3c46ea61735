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
	if len(e.Blockers) > 0 {
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
	var (
		current string
		inTx    bool
	)
	m.OnStart = func(_ int32, name, _, _ string) {
		current = name
		// tern begins a migration's transaction before it calls OnStart, and
		// resets the session's settings after each migration.
		inTx = conn.PgConn().TxStatus() == 'T'
		if inTx {
			_, _ = conn.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", fmt.Sprintf("%dms", max(w.Timeout.Milliseconds(), 1)))
		}
	}
	// The server's pid, which pg_blocking_pids knows: through a session
	// pooler, the connection's own (PgConn().PID()) is the pooler's.
	var pid int32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return fmt.Errorf("reading the migrations' session: %w", interpret(err))
	}
	attempts := max(w.Attempts, 1)
	pause := w.Pause
	if pause <= 0 {
		pause = time.Second
	}
	for attempt := 1; ; attempt++ {
		watch := watchBlockers(ctx, conn.Config(), pid, w.Timeout)
		inTx = false
		err := step()
		blockers := watch()
		// Only a migration in a transaction gave way: its rollback undid
		// it. One outside a transaction (a lock_timeout of the database's
		// or the role's, a NOWAIT) may have done part of its work, and is
		// not ours to run again.
		if !inTx || sqlstateOf(err) != sqlstateLockNotAvailable {
			return err
		}
		lt := &LockTimeoutError{Migration: current, Attempt: attempt, Attempts: attempts, Timeout: w.Timeout, Blockers: blockers}
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

// watchBlockers looks, from a connection of its own, at which sessions
// the backend pid waits for, every quarter of timeout, until the returned
// function is called; that returns the last sessions seen. A watcher that
// cannot connect sees none.
func watchBlockers(ctx context.Context, cfg *pgx.ConnConfig, pid int32, timeout time.Duration) func() []LockBlocker {
	ctx, cancel := context.WithCancel(ctx)
	var (
		mu   sync.Mutex
		seen []LockBlocker
		wg   sync.WaitGroup
	)
	every := min(max(timeout/4, 20*time.Millisecond), time.Second)
	wg.Go(func() {
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				_ = conn.Close(context.WithoutCancel(ctx))
			}
		}()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if conn == nil {
				c, err := pgx.ConnectConfig(ctx, cfg.Copy())
				if err != nil {
					return
				}
				conn = c
			}
			bs, err := blockersOf(ctx, conn, pid)
			if err != nil {
				return
			}
			if len(bs) > 0 {
				mu.Lock()
				seen = bs
				mu.Unlock()
			}
		}
	})
	return func() []LockBlocker {
		cancel()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return seen
	}
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
