package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fulfillplatform/fulfillment/ingest/tbank"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/fakebank"
)

// Event is one signed webhook of a provider, ready to be (re)sent byte for
// byte.
type Event struct {
	// ID is the id the service deduplicates it by (inbox_events.event_id).
	ID   string
	Type string
	// MerchantOrderID is the order it is about, as given to the Source.
	MerchantOrderID string
	// PaymentID is the provider's id of the payment it reports.
	PaymentID string
	Body      []byte
	// Header holds the provider's headers (signature, event id); the
	// Content-Type is always JSON.
	Header http.Header
	// Ack is the whole answer body that acknowledges it to its provider;
	// "" takes any body of a 200.
	Ack string
}

// Source builds the signed webhooks of one provider's endpoint; a Mix sends
// those of any provider alike.
type Source interface {
	// Confirmed returns a new notification that order mid is paid in full.
	Confirmed(mid string) Event
	// Stale returns a new notification about the payment of confirmed that
	// belongs before it: sent after it, it is out of order, recorded as
	// stale, and the order never moves back.
	Stale(confirmed Event) Event
}

// YolfiSource builds the signed events of one Yolfi webhook endpoint.
type YolfiSource struct {
	Org    string // the endpoint's org (sent as orgId)
	Live   bool   // livemode: a test event reaching a live endpoint has no effect
	Secret []byte // the endpoint's signing secret
	// BodySize pads each body with provider-style extra members (which the
	// adapter ignores) to about this many bytes; 0 leaves bodies minimal.
	BodySize int
}

// Confirmed returns a new payment.confirmed event paying order mid's
// settlement (25 USDT on TRON, see OrderRequest) in full.
func (s YolfiSource) Confirmed(mid string) Event {
	return s.build(yolfi.TypePaymentConfirmed, mid, yolfi.PayloadData{
		InvoiceID: "inv_" + mid, PaymentID: "pay_" + mid, MerchantOrderID: mid,
		Amount: SettlementAmount, Token: SettlementToken, Network: SettlementNetwork,
		TxHash: "0x" + yolfi.NewID("")[:16],
	})
}

// Stale returns a new invoice.created or invoice.overdue (at random) for
// the invoice of confirmed's order.
func (s YolfiSource) Stale(confirmed Event) Event {
	typ := yolfi.TypeInvoiceCreated
	if rand.IntN(2) == 0 {
		typ = yolfi.TypeInvoiceOverdue
	}
	mid := confirmed.MerchantOrderID
	return s.build(typ, mid, yolfi.PayloadData{InvoiceID: "inv_" + mid, MerchantOrderID: mid})
}

func (s YolfiSource) build(typ, mid string, data yolfi.PayloadData) Event {
	live := s.Live
	p := yolfi.Payload{ID: yolfi.NewID("evt_"), Type: typ, Livemode: &live, OrgID: s.Org,
		CreatedAt: time.Now().UTC().Format(time.RFC3339), Data: data}
	body, err := json.Marshal(p)
	if err != nil {
		panic(err) // a Payload of strings always marshals
	}
	body = pad(body, s.BodySize)
	h := http.Header{}
	h.Set(yolfi.SignatureHeader, yolfi.Sign(s.Secret, body))
	h.Set(yolfi.EventIDHeader, p.ID)
	return Event{ID: p.ID, Type: typ, MerchantOrderID: mid, PaymentID: data.PaymentID, Body: body, Header: h}
}

// TBankSource builds the notifications of one T-Bank terminal, signed as
// the bank signs them (fakebank.NoticeBody): CONFIRMED of a new payment for
// TBankAmount kopecks whose OrderId is the order's checkout session (see
// TBankOrderRequest), and AUTHORIZED of the same payment as the stale one.
// Each wants the answer OK.
type TBankSource struct {
	TerminalKey string
	Password    []byte // the terminal password
	paymentID   atomic.Int64
}

// NewTBankSource returns the source of terminal, whose payment ids start
// from the current time in microseconds: new in every run.
func NewTBankSource(terminal string, password []byte) *TBankSource {
	s := &TBankSource{TerminalKey: terminal, Password: password}
	s.paymentID.Store(time.Now().UnixMicro())
	return s
}

// Confirmed returns a CONFIRMED notification of a new payment of order mid.
func (s *TBankSource) Confirmed(mid string) Event {
	return s.notice(mid, strconv.FormatInt(s.paymentID.Add(1), 10), tbank.StatusConfirmed)
}

// Stale returns the AUTHORIZED notification of confirmed's payment, which
// the bank sends before its CONFIRMED.
func (s *TBankSource) Stale(confirmed Event) Event {
	return s.notice(confirmed.MerchantOrderID, confirmed.PaymentID, tbank.StatusAuthorized)
}

func (s *TBankSource) notice(mid, paymentID, status string) Event {
	body := fakebank.NoticeBody(fakebank.NoticeFields{TerminalKey: s.TerminalKey, OrderID: mid, PaymentID: paymentID,
		Status: status, Amount: TBankAmount}, s.Password)
	return Event{ID: s.TerminalKey + ":" + paymentID + ":" + status, Type: status, MerchantOrderID: mid,
		PaymentID: paymentID, Body: body, Ack: "OK"}
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

// Send posts ev with its headers and returns the HTTP status. A 200 whose
// body is not ev's Ack is an error: its provider would deliver it again.
func (s *Sender) Send(ctx context.Context, ev Event) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(ev.Body))
	if err != nil {
		return 0, err
	}
	for k, v := range ev.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.Client.Do(req)
	if err != nil {
		return 0, err
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, int64(len(ev.Ack))+1))
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if ev.Ack != "" && resp.StatusCode == http.StatusOK && string(answer) != ev.Ack {
		return 0, fmt.Errorf("answered 200 %q, not the acknowledgement %q", answer, ev.Ack)
	}
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
