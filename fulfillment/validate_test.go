package fulfillment

import (
	"errors"
	"strings"
	"testing"
)

func validDraft() OrderDraft {
	return OrderDraft{
		OrgID: "org_a", Environment: "live", MerchantOrderID: "m-1",
		Lines: []LineDraft{
			{SKU: "pro", Kind: "license", Quantity: 2, Currency: "USD", MinorUnits: 1000},
			{SKU: "credits", Kind: "balance_credit", Quantity: 1, Currency: "USD", MinorUnits: 500, AccountRef: "acct_1"},
		},
		Settlement: &SettlementDraft{Token: "USDT", Network: "TRON", Amount: "25.000000", Tolerance: "0.1"},
	}
}

func TestOrderDraftValidate(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		mutate func(*OrderDraft)
		fields []string // expected violations, in order; nil = valid
	}{
		{"valid", func(*OrderDraft) {}, nil},
		{"no settlement", func(d *OrderDraft) { d.Settlement = nil }, nil},
		{"test environment", func(d *OrderDraft) { d.Environment = "test" }, nil},
		{"unicode merchant id", func(d *OrderDraft) { d.MerchantOrderID = "заказ-42" }, nil},
		{"integer amount", func(d *OrderDraft) { d.Settlement.Amount = "25" }, nil},
		{"empty tolerance", func(d *OrderDraft) { d.Settlement.Tolerance = "" }, nil},
		{"missing org", func(d *OrderDraft) { d.OrgID = "" }, []string{"org_id"}},
		{"org with space", func(d *OrderDraft) { d.OrgID = "org a" }, []string{"org_id"}},
		{"org too long", func(d *OrderDraft) { d.OrgID = strings.Repeat("o", 129) }, []string{"org_id"}},
		{"unknown environment", func(d *OrderDraft) { d.Environment = "prod" }, []string{"environment"}},
		{"capitalised environment", func(d *OrderDraft) { d.Environment = "LIVE" }, []string{"environment"}},
		{"missing merchant id", func(d *OrderDraft) { d.MerchantOrderID = "" }, []string{"merchant_order_id"}},
		{"merchant id with newline", func(d *OrderDraft) { d.MerchantOrderID = "a\nb" }, []string{"merchant_order_id"}},
		{"merchant id with padding", func(d *OrderDraft) { d.MerchantOrderID = " m-1" }, []string{"merchant_order_id"}},
		{"merchant id invalid utf-8", func(d *OrderDraft) { d.MerchantOrderID = "m-\xff" }, []string{"merchant_order_id"}},
		{"checkout session too long", func(d *OrderDraft) { d.CheckoutSessionID = strings.Repeat("c", 129) }, []string{"checkout_session_id"}},
		{"no lines", func(d *OrderDraft) { d.Lines = nil }, []string{"lines"}},
		{"too many lines", func(d *OrderDraft) { d.Lines = make([]LineDraft, MaxLines+1) }, []string{"lines"}},
		{"missing sku", func(d *OrderDraft) { d.Lines[0].SKU = "" }, []string{"lines[0].sku"}},
		{"unknown kind", func(d *OrderDraft) { d.Lines[0].Kind = "gift" }, []string{"lines[0].kind"}},
		{"zero quantity", func(d *OrderDraft) { d.Lines[0].Quantity = 0 }, []string{"lines[0].quantity"}},
		{"negative quantity", func(d *OrderDraft) { d.Lines[0].Quantity = -3 }, []string{"lines[0].quantity"}},
		{"huge quantity", func(d *OrderDraft) { d.Lines[0].Quantity = MaxQuantity + 1 }, []string{"lines[0].quantity"}},
		{"licenses at the order bound", func(d *OrderDraft) { d.Lines[0].Quantity = MaxLicensesPerOrder }, nil},
		{"licenses over the order bound", func(d *OrderDraft) { d.Lines[0].Quantity = MaxLicensesPerOrder + 1 }, []string{"lines"}},
		{"licenses over the bound over two lines", func(d *OrderDraft) {
			d.Lines[0].Quantity = MaxLicensesPerOrder
			d.Lines[1] = LineDraft{SKU: "pro2", Kind: "license", Quantity: 1, Currency: "USD", MinorUnits: 1}
		}, []string{"lines"}},
		{"many balance credits are one ledger movement", func(d *OrderDraft) { d.Lines[1].Quantity = MaxQuantity }, nil},
		{"lowercase currency", func(d *OrderDraft) { d.Lines[0].Currency = "usd" }, []string{"lines[0].unit_price.currency"}},
		{"mixed currencies", func(d *OrderDraft) { d.Lines[1].Currency = "EUR" }, []string{"lines[1].unit_price.currency"}},
		{"zero price", func(d *OrderDraft) { d.Lines[0].MinorUnits = 0 }, []string{"lines[0].unit_price.minor_units"}},
		{"negative price", func(d *OrderDraft) { d.Lines[0].MinorUnits = -1 }, []string{"lines[0].unit_price.minor_units"}},
		{"total overflows", func(d *OrderDraft) {
			d.Lines[0].MinorUnits = 1 << 62
			d.Lines[0].Quantity = 4
		}, []string{"lines[0].unit_price.minor_units"}},
		{"sum overflows", func(d *OrderDraft) {
			d.Lines[0].MinorUnits, d.Lines[0].Quantity = 1<<62, 1
			d.Lines[1].MinorUnits, d.Lines[1].Quantity = 1<<62, 1
		}, []string{"lines[1].unit_price.minor_units"}},
		{"balance credit without account", func(d *OrderDraft) { d.Lines[1].AccountRef = "" }, []string{"lines[1].account_ref"}},
		{"license with account", func(d *OrderDraft) { d.Lines[0].AccountRef = "acct" }, []string{"lines[0].account_ref"}},
		{"external line with destination", func(d *OrderDraft) { d.Lines[0] = externalLine("crm") }, nil},
		{"external line without destination", func(d *OrderDraft) { d.Lines[0] = externalLine("") }, []string{"lines[0].destination"}},
		{"destination not an id", func(d *OrderDraft) { d.Lines[0] = externalLine("CRM server") }, []string{"lines[0].destination"}},
		{"destination on a license line", func(d *OrderDraft) { d.Lines[0].Destination = "crm" }, []string{"lines[0].destination"}},
		{"missing token", func(d *OrderDraft) { d.Settlement.Token = "" }, []string{"settlement.token"}},
		{"missing network", func(d *OrderDraft) { d.Settlement.Network = "" }, []string{"settlement.network"}},
		{"missing amount", func(d *OrderDraft) { d.Settlement.Amount = "" }, []string{"settlement.amount"}},
		{"zero amount", func(d *OrderDraft) { d.Settlement.Amount = "0.00" }, []string{"settlement.amount"}},
		{"negative amount", func(d *OrderDraft) { d.Settlement.Amount = "-1" }, []string{"settlement.amount"}},
		{"comma amount", func(d *OrderDraft) { d.Settlement.Amount = "25,5" }, []string{"settlement.amount"}},
		{"exponent amount", func(d *OrderDraft) { d.Settlement.Amount = "2e5" }, []string{"settlement.amount"}},
		{"trailing point", func(d *OrderDraft) { d.Settlement.Amount = "25." }, []string{"settlement.amount"}},
		{"spaces in amount", func(d *OrderDraft) { d.Settlement.Amount = " 25" }, []string{"settlement.amount"}},
		{"too many decimals", func(d *OrderDraft) { d.Settlement.Amount = "1." + strings.Repeat("1", 19) }, []string{"settlement.amount"}},
		{"too many digits", func(d *OrderDraft) { d.Settlement.Amount = strings.Repeat("9", 21) }, []string{"settlement.amount"}},
		{"negative tolerance", func(d *OrderDraft) { d.Settlement.Tolerance = "-0.1" }, []string{"settlement.tolerance"}},
		{"tolerance above amount", func(d *OrderDraft) { d.Settlement.Tolerance = "30" }, []string{"settlement.tolerance"}},
		{"tolerance of the whole amount", func(d *OrderDraft) { d.Settlement.Tolerance = d.Settlement.Amount }, []string{"settlement.tolerance"}},
		{"every problem at once", func(d *OrderDraft) {
			d.OrgID, d.Environment, d.MerchantOrderID = "", "x", ""
		}, []string{"org_id", "environment", "merchant_order_id"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := validDraft()
			tc.mutate(&d)
			spec, err := d.Validate()
			if tc.fields == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want valid", err)
				}
				if spec.OrgID != d.OrgID || len(spec.Lines) != len(d.Lines) {
					t.Errorf("spec does not carry the draft: %+v", spec)
				}
				return
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Validate() = %v, want *ValidationError", err)
			}
			var got []string
			for _, v := range ve.Violations {
				got = append(got, v.Field)
				if v.Description == "" {
					t.Errorf("%s: empty description", v.Field)
				}
			}
			if strings.Join(got, ",") != strings.Join(tc.fields, ",") {
				t.Errorf("violations on %v, want %v", got, tc.fields)
			}
		})
	}
}

