package fulfillment

import (
	"testing"
	"time"
)

// A payment that names a paid order and the subscription its payment paid
// is a renewal only when it cannot be the order's own second payment
// (renewsPaidSubscription). These are T-Bank's cases: every T-Bank payment
// names its checkout session (its OrderId), so one that matches the order
// is the order's, and a person is asked to look (an extra_payment item);
// a renewal charged for the same order would be paid a period silently.
// The first version of the rule, which looked only at the subscription the
// payment named, failed all four.

// paidByCardFixture: order o1 (T-Bank, subscription line, total 1000 RUB), paid
// by pay_1 of attempt sess-1, which paid period 1 of s1 — known at the bank
// by its card binding (RebillId) "R1". The order's second payment start
// sess-2 is one of its checkout sessions too (payment_starts.provider_order_id).
func paidByCardFixture() (*Snapshot, *SubscriptionRecord) {
	sub := batchSub("s1", "R1")
	o := paidSubscriptionOrder(ProviderTBank, PaidRefs{AttemptRef: "pay_1", PaymentID: "pay_1"}, sub, "payment:pay_1")
	sess := func(v string) OrderKey {
		return OrderKey{OrgID: batchOrg, Environment: EnvLive, Field: ByCheckoutSessionID, Value: v}
	}
	return &Snapshot{
		Orders:        map[OrderKey]*LockedOrder{sess("sess-1"): o, sess("sess-2"): o},
		Subscriptions: map[SubscriptionKey]*SubscriptionRecord{subKey("R1"): sub},
		Plans:         Plans{monthly.ID: monthly},
	}, sub
}

// tbankEvent is a T-Bank notification (or GetState answer when rebill is
// "") of payment pay in checkout session sess: OrderId, PaymentId, RebillId.
func tbankEvent(id string, kind EventKind, sess, pay, rebill string, minor int64, at time.Time) BatchEvent {
	p := PaymentInfo{PaymentID: pay, CheckoutSessionID: sess, SubscriptionID: rebill, Amount: MinorAmount(minor, "RUB")}
	p.AttemptRef = p.Attempt()
	return BatchEvent{Received: at, Event: ProviderEvent{Provider: ProviderTBank, OrgID: batchOrg, Environment: EnvLive,
		EventID: id, Kind: kind, Type: string(kind), OccurredAt: at, Payment: p}}
}

// extraPaymentItems counts the extra_payment items steps open, by the order
// rules or the subscription rules (once for a step of no order, whose
// outcome is the subscription rules').
func extraPaymentItems(steps []Step) (n int) {
	for _, st := range steps {
		for _, e := range st.Outcome.Effects {
			if it, ok := e.(OpenItem); ok && it.Kind == ReconExtraPayment {
				n++
			}
		}
		if st.Subscription != nil && !ofNoOrder(st) {
			for _, e := range st.Subscription.Outcome.Effects {
				if it, ok := e.(OpenItem); ok && it.Kind == ReconExtraPayment {
					n++
				}
			}
		}
	}
	return n
}

func ofNoOrder(st Step) bool { return st.Order == nil }

// periodsAfter is how many periods s1 has after steps, sub being s1 as the
// snapshot held it.
func periodsAfter(steps []Step, sub *SubscriptionRecord) int {
	p := sub.Periods
	for _, st := range steps {
		if st.Subscription != nil && st.Subscription.Record.ID == "s1" {
			p = st.Subscription.Record.Periods
		}
	}
	return p
}

// The customer pays the order a second time (a second payment start of
// the order, same card: same RebillId), for the order's total, an hour
// after the first. T-Bank recurrent charges never name the order's OrderId
// (docs/subscriptions.md: a charge names an order id of its own), so this is
// the order's second payment, and it needs a refund review, not a period.
func TestDecideBatchTBankSecondPaymentOfThePaidOrder(t *testing.T) {
	t.Parallel()
	snap, sub := paidByCardFixture()
	second := tbankEvent("n2", EventPaymentConfirmed, "sess-2", "pay_2", "R1", 1000, jan1.Add(time.Hour))
	steps := decided(t, snap, []BatchEvent{second})
	t.Logf("steps %q", summaries(steps))
	if got := extraPaymentItems(steps); got != 1 || periodsAfter(steps, sub) != 1 {
		t.Errorf("second payment of the order: %d extra_payment items, %d periods; want 1 item, 1 period", got, periodsAfter(steps, sub))
	}
}

