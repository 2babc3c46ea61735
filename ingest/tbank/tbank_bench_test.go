package tbank

import (
	"bytes"
	"strings"
	"testing"
)

// confirmedVector is the published notification as CONFIRMED (what pays
// an order), signed with the vector's password the way the bank signs.
func confirmedVector(b *testing.B) []byte {
	b.Helper()
	unsigned := strings.Replace(unsignedVector(), `"Status": "AUTHORIZED"`, `"Status": "CONFIRMED"`, 1)
	return signedBody(b, unsigned, vectorPassword)
}

// BenchmarkVerifyParse is what the gateway asks of the adapter for one
// notification: check its Token, then parse it — on the published vector
// (AUTHORIZED) and on it as CONFIRMED.
func BenchmarkVerifyParse(b *testing.B) {
	a, err := New(vectorEndpoint, [][]byte{[]byte(vectorPassword)}, options(b, "terminal_key: "+vectorTerminal))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		body []byte
	}{
		{"authorized", bytes.TrimSpace(readVector(b))},
		{"confirmed", confirmedVector(b)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := a.Verify(nil, c.body); err != nil {
					b.Fatal(err)
				}
				if _, err := a.Parse(nil, c.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkVerify and BenchmarkParse split the two, on the vector.
func BenchmarkVerify(b *testing.B) {
	body := readVector(b)
	passwords := [][]byte{[]byte(vectorPassword)}
	b.ReportAllocs()
	for b.Loop() {
		if err := Verify(body, passwords); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	body := readVector(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(vectorEndpoint, vectorTerminal, body); err != nil {
			b.Fatal(err)
		}
	}
}
