package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/internal/failpoint"
)

// InboxProcess implements fulfillment.InboxWork. A batch is decided in one
// pure step (fulfillment.DecideBatch) against what storage locks for it:
// the events, their orders (in id order, so that concurrent batches cannot
// deadlock) with their attempts and recorded refunds, and the subscriptions
// they name. A subscription an order's payment is the first to pay is
// created before the step is taken again. Then the effects of every
// decision go in one pipelined batch of statements, one per kind of effect
// (effectWriter) — and one commit. Events of one order (or
// subscription) are decided in event order against what the previous ones
// left; their effects are written together, one statement per kind
// (effectWriter).
func (s *Store) InboxProcess(ctx context.Context, ids []int64, owner string) (map[int64]fulfillment.Outcome, error) {
	done, err := s.InboxProcessEvents(ctx, ids, owner)
	if err != nil {
		return nil, err
	}
	outcomes := make(map[int64]fulfillment.Outcome, len(done))
	for id, p := range done {
		outcomes[id] = p.Outcome
	}
	return outcomes, nil
}

// InboxProcessEvents implements fulfillment.InboxEventsProcessor: it is
// InboxProcess, telling each event's id, order and trace context too.
func (s *Store) InboxProcessEvents(ctx context.Context, ids []int64, owner string) (map[int64]fulfillment.ProcessedEvent, error) {
	outcomes := make(map[int64]fulfillment.ProcessedEvent, len(ids))
	var (
		q      queued
		late   = &lateMatches{}
		events []leasedEvent
	)
	// BEGIN goes with the events' lock, COMMIT with the effects: three
	// round trips, the orders' locks between (pipelinedTx).
	first := func(b *pgx.Batch) { queueLeasedEvents(b, ids, owner, &events) }
	err := s.withPipelinedTx(ctx, s.workSettings, first, func(tx *pipelinedTx) error {
		if len(events) == 0 {
			return nil
		}
		steps, versions, err := s.decideEvents(ctx, tx, events, late)
		if err != nil {
			return err
		}
		tx.beforeCommit = func() { failpoint.Inject("process-before-commit") }
		q, err = s.applySteps(ctx, tx, nil, events, steps, versions, late, true, outcomes)
		return err
	})
	if errors.Is(err, errCommittedUnread) {
		// Committed: the outcomes were decided before the batch was sent.
		s.log.Warn("inbox: a processed batch committed, but its results could not be read", "events", len(events), "error", err)
		err = nil
	}
	if err != nil && len(events) == 1 {
		// Tried alone (a batch that failed is tried event by event), its
		// error is this event's: it names the event as its provider does,
		// for the retry's log line, its last_error and its item.
		ev := events[0].ev
		return nil, fmt.Errorf("event %s of %s: %w", ev.EventID, ev.EndpointID, err)
	}
	if err != nil {
		return nil, err
	}
	s.wake(q)
	s.wakeLate(late.queued)
	failpoint.Inject("process-after-commit")
	return outcomes, nil
}

// defaultWorkLockWait bounds each lock wait of a queue's work — the inbox
// processor's batch, a subscription's sweep (lock_timeout, for its
// transaction only): Store.workLockWait, which tests may shorten. The work
// locks what it names, and another transaction may keep one of those
// locked without end (an operator's open psql session, a client stuck in a
// transaction). Without a bound, every other item the worker holds,
// events already acknowledged among them, would wait as long. With one,
// the work fails, its queue tries each item alone (worker.Queue), and only
// the item whose order or subscription is held waits, retried after its
// backoff, and failed, for a person to look at, once it has used its
// attempts. A few seconds is hundreds of times what another batch holds an
// order for.
const defaultWorkLockWait = "5s"

// decideEvents locks what the events name — their orders (in id order, so
// that concurrent batches cannot deadlock) with their attempts and
// recorded refunds, and their subscriptions — and decides them, in the
// order given, in one pure step (decideBatch). It returns the steps and
// the row version each order was locked at.
func (s *Store) decideEvents(ctx context.Context, tx querier, events []leasedEvent, late *lateMatches) ([]fulfillment.Step, orderVersions, error) {
	lock, err := lockOrders(ctx, tx, events)
	if err != nil {
		return nil, nil, err
	}
	return s.decideLocked(ctx, tx, events, lock, late)
}

// decideLocked is decideEvents once the events' orders are locked: lock
// holds them, and at least those the events name.
func (s *Store) decideLocked(ctx context.Context, tx querier, events []leasedEvent, lock *orderLock, late *lateMatches) ([]fulfillment.Step, orderVersions, error) {
	subs, err := lockEventSubscriptions(ctx, tx, events, lock.orders)
	if err != nil {
		return nil, nil, err
	}
	snap := &fulfillment.Snapshot{Orders: lock.orders, Subscriptions: subs, Plans: s.plans,
		Created: map[fulfillment.SubscriptionKey]*fulfillment.SubscriptionRecord{}}
	batch := make([]fulfillment.BatchEvent, len(events))
	for i, le := range events {
		batch[i] = fulfillment.BatchEvent{Event: le.ev, Received: le.received}
	}
	steps, err := decideBatch(ctx, tx, snap, batch, late)
	return steps, lock.versions, err
}

