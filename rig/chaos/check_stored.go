package chaos

// The inbox checks: every acknowledged event is stored exactly once, on the
// endpoint it was sent to, the inbox holds nothing that was not sent, and
// every stored event is processed into the state its decision calls for.

import (
	"maps"
	"slices"
)

// checkStored: every acknowledged event has exactly one inbox row, on the
// endpoint it was sent to; nothing else is in the inbox.
func (r *runner) checkStored(s *dbState) {
	c := Check{Name: "every acknowledged event stored exactly once"}
	one := func(e *eventPlan) {
		c.Checked++
		rows := s.inbox[e.id]
		switch {
		case len(rows) == 0:
			c.Failed++
			r.rep.Lost++
			if r.ofTBankOrder(e) {
				r.rep.TBank.Lost++
			}
			if r.subOf(e) != nil {
				r.rep.Subscriptions.Lost++
			}
			r.viol.add("lost", "event %s (%s %s, order %s) was acknowledged but is not stored", e.id, e.typ, e.role, r.mid(e))
		case len(rows) > 1:
			c.Failed++
			r.rep.DuplicatedEffects += len(rows) - 1
			if r.ofTBankOrder(e) {
				r.rep.TBank.Duplicated += len(rows) - 1
			}
			if r.subOf(e) != nil {
				r.rep.Subscriptions.Duplicated += len(rows) - 1
			}
			r.viol.add("duplicated event", "event %s is stored %d times", e.id, len(rows))
		case rows[0].endpoint != e.endpoint:
			c.Failed++
			r.viol.add("misfiled event", "event %s sent to %s is stored for endpoint %s", e.id, e.endpoint, rows[0].endpoint)
		}
	}
	for i, e := range r.w.events {
		if r.snd.acked[i].Load() {
			one(e)
			if r.ofTBankOrder(e) {
				r.rep.TBank.Acked++
			}
			if r.subOf(e) != nil {
				r.rep.Subscriptions.Acked++
			}
		}
	}
	r.mu.Lock()
	probes := slices.Clone(r.ackedProbes)
	sent := maps.Clone(r.sentProbes)
	r.mu.Unlock()
	for _, e := range probes {
		one(e)
	}
	r.addCheck(c)

	c = Check{Name: "the inbox holds only events that were sent"}
	planned := make(map[string]bool, len(r.w.events))
	for _, e := range r.w.events {
		planned[e.id] = true
	}
	for id := range s.inbox {
		c.Checked++
		if !planned[id] && !sent[id] {
			c.Failed++
			r.viol.add("unknown event", "inbox event %s was never sent", id)
		}
	}
	r.addCheck(c)
}

// checkProcessed: no event pending or failed; each event's state fits its
// decision.
func (r *runner) checkProcessed(s *dbState) {
	c := Check{Name: "every stored event processed, none failed"}
	for _, rows := range s.inbox {
		for _, e := range rows {
			c.Checked++
			want := "processed"
			switch e.decision {
			case decTestModeIgnored, decIgnoredType:
				want = "ignored"
			case decUnmatched:
				want = "unmatched"
			}
			switch {
			case e.state == "failed":
				c.Failed++
				r.viol.add("failed event", "event %s failed after %d attempts: %s", e.eventID, e.attempts, e.lastError)
			case e.state == "pending":
				c.Failed++
				r.viol.add("pending event", "event %s is still pending after %d attempts (last error %q)", e.eventID, e.attempts, e.lastError)
			case e.state != want:
				c.Failed++
				r.viol.add("event state", "event %s is %s with decision %q, want %s", e.eventID, e.state, e.decision, want)
			}
		}
	}
	r.addCheck(c)
}
