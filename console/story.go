package console

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
	"github.com/fulfillplatform/fulfillment/internal/english"
)

// Bounds of an order's story: besides the order (whose history the API
// bounds), one page of its items, one of its events, and the attempts of at
// most maxStoryDeliveries of its deliveries.
const (
	storyPage          = 100
	maxStoryDeliveries = 20
)

// storyView is an order's story: what happened to it, in time order, and
// a one-line answer to why it is where it is.
type storyView struct {
	Order      *fulfillmentv1.Order
	Why        string
	Timeline   []storyEntry
	Items      []*fulfillmentv1.ReconciliationItem
	Deliveries []*fulfillmentv1.OutboxMessage
	// Hidden says what the token could not read, so the story is partial.
	Hidden []string
	// Links lead to the lists of the order's events, messages and items,
	// those the token may open.
	Links []menuLink
}

// storyEntry is one line of the timeline.
type storyEntry struct {
	At     *timestamppb.Timestamp
	Kind   string // event, state, grant, revoke, ledger, feed, delivery, attempt, item, payment, order
	Title  string
	Detail string
	Href   string
}

// orderLinks are the links of an order's page to the lists of its events,
// outbox messages and reconciliation items: those s may open.
func orderLinks(s *session, orderID string) []menuLink {
	var links []menuLink
	for _, l := range []struct{ page, label string }{{"events", "events"}, {"outbox", "outbox messages"}, {"recon", "reconciliation items"}} {
		if s.Opens(l.page) {
			links = append(links, menuLink{Href: link(menuHref(l.page), "order_id", orderID), Label: l.label})
		}
	}
	return links
}

// story reads an order's story through the API, with the session's token:
// what it may not read is left out and said so.
func (c *Console) story(ctx context.Context, s *session, orderID string) (*storyView, error) {
	resp, err := c.api.GetOrder(ctx, &fulfillmentv1.GetOrderRequest{OrderId: orderID})
	if err != nil {
		return nil, err
	}
	o := resp.GetOrder()
	v := &storyView{Order: o, Links: orderLinks(s, o.GetId())}
	if s.Can(config.ScopeReconciliationRead) {
		items, err := c.api.ListReconciliationItems(ctx, &fulfillmentv1.ListReconciliationItemsRequest{OrderId: o.GetId(), PageSize: storyPage})
		if err != nil {
			return nil, err
		}
		v.Items = items.GetItems()
	} else {
		v.Hidden = append(v.Hidden, "reconciliation items (reconciliation:read)")
	}
	inbox := map[string]*fulfillmentv1.InboxEvent{} // by provider event id
	if s.Admin() {
		evs, err := c.api.ListInboxEvents(ctx, &fulfillmentv1.ListInboxEventsRequest{OrderId: o.GetId(), PageSize: storyPage})
		if err != nil {
			return nil, err
		}
		for _, e := range evs.GetEvents() {
			inbox[e.GetEventId()] = e
		}
	} else {
		v.Hidden = append(v.Hidden, "links to the stored events, with what was received (admin)")
	}
	h := o.GetHistory()
	v.Deliveries = h.GetDeliveries()
	if s.Can(config.ScopeOutboxRead) {
		// The attempts of the newest deliveries, those still in flight first.
		idx := make([]int, len(v.Deliveries))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			da, db := v.Deliveries[a].GetState() == "delivered", v.Deliveries[b].GetState() == "delivered"
			switch {
			case da == db:
				return b - a
			case !da:
				return -1
			default:
				return 1
			}
		})
		for n, i := range idx {
			if n == maxStoryDeliveries {
				v.Hidden = append(v.Hidden, "the attempts of "+english.Plural(len(idx)-n, "older delivery"))
				break
			}
			m, err := c.api.GetOutboxMessage(ctx, &fulfillmentv1.GetOutboxMessageRequest{MessageId: v.Deliveries[i].GetId()})
			if err != nil {
				return nil, err
			}
			v.Deliveries[i] = m.GetMessage()
		}
	} else if len(v.Deliveries) > 0 {
		v.Hidden = append(v.Hidden, "each delivery's attempts, beyond its state and last answer (outbox:read)")
	}
	v.Timeline = timeline(o, inbox, v.Items, v.Deliveries)
	v.Why = why(o, v.Items, v.Deliveries, time.Now())
	return v, nil
}

