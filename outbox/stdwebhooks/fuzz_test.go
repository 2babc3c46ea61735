package stdwebhooks

import (
	"bytes"
	"encoding/base64"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// validID is the id rule of Verify, written again independently.
func validID(id string) bool {
	if id == "" || len(id) > MaxIDBytes {
		return false
	}
	for _, r := range id {
		if r < '!' || r > '~' {
			return false
		}
	}
	return true
}

func FuzzVerify(f *testing.F) {
	f.Add(vectorID, int64(vectorTimestamp), []byte(vectorBody), []byte("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), vectorSignature, "1614265330", uint(3), byte(1))
	f.Add("", int64(0), []byte{}, []byte{}, "", "", uint(0), byte(0))
	f.Add("msg 1", int64(-1), []byte("x"), []byte("k"), "v1,", "-1", uint(1), byte(0x80))
	f.Add("msg_1", int64(1<<62), []byte(`{"type":"order.created"}`), []byte("0123456789abcdef0123456789abcdef"), "v1a,xyz v1,"+strings.Repeat("A", 43)+"=", "99999999999999999999", uint(99), byte(0xff))
	f.Add("m", int64(1_800_000_000), []byte{0, 0}, []byte("\x00"), "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1,g0hM9SsE", "01614265330", uint(7), byte(2))
	f.Fuzz(func(t *testing.T, id string, ts int64, body, key []byte, sigHeader, tsHeader string, pos uint, bit byte) {
		mustRefuse := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, ErrVerification) {
				t.Fatalf("%s: %v, want an error wrapping ErrVerification", what, err)
			}
		}

		// A key of any length becomes a secret once it is long enough.
		if len(key) < MinSecretBytes {
			if _, err := ParseSecret(SecretPrefix + base64.StdEncoding.EncodeToString(key)); err == nil {
				t.Fatalf("ParseSecret accepted a %d-byte key", len(key))
			}
			key = append(bytes.Clone(key), make([]byte, MinSecretBytes-len(key))...)
		}
		secret, err := ParseSecret(SecretPrefix + base64.StdEncoding.EncodeToString(key))
		if err != nil {
			t.Fatalf("ParseSecret of a %d-byte key: %v", len(key), err)
		}
		other := secretOf(t, key[0]+1)
		if bytes.Equal(other.key, key) {
			other = secretOf(t, key[0]+2)
		}

		// Arbitrary headers: no panic, and acceptance only of the real thing.
		sec := ts % (1 << 40) // unix seconds up to year 36812
		if sec < 0 {
			sec = -sec
		}
		now := time.Unix(sec, 0)
		h := http.Header{}
		h.Set(HeaderID, id)
		h.Set(HeaderTimestamp, tsHeader)
		h.Set(HeaderSignature, sigHeader)
		if err := Verify(h, body, now, tolerance, secret); err == nil {
			sent, perr := strconv.ParseInt(tsHeader, 10, 64)
			switch {
			case !validID(id):
				t.Fatalf("accepted an invalid id")
			case perr != nil || strconv.FormatInt(sent, 10) != tsHeader || sent < 0:
				t.Fatalf("accepted a timestamp that Sign does not write")
			case now.Sub(time.Unix(sent, 0)).Abs() > tolerance:
				t.Fatalf("accepted a timestamp outside the tolerance")
			case !slices.Contains(strings.Fields(sigHeader), Sign(id, time.Unix(sent, 0), body, secret)):
				t.Fatalf("accepted a header without Sign's signature")
			}
		} else {
			mustRefuse("arbitrary headers", err)
		}

		// What Sign signs, Verify accepts, under this secret only, and any
		// change to the signed parts is refused.
		signed := time.Unix(sec, int64(pos%1e9))
		good := Headers(id, signed, body, secret)
		err = Verify(good, body, signed, tolerance, secret)
		if !validID(id) {
			mustRefuse("invalid id", err)
			return
		}
		if err != nil {
			t.Fatalf("own signature refused: %v", err)
		}
		if err := Verify(good, body, signed, tolerance, other, secret); err != nil {
			t.Fatalf("own signature refused with another secret first: %v", err)
		}
		mustRefuse("other secret", Verify(good, body, signed, tolerance, other))
		mustRefuse("no secret", Verify(good, body, signed, tolerance))
		mustRefuse("too old", Verify(good, body, signed.Add(tolerance+time.Second), tolerance, secret))
		mustRefuse("too early", Verify(good, body, signed.Add(-tolerance-time.Second), tolerance, secret))

		if bit == 0 {
			bit = 1
		}
		mutated := bytes.Clone(body)
		if len(mutated) == 0 {
			mutated = []byte{bit}
		} else {
			mutated[pos%uint(len(mutated))] ^= bit
		}
		mustRefuse("mutated body", Verify(good, mutated, signed, tolerance, secret))
		mustRefuse("extended body", Verify(good, append(bytes.Clone(body), bit), signed, tolerance, secret))
		if len(body) > 0 {
			mustRefuse("truncated body", Verify(good, body[:len(body)-1], signed, tolerance, secret))
		}

		withHeader := func(name, v string) http.Header {
			c := good.Clone()
			c.Set(name, v)
			return c
		}
		otherID := []byte(id)
		i := pos % uint(len(otherID))
		otherID[i] = '!' + (otherID[i]-'!'+1+bit%93)%94 // another printable character
		mustRefuse("other id", Verify(withHeader(HeaderID, string(otherID)), body, signed, tolerance, secret))
		for _, d := range []int64{-1, 1, int64(bit)} {
			moved := strconv.FormatInt(signed.Unix()+d, 10)
			mustRefuse("other timestamp", Verify(withHeader(HeaderTimestamp, moved), body, signed, tolerance, secret))
		}
		sig := []byte(good.Get(HeaderSignature))
		j := 3 + pos%uint(len(sig)-4) // keep "v1," and the padding
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
		sig[j] = alphabet[(strings.IndexByte(alphabet, sig[j])+1+int(bit)%63)%64]
		mustRefuse("mutated signature", Verify(withHeader(HeaderSignature, string(sig)), body, signed, tolerance, secret))
	})
}
