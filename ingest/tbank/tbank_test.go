package tbank

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/fulfillplatform/fulfillment/fulfillment"
	"github.com/fulfillplatform/fulfillment/ingest"
)

// options returns the mapping node of an options block written in YAML
// (nil for "").
func options(t testing.TB, src string) *yaml.Node {
	t.Helper()
	if src == "" {
		return nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Content[0]
}

func TestNewOptions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, yaml string
		want       string // part of the error; "" = accepted
		check      func(t *testing.T, o Options)
	}{
		{name: "terminal only", yaml: "terminal_key: 1321054611234DEMO", check: func(t *testing.T, o Options) {
			if o.TerminalKey != "1321054611234DEMO" || o.DuplicateOrderPolicy != PolicyFail || len(o.DuplicateOrderCodes) != 0 || o.DuplicateOrder("8") {
				t.Errorf("options %+v", o)
			}
		}},
		{name: "every option", yaml: "{ terminal_key: T1, duplicate_order_codes: [\"8\", 99], duplicate_order_policy: reuse }", check: func(t *testing.T, o Options) {
			if o.DuplicateOrderPolicy != PolicyReuse || !o.DuplicateOrder("8") || !o.DuplicateOrder("99") || o.DuplicateOrder("0") || o.DuplicateOrder("") {
				t.Errorf("options %+v", o)
			}
		}},
		{name: "recurrent off by default", yaml: "terminal_key: T1", check: func(t *testing.T, o Options) {
			if o.Recurrent {
				t.Errorf("options %+v, want recurrent off", o)
			}
		}},
		{name: "recurrent", yaml: "{ terminal_key: T1, recurrent: true }", check: func(t *testing.T, o Options) {
			if !o.Recurrent {
				t.Errorf("options %+v, want recurrent on", o)
			}
		}},
		{name: "recurrent false", yaml: "{ terminal_key: T1, recurrent: false }", check: func(t *testing.T, o Options) {
			if o.Recurrent {
				t.Errorf("options %+v, want recurrent off", o)
			}
		}},
		{name: "ignore with codes", yaml: "{ terminal_key: T1, duplicate_order_codes: [\"8\"], duplicate_order_policy: ignore }"},
		{name: "fail stated", yaml: "{ terminal_key: T1, duplicate_order_policy: fail }"},

		{name: "no options block", yaml: "", want: "terminal_key is required"},
		{name: "empty block", yaml: "{}", want: "terminal_key is required"},
		{name: "password as an option", yaml: "{ terminal_key: T1, password: secret }", want: `unknown option "password"`},
		{name: "unknown option", yaml: "{ terminal_key: T1, terminal: T2 }", want: `unknown option "terminal"`},
		{name: "terminal with a colon", yaml: "terminal_key: \"T:1\"", want: "terminal_key must be printable ASCII without spaces or colons"},
		{name: "terminal with a space", yaml: "terminal_key: \"T 1\"", want: "terminal_key must be printable ASCII"},
		{name: "terminal too long", yaml: "terminal_key: " + strings.Repeat("T", 129), want: "terminal_key must be"},
		{name: "terminal a list", yaml: "terminal_key: [T1]", want: "terminal_key: line 1: cannot unmarshal"},
		{name: "recurrent not a boolean", yaml: "{ terminal_key: T1, recurrent: sometimes }", want: "recurrent: line 1: cannot unmarshal !!str `sometimes` into bool"},
		{name: "recurrent a list", yaml: "{ terminal_key: T1, recurrent: [true] }", want: "recurrent: line 1: cannot unmarshal"},
		{name: "empty code", yaml: "{ terminal_key: T1, duplicate_order_codes: [\"\"] }", want: "duplicate_order_codes[0] must be a bank ErrorCode"},
		{name: "code with letters", yaml: "{ terminal_key: T1, duplicate_order_codes: [\"8\", E8] }", want: "duplicate_order_codes[1] must be a bank ErrorCode"},
		{name: "code too long", yaml: "{ terminal_key: T1, duplicate_order_codes: [\"12345678901234567\"] }", want: "duplicate_order_codes[0] must be a bank ErrorCode"},
		{name: "code 0", yaml: "{ terminal_key: T1, duplicate_order_codes: [\"0\"] }", want: "ErrorCode 0 means success"},
		{name: "code twice", yaml: "{ terminal_key: T1, duplicate_order_codes: [\"8\", \"8\"] }", want: "duplicate_order_codes[1] repeats"},
		{name: "unknown policy", yaml: "{ terminal_key: T1, duplicate_order_policy: retry }", want: "duplicate_order_policy must be fail, ignore or reuse"},
		{name: "policy in capitals", yaml: "{ terminal_key: T1, duplicate_order_policy: FAIL }", want: "duplicate_order_policy must be"},
		{name: "reuse without codes", yaml: "{ terminal_key: T1, duplicate_order_policy: reuse }", want: "duplicate_order_policy reuse needs duplicate_order_codes"},
		{name: "ignore without codes", yaml: "{ terminal_key: T1, duplicate_order_policy: ignore }", want: "duplicate_order_policy ignore needs duplicate_order_codes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, err := New(vectorEndpoint, [][]byte{[]byte(vectorPassword)}, options(t, tc.yaml))
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("New: %v, want an error saying %q", err, tc.want)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error spans lines: %q", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			if tc.check != nil {
				tc.check(t, a.(*Adapter).Options())
			}
		})
	}
}

