package chaos

// What the subscription check reads of the database: the subscriptions,
// their paid periods, their events and the sweeps (loaded with the rest of
// the state by loadState, verify.go).

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// subRow is a stored subscription.
type subRow struct {
	id, providerID, customer, plan, state string
	periods                               int
	periodEnd, lastEventAt, cancelledAt   time.Time
	accessEnded                           bool
}

// subPeriodRow is one paid period.
type subPeriodRow struct {
	period       int
	key, payment string
	start, end   time.Time
}

func (p subPeriodRow) String() string {
	return fmt.Sprintf("%d %s %s %s..%s", p.period, p.key, p.payment, p.start.UTC().Format(time.RFC3339Nano), p.end.UTC().Format(time.RFC3339Nano))
}

// subscriptionState is what the subscription check reads of the database.
type subscriptionState struct {
	now     time.Time                 // the database's clock at the check
	rows    map[string]subRow         // by provider subscription id
	periods map[string][]subPeriodRow // by subscription id
	events  map[string]map[string]int // subscription id → topic|period → order_events rows
	// refunded are the keys of the periods marked refunded, by
	// subscription id.
	refunded map[string][]string
	// Sweeps that failed, or are due and not done.
	failedSweeps, dueSweeps int
}

// loadSubscriptions reads the subscriptions, their periods, events and
// sweeps into s.
func loadSubscriptions(ctx context.Context, db *pgxpool.Pool, s *dbState) error {
	ss := &subscriptionState{rows: map[string]subRow{}, periods: map[string][]subPeriodRow{}, events: map[string]map[string]int{},
		refunded: map[string][]string{}}
	var (
		row          subRow
		end, last    *time.Time
		cancelled    *time.Time
		subID, topic string
		p            subPeriodRow
		period, n    int
		refunded     bool
	)
	reads := []struct {
		what, query string
		dest        []any
		row         func()
	}{
		{"subscriptions", `
			SELECT id::text, provider_subscription_id, customer_ref, plan_id, state, periods, period_end, last_event_at,
				access_ended_at IS NOT NULL, cancelled_at
			FROM subscriptions`,
			[]any{&row.id, &row.providerID, &row.customer, &row.plan, &row.state, &row.periods, &end, &last, &row.accessEnded, &cancelled}, func() {
				row.periodEnd, row.lastEventAt, row.cancelledAt = deref(end), deref(last), deref(cancelled)
				ss.rows[row.providerID] = row
			}},
		{"subscription_periods", `
			SELECT subscription_id::text, period, period_key, coalesce(payment_id, ''), starts_at, ends_at, refunded_at IS NOT NULL
			FROM subscription_periods`,
			[]any{&subID, &p.period, &p.key, &p.payment, &p.start, &p.end, &refunded}, func() {
				ss.periods[subID] = append(ss.periods[subID], p)
				if refunded {
					ss.refunded[subID] = append(ss.refunded[subID], p.key)
				}
			}},
		{"subscription events", `
			SELECT subscription_id::text, topic, period, count(*) FROM order_events WHERE subscription_id IS NOT NULL GROUP BY 1, 2, 3`,
			[]any{&subID, &topic, &period, &n}, func() {
				if ss.events[subID] == nil {
					ss.events[subID] = map[string]int{}
				}
				ss.events[subID][topicKey(topic, period)] = n
			}},
		{"subscription_sweeps", `
			SELECT now(), count(*) FILTER (WHERE state = 'failed'), count(*) FILTER (WHERE state = 'pending' AND next_attempt_at <= now())
			FROM subscription_sweeps`,
			[]any{&ss.now, &ss.failedSweeps, &ss.dueSweeps}, func() {}},
	}
	for _, rd := range reads {
		rows, err := db.Query(ctx, rd.query)
		if err == nil {
			_, err = pgx.ForEachRow(rows, rd.dest, func() error { rd.row(); return nil })
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", rd.what, err)
		}
	}
	s.subs = ss
	return nil
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// topicKey names a subscription event: its topic and period.
func topicKey(topic string, period int) string { return fmt.Sprintf("%s|%d", topic, period) }
