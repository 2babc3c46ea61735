package console

import (
	"net/http"
	"strconv"

	"github.com/fulfillplatform/fulfillment/fulfillment"
)

type auditView struct {
	Action  string
	Entries []fulfillment.ConsoleAuditEntry
	Next    string
}

// audit lists the console's recorded actions, newest first. A session
// limited to some orgs sees the actions on those orgs and its own.
func (c *Console) audit(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	f := fulfillment.ConsoleAuditFilter{Action: q.Get("action"), Limit: pageSize + 1}
	if orgs := s.Orgs(); orgs != nil {
		f.Orgs, f.Actor = orgs, s.Name()
	}
	if b := q.Get("before"); b != "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 {
			c.fail(w, r, s, http.StatusBadRequest, "before must be an audit entry number.")
			return
		}
		f.Before = n
	}
	entries, err := c.store.ConsoleAuditList(r.Context(), f)
	if err != nil {
		c.log.WarnContext(r.Context(), "console: reading the audit log", "error", err)
		c.fail(w, r, s, http.StatusServiceUnavailable, "The audit log cannot be read right now; try again shortly.")
		return
	}
	v := auditView{Action: f.Action, Entries: entries}
	if len(entries) > pageSize {
		v.Entries = entries[:pageSize]
		v.Next = link(Prefix+"audit", "action", f.Action, "before", strconv.FormatInt(v.Entries[pageSize-1].ID, 10))
	}
	c.render(w, r, s, http.StatusOK, "audit", "Audit", v)
}
