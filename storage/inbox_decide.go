package storage

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/internal/failpoint"
)

// Deciding on receipt. With Options.DecideOnReceipt, a group commit does
// in its one transaction what the inbox processor would do in the next
// one: it looks up which of the batch's events are stored already (those
// are redeliveries, left out), locks what the others name, decides them
// in one pure step, inserts each event with its decision, and writes
// their effects. The event is never queued: no work row, no claim, no
// second write of its row, no second commit — and it is acknowledged with
// its effects committed.
//
// A batch that cannot be decided so is stored queued instead, as without
// the option, by a second transaction: nothing of the first one remains.
// That happens when
//   - an event of the batch was stored by another transaction after the
//     look-up, twice: the first time, the batch is decided again without
//     the events found stored;
//   - an order or a subscription the batch names, or one of its events'
//     keys, stays locked by another transaction past the lock wait (an
//     inbox processor's batch, another group commit's): the ack does not
//     wait behind it;
//   - anything else fails (a unique key refusing a repeated grant, say):
//     the inbox processor then retries the events alone.

// defaultDecideLockWait bounds each lock wait of a batch decided on
// receipt (lock_timeout, for its transaction only), set by
// Store.decideSettings, which tests may lengthen.
const defaultDecideLockWait = "50ms"

// decidedStartSQL starts a decided batch, whose transaction waits for a
// lock at most defaultDecideLockWait (decideSettings): it returns the time of its
// receipt; the positions (from 1) of the events of the arrays $1 to $4 (provider, org,
// environment, event id) that are stored already, with the id and state
// of each, for their receipts; and an id from the table's sequence for
// each event, in order (those of events left out are never used: a
// sequence has gaps anyway; the identity column's sequence is named by
// PostgreSQL, and named here rather than looked up in the catalog at each
// run). Each event is looked up by a lateral probe of its key's index,
// whatever the statistics the plan was made with (batchSettings). It notes
// the positions of the stored events in storedEventsSetting, where the
// order lock sent after it in the same round trip finds them
// (storedEvents): the orders only redeliveries name are not locked.
const decidedStartSQL = `
	SELECT clock_timestamp(), set_config('` + storedEventsSetting + `', s.n::text, true), s.n, s.id, s.state,
		ARRAY(SELECT nextval('inbox_events_id_seq')
			FROM generate_series(1, cardinality($1::text[])))
	FROM (
		SELECT coalesce(array_agg(u.n::int), '{}') AS n, coalesce(array_agg(i.id), '{}') AS id,
			coalesce(array_agg(i.state), '{}') AS state
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) WITH ORDINALITY AS u(p, o, e, id, n)
		JOIN ` + storedEventProbe + ` ON true) s`

// storedEventProbe is the id and state (i) of the stored event of the key
// (u.p, u.o, u.e, u.id) — provider, org, environment, event id — if any:
// one probe of the key's index per key, as a lateral subquery, which no
// statistics the plan is made with turn into a scan of the table or of
// the whole index.
const storedEventProbe = `LATERAL (SELECT i.id, i.state FROM inbox_events i
	WHERE i.provider = u.p AND i.org_id = u.o AND i.environment = u.e AND i.event_id = u.id LIMIT 1) i`

// DecidedObserver observes an event decided on receipt, after its commit:
// ctx is the call that stored it, start is when its batch began.
type DecidedObserver func(ctx context.Context, start time.Time, id int64, p fulfillment.ProcessedEvent)

// ObserveDecided makes o observe the events decided on receipt (nil:
// none), as the inbox processor's observers see the events it decides.
func (s *Store) ObserveDecided(o DecidedObserver) {
	if o == nil {
		s.decidedObserver.Store(nil)
		return
	}
	s.decidedObserver.Store(&o)
}

// decidedCounts count the group commits by outcome (metrics).
type decidedCounts struct {
	decided, redelivered, locked, failed atomic.Int64
}

// errStoredBefore is a decided batch's refusal: an event of it was stored
// by another transaction.
var errStoredBefore = errors.New("an event of the batch was stored before")

