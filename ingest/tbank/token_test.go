package tbank

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fulfillplatform/fulfillment/ingest"
)

// The published notification vector (copied byte for byte from the bank's
// documentation example) and its terminal password.
const (
	vectorPassword = "Dfsfh56dgKl"
	vectorToken    = "b906d28e76c6428e37b25fcf86c0adc52c63d503013fdd632e300593d165766b"
)

func readVector(t testing.TB) []byte {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", "tbank_notification_authorized.json"))
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// vectorJSON is the vector's body, inlined so that cases can be built from
// it without reading files.
const vectorJSON = `{"TerminalKey": "1321054611234DEMO", "OrderId": "201709", "Success": true, "Status": "AUTHORIZED", "PaymentId": 8742591, "ErrorCode": "0", "Amount": 9855, "CardId": 322264, "Pan": "430000******0777", "ExpDate": "1122", "RebillId": 101709, "Token": "` + vectorToken + `"}`

// signedBody returns body (a JSON object without a Token) with the Token
// under password added as its first member.
func signedBody(t testing.TB, body, password string) []byte {
	t.Helper()
	tok, err := Token([]byte(body), []byte(password))
	if err != nil {
		t.Fatalf("Token: %v", err)
	}
	return withToken(body, tok)
}

// withToken inserts "Token":tok as the first member of the object body.
func withToken(body, tok string) []byte {
	i := strings.IndexByte(body, '{')
	rest := body[i+1:]
	sep := ","
	if strings.HasPrefix(strings.TrimSpace(rest), "}") {
		sep = ""
	}
	return []byte(body[:i+1] + `"Token":"` + tok + `"` + sep + rest)
}

func TestVectorFile(t *testing.T) {
	t.Parallel()
	if got := string(bytes.TrimSpace(readVector(t))); got != vectorJSON {
		t.Fatalf("testdata differs from vectorJSON:\n%s\n%s", got, vectorJSON)
	}
}

// Vector 1: a notification's Token.
func TestTokenNotificationVector(t *testing.T) {
	t.Parallel()
	body := readVector(t)
	got, err := Token(body, []byte(vectorPassword))
	if err != nil || got != vectorToken {
		t.Fatalf("Token(vector) = %s, %v; want %s", got, err, vectorToken)
	}
	if err := Verify(body, [][]byte{[]byte(vectorPassword)}); err != nil {
		t.Fatalf("Verify(vector): %v", err)
	}
}

// Vector 2: the Token of an Init request, the way the service signs what
// it sends.
func TestTokenInitVector(t *testing.T) {
	t.Parallel()
	const want = "72dd466f8ace0a37a1f740ce5fb78101712bc0665d91a8108c7c8a0ccd426db2"
	cases := []struct{ name, body string }{
		{"as documented", `{"TerminalKey":"MerchantTerminalKey","Amount":19200,"OrderId":"00000","Description":"Подарочная карта на 1000 рублей"}`},
		{"members in another order, with spaces", "{ \"Description\" : \"Подарочная карта на 1000 рублей\",\n\t\"OrderId\": \"00000\", \"Amount\": 19200, \"TerminalKey\": \"MerchantTerminalKey\" }"},
		{"Cyrillic escaped", `{"TerminalKey":"MerchantTerminalKey","Amount":19200,"OrderId":"00000","Description":"\u041f\u043e\u0434\u0430\u0440\u043e\u0447\u043d\u0430\u044f карта на 1000 рублей"}`},
		{"objects, arrays and nulls are not signed", `{"TerminalKey":"MerchantTerminalKey","Amount":19200,"OrderId":"00000","Description":"Подарочная карта на 1000 рублей","DATA":{"Phone":"+71234567890","Email":"a@test.com"},"Receipt":{"Items":[{"Name":"x","Price":19200}]},"CustomerKey":null}`},
		{"an existing Token is not signed", `{"TerminalKey":"MerchantTerminalKey","Amount":19200,"OrderId":"00000","Description":"Подарочная карта на 1000 рублей","Token":"stale"}`},
	}
	for _, tc := range cases {
		got, err := Token([]byte(tc.body), []byte("11111111111111"))
		if err != nil || got != want {
			t.Errorf("%s: Token = %s, %v; want %s", tc.name, got, err, want)
		}
	}
}

// Values are signed as the body writes them: strings unescaped, numbers as
// their literal, booleans as true/false.
func TestTokenRendering(t *testing.T) {
	t.Parallel()
	pw := []byte("pw")
	same := [][2]string{
		{`{"A":"x","B":1}`, `{"B":1,"A":"x"}`},
		{`{"A":"\u0078"}`, `{"A":"x"}`},
		{`{"A":"a\/b"}`, `{"A":"a/b"}`},
		{`{"A":1,"B":null}`, `{"A":1}`},
		{`{"A":1,"B":{"C":"x"},"D":[1,2]}`, `{"A":1}`},
		{`{"A":true}`, `{"A":"true"}`},
		{`{"A":1}`, `{"A":"1"}`},
		{`{"PaymentId":8742591}`, `{"PaymentId":"8742591"}`},
		{`{"DATA":"x"}`, `{"C":"x"}`}, // a string DATA is a scalar: signed
	}
	for _, p := range same {
		a, errA := Token([]byte(p[0]), pw)
		b, errB := Token([]byte(p[1]), pw)
		if errA != nil || errB != nil || a != b {
			t.Errorf("Token(%s) = %s, %v; Token(%s) = %s, %v; want equal", p[0], a, errA, p[1], b, errB)
		}
	}
	differ := [][2]string{
		{`{"A":1000}`, `{"A":1e3}`},
		{`{"A":9855}`, `{"A":9855.0}`},
		{`{"A":1}`, `{"A":1.0}`},
		{`{"A":0}`, `{"A":-0}`},
		{`{"A":"x"}`, `{"a":"x","B":""}`}, // same values: the names sort differently around Password
	}
	for _, p := range differ {
		a, errA := Token([]byte(p[0]), pw)
		b, errB := Token([]byte(p[1]), pw)
		if errA != nil || errB != nil || a == b {
			t.Errorf("Token(%s) = %s, %v; Token(%s) = %s, %v; want different", p[0], a, errA, p[1], b, errB)
		}
	}
	// Huge numbers are signed as written, never through a float.
	huge := `{"PaymentId":123456789012345678901234567890,"Amount":1e400}`
	want, err := Token([]byte(`{"PaymentId":"123456789012345678901234567890","Amount":"1e400"}`), pw)
	if got, err2 := Token([]byte(huge), pw); err != nil || err2 != nil || got != want {
		t.Errorf("Token(huge numbers) = %s, %v; want %s", got, err2, want)
	}
	// The password goes where its name sorts, in byte order (capitals
	// before small letters).
	for body, want := range map[string]string{
		`{"Oa":"1","Pb":"3"}`: "1pw3",
		`{"Pa":"1","a":"3"}`:  "1pw3",
		`{"Q":"3","B":"1"}`:   "1pw3",
		`{}`:                  "pw",
	} {
		sum := sha256.Sum256([]byte(want))
		if got, err := Token([]byte(body), pw); err != nil || got != hex.EncodeToString(sum[:]) {
			t.Errorf("Token(%s) = %s, %v; want the SHA-256 of %q", body, got, err, want)
		}
	}
}

func TestTokenErrors(t *testing.T) {
	t.Parallel()
	deep := `{"A":` + strings.Repeat(`[`, 64) + strings.Repeat(`]`, 64) + `}`
	cases := []struct{ name, body, want string }{
		{"empty", ``, "empty or ends before"},
		{"not JSON", `Status=CONFIRMED`, "not valid JSON"},
		{"array", `[{"A":1}]`, "must be a JSON object"},
		{"string", `"A"`, "must be a JSON object"},
		{"truncated", `{"A":1`, "empty or ends before"},
		{"trailing comma", `{"A":1,}`, "not valid JSON"},
		{"trailing data", `{"A":1} x`, "more data after"},
		{"two objects", `{"A":1}{"A":1}`, "more data after"},
		{"invalid UTF-8", "{\"A\":\"\xff\"}", "not valid UTF-8"},
		{"duplicate top-level name", `{"Amount":1,"Amount":1000}`, "appears twice"},
		{"duplicate Token", `{"Token":"a","Token":"b"}`, "appears twice"},
		{"Password member", `{"A":1,"Password":"guess"}`, "carries a Password member"},
		{"Password member null", `{"Password":null}`, "carries a Password member"},
		{"Token a number", `{"A":1,"Token":1}`, "Token must be a string"},
		{"Token null", `{"A":1,"Token":null}`, "Token must be a string"},
		{"Token an object", `{"A":1,"Token":{}}`, "Token must be a string"},
		{"too deep", deep, "nests deeper than 64"},
		{"bad nested syntax", `{"A":{"B":}}`, "not valid JSON"},
	}
	for _, tc := range cases {
		_, err := Token([]byte(tc.body), []byte("pw"))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Token error %v, want one saying %q", tc.name, err, tc.want)
		}
	}
	// Nested names may repeat (they are not signed); 63 nested levels pass.
	if _, err := Token([]byte(`{"A":{"B":1,"B":2},"C":`+strings.Repeat(`[`, 63)+strings.Repeat(`]`, 63)+`}`), []byte("pw")); err != nil {
		t.Errorf("nested repeats and 64 levels: %v", err)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	body := []byte(vectorJSON)
	pw := []byte(vectorPassword)
	old := []byte("OldTerminalPassword")
	tampered := func(from, to string) []byte {
		if !strings.Contains(vectorJSON, from) {
			t.Fatalf("the vector has no %q", from)
		}
		return []byte(strings.Replace(vectorJSON, from, to, 1))
	}
	unsigned := strings.Replace(vectorJSON, `, "Token": "`+vectorToken+`"`, "", 1)
	cases := []struct {
		name      string
		body      []byte
		passwords [][]byte
		want      string // "" = accepted
	}{
		{"vector", body, [][]byte{pw}, ""},
		{"old wrong then new right", body, [][]byte{old, pw}, ""},
		{"new right then old wrong", body, [][]byte{pw, old}, ""},
		{"empty password skipped", body, [][]byte{{}, pw}, ""},
		{"PaymentId as a string", signedBody(t, strings.Replace(unsigned, `8742591`, `"8742591"`, 1), vectorPassword), [][]byte{pw}, ""},
		{"nested objects are not signed", tampered(`"RebillId": 101709`, `"RebillId": 101709, "DATA": {"Email": "a@example.com"}, "Receipt": {"Items": [1, 2]}`), [][]byte{pw}, ""},
		{"nulls are not signed", tampered(`"RebillId": 101709`, `"RebillId": 101709, "CustomerKey": null`), [][]byte{pw}, ""},
		{"Token escaped", tampered(vectorToken, `\u0062`+vectorToken[1:]), [][]byte{pw}, ""},

		{"amount tampered", tampered(`"Amount": 9855`, `"Amount": 985500`), [][]byte{pw}, "Token does not match"},
		{"status tampered", tampered(`"AUTHORIZED"`, `"CONFIRMED"`), [][]byte{pw}, "Token does not match"},
		{"order tampered", tampered(`"201709"`, `"201710"`), [][]byte{pw}, "Token does not match"},
		{"amount as 9855.0", tampered(`"Amount": 9855`, `"Amount": 9855.0`), [][]byte{pw}, "Token does not match"},
		{"Success as a string", tampered(`"Success": true`, `"Success": "true "`), [][]byte{pw}, "Token does not match"},
		{"member added", tampered(`"RebillId": 101709`, `"RebillId": 101709, "Extra": "x"`), [][]byte{pw}, "Token does not match"},
		{"member removed", tampered(`"ExpDate": "1122", `, ``), [][]byte{pw}, "Token does not match"},
		{"member nulled", tampered(`"ExpDate": "1122"`, `"ExpDate": null`), [][]byte{pw}, "Token does not match"},
		{"wrong password", body, [][]byte{old}, "Token does not match"},
		{"password with a trailing newline", body, [][]byte{append(bytes.Clone(pw), '\n')}, "Token does not match"},
		{"Token of another body", tampered(vectorToken, strings.Repeat("0", 64)), [][]byte{pw}, "Token does not match"},

		{"Token missing", []byte(unsigned), [][]byte{pw}, "missing Token"},
		{"Token empty", tampered(vectorToken, ""), [][]byte{pw}, "missing Token"},
		{"Token uppercase", tampered(vectorToken, strings.ToUpper(vectorToken)), [][]byte{pw}, "malformed Token"},
		{"Token too short", tampered(vectorToken, vectorToken[:63]), [][]byte{pw}, "malformed Token"},
		{"Token too long", tampered(vectorToken, vectorToken+"0"), [][]byte{pw}, "malformed Token"},
		{"Token with spaces", tampered(vectorToken, " "+vectorToken[1:]), [][]byte{pw}, "malformed Token"},
		{"Token base64", tampered(vectorToken, "uQbSjnbGQo43siz8hsCtxSxj1QMBP91jLgBZPTFldms="), [][]byte{pw}, "malformed Token"},
		{"Token a number", tampered(`"`+vectorToken+`"`, "1"), [][]byte{pw}, "Token must be a string"},
		{"Token twice", tampered(`"RebillId"`, `"Token": "`+vectorToken+`", "RebillId"`), [][]byte{pw}, "appears twice"},
		{"member twice", tampered(`"RebillId"`, `"Amount": 1, "RebillId"`), [][]byte{pw}, "appears twice"},
		{"Password in the body", tampered(`"RebillId"`, `"Password": "Dfsfh56dgKl", "RebillId"`), [][]byte{pw}, "Password member"},
		{"not JSON", []byte("TerminalKey=1321054611234DEMO&Token=" + vectorToken), [][]byte{pw}, "malformed body"},
		{"empty body", nil, [][]byte{pw}, "malformed body"},
		{"no passwords", body, nil, "no terminal password"},
		{"only an empty password", signedBody(t, unsigned, ""), [][]byte{{}}, "no terminal password"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Verify(tc.body, tc.passwords)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Verify: %v, want accepted", err)
				}
				return
			}
			if !errors.Is(err, ingest.ErrSignature) {
				t.Fatalf("Verify: %v, want an error wrapping ErrSignature", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("Verify: %q, want it to say %q", msg, tc.want)
			}
			for _, leak := range []string{vectorPassword, string(old), vectorToken, vectorToken[:16], "430000", "1321054611234DEMO"} {
				if strings.Contains(msg, leak) {
					t.Errorf("Verify error %q quotes a password, the Token or the body", msg)
				}
			}
		})
	}
}