// stateOf is the state a decision moves an order to, if any.
var stateOf = map[string]string{
	"fulfilled":           "fulfilled",
	"amount_mismatch":     "on_hold",
	"plan_change_refused": "on_hold",
	"refunded":            "refunded",
	"partially_refunded":  "refunded in part",
	"attempt_expired":     "",
}

func timeline(o *fulfillmentv1.Order, inbox map[string]*fulfillmentv1.InboxEvent,
	items []*fulfillmentv1.ReconciliationItem, deliveries []*fulfillmentv1.OutboxMessage) []storyEntry {
	h := o.GetHistory()
	// An order with external lines is fulfilling when paid, and fulfilled
	// once they are delivered: the feed announces that moment.
	external := slices.ContainsFunc(o.GetLines(), func(l *fulfillmentv1.OrderLine) bool { return l.GetKind() == "external" })
	var t []storyEntry
	add := func(e storyEntry) { t = append(t, e) }
	add(storyEntry{At: o.GetCreateTime(), Kind: "order", Title: "Order created",
		Detail: fmt.Sprintf("%s, %s, total %s, expecting %s %s on %s", o.GetMerchantOrderId(), english.Plural(len(o.GetLines()), "line"),
			money(o.GetTotal()), o.GetSettlement().GetAmount(), o.GetSettlement().GetToken(), o.GetSettlement().GetNetwork())})
	for _, p := range h.GetPaymentStarts() {
		state := p.GetState()
		if ps := p.GetPaymentState(); ps != "" {
			state += ", payment " + ps // the start stays started; this is what the payer did
		}
		add(storyEntry{At: p.GetCreateTime(), Kind: "payment", Title: "Payment started at " + p.GetEndpointId(),
			Detail: fmt.Sprintf("attempt %d, %s %s", p.GetAttempt(), state, p.GetDetail())})
	}
	for _, p := range h.GetPaymentAttempts() {
		add(storyEntry{At: p.GetCreateTime(), Kind: "payment", Title: "Payment attempt " + p.GetProviderRef(),
			Detail: fmt.Sprintf("%s: %s, %s %s%s", p.GetProvider(), p.GetState(), p.GetAmount(), p.GetToken(), p.GetCurrency())})
	}
	for _, e := range h.GetEvents() {
		entry := storyEntry{At: e.GetReceiveTime(), Kind: "event", Title: fmt.Sprintf("Event %s %s", e.GetType(), e.GetEventId()),
			Detail: "decision: " + e.GetDecision()}
		if e.GetMatchedLater() {
			entry.Title += " (came before the order; processed again when it appeared)"
		}
		if r := e.GetDecisionReason(); r != "" {
			entry.Detail += " — " + r
		}
		if ie, ok := inbox[e.GetEventId()]; ok {
			entry.Href = Prefix + "events/" + ie.GetId()
		}
		add(entry)
		st := stateOf[e.GetDecision()]
		detail := "by event " + e.GetEventId()
		if st == "fulfilled" && external {
			st, detail = "fulfilling", detail+"; its external lines await delivery"
		}
		if st != "" {
			add(storyEntry{At: e.GetReceiveTime(), Kind: "state", Title: "State → " + st, Detail: detail})
		}
	}
	for _, g := range h.GetEntitlements() {
		add(storyEntry{At: g.GetCreateTime(), Kind: "grant", Title: fmt.Sprintf("Granted %s %s, unit %d", g.GetKind(), g.GetSku(), g.GetUnit()),
			Detail: "entitlement " + g.GetId()})
		if g.GetRevokeTime() != nil {
			add(storyEntry{At: g.GetRevokeTime(), Kind: "revoke", Title: fmt.Sprintf("Revoked %s %s, unit %d", g.GetKind(), g.GetSku(), g.GetUnit()),
				Detail: g.GetRevokedReason()})
		}
	}
	for _, f := range h.GetFeedEvents() {
		if f.GetTopic() == "order.fulfilled" && external {
			add(storyEntry{At: f.GetCreateTime(), Kind: "state", Title: "State → fulfilled", Detail: "its external lines were delivered"})
		}
		add(storyEntry{At: f.GetCreateTime(), Kind: "feed", Title: "Announced " + f.GetTopic() + " on the event feed",
			Detail: "feed cursor " + f.GetCursor()})
	}
	for _, l := range h.GetLedgerEntries() {
		add(storyEntry{At: l.GetCreateTime(), Kind: "ledger", Title: fmt.Sprintf("Ledger %s %d %s", l.GetMovement(), l.GetAmount().GetMinorUnits(), l.GetAmount().GetCurrency()),
			Detail: "account " + l.GetAccountRef()})
	}
	for _, d := range deliveries {
		line := ""
		if d.LineNo != nil {
			line = fmt.Sprintf(" (line %d)", d.GetLineNo())
		}
		add(storyEntry{At: d.GetCreateTime(), Kind: "delivery", Title: fmt.Sprintf("Outbox %s → %s%s", d.GetTopic(), d.GetDestinationId(), line),
			Detail: d.GetState() + ", " + count(int(d.GetAttempts()), "attempt"), Href: Prefix + "outbox/" + d.GetId()})
		for _, a := range d.GetAttemptHistory() {
			add(storyEntry{At: a.GetStartTime(), Kind: "attempt", Title: fmt.Sprintf("Attempt %d to %s", a.GetAttempt(), d.GetDestinationId()),
				Detail: attemptLine(a), Href: Prefix + "outbox/" + d.GetId()})
		}
	}
	for _, it := range items {
		add(storyEntry{At: it.GetCreateTime(), Kind: "item", Title: "Reconciliation item opened: " + it.GetKind(),
			Detail: it.GetDetail(), Href: Prefix + "reconciliation/" + it.GetId()})
		if it.GetResolveTime() != nil {
			add(storyEntry{At: it.GetResolveTime(), Kind: "item", Title: "Reconciliation item resolved: " + it.GetResolution(),
				Detail: "by " + it.GetResolvedBy() + ": " + it.GetResolutionNote(), Href: Prefix + "reconciliation/" + it.GetId()})
		}
	}
	slices.SortStableFunc(t, func(a, b storyEntry) int { return a.At.AsTime().Compare(b.At.AsTime()) })
	return t
}