func TestOptionsAreACopy(t *testing.T) {
	t.Parallel()
	a, err := New(vectorEndpoint, nil, options(t, "{ terminal_key: T1, duplicate_order_codes: [\"8\"] }"))
	if err != nil {
		t.Fatal(err)
	}
	o := a.(*Adapter).Options()
	o.DuplicateOrderCodes[0] = "9"
	if got := a.(*Adapter).Options(); !got.DuplicateOrder("8") || got.DuplicateOrder("9") {
		t.Errorf("changing a copy changed the adapter: %+v", got)
	}
}

func TestAcknowledge(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	(&Adapter{}).Acknowledge(w)
	if w.Code != http.StatusOK || w.Body.String() != "OK" || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("Acknowledge: %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body.String())
	}
}

func TestReject(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		status     int
		reason     string
		wantStatus int
		wantBody   string
	}{
		{"unauthorized", http.StatusUnauthorized, "invalid signature", http.StatusUnauthorized, "invalid signature"},
		{"bad request", http.StatusBadRequest, "invalid payload: Status is required", http.StatusBadRequest, "invalid payload: Status is required"},
		{"unavailable", http.StatusServiceUnavailable, "retry", http.StatusServiceUnavailable, "retry"},
		{"a reason of OK is not sent", http.StatusServiceUnavailable, "OK", http.StatusServiceUnavailable, "Service Unavailable"},
		{"nor one of ok with spaces", http.StatusBadRequest, " ok\n", http.StatusBadRequest, "Bad Request"},
		{"empty reason", http.StatusUnauthorized, "", http.StatusUnauthorized, "Unauthorized"},
		{"empty reason, unnamed status", 499, "", 499, "rejected"},
		{"2xx never acknowledges", http.StatusOK, "OK", http.StatusInternalServerError, "Internal Server Error"},
		{"out of range", 42, "oops", http.StatusInternalServerError, "oops"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := httptest.NewRecorder()
			(&Adapter{}).Reject(w, tc.status, tc.reason)
			if w.Code != tc.wantStatus || w.Body.String() != tc.wantBody {
				t.Errorf("Reject: %d %q, want %d %q", w.Code, w.Body.String(), tc.wantStatus, tc.wantBody)
			}
			if !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
				t.Errorf("Content-Type %q", w.Header().Get("Content-Type"))
			}
		})
	}
}

// Cards are bound on a terminal for one org and environment: the bank keeps
// them under the customer's account_ref, which two orgs (or one org's live
// and test customers) may both use. An endpoint that binds no cards sends no
// customer, so it may share the terminal.
func TestCheckTogether(t *testing.T) {
	t.Parallel()
	ep := func(id, org, env, opts string) ingest.Endpoint {
		e := fulfillment.Endpoint{ID: id, Provider: fulfillment.ProviderTBank, OrgID: org, Environment: fulfillment.Environment(env)}
		a, err := New(e, [][]byte{[]byte("password")}, options(t, opts))
		if err != nil {
			t.Fatal(err)
		}
		return ingest.Endpoint{Endpoint: e, Adapter: a}
	}
	for _, tc := range []struct {
		name string
		eps  []ingest.Endpoint
		want string // part of the error; "" = accepted
	}{
		{"one endpoint binding cards", []ingest.Endpoint{ep("a", "org_a", "live", "{ terminal_key: T1, recurrent: true }")}, ""},
		{"two orgs binding, a terminal each", []ingest.Endpoint{
			ep("a", "org_a", "live", "{ terminal_key: T1, recurrent: true }"),
			ep("b", "org_b", "live", "{ terminal_key: T2, recurrent: true }"),
		}, ""},
		{"two orgs share a terminal without bindings", []ingest.Endpoint{
			ep("a", "org_a", "live", "terminal_key: T1"),
			ep("b", "org_b", "live", "terminal_key: T1"),
		}, ""},
		{"another org shares the terminal without binding", []ingest.Endpoint{
			ep("a", "org_a", "live", "{ terminal_key: T1, recurrent: true }"),
			ep("b", "org_b", "live", "{ terminal_key: T1, notification_url: \"https://hooks.example/b\" }"),
		}, ""},
		{"one org's two endpoints bind on one terminal", []ingest.Endpoint{
			ep("a", "org_a", "live", "{ terminal_key: T1, recurrent: true }"),
			ep("a2", "org_a", "live", "{ terminal_key: T1, recurrent: true, notification_url: \"https://hooks.example/a2\" }"),
		}, ""},
		{"two orgs bind on one terminal", []ingest.Endpoint{
			ep("a", "org_a", "live", "{ terminal_key: T1, recurrent: true }"),
			ep("b", "org_b", "live", "{ terminal_key: T1, recurrent: true }"),
		}, `"a" (org org_a, live) and "b" (org org_b, live) both bind cards (recurrent) on one terminal_key`},
		{"live and test bind on one terminal", []ingest.Endpoint{
			ep("live", "org_a", "live", "{ terminal_key: T1, recurrent: true }"),
			ep("test", "org_a", "test", "{ terminal_key: T1, recurrent: true }"),
		}, `"live" (org org_a, live) and "test" (org org_a, test) both bind cards`},
		{"the third endpoint binds for another org", []ingest.Endpoint{
			ep("a", "org_a", "live", "{ terminal_key: T1, recurrent: true }"),
			ep("b", "org_b", "live", "terminal_key: T1"),
			ep("a2", "org_a", "live", "{ terminal_key: T2, recurrent: true }"),
			ep("b2", "org_b", "live", "{ terminal_key: T1, recurrent: true }"),
		}, `"a" (org org_a, live) and "b2" (org org_b, live) both bind cards`},
	} {
		err := CheckTogether(tc.eps)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
