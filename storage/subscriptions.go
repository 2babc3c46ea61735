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
	state, periods, period_start, period_end, last_event_at, access_ended_at, created_at, updated_at`

// lockedSubscriptions are the subscriptions a transaction locked, by
// provider key, as the decisions so far left them.
type lockedSubscriptions map[fulfillment.SubscriptionKey]*fulfillment.SubscriptionRecord

// lockSubscriptions locks the subscriptions where selects, in id order (so
// that concurrent transactions cannot deadlock on them), and reads their
// paid periods in the same round trip.
func lockSubscriptions(ctx context.Context, tx pgx.Tx, where string, args ...any) (lockedSubscriptions, error) {
	rows, _ := tx.Query(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions WHERE `+where+` ORDER BY id FOR UPDATE`, args...)
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
	rows, _ = tx.Query(ctx, `SELECT subscription_id::text, period_key, period, coalesce(payment_id, '') FROM subscription_periods
		WHERE subscription_id = ANY($1::uuid[])`, ids)
	err = forEachRow(rows, func(row pgx.Rows) error {
		var (
			id  string
			key string
			rn  fulfillment.Renewal
		)
		if err := row.Scan(&id, &key, &rn.Period, &rn.PaymentID); err != nil {
			return err
		}
		byID[id].Renewals[key] = rn
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading subscription periods: %w", interpret(err))
	}
	return locked, nil
}

// lockSubscription locks the one subscription where selects.
func lockSubscription(ctx context.Context, tx pgx.Tx, where string, args ...any) (*fulfillment.SubscriptionRecord, error) {
	locked, err := lockSubscriptions(ctx, tx, where, args...)
	if err != nil {
		return nil, err
	}
	for _, rec := range locked {
		return rec, nil
	}
	return nil, fmt.Errorf("subscription %w", fulfillment.ErrNotFound)
}

// byProviderKey selects a subscription by its provider key ($1 to $4).
const byProviderKey = `(org_id, environment, provider, provider_subscription_id) = ($1, $2, $3, $4)`

