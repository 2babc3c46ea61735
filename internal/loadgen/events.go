package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
)

// Event is one signed Yolfi webhook, ready to be (re)sent byte for byte.
type Event struct {
	ID              string
	Type            string
	MerchantOrderID string
	Body            []byte
	Signature       string // X-Yolfi-Signature over Body
}

// EventSource builds the signed events of one webhook endpoint.
type EventSource struct {
	Org    string // the endpoint's org (sent as orgId)
	Live   bool   // livemode: a test event reaching a live endpoint has no effect
	Secret []byte // the endpoint's signing secret
	// BodySize pads each body with provider-style extra members (which the
	// adapter ignores) to about this many bytes; 0 leaves bodies minimal.
	BodySize int
}

// Confirmed returns a new payment.confirmed event paying order mid's
// settlement (25 USDT on TRON, see OrderRequest) in full.
func (s EventSource) Confirmed(mid string) Event {
	return s.build(yolfi.TypePaymentConfirmed, mid, yolfi.PayloadData{
		InvoiceID: "inv_" + mid, PaymentID: "pay_" + mid, MerchantOrderID: mid,
		Amount: SettlementAmount, Token: SettlementToken, Network: SettlementNetwork,
		TxHash: "0x" + yolfi.NewID("")[:16],
	})
}

// Invoice returns a new invoice event (invoice.created, invoice.overdue, …)
// for order mid's invoice. Sent after the order's confirmation it is an
// out-of-order event: recorded as stale, the order never moves back.
func (s EventSource) Invoice(typ, mid string) Event {
	return s.build(typ, mid, yolfi.PayloadData{InvoiceID: "inv_" + mid, MerchantOrderID: mid})
}

func (s EventSource) build(typ, mid string, data yolfi.PayloadData) Event {
	live := s.Live
	p := yolfi.Payload{ID: yolfi.NewID("evt_"), Type: typ, Livemode: &live, OrgID: s.Org,
		CreatedAt: time.Now().UTC().Format(time.RFC3339), Data: data}
	body, err := json.Marshal(p)
	if err != nil {
		panic(err) // a Payload of strings always marshals
	}
	body = pad(body, s.BodySize)
	return Event{ID: p.ID, Type: typ, MerchantOrderID: mid, Body: body, Signature: yolfi.Sign(s.Secret, body)}
}

// Sender posts events to one webhook URL over keep-alive connections.
type Sender struct {
	URL    string
	Client *http.Client
}

// NewSender returns a Sender for url keeping up to conns idle connections.
func NewSender(url string, conns int) *Sender {
	return &Sender{URL: url, Client: &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute},
	}}
}

// Send posts ev with its signature and event id headers and returns the
// HTTP status.
func (s *Sender) Send(ctx context.Context, ev Event) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(ev.Body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(yolfi.SignatureHeader, ev.Signature)
	req.Header.Set(yolfi.EventIDHeader, ev.ID)
	resp, err := s.Client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// Close drops the idle connections.
func (s *Sender) Close() { s.Client.CloseIdleConnections() }

// pad appends an "apiVersion" and a "metadata" member, as the provider's
// real payloads carry, so body grows to about size bytes.
func pad(body []byte, size int) []byte {
	const head = `,"apiVersion":"2024-06-01","metadata":{"cart":"`
	const tail = `"}}`
	n := size - len(body) - len(head) - len(tail) + 1 // the closing brace is replaced
	if n <= 0 {
		return body
	}
	out := make([]byte, 0, size)
	out = append(out, body[:len(body)-1]...)
	out = append(out, head...)
	out = append(out, bytes.Repeat([]byte("x"), n)...)
	return append(out, tail...)
}
