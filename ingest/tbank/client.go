package tbank

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest/wire"
)

// Bounds of the Client.
const (
	// MaxAnswerBytes is the largest answer the Client reads from the bank.
	MaxAnswerBytes = 64 << 10
	// DefaultTimeout bounds a whole call (connect, send, answer) of a Client
	// made without an http.Client.
	DefaultTimeout = 30 * time.Second
)

// ErrInvalidRequest means the Client refused a call before sending
// anything: the bank saw nothing.
var ErrInvalidRequest = errors.New("invalid request")

// BankError is the bank's refusal: it answered with Success false or an
// ErrorCode other than "0". The answer is definite, and what to do depends
// on Code, e.g. a duplicate OrderId at Init (Options.DuplicateOrder).
type BankError struct {
	// Code is the bank's ErrorCode.
	Code string
	// Message and Details are the bank's explanation, as it wrote them.
	Message, Details string
	// PaymentID is the payment the answer names, when it names one (the
	// existing payment of a repeated OrderId, say).
	PaymentID string
}

// Error returns one line: the code and the bank's explanation.
func (e *BankError) Error() string {
	s := "the bank refused: ErrorCode " + oneLine(e.Code)
	for _, part := range []string{e.Message, e.Details} {
		if part != "" {
			s += ": " + oneLine(part)
		}
	}
	if e.PaymentID != "" {
		s += " (PaymentId " + e.PaymentID + ")"
	}
	return s
}

// UnknownOutcomeError means a call was sent and no usable answer came back:
// the connection failed or timed out, the context ended, the bank answered
// an HTTP status other than 2xx, or its answer was not one the Client can
// read (not JSON, members missing, another terminal). The bank may have
// received the request and acted on it: an Init may have created a
// payment. Never take it as "nothing happened": ask again (GetState, or
// Init with the same OrderId) before deciding.
type UnknownOutcomeError struct {
	// Op is the method called: Init or GetState.
	Op string
	// StatusCode is the HTTP status of the answer, 0 when none came.
	StatusCode int
	// Err says what went wrong.
	Err error
}

// Error returns one line: what went wrong.
func (e *UnknownOutcomeError) Error() string {
	s := "outcome unknown: "
	if e.StatusCode != 0 {
		s += "HTTP " + strconv.Itoa(e.StatusCode) + ": "
	}
	return s + e.Err.Error()
}

// Unwrap returns the cause (context.DeadlineExceeded, a *url.Error, …).
func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// Client calls the bank's API (Init, GetState) for one terminal. It is safe
// for concurrent use.
type Client struct {
	base        string
	terminalKey string
	password    []byte
	hc          *http.Client
}