// createSubscription creates the subscription ref names unless it exists,
// and locks it.
func createSubscription(ctx context.Context, tx pgx.Tx, ref fulfillment.SubscriptionRef) (*fulfillment.SubscriptionRecord, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO subscriptions (id, org_id, environment, provider, provider_subscription_id, customer_ref, plan_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT ON CONSTRAINT subscriptions_provider_key DO NOTHING`,
		id, ref.OrgID, ref.Environment, ref.Provider, ref.ProviderSubscriptionID, ref.CustomerRef, ref.PlanID); err != nil {
		return nil, fmt.Errorf("recording subscription: %w", interpret(err))
	}
	return lockSubscription(ctx, tx, byProviderKey, ref.OrgID, ref.Environment, ref.Provider, ref.ProviderSubscriptionID)
}

// SubscriptionApply implements fulfillment.SubscriptionStore.
func (s *Store) SubscriptionApply(ctx context.Context, ref fulfillment.SubscriptionRef, ev fulfillment.SubscriptionEvent, eventRef string, plan fulfillment.Plan) (fulfillment.Outcome, fulfillment.SubscriptionRecord, error) {
	var (
		out fulfillment.Outcome
		rec *fulfillment.SubscriptionRecord
		q   queued
	)
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		var err error
		if rec, err = createSubscription(ctx, tx, ref); err != nil {
			return err
		}
		out = fulfillment.DecideSubscription(ev, rec.Subscription, plan)
		rec.Apply(ev, out)
		q, err = s.applySubscription(ctx, tx, rec, plan, ev, subscriptionCause{eventRef: eventRef}, out)
		return err
	})
	if err != nil {
		return out, fulfillment.SubscriptionRecord{}, err
	}
	s.wake(q)
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

// subscriptionCause is what a subscription decision was made about, for
// the items it opens: an inbox event, or the sweeper.
type subscriptionCause struct {
	eventRef string
	inboxID  int64 // 0: none
}

// applySubscription applies out, the decision of ev about rec, in tx:
// every effect the subscription rules make, in one place; rec is the
// subscription as the decision left it (Subscription.Apply). It reschedules
// the subscription's sweep for when its access now ends, and reports what
// it queued for listeners.
func (s *Store) applySubscription(ctx context.Context, tx pgx.Tx, rec *fulfillment.SubscriptionRecord, plan fulfillment.Plan, ev fulfillment.SubscriptionEvent, cause subscriptionCause, out fulfillment.Outcome) (queued, error) {
	var q queued
	b := &pgx.Batch{}
	for _, effect := range out.Effects {
		switch e := effect.(type) {
		case fulfillment.GrantPeriod:
			// The unique keys make a repeated grant an error, never a
			// second period: the decision was made under the lock.
			b.Queue(`INSERT INTO subscription_periods (subscription_id, period, period_key, payment_id, starts_at, ends_at)
				VALUES ($1::uuid, $2, $3, $4, $5, $6)`, rec.ID, e.Period, ev.PeriodKey(), opt(ev.PaymentID), e.Start, e.End)
		case fulfillment.MoveSubscription, fulfillment.EndAccess:
			// Recorded with the subscription's row below.
		case fulfillment.Publish:
			q.add(s.queueSubscriptionPublish(b, rec, e.Topic))
		case fulfillment.OpenItem:
			queueItem(b, item{kind: e.Kind, detail: out.Reason, subject: fulfillment.ItemSubject{
				OrgID: rec.OrgID, Environment: rec.Environment, Provider: rec.Provider, SubscriptionID: rec.ID,
				PaymentID: ev.PaymentID, EventID: cause.eventRef, InboxID: cause.inboxID}})
		default:
			return q, fmt.Errorf("applying %T to a subscription: not an effect of the subscription rules", effect)
		}
	}
	b.Queue(`UPDATE subscriptions SET state = $2, periods = $3, period_start = $4, period_end = $5,
			last_event_at = $6, access_ended_at = CASE WHEN $7 THEN coalesce(access_ended_at, now()) END, updated_at = now()
		WHERE id = $1::uuid`,
		rec.ID, rec.State, rec.Periods, nullTime(rec.PeriodStart), nullTime(rec.PeriodEnd), nullTime(rec.LastEventAt), rec.AccessEnded)
	// The sweeper looks at the subscription when its access ends, unless
	// an event extends it first: this moves its sweep (and takes it from a
	// sweeper that holds it, which then finds it gone).
	if ends := rec.AccessEnds(plan); !rec.AccessEnded && !ends.IsZero() {
		b.Queue(`INSERT INTO subscription_sweeps (subscription_id, next_attempt_at) VALUES ($1::uuid, $2)
			ON CONFLICT (subscription_id) DO UPDATE SET next_attempt_at = EXCLUDED.next_attempt_at, state = 'pending',
				attempts = 0, lease_owner = NULL, lease_until = NULL, last_error = NULL, processed_at = NULL`, rec.ID, ends)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return q, fmt.Errorf("applying subscription decision: %w", interpret(err))
	}
	return q, nil
}

// queueSubscriptionPublish queues the subscription event topic of rec's
// current period (rec as the decision left it) for the feed and for every
// destination subscribed to it: once per subscription, topic and period.
func (s *Store) queueSubscriptionPublish(b *pgx.Batch, rec *fulfillment.SubscriptionRecord, topic fulfillment.Topic) queued {
	destinations := s.subscriptions[topic]
	b.Queue(`
		WITH event AS (
			INSERT INTO order_events (org_id, environment, subscription_id, period, topic, payload)
			SELECT s.org_id, s.environment, s.id, $4::int, $2::text,
				jsonb_build_object('type', $2::text, 'timestamp', `+payloadTimestamp+`,
					'data', jsonb_build_object('subscription_id', s.id, 'org_id', s.org_id, 'environment', s.environment,
						'provider', s.provider, 'provider_subscription_id', s.provider_subscription_id,
						'customer_ref', s.customer_ref, 'plan_id', s.plan_id, 'state', $3::text, 'periods', $4::int,
						'period_end', $5::timestamptz))
			FROM subscriptions s WHERE s.id = $1::uuid
			ON CONFLICT ON CONSTRAINT order_events_subscription_once DO NOTHING
			RETURNING org_id, environment, subscription_id, period, topic, payload
		)
		INSERT INTO outbox_messages (destination_id, topic, idempotency_key, org_id, environment, subscription_id,
			required, payload)
		SELECT d.id, e.topic, format($6::text, e.subscription_id, e.topic, e.period), e.org_id, e.environment,
			e.subscription_id, false, e.payload
		FROM event e, unnest($7::text[]) AS d (id)
		ON CONFLICT ON CONSTRAINT outbox_messages_key DO NOTHING`,
		rec.ID, topic, rec.State, rec.Periods, nullTime(rec.PeriodEnd), fulfillment.SubscriptionEventKeyFormat, destinations)
	return queued{messages: len(destinations) > 0, events: true}
}

// nullTime is t, or NULL for the zero time.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// lockEventSubscriptions locks the subscriptions the events name, in id
// order, after their orders.
func lockEventSubscriptions(ctx context.Context, tx pgx.Tx, events []leasedEvent) (lockedSubscriptions, error) {
	var org, env, provider, id []string
	for _, le := range events {
		if k := le.ev.SubscriptionKey(); k.ID != "" {
			org, env, provider, id = append(org, k.OrgID), append(env, string(k.Environment)), append(provider, string(k.Provider)), append(id, k.ID)
		}
	}
	if len(id) == 0 {
		return lockedSubscriptions{}, nil
	}
	return lockSubscriptions(ctx, tx, `(org_id, environment, provider, provider_subscription_id) IN (
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]))`, org, env, provider, id)
}