func externalLine(destination string) LineDraft {
	return LineDraft{SKU: "box", Kind: "external", Quantity: 1, Currency: "USD", MinorUnits: 700, Destination: destination}
}

// Only configured destinations are accepted, every unknown one named.
func TestCheckDestinations(t *testing.T) {
	t.Parallel()
	d := validDraft()
	d.Lines = append(d.Lines, externalLine("crm"), externalLine("shipping"), externalLine("crm"))
	spec, err := d.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.CheckDestinations(func(id string) bool { return id == "crm" || id == "shipping" }); err != nil {
		t.Errorf("all configured: %v", err)
	}
	err = spec.CheckDestinations(func(id string) bool { return id == "shipping" })
	var ve *ValidationError
	if !errors.As(err, &ve) || len(ve.Violations) != 2 || ve.Violations[0].Field != "lines[2].destination" ||
		ve.Violations[1].Field != "lines[4].destination" || !strings.Contains(ve.Violations[0].Description, `"crm"`) {
		t.Errorf("CheckDestinations = %v, want lines[2] and lines[4] naming crm", err)
	}
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	base := func(mutate func(*OrderDraft)) string {
		d := validDraft()
		mutate(&d)
		spec, err := d.Validate()
		if err != nil {
			t.Fatal(err)
		}
		return spec.Fingerprint()
	}
	same := base(func(*OrderDraft) {})
	if got := base(func(d *OrderDraft) { d.Settlement.Amount = "25" }); got != same {
		t.Error("25 and 25.000000 must be the same content")
	}
	if got := base(func(d *OrderDraft) { d.Settlement.Tolerance = "0.10" }); got != same {
		t.Error("0.1 and 0.10 must be the same content")
	}
	different := map[string]func(*OrderDraft){
		"quantity":  func(d *OrderDraft) { d.Lines[0].Quantity = 3 },
		"price":     func(d *OrderDraft) { d.Lines[0].MinorUnits = 1001 },
		"sku":       func(d *OrderDraft) { d.Lines[0].SKU = "pro2" },
		"order":     func(d *OrderDraft) { d.Lines[0], d.Lines[1] = d.Lines[1], d.Lines[0] },
		"account":   func(d *OrderDraft) { d.Lines[1].AccountRef = "acct_2" },
		"amount":    func(d *OrderDraft) { d.Settlement.Amount = "25.01" },
		"network":   func(d *OrderDraft) { d.Settlement.Network = "ETH" },
		"no settle": func(d *OrderDraft) { d.Settlement = nil },
		"session":   func(d *OrderDraft) { d.CheckoutSessionID = "cs_1" },
		"destination": func(d *OrderDraft) {
			d.Lines = append(d.Lines, externalLine("crm"))
		},
	}
	for name, mutate := range different {
		if base(mutate) == same {
			t.Errorf("%s change kept the fingerprint", name)
		}
	}
	withDestination := func(id string) string {
		return base(func(d *OrderDraft) { d.Lines = append(d.Lines, externalLine(id)) })
	}
	if withDestination("crm") == withDestination("shipping") {
		t.Error("the destination of a line is not part of the fingerprint")
	}
	withPlan := func(plan string) string {
		return base(func(d *OrderDraft) {
			d.Lines = append(d.Lines, LineDraft{SKU: "pro", Kind: "subscription", Quantity: 1, Currency: "USD", MinorUnits: 900,
				AccountRef: "user_42", PlanID: plan})
		})
	}
	if withPlan("pro-monthly") == withPlan("pro-yearly") {
		t.Error("the plan of a line is not part of the fingerprint")
	}
	// Orders without destinations keep the fingerprint they were stored
	// with before destinations existed (the v1 encoding; this digest was
	// computed by that code).
	if same != "bfe73772a336ebe7672e28f6b9830b95ce62c1a80a43bea681b3843207461823" {
		t.Errorf("v1 fingerprint = %s", same)
	}
	// Field boundaries are part of the encoding: shifting text from one
	// field to the next is another order.
	a := OrderSpec{OrgID: "ab", MerchantOrderID: "c"}
	b := OrderSpec{OrgID: "a", MerchantOrderID: "bc"}
	if a.Fingerprint() == b.Fingerprint() {
		t.Error("field boundaries are not part of the fingerprint")
	}
}

