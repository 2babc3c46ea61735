package chaos

// checkTestMode: test-mode events on the live endpoint are recorded as
// ignored and touch nothing; those on the test endpoint match no live order;
// orders that only ever saw test-mode events are unpaid and without effects.
func (r *runner) checkTestMode(s *dbState) {
	c := Check{Name: "test-mode events recorded as ignored, linked to nothing"}
	for _, e := range r.w.events {
		if !e.testMode {
			continue
		}
		rows := s.inbox[e.id]
		if len(rows) != 1 {
			continue // not stored (reported when acknowledged), or reported as duplicated
		}
		c.Checked++
		ev := rows[0]
		wantEnv, wantDecision := "live", decTestModeIgnored
		if e.endpoint == testEP {
			wantEnv, wantDecision = "test", decUnmatched
		}
		if ev.env != wantEnv || ev.decision != wantDecision || ev.orderID != "" {
			c.Failed++
			r.viol.add("test mode reached live", "test-mode event %s (%s on %s) recorded in %s as %q linked to order %q, want %s %q linked to none",
				e.id, e.typ, e.endpoint, ev.env, ev.decision, ev.orderID, wantEnv, wantDecision)
		}
	}
	r.addCheck(c)

	c = Check{Name: "test-mode-only orders unpaid, without effects"}
	for _, o := range r.w.orders {
		if !o.testOnly {
			continue
		}
		c.Checked++
		row, ok := s.orders[o.mid]
		if !ok {
			c.Failed++
			r.viol.add("missing order", "order %s does not exist", o.mid)
			continue
		}
		items := 0
		for _, it := range s.items {
			if it.orderID == row.id {
				items++
			}
		}
		if row.state != "pending_payment" || s.licenses[row.id] > 0 || s.ledger[row.id] > 0 ||
			len(s.attempts[row.id]) > 0 || len(s.byOrder[row.id]) > 0 || items > 0 {
			c.Failed++
			r.viol.add("test mode reached live", "order %s saw only test-mode events but is %s with %d licenses, %d credits, %d attempts, %d linked events, %d items",
				o.mid, row.state, s.licenses[row.id], s.ledger[row.id], len(s.attempts[row.id]), len(s.byOrder[row.id]), items)
		}
	}
	r.addCheck(c)
}