// storeDecided stores the batch decided on receipt (see above): reqs and
// rows in the order of their keys, a request's row at its index. It
// records each row in found (new, or found stored already) and returns the committed batch, whose
// observe the caller runs once the acknowledgements are out; nil means
// nothing was stored, and found holds nothing of it.
func (s *Store) storeDecided(ctx context.Context, reqs []*insertRequest, rows []inboxRow, found map[eventKey]fulfillment.InboxReceipt) *decidedBatch {
	for try := 1; try <= 2; try++ {
		stored, err := s.tryDecided(ctx, reqs, rows, found)
		switch {
		case err == nil:
			if len(stored.ctxs) > 0 { // (redeliveries alone store nothing)
				s.decidedCount.decided.Add(1)
			}
			stored.committed(s)
			return stored
		case errors.Is(err, errCommittedUnread):
			// Committed, whatever a callback could not read: the batch
			// stands decided. Its events missing from found are read back
			// as the batch's redeliveries are (their receipts say
			// duplicate).
			s.log.Warn("inbox: a decided batch committed, but its results could not be read", "events", len(reqs), "error", err)
			s.decidedCount.decided.Add(1)
			stored.committed(s)
			return stored
		case errors.Is(err, errStoredBefore) && try == 1:
			// Its look-up finds the event stored now.
			clear(found)
			continue
		case errors.Is(err, errStoredBefore):
			s.decidedCount.redelivered.Add(1)
		case sqlstateOf(err) == sqlstateLockNotAvailable:
			s.decidedCount.locked.Add(1)
		case errors.Is(err, errRolledBackAtCommit):
			// A statement's error went unseen until the COMMIT: a bug of
			// ours, not of the batch's. Stored queued, it is decided anew.
			s.decidedCount.failed.Add(1)
			s.log.Warn("inbox: a batch decided on receipt was rolled back at its COMMIT, queued", "events", len(reqs), "error", err)
		default:
			s.decidedCount.failed.Add(1)
			s.log.Debug("inbox: a batch could not be decided on receipt, queued", "events", len(reqs), "error", err)
		}
		clear(found)
		return nil
	}
	return nil
}

// decidedBatch is a committed batch decided on receipt, to observe.
type decidedBatch struct {
	start    time.Time
	outcomes map[int64]fulfillment.ProcessedEvent
	ctxs     map[int64]context.Context // the call that stored each event
	queued   queued
	late     int
}

// committed wakes what the batch queued, at once.
func (b *decidedBatch) committed(s *Store) {
	s.wake(b.queued)
	s.wakeLate(b.late)
	failpoint.Inject("decide-after-commit")
}

// observe tells the observer about the batch's events (logs, metrics,
// spans): after their acknowledgements, which need not wait for it.
func (b *decidedBatch) observe(s *Store) {
	o := s.decidedObserver.Load()
	if o == nil {
		return
	}
	for id, p := range b.outcomes {
		(*o)(b.ctxs[id], b.start, id, p)
	}
}