// applySteps writes the effects of the steps decided for events (step i
// is event i's) in one pipelined batch of statements, after those b holds
// already (nil for none), one per kind of effect (effectWriter), with the
// decisions when record is set (events decided as they are stored carry
// theirs in their rows already), and adds each event to outcomes. The
// orders were locked at versions. It returns what the batch queued, to
// wake once committed: it commits tx, whose COMMIT goes with the batch.
func (s *Store) applySteps(ctx context.Context, tx *pipelinedTx, b *pgx.Batch, events []leasedEvent, steps []fulfillment.Step,
	versions orderVersions, late *lateMatches, record bool, outcomes map[int64]fulfillment.ProcessedEvent) (queued, error) {
	w := s.newEffectWriter()
	w.versions = versions
	decided := decisions{}
	answered := answeredItems{}
	for i, st := range steps {
		le := events[i]
		out, linked, applied := decisionOf(le, st)
		if fulfillment.InboxStateFor(out.Decision) == fulfillment.InboxUnmatched {
			late.addUnmatched(le)
		}
		if sub := st.Subscription; sub != nil {
			cause := subscriptionCause{eventRef: le.ev.EventID, inboxID: le.id}
			if k := st.AwaitedOrder; k != nil {
				// The payment of the subscription's first period, for
				// want of the order it names: the period it pays now
				// keeps that order's id, and the order, created
				// meanwhile, has it queued again — also when it paid
				// the period before (announced again, or replayed while
				// the order is being created, which finds it pending and
				// leaves it to this transaction).
				cause.awaited = k.Value
				late.addAwaited(le.id, *k)
			}
			if err := w.subscriptionStep(&sub.Record, sub.Plan, sub.Event, cause, sub.Outcome); err != nil {
				return queued{}, err
			}
			for _, e := range sub.Outcome.Effects {
				switch e.(type) {
				case fulfillment.BindSubscription:
					// The subscription goes by a key of the provider's from
					// now on, as if created with it: the events that named
					// it before, decided unmatched, are queued again.
					late.addSubscription(sub.Record.Key(), true)
				case fulfillment.GrantPeriod:
					// A refund of the payment announced before it, decided
					// unmatched, is queued again.
					if id := sub.Event.PaymentID; id != "" {
						r := sub.Record
						late.addPayment(fulfillment.RefundedPayment{OrgID: r.OrgID, Environment: r.Environment,
							Provider: r.Provider, PaymentID: id}, true)
					}
				}
			}
		}
		if st.Subscription == nil || st.Order != nil {
			// (A subscription's own decision has its effects above.)
			if err := w.orderStep(le, st); err != nil {
				return queued{}, err
			}
		}
		decided.add(le, out, linked, applied)
		answer(&answered, le, out)
		p := fulfillment.ProcessedEvent{Outcome: out, EventID: le.ev.EventID, Provider: le.ev.Provider,
			EndpointID: le.ev.EndpointID, Kind: le.ev.Kind, ReceivedAt: le.received, TraceParent: le.traceParent}
		if linked != nil {
			p.OrderID = *linked
		}
		outcomes[le.id] = p
	}
	if b == nil {
		b = &pgx.Batch{}
	}
	q, err := w.write(b)
	if err != nil {
		return q, err
	}
	if record {
		decided.queue(b)
	}
	answered.queue(b)
	// After the decisions: the events decided unmatched here are
	// among those a subscription created here queues again, and an
	// order or subscription created meanwhile queues them too.
	late.queue(b, s.lateMatch)
	if err := tx.commitWith(ctx, b); err != nil {
		if errors.Is(err, errCommittedUnread) {
			return q, err // (committed: what it queued is to wake)
		}
		return queued{}, fmt.Errorf("applying decisions: %w", interpret(err))
	}
	return q, nil
}

// decisionOf is what step st records of event le: its outcome, the order
// it is linked to and the subscription it applied to (nil for none).
func decisionOf(le leasedEvent, st fulfillment.Step) (out fulfillment.Outcome, linked, applied *string) {
	out = st.Outcome
	if le.lateMatched != "" {
		// Queued again when what it names was created: the decision says
		// the event came first.
		out.Reason += " (" + le.lateMatched + ")"
	}
	if st.Order != nil {
		linked = &st.Order.ID
	}
	if st.Subscription != nil {
		applied = &st.Subscription.Record.ID
	}
	return out, linked, applied
}

// subscriptionCreateLock is the first key of the transaction advisory
// locks a batch takes before it creates its first subscription, one per
// org and environment of its events, the second key being their hash
// (apart from the other two-key locks: lateMatchLock, redriveLock). A
// batch creates the subscriptions its payments are the first to pay one at
// a time, in the order of its events, each insert waiting for any other
// transaction's insert of the same key: two batches creating the same two
// subscriptions in opposite orders would each create one and wait for the
// other's. Holding these locks, a batch creates all of its subscriptions
// before another batch of the same org and environment creates any, and
// that one then finds them created. A batch takes all of its locks at
// once, in the order of their hashes, so that two batches cannot each
// hold one the other waits for.
const subscriptionCreateLock = 231