func attemptLine(a *fulfillmentv1.DeliveryAttempt) string {
	var b strings.Builder
	if a.GetStatus() != 0 {
		fmt.Fprintf(&b, "HTTP %d, ", a.GetStatus())
	}
	b.WriteString(a.GetOutcome())
	if a.GetFinishTime() != nil && a.GetStartTime() != nil {
		// The attempt's own duration, not when the next one is due.
		fmt.Fprintf(&b, " (the attempt took %s)", a.GetFinishTime().AsTime().Sub(a.GetStartTime().AsTime()).Round(time.Millisecond))
	}
	if r := a.GetReason(); r != "" && r != fmt.Sprintf("HTTP %d", a.GetStatus()) {
		b.WriteString(" — " + r)
	}
	return b.String()
}

// why answers in one line why the order is in its state.
func why(o *fulfillmentv1.Order, items []*fulfillmentv1.ReconciliationItem, deliveries []*fulfillmentv1.OutboxMessage, now time.Time) string {
	h := o.GetHistory()
	var paidBy string
	for _, e := range h.GetEvents() {
		if e.GetDecision() == "fulfilled" {
			paidBy = "by event " + e.GetEventId()
			break
		}
	}
	for _, p := range h.GetPaymentAttempts() {
		if p.GetState() == "confirmed" || p.GetState() == "refunded" {
			paidBy = strings.TrimSpace(fmt.Sprintf("%s %s%s %s", p.GetAmount(), p.GetToken(), p.GetCurrency(), paidBy))
			break
		}
	}
	var parts []string
	switch st := o.GetState(); st {
	case "pending_payment":
		s := "waiting for payment: no confirmed payment yet"
		if evs := h.GetEvents(); len(evs) > 0 {
			last := evs[len(evs)-1]
			s += fmt.Sprintf(" (last event %s %s: %s)", last.GetType(), last.GetEventId(), last.GetDecision())
		}
		parts = append(parts, s)
	case "paid", "fulfilling", "fulfilled":
		parts = append(parts, "paid "+paidBy)
		if st == "fulfilled" {
			// Counted whole: the history shows the newest ones only.
			parts = append(parts, "fulfilled: "+count(len(h.GetEntitlements())+int(h.GetOmittedEntitlements()), "entitlement")+", "+
				count(len(h.GetLedgerEntries())+int(h.GetOmittedLedgerEntries()), "ledger movement"))
		}
		if d := waitingDelivery(deliveries); d != nil {
			parts = append(parts, deliveryLine(d, now))
		}
	case "on_hold":
		s := "on hold for review"
		for _, it := range items {
			if it.GetState() == "open" && (it.GetKind() == "amount_mismatch" || it.GetKind() == "duplicate_order_id") {
				s += fmt.Sprintf(": %s — received %s, expected %s %s", it.GetKind(), it.GetAmount(), it.GetExpectedAmount(), it.GetToken())
				break
			}
		}
		parts = append(parts, s)
	case "refunded":
		parts = append(parts, "refunded after it was paid "+paidBy)
	default:
		parts = append(parts, st)
	}
	var open []string
	for _, it := range items {
		if it.GetState() == "open" {
			open = append(open, it.GetKind())
		}
	}
	if len(open) > 0 {
		parts = append(parts, fmt.Sprintf("%d open reconciliation item(s): %s", len(open), strings.Join(open, ", ")))
	}
	return strings.Join(parts, "; ")
}