// The same second payment, found first by the status poller (GetState
// names no RebillId), then notified by the bank (with RebillId). One payment:
// it must be decided one way: not an item asking to refund it (the poll's)
// and a period granted for it (the notification's).
func TestDecideBatchPollThenNotificationOfASecondPayment(t *testing.T) {
	t.Parallel()
	snap, sub := paidByCardFixture()
	at := jan1.Add(time.Hour)
	steps := decided(t, snap, []BatchEvent{
		tbankEvent("poll:n2", EventPaymentConfirmed, "sess-2", "pay_2", "", 1000, at),
		tbankEvent("n2", EventPaymentConfirmed, "sess-2", "pay_2", "R1", 1000, at),
	})
	t.Logf("steps %q", summaries(steps))
	// (Storage keeps one extra_payment item per order and payment.)
	if got, p := extraPaymentItems(steps), periodsAfter(steps, sub); got > 0 && p > 1 {
		t.Errorf("one payment: %d extra_payment item effects and %d new periods; want an item or a period, not both", got, p-1)
	}
}

// Order paid from the poller (no binding: the subscription goes by the
// customer key). The order's second payment's notification (RebillId R1)
// comes before pay_1's notification binds R1: duplicate_payment, an item.
// pay_1's notification binds R1. The second payment's notification is then
// delivered again / replayed (`fulfillctl events replay`): decided as the
// first time, it pays no period (a replay moves no money), and the item it
// opened stays the one about it.
func TestDecideBatchSecondPaymentAgainAfterBinding(t *testing.T) {
	t.Parallel()
	customer := CustomerSubscriptionID(monthly.ID, "user_42")
	snap, sub := paidByCardFixture()
	delete(snap.Subscriptions, subKey("R1"))
	sub.ProviderSubscriptionID = customer
	snap.Subscriptions[subKey(customer)] = sub
	at := jan1.Add(time.Hour)
	second := tbankEvent("n2", EventPaymentConfirmed, "sess-2", "pay_2", "R1", 1000, at)
	steps := decided(t, snap, []BatchEvent{
		second,
		tbankEvent("n1", EventPaymentConfirmed, "sess-1", "pay_1", "R1", 1000, jan1), // binds R1
		second, // replayed
	})
	t.Logf("steps %q", summaries(steps))
	if summary(steps[2]) != summary(steps[0]) || periodsAfter(steps, sub) != 1 {
		t.Errorf("replay of the second payment: %q, first decided %q, %d periods; want the same decision, 1 period",
			summary(steps[2]), summary(steps[0]), periodsAfter(steps, sub))
	}
}

// A payment naming the order's checkout session and R1, then partly
// refunded (T-Bank PARTIAL_REFUNDED names OrderId and PaymentId). The same
// partial refund of a charge that names no order is the subscription
// rules' (partially_refunded + refund_after_fulfillment item). Whichever
// rules take the pair, a person must hear of the payment: money returned
// and a period kept with no item would tell nobody.
func TestDecideBatchPartialRefundOfASecondPayment(t *testing.T) {
	t.Parallel()
	for _, rebill := range []string{"", "R1"} {
		snap, _ := paidByCardFixture()
		at := jan1.AddDate(0, 1, 0)
		steps := decided(t, snap, []BatchEvent{
			tbankEvent("n2", EventPaymentConfirmed, "sess-1", "pay_2", "R1", 1000, at),
			tbankEvent("n2p", EventPartiallyRefunded, "sess-1", "pay_2", rebill, 400, at.AddDate(0, 0, 2)),
		})
		t.Logf("rebill %q: steps %q", rebill, summaries(steps))
		// Some item about pay_2 must reach a person: the extra_payment of
		// the charge (as before the change) or the partial refund's
		// refund_after_fulfillment (as for a charge naming no order).
		var n int
		for _, st := range steps {
			effects := st.Outcome.Effects
			if st.Subscription != nil && st.Order != nil {
				effects = append(effects, st.Subscription.Outcome.Effects...)
			}
			for _, e := range effects {
				if _, ok := e.(OpenItem); ok {
					n++
				}
			}
		}
		if n == 0 {
			t.Errorf("renewal charge then its partial refund (rebill %q): no item at all", rebill)
		}
	}
}

