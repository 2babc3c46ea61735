package yolfi

import (
	"testing"
)

// BenchmarkVerifyParse is what the gateway asks of the adapter for one
// webhook: verify the signature over the raw body, then parse it — on the
// published vector.
func BenchmarkVerifyParse(b *testing.B) {
	body, sig := readVector(b)
	h := sigHeader(sig)
	h.Set(EventIDHeader, "evt_01JDV6Q8W3ZK7M2N4P5R6S7T8V")
	a, err := New(vectorEndpoint, [][]byte{[]byte(vectorSecret)}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := a.Verify(h, body); err != nil {
			b.Fatal(err)
		}
		if _, err := a.Parse(h, body); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify and BenchmarkParse split the two.
func BenchmarkVerify(b *testing.B) {
	body, sig := readVector(b)
	h := sigHeader(sig)
	secrets := [][]byte{[]byte(vectorSecret)}
	b.ReportAllocs()
	for b.Loop() {
		if err := Verify(h, body, secrets); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	body, sig := readVector(b)
	h := sigHeader(sig)
	h.Set(EventIDHeader, "evt_01JDV6Q8W3ZK7M2N4P5R6S7T8V")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(vectorEndpoint, h, body); err != nil {
			b.Fatal(err)
		}
	}
}
