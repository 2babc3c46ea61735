package console

import (
	"net/http"
	"strings"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

type outboxView struct {
	State, DestinationID, OrderID, OrgID, Env string
	Messages                                  []*fulfillmentv1.OutboxMessage
	Next                                      string
	States                                    []string
}

var messageStates = []string{"pending", "delivered", "failed", "uncertain"}

// outbox lists outbox messages, newest first.
func (c *Console) outbox(w http.ResponseWriter, r *http.Request, s *session) {
	q := r.URL.Query()
	v := outboxView{State: q.Get("state"), DestinationID: q.Get("destination_id"), OrderID: q.Get("order_id"), OrgID: q.Get("org_id"),
		Env: q.Get("environment"), States: messageStates}
	if !s.Can(config.ScopeOutboxRead) {
		c.fail(w, r, s, http.StatusForbidden, "Your token cannot read the outbox (it needs outbox:read).")
		return
	}
	resp, err := c.api.ListOutboxMessages(s.call(r.Context()), &fulfillmentv1.ListOutboxMessagesRequest{
		State: v.State, DestinationId: v.DestinationID, OrderId: v.OrderID, OrgId: v.OrgID, Environment: v.Env,
		PageSize: pageSize, PageToken: q.Get("page_token"),
	})
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	v.Messages = resp.GetMessages()
	if t := resp.GetNextPageToken(); t != "" {
		v.Next = link(Prefix+"outbox", "state", v.State, "destination_id", v.DestinationID, "order_id", v.OrderID, "org_id", v.OrgID,
			"environment", v.Env, "page_token", t)
	}
	c.render(w, r, s, http.StatusOK, "outbox", "Outbox", v)
}

type messageView struct {
	Message *fulfillmentv1.OutboxMessage
	// Retryable: failed or uncertain, sent again with its attempts reset;
	// or confirmed delivered, when the destination says it has it.
	Retryable bool
	// Waiting: pending, its next attempt later; it can be sent now.
	Waiting bool
	// Resendable: delivered; sent again only when asked to resend.
	Resendable bool
}

func (c *Console) message(w http.ResponseWriter, r *http.Request, s *session) {
	resp, err := c.api.GetOutboxMessage(s.call(r.Context()), &fulfillmentv1.GetOutboxMessageRequest{MessageId: r.PathValue("id")})
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	m := resp.GetMessage()
	st := m.GetState()
	c.render(w, r, s, http.StatusOK, "message", "Message "+m.GetId(), messageView{
		Message:    m,
		Retryable:  st == "failed" || st == "uncertain",
		Waiting:    st == "pending" && m.GetNextAttemptTime().AsTime().After(c.now()),
		Resendable: st == "delivered",
	})
}

// retryMessage sends a message again (RetryOutboxMessage): a failed or
// uncertain one, a pending one at once, a delivered one when the form asks
// to resend it.
func (c *Console) retryMessage(w http.ResponseWriter, r *http.Request, s *session) {
	id, resend := r.PathValue("id"), r.PostForm.Get("resend") == "1"
	resp, err := c.api.RetryOutboxMessage(s.call(r.Context()), &fulfillmentv1.RetryOutboxMessageRequest{MessageId: id, Resend: resend})
	action, what := "outbox.retry", "retried"
	if resend {
		action, what = "outbox.resend", "resent"
	}
	c.record(r.Context(), s.Name(), resp.GetMessage().GetOrgId(), action, "outbox_message", id, outcome(err), "")
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	done(w, r, Prefix+"outbox/"+id, what)
}

// confirmMessage records that a failed or uncertain message reached its
// destination (ConfirmOutboxDelivery), with the note saying how the
// destination confirmed it: nothing is sent.
func (c *Console) confirmMessage(w http.ResponseWriter, r *http.Request, s *session) {
	id, note := r.PathValue("id"), strings.TrimSpace(r.PostForm.Get("note"))
	resp, err := c.api.ConfirmOutboxDelivery(s.call(r.Context()), &fulfillmentv1.ConfirmOutboxDeliveryRequest{
		MessageId: id, Note: note, ActorDetail: "console"})
	c.record(r.Context(), s.Name(), resp.GetMessage().GetOrgId(), "outbox.confirm_delivered", "outbox_message", id, outcome(err), note)
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	done(w, r, Prefix+"outbox/"+id, "confirmed")
}

type destinationsView struct {
	Destinations []*fulfillmentv1.Destination
}

// destinations lists the configured destinations and their state (admin).
func (c *Console) destinations(w http.ResponseWriter, r *http.Request, s *session) {
	if !s.Admin() {
		c.fail(w, r, s, http.StatusForbidden, "Destinations are shown to admin tokens only.")
		return
	}
	resp, err := c.api.ListDestinations(s.call(r.Context()), &fulfillmentv1.ListDestinationsRequest{})
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	c.render(w, r, s, http.StatusOK, "destinations", "Destinations", destinationsView{Destinations: resp.GetDestinations()})
}

func (c *Console) disableDestination(w http.ResponseWriter, r *http.Request, s *session) {
	id, reason := r.PathValue("id"), strings.TrimSpace(r.PostForm.Get("reason"))
	_, err := c.api.DisableDestination(s.call(r.Context()), &fulfillmentv1.DisableDestinationRequest{DestinationId: id, Reason: reason})
	c.record(r.Context(), s.Name(), "", "destination.disable", "destination", id, outcome(err), reason)
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	done(w, r, Prefix+"destinations", "disabled")
}

func (c *Console) enableDestination(w http.ResponseWriter, r *http.Request, s *session) {
	id := r.PathValue("id")
	_, err := c.api.EnableDestination(s.call(r.Context()), &fulfillmentv1.EnableDestinationRequest{DestinationId: id})
	c.record(r.Context(), s.Name(), "", "destination.enable", "destination", id, outcome(err), "")
	if err != nil {
		c.apiFail(w, r, s, err)
		return
	}
	done(w, r, Prefix+"destinations", "enabled")
}
