package storage

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/internal/failpoint"
)

// maxLateMatches bounds the events one order's or one transaction's
// subscriptions' creation queues again (the oldest first); any beyond it
// stay unmatched, their items open.
const maxLateMatches = 1000

// LateMatchActor is who the service records as having queued again an
// event whose order or subscription was created after it (the replay's
// replayed_by, the item's resolved_by).
const LateMatchActor = "service"

// lateMatchDetail starts the replayed_by_detail of a late match's replay:
// the processor reads it back to say, in the decision, that the event came
// first.
const lateMatchDetail = "late match: "

// unmatchedEvent is the condition on a locked event e that a late match
// queues again: it is still unmatched (not decided again meanwhile).
const unmatchedEvent = `e.state = 'unmatched'`

// awaitingEvent is the condition on a locked event e, a payment that paid
// a subscription's period for want of the merchant order it names
// (fulfillment.Step.AwaitedOrder), that a late match of that order queues
// again: it is not pending, and was not decided for an order since (once
// it is, it is the order's, and never queued again by it).
const awaitingEvent = `e.state = 'processed' AND e.order_id IS NULL`

// lateMatchStatement is the statement that queues again the events late
// selects, as rows (id, link), that are still as wanted says (a condition
// on the locked event e: unmatchedEvent, awaitingEvent): the event, and
// the order or subscription (column linkColumn of its item) it names,
// created after it. Each event gets a replay record by the service whose
// detail is detail (an expression over the event's row e; the timeline
// shows that the event came first), a fresh work row, and its unmatched_payment item
// resolved as matched_later with note, linked to what it names
// (inboxReplay). At most maxLateMatches of them, the oldest. The events
// are locked: a concurrent replay of one waits, then finds it pending.
// The lock reads them by id alone (the ids of late, an init plan), so that
// an event updated while it waits is rechecked against its own row, not
// a join (see lockSubscriptions); what each names is joined after the
// lock. It
// returns how many it queued, and when it queued any, tells the other
// replicas' inbox workers, on commit (a NOTIFY in the transaction, unlike
// the signal sent after it, survives a crash right after the commit).
func lateMatchStatement(late, wanted, linkColumn, detail, note string) string {
	return `
	WITH late AS MATERIALIZED (` + late + `
	), held AS MATERIALIZED (
		SELECT e.id FROM inbox_events e
		WHERE e.id = ANY (ARRAY(SELECT id FROM late)) AND (` + wanted + `)
		ORDER BY e.id
		LIMIT ` + strconv.Itoa(maxLateMatches) + `
		FOR UPDATE
	), locked AS MATERIALIZED (
		SELECT DISTINCT ON (h.id) h.id, late.link FROM held h JOIN late USING (id) ORDER BY h.id, late.link
	), ` + inboxReplay("SELECT id FROM locked", "'"+LateMatchActor+"'", "'"+lateMatchDetail+"' || "+detail) + `, items AS (
		UPDATE reconciliation_items r SET state = 'resolved', resolution = '` + string(fulfillment.ResolutionMatchedLater) + `',
			resolved_at = clock_timestamp(), resolved_by = '` + LateMatchActor + `',
			resolution_note = '` + note + `', ` + linkColumn + ` = l.link
		FROM locked l
		WHERE r.inbox_event_id = l.id AND r.kind = '` + string(fulfillment.ReconUnmatchedPayment) + `' AND r.state = 'open'
			AND l.id IN (SELECT id FROM done)
	)
	SELECT count(*), CASE WHEN count(*) > 0 THEN pg_notify('` + inboxChannel + `', '') END FROM done`
}

