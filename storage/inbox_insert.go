package storage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/worker"
)

// Group commit. Concurrent InboxInsert calls are committed together: a
// few flushers each take every request waiting when they become free and
// insert them with one statement and one commit. Under light load a request
// is flushed alone at once; under heavy load one commit (one WAL flush)
// serves many requests. Each caller returns only after the transaction
// holding its own row has committed.
//
// In between, a flusher that finds only a few requests while another
// flusher's batch is in flight lingers: it waits for more requests, up to
// lingerFill of them, until no other batch is in flight, and at most the
// linger (Options.InsertLinger). One flusher lingers at a time; the others
// flush what they find at once, as without a linger. Without it, 1,000
// webhooks a second kept both flushers of the default committing batches
// of one or two, each paying its statements' fixed cost and a WAL flush;
// with it, PostgreSQL and the service used a quarter and a fifth less CPU
// at that rate, and the acknowledgements were no slower (paired runs,
// docs/performance.md). Alone, a request never lingers: nothing else is in
// flight.

// insertRequest is one InboxInsert waiting for a flusher.
type insertRequest struct {
	ctx  context.Context
	ev   fulfillment.ProviderEvent
	raw  []byte
	done chan insertResult // buffered: a flusher never blocks on it
	// stopped is closed once the flushers have stopped, each after
	// answering the requests of its batch in progress: a request still
	// unanswered then is one no flusher took, and never will.
	stopped <-chan struct{}
}

type insertResult struct {
	receipt fulfillment.InboxReceipt
	err     error
}

// Group commit bounds.
const (
	defaultInsertFlushers = 2
	defaultInsertBatch    = 256
	// lingerFill is the batch a lingering flusher stops waiting at.
	lingerFill = 8
	// flushTimeout bounds one flush; the callers' own deadlines are shorter.
	flushTimeout = 10 * time.Second
)

// inserter owns the flusher goroutines.
type inserter struct {
	store    *Store
	requests chan *insertRequest
	maxBatch int
	flushers int
	linger   time.Duration // 0: never
	// inFlight counts the batches being committed; one that is done
	// signals ended (without blocking: one pending signal is enough to
	// wake the lingering flusher, which looks at inFlight again).
	inFlight  atomic.Int32
	ended     chan struct{}
	lingering atomic.Bool // a flusher is in gather
	stop      chan struct{}
	stopped   chan struct{}
	once      sync.Once
}