// NewClient returns the client of terminal terminalKey at baseURL (http or
// https, without credentials; the methods are under {baseURL}/v2/). The
// first of passwords signs every request; the others (older passwords kept
// during a rotation) are not used. With hc nil, calls take at most
// DefaultTimeout and redirects are not followed: an answer that redirects
// is an UnknownOutcomeError.
func NewClient(baseURL, terminalKey string, passwords [][]byte, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return nil, errors.New("tbank: the base URL must be an absolute http or https URL")
	case u.User != nil:
		return nil, errors.New("tbank: the base URL must not carry credentials")
	case u.RawQuery != "" || u.Fragment != "":
		return nil, errors.New("tbank: the base URL must not have a query or fragment")
	case terminalKey == "":
		return nil, errors.New("tbank: the terminal key is required")
	case len(passwords) == 0 || len(passwords[0]) == 0:
		return nil, errors.New("tbank: the terminal password is required")
	}
	if hc == nil {
		hc = &http.Client{
			Timeout:       DefaultTimeout,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	return &Client{
		base:        strings.TrimSuffix(u.String(), "/"),
		terminalKey: terminalKey,
		password:    bytes.Clone(passwords[0]),
		hc:          hc,
	}, nil
}

// InitRequest starts a payment.
type InitRequest struct {
	// OrderID is the service's id of the payment attempt: deterministic for
	// one attempt, new for a new attempt. Required.
	OrderID string
	// Amount is in kopecks; positive.
	Amount int64
	// Description is shown to the payer (optional).
	Description string
	// NotificationURL overrides the terminal's notification URL (optional).
	NotificationURL string
	// Data is sent as DATA (optional); it is not signed.
	Data map[string]string
	// Recurrent asks the bank to bind the payer's card for recurrent
	// charges (Recurrent Y); the binding is the customer's CustomerKey,
	// required then.
	Recurrent bool
	// CustomerKey is the merchant's id of the payer (optional without
	// Recurrent; see CheckCustomerKey).
	CustomerKey string
}

// MaxCustomerKeyLen is the longest CustomerKey the bank takes, in
// characters.
const MaxCustomerKeyLen = 36

// CheckCustomerKey says why key cannot be a CustomerKey, or returns nil:
// it must be printable text of MaxCustomerKeyLen characters at most, as
// the bank documents. The error quotes nothing of key.
func CheckCustomerKey(key string) error {
	switch {
	case key == "":
		return errors.New("a CustomerKey is required to bind a card")
	case utf8.RuneCountInString(key) > MaxCustomerKeyLen:
		return fmt.Errorf("a CustomerKey must be at most %d characters, the bank's limit; this one has %d",
			MaxCustomerKeyLen, utf8.RuneCountInString(key))
	case fulfillment.RuleRef.Check(key) != nil:
		return fmt.Errorf("a CustomerKey %w", fulfillment.RuleRef.Check(key))
	}
	return nil
}

// Payment is a payment as the bank describes it in an answer.
type Payment struct {
	TerminalKey, OrderID, PaymentID, Status string
	// Amount is in kopecks.
	Amount int64
	// PaymentURL is the page the payer pays on (Init only).
	PaymentURL string
}

// Init creates a payment of r.Amount for r.OrderID and returns it, with
// the page to send the payer to. A repeated OrderId is a *BankError whose
// Code the terminal's Options.DuplicateOrder recognizes.
//
// Errors: ErrInvalidRequest (nothing sent), *BankError (the bank refused),
// *UnknownOutcomeError (a payment may exist).
func (c *Client) Init(ctx context.Context, r InitRequest) (Payment, error) {
	const op = "Init"
	if r.OrderID == "" || r.Amount <= 0 {
		return Payment{}, fmt.Errorf("tbank %s: %w: OrderID is required and Amount must be positive", op, ErrInvalidRequest)
	}
	if r.Recurrent || r.CustomerKey != "" {
		if err := CheckCustomerKey(r.CustomerKey); err != nil {
			return Payment{}, fmt.Errorf("tbank %s: %w: %w", op, ErrInvalidRequest, err)
		}
	}
	req := initRequest{
		TerminalKey: c.terminalKey, Amount: r.Amount, OrderID: r.OrderID,
		Description: r.Description, NotificationURL: r.NotificationURL, Data: r.Data,
		// One-stage whatever the terminal's default: the service fulfils
		// on CONFIRMED, and confirms no two-stage payment itself.
		PayType:     "O",
		CustomerKey: r.CustomerKey,
	}
	if r.Recurrent {
		req.Recurrent = "Y"
	}
	a, err := c.call(ctx, op, &req.Token, &req)
	if err != nil {
		return Payment{}, err
	}
	p, bad := a.payment(c.terminalKey)
	if len(bad.Problems) == 0 && (p.OrderID != r.OrderID || p.Amount != r.Amount) {
		bad.Add("OrderId and Amount must be the ones sent")
	}
	if u, err := url.Parse(a.PaymentURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad.Add("PaymentURL must be an absolute http or https URL")
	}
	if len(bad.Problems) > 0 {
		return Payment{}, malformed(op, a.httpStatus, bad)
	}
	p.PaymentURL = a.PaymentURL
	return p, nil
}

// GetState returns the payment paymentID as the bank has it now.
//
// Errors: ErrInvalidRequest (nothing sent), *BankError (the bank refused,
// e.g. an unknown payment), *UnknownOutcomeError.
func (c *Client) GetState(ctx context.Context, paymentID string) (Payment, error) {
	const op = "GetState"
	if paymentID == "" || !allDigits(paymentID) {
		return Payment{}, fmt.Errorf("tbank %s: %w: the PaymentId must be digits", op, ErrInvalidRequest)
	}
	req := getStateRequest{TerminalKey: c.terminalKey, PaymentID: paymentID}
	a, err := c.call(ctx, op, &req.Token, &req)
	if err != nil {
		return Payment{}, err
	}
	p, bad := a.payment(c.terminalKey)
	if len(bad.Problems) == 0 && p.PaymentID != paymentID {
		bad.Add("PaymentId must be the one asked for")
	}
	if len(bad.Problems) > 0 {
		return Payment{}, malformed(op, a.httpStatus, bad)
	}
	return p, nil
}

// initRequest and getStateRequest are the bodies sent; the Token is set
// once the rest is signed (every root string and number, Recurrent and
// CustomerKey included when sent; DATA is an object, not signed).
type initRequest struct {
	TerminalKey     string            `json:"TerminalKey"`
	Amount          int64             `json:"Amount"`
	OrderID         string            `json:"OrderId"`
	PayType         string            `json:"PayType"`
	Description     string            `json:"Description,omitempty"`
	NotificationURL string            `json:"NotificationURL,omitempty"`
	CustomerKey     string            `json:"CustomerKey,omitempty"`
	Recurrent       string            `json:"Recurrent,omitempty"`
	Data            map[string]string `json:"DATA,omitempty"`
	Token           string            `json:"Token,omitempty"`
}

type getStateRequest struct {
	TerminalKey string `json:"TerminalKey"`
	PaymentID   string `json:"PaymentId"`
	Token       string `json:"Token,omitempty"`
}

// answer is an answer of the bank, as far as the Client reads it.
type answer struct {
	Success     *bool           `json:"Success"`
	ErrorCode   string          `json:"ErrorCode"`
	Message     string          `json:"Message"`
	Details     string          `json:"Details"`
	TerminalKey string          `json:"TerminalKey"`
	Status      string          `json:"Status"`
	PaymentID   json.RawMessage `json:"PaymentId"`
	OrderID     string          `json:"OrderId"`
	Amount      json.RawMessage `json:"Amount"`
	PaymentURL  string          `json:"PaymentURL"`

	httpStatus int // of the HTTP answer
}

// call signs body (setting *token, see sign), posts it to method op and reads the
// answer: a refusal is a *BankError, everything after sending that is not a
// readable answer an *UnknownOutcomeError.
func (c *Client) call(ctx context.Context, op string, token *string, body any) (answer, error) {
	if err := ctx.Err(); err != nil {
		return answer{}, fmt.Errorf("tbank %s: %w", op, err)
	}
	signed, err := c.sign(token, body)
	if err != nil {
		return answer{}, fmt.Errorf("tbank %s: %w: %w", op, ErrInvalidRequest, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/v2/"+op, bytes.NewReader(signed))
	if err != nil {
		return answer{}, fmt.Errorf("tbank %s: %w: %w", op, ErrInvalidRequest, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")

	unknown := func(status int, err error) (answer, error) {
		return answer{}, fmt.Errorf("tbank %s: %w", op, &UnknownOutcomeError{Op: op, StatusCode: status, Err: err})
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return unknown(0, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return unknown(resp.StatusCode, errors.New("the bank did not answer 2xx"))
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	switch {
	case err != nil:
		return unknown(resp.StatusCode, fmt.Errorf("reading the answer: %w", err))
	case len(raw) > MaxAnswerBytes:
		return unknown(resp.StatusCode, fmt.Errorf("the answer is larger than %d bytes", MaxAnswerBytes))
	}
	var a answer
	if err := wire.Decode(raw, &a); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
			err = fmt.Errorf("the answer's %s has the wrong JSON type", te.Field)
		}
		return unknown(resp.StatusCode, err)
	}
	switch {
	case a.Success == nil:
		return unknown(resp.StatusCode, errors.New("the answer has no Success"))
	case a.TerminalKey != "" && a.TerminalKey != c.terminalKey:
		return unknown(resp.StatusCode, errors.New("the answer names another terminal"))
	case *a.Success && a.ErrorCode == "":
		return unknown(resp.StatusCode, errors.New("the answer has no ErrorCode"))
	case !*a.Success || a.ErrorCode != "0":
		be := &BankError{Code: a.ErrorCode, Message: a.Message, Details: a.Details}
		var bad problems
		be.PaymentID = bad.id("PaymentId", a.PaymentID, false)
		return answer{}, fmt.Errorf("tbank %s: %w", op, be)
	}
	a.httpStatus = resp.StatusCode
	return a, nil
}

// sign marshals body, a request whose Token member *token points into,
// with its Token set.
func (c *Client) sign(token *string, body any) ([]byte, error) {
	unsigned, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	if *token, err = Token(unsigned, c.password); err != nil {
		return nil, err
	}
	return json.Marshal(body)
}

// payment reads a successful answer, listing what is missing or wrong.
// An answer that does not name its terminal is taken as terminalKey's.
func (a *answer) payment(terminalKey string) (Payment, problems) {
	var bad problems
	p := Payment{TerminalKey: terminalKey, OrderID: a.OrderID, Status: a.Status}
	p.PaymentID = bad.id("PaymentId", a.PaymentID, true)
	if a.Status == "" {
		bad.Add("Status is required")
	}
	if a.OrderID == "" {
		bad.Add("OrderId is required")
	}
	lit := string(a.Amount)
	n, err := strconv.ParseInt(lit, 10, 64)
	if err != nil || !allDigits(lit) {
		bad.Add("Amount must be a whole number of kopecks")
	}
	p.Amount = n
	return p, bad
}

// malformed is the UnknownOutcomeError of a successful answer that does not
// say what the Client needs.
func malformed(op string, httpStatus int, bad problems) error {
	return fmt.Errorf("tbank %s: %w", op, &UnknownOutcomeError{
		Op: op, StatusCode: httpStatus,
		Err: errors.New("the answer is malformed: " + strings.Join(bad.Problems, "; ")),
	})
}

// oneLine keeps a text of the bank's on one line of printable characters,
// at most 200 bytes.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) {
			return ' '
		}
		return r
	}, s)
	if len(s) > 200 {
		s = strings.ToValidUTF8(s[:200], "") + "…"
	}
	return s
}