func TestTotal(t *testing.T) {
	t.Parallel()
	spec, err := validDraft().Validate()
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.Total(); got != (Money{Currency: "USD", MinorUnits: 2500}) {
		t.Errorf("Total() = %+v, want 2500 USD", got)
	}
}

func TestOrderFilterAndPageSize(t *testing.T) {
	t.Parallel()
	if err := (OrderFilter{Environment: "live", State: "fulfilled", OrgID: "org_a"}).Validate(); err != nil {
		t.Errorf("valid filter: %v", err)
	}
	for _, f := range []OrderFilter{{Environment: "prod"}, {State: "lost"}, {OrgID: "a b"}, {MerchantOrderID: "x\x00"}} {
		if err := f.Validate(); err == nil {
			t.Errorf("filter %+v accepted", f)
		}
	}
	for _, tc := range []struct {
		in   int32
		want int
		err  bool
	}{{0, DefaultPageSize, false}, {1, 1, false}, {500, 500, false}, {501, MaxPageSize, false}, {-1, 0, true}} {
		got, err := PageSize(tc.in)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("PageSize(%d) = %d, %v", tc.in, got, err)
		}
	}
	for id, ok := range map[string]bool{
		"019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b": true,
		"":                                     false,
		"019a2b3c4d5e7f608a9b0c1d2e3f4a5b":     false,
		"not-an-id":                            false,
	} {
		if err := ValidateOrderID("order_id", id); (err == nil) != ok {
			t.Errorf("ValidateOrderID(%q) = %v", id, err)
		}
	}
}

