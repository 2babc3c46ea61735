package storage

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// queueSignal wakes the processors of one leased queue when it has new
// items: processors in this process at once, those of other replicas by a
// NOTIFY on the queue's channel. The NOTIFY is sent after the writing
// transaction commits, on purpose: a NOTIFY holds a database-wide lock until
// its transaction commits, which would serialize the writers. Signals
// arriving while one is sent coalesce into the next.
type queueSignal struct {
	store   *Store
	channel string
	pending chan struct{}

	mu     sync.Mutex
	wakers []func() // the in-process listeners; nil once gone
}

func newQueueSignal(s *Store, channel string) *queueSignal {
	return &queueSignal{store: s, channel: channel, pending: make(chan struct{}, 1)}
}

// committed wakes every listener: call it after a commit that queued items.
func (q *queueSignal) committed() {
	q.mu.Lock()
	for _, wake := range q.wakers {
		if wake != nil {
			wake()
		}
	}
	q.mu.Unlock()
	select {
	case q.pending <- struct{}{}:
	default: // one is already due
	}
}

// run sends the NOTIFYs until stop is closed.
func (q *queueSignal) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-q.pending:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if _, err := q.store.pool.Exec(ctx, "SELECT pg_notify($1, '')", q.channel); err != nil {
			q.store.log.Warn("notifying other replicas", "channel", q.channel, "error", err) // they poll meanwhile
		}
		cancel()
	}
}

// listen calls wake whenever items may have been queued, until ctx ends:
// on commits in this process, and on every NOTIFY from other replicas,
// received on a connection held outside the pool and re-established after
// errors. Polling covers the gaps.
func (q *queueSignal) listen(ctx context.Context, wake func()) {
	q.mu.Lock()
	q.wakers = append(q.wakers, wake)
	n := len(q.wakers) - 1
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.wakers[n] = nil
		q.mu.Unlock()
	}()
	for ctx.Err() == nil {
		err := q.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			break
		}
		if !errors.Is(err, context.Canceled) {
			q.store.log.Warn("queue listener lost its connection; polling until it is back", "channel", q.channel, "error", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (q *queueSignal) listenOnce(ctx context.Context, wake func()) error {
	pooled, err := q.store.pool.Acquire(ctx)
	if err != nil {
		return interpret(err)
	}
	// A connection that has LISTENed is not returned to the pool.
	conn := pooled.Hijack()
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }() // the listener is given up either way
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{q.channel}.Sanitize()); err != nil {
		return interpret(err)
	}
	wake() // catch up with anything queued before we listened
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return interpret(err)
		}
		wake()
	}
}