// lateMatchSQL queues again, in the transaction that creates order $6, the
// events of its org ($1) and environment ($2) that were decided unmatched
// and name its merchant order id ($3) or checkout session ($4, NULL for
// none), and the payments naming its merchant order id that paid a
// subscription's period for want of it (awaitingEvent), received within
// the late match window ($5) (lateMatchStatement). The events are found
// among the unresolved ones, through their partial indexes of unmatched
// events; the payments by the periods they paid, through theirs of the
// periods that await an order.
var lateMatchSQL = lateMatchStatement(`
		SELECT event_id AS id, $6::uuid AS link FROM inbox_unresolved
		WHERE state = 'unmatched' AND org_id = $1 AND environment = $2 AND merchant_order_id = $3
			AND received_at > now() - $5::interval
		UNION
		SELECT event_id, $6::uuid FROM inbox_unresolved
		WHERE state = 'unmatched' AND org_id = $1 AND environment = $2 AND checkout_session_id = $4
			AND received_at > now() - $5::interval
		UNION
		SELECT p.inbox_event_id, $6::uuid FROM subscription_periods p
		JOIN subscriptions s ON s.id = p.subscription_id AND s.org_id = $1 AND s.environment = $2
		JOIN inbox_events e ON e.id = p.inbox_event_id AND e.received_at > now() - $5::interval
		WHERE p.awaited_merchant_order_id = $3`,
	"("+unmatchedEvent+") OR ("+awaitingEvent+")", "order_id", "'order ' || $6::text || ' was created after this event'",
	"the order was created after the payment; the payment is processed again against it")

// lateStartSQL queues again, in the transaction that registers attempt $4
// (its provider order id) of order $6, the events of its org ($1) and
// environment ($2) decided unmatched that name the attempt as their
// checkout session, received within the late match window ($5); $3 is
// unused (NULL) (lateMatchStatement).
var lateStartSQL = lateMatchStatement(`
		SELECT event_id AS id, $6::uuid AS link FROM inbox_unresolved
		WHERE state = 'unmatched' AND org_id = $1 AND environment = $2 AND checkout_session_id = $4
			AND received_at > now() - $5::interval AND $3::text IS NULL`,
	unmatchedEvent, "order_id", "'payment attempt ' || $4 || ' of order ' || $6::text || ' was registered after this event'",
	"the payment attempt was registered after the payment; the payment is processed again against its order")

// lateSubscriptionSQL queues again the events that were decided unmatched
// and name, by provider key ($1 to $4, arrays), a subscription that exists
// now, received within the late match window ($5)
// (lateMatchStatement). The events are found among the unresolved ones,
// through their partial index of unmatched events by subscription. A
// refund that names a payment waits for a period paid by it
// (latePaymentSQL): it is queued again by the subscription only when such
// a period is the subscription's already (the subscription takes the key
// the refund names after that period was paid).
var lateSubscriptionSQL = lateMatchStatement(`
		SELECT u.event_id AS id, s.id AS link
		FROM subscriptions s
		JOIN inbox_unresolved u ON u.state = 'unmatched' AND u.org_id = s.org_id AND u.environment = s.environment
			AND u.provider = s.provider AND u.subscription_id = s.provider_subscription_id
			AND u.received_at > now() - $5::interval
			AND (u.payment_id IS NULL OR EXISTS (SELECT 1 FROM subscription_periods p
				WHERE p.subscription_id = s.id AND p.payment_id = u.payment_id))
		WHERE (s.org_id, s.environment, s.provider, s.provider_subscription_id) IN (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]))`,
	unmatchedEvent, "subscription_id", "'subscription ' || e.subscription_id || ' was created after this event'",
	"the subscription was created after the payment; the payment is processed again against it")

// latePaymentSQL queues again the refunds that were decided unmatched and
// name, by provider key ($1 to $4, arrays), a payment that paid a period
// now, received within the late match window ($5) (lateMatchStatement):
// each is queued against the subscription of that period, the one it
// names when it names one. The refunds are found among the unresolved
// events through their partial index by payment, the periods through
// theirs.
var latePaymentSQL = lateMatchStatement(`
		SELECT DISTINCT ON (u.event_id) u.event_id AS id, s.id AS link
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS k(org_id, environment, provider, payment_id)
		JOIN inbox_unresolved u ON u.state = 'unmatched' AND u.org_id = k.org_id AND u.environment = k.environment
			AND u.provider = k.provider AND u.payment_id = k.payment_id AND u.received_at > now() - $5::interval
		JOIN subscription_periods p ON p.payment_id = k.payment_id
		JOIN subscriptions s ON s.id = p.subscription_id AND s.org_id = k.org_id AND s.environment = k.environment
			AND s.provider = k.provider AND (u.subscription_id IS NULL OR u.subscription_id = s.provider_subscription_id)
		ORDER BY u.event_id, s.id`,
	unmatchedEvent, "subscription_id", "'a period paid by payment ' || e.payment_id || ' was recorded after this refund'",
	"the payment was recorded after its refund; the refund is processed again against the period it paid")