// What a person writes with a resolution or a confirmation: a note that
// says something (spaces alone do not), within the note's rule, and an
// optional detail within its own.
func TestNotesOfPeople(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, note, detail string
		want               string // the violation's field; "" for none
	}{
		{"a note", "refunded at the bank", "Dana", ""},
		{"no note", "", "", "note"},
		{"spaces alone", "   ", "", "note"},
		{"two lines", "one\ntwo", "", "note"},
		{"too long", strings.Repeat("x", RuleNote.Max+1), "", "note"},
		{"a detail with a control character", "ok", "Dana\x00", "actor_detail"},
	} {
		for kind, err := range map[string]error{
			"resolution":   ReconResolve{Resolution: ResolutionNoAction, Note: c.note, ActorDetail: c.detail}.Validate(),
			"confirmation": DeliveryConfirmation{MessageID: 1, Note: c.note, ActorDetail: c.detail}.Validate(),
		} {
			var ve *ValidationError
			switch {
			case c.want == "" && err != nil:
				t.Errorf("%s, %s: %v, want none", c.name, kind, err)
			case c.want != "" && (!errors.As(err, &ve) || len(ve.Violations) != 1 || ve.Violations[0].Field != c.want):
				t.Errorf("%s, %s: %v, want one violation of %s", c.name, kind, err, c.want)
			}
		}
	}
}

// The customer a payment start names is the subscription line's, never a
// balance credit's account.
func TestSubscriptionCustomer(t *testing.T) {
	t.Parallel()
	spec, err := validDraft().Validate()
	if err != nil {
		t.Fatal(err)
	}
	if got := spec.SubscriptionCustomer(); got != "" {
		t.Errorf("an order without a subscription line: %q, want none", got)
	}
	d := validDraft()
	d.Lines = append(d.Lines, LineDraft{SKU: "pro-sub", Kind: "subscription", Quantity: 1, Currency: "USD", MinorUnits: 900,
		AccountRef: "user_42", PlanID: "pro-monthly"})
	if spec, err = d.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := spec.SubscriptionCustomer(); got != "user_42" {
		t.Errorf("an order with a subscription line: %q, want user_42", got)
	}
}
