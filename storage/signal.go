package storage

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// queueSignal tells the readers of a table — the processors of a leased
// queue, the followers of the order event feed — that it may have new rows:
// readers in this process at once, those of other replicas by a NOTIFY on
// the table's channel. The NOTIFY is sent after the writing transaction
// commits, on purpose: a NOTIFY holds a database-wide lock until its
// transaction commits, which would serialize the writers. Signals arriving
// while one is sent, and for notifyEvery after it, coalesce into the next. Other replicas' NOTIFYs arrive
// on one session connection per channel (see sessionConn) from the first
// listener on, whatever the number of listeners. A NOTIFY carries its
// sender's id: the listener skips its own, whose commits woke this
// process's readers already.
type queueSignal struct {
	store   *Store
	channel string
	sender  string // this signal's id, the payload of its NOTIFYs
	pending chan struct{}

	mu        sync.Mutex
	wakers    map[int]func() // the listeners, by registration
	next      int
	listening bool // the LISTEN connection's goroutine runs
}

func newQueueSignal(s *Store, channel string) *queueSignal {
	return &queueSignal{store: s, channel: channel, sender: uuid.NewString(), pending: make(chan struct{}, 1),
		wakers: map[int]func(){}}
}

// committed wakes every listener: call it after a commit that wrote rows.
func (q *queueSignal) committed() {
	q.wakeAll()
	select {
	case q.pending <- struct{}{}:
	default: // one is already due
	}
}

func (q *queueSignal) wakeAll() {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, wake := range q.wakers {
		wake()
	}
}

// run sends the NOTIFYs until ctx ends.
func (q *queueSignal) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.pending:
		}
		nctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if _, err := q.store.pool.Exec(nctx, "SELECT pg_notify($1, $2)", q.channel, q.sender); err != nil && ctx.Err() == nil &&
			!q.store.unreachable(interpret(err)) {
			q.store.log.Warn("notifying other replicas", "channel", q.channel, "error", err) // they poll meanwhile
		}
		cancel()
		// At most one NOTIFY per notifyEvery: under load, the commits of
		// the interval coalesce into the next one (this process's readers
		// were woken at each commit; other replicas' wait at most that
		// much longer, or poll).
		select {
		case <-ctx.Done():
			return
		case <-time.After(notifyEvery):
		}
	}
}

// notifyEvery is the shortest interval between two NOTIFYs of a signal.
const notifyEvery = 10 * time.Millisecond

// listen calls wake whenever rows may have been written, until ctx ends:
// on commits in this process, and on every NOTIFY from other replicas.
// Polling covers the gaps (a lost connection, a NOTIFY that failed). wake
// must not block.
func (q *queueSignal) listen(ctx context.Context, wake func()) {
	q.mu.Lock()
	id := q.next
	q.next++
	q.wakers[id] = wake
	if !q.listening {
		q.listening = true
		q.store.bg.Go(q.follow)
	}
	q.mu.Unlock()
	wake() // catch up with anything written before
	<-ctx.Done()
	q.mu.Lock()
	delete(q.wakers, id)
	q.mu.Unlock()
}

// follow LISTENs on the channel until the store closes, re-establishing
// the connection after errors.
func (q *queueSignal) follow() {
	ctx := q.store.bgCtx
	for ctx.Err() == nil {
		err := q.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if !errors.Is(err, context.Canceled) && !q.store.unreachable(err) {
			q.store.log.Warn("listener lost its connection; polling until it is back", "channel", q.channel, "error", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (q *queueSignal) listenOnce(ctx context.Context) error {
	// LISTEN needs a session of its own: not from the pool, which may
	// be transaction pooled.
	conn, err := q.store.sessionConn(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }() // the listener is given up either way
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{q.channel}.Sanitize()); err != nil {
		return interpret(err)
	}
	q.wakeAll() // catch up with anything written before this LISTEN
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return interpret(err)
		}
		if n.Payload != q.sender {
			q.wakeAll()
		}
	}
}