// lateOrderByEventSQL queues again the events of $1 (decided unmatched in
// this transaction) that an order created since names, by merchant order
// id or checkout session, or a payment start registered since names by its
// provider order id, received within the late match window ($2)
// (lateMatchStatement).
var lateOrderByEventSQL = lateMatchStatement(`
		SELECT DISTINCT ON (e.id) e.id, m.link
		FROM inbox_events e
		CROSS JOIN LATERAL (
			SELECT o.id AS link FROM orders o
			WHERE o.org_id = e.org_id AND o.environment = e.environment
				AND (o.merchant_order_id = e.merchant_order_id OR o.checkout_session_id = e.checkout_session_id)
			UNION ALL
			SELECT ps.order_id FROM payment_starts ps
			WHERE ps.org_id = e.org_id AND ps.environment = e.environment AND ps.provider_order_id = e.checkout_session_id) m
		WHERE e.id = ANY($1) AND e.state = 'unmatched' AND e.received_at > now() - $2::interval
		ORDER BY e.id, m.link`,
	unmatchedEvent, "order_id", "'order ' || (SELECT l.link FROM locked l WHERE l.id = e.id)::text || ' was created after this event'",
	"the order was created after the payment; the payment is processed again against it")

// lateAwaitedSQL queues again the payments of $1 (decided in this
// transaction) that paid a subscription's period for want of the merchant
// order they name (fulfillment.Step.AwaitedOrder), when an order created
// since has that id, received within the late match window ($2)
// (lateMatchStatement). The order rules then decide each for its order.
var lateAwaitedSQL = lateMatchStatement(`
		SELECT e.id, o.id AS link
		FROM inbox_events e
		JOIN orders o ON o.org_id = e.org_id AND o.environment = e.environment AND o.merchant_order_id = e.merchant_order_id
		WHERE e.id = ANY($1) AND e.received_at > now() - $2::interval`,
	awaitingEvent, "order_id", "'order ' || (SELECT l.link FROM locked l WHERE l.id = e.id)::text || ' was created after this event'",
	"the order was created after the payment; the payment is processed again against it")

// requeueLateEvents queues again, in tx, the unmatched events that order
// id would have matched had it existed, by its merchant order id or the
// checkout session, with statement (lateMatchSQL for an order's creation:
// both keys, and the payments that paid a subscription's period for want
// of the order; lateStartSQL for a payment start: the attempt's provider
// order id as the session, no merchant order id), after taking those
// keys' locks (lateMatches), and tells the other replicas' inbox workers
// when there are any. It returns how many.
func (s *Store) requeueLateEvents(ctx context.Context, tx pgx.Tx, statement string, id uuid.UUID, org string,
	env fulfillment.Environment, merchantOrderID, checkoutSessionID string) (int, error) {
	l := &lateMatches{}
	for _, k := range []fulfillment.OrderKey{
		{OrgID: org, Environment: env, Field: fulfillment.ByMerchantOrderID, Value: merchantOrderID},
		{OrgID: org, Environment: env, Field: fulfillment.ByCheckoutSessionID, Value: checkoutSessionID},
	} {
		if k.Value != "" {
			l.lock(orderLockKey(k), true)
		}
	}
	b := &pgx.Batch{}
	l.queueLocks(b)
	var n int
	b.Queue(statement, org, env, opt(merchantOrderID), opt(checkoutSessionID), s.lateMatch, id).
		QueryRow(func(row pgx.Row) error { return row.Scan(&n, nil) })
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return 0, fmt.Errorf("queueing the events that came before the order: %w", interpret(err))
	}
	return n, nil
}

