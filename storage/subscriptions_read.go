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

// The reads of the subscription API: creating one by hand, one with its
// periods, listings, and the one indexed read CheckAccess makes. Customer
// references may carry personal data: no error message here quotes one.

var _ fulfillment.SubscriptionReader = (*Store)(nil)

// SubscriptionCreate implements fulfillment.SubscriptionReader. The unique
// provider key decides which of several concurrent identical requests
// creates the subscription; the others insert nothing and return the
// committed one. The transaction that creates it queues again the events
// that came before it (lateMatches).
func (s *Store) SubscriptionCreate(ctx context.Context, ref fulfillment.SubscriptionRef) (fulfillment.SubscriptionRecord, bool, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return fulfillment.SubscriptionRecord{}, false, fmt.Errorf("generating subscription id: %w", err)
	}
	var rec fulfillment.SubscriptionRecord
	var late *lateMatches
	// Run again after a deadlock, as OrderCreate (see lateMatches).
	err = s.withRetriedTx(ctx, func(tx pgx.Tx) error {
		late = &lateMatches{}
		var err error
		rec, err = scanSubscription(tx.QueryRow(ctx, `
			INSERT INTO subscriptions (id, org_id, environment, provider, provider_subscription_id, customer_ref, plan_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7)
			ON CONFLICT ON CONSTRAINT subscriptions_provider_key DO NOTHING
			RETURNING `+subscriptionColumns,
			id, ref.OrgID, ref.Environment, ref.Provider, ref.ProviderSubscriptionID, ref.CustomerRef, ref.PlanID))
		if err != nil {
			return err
		}
		late.addSubscription(ref.Key(), true)
		return late.requeue(ctx, tx, s.lateMatch)
	})
	if err == nil {
		s.wakeLate(late.queued)
		return rec, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return rec, false, fmt.Errorf("recording subscription: %w", interpret(err))
	}
	// The key exists: a new statement sees the committed winner.
	rec, err = s.subscriptionWhere(ctx, `(org_id, environment, provider, provider_subscription_id) = ($1, $2, $3, $4)`,
		ref.OrgID, ref.Environment, ref.Provider, ref.ProviderSubscriptionID)
	if err != nil {
		return rec, false, err
	}
	if rec.CustomerRef != ref.CustomerRef || rec.PlanID != ref.PlanID {
		what := "plan"
		if rec.CustomerRef != ref.CustomerRef {
			what = "customer"
		}
		// The provider's id is not quoted: the service makes some of the
		// customer's reference.
		return fulfillment.SubscriptionRecord{}, false, fmt.Errorf(
			"%w: subscription %s already exists under this provider_subscription_id with another %s",
			fulfillment.ErrConflict, rec.ID, what)
	}
	return rec, false, nil
}

// SubscriptionGet implements fulfillment.SubscriptionReader: the
// subscription and its newest periods in one round trip.
func (s *Store) SubscriptionGet(ctx context.Context, id string) (fulfillment.SubscriptionDetail, error) {
	var d fulfillment.SubscriptionDetail
	b := &pgx.Batch{}
	b.Queue(`SELECT `+subscriptionColumns+` FROM subscriptions WHERE id = $1::uuid`, id).QueryRow(func(row pgx.Row) error {
		var err error
		d.SubscriptionRecord, err = scanSubscription(row)
		return err
	})
	total := 0
	b.Queue(`SELECT period, starts_at, ends_at, period_key, coalesce(payment_id, ''), created_at, refunded_at, count(*) OVER ()
		FROM subscription_periods WHERE subscription_id = $1::uuid ORDER BY period DESC LIMIT $2`,
		id, fulfillment.MaxSubscriptionPeriods).Query(func(rows pgx.Rows) error {
		return forEachRow(rows, func(row pgx.Rows) error {
			var p fulfillment.PaidPeriod
			var refunded *time.Time
			if err := row.Scan(&p.Period, &p.Start, &p.End, &p.Bill, &p.PaymentID, &p.CreatedAt, &refunded, &total); err != nil {
				return err
			}
			if refunded != nil {
				p.RefundedAt = *refunded
			}
			d.Periods = append(d.Periods, p)
			return nil
		})
	})
	err := s.pool.SendBatch(ctx, b).Close()
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fulfillment.ErrSubscriptionNotFound
	}
	if err != nil {
		return d, fmt.Errorf("reading subscription: %w", interpret(err))
	}
	// Newest first as read; oldest first as shown.
	for i, j := 0, len(d.Periods)-1; i < j; i, j = i+1, j-1 {
		d.Periods[i], d.Periods[j] = d.Periods[j], d.Periods[i]
	}
	d.Omitted = total - len(d.Periods)
	return d, nil
}