func newInserter(s *Store, flushers, maxBatch int, linger time.Duration) *inserter {
	in := &inserter{
		store:    s,
		requests: make(chan *insertRequest, maxBatch),
		maxBatch: maxBatch,
		flushers: flushers,
		linger:   linger,
		ended:    make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	done := make(chan struct{}, flushers)
	for range flushers {
		go func() {
			defer func() { done <- struct{}{} }()
			in.flushLoop()
		}()
	}
	go func() {
		for range flushers {
			<-done
		}
		close(in.stopped)
	}()
	return in
}

// close stops the flushers after the batches in progress; it is idempotent.
func (in *inserter) close() {
	in.once.Do(func() { close(in.stop) })
	<-in.stopped
}

var errStoreClosed = fmt.Errorf("%w: store closed", fulfillment.ErrUnavailable)

// InboxInsert implements fulfillment.InboxStore. ON CONFLICT DO NOTHING on
// the event key makes a redelivery a no-op, whatever the concurrency: no
// preceding read decides anything.
func (s *Store) InboxInsert(ctx context.Context, ev fulfillment.ProviderEvent, rawBody []byte) (fulfillment.InboxReceipt, error) {
	req, err := s.inserter.enqueue(ctx, ev, rawBody)
	if err != nil {
		return fulfillment.InboxReceipt{}, err
	}
	return req.await()
}

// enqueue hands ev to the flushers.
func (in *inserter) enqueue(ctx context.Context, ev fulfillment.ProviderEvent, rawBody []byte) (*insertRequest, error) {
	req := &insertRequest{ctx: ctx, ev: ev, raw: rawBody, done: make(chan insertResult, 1), stopped: in.stopped}
	select {
	case in.requests <- req:
		return req, nil
	case <-in.stop:
		return nil, errStoreClosed
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: storing inbox event: %w", fulfillment.ErrUnavailable, ctx.Err())
	}
}

// await waits for the commit of r's row.
func (r *insertRequest) await() (fulfillment.InboxReceipt, error) {
	select {
	case res := <-r.done:
		return res.receipt, res.err
	case <-r.ctx.Done():
		// The row may still commit: the provider's retry is then a
		// duplicate. Nothing is acknowledged before its commit.
		return fulfillment.InboxReceipt{}, fmt.Errorf("%w: storing inbox event: %w", fulfillment.ErrUnavailable, r.ctx.Err())
	case <-r.stopped:
		// Closed while r waited in the queue (enqueue may pick the
		// queue over the stop when both are ready): nothing stored it,
		// and its caller hears so now rather than at its deadline.
		select {
		case res := <-r.done:
			return res.receipt, res.err
		default:
			return fulfillment.InboxReceipt{}, errStoreClosed
		}
	}
}

func (in *inserter) flushLoop() {
	for {
		var first *insertRequest
		select {
		case first = <-in.requests:
		case <-in.stop:
			return
		}
		batch := in.takeWaiting([]*insertRequest{first})
		if in.linger > 0 && len(batch) < min(lingerFill, in.maxBatch) && in.inFlight.Load() > 0 &&
			in.lingering.CompareAndSwap(false, true) {
			batch = in.gather(batch)
			in.lingering.Store(false)
		}
		in.inFlight.Add(1)
		observe := in.flush(batch)
		in.inFlight.Add(-1)
		select {
		case in.ended <- struct{}{}:
		default:
		}
		for _, o := range observe {
			o()
		}
	}
}

// gather adds requests to batch while another batch is in flight, until it
// holds lingerFill of them or the linger is over, then takes whatever else
// is waiting, up to the batch's bound. It never waits past a stop: the
// batch in hand is still flushed.
func (in *inserter) gather(batch []*insertRequest) []*insertRequest {
	t := time.NewTimer(in.linger)
	defer t.Stop()
wait:
	for len(batch) < min(lingerFill, in.maxBatch) {
		select {
		case r := <-in.requests:
			batch = append(batch, r)
		case <-in.ended:
			if in.inFlight.Load() == 0 {
				break wait
			}
		case <-t.C:
			break wait
		case <-in.stop:
			return batch
		}
	}
	return in.takeWaiting(batch)
}

// takeWaiting adds to batch the requests waiting, without waiting for
// more, up to the batch's bound.
func (in *inserter) takeWaiting(batch []*insertRequest) []*insertRequest {
	for len(batch) < in.maxBatch {
		select {
		case r := <-in.requests:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// flush commits a batch; when the batch fails as a whole, each request is
// retried alone, so that one bad row cannot fail its neighbours. It returns
// what the batch decided on receipt leaves to observe, for the caller to
// run once the acknowledgements are out and the batch no longer counts as
// in flight.
func (in *inserter) flush(batch []*insertRequest) (observe []func()) {
	live := batch[:0]
	for _, r := range batch {
		if r.ctx.Err() == nil { // its caller gave up: nobody waits for it
			live = append(live, r)
		}
	}
	if len(live) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
	defer cancel()
	receipts, after, err := in.store.inboxInsertBatch(ctx, live)
	observe = append(observe, after)
	if rolledBack(err) {
		// PostgreSQL broke a deadlock by rolling the batch back (the
		// rows' order rules out one with another replica's batch, not
		// every one): once more, whole.
		receipts, after, err = in.store.inboxInsertBatch(ctx, live)
		observe = append(observe, after)
	}
	if err == nil {
		for i, r := range live {
			r.done <- insertResult{receipt: receipts[i]}
		}
		return observe
	}
	if errors.Is(err, fulfillment.ErrDatabaseDown) {
		in.store.unreachable(err) // tells it, once
	}
	if len(live) == 1 || errors.Is(err, fulfillment.ErrUnavailable) {
		for _, r := range live {
			r.done <- insertResult{err: err}
		}
		return observe
	}
	for _, r := range live {
		receipts, after, err := in.store.inboxInsertBatch(ctx, []*insertRequest{r})
		observe = append(observe, after)
		if err != nil {
			r.done <- insertResult{err: err}
			continue
		}
		r.done <- insertResult{receipt: receipts[0]}
	}
	return observe
}

// eventKey is an inbox row's unique key.
type eventKey struct {
	provider, org, env, eventID string
}

// key is r's unique key.
func (r *inboxRow) key() eventKey { return eventKey{r.Provider, r.OrgID, r.Environment, r.EventID} }

// keyArrays are the keys of rows as one array per key column, the
// parameters of a look-up by key.
func keyArrays(rows []inboxRow) (provider, org, env, eventID []string) {
	n := len(rows)
	provider, org, env, eventID = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, r := range rows {
		provider[i], org[i], env[i], eventID[i] = r.Provider, r.OrgID, r.Environment, r.EventID
	}
	return provider, org, env, eventID
}

// inboxInsertBatch inserts the batch's events in one transaction and returns
// a receipt per request, in order, and what to run once they are answered
// (the observers of the events it decided, if any; never nil, and due even
// when it fails after the commit).
func (s *Store) inboxInsertBatch(ctx context.Context, batch []*insertRequest) (_ []fulfillment.InboxReceipt, after func(), _ error) {
	after = func() {}
	n := len(batch)
	// In the order of the dedupe key: two replicas' batches holding the
	// same redelivered events then take their keys' locks in one order,
	// and cannot deadlock on them.
	sorted := slices.SortedStableFunc(slices.Values(batch), func(a, b *insertRequest) int {
		return cmp.Or(cmp.Compare(a.ev.Provider, b.ev.Provider), cmp.Compare(a.ev.OrgID, b.ev.OrgID),
			cmp.Compare(a.ev.Environment, b.ev.Environment), cmp.Compare(a.ev.EventID, b.ev.EventID))
	})
	rows := make([]inboxRow, n)
	for i, r := range sorted {
		rows[i] = inboxRowOf(r.ev)
		rows[i].RawBody = r.raw
		rows[i].State = string(fulfillment.InboxPending)
		rows[i].TraceParent = opt(traceParent(r.ctx))
		if out := fulfillment.Decide(r.ev, nil); out.Decision == fulfillment.DecisionTestModeIgnored {
			// Stored as evidence, acknowledged, never processed.
			rows[i].State = string(fulfillment.InboxIgnored)
			rows[i].Decision, rows[i].DecisionReason = opt(string(out.Decision)), opt(out.Reason)
		}
	}

	found := make(map[eventKey]fulfillment.InboxReceipt, n)
	var decided *decidedBatch
	if s.decideOnReceipt {
		decided = s.storeDecided(ctx, sorted, rows, found)
	}
	if decided != nil {
		after = func() { decided.observe(s) }
	} else {
		clear(found)
		if err := s.storeQueued(ctx, rows, found); err != nil {
			return nil, after, err
		}
	}
	if ignored := s.ignoredOnReceipt(sorted, rows, found); ignored != nil {
		decidedAfter := after
		after = func() { decidedAfter(); ignored() }
	}
	if len(found) < uniqueKeys(batch) {
		// Redeliveries. The insert waited for any conflicting insert to
		// commit, so this later statement sees every row it skipped.
		provider, org, env, eventID := keyArrays(rows)
		// One probe of the key's index per event, planned for each run
		// (QueryExecModeExec): a generic plan made while the table was
		// nearly empty would scan it whole as it grows (see batchSettings).
		result, _ := s.pool.Query(ctx, `
			SELECT i.id, i.state, u.p, u.o, u.e, u.id
			FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u (p, o, e, id)
			JOIN `+storedEventProbe+` ON true`,
			pgx.QueryExecModeExec, provider, org, env, eventID)
		if err := collectReceipts(result, found, true); err != nil {
			return nil, after, fmt.Errorf("reading redelivered inbox events: %w", interpret(err))
		}
	}
	receipts := make([]fulfillment.InboxReceipt, n)
	for i, r := range batch {
		k := eventKey{string(r.ev.Provider), r.ev.OrgID, string(r.ev.Environment), r.ev.EventID}
		rec, ok := found[k]
		if !ok {
			return nil, after, fmt.Errorf("storing inbox event %s: row neither inserted nor found", r.ev.EventID)
		}
		receipts[i] = rec
		// The first request of a key in the batch owns a fresh insert; any
		// other request for it is a duplicate.
		rec.Duplicate = true
		found[k] = rec
	}
	return receipts, after, nil
}

// ignoredOnReceipt returns what tells the observer of decided events
// (logs, metrics, spans) about the test-mode events of reqs that their
// rows stored ignored (a decision no processor makes again), as found
// inserted; nil when there are none.
func (s *Store) ignoredOnReceipt(reqs []*insertRequest, rows []inboxRow, found map[eventKey]fulfillment.InboxReceipt) func() {
	o := s.decidedObserver.Load()
	if o == nil {
		return nil
	}
	var (
		ids    []int64
		events []fulfillment.ProcessedEvent
		ctxs   []context.Context
	)
	for i, r := range rows {
		if r.State != string(fulfillment.InboxIgnored) {
			continue // every event of a live batch: nothing looked up
		}
		k := r.key()
		rec, ok := found[k]
		if !ok || rec.Duplicate || i > 0 && k == rows[i-1].key() {
			continue
		}
		ev := reqs[i].ev
		p := fulfillment.ProcessedEvent{EventID: ev.EventID, Provider: ev.Provider, EndpointID: ev.EndpointID,
			Kind: ev.Kind, TraceParent: str(r.TraceParent),
			Outcome: fulfillment.Outcome{Decision: fulfillment.Decision(str(r.Decision)), Reason: str(r.DecisionReason)}}
		if r.ReceivedAt != nil {
			p.ReceivedAt = *r.ReceivedAt
		}
		ids, events, ctxs = append(ids, rec.ID), append(events, p), append(ctxs, reqs[i].ctx)
	}
	if len(ids) == 0 {
		return nil
	}
	start := time.Now()
	return func() {
		for i, id := range ids {
			(*o)(ctxs[i], start, id, events[i])
		}
	}
}

// storeQueued inserts rows pending, queued for the inbox processors, with
// one statement, and records each new row in found.
func (s *Store) storeQueued(ctx context.Context, rows []inboxRow, found map[eventKey]fulfillment.InboxReceipt) error {
	// One statement, one implicit transaction: the rows it returns are
	// only read to the end once it has committed. The new pending events
	// it leases to this process's inbox queue (hand-off) are handed to it
	// then; the others are claimed, woken by the signal.
	handoff, h := s.inboxHandoff(len(rows))
	var handed []worker.Claim
	pending := false
	result, _ := s.pool.Query(ctx, inboxInsertSQL, inboxInsertArgs(rows, h)...)
	err := forEachRow(result, func(r pgx.Rows) error {
		rec, k, wasHanded, err := scanStored(r)
		if err != nil {
			return err
		}
		if wasHanded {
			handed = append(handed, worker.Claim{ID: rec.ID, Attempts: 1})
		} else {
			pending = pending || rec.State == fulfillment.InboxPending
		}
		found[k] = rec
		return nil
	})
	if err != nil {
		// Leased rows that did commit stay with their live owner, which
		// claims them back once their lease ran out (ClaimParams.InFlight).
		handoff.Deliver(h, nil)
		return fmt.Errorf("storing inbox events: %w", interpret(err))
	}
	handoff.Deliver(h, handed)
	if pending {
		s.inboxSignal.committed()
	}
	return nil
}

// scanStored reads a row that inboxInsertSQL returns: the event's receipt,
// its key, and whether it was leased to this process's inbox queue.
func scanStored(r pgx.Rows) (rec fulfillment.InboxReceipt, k eventKey, handed bool, err error) {
	err = r.Scan(&rec.ID, &rec.State, &k.provider, &k.org, &k.env, &k.eventID, &handed)
	return rec, k, handed, err
}

// collectReceipts reads (id, state, key) rows into found, keeping entries
// already there.
func collectReceipts(rows pgx.Rows, found map[eventKey]fulfillment.InboxReceipt, duplicate bool) error {
	defer rows.Close()
	for rows.Next() {
		var (
			r fulfillment.InboxReceipt
			k eventKey
		)
		if err := rows.Scan(&r.ID, &r.State, &k.provider, &k.org, &k.env, &k.eventID); err != nil {
			return err
		}
		if _, ok := found[k]; !ok {
			r.Duplicate = duplicate
			found[k] = r
		}
	}
	return rows.Err()
}

func uniqueKeys(batch []*insertRequest) int {
	keys := make(map[eventKey]struct{}, len(batch))
	for _, r := range batch {
		keys[eventKey{string(r.ev.Provider), r.ev.OrgID, string(r.ev.Environment), r.ev.EventID}] = struct{}{}
	}
	return len(keys)
}

// InboxInsertStatement is the statement and arguments with which the
// service stores ev with raw body raw, pending: one row of its group-commit
// insert. Run alone, in autocommit, it is the raw PostgreSQL work of
// accepting one webhook — the baseline make bench compares ingest with.
func InboxInsertStatement(ev fulfillment.ProviderEvent, raw []byte) (sql string, args []any) {
	row := inboxRowOf(ev)
	row.RawBody, row.State = raw, string(fulfillment.InboxPending)
	return inboxInsertSQL, inboxInsertArgs([]inboxRow{row}, worker.Handoff{})
}

// InboxHandoff is an inbox queue that takes the events this process stores
// as they are stored (worker.Queue): they are inserted leased to its owner
// and handed to it after their commit, never claimed.
type InboxHandoff interface {
	Reserve(n int) worker.Handoff
	Deliver(h worker.Handoff, claims []worker.Claim)
}

// HandInboxTo makes the group commit hand the events it stores to q, this
// process's inbox queue, as far as q has room (nil: no hand-off). Events
// stored while q takes none are queued unleased and claimed.
func (s *Store) HandInboxTo(q InboxHandoff) {
	if q == nil {
		s.handoff.Store(nil)
		return
	}
	s.handoff.Store(&q)
}

// inboxHandoff reserves a hand-off of at most n events.
func (s *Store) inboxHandoff(n int) (InboxHandoff, worker.Handoff) {
	q := s.handoff.Load()
	if q == nil {
		return noHandoff{}, worker.Handoff{}
	}
	return *q, (*q).Reserve(n)
}

// noHandoff takes nothing.
type noHandoff struct{}

func (noHandoff) Reserve(int) worker.Handoff             { return worker.Handoff{} }
func (noHandoff) Deliver(worker.Handoff, []worker.Claim) {}