// lateMatchLock is the first key of the transaction advisory locks that
// order, per key an event names (an order's merchant order id or checkout
// session, a subscription's provider key), the transactions that create
// what it names after those that decide such an event unmatched (see
// lateMatches). (The two-key locks are apart from the one-key locks of the
// queue owners and the migrations.)
const lateMatchLock = 230

// lateMatches are what a transaction must queue again at its end, after
// its decisions are written: the unmatched events of the subscriptions it
// created, its own events it decided unmatched whose order or
// subscription now exists, and its own payments that paid a
// subscription's period for want of the order they name, which now
// exists.
//
// The locks close the race between a transaction that decides an event
// unmatched because what it names does not exist (yet) and one that
// creates it: neither sees what the other has not committed. The creator
// takes the lock of each key of what it created exclusively, the decider
// those its unmatched events name shared, each at its end, and both then
// look for the unmatched events of what exists, in a statement of its own
// (which sees what was committed before it began). Whichever takes a lock
// second waits for the other's commit and then finds what it left: the
// creator, the events decided unmatched; the decider, the order or
// subscription — and queues its own events again. The locks are taken in
// one order (by hash), after every row lock of the transaction.
//
// One wait can still close a cycle: a creator that holds its lock and
// queues an event again waits for the event's row, which a batch deciding
// that event anew (it was unmatched before, and was replayed) has written
// and holds while it waits for the creator's lock. PostgreSQL breaks such a
// deadlock after deadlock_timeout by rolling one of the two back: a batch
// is retried by its queue, and an order's creation, a payment start or a
// subscription's creation by the API runs again (withRetriedTx), to find
// the event decided.
type lateMatches struct {
	locks     map[string]bool                      // lock key → exclusive
	subs      map[fulfillment.SubscriptionKey]bool // whose unmatched events to queue again
	payments  map[fulfillment.RefundedPayment]bool // whose unmatched refunds to queue again
	unmatched []int64                              // events decided unmatched here that name an order
	awaited   []int64                              // payments decided here that paid a period awaiting their order
	queued    int                                  // events queued again, once written
}

// lock records the lock of key, exclusive or shared (exclusive wins).
func (l *lateMatches) lock(key string, exclusive bool) {
	if l.locks == nil {
		l.locks = map[string]bool{}
	}
	l.locks[key] = l.locks[key] || exclusive
}

// addSubscription records key, created by the transaction or named by an
// event it decided unmatched.
func (l *lateMatches) addSubscription(key fulfillment.SubscriptionKey, created bool) {
	if key.ID == "" {
		return
	}
	if l.subs == nil {
		l.subs = map[fulfillment.SubscriptionKey]bool{}
	}
	l.subs[key] = true
	l.lock(subscriptionLockKey(key), created)
}

// addPayment records payment p, which paid a period recorded by the
// transaction (paid) or is refunded by an event it decided unmatched.
func (l *lateMatches) addPayment(p fulfillment.RefundedPayment, paid bool) {
	if l.payments == nil {
		l.payments = map[fulfillment.RefundedPayment]bool{}
	}
	l.payments[p] = true
	l.lock(paymentLockKey(p), paid)
}

// addUnmatched records event le, decided unmatched by the transaction: it
// waits for the subscription it names, for a period paid by the payment
// it refunds, and for the order it names unless it is a subscription's
// lifecycle event (which no order decides).
func (l *lateMatches) addUnmatched(le leasedEvent) {
	l.addSubscription(le.ev.SubscriptionKey(), false)
	if p, ok := le.ev.WaitsForItsPayment(); ok {
		l.addPayment(p, false)
	}
	if le.ev.OfSubscriptionAlone() {
		return
	}
	keys := le.ev.OrderKeys()
	for _, k := range keys {
		l.lock(orderLockKey(k), false)
	}
	if len(keys) > 0 {
		l.unmatched = append(l.unmatched, le.id)
	}
}

// addAwaited records event id, a payment the transaction decided that
// paid a subscription's first period, now or before, for want of order k,
// the merchant order it names (fulfillment.Step.AwaitedOrder): it waits
// for that order, as an unmatched event does, under that order's lock.
func (l *lateMatches) addAwaited(id int64, k fulfillment.OrderKey) {
	l.lock(orderLockKey(k), false)
	l.awaited = append(l.awaited, id)
}

