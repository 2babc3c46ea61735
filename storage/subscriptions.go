package storage

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.SubscriptionStore = (*Store)(nil)

const subscriptionColumns = `id, org_id, environment, provider, provider_subscription_id, customer_ref, plan_id,
	state, periods, period_start, period_end, last_event_at, access_ended_at, created_at, updated_at, cancelled_at,
	EXISTS (SELECT 1 FROM subscription_periods p WHERE p.subscription_id = subscriptions.id
		AND p.period = subscriptions.periods AND p.refunded_at IS NOT NULL) AS last_period_refunded`

// lockedSubscriptions are the subscriptions a transaction locked, by
// provider key, as the decisions so far left them.
type lockedSubscriptions map[fulfillment.SubscriptionKey]*fulfillment.SubscriptionRecord

// lockSubscriptions locks the subscriptions where selects, in id order (so
// that concurrent transactions cannot deadlock on them), and reads their
// paid periods in the same round trip.
//
// where selects their ids first (an init plan), and the lock reads each
// by its primary key alone. This is the rule of every statement here that
// locks rows another transaction may be updating. When a lock waits for
// such a transaction, PostgreSQL rechecks the row's new version against
// the statement once that transaction commits (EvalPlanQual), and a plan
// that reached the locked table through a join with a subquery of ids (a
// UNION ALL of them, as this statement had) left the row out of its
// result: no error, one row fewer. The batch then decided as if the
// subscription did not exist (TestALockWaitedForKeepsItsRowOnceTheHolderUpdatesIt;
// make chaos found it). Locked by id alone, a row is rechecked against
// its id, which no update changes.
func lockSubscriptions(ctx context.Context, tx querier, where string, args ...any) (lockedSubscriptions, error) {
	rows, _ := tx.Query(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions
		WHERE id = ANY (ARRAY(SELECT id FROM subscriptions WHERE `+where+`)) ORDER BY id FOR UPDATE`, args...)
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fulfillment.SubscriptionRecord, error) {
		return scanSubscription(r)
	})
	if err != nil {
		return nil, fmt.Errorf("locking subscriptions: %w", interpret(err))
	}
	locked := make(lockedSubscriptions, len(list))
	if len(list) == 0 {
		return locked, nil
	}
	byID := make(map[string]*fulfillment.SubscriptionRecord, len(list))
	ids := make([]string, len(list))
	for i := range list {
		rec := &list[i]
		rec.Renewals = map[string]fulfillment.Renewal{}
		locked[rec.Key()], byID[rec.ID], ids[i] = rec, rec, rec.ID
	}
	// Read after the locks (in a statement of its own, it sees what the
	// previous holder committed): the periods, and which were refunded.
	rows, _ = tx.Query(ctx, `SELECT subscription_id::text, period_key, period, coalesce(payment_id, ''), starts_at, ends_at,
		refunded_at IS NOT NULL, paid_at, purchase
		FROM subscription_periods
		WHERE subscription_id = ANY($1::uuid[])`, ids)
	err = forEachRow(rows, func(row pgx.Rows) error {
		var (
			id     string
			key    string
			rn     fulfillment.Renewal
			paidAt *time.Time
		)
		if err := row.Scan(&id, &key, &rn.Period, &rn.PaymentID, &rn.Start, &rn.End, &rn.Refunded, &paidAt, &rn.Purchase); err != nil {
			return err
		}
		if paidAt != nil {
			rn.PaidAt = *paidAt
		}
		rec := byID[id]
		rec.Renewals[key] = rn
		if rn.Period == rec.Periods {
			rec.LastPeriodRefunded = rn.Refunded
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading subscription periods: %w", interpret(err))
	}
	return locked, nil
}

// lockSubscription locks the one subscription where selects.
func lockSubscription(ctx context.Context, tx querier, where string, args ...any) (*fulfillment.SubscriptionRecord, error) {
	locked, err := lockSubscriptions(ctx, tx, where, args...)
	if err != nil {
		return nil, err
	}
	for _, rec := range locked {
		return rec, nil
	}
	return nil, fulfillment.ErrSubscriptionNotFound
}

// byProviderKey selects a subscription by its provider key ($1 to $4).
const byProviderKey = `(org_id, environment, provider, provider_subscription_id) = ($1, $2, $3, $4)`

// createSubscription creates the subscription ref names unless it exists,
// and locks it. It records the subscription in late, as created when it
// created it (its late-match lock exclusive, else shared): the events that
// came before it are queued again at the end of the transaction
// (lateMatches).
func createSubscription(ctx context.Context, tx querier, ref fulfillment.SubscriptionRef, late *lateMatches) (*fulfillment.SubscriptionRecord, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO subscriptions (id, org_id, environment, provider, provider_subscription_id, customer_ref, plan_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT ON CONSTRAINT subscriptions_provider_key DO NOTHING`,
		id, ref.OrgID, ref.Environment, ref.Provider, ref.ProviderSubscriptionID, ref.CustomerRef, ref.PlanID)
	if err != nil {
		return nil, fmt.Errorf("recording subscription: %w", interpret(err))
	}
	late.addSubscription(ref.Key(), tag.RowsAffected() == 1)
	rec, err := lockSubscription(ctx, tx, byProviderKey, ref.OrgID, ref.Environment, ref.Provider, ref.ProviderSubscriptionID)
	if err == nil && rec.Key() != ref.Key() {
		// Given the provider's id by another transaction while the lock
		// waited (the lock finds by id, then locks).
		return nil, fulfillment.ErrSubscriptionNotFound
	}
	return rec, err
}