// A renewal whose invoice's creation (or expiry: the renewal paid late)
// names the paid order and is applied before its payment is renewed all
// the same, as it is without that event: the invoice's event goes where
// its payment goes, to the subscription rules, and records no attempt of
// the order. Decided by the order rules (stale_ignored), it recorded the
// renewal's invoice as an attempt of the order, and the payment then
// counted as the order's second payment: duplicate_payment, an
// extra_payment item, no period — and so every renewal announced that way.
func TestDecideBatchRenewalAfterItsInvoiceEvent(t *testing.T) {
	t.Parallel()
	feb1 := jan1.AddDate(0, 1, 0)
	yev := func(id string, kind EventKind, invoice, payment string) BatchEvent {
		p := PaymentInfo{InvoiceID: invoice, PaymentID: payment, MerchantOrderID: "m-1", SubscriptionID: "sub_1"}
		if kind == EventPaymentConfirmed {
			p.Amount = MinorAmount(1000, "RUB")
		}
		p.AttemptRef = p.Attempt()
		return BatchEvent{Received: feb1, Event: ProviderEvent{Provider: ProviderYolfi, OrgID: batchOrg, Environment: EnvLive,
			EventID: id, Kind: kind, Type: string(kind), OccurredAt: feb1, Payment: p}}
	}
	for _, tc := range []struct {
		name   string
		before BatchEvent
	}{
		{"invoice.created first", yev("e2c", EventAttemptCreated, "inv_2", "")},
		{"invoice.overdue first (paid late)", yev("e2o", EventAttemptExpired, "inv_2", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sub := yolfiSub("s1", "sub_1")
			o := paidSubscriptionOrder(ProviderYolfi, PaidRefs{AttemptRef: "inv_1", InvoiceID: "inv_1", PaymentID: "pay_1"}, sub, "invoice:inv_1")
			snap := &Snapshot{Orders: map[OrderKey]*LockedOrder{orderKey("m-1"): o},
				Subscriptions: map[SubscriptionKey]*SubscriptionRecord{yolfiKey("sub_1"): sub}, Plans: Plans{monthly.ID: monthly}}

			alone := decided(t, snap, []BatchEvent{yev("e2", EventPaymentConfirmed, "inv_2", "pay_2")})
			steps := decided(t, snap, []BatchEvent{tc.before, yev("e2", EventPaymentConfirmed, "inv_2", "pay_2")})
			t.Logf("renewal alone: %q; after its invoice event: %q", summaries(alone), summaries(steps))
			if periodsAfter(alone, sub) != 2 {
				t.Fatalf("renewal alone: %d periods, want 2", periodsAfter(alone, sub))
			}
			if p := periodsAfter(steps, sub); p != 2 || extraPaymentItems(steps) != 0 {
				t.Errorf("renewal after its own %s: %q, %d periods, %d extra_payment items; want renewed (2 periods, no item) as without it",
					tc.before.Event.Kind, summaries(steps), p, extraPaymentItems(steps))
			}
		})
	}
}

// yolfiKey and yolfiSub are the batch fixtures at Yolfi.
func yolfiKey(id string) SubscriptionKey {
	return SubscriptionKey{OrgID: batchOrg, Environment: EnvLive, Provider: ProviderYolfi, ID: id}
}

func yolfiSub(id, providerID string) *SubscriptionRecord {
	s := batchSub(id, providerID)
	s.Provider = ProviderYolfi
	return s
}

// yolfiEv is a Yolfi event naming merchant order m-1 and subscription
// sub_1 (a renewal's shape: no checkout session) unless changed by the caller.
func yolfiEv(id string, kind EventKind, invoice, payment, session string, minor int64) BatchEvent {
	feb1 := jan1.AddDate(0, 1, 0)
	p := PaymentInfo{InvoiceID: invoice, PaymentID: payment, CheckoutSessionID: session, MerchantOrderID: "m-1", SubscriptionID: "sub_1"}
	if kind == EventPaymentConfirmed {
		p.Amount = MinorAmount(minor, "RUB")
	}
	p.AttemptRef = p.Attempt()
	return BatchEvent{Received: feb1, Event: ProviderEvent{Provider: ProviderYolfi, OrgID: batchOrg, Environment: EnvLive,
		EventID: id, Kind: kind, Type: string(kind), OccurredAt: feb1, Payment: p}}
}