// lockSubscriptionCreation takes the subscriptionCreateLock of each org and
// environment of batch, all at once, in the order of their hashes.
func lockSubscriptionCreation(ctx context.Context, tx querier, batch []fulfillment.BatchEvent) error {
	scopes := make([]string, len(batch))
	for i, be := range batch {
		scopes[i] = be.Event.OrgID + "/" + string(be.Event.Environment)
	}
	_, err := tx.Exec(ctx, `
		SELECT pg_advisory_xact_lock($1, h)
		FROM (SELECT DISTINCT hashtext(s) AS h FROM unnest($2::text[]) AS s ORDER BY 1) scopes`,
		subscriptionCreateLock, scopes)
	if err != nil {
		return fmt.Errorf("waiting for the batches creating subscriptions: %w", interpret(err))
	}
	return nil
}

// decideBatch decides the batch against snap (fulfillment.DecideBatch),
// creating and locking first the subscriptions its payments are the first
// to pay: one at a time, as the rules ask for them, under the
// subscriptionCreateLock of each org and environment of the batch. Those
// it creates are recorded in late.
func decideBatch(ctx context.Context, tx querier, snap *fulfillment.Snapshot, batch []fulfillment.BatchEvent, late *lateMatches) ([]fulfillment.Step, error) {
	locked := false
	// Each round adds a subscription the step asked for, which it then
	// holds: at most one round per event, and a last one.
	for range len(batch) + 1 {
		steps, need, err := fulfillment.DecideBatch(snap, batch)
		if err != nil || need == nil {
			return steps, err
		}
		if !locked {
			if err := lockSubscriptionCreation(ctx, tx, batch); err != nil {
				return nil, err
			}
			locked = true
		}
		rec, err := createSubscription(ctx, tx, *need, late)
		if err != nil {
			return nil, err
		}
		snap.Created[need.Key()] = rec
	}
	return nil, fmt.Errorf("deciding a batch: more subscriptions asked for than the batch has events")
}

// keptDecision is the condition, on a stored event e and its new decision
// d, under which e keeps the decision it records (decisions.queue): found
// already applied, after a decision that applied something.
const keptDecision = `d.decision = '` + string(fulfillment.DecisionAlreadyApplied) + `'
	AND e.decision NOT IN ('` + string(fulfillment.DecisionUnmatched) + `', '` + string(fulfillment.InboxFailed) + `')`

// decisions are the outcomes of a batch's events, recorded with one
// statement: the per-statement work of PostgreSQL (planning, executor
// start, locks on the table and its indexes) is paid once per batch.
type decisions struct {
	ids                       []int64
	attempts                  []int
	states, decisions, reason []string
	orders, subscriptions     nulls[string]
}

// add records the outcome of event le, applied to the order linked and
// the subscription applied (nil for none).
func (d *decisions) add(le leasedEvent, out fulfillment.Outcome, linked, applied *string) {
	d.ids = append(d.ids, le.id)
	d.attempts = append(d.attempts, le.attempts)
	d.states = append(d.states, string(fulfillment.InboxStateFor(out.Decision)))
	d.decisions = append(d.decisions, string(out.Decision))
	d.reason = append(d.reason, out.Reason)
	d.orders = append(d.orders, linked)
	d.subscriptions = append(d.subscriptions, applied)
}

// answer records in a the open items about event le that its outcome out
// answers, with a note saying what it was decided: a failed event queued
// again (replayed, re-driven) and decided now answers its failed_event
// items, one per round of attempts that failed; a payment decided
// unmatched, queued again by a person and matched now, its
// unmatched_payment item (a late match resolves that item itself, as it
// queues the event). An event decided for the first time answers none.
func answer(a *answeredItems, le leasedEvent, out fulfillment.Outcome) {
	failed := le.previous == string(fulfillment.InboxFailed)
	if !failed && le.previous != string(fulfillment.DecisionUnmatched) {
		return // (every event decided as it is stored, and most others)
	}
	note := fmt.Sprintf("the event was processed again and decided %s: %s", out.Decision, out.Reason)
	if failed {
		a.add(fulfillment.ReconFailedEvent, le.id, 0, "", note)
	}
	// A failed event may have been an unmatched payment before the round
	// that failed (replayed once its order existed, say): its decision
	// then says failed, no longer unmatched, but its unmatched_payment
	// item is still open, and a match answers it as well. An event that
	// never was unmatched has no such item, and the statement finds none.
	// The item is about the payment, which another announcement of it may
	// have opened: found by its key too.
	if fulfillment.InboxStateFor(out.Decision) != fulfillment.InboxUnmatched {
		kind := fulfillment.ReconUnmatchedPayment
		a.add(kind, le.id, 0, fulfillment.ItemKey(kind, orderItem(kind, le, nil, "").subject), note)
	}
}

