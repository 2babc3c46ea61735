package fulfillment

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

// Input limits. They bound what one request may store or cause, and every
// layer that reads such a field — the order API, the webhook adapters and
// RecordEvent — checks it against these, before anything is written.
const (
	// MaxIDLen bounds identifiers: orgs, merchant orders, checkout sessions,
	// SKUs, accounts, provider event ids and payment references (bytes).
	MaxIDLen = 128
	// MaxEventTypeLen bounds a provider's event type name (bytes).
	MaxEventTypeLen = 64
	// MaxTokenLen and MaxNetworkLen bound a settlement token and network.
	MaxTokenLen   = 16
	MaxNetworkLen = 32
	// MaxDecimalInt and MaxDecimalFrac bound the digits of a decimal
	// amount before and after its point (a numeric(38, 18) column).
	MaxDecimalInt  = 20
	MaxDecimalFrac = 18
	// MaxRawBodyBytes bounds the raw webhook body stored with an event.
	MaxRawBodyBytes = 1 << 20
	// MaxRefs bounds the provider-specific references of one event.
	MaxRefs = 16

	// MaxLines bounds the lines of one order.
	MaxLines = 100
	// MaxQuantity bounds the units of one order line.
	MaxQuantity = 1_000_000
	// MaxLicensesPerOrder bounds the license units of one order: each is
	// a row granted in the transaction that fulfils the order, so it is
	// what keeps that transaction short.
	MaxLicensesPerOrder = 1_000
	// MaxHistoryItems bounds the payment attempts and the provider events
	// an order's history shows: the newest ones.
	MaxHistoryItems = 100
	// MaxLedgerItems bounds the ledger entries an order's history shows,
	// the newest: a line has a credit and a reversal at most, but a
	// partial reversal for each partial refund of the provider's.
	MaxLedgerItems = 500
)

// TextKind says which characters a text field may hold.
type TextKind int

// Text kinds.
const (
	// Code is printable ASCII without spaces: event ids and types, tokens,
	// networks.
	Code TextKind = iota
	// Label is valid UTF-8 of printable characters (the ASCII space
	// included): ids that merchants and providers choose, in any script.
	Label
)

// TextRule is the rule of one kind of text field.
type TextRule struct {
	Max  int
	Kind TextKind
}

// The rules of text fields; each is defined here only.
var (
	// RuleRef is the rule of identifiers and payment references.
	RuleRef = TextRule{Max: MaxIDLen, Kind: Label}
	// RuleEventID is the rule of a provider's event id.
	RuleEventID = TextRule{Max: MaxIDLen, Kind: Code}
	// RuleEventType is the rule of a provider's event type.
	RuleEventType = TextRule{Max: MaxEventTypeLen, Kind: Code}
	// RuleToken is the rule of a payment token symbol.
	RuleToken = TextRule{Max: MaxTokenLen, Kind: Code}
	// RuleNetwork is the rule of a payment network name.
	RuleNetwork = TextRule{Max: MaxNetworkLen, Kind: Code}
	// RuleRefName is the rule of a provider reference's name.
	RuleRefName = TextRule{Max: 32, Kind: Code}
	// RuleNote is the rule of what a person writes down: why a
	// destination was disabled, how an item was resolved.
	RuleNote = TextRule{Max: 500, Kind: Label}
	// RuleDescription is the rule of what a provider shows a payer about a
	// payment.
	RuleDescription = TextRule{Max: 140, Kind: Label}
)

// Check returns nil when v (non-empty) follows the rule, or an error saying
// what is wrong without quoting v.
func (r TextRule) Check(v string) error {
	if len(v) > r.Max {
		return fmt.Errorf("must be at most %d bytes long", r.Max)
	}
	switch r.Kind {
	case Code:
		for i := 0; i < len(v); i++ {
			if v[i] <= ' ' || v[i] >= 0x7f {
				return errors.New("must be printable ASCII without spaces")
			}
		}
	default:
		if !utf8.ValidString(v) {
			return errors.New("must be valid UTF-8")
		}
		for _, c := range v {
			if !unicode.IsPrint(c) {
				return errors.New("must not contain control or invisible characters")
			}
		}
	}
	return nil
}

// ParseDecimal reads a plain non-negative decimal such as "25" or
// "25.000000": digits with at most one point, at most MaxDecimalInt digits
// before it and MaxDecimalFrac after it. Signs, exponents, spaces and
// separators are refused. Errors say what is wrong without quoting s.
func ParseDecimal(s string) (decimal.Decimal, error) {
	intPart, frac, hasPoint := strings.Cut(s, ".")
	switch {
	case !allDigits(intPart) || !allDigits(frac):
		return decimal.Decimal{}, errors.New("only digits and one decimal point are allowed: no sign, exponent, spaces or separators")
	case intPart == "":
		return decimal.Decimal{}, errors.New("a digit is needed before the decimal point")
	case hasPoint && frac == "":
		return decimal.Decimal{}, errors.New("a digit is needed after the decimal point")
	case len(intPart) > MaxDecimalInt:
		return decimal.Decimal{}, fmt.Errorf("at most %d digits are allowed before the decimal point", MaxDecimalInt)
	case len(frac) > MaxDecimalFrac:
		return decimal.Decimal{}, fmt.Errorf("at most %d digits are allowed after the decimal point", MaxDecimalFrac)
	}
	return decimal.NewFromString(s)
}

// checkDecimal applies ParseDecimal's bounds to a decimal that is already
// parsed (an adapter may compute one, e.g. from minor units). Trailing zeros
// past MaxDecimalFrac digits are harmless.
func checkDecimal(d decimal.Decimal) error {
	if d.IsNegative() {
		return errors.New("must not be negative")
	}
	if d.IsZero() {
		return nil
	}
	if len(d.Coefficient().String())+int(d.Exponent()) > MaxDecimalInt {
		return fmt.Errorf("at most %d digits are allowed before the decimal point", MaxDecimalInt)
	}
	if int(d.Exponent()) < -MaxDecimalFrac && !d.Equal(d.Truncate(MaxDecimalFrac)) {
		return fmt.Errorf("at most %d digits are allowed after the decimal point", MaxDecimalFrac)
	}
	return nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