// subscriptionLockKey and orderLockKey are the texts whose hashes are the
// locks of a subscription's and an order's keys.
func subscriptionLockKey(k fulfillment.SubscriptionKey) string {
	return "subscription\x1f" + k.OrgID + "\x1f" + string(k.Environment) + "\x1f" + string(k.Provider) + "\x1f" + k.ID
}

func paymentLockKey(p fulfillment.RefundedPayment) string {
	return "payment\x1f" + p.OrgID + "\x1f" + string(p.Environment) + "\x1f" + string(p.Provider) + "\x1f" + p.PaymentID
}

func orderLockKey(k fulfillment.OrderKey) string {
	return "order\x1f" + k.OrgID + "\x1f" + string(k.Environment) + "\x1f" + string(k.Field) + "\x1f" + k.Value
}

// queueLocks adds to b the statement that takes the locks, in the order of
// their hashes (two keys of one hash are one lock, exclusive if either
// is).
func (l *lateMatches) queueLocks(b *pgx.Batch) {
	if len(l.locks) == 0 {
		return
	}
	keys := make([]string, 0, len(l.locks))
	for k := range l.locks {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	exclusive := make([]bool, len(keys))
	for i, k := range keys {
		exclusive[i] = l.locks[k]
	}
	b.Queue(`
		SELECT CASE WHEN x THEN pg_advisory_xact_lock($3, h) ELSE pg_advisory_xact_lock_shared($3, h) END
		FROM (SELECT hashtext(k) AS h, bool_or(x) AS x FROM unnest($1::text[], $2::bool[]) AS t(k, x)
			GROUP BY 1 ORDER BY 1) locks`, keys, exclusive, lateMatchLock)
}

// queue adds to b the statements that take the locks and queue the events
// again, within window; l.queued holds how many once b is sent. Nothing
// when there is nothing to look for.
func (l *lateMatches) queue(b *pgx.Batch, window time.Duration) {
	l.queueLocks(b)
	count := func(what string) func(pgx.Row) error {
		return func(row pgx.Row) error {
			var n int
			if err := row.Scan(&n, nil); err != nil {
				return fmt.Errorf("queueing the events that came before their %s: %w", what, interpret(err))
			}
			l.queued += n
			return nil
		}
	}
	if len(l.subs) > 0 {
		var org, env, provider, id []string
		for k := range l.subs {
			org, env, provider, id = append(org, k.OrgID), append(env, string(k.Environment)), append(provider, string(k.Provider)), append(id, k.ID)
		}
		b.Queue(lateSubscriptionSQL, org, env, provider, id, window).QueryRow(count("subscription"))
	}
	if len(l.payments) > 0 {
		var org, env, provider, id []string
		for p := range l.payments {
			org, env, provider, id = append(org, p.OrgID), append(env, string(p.Environment)), append(provider, string(p.Provider)), append(id, p.PaymentID)
		}
		b.Queue(latePaymentSQL, org, env, provider, id, window).QueryRow(count("payment"))
	}
	if len(l.unmatched) > 0 {
		b.Queue(lateOrderByEventSQL, l.unmatched, window).QueryRow(count("order"))
	}
	if len(l.awaited) > 0 {
		b.Queue(lateAwaitedSQL, l.awaited, window).QueryRow(count("order"))
	}
}

// requeue takes the locks and queues the events again in tx (queue), on
// its own round trip.
func (l *lateMatches) requeue(ctx context.Context, tx pgx.Tx, window time.Duration) error {
	b := &pgx.Batch{}
	l.queue(b, window)
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("queueing the events that came before what they name: %w", interpret(err))
	}
	return nil
}

// wakeLate wakes this process's inbox workers after a commit that queued n
// events again (nothing when n is 0).
func (s *Store) wakeLate(n int) {
	if n == 0 {
		return
	}
	// Committed: a crash from here on leaves the events queued, for any
	// replica to process.
	failpoint.Inject("late-match-after-commit")
	s.inboxSignal.committed()
}
