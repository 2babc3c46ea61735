package storage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

var _ fulfillment.SubscriptionStore = (*Store)(nil)

const subscriptionColumns = `id, org_id, environment, provider, provider_subscription_id, customer_ref, plan_id,
	state, periods, period_start, period_end, last_event_at, access_ended_at, created_at, updated_at`

// lockSubscription reads a subscription and its paid periods under its
// row lock.
func lockSubscription(ctx context.Context, tx pgx.Tx, where string, args ...any) (fulfillment.SubscriptionRecord, error) {
	var (
		r      fulfillment.SubscriptionRecord
		id     uuid.UUID
		bounds [3]*time.Time
	)
	err := tx.QueryRow(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions WHERE `+where+` FOR UPDATE`, args...).Scan(
		&id, &r.OrgID, &r.Environment, &r.Provider, &r.ProviderSubscriptionID, &r.CustomerRef, &r.PlanID,
		&r.State, &r.Periods, &bounds[0], &bounds[1], &bounds[2], &r.AccessEndedAt, &r.CreatedAt, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("subscription %w", fulfillment.ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("locking subscription: %w", interpret(err))
	}
	r.ID = id.String()
	// NULL is "none": the zero time.
	for i, p := range []*time.Time{&r.PeriodStart, &r.PeriodEnd, &r.LastEventAt} {
		if bounds[i] != nil {
			*p = *bounds[i]
		}
	}
	r.AccessEnded = r.AccessEndedAt != nil
	rows, _ := tx.Query(ctx, `SELECT period_key, period, coalesce(payment_id, '') FROM subscription_periods
		WHERE subscription_id = $1`, id)
	r.Renewals = map[string]fulfillment.Renewal{}
	err = forEachRow(rows, func(row pgx.Rows) error {
		var (
			key string
			rn  fulfillment.Renewal
		)
		if err := row.Scan(&key, &rn.Period, &rn.PaymentID); err != nil {
			return err
		}
		r.Renewals[key] = rn
		return nil
	})
	if err != nil {
		return r, fmt.Errorf("reading subscription periods: %w", interpret(err))
	}
	return r, nil
}

// SubscriptionApply implements fulfillment.SubscriptionStore.
func (s *Store) SubscriptionApply(ctx context.Context, ref fulfillment.SubscriptionRef, ev fulfillment.SubscriptionEvent, eventRef string, plan fulfillment.Plan) (fulfillment.Outcome, fulfillment.SubscriptionRecord, error) {
	var (
		out fulfillment.Outcome
		rec fulfillment.SubscriptionRecord
	)
	id, err := uuid.NewV7()
	if err != nil {
		return out, rec, err
	}
	err = s.withTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
			INSERT INTO subscriptions (id, org_id, environment, provider, provider_subscription_id, customer_ref, plan_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT ON CONSTRAINT subscriptions_provider_key DO NOTHING`,
			id, ref.OrgID, ref.Environment, ref.Provider, ref.ProviderSubscriptionID, ref.CustomerRef, ref.PlanID); err != nil {
			return fmt.Errorf("recording subscription: %w", interpret(err))
		}
		var err error
		rec, err = lockSubscription(ctx, tx, `(org_id, environment, provider, provider_subscription_id) = ($1, $2, $3, $4)`,
			ref.OrgID, ref.Environment, ref.Provider, ref.ProviderSubscriptionID)
		if err != nil {
			return err
		}
		out = fulfillment.DecideSubscription(ev, rec.Subscription, plan)
		return applySubscription(ctx, tx, &rec, ev, eventRef, out)
	})
	return out, rec, err
}

// SubscriptionSweep implements fulfillment.SubscriptionStore.
func (s *Store) SubscriptionSweep(ctx context.Context, id string, plan fulfillment.Plan, now time.Time) (bool, error) {
	swept := false
	err := s.withTx(ctx, func(tx pgx.Tx) error {
		rec, err := lockSubscription(ctx, tx, `id = $1::uuid`, id)
		if err != nil {
			return err
		}
		out, ok := fulfillment.SweepSubscription(rec.Subscription, plan, now)
		if !ok {
			return nil
		}
		swept = true
		return applySubscription(ctx, tx, &rec, fulfillment.SubscriptionEvent{OccurredAt: now}, "sweep", out)
	})
	return swept, err
}

// applySubscription applies out, the decision of ev about rec, in tx:
// every effect the subscription rules make, in one place.
func applySubscription(ctx context.Context, tx pgx.Tx, rec *fulfillment.SubscriptionRecord, ev fulfillment.SubscriptionEvent, eventRef string, out fulfillment.Outcome) error {
	b := &pgx.Batch{}
	rec.Apply(ev, out)
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
			b.Queue(`INSERT INTO subscription_events (subscription_id, topic, period, payload)
				SELECT s.id, $2, s.periods, jsonb_build_object('type', $2::text, 'timestamp', `+payloadTimestamp+`,
					'data', jsonb_build_object('subscription_id', s.id, 'org_id', s.org_id, 'environment', s.environment,
						'customer_ref', s.customer_ref, 'plan_id', s.plan_id, 'state', $3::text, 'periods', $4::int,
						'period_end', $5::timestamptz))
				FROM subscriptions s WHERE s.id = $1::uuid
				ON CONFLICT ON CONSTRAINT subscription_events_once DO NOTHING`,
				rec.ID, e.Topic, rec.State, rec.Periods, rec.PeriodEnd)
		case fulfillment.OpenItem:
			subject := fulfillment.ItemSubject{SubscriptionID: rec.ID, PaymentID: ev.PaymentID, EventID: eventRef}
			b.Queue(`INSERT INTO reconciliation_items (kind, org_id, environment, subscription_id, provider, payment_id,
					detail, dedupe_key)
				VALUES ($1, $2, $3, $4::uuid, $5, $6, $7, $8)
				ON CONFLICT ON CONSTRAINT reconciliation_items_dedupe_key DO NOTHING`,
				e.Kind, rec.OrgID, rec.Environment, rec.ID, rec.Provider, opt(ev.PaymentID), out.Reason,
				fulfillment.ItemKey(e.Kind, subject))
		default:
			return fmt.Errorf("applying %T to a subscription: not an effect of the subscription rules", effect)
		}
	}
	var lastEventAt *time.Time
	if !rec.LastEventAt.IsZero() {
		lastEventAt = &rec.LastEventAt
	}
	b.Queue(`UPDATE subscriptions SET state = $2, periods = $3, period_start = $4, period_end = $5,
			last_event_at = $6, access_ended_at = CASE WHEN $7 THEN coalesce(access_ended_at, now()) END, updated_at = now()
		WHERE id = $1::uuid`,
		rec.ID, rec.State, rec.Periods, nullTime(rec.PeriodStart), nullTime(rec.PeriodEnd), lastEventAt, rec.AccessEnded)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("applying subscription decision: %w", interpret(err))
	}
	return nil
}

// nullTime is t, or NULL for the zero time.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
