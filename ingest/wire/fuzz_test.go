package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// Check agrees with encoding/json on what is JSON: whatever it accepts is
// valid JSON that decodes into the payload (or fails only on a member's
// type), and a body it calls invalid JSON is invalid for encoding/json too.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`{"id":"e1","data":{"amount":"1"}}`,
		`{"id":"e1","extra":{"ID":1,"id":2},"data":{"amount":"1","more":[1,2.5e-3,true,false,null]}}`,
		`{"i\u0064":"a","id":"b"}`, `{"data":{"Amount":"1"}}`, `{"a":"\ud83d\ude00\n"}`, `{"a":-0.5E+2}`,
		`{"id":"e1"} {}`, `[1]`, ``, `{"a":01}`, `{"a":"\x"}`, `{"a":1,}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		err := Check(body, reflect.TypeFor[payload]())
		valid := json.Valid(body)
		if err == nil {
			if !valid {
				t.Fatalf("Check accepted %q, which is not JSON", body)
			}
			var p payload
			if uerr := json.Unmarshal(body, &p); uerr != nil {
				var te *json.UnmarshalTypeError
				if !errors.As(uerr, &te) {
					t.Fatalf("Check accepted %q, which does not decode: %v", body, uerr)
				}
			}
			return
		}
		msg := err.Error()
		if valid && (strings.Contains(msg, "not valid JSON") || strings.Contains(msg, "ends before")) {
			t.Fatalf("Check called %q invalid (%v); encoding/json reads it", body, err)
		}
	})
}