// queue adds the statement that records the decisions to b. Their
// processed_at follow the order they were decided in, a microsecond apart
// (the rows of one statement are not updated in any particular order):
// readers replay an order's or a subscription's events in that order. A replayed
// event that is found already applied keeps the decision it records, so
// that its history still says what it did (unless that was unmatched or
// failed: it did nothing then); no money depends on a decision
// (what an event did is in rows of its own: attempts, refunds, grants).
func (d *decisions) queue(b *pgx.Batch) {
	if len(d.ids) == 0 {
		return
	}
	b.Queue(`
		WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS t)
		UPDATE inbox_events e SET state = d.state,
			decision_reason = CASE WHEN `+keptDecision+` THEN e.decision_reason ELSE d.reason END,
			decision = CASE WHEN `+keptDecision+` THEN e.decision ELSE d.decision END,
			order_id = d.order_id::uuid, applied_subscription_id = d.subscription_id::uuid,
			processed_at = clock.t + d.n * interval '1 microsecond',
			attempts = d.attempts, last_error = NULL
		FROM clock,
			unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::int[]) WITH ORDINALITY
				AS d(id, state, decision, reason, order_id, subscription_id, attempts, n)
		WHERE e.id = d.id`,
		d.ids, d.states, d.decisions, d.reason, d.orders, d.subscriptions, d.attempts)
}

// leasedEvent is an inbox event locked for processing.
type leasedEvent struct {
	id          int64
	ev          fulfillment.ProviderEvent
	received    time.Time
	traceParent string // of the call that stored it
	attempts    int    // the claims it took, this one included
	// lateMatched is the detail of the late match that queued it again
	// (lateMatchDetail), when it was decided unmatched before, or it was a
	// payment that renewed a subscription for want of its order; "" for
	// none.
	lateMatched string
	// previous is the decision it had before it was queued again (a
	// replay, a re-drive, a late match); "" for an event never decided.
	previous string
}

// queueLeasedEvents adds to b the statement that takes the events of ids
// that owner still holds off the queue, deleting their work rows
// (leaseHeld, by primary key), and reads
// them in id order. Events whose lease was lost are left out. The deleted
// rows are the batch's lock: until it commits, no claim or reclaim sees
// them (SKIP LOCKED), and a concurrent replay waits; the stored events are
// only written again by the decision, so they are read without a lock,
// each by a probe of the primary key (a lateral subquery: whatever the
// statistics the generic plan was made with, see batchSettings).
// It appends them to out as it reads them.
func queueLeasedEvents(b *pgx.Batch, ids []int64, owner string, out *[]leasedEvent) {
	b.Queue(`
		WITH work AS (DELETE FROM inbox_work WHERE `+leaseHeld("$1", "$2")+` RETURNING id, attempts)
		SELECT `+inboxSelectList+`, received_at, work.attempts, late.detail, inbox_events.decision
		FROM work JOIN LATERAL (SELECT * FROM inbox_events i WHERE i.id = work.id OFFSET 0) inbox_events USING (id)
		LEFT JOIN LATERAL (
			-- Only for an event decided unmatched before, or a payment a
			-- subscription took for want of its order (a test on the event
			-- alone: no index is read for the others).
			SELECT CASE WHEN r.replayed_by = '`+LateMatchActor+`' AND starts_with(r.replayed_by_detail, '`+lateMatchDetail+`')
				THEN r.replayed_by_detail END AS detail
			FROM inbox_replays r
			WHERE (inbox_events.decision = '`+string(fulfillment.DecisionUnmatched)+`'
					OR inbox_events.decision = '`+string(fulfillment.DecisionRenewed)+`' AND inbox_events.order_id IS NULL)
				AND r.inbox_event_id = inbox_events.id
			ORDER BY r.id DESC LIMIT 1) late ON true
		ORDER BY id`, ids, owner).Query(func(rows pgx.Rows) error {
		err := forEachRow(rows, func(r pgx.Rows) error {
			var (
				row      inboxRow
				received time.Time
				attempts int
				late     *string
				previous *string
			)
			if err := r.Scan(append(row.scanDest(), &received, &attempts, &late, &previous)...); err != nil {
				return err
			}
			ev, err := row.event()
			*out = append(*out, leasedEvent{id: row.ID, ev: ev, received: received, traceParent: str(row.TraceParent),
				attempts: attempts, lateMatched: str(late), previous: str(previous)})
			return err
		})
		if err != nil {
			return fmt.Errorf("locking inbox events: %w", interpret(err))
		}
		return nil
	})
}

