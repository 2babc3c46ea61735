package e2e_test

import (
	"fmt"
	"testing"

	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// Every order of {invoice.created, payment.confirmed, invoice.overdue, a
// second payment.confirmed} for one order ends in the same final state with
// the same effects: fulfilled once, the other payment flagged once.
func TestEventOrderDoesNotMatter(t *testing.T) {
	t.Parallel()
	s := startStack(t)
	perms := permutations([]int{0, 1, 2, 3})
	if len(perms) != 24 {
		t.Fatalf("%d permutations, want 24", len(perms))
	}
	var first effects
	for n, perm := range perms {
		id := fmt.Sprintf("perm-%02d", n)
		order := s.createOrder(t, "live", id)
		evs := []yolfi.Payload{
			event(yolfi.TypeInvoiceCreated, id, "inv_"+id+"_1"),
			event(yolfi.TypePaymentConfirmed, id, "inv_"+id+"_1"),
			event(yolfi.TypeInvoiceOverdue, id, "inv_"+id+"_1"),
			event(yolfi.TypePaymentConfirmed, id, "inv_"+id+"_2"),
		}
		for _, i := range perm {
			s.sendOK(t, evs[i])
			s.settle(t) // processed in exactly this order
		}
		// And every event once more, redelivered.
		for _, i := range perm {
			s.sendOK(t, evs[i])
		}
		s.settle(t)

		got := s.effects(t, order.GetId())
		if got.State != "fulfilled" || got.Licenses != 2 || got.Credits != 1 || got.Attempts != 2 ||
			got.Items["extra_payment"] != 1 || len(got.Items) != 1 {
			t.Errorf("order %v: %v (decisions %s)", perm, got, s.decisions(t, order.GetId()))
		}
		if n == 0 {
			first = got
		} else if got.String() != first.String() {
			t.Errorf("order %v ends as %v, order %v ended as %v", perm, got, perms[0], first)
		}
	}
}

// permutations returns every ordering of xs.
func permutations(xs []int) [][]int {
	if len(xs) <= 1 {
		return [][]int{append([]int(nil), xs...)}
	}
	var out [][]int
	for i := range xs {
		rest := append(append([]int(nil), xs[:i]...), xs[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]int{xs[i]}, p...))
		}
	}
	return out
}
