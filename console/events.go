package console

import (
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

type eventsView struct {
	F         eventFilter
	Events    []*fulfillmentv1.InboxEvent
	Next      string
	States    []string
	Providers []string
	// Replay links the plan of replaying what the filter matches, when it
	// names an org and a decided state.
	Replay string
}

type eventFilter struct {
	State, Decision, Type, OrgID, Env, EndpointID, OrderID, Provider string
	// ReceivedAfter and ReceivedBefore are nil when not set.
	ReceivedAfter, ReceivedBefore *timestamppb.Timestamp
}

func (f eventFilter) pairs() []string {
	return []string{"state", f.State, "decision", f.Decision, "type", f.Type, "org_id", f.OrgID, "environment", f.Env, "endpoint_id", f.EndpointID,
		"order_id", f.OrderID, "provider", f.Provider, "received_after", inputTime(f.ReceivedAfter), "received_before", inputTime(f.ReceivedBefore)}
}

// readEventFilter reads the events filter of a query string.
func readEventFilter(q url.Values) (eventFilter, error) {
	f := eventFilter{State: q.Get("state"), Decision: q.Get("decision"), Type: q.Get("type"),
		OrgID: q.Get("org_id"), Env: q.Get("environment"), EndpointID: q.Get("endpoint_id"), OrderID: q.Get("order_id"), Provider: q.Get("provider")}
	var err error
	if f.ReceivedAfter, err = timeParam(q, "received_after"); err != nil {
		return f, err
	}
	f.ReceivedBefore, err = timeParam(q, "received_before")
	return f, err
}

// providers are the providers the filters offer.
var providers = []string{string(fulfillment.ProviderYolfi), string(fulfillment.ProviderTBank)}

var eventStates = []string{"pending", "processed", "ignored", "unmatched", "failed"}

// events lists stored provider events, newest first. The API serves them
// to admin tokens only (they carry payers' data).
func (c *Console) events(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	if !s.Admin() {
		c.fail(w, r, s, http.StatusForbidden, "Stored provider events carry payers' data: the API shows them to admin tokens only.")
		return
	}
	f, err := readEventFilter(q)
	if err != nil {
		c.fail(w, r, s, http.StatusBadRequest, err.Error())
		return
	}
	resp, err := c.api.ListInboxEvents(s.call(r.Context()), &fulfillmentv1.ListInboxEventsRequest{
		State: f.State, Decision: f.Decision, Type: f.Type, OrgId: f.OrgID, Environment: f.Env, EndpointId: f.EndpointID, OrderId: f.OrderID,
		Provider: f.Provider, ReceivedAfter: f.ReceivedAfter, ReceivedBefore: f.ReceivedBefore,
		PageSize: pageSize, PageToken: q.Get("page_token"),
	})
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	v := eventsView{F: f, Events: resp.GetEvents(), States: eventStates, Providers: providers}
	if f.OrgID != "" && f.State != "" && f.State != "pending" && f.OrderID == "" {
		v.Replay = link(Prefix+"redrive", "target", "events", "org_id", f.OrgID, "environment", f.Env, "state", f.State, "type", f.Type,
			"decision", f.Decision, "endpoint_id", f.EndpointID, "provider", f.Provider,
			"received_after", inputTime(f.ReceivedAfter), "received_before", inputTime(f.ReceivedBefore))
	}
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
	recorded := c.record(r.Context(), s.Name(), resp.GetEvent().GetOrgId(), "event.reveal_raw", "event", id, outcome(err), "")
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	if !recorded {
		// A body may hold a payer's data: it is shown only with a record
		// of who saw it.
		c.fail(w, r, s, http.StatusServiceUnavailable, "The audit log could not record this reveal, so the raw body is not shown: try again shortly.")
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
