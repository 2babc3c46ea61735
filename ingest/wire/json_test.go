package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

type inner struct {
	Amount string `json:"amount"`
}

type payload struct {
	ID   string `json:"id"`
	Data inner  `json:"data"`
	Skip string `json:"-"`
}

func TestCheck(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat(`{"a":`, MaxDepth+1) + "1" + strings.Repeat("}", MaxDepth+1)
	cases := []struct {
		name, body string
		want       string // part of the error; "" = accepted
	}{
		{"valid", `{"id":"e1","data":{"amount":"1"}}`, ""},
		{"unknown members anywhere", `{"id":"e1","extra":{"ID":1,"id":2},"data":{"amount":"1","more":[1,2]}}`, ""},
		{"unmodeled objects may repeat the case", `{"meta":{"Id":1,"ID":2}}`, ""},
		{"duplicate at the top", `{"id":"a","id":"b"}`, "appears twice in the same object (the top level)"},
		{"duplicate in data", `{"data":{"amount":"1","amount":"2"}}`, "appears twice in the same object (data)"},
		{"duplicate in an unmodeled object", `{"meta":{"a":1,"a":2}}`, "appears twice in the same object (a nested object)"},
		{"near miss at the top", `{"ID":"e1"}`, `spelled exactly "id"`},
		{"near miss in data", `{"data":{"Amount":"1"}}`, `spelled exactly "data.amount"`},
		{"not an object", `["id"]`, "must be a JSON object"},
		{"a truncated array is no object either", `[1,`, "must be a JSON object"},
		{"empty", ``, "empty or ends before"},
		{"truncated", `{"id":"e1"`, "empty or ends before"},
		{"trailing data", `{"id":"e1"} {}`, "more data after"},
		{"invalid UTF-8", "{\"id\":\"\xff\"}", "not valid UTF-8"},
		{"too deep", deep, "nests deeper"},
		{"syntax", `{"id":}`, "not valid JSON"},
	}
	for _, tc := range cases {
		err := Check([]byte(tc.body), reflect.TypeFor[payload]())
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
}

func TestDecode(t *testing.T) {
	t.Parallel()
	var p payload
	if err := Decode([]byte(`{"id":"e1","data":{"amount":"2.5"}}`), &p); err != nil || p.ID != "e1" || p.Data.Amount != "2.5" {
		t.Errorf("Decode = %+v, %v", p, err)
	}
	err := Decode([]byte(`{"id":7}`), &p)
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field != "id" {
		t.Errorf("a number for a string: %v, want an UnmarshalTypeError naming id", err)
	}
}
