package storage

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
)

// Pooling is what stands between the service and PostgreSQL on one
// connection string, as probed at startup.
type Pooling int

const (
	// PoolingSession means every client connection keeps its server session for
	// its whole life — a direct connection, or a session-mode pooler.
	PoolingSession Pooling = iota
	// PoolingTransaction means a client's transactions may each run on another
	// server session (a transaction-mode pooler such as PgBouncer's
	// pool_mode = transaction). Named prepared statements, session
	// settings, session advisory locks and LISTEN do not survive from one
	// transaction to the next.
	PoolingTransaction
)

func (p Pooling) String() string {
	if p == PoolingTransaction {
		return "transaction pooling"
	}
	return "sessions kept"
}

// ErrTransactionPooled is wrapped by Open when the connection string that
// must keep sessions (queue liveness, LISTEN, migrations) goes through a
// transaction-mode pooler.
var ErrTransactionPooled = errors.New("the connection goes through a transaction-mode pooler")

// probePooling tells whether connections to cfg keep their server session.
//
// Two client connections, A and B: A asks for its backend's pid, then B
// opens a transaction and asks for its own, then A asks again. With
// sessions kept, two open client connections never share a backend and a
// client's backend never changes, so the probe cannot mistake a direct
// connection or a session pooler for a transaction pooler. Under
// transaction pooling A's backend is idle in the pool once its statement
// ends, and a pooler that reuses the most recently used server first
// (PgBouncer's default) hands it to B; failing that, A's second statement
// usually lands elsewhere. Each finding proves transaction pooling; the
// probe runs a few rounds to make a miss unlikely.
func probePooling(ctx context.Context, cfg *pgx.ConnConfig) (Pooling, error) {
	// The probe's own statements must not be prepared by name: a transaction
	// pooler would make them collide.
	cfg = cfg.Copy()
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	a, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("connecting: %w", interpret(err))
	}
	defer func() { _ = a.Close(context.WithoutCancel(ctx)) }()
	b, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, fmt.Errorf("connecting: %w", interpret(err))
	}
	defer func() { _ = b.Close(context.WithoutCancel(ctx)) }()

	pid := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) (int32, error) {
		var p int32
		err := q.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p)
		return p, err
	}
	for range 3 {
		a1, err := pid(a)
		if err != nil {
			return 0, fmt.Errorf("probing for a pooler: %w", interpret(err))
		}
		tx, err := b.Begin(ctx)
		if err != nil {
			return 0, fmt.Errorf("probing for a pooler (a transaction block was refused: statement pooling is not supported): %w", interpret(err))
		}
		bp, err := pid(tx)
		if err != nil {
			_ = tx.Rollback(ctx)
			return 0, fmt.Errorf("probing for a pooler: %w", interpret(err))
		}
		a2, err := pid(a)
		_ = tx.Rollback(ctx)
		if err != nil {
			return 0, fmt.Errorf("probing for a pooler: %w", interpret(err))
		}
		if bp == a1 || a2 != a1 {
			return PoolingTransaction, nil
		}
	}
	return PoolingSession, nil
}

// poolingProbe remembers what probePooling found on one connection string,
// probing on first use until a probe succeeds (the database may be down
// when the service starts).
type poolingProbe struct {
	cfg *pgx.ConnConfig

	mu    sync.Mutex
	known bool
	found Pooling
}

func newPoolingProbe(cfg *pgx.ConnConfig) *poolingProbe { return &poolingProbe{cfg: cfg} }

// pooling returns what stands between the service and the database, probing
// when it is not known yet.
func (p *poolingProbe) pooling(ctx context.Context) (Pooling, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.known {
		return p.found, nil
	}
	found, err := probePooling(ctx, p.cfg)
	if err != nil {
		return 0, err
	}
	p.known, p.found = true, found
	return found, nil
}
