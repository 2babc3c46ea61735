package chaos

import (
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

// The stories of a subscription paid before its order: each registered
// (a Yolfi subscription), its first payment naming the subscription and
// the order delivered twice at least, its order of the kind planned; a
// short run has one whose order fits.
func TestLateFirstWorkload(t *testing.T) {
	t.Parallel()
	w := plan(7, 800, 8000, 30*time.Second)
	st := w.stats.LateFirst
	if st.Stories < 10 || st.Fit == 0 || st.Racing == 0 || st.OtherPrice == 0 || st.LicenseOnly == 0 ||
		st.Fit+st.OtherPrice+st.LicenseOnly != st.Stories || st.Payments != st.Stories {
		t.Fatalf("stories: %+v", st)
	}
	deliveries := map[int]int{}
	for _, d := range w.deliveries {
		deliveries[d.ev]++
	}
	for _, o := range w.orders {
		if !o.lateFirstSub() {
			continue
		}
		sp := o.sub
		if reg := sp.registration(); reg.GetProvider() != "yolfi" || reg.GetProviderSubscriptionId() != sp.id || reg.GetCustomerRef() != sp.customer {
			t.Fatalf("order %s: registration %v", o.mid, reg)
		}
		if !o.late || o.racing != (sp.lateOrder == lateFit && o.racing) {
			t.Fatalf("order %s (%s): late %v, racing %v", o.mid, lateKindName(sp.lateOrder), o.late, o.racing)
		}
		e := w.events[sp.first]
		ev, err := parseYolfi(e)
		if err != nil || e.role != roleFirst || ev.Kind != fulfillment.EventPaymentConfirmed || ev.Payment.SubscriptionID != sp.id ||
			ev.Payment.MerchantOrderID != o.mid || ev.Payment.PaymentID != e.payment || deliveries[sp.first] < 2 {
			t.Fatalf("order %s: first payment %+v (%v), delivered %d times", o.mid, ev, err, deliveries[sp.first])
		}
		req := o.request()
		lines := req.GetLines()
		switch sp.lateOrder {
		case lateFit, lateOtherPrice:
			if len(lines) != 2 || lines[0].GetPlanId() != sp.cfg.ID || lines[0].GetAccountRef() != sp.customer || lines[1].GetKind() != "license" ||
				(req.GetSettlement().GetAmount() == payAmount) != (sp.lateOrder == lateFit) {
				t.Fatalf("order %s (%s): %v", o.mid, lateKindName(sp.lateOrder), req)
			}
		case lateLicenseOnly:
			if len(lines) != 1 || lines[0].GetKind() != "license" || req.GetSettlement().GetAmount() != payAmount {
				t.Fatalf("order %s (license only): %v", o.mid, req)
			}
		}
	}
	if short := plan(3, 20, 200, 10*time.Second).stats.LateFirst; short.Fit < 2 || short.Racing == 0 || short.OtherPrice == 0 || short.LicenseOnly == 0 {
		t.Fatalf("a short run without each kind of late order: %+v", short)
	}
}