// SubscriptionList implements fulfillment.SubscriptionReader.
func (s *Store) SubscriptionList(ctx context.Context, f fulfillment.SubscriptionFilter, beforeID string, limit int) ([]fulfillment.SubscriptionRecord, error) {
	var w where
	w.among("org_id", f.VisibleOrgs)
	w.eq("org_id", f.OrgID)
	w.eq("environment", string(f.Environment))
	w.eq("customer_ref", f.CustomerRef)
	w.eq("plan_id", f.PlanID)
	w.eq("state", string(f.State))
	if beforeID != "" {
		w.add("id < " + w.arg(beforeID) + "::uuid")
	}
	return s.querySubscriptions(ctx, "listing subscriptions",
		"SELECT "+subscriptionColumns+" FROM subscriptions"+w.sql()+" ORDER BY id DESC LIMIT "+w.arg(limit), w.args...)
}

// SubscriptionsOf implements fulfillment.SubscriptionReader: one statement
// on subscriptions_customer_idx, outside any transaction, without periods.
// Past the newest, it reads the ones whose paid period ends last among
// those that may still grant: many newer subscriptions that paid nothing
// (a checkout tried again and again) do not hide an older one that paid.
func (s *Store) SubscriptionsOf(ctx context.Context, orgID string, env fulfillment.Environment, customerRef, planID string) ([]fulfillment.SubscriptionRecord, error) {
	return s.querySubscriptions(ctx, "reading the subscriptions of a customer", `SELECT `+subscriptionColumns+` FROM subscriptions
		WHERE id IN (
			(SELECT id FROM subscriptions WHERE org_id = $1 AND environment = $2 AND customer_ref = $3 AND plan_id = $4
			ORDER BY id DESC LIMIT $5)
			UNION
			(SELECT id FROM subscriptions WHERE org_id = $1 AND environment = $2 AND customer_ref = $3 AND plan_id = $4
				AND periods > 0 AND state <> $6 AND access_ended_at IS NULL
			ORDER BY period_end DESC LIMIT $5))
		ORDER BY id DESC`,
		orgID, env, customerRef, planID, fulfillment.MaxSubscriptionsChecked, fulfillment.SubExpired)
}

// querySubscriptions runs a query of subscriptionColumns; what names it in
// errors.
func (s *Store) querySubscriptions(ctx context.Context, what, query string, args ...any) ([]fulfillment.SubscriptionRecord, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, interpret(err))
	}
	var recs []fulfillment.SubscriptionRecord
	err = forEachRow(rows, func(row pgx.Rows) error {
		rec, err := scanSubscription(row)
		recs = append(recs, rec)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, interpret(err))
	}
	return recs, nil
}

// subscriptionWhere reads the one subscription where selects.
func (s *Store) subscriptionWhere(ctx context.Context, where string, args ...any) (fulfillment.SubscriptionRecord, error) {
	rec, err := scanSubscription(s.pool.QueryRow(ctx, `SELECT `+subscriptionColumns+` FROM subscriptions WHERE `+where, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return rec, fulfillment.ErrSubscriptionNotFound
	}
	if err != nil {
		return rec, fmt.Errorf("reading subscription: %w", interpret(err))
	}
	return rec, nil
}

// scanSubscription reads subscriptionColumns (without the paid periods'
// renewals, which only the rules under the lock need).
func scanSubscription(row pgx.Row) (fulfillment.SubscriptionRecord, error) {
	var (
		r      fulfillment.SubscriptionRecord
		id     uuid.UUID
		bounds [4]*time.Time
	)
	if err := row.Scan(&id, &r.OrgID, &r.Environment, &r.Provider, &r.ProviderSubscriptionID, &r.CustomerRef, &r.PlanID,
		&r.State, &r.Periods, &bounds[0], &bounds[1], &bounds[2], &r.AccessEndedAt, &r.CreatedAt, &r.UpdatedAt, &bounds[3],
		&r.LastPeriodRefunded); err != nil {
		return fulfillment.SubscriptionRecord{}, err
	}
	r.ID = id.String()
	// NULL is "none": the zero time.
	for i, p := range []*time.Time{&r.PeriodStart, &r.PeriodEnd, &r.LastEventAt, &r.CancelledAt} {
		if bounds[i] != nil {
			*p = *bounds[i]
		}
	}
	r.AccessEnded = r.AccessEndedAt != nil
	return r, nil
}

// SubscriptionsOnUnconfiguredPlans counts the subscriptions whose access
// has not ended on each plan the store was not given (Options.Plans; at
// most 50 plans): what a configuration that lost a plan still has to
// serve. It reads the whole table once; the caller bounds it with ctx.
func (s *Store) SubscriptionsOnUnconfiguredPlans(ctx context.Context) (map[string]int64, error) {
	plans := make([]string, 0, len(s.plans))
	for id := range s.plans {
		plans = append(plans, id)
	}
	rows, _ := s.pool.Query(ctx, `
		SELECT plan_id, count(*) FROM subscriptions
		WHERE access_ended_at IS NULL AND plan_id <> ALL($1::text[])
		GROUP BY plan_id ORDER BY plan_id LIMIT 50`, plans)
	out := map[string]int64{}
	err := forEachRow(rows, func(r pgx.Rows) error {
		var (
			plan string
			n    int64
		)
		if err := r.Scan(&plan, &n); err != nil {
			return err
		}
		out[plan] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("counting subscriptions by plan: %w", interpret(err))
	}
	return out, nil
}
