package chaos

// The subscription side of a run: one Yolfi order in eight buys a period
// of a subscription (one "subscription" line naming a configured plan),
// paid by a payment.confirmed that names both the order and the
// subscription; the subscription then lives on events of its own, through
// the same retrying sender, under the same kills and outages: renewals
// (payment.confirmed without an order, one invoice and payment per period,
// dated a period apart) delivered twice at least, some announced again
// under another event id, some at the same moment, out of order; second
// payments of a paid renewal invoice; subscription.overdue and
// subscription.cancelled dated between the renewals, stale or not; and
// invoice.overdue of renewal invoices already paid.
//
// Every story is dated in the past (or a few hours ahead, which the
// service believes), so that some subscriptions' access is over by the
// time of the check: the sweeper of the processes being killed must end it,
// exactly once. For the check to know what the rules say, nothing may
// leave the sweeper a choice of moment: a subscription's renewals are sent
// once its first payment is processed (as a provider renews a period
// later), a cancellation that leaves no access once the renewals it must
// follow are processed, and no access runs out before the story's last
// event — which the workload's dates ensure (see planSubscription), and
// the check verifies.
//
// The stories are planned in subscriptions_plan.go, held back by the gate
// (gate.go), read back from the database (subscriptions_load.go), replayed
// through the rules (subscriptions_replay.go) and checked
// (check_subscriptions.go).

import (
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// The run's plans. The monthly plan's long grace keeps every subscription
// that is not cancelled in access while its story is told (its first period
// ended up to three months ago); the weekly plan's short one runs out
// during the run for the subscriptions made to lapse.
var (
	planMonthly = config.Plan{ID: "chaos-monthly", Months: 1, Grace: ptr(80 * 24 * time.Hour)}
	planWeekly  = config.Plan{ID: "chaos-weekly", Days: 7, Grace: ptr(36 * time.Hour)}
)

// sweepQueue is the sweeper's configuration: it looks for due sweeps
// often, and retries quickly, so that access ends within the run.
var sweepQueue = config.Queue{Workers: 2, Batch: 16, Lease: 2 * time.Second, Poll: 200 * time.Millisecond,
	BaseBackoff: 100 * time.Millisecond, MaxBackoff: time.Second, MaxAttempts: 50}

// subTopics are the subscription events, which the idempotent destination
// receives.
var subTopics = []string{string(fulfillment.TopicSubscriptionRenewed), string(fulfillment.TopicSubscriptionPastDue),
	string(fulfillment.TopicSubscriptionAccessEnded)}

const (
	subSKU   = "chaos-sub-"
	subMinor = 2500 // the price of a period, in US cents (paid as payAmount USDT)
	// aheadMargin is how far past the start of the send phase the check
	// may come: a period ending later still grants access then.
	aheadMargin = time.Hour
)

// subOf is the subscription of event e's order, nil for none.
func (r *runner) subOf(e *eventPlan) *subPlan {
	if e.order < 0 {
		return nil
	}
	return r.w.orders[e.order].sub
}
