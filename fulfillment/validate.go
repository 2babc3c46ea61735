package fulfillment

import (
	"fmt"
	"math"
	"math/bits"
	"regexp"
	"unicode"
	"unicode/utf8"

	"github.com/shopspring/decimal"
)

var (
	orgIDPattern    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`)
	currencyPattern = regexp.MustCompile(`^[A-Z]{3}$`)
	symbolPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
)

// OrderDraft is an order as a caller submits it, before validation. Decimal
// amounts are still text.
type OrderDraft struct {
	OrgID             string
	Environment       string
	MerchantOrderID   string
	CheckoutSessionID string
	Lines             []LineDraft
	// Settlement is nil when the caller states no expected settlement.
	Settlement *SettlementDraft
}

// LineDraft is an order line as submitted.
type LineDraft struct {
	SKU        string
	Kind       string
	Quantity   int64
	Currency   string
	MinorUnits int64
	AccountRef string
	// Destination is required on external lines and refused on others.
	Destination string
	// PlanID is required on subscription lines and refused on others.
	PlanID string
}

// SettlementDraft is an expected settlement as submitted.
type SettlementDraft struct {
	Token     string
	Network   string
	Amount    string
	Tolerance string
}

// Validate checks every input rule and returns the order's content, or a
// *ValidationError listing every violation at once.
func (d OrderDraft) Validate() (OrderSpec, error) {
	var vs violations
	checkOrgID(&vs, "org_id", d.OrgID)
	env := Environment(d.Environment)
	if !env.Valid() {
		vs.add("environment", "must be %q or %q", EnvLive, EnvTest)
	}
	checkText(&vs, "merchant_order_id", d.MerchantOrderID, true)
	checkText(&vs, "checkout_session_id", d.CheckoutSessionID, false)

	spec := OrderSpec{
		OrgID:             d.OrgID,
		Environment:       env,
		MerchantOrderID:   d.MerchantOrderID,
		CheckoutSessionID: d.CheckoutSessionID,
	}
	switch {
	case len(d.Lines) == 0:
		vs.add("lines", "must have at least one line")
	case len(d.Lines) > MaxLines:
		vs.add("lines", "must have at most %d lines", MaxLines)
	default:
		spec.Lines = validateLines(&vs, d.Lines)
	}
	if d.Settlement != nil {
		spec.Settlement = validateSettlement(&vs, *d.Settlement)
	}
	if err := vs.err(); err != nil {
		return OrderSpec{}, err
	}
	return spec, nil
}

func validateLines(vs *violations, drafts []LineDraft) []Line {
	lines := make([]Line, len(drafts))
	var currency string
	var total uint64
	var licenses int64
	subscriptions := 0
	for i, l := range drafts {
		f := func(name string) string { return fmt.Sprintf("lines[%d].%s", i, name) }
		checkText(vs, f("sku"), l.SKU, true)
		kind := LineKind(l.Kind)
		if !kind.Valid() {
			vs.add(f("kind"), "must be %q, %q, %q or %q", KindLicense, KindBalanceCredit, KindExternal, KindSubscription)
		}
		if l.Quantity <= 0 || l.Quantity > MaxQuantity {
			vs.add(f("quantity"), "must be between 1 and %d", MaxQuantity)
		}
		switch {
		case !currencyPattern.MatchString(l.Currency):
			vs.add(f("unit_price.currency"), "must be a three-letter ISO 4217 code in capitals, e.g. USD")
		case currency == "":
			currency = l.Currency
		case l.Currency != currency:
			vs.add(f("unit_price.currency"), "must equal the first line's currency %s: an order is paid in one currency", currency)
		}
		if l.MinorUnits <= 0 {
			vs.add(f("unit_price.minor_units"), "must be greater than zero")
		} else if l.Quantity > 0 && l.Quantity <= MaxQuantity {
			hi, lo := bits.Mul64(uint64(l.MinorUnits), uint64(l.Quantity))
			sum, carry := bits.Add64(total, lo, 0)
			if hi != 0 || carry != 0 || sum > math.MaxInt64 {
				vs.add(f("unit_price.minor_units"), "makes the order total exceed %d minor units", int64(math.MaxInt64))
			} else {
				total = sum
			}
		}
		switch {
		case kind == KindBalanceCredit || kind == KindSubscription:
			checkText(vs, f("account_ref"), l.AccountRef, true)
		case l.AccountRef != "":
			vs.add(f("account_ref"), "is only allowed on %q and %q lines", KindBalanceCredit, KindSubscription)
		}
		switch {
		case kind == KindSubscription:
			checkPlanID(vs, f("plan_id"), l.PlanID)
			subscriptions++
			if subscriptions > 1 {
				vs.add(f("kind"), "an order may have one %q line: one payment pays one period of one subscription", KindSubscription)
			}
			if l.Quantity != 1 {
				vs.add(f("quantity"), "must be 1 on %q lines: a paid order pays one period", KindSubscription)
			}
		case l.PlanID != "":
			vs.add(f("plan_id"), "is only allowed on %q lines", KindSubscription)
		}
		switch {
		case kind == KindExternal:
			checkDestinationID(vs, f("destination"), l.Destination)
		case l.Destination != "":
			vs.add(f("destination"), "is only allowed on %q lines", KindExternal)
		}
		if kind == KindLicense && l.Quantity > 0 && l.Quantity <= MaxQuantity {
			licenses += l.Quantity
		}
		lines[i] = Line{
			SKU:         l.SKU,
			Kind:        kind,
			Quantity:    l.Quantity,
			UnitPrice:   Money{Currency: l.Currency, MinorUnits: l.MinorUnits},
			AccountRef:  l.AccountRef,
			PlanID:      l.PlanID,
			Destination: l.Destination,
		}
	}
	if licenses > MaxLicensesPerOrder {
		vs.add("lines", "ask for %d license units in all; an order may grant at most %d (split larger purchases into several orders)",
			licenses, MaxLicensesPerOrder)
	}
	return lines
}

func validateSettlement(vs *violations, d SettlementDraft) *Settlement {
	s := &Settlement{Token: d.Token, Network: d.Network}
	checkSymbol(vs, "settlement.token", d.Token, MaxTokenLen)
	checkSymbol(vs, "settlement.network", d.Network, MaxNetworkLen)
	if amount, ok := parseDecimal(vs, "settlement.amount", d.Amount, true); ok {
		if amount.IsZero() {
			vs.add("settlement.amount", "must be greater than zero")
		}
		s.Amount = amount
	}
	if tol, ok := parseDecimal(vs, "settlement.tolerance", d.Tolerance, false); ok {
		if !s.Amount.IsZero() && tol.GreaterThanOrEqual(s.Amount) {
			// A tolerance of the whole amount would take a payment of
			// nothing for the order's.
			vs.add("settlement.tolerance", "must be less than settlement.amount")
		}
		s.Tolerance = tol
	}
	return s
}

// parseDecimal reads an optional decimal field with ParseDecimal.
func parseDecimal(vs *violations, field, v string, required bool) (decimal.Decimal, bool) {
	if v == "" {
		if required {
			vs.add(field, "is required: a decimal string such as \"25.000000\"")
			return decimal.Decimal{}, false
		}
		return decimal.Zero, true
	}
	d, err := ParseDecimal(v)
	if err != nil {
		vs.add(field, "must be a non-negative decimal string such as \"25.000000\": %v", err)
		return decimal.Decimal{}, false
	}
	return d, true
}

// filterEnvironment adds to vs the violation of an environment filter
// that is set and is neither live nor test.
func filterEnvironment(vs *violations, env Environment) {
	if env != "" && !env.Valid() {
		vs.add("environment", "must be %q or %q", EnvLive, EnvTest)
	}
}

func checkOrgID(vs *violations, field, v string) {
	switch {
	case v == "":
		vs.add(field, "is required")
	case len(v) > MaxIDLen:
		vs.add(field, "must be at most %d bytes", MaxIDLen)
	case !orgIDPattern.MatchString(v):
		vs.add(field, "may contain only letters, digits and _ . : - (and must start with a letter or digit)")
	}
}

// checkText accepts a RuleRef text without leading or trailing spaces.
func checkText(vs *violations, field, v string, required bool) {
	if v == "" {
		if required {
			vs.add(field, "is required")
		}
		return
	}
	if err := RuleRef.Check(v); err != nil {
		vs.add(field, "%v", err)
		return
	}
	first, _ := utf8.DecodeRuneInString(v)
	last, _ := utf8.DecodeLastRuneInString(v)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		vs.add(field, "must not start or end with a space")
	}
}

func checkSymbol(vs *violations, field, v string, maxLen int) {
	switch {
	case v == "":
		vs.add(field, "is required")
	case len(v) > maxLen:
		vs.add(field, "must be at most %d characters", maxLen)
	case !symbolPattern.MatchString(v):
		vs.add(field, "may contain only letters, digits and _ . -")
	}
}

// ConfigIDPattern is the form of the ids an operator gives things in the
// configuration, such as webhook endpoints and destinations: lowercase
// letters, digits, _ and -, at most 64 characters.
var ConfigIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

func checkDestinationID(vs *violations, field, v string) {
	if v == "" {
		vs.add(field, "is required on %q lines: the id of the configured destination that fulfils it", KindExternal)
		return
	}
	checkDestination(vs, field, v)
}

func checkPlanID(vs *violations, field, v string) {
	switch {
	case v == "":
		vs.add(field, "is required on %q lines: the id of the configured plan it pays", KindSubscription)
	case !ConfigIDPattern.MatchString(v):
		vs.add(field, "must be a configured plan id: lowercase letters, digits, _ and -, at most 64 characters")
	}
}

// CheckPlans reports, as a *ValidationError, every subscription line of s
// whose plan is not one of the configured ones.
func (s OrderSpec) CheckPlans(configured func(id string) bool) error {
	var vs violations
	for i, l := range s.Lines {
		if l.Kind == KindSubscription && !configured(l.PlanID) {
			vs.add(fmt.Sprintf("lines[%d].plan_id", i), "%q is not a configured plan", l.PlanID)
		}
	}
	return vs.err()
}

// CheckDestinations reports, as a *ValidationError, every external line
// of s whose destination is not one of the configured ones.
func (s OrderSpec) CheckDestinations(configured func(id string) bool) error {
	var vs violations
	for i, l := range s.Lines {
		if l.Kind == KindExternal && !configured(l.Destination) {
			vs.add(fmt.Sprintf("lines[%d].destination", i), "%q is not a configured destination", l.Destination)
		}
	}
	return vs.err()
}