// SubscriptionApply implements fulfillment.SubscriptionStore.
func (s *Store) SubscriptionApply(ctx context.Context, ref fulfillment.SubscriptionRef, ev fulfillment.SubscriptionEvent, eventRef string, plan fulfillment.Plan) (fulfillment.Outcome, fulfillment.SubscriptionRecord, error) {
	var (
		out fulfillment.Outcome
		rec *fulfillment.SubscriptionRecord
		q   queued
	)
	late := &lateMatches{}
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		if rec, err = createSubscription(ctx, tx, ref, late); err != nil {
			return err
		}
		out = fulfillment.DecideSubscription(ev, rec.Subscription, plan)
		rec.Apply(ev, out)
		if q, err = s.applySubscription(ctx, tx, rec, plan, ev, subscriptionCause{eventRef: eventRef}, out); err != nil {
			return err
		}
		return late.requeue(ctx, tx, s.lateMatch)
	})
	if err != nil {
		return out, fulfillment.SubscriptionRecord{}, err
	}
	s.wake(q)
	s.wakeLate(late.queued)
	return out, *rec, nil
}

// SubscriptionSweep implements fulfillment.SubscriptionStore.
func (s *Store) SubscriptionSweep(ctx context.Context, id string, plan fulfillment.Plan, now time.Time) (bool, error) {
	swept := false
	var q queued
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		rec, err := lockSubscription(ctx, tx, `id = $1::uuid`, id)
		if err != nil {
			return err
		}
		swept, q, err = s.sweep(ctx, tx, rec, plan, now)
		return err
	})
	if err != nil {
		return false, err
	}
	s.wake(q)
	return swept, nil
}

// sweep ends rec's access at now when the rules say so.
func (s *Store) sweep(ctx context.Context, tx pgx.Tx, rec *fulfillment.SubscriptionRecord, plan fulfillment.Plan, now time.Time) (bool, queued, error) {
	out, ok := fulfillment.SweepSubscription(rec.Subscription, plan, now)
	if !ok {
		return false, queued{}, nil
	}
	ev := fulfillment.SubscriptionEvent{OccurredAt: now}
	rec.Apply(ev, out)
	q, err := s.applySubscription(ctx, tx, rec, plan, ev, subscriptionCause{eventRef: "sweep"}, out)
	return err == nil, q, err
}

// applySubscription applies out, the decision of ev about rec, in tx;
// rec is the subscription as the decision left it. It reports what it
// queued for listeners.
func (s *Store) applySubscription(ctx context.Context, tx pgx.Tx, rec *fulfillment.SubscriptionRecord, plan fulfillment.Plan, ev fulfillment.SubscriptionEvent, cause subscriptionCause, out fulfillment.Outcome) (queued, error) {
	w := s.newEffectWriter()
	if err := w.subscriptionStep(rec, plan, ev, cause, out); err != nil {
		return queued{}, err
	}
	b := &pgx.Batch{}
	q, err := w.write(b)
	if err != nil {
		return q, err
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return q, fmt.Errorf("applying subscription decision: %w", interpret(err))
	}
	return q, nil
}

// nullTime is t, or NULL for the zero time.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// lockEventSubscriptions locks the subscriptions the batch's events are
// decided against (fulfillment.SubscriptionKeys: those they name, those
// of the orders they match, and those the orders' payments paid; and
// fulfillment.RefundedPayments: those whose periods the payments of
// refunds naming neither paid), in id order.
func lockEventSubscriptions(ctx context.Context, tx querier, events []leasedEvent, orders map[fulfillment.OrderKey]*fulfillment.LockedOrder) (lockedSubscriptions, error) {
	evs := make([]fulfillment.ProviderEvent, len(events))
	for i, le := range events {
		evs[i] = le.ev
	}
	keys, ids := fulfillment.SubscriptionKeys(evs, orders)
	var org, env, provider, id []string
	for _, k := range keys {
		org, env, provider, id = append(org, k.OrgID), append(env, string(k.Environment)), append(provider, string(k.Provider)), append(id, k.ID)
	}
	var pOrg, pEnv, pProvider, pPayment []string
	for _, p := range fulfillment.RefundedPayments(evs, orders) {
		pOrg, pEnv = append(pOrg, p.OrgID), append(pEnv, string(p.Environment))
		pProvider, pPayment = append(pProvider, string(p.Provider)), append(pPayment, p.PaymentID)
	}
	switch {
	case len(ids) > 0 || len(pPayment) > 0:
		// (A UNION of ids, not an OR of the conditions, which no index
		// serves: the table would be scanned.) The subscriptions whose
		// periods refunded payments paid are found by the periods'
		// payment index.
		return lockSubscriptions(ctx, tx, `id IN (
			SELECT s.id FROM subscriptions s WHERE (s.org_id, s.environment, s.provider, s.provider_subscription_id) IN (
				SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]))
			UNION ALL SELECT unnest($5::uuid[])
			UNION ALL SELECT s.id FROM subscription_periods p JOIN subscriptions s ON s.id = p.subscription_id
				WHERE p.payment_id = ANY($9::text[]) AND (s.org_id, s.environment, s.provider, p.payment_id) IN (
					SELECT * FROM unnest($6::text[], $7::text[], $8::text[], $9::text[])))`,
			org, env, provider, id, ids, pOrg, pEnv, pProvider, pPayment)
	case len(id) > 0:
		return lockSubscriptions(ctx, tx, `(org_id, environment, provider, provider_subscription_id) IN (
			SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]))`, org, env, provider, id)
	}
	return lockedSubscriptions{}, nil
}