// lockedOrderRow is what lockOrders reads of an order with its lock, in
// the order of lockedOrdersSelect's columns (scan): the order and what its
// lines hold (the arrays of a kind of line are parallel: one element per
// line).
type lockedOrderRow struct {
	ID                  uuid.UUID
	Version             pgtype.TID
	OrgID               string
	Environment         fulfillment.Environment
	MerchantOrderID     string
	CheckoutSessionID   *string
	State               fulfillment.State
	TotalCurrency       string
	TotalMinorUnits     int64
	SettlementToken     *string
	SettlementNetwork   *string
	SettlementAmount    *string
	SettlementTolerance *string
	Paid                bool
	PaidAttemptRef      *string
	PaidInvoiceID       *string
	PaidPaymentID       *string
	PaidSubscription    *string
	PaidEvent           *string
	PaidAmount          *string
	PaidToken           *string
	PaidNetwork         *string
	PaidCurrency        *string
	StartedSessions     []string
	// Its lines.
	HasExternalLines bool
	SubscriptionPlan *string
	SubscriptionFor  *string
	// The external lines that name a destination.
	LineNo          []int
	LineSKU         []string
	LineQuantity    []int
	LineCurrency    []string
	LineMinorUnits  []int64
	LineDestination []string
	LicenseLineNo   []int
	LicenseQuantity []int64
	BalanceLineNo   []int
	BalanceAccount  []string
	BalanceCurrency []string
	BalanceMinor    []int64
}

// scan reads a row of lockedOrdersSelect into row, column by column (a
// scan by name cost 4% of the service's CPU in the bench's push).
func (row *lockedOrderRow) scan(r pgx.Rows) error {
	return r.Scan(&row.ID, &row.Version, &row.OrgID, &row.Environment, &row.MerchantOrderID, &row.CheckoutSessionID,
		&row.State, &row.TotalCurrency, &row.TotalMinorUnits,
		&row.SettlementToken, &row.SettlementNetwork, &row.SettlementAmount, &row.SettlementTolerance,
		&row.Paid, &row.PaidAttemptRef, &row.PaidInvoiceID, &row.PaidPaymentID,
		&row.PaidSubscription, &row.PaidEvent, &row.PaidAmount, &row.PaidToken, &row.PaidNetwork, &row.PaidCurrency,
		&row.StartedSessions,
		&row.HasExternalLines, &row.SubscriptionPlan, &row.SubscriptionFor,
		&row.LineNo, &row.LineSKU, &row.LineQuantity, &row.LineCurrency, &row.LineMinorUnits, &row.LineDestination,
		&row.LicenseLineNo, &row.LicenseQuantity,
		&row.BalanceLineNo, &row.BalanceAccount, &row.BalanceCurrency, &row.BalanceMinor)
}

// requestedLine is the condition, on a row of order_lines, of the lines
// that fulfillment.requested messages go to: external lines that name a
// destination (lines stored before destinations existed name none). It is
// a constant so that every array of those lines in lockOrdersSQL filters
// the same lines, and the arrays stay parallel.
const requestedLine = `kind = 'external' AND destination IS NOT NULL`

// lockOrdersSQL locks the orders named by merchant order id ($1-$3) or by
// checkout session ($4-$6), in id order, and reads with each what its lines
// hold (lines never change). $7 and $8 are the positions of the events
// that name each key (queueOrderLock; NULL: none), those of the keys
// ($1-$3, then $4-$6). (Each key set is looked up through its own
// unique index; an OR of the two would scan the table.) The ids are
// collected first (an init plan), and each order is locked by its primary
// key alone, so that an order updated while the lock waits for it is
// rechecked against its id only (see lockSubscriptions).
var lockOrdersSQL = notingLocked(fmt.Sprintf(lockedOrdersSelect,
	`ARRAY(SELECT provider_order_id FROM payment_starts ps WHERE ps.order_id = o.id)`) + `
	WHERE o.id = ANY (ARRAY(
		SELECT id FROM orders WHERE (org_id, environment, merchant_order_id) IN (
			SELECT k.o, k.e, k.v FROM unnest($1::text[], $2::text[], $3::text[], $7::int[]) AS k(o, e, v, n)
			WHERE ` + notStored + `)
		UNION
		SELECT id FROM orders WHERE (org_id, environment, checkout_session_id) IN (
			SELECT k.o, k.e, k.v FROM unnest($4::text[], $5::text[], $6::text[], $8::int[]) AS k(o, e, v, n)
			WHERE ` + notStored + `)
		UNION
		SELECT order_id FROM payment_starts WHERE (org_id, environment, provider_order_id) IN (
			SELECT k.o, k.e, k.v FROM unnest($4::text[], $5::text[], $6::text[], $8::int[]) AS k(o, e, v, n)
			WHERE ` + notStored + `)))
	ORDER BY o.id
	FOR UPDATE OF o`)

// lockOrdersByMerchantSQL is lockOrdersSQL for a batch whose events name
// their orders by merchant order id alone ($1-$3, and $4 the positions of
// the events that name them), as a Yolfi payment
// does: each order is read once, through its key's index, where
// lockOrdersSQL collects ids and reads each order again by its primary key
// (13.1 → 9.1 buffers per event in a restricted make bench run), and no
// started payment is read.
var lockOrdersByMerchantSQL = notingLocked(fmt.Sprintf(lockedOrdersSelect, `'{}'::text[]`) + `
	WHERE (o.org_id, o.environment, o.merchant_order_id) IN (
		SELECT k.o, k.e, k.v FROM unnest($1::text[], $2::text[], $3::text[], $4::int[]) AS k(o, e, v, n)
		WHERE ` + notStored + `)
	ORDER BY o.id
	FOR UPDATE OF o`)