// The order's payment named a payment id and no invoice (a checkout's
// payment can). Its renewal's invoice.created, naming no payment, cannot be
// told from it by SamePayment; it is of another attempt and invoice than
// the ones that paid the order, so it goes where its payment goes, and the
// payment after it renews as it does alone. Left to the order rules, it
// recorded the renewal's invoice as the order's attempt, and the payment
// was duplicate_payment (a third review's test).
func TestDecideBatchRenewalInvoiceWhenTheOrdersPaymentNamedNoInvoice(t *testing.T) {
	t.Parallel()
	sub := yolfiSub("s1", "sub_1")
	o := paidSubscriptionOrder(ProviderYolfi, PaidRefs{AttemptRef: "pay_1", PaymentID: "pay_1"}, sub, "payment:pay_1")
	snap := &Snapshot{Orders: map[OrderKey]*LockedOrder{orderKey("m-1"): o},
		Subscriptions: map[SubscriptionKey]*SubscriptionRecord{yolfiKey("sub_1"): sub}, Plans: Plans{monthly.ID: monthly}}

	pay := yolfiEv("e2", EventPaymentConfirmed, "inv_2", "pay_2", "", 1000)
	alone := decided(t, snap, []BatchEvent{pay})
	steps := decided(t, snap, []BatchEvent{yolfiEv("e2c", EventAttemptCreated, "inv_2", "", "", 0), pay})
	t.Logf("alone: %q; after invoice.created: %q", summaries(alone), summaries(steps))
	if periodsAfter(alone, sub) != 2 {
		t.Fatalf("renewal alone: %d periods, want 2", periodsAfter(alone, sub))
	}
	if p := periodsAfter(steps, sub); p != 2 || extraPaymentItems(steps) != 0 {
		t.Errorf("renewal after its invoice.created: %q, %d periods, %d extra_payment items; want renewed as alone",
			summaries(steps), p, extraPaymentItems(steps))
	}
}

// paidSubscriptionOrder is order o1 of customer user_42, fulfilled by the
// payment refs names (its attempt recorded confirmed at provider p), which
// paid period 1 of sub (January) as its bill: the order and sub as a
// snapshot holds them once that payment is decided.
func paidSubscriptionOrder(p Provider, refs PaidRefs, sub *SubscriptionRecord, bill string) *LockedOrder {
	feb1 := jan1.AddDate(0, 1, 0)
	o := subscriptionOrder("o1", "user_42")
	o.State, o.Paid, o.PaidBy, o.PaidSubscription = StateFulfilled, true, refs, sub.ID
	o.Attempts = map[AttemptKey]AttemptState{{p, refs.AttemptRef}: AttemptConfirmed}
	sub.State, sub.Periods, sub.PeriodStart, sub.PeriodEnd, sub.LastEventAt = SubActive, 1, jan1, feb1, jan1
	sub.Renewals = map[string]Renewal{bill: {Period: 1, PaymentID: refs.PaymentID, Start: jan1, End: feb1, PaidAt: jan1, Purchase: true}}
	return o
}

// The order's own invoice, when the order's payment named no invoice:
// paid without a checkout by a payment naming pay_1 alone, then its
// invoice's creation announced late (the webhooks race; the event is dated
// when the invoice was created, before the payment), then that invoice
// paid again. The late invoice.created is the order's (stale_ignored, its
// attempt recorded) and the second payment is the order's second payment:
// an extra_payment item, no period. Taken for a renewal's invoice (a
// fourth review's test), it recorded nothing, and the second payment paid
// period 2 with no item. The same invoice event when the time of the
// order's payment is not known stays the order's too.
func TestDecideBatchOrdersOwnInvoiceAnnouncedLate(t *testing.T) {
	t.Parallel()
	for _, known := range []bool{true, false} {
		sub := yolfiSub("s1", "sub_1")
		o := paidSubscriptionOrder(ProviderYolfi, PaidRefs{AttemptRef: "pay_1", PaymentID: "pay_1"}, sub, "payment:pay_1")
		created := yolfiEv("e1c", EventAttemptCreated, "inv_1", "", "", 0)
		created.Event.OccurredAt = jan1.Add(-time.Minute)
		if !known {
			r := sub.Renewals["payment:pay_1"]
			r.PaidAt = time.Time{}
			sub.Renewals["payment:pay_1"] = r
			created.Event.OccurredAt = jan1.AddDate(0, 1, 0) // a renewal's time, but nothing to compare it with
		}
		snap := &Snapshot{Orders: map[OrderKey]*LockedOrder{orderKey("m-1"): o},
			Subscriptions: map[SubscriptionKey]*SubscriptionRecord{yolfiKey("sub_1"): sub}, Plans: Plans{monthly.ID: monthly}}
		steps := decided(t, snap, []BatchEvent{created, yolfiEv("e3", EventPaymentConfirmed, "inv_1", "pay_3", "", 1000)})
		if got := summaries(steps); got[0] != "stale_ignored order=o1" || periodsAfter(steps, sub) != 1 || extraPaymentItems(steps) != 1 {
			t.Errorf("payment time known %v: %q, %d periods, %d extra_payment items; want stale_ignored for the order, then its second payment (1 period, 1 item)",
				known, got, periodsAfter(steps, sub), extraPaymentItems(steps))
		}
	}
}