// tryDecided is one try of storeDecided, leaving out the events it finds
// stored already (a redelivery costs one index lookup, not a decision
// rolled back). It returns errStoredBefore when an event turns out stored
// by a transaction that committed meanwhile.
func (s *Store) tryDecided(ctx context.Context, reqs []*insertRequest, rows []inboxRow,
	found map[eventKey]fulfillment.InboxReceipt) (*decidedBatch, error) {
	var (
		out  *decidedBatch
		late *lateMatches
	)
	var (
		received     time.Time
		stored       []int32
		storedIDs    []int64
		storedStates []fulfillment.InboxState
		ids          []int64
		lock         *orderLock
	)
	// Its first round trip: BEGIN and the lock wait; the clock, which of the
	// rows are stored, and ids for them; and the locks of the orders the
	// rows not found stored name, with their attempts and refunds.
	first := func(b *pgx.Batch) {
		provider, org, env, eventID := keyArrays(rows)
		b.Queue(decidedStartSQL, provider, org, env, eventID).QueryRow(func(row pgx.Row) error {
			if err := row.Scan(&received, nil, &stored, &storedIDs, &storedStates, &ids); err != nil {
				return fmt.Errorf("starting a decided batch: %w", interpret(err))
			}
			return nil
		})
		var (
			named     []leasedEvent
			positions []int
		)
		for i, r := range rows {
			if r.State == string(fulfillment.InboxPending) {
				named, positions = append(named, leasedEvent{ev: reqs[i].ev}), append(positions, i+1)
			}
		}
		lock = queueOrderLock(b, named, positions)
	}
	err := s.withPipelinedTx(ctx, s.decideSettings, first, func(tx *pipelinedTx) error {
		out = &decidedBatch{start: time.Now(), outcomes: map[int64]fulfillment.ProcessedEvent{}, ctxs: map[int64]context.Context{}}
		late = &lateMatches{}
		// The events stored already are redeliveries: their receipts are
		// their rows as found.
		storedBefore := make([]bool, len(rows))
		for j, i := range stored {
			storedBefore[i-1] = true
			found[rows[i-1].key()] = fulfillment.InboxReceipt{ID: storedIDs[j], State: storedStates[j], Duplicate: true}
		}
		// The rows to insert, one per key (the first request of a key
		// owns its insert), with their requests.
		var (
			insert []inboxRow
			owners []*insertRequest
		)
		for i, r := range rows {
			k := r.key()
			if storedBefore[i] || i > 0 && k == rows[i-1].key() {
				continue
			}
			r.ID = ids[i]
			insert, owners = append(insert, r), append(owners, reqs[i])
		}
		if len(insert) == 0 {
			return nil
		}
		// The events to decide: all but the test-mode ones, stored
		// ignored. events[j] is the row at index[j].
		var (
			events []leasedEvent
			index  []int
		)
		for i := range insert {
			insert[i].ReceivedAt = &received
			out.ctxs[insert[i].ID] = owners[i].ctx
			if insert[i].State != string(fulfillment.InboxPending) {
				continue
			}
			events = append(events, leasedEvent{id: insert[i].ID, ev: owners[i].ev, received: received,
				traceParent: str(insert[i].TraceParent), attempts: 1})
			index = append(index, i)
		}
		steps, versions, err := s.decideLocked(ctx, tx, events, lock, late)
		if err != nil {
			return err
		}
		for j, st := range steps {
			o, linked, applied := decisionOf(events[j], st)
			r := &insert[index[j]]
			decision, reason := string(o.Decision), o.Reason
			r.State, r.Decision, r.DecisionReason = string(fulfillment.InboxStateFor(o.Decision)), &decision, &reason
			r.OrderID, r.AppliedSubscriptionID, r.Attempts = linked, applied, 1
		}
		// The events, then their effects, and the COMMIT, in one round
		// trip.
		b := &pgx.Batch{}
		queueInsertDecided(b, insert, found)
		tx.beforeCommit = func() { failpoint.Inject("decide-before-commit") }
		out.queued, err = s.applySteps(ctx, tx, b, events, steps, versions, late, false, out.outcomes)
		return err
	})
	if err != nil && !errors.Is(err, errCommittedUnread) {
		return nil, err
	}
	out.late = late.queued
	return out, err
}

// queueInsertDecided adds to b the insert of rows, decided, with their
// ids, and records each row inserted in found. When a row's event turns
// out stored by another transaction since the look-up (the insert waited
// for it to commit), the insert fails on the event's key and reading the
// batch's results ends with errStoredBefore: the transaction is rolled
// back, and the next try's look-up finds the event.
func queueInsertDecided(b *pgx.Batch, rows []inboxRow, found map[eventKey]fulfillment.InboxReceipt) {
	b.Queue(inboxInsertDecidedSQL, inboxDecidedArgs(rows)...).Query(func(result pgx.Rows) error {
		inserted := make(map[eventKey]fulfillment.InboxReceipt, len(rows))
		err := forEachRow(result, func(r pgx.Rows) error {
			rec, k, _, err := scanStored(r)
			inserted[k] = rec
			return err
		})
		switch {
		case sqlstateOf(err) == sqlstateUniqueViolation && constraintName(err) == inboxEventKey:
			return errStoredBefore
		case err != nil:
			return fmt.Errorf("storing inbox events: %w", interpret(err))
		}
		for k, rec := range inserted {
			found[k] = rec
		}
		return nil
	})
}