// storedEventsSetting is the setting, local to its transaction, where
// decidedStartSQL notes the positions of the events of its batch it found
// stored; notStored, the condition on a key of the order lock (a row k
// with the position n of the event that names it, NULL for none) that
// leaves out those of those events. (The setting is read once per
// statement, an init plan: see lockedOrders.)
const (
	storedEventsSetting = "fulfillment.stored_events"
	notStored           = `(k.n IS NULL OR k.n <> ALL((SELECT coalesce(nullif(current_setting('` + storedEventsSetting + `', true), ''), '{}')::int[])::int[]))`
)

// lockedOrdersSetting is the setting, local to its transaction, where the
// order lock notes the ids of the orders it locked (notingLocked), for the
// statements after it in the same round trip (lockedOrders).
const lockedOrdersSetting = "fulfillment.locked_orders"

// notingLocked is lock, a statement that locks orders and returns them,
// noting their ids in lockedOrdersSetting, once all are locked (an init
// plan, run before the first row is returned even when none is).
func notingLocked(lock string) string {
	return `WITH locked AS MATERIALIZED (` + lock + `)
	SELECT * FROM locked
	WHERE (SELECT set_config('` + lockedOrdersSetting + `', coalesce(array_agg(id)::text, '{}'), true) FROM locked) IS NOT NULL`
}

// lockedOrders is the array of the ids of the orders the last order lock
// of the transaction locked (notingLocked); NULL before any. It is a
// subquery, an init plan evaluated once per statement: as an expression,
// the setting would be read and parsed again for every row a scan
// filters (0.6 ms per statement over a few thousand attempts, at one
// client).
const lockedOrders = `(SELECT nullif(current_setting('` + lockedOrdersSetting + `', true), '')::uuid[])::uuid[]`

// lockedOrdersSelect reads a locked order and what its lines hold, the
// expression of its started payments' ids (%s) its started_sessions.
const lockedOrdersSelect = `
	SELECT o.id, o.ctid, o.org_id, o.environment, o.merchant_order_id, o.checkout_session_id, o.state,
		o.total_currency, o.total_minor_units,
		o.settlement_token, o.settlement_network, o.settlement_amount::text, o.settlement_tolerance::text,
		o.paid_at IS NOT NULL AS paid, o.paid_attempt_ref, o.paid_invoice_id, o.paid_payment_id,
		o.paid_subscription_id::text, o.paid_event, o.paid_amount::text, o.paid_token, o.paid_network, o.paid_currency,
		%s AS started_sessions,
		l.has_external_lines, l.subscription_plan, l.subscription_for,
		l.line_no, l.line_sku, l.line_quantity, l.line_currency, l.line_minor_units, l.line_destination,
		l.license_line_no, l.license_quantity,
		l.balance_line_no, l.balance_account, l.balance_currency, l.balance_minor_units
	FROM orders o
	CROSS JOIN LATERAL (
		SELECT coalesce(bool_or(kind = 'external'), false) AS has_external_lines,
			(array_agg(plan_id ORDER BY line_no) FILTER (WHERE kind = 'subscription'))[1] AS subscription_plan,
			(array_agg(account_ref ORDER BY line_no) FILTER (WHERE kind = 'subscription'))[1] AS subscription_for,
			array_agg(line_no ORDER BY line_no) FILTER (WHERE ` + requestedLine + `) AS line_no,
			array_agg(sku ORDER BY line_no) FILTER (WHERE ` + requestedLine + `) AS line_sku,
			array_agg(quantity ORDER BY line_no) FILTER (WHERE ` + requestedLine + `) AS line_quantity,
			array_agg(currency ORDER BY line_no) FILTER (WHERE ` + requestedLine + `) AS line_currency,
			array_agg(unit_minor_units ORDER BY line_no) FILTER (WHERE ` + requestedLine + `) AS line_minor_units,
			array_agg(destination ORDER BY line_no) FILTER (WHERE ` + requestedLine + `) AS line_destination,
			array_agg(line_no ORDER BY line_no) FILTER (WHERE kind = 'license') AS license_line_no,
			array_agg(quantity ORDER BY line_no) FILTER (WHERE kind = 'license') AS license_quantity,
			array_agg(line_no ORDER BY line_no) FILTER (WHERE kind = 'balance_credit') AS balance_line_no,
			array_agg(account_ref ORDER BY line_no) FILTER (WHERE kind = 'balance_credit') AS balance_account,
			array_agg(currency ORDER BY line_no) FILTER (WHERE kind = 'balance_credit') AS balance_currency,
			array_agg(unit_minor_units * quantity ORDER BY line_no) FILTER (WHERE kind = 'balance_credit') AS balance_minor_units
		FROM order_lines WHERE order_id = o.id) l`

