package fulfillment

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// FailedPoll is a status poll that used its attempts (the poller's
// max_attempts) before its payment's outcome was known: the service asks
// no more.
type FailedPoll struct {
	// EndpointID and PaymentID name the provider's payment asked about.
	EndpointID, PaymentID string
	// Attempts is how many times the provider was asked; Answered is the
	// last of those attempts it answered (0: none did).
	Attempts, Answered int
	// LastError is why the last attempt failed, as the poller recorded it
	// (never a body: the poller records what failed, not what was sent).
	LastError string
	// Abandoned is set when the last attempt never completed: the worker
	// stopped during it, and LastError is the error recorded before it.
	Abandoned bool
	// Held is the provider's status word when its last answer said the
	// payer's money was held (authorized, neither taken nor released:
	// PollAnswer.Held); empty when it did not.
	Held string
}

// Failing reports whether p opens a poll_failing item: its last attempt
// got no answer — the provider was unreachable, answered an error, or the
// answer could not be read or stored — so the service stopped asking
// without learning what became of the payment; or the provider's last
// answer was that the payer's money is held, which nothing in the service
// will take or release. A poll whose last question was answered "not paid
// yet" opens none: a payer who never pays is no anomaly, and the answer is
// stored as an event like any other.
func (p FailedPoll) Failing() bool { return p.Answered < p.Attempts || p.Held != "" }

// Unanswered is how many attempts in a row, the last included, got no
// answer.
func (p FailedPoll) Unanswered() int { return max(p.Attempts-p.Answered, 0) }

// maxPollError bounds the last error an item's detail quotes, in bytes.
const maxPollError = 300

// Detail is the detail of p's poll_failing item: the payment and endpoint,
// the attempts, the last error, and what the item asks of a person.
func (p FailedPoll) Detail() string {
	answers := "none of them answered"
	switch {
	case p.Attempts == 1 && p.Answered == 0:
		answers = "unanswered"
	case p.Answered > 0:
		answers = fmt.Sprintf("the last %d unanswered (the provider last answered attempt %d)", p.Unanswered(), p.Answered)
	}
	last := clipText(p.LastError, maxPollError)
	if last == "" {
		last = "none recorded"
	}
	payment := p.PaymentID
	if payment == "" {
		payment = "unknown"
	}
	if p.Held != "" && p.Unanswered() == 0 {
		return fmt.Sprintf("the status poll of payment %s at endpoint %s stopped after %s with the payment %s at the "+
			"provider: the payer's money is held there, neither taken nor released. ",
			payment, p.EndpointID, attemptsText(p.Attempts), clipText(p.Held, maxHeldStatus)) + PollHeldAdvice
	}
	held := ""
	if p.Held != "" {
		held = fmt.Sprintf(" Its last answer had the payment %s: the payer's money may be held there.", clipText(p.Held, maxHeldStatus))
	}
	if p.Abandoned {
		return fmt.Sprintf("the status poll of payment %s at endpoint %s gave up after %s, %s, the last never completing "+
			"(the worker stopped during it); last recorded error: %s.%s ",
			payment, p.EndpointID, attemptsText(p.Attempts), answers, last, held) + PollFailingAdvice
	}
	return fmt.Sprintf("the status poll of payment %s at endpoint %s gave up after %s, %s; last error: %s.%s ",
		payment, p.EndpointID, attemptsText(p.Attempts), answers, last, held) + PollFailingAdvice
}

// maxHeldStatus bounds the provider's status word an item's detail quotes.
const maxHeldStatus = 40

// PollHeldAdvice ends the detail of a poll_failing item whose payment the
// provider last reported held: what a person does about it.
const PollHeldAdvice = "Take the payment at the provider (its confirmation then settles the order through the usual " +
	"rules) or release it to the payer; this item stays open until a person resolves it."

// PollFailingAdvice ends the detail of every poll_failing item: what it
// asks of a person, and that it stays open whatever comes later.
const PollFailingAdvice = "The service does not know the payment's outcome: look it up at the provider. " +
	"A notification that comes later still settles the order; this item stays open until a person resolves it."

func attemptsText(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// clipText is s on one line — control characters as spaces — cut to at
// most n bytes on a character boundary, "…" marking a cut.
func clipText(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return ' '
		}
		return r
	}, strings.TrimSpace(s))
	if len(s) <= n {
		return s
	}
	const mark = "…"
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
