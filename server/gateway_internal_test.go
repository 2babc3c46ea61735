package server

import (
	"strings"
	"testing"

	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// A GET route whose request has no field reads no query (grpc-gateway
// skips the parser), so fieldlessGets must name every such method's route:
// a new one fails here until it is added.
func TestFieldlessGetsNameEveryFieldlessRequest(t *testing.T) {
	t.Parallel()
	methods := fulfillmentv1.File_fulfillment_v1_fulfillment_proto.Services().ByName("FulfillmentService").Methods()
	var fieldless []string
	for i := range methods.Len() {
		if m := methods.Get(i); m.Input().Fields().Len() == 0 {
			fieldless = append(fieldless, string(m.Name()))
		}
	}
	if len(fieldless) != 1 || fieldless[0] != "ListDestinations" || !fieldlessGets["/v1/outbox/destinations"] || len(fieldlessGets) != 1 {
		t.Fatalf("methods with fieldless requests: %v; fieldlessGets: %v — name each one's GET route in fieldlessGets", fieldless, fieldlessGets)
	}
}

func TestBodyError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{`proto: (line 1:22): unknown field "merchant_order"`,
			`the request body has an unknown field "merchant_order" at line 1, column 22: the request has no such field (names are snake_case, as in the API reference)`},
		{`proto: syntax error (line 1:5): unexpected token "}"`, `the request body is not valid JSON at line 1, column 5: unexpected token "}"`},
		{"proto:\u00a0(line 1:2): unknown field \"x\"", `the request body has an unknown field "x" at line 1, column 2: the request has no such field (names are snake_case, as in the API reference)`},
		{`proto: (line 2:3): invalid value for int32 field page_size: "x"`, `the request body cannot be read at line 2, column 3: invalid value for int32 field page_size: "x"`},
	} {
		got, ok := bodyError(tc.in)
		if !ok || got != tc.want {
			t.Errorf("bodyError(%q) = %q, %v; want %q", tc.in, got, ok, tc.want)
		}
	}
	if _, ok := bodyError("order_id: must be a UUID"); ok {
		t.Error("a service message was reworded")
	}
}

// A REST body is one JSON value and nothing after it but white space;
// what is wrong is said with its place.
func TestOneJSONValue(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"a": 1}`:                       "",
		" {\"a\": 1}\n\t ":               "",
		`{"a": 1} {"org_id": "x"}`:       "the request body goes on after its JSON value, at line 1, column 10: it must hold one value",
		"{\"a\": 1}\n garbage":           "the request body goes on after its JSON value, at line 2, column 2: it must hold one value",
		`{"a": 1`:                        "the request body ends before its JSON value does",
		"{\n  \"a\": x}":                 "the request body is not valid JSON at line 2, column 8: invalid character 'x' looking for beginning of value",
		`bogus=1`:                        "the request body is not valid JSON at line 1, column 1: invalid character 'b' looking for beginning of value",
		`[` + strings.Repeat("[", 20000): "the request body is not valid JSON at line 1, column 10001: invalid character '[' exceeded max depth",
		// Surrogate pairs: whole, or half of one (a text that is not Unicode).
		`{"note": "\ud83d\ude00 \\ud800 \u00e9"}`: "",
		"{\"note\":\n \"a\\ud800\"}":              "the request body is not valid JSON at line 2, column 4: \\ud800 is half of a UTF-16 surrogate pair, without its other half: a text must be valid Unicode",
		`{"note": "\uDE00\ud83d"}`:                "the request body is not valid JSON at line 1, column 11: \\uDE00 is half of a UTF-16 surrogate pair, without its other half: a text must be valid Unicode",
		`{"note": "\ud83d\u0041"}`:                "the request body is not valid JSON at line 1, column 11: \\ud83d is half of a UTF-16 surrogate pair, without its other half: a text must be valid Unicode",
		`{"note": "\ud83d"}`:                      "the request body is not valid JSON at line 1, column 11: \\ud83d is half of a UTF-16 surrogate pair, without its other half: a text must be valid Unicode",
	} {
		got := ""
		if err := oneJSONValue([]byte(body)); err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("%.40q: %q, want %q", body, got, want)
		}
	}
}

// The methods a 405 lists are the documented ones of the routes the path
// matches, custom verbs apart.
func TestAllowedMethods(t *testing.T) {
	t.Parallel()
	for path, want := range map[string]string{
		"/v1/orders":                         "GET, POST",
		"/v1/orders/0190-x":                  "GET",
		"/v1/orders/0190-x/payments":         "POST",
		"/v1/reconciliation/items/8":         "GET",
		"/v1/reconciliation/items/8:resolve": "POST",
		"/v1/redrives:plan":                  "POST",
		"/v1/redrives/7:cancel":              "POST",
		"/v1/orders/0190-x:resolve":          "",
		"/v1/nothing":                        "",
		"/v1/orders//payments":               "",
	} {
		if got := allowedMethods(path); got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
}
