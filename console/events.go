package console

import (
	"net/http"
	"strings"
	"unicode/utf8"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

type eventsView struct {
	F      eventFilter
	Events []*fulfillmentv1.InboxEvent
	Next   string
	States []string
}

type eventFilter struct {
	State, Decision, Type, OrgID, EndpointID, OrderID string
}

func (f eventFilter) pairs() []string {
	return []string{"state", f.State, "decision", f.Decision, "type", f.Type, "org_id", f.OrgID, "endpoint_id", f.EndpointID, "order_id", f.OrderID}
}

var eventStates = []string{"pending", "processed", "ignored", "unmatched", "failed"}

// events lists stored provider events, newest first. The API serves them
// to admin tokens only (they carry payers' data).
func (c *Console) events(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	f := eventFilter{State: q.Get("state"), Decision: q.Get("decision"), Type: q.Get("type"),
		OrgID: q.Get("org_id"), EndpointID: q.Get("endpoint_id"), OrderID: q.Get("order_id")}
	if !s.Admin() {
		c.fail(w, r, s, http.StatusForbidden, "Stored provider events carry payers' data: the API shows them to admin tokens only.")
		return
	}
	resp, err := c.api.ListInboxEvents(s.call(r.Context()), &fulfillmentv1.ListInboxEventsRequest{
		State: f.State, Decision: f.Decision, Type: f.Type, OrgId: f.OrgID, EndpointId: f.EndpointID, OrderId: f.OrderID,
		PageSize: pageSize, PageToken: q.Get("page_token"),
	})
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	v := eventsView{F: f, Events: resp.GetEvents(), States: eventStates}
	if t := resp.GetNextPageToken(); t != "" {
		v.Next = link(Prefix+"events", append(f.pairs(), "page_token", t)...)
	}
	c.render(w, r, s, http.StatusOK, "events", "Events", v)
}

type eventView struct {
	Event *fulfillmentv1.InboxEvent
	// Raw is the stored body, set only once an admin revealed it.
	Raw      string
	Revealed bool
}

func (c *Console) event(w http.ResponseWriter, r *http.Request, s *session) {
	c.showEvent(w, r, s, false)
}

func (c *Console) showEvent(w http.ResponseWriter, r *http.Request, s *session, reveal bool) {
	resp, err := c.api.GetInboxEvent(s.call(r.Context()), &fulfillmentv1.GetInboxEventRequest{InboxEventId: r.PathValue("id")})
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	e := resp.GetEvent()
	v := eventView{Event: e}
	if reveal {
		v.Revealed = true
		v.Raw = printable(e.GetRawBody())
	}
	c.render(w, r, s, http.StatusOK, "event", "Event "+e.GetEventId(), v)
}

// revealRaw shows an event's raw body to an admin, and records that it did.
func (c *Console) revealRaw(w http.ResponseWriter, r *http.Request, s *session) {
	if !s.Admin() {
		c.fail(w, r, s, http.StatusForbidden, "Raw bodies are shown to admin tokens only.")
		return
	}
	id := r.PathValue("id")
	resp, err := c.api.GetInboxEvent(s.call(r.Context()), &fulfillmentv1.GetInboxEventRequest{InboxEventId: id})
	c.record(r.Context(), s.Name(), resp.GetEvent().GetOrgId(), "event.reveal_raw", "event", id, outcome(err), "")
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	c.showEvent(w, r, s, true)
}

// replayEvent processes an event again (ReplayInboxEvent): its decision
// is made anew, and effects already applied are not applied twice.
func (c *Console) replayEvent(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	resp, err := c.api.ReplayInboxEvent(s.call(r.Context()), &fulfillmentv1.ReplayInboxEventRequest{InboxEventId: id, ActorDetail: "console"})
	c.record(r.Context(), s.Name(), resp.GetEvent().GetOrgId(), "event.replay", "event", id, outcome(err), "")
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	done(w, r, Prefix+"events/"+id, "replayed")
}

// printable shows a body as text: invalid UTF-8 replaced, never executed
// (the template escapes it).
func printable(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
