package fulfillment

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestFailedPoll(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		poll       FailedPoll
		failing    bool
		unanswered int
		says       []string
	}{
		{"never answered", FailedPoll{EndpointID: "tbank-live", PaymentID: "1000001", Attempts: 5,
			LastError: "asking tbank-live for payment 1000001: connection refused"}, true, 5,
			[]string{"payment 1000001 at endpoint tbank-live gave up after 5 attempts, none of them answered",
				"last error: asking tbank-live for payment 1000001: connection refused.", "look it up at the provider",
				"stays open until a person resolves it"}},
		{"answered, then failing", FailedPoll{EndpointID: "e", PaymentID: "7", Attempts: 60, Answered: 48, LastError: "HTTP 503"}, true, 12,
			[]string{"after 60 attempts, the last 12 unanswered (the provider last answered attempt 48)", "last error: HTTP 503."}},
		{"only the last unanswered", FailedPoll{PaymentID: "7", Attempts: 60, Answered: 59, LastError: "timed out"}, true, 1,
			[]string{"the last 1 unanswered (the provider last answered attempt 59)"}},
		{"the last attempt answered: a payer who never paid", FailedPoll{PaymentID: "7", Attempts: 60, Answered: 60,
			LastError: "not done yet: payment 7 is NEW"}, false, 0, nil},
		{"the last answer: the money held", FailedPoll{PaymentID: "7", EndpointID: "e", Attempts: 60, Answered: 60,
			LastError: "not done yet: payment 7 is AUTHORIZED", Held: "AUTHORIZED"}, true, 0,
			[]string{"payment 7 at endpoint e stopped after 60 attempts with the payment AUTHORIZED at the provider: " +
				"the payer's money is held there, neither taken nor released. Take the payment at the provider",
				"stays open until a person resolves it"}},
		{"held, then unanswered", FailedPoll{PaymentID: "7", EndpointID: "e", Attempts: 60, Answered: 58,
			LastError: "HTTP 503", Held: "AUTHORIZED"}, true, 2,
			[]string{"the last 2 unanswered (the provider last answered attempt 58); last error: HTTP 503. " +
				"Its last answer had the payment AUTHORIZED: the payer's money may be held there. The service does not know"}},
		{"a held status word is quoted bounded", FailedPoll{PaymentID: "7", Attempts: 1, Answered: 1,
			Held: "AUTHORIZED\n" + strings.Repeat("x", 100)}, true, 0, []string{"with the payment AUTHORIZED x", "x… at the provider"}},
		{"no error recorded", FailedPoll{PaymentID: "7", Attempts: 3}, true, 3, []string{"last error: none recorded."}},
		{"one attempt", FailedPoll{PaymentID: "7", EndpointID: "e", Attempts: 1, LastError: "timed out"}, true, 1,
			[]string{"at endpoint e gave up after 1 attempt, unanswered; last error: timed out."}},
		{"abandoned: the worker stopped during the last", FailedPoll{PaymentID: "7", EndpointID: "e", Attempts: 4, Answered: 2,
			LastError: "HTTP 503", Abandoned: true}, true, 2,
			[]string{"gave up after 4 attempts, the last 2 unanswered (the provider last answered attempt 2), the last never completing " +
				"(the worker stopped during it); last recorded error: HTTP 503."}},
		{"abandoned before any error", FailedPoll{EndpointID: "e", Attempts: 2, Abandoned: true}, true, 2,
			[]string{"payment unknown at endpoint e", "none of them answered, the last never completing", "last recorded error: none recorded."}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.poll.Failing(); got != tc.failing {
				t.Errorf("Failing = %v, want %v", got, tc.failing)
			}
			if got := tc.poll.Unanswered(); got != tc.unanswered {
				t.Errorf("Unanswered = %d, want %d", got, tc.unanswered)
			}
			d := tc.poll.Detail()
			for _, s := range tc.says {
				if !strings.Contains(d, s) {
					t.Errorf("detail %q does not say %q", d, s)
				}
			}
		})
	}
}

// The last error is quoted on one line and bounded, cut on a character
// boundary.
func TestFailedPollDetailBoundsTheError(t *testing.T) {
	t.Parallel()
	long := "the bank refused: ErrorCode 9:\n" + strings.Repeat("ошибка ", 200)
	d := FailedPoll{PaymentID: "7", Attempts: 3, LastError: long}.Detail()
	_, quoted, _ := strings.Cut(d, "last error: ")
	quoted, _, _ = strings.Cut(quoted, ". The service")
	if len(quoted) > maxPollError || !strings.HasSuffix(quoted, "…") || !utf8.ValidString(quoted) {
		t.Errorf("quoted error is %d bytes (at most %d), ends %q, valid UTF-8 %v", len(quoted), maxPollError,
			quoted[max(len(quoted)-8, 0):], utf8.ValidString(quoted))
	}
	if strings.ContainsAny(d, "\n\r\t") {
		t.Errorf("detail %q is not one line", d)
	}
	if !strings.HasPrefix(quoted, "the bank refused: ErrorCode 9: ошибка") {
		t.Errorf("quoted error %q", quoted)
	}
}

func TestPollFailingKind(t *testing.T) {
	t.Parallel()
	if !ReconPollFailing.Valid() {
		t.Error("poll_failing is not a valid kind")
	}
	found := false
	for _, k := range ReconKinds {
		found = found || k == ReconPollFailing
	}
	if !found {
		t.Error("poll_failing is missing from ReconKinds: summaries would not show it")
	}
	// One item per payment start, whatever else the subject names.
	a := ItemKey(ReconPollFailing, ItemSubject{StartID: 42, PaymentID: "1", OrderID: "o"})
	b := ItemKey(ReconPollFailing, ItemSubject{StartID: 42, PaymentID: "2", EventID: "e"})
	if a != "start|42" || a != b {
		t.Errorf("keys %q and %q, want start|42 for both", a, b)
	}
}