// lockOrders locks every order the events name, in id order
// (lockOrdersSQL), and reads their payment attempts and recorded refunds,
// in one round trip (queueOrderLock).
func lockOrders(ctx context.Context, tx querier, events []leasedEvent) (*orderLock, error) {
	b := &pgx.Batch{}
	l := queueOrderLock(b, events, nil)
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// orderLock is the lock of the orders a batch's events name: once its
// statements have run, the orders by each of their keys, with their
// attempts and recorded refunds, and the row version each was locked at.
type orderLock struct {
	orders   map[fulfillment.OrderKey]*fulfillment.LockedOrder
	versions orderVersions
	byID     map[string]*fulfillment.LockedOrder
}

// queueOrderLock adds to b the statements that lock every order the
// events name, in id order (lockOrdersSQL), then read their payment
// attempts and recorded refunds: none when they name no order.
//
// The attempts and refunds are read in statements of their own, after the
// lock's: under READ COMMITTED, a statement that waited for a lock sees
// the locked row as the holder committed it, but every other table as it
// was when the statement began — without what the holder wrote. (The order
// locks protect the attempts and the recorded refunds: every writer of an
// order's attempts and refunds holds its order row, a payment start too.)
// They find the orders' ids where the lock noted them (lockedOrders), so
// that all go in one round trip.
//
// positions, when not nil, are the events' positions in the arrays of a
// decidedStartSQL sent before: the orders of those it found stored are
// left out.
func queueOrderLock(b *pgx.Batch, events []leasedEvent, positions []int) *orderLock {
	l := &orderLock{orders: map[fulfillment.OrderKey]*fulfillment.LockedOrder{}, versions: orderVersions{},
		byID: map[string]*fulfillment.LockedOrder{}}
	var (
		mOrg, mEnv, mID, cOrg, cEnv, cID []string
		mPos, cPos                       nulls[int]
	)
	for i, le := range events {
		var pos *int
		if positions != nil {
			pos = &positions[i]
		}
		for _, k := range le.ev.OrderKeys() {
			switch k.Field {
			case fulfillment.ByMerchantOrderID:
				mOrg, mEnv, mID = append(mOrg, k.OrgID), append(mEnv, string(k.Environment)), append(mID, k.Value)
				mPos = append(mPos, pos)
			case fulfillment.ByCheckoutSessionID:
				cOrg, cEnv, cID = append(cOrg, k.OrgID), append(cEnv, string(k.Environment)), append(cID, k.Value)
				cPos = append(cPos, pos)
			}
		}
	}
	if len(mID)+len(cID) == 0 {
		return l
	}
	var q *pgx.QueuedQuery
	if len(cID) == 0 {
		q = b.Queue(lockOrdersByMerchantSQL, mOrg, mEnv, mID, mPos)
	} else {
		q = b.Queue(lockOrdersSQL, mOrg, mEnv, mID, cOrg, cEnv, cID, mPos, cPos)
	}
	q.Query(func(rows pgx.Rows) error {
		err := forEachRow(rows, func(r pgx.Rows) error {
			var row lockedOrderRow
			if err := row.scan(r); err != nil {
				return err
			}
			o, err := row.order()
			if err != nil {
				return err
			}
			l.byID[o.ID] = o
			l.versions[o.ID] = row.Version
			key := fulfillment.OrderKey{OrgID: row.OrgID, Environment: row.Environment}
			key.Field, key.Value = fulfillment.ByMerchantOrderID, row.MerchantOrderID
			l.orders[key] = o
			// A checkout session is the order's own, or the provider order
			// id of a payment the service started for it.
			sessions := row.StartedSessions
			if row.CheckoutSessionID != nil {
				sessions = append(sessions, *row.CheckoutSessionID)
			}
			for _, id := range sessions {
				key.Field, key.Value = fulfillment.ByCheckoutSessionID, id
				l.orders[key] = o
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("locking orders: %w", interpret(err))
		}
		return nil
	})
	// The locked orders' payment attempts. Each order's are read by a
	// probe of their key's index (a lateral subquery that PostgreSQL
	// cannot turn into a join over the whole table), as are its refunds;
	// the lock notes each order once (its ids come from one UNION or IN),
	// which the probes rely on not to read an order's rows twice.
	b.Queue(`
		SELECT l.id, a.provider, a.attempt_ref, a.state, a.refunded_payment_ids
		FROM unnest(` + lockedOrders + `) AS l (id), LATERAL (
			SELECT a.provider, a.attempt_ref, a.state, a.refunded_payment_ids FROM payment_attempts a WHERE a.order_id = l.id OFFSET 0) a`).
		Query(func(rows pgx.Rows) error {
			err := forEachRow(rows, func(r pgx.Rows) error {
				var (
					orderID  uuid.UUID
					k        fulfillment.AttemptKey
					state    fulfillment.AttemptState
					refunded []string
				)
				if err := r.Scan(&orderID, &k.Provider, &k.Ref, &state, &refunded); err != nil {
					return err
				}
				o, err := l.locked(orderID)
				if err != nil {
					return err
				}
				o.Attempts[k] = state
				for _, id := range refunded {
					if o.FullyRefunded == nil {
						o.FullyRefunded = map[fulfillment.PaymentKey]bool{}
					}
					o.FullyRefunded[fulfillment.PaymentKey{Provider: k.Provider, ID: id}] = true
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("reading payment attempts: %w", interpret(err))
			}
			return nil
		})
	// The partial refunds recorded for the orders, in the order they were
	// recorded.
	b.Queue(`
		SELECT l.id, r.provider, r.attempt_ref, r.payment_id, r.amount::text, r.token, r.network, r.currency
		FROM unnest(` + lockedOrders + `) AS l (id), LATERAL (
			SELECT r.id, r.provider, r.attempt_ref, r.payment_id, r.amount, r.token, r.network, r.currency
			FROM payment_refunds r WHERE r.order_id = l.id OFFSET 0) r
		ORDER BY r.id`).
		Query(func(rows pgx.Rows) error {
			err := forEachRow(rows, func(r pgx.Rows) error {
				var (
					orderID                         uuid.UUID
					rr                              fulfillment.RecordedRefund
					attemptRef, paymentID           *string
					value, token, network, currency *string
				)
				if err := r.Scan(&orderID, &rr.Attempt.Provider, &attemptRef, &paymentID, &value, &token, &network, &currency); err != nil {
					return err
				}
				rr.Attempt.Ref, rr.PaymentID = str(attemptRef), str(paymentID)
				var err error
				if rr.Amount, err = amountOf(value, token, network, currency); err != nil {
					return err
				}
				rr.Ref = fulfillment.RefundRefOf(rr.Attempt.Provider, rr.Attempt.Ref, rr.Amount)
				o, err := l.locked(orderID)
				if err != nil {
					return err
				}
				o.PartialRefunds = append(o.PartialRefunds, rr)
				return nil
			})
			if err != nil {
				return fmt.Errorf("reading recorded refunds: %w", interpret(err))
			}
			return nil
		})
	return l
}

// locked is the order of id the lock holds.
func (l *orderLock) locked(id uuid.UUID) (*fulfillment.LockedOrder, error) {
	o := l.byID[id.String()]
	if o == nil {
		return nil, fmt.Errorf("order %s read with the locked orders, but not locked", id)
	}
	return o, nil
}

// order is the order row holds.
func (row *lockedOrderRow) order() (*fulfillment.LockedOrder, error) {
	o := &fulfillment.LockedOrder{ID: row.ID.String(), OrgID: row.OrgID, Environment: row.Environment,
		MerchantOrderID: row.MerchantOrderID,
		PaidOrder: fulfillment.PaidOrder{
			State: row.State, Total: fulfillment.Money{Currency: row.TotalCurrency, MinorUnits: row.TotalMinorUnits},
			HasExternalLines: row.HasExternalLines, HasSubscriptionLines: row.SubscriptionPlan != nil, Paid: row.Paid,
			PaidBy:      fulfillment.PaidRefs{AttemptRef: str(row.PaidAttemptRef), InvoiceID: str(row.PaidInvoiceID), PaymentID: str(row.PaidPaymentID)},
			PaidByEvent: str(row.PaidEvent),
			Attempts:    map[fulfillment.AttemptKey]fulfillment.AttemptState{},
		}}
	var err error
	if o.Settlement, err = settlementFrom(row.SettlementToken, row.SettlementNetwork, row.SettlementAmount, row.SettlementTolerance); err != nil {
		return nil, err
	}
	if o.PaidAmount, err = amountOf(row.PaidAmount, row.PaidToken, row.PaidNetwork, row.PaidCurrency); err != nil {
		return nil, err
	}
	if row.SubscriptionPlan != nil {
		o.SubscriptionPlan, o.SubscriptionFor = *row.SubscriptionPlan, str(row.SubscriptionFor)
		o.PaidSubscription = str(row.PaidSubscription)
	}
	for i, no := range row.LineNo {
		o.ExternalLines = append(o.ExternalLines, fulfillment.ExternalLine{LineNo: no, SKU: row.LineSKU[i], Quantity: row.LineQuantity[i],
			UnitPrice:   fulfillment.Money{Currency: row.LineCurrency[i], MinorUnits: row.LineMinorUnits[i]},
			Destination: row.LineDestination[i]})
	}
	for i, no := range row.LicenseLineNo {
		o.LicenseLines = append(o.LicenseLines, fulfillment.LicenseLine{LineNo: no, Quantity: row.LicenseQuantity[i]})
	}
	for i, no := range row.BalanceLineNo {
		o.BalanceLines = append(o.BalanceLines, fulfillment.BalanceLine{LineNo: no, Account: row.BalanceAccount[i],
			Amount: fulfillment.Money{Currency: row.BalanceCurrency[i], MinorUnits: row.BalanceMinor[i]}})
	}
	return o, nil
}

// forEachRow calls fn for every row and closes rows.
func forEachRow(rows pgx.Rows, fn func(pgx.Rows) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}