// count says n things: "no entitlement", "1 entitlement", "2 entitlements".
func count(n int, thing string) string {
	if n == 0 {
		return "no " + thing
	}
	return english.Plural(n, thing)
}

// waitingDelivery is the first required delivery not yet delivered.
func waitingDelivery(ds []*fulfillmentv1.OutboxMessage) *fulfillmentv1.OutboxMessage {
	for _, d := range ds {
		if d.GetState() != "delivered" && d.GetRequired() {
			return d
		}
	}
	for _, d := range ds {
		if d.GetState() == "pending" || d.GetState() == "failed" || d.GetState() == "uncertain" {
			return d
		}
	}
	return nil
}

func deliveryLine(d *fulfillmentv1.OutboxMessage, now time.Time) string {
	what := "delivery of " + d.GetTopic()
	if d.LineNo != nil {
		what = fmt.Sprintf("delivery of line %d", d.GetLineNo())
	}
	what += " to " + d.GetDestinationId()
	if d.GetState() == "pending" {
		what = "waiting for " + what
	} else {
		what += " " + d.GetState()
	}
	s := what + ": " + count(int(d.GetAttempts()), "attempt")
	if d.GetLastStatus() != 0 {
		s += fmt.Sprintf(", last %d", d.GetLastStatus())
	} else if d.GetLastError() != "" {
		s += ", last error " + truncate(d.GetLastError(), 60)
	}
	if n := d.GetNextAttemptTime(); n != nil && d.GetState() == "pending" {
		if n.AsTime().After(now) {
			s += ", next at " + n.AsTime().UTC().Format("15:04:05")
		} else {
			s += ", due now"
		}
	}
	return s
}
