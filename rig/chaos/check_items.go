package chaos

import (
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/storage"
)

// checkItems: the only reconciliation items are the extra payments and the
// refunds, those that apply and those that cannot, and the payments of late
// orders that came first (checked per order), one unmatched_payment per distinct
// test-endpoint payment and
// the items of uncertain and failed outbox messages (checked with their
// message), and the overpaid orders' overpayment items (checked per order);
// no failed_event, no amount_mismatch, no other overpayment; every license
// key distinct.
func (r *runner) checkItems(s *dbState) {
	c := Check{Name: "no reconciliation item but those due"}
	wantUnmatched := map[string]bool{}
	for _, e := range r.w.events {
		if e.endpoint == testEP && e.typ == yolfi.TypePaymentConfirmed && len(s.inbox[e.id]) > 0 {
			wantUnmatched[e.attemptRef()+"|"+e.payment] = true
		}
	}
	late := map[string]bool{} // the late orders, by id
	for _, o := range r.w.orders {
		if row, ok := s.orders[o.mid]; ok && o.late {
			late[row.id] = true
		}
	}
	overpaid := r.overpaidOrders(s)
	unmatched := 0
	for _, it := range s.items {
		c.Checked++
		switch {
		case (it.kind == itemExtraPayment || it.kind == itemUnidentified || it.kind == itemRefund || it.kind == itemRefundNotApplicable) &&
			it.env == "live" && it.orderID != "":
			// checked with its order
		case it.kind == itemOverpayment && overpaid[it.orderID]:
			// checked with its overpaid order (checkOverpaid)
		case r.lateFirstOrders[it.orderID]:
			// a late order of a subscription paid before it: checkLateFirst
		case r.subscriptionItem(it):
			// checked with its subscription
		case it.kind == itemUnmatchedPayment && it.env == "live" && late[it.orderID]:
			// a late order's payment that came first: checked with its order
		case it.kind == itemUnmatchedPayment && it.env == "test" && it.orderID == "" && it.state == "open":
			unmatched++
		case it.messageID != 0 && (it.kind == itemUncertainDelivery || it.kind == itemFailedDelivery):
			// checked with its message
		default:
			c.Failed++
			r.viol.add("unexpected item", "a %s reconciliation item (%s, %s, order %q, payment %q) should not exist",
				it.kind, it.state, it.env, it.orderID, it.paymentID)
		}
	}
	r.rep.DuplicatedEffects += max(0, unmatched-len(wantUnmatched))
	if unmatched != len(wantUnmatched) {
		c.Failed++
		r.viol.add("unmatched payment items", "%d unmatched_payment items for test-endpoint confirmations, want %d", unmatched, len(wantUnmatched))
	}
	r.addCheck(c)

	c = Check{Name: "license keys distinct, one per unit of a license line", Checked: s.totalLicenses}
	if s.distinctLicenses != s.totalLicenses || s.strayLicenses > 0 {
		c.Failed++
		r.viol.add("licenses", "%d license keys, %d distinct, %d outside their line's units", s.totalLicenses, s.distinctLicenses, s.strayLicenses)
	}
	r.addCheck(c)

	for i, k := range storage.KeptTables {
		c = Check{Name: k.Table + " holds exactly " + k.Holds, Checked: s.kept[i].rows}
		if s.kept[i].wrong > 0 {
			c.Failed++
			r.viol.add(k.Table, "%d of %s missing from %s or held there wrongly", s.kept[i].wrong, k.Holds, k.Table)
		}
		r.addCheck(c)
	}
}
