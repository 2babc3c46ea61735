// Package stdwebhooks signs and verifies HTTP webhooks as the Standard
// Webhooks specification (https://www.standardwebhooks.com) defines them:
// symmetric "v1" signatures, HMAC-SHA256 over "<id>.<timestamp>.<body>",
// carried in the webhook-id, webhook-timestamp and webhook-signature headers.
//
// It is the one implementation the service uses, both to sign what its
// dispatcher delivers and to verify deliveries in fulfillctl listen.
package stdwebhooks

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The headers of a Standard Webhooks delivery.
const (
	// HeaderID carries the message id, the same on every delivery attempt
	// of one message: receivers use it to recognise repeats.
	HeaderID = "webhook-id"
	// HeaderTimestamp carries the signing time in unix seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature carries space-separated "v1,<base64 HMAC>" entries, one
	// per signing secret.
	HeaderSignature = "webhook-signature"
)

// SecretPrefix starts the text form of a secret as the specification
// presents it: "whsec_" followed by the standard base64 encoding of the key
// bytes. ParseSecret also reads the base64 alone, as the official libraries
// do, so that a receiver may hold either form; ParseSigningSecret does not.
const SecretPrefix = "whsec_"

// MinSecretBytes is the shortest key ParseSecret accepts: the lower bound the
// specification sets for signing secrets (24 bytes, 192 bits).
const MinSecretBytes = 24

// MaxIDBytes is the longest webhook-id Verify accepts.
const MaxIDBytes = 256

// ErrVerification is wrapped by every error Verify returns.
var ErrVerification = errors.New("webhook verification failed")

// signatureVersion is the only scheme this package signs and verifies:
// symmetric HMAC-SHA256. Other versions (v1a, asymmetric) are ignored.
const signatureVersion = "v1"

// Secret is a signing key. Its String and GoString never show the key, so a
// Secret is safe to print or log by mistake. The zero Secret holds no key:
// Sign skips it and Verify never accepts a signature under it.
type Secret struct {
	key []byte
}

// ParseSecret reads the text form of a secret: the standard (padded) base64
// encoding of at least MinSecretBytes key bytes, after "whsec_" or alone.
// Both name the same key, as in the official libraries: "_" is not a base64
// character, so the two forms cannot be confused. Any other form is refused;
// the error never quotes the text.
func ParseSecret(s string) (Secret, error) {
	enc := strings.TrimPrefix(s, SecretPrefix)
	key, err := base64.StdEncoding.Strict().DecodeString(enc)
	// The decoder skips '\r' and '\n': re-encoding refuses them too, and
	// anything else that is not the one canonical encoding of the key.
	if err != nil || base64.StdEncoding.EncodeToString(key) != enc {
		return Secret{}, errors.New("stdwebhooks: a secret must be " + SecretPrefix + " followed by standard base64 (A-Z a-z 0-9 + /, padded with =), or that base64 alone")
	}
	if len(key) < MinSecretBytes {
		return Secret{}, fmt.Errorf("stdwebhooks: a secret's key must be at least %d bytes, this one has %d", MinSecretBytes, len(key))
	}
	return Secret{key: key}, nil
}

// ParseSigningSecret reads a secret a sender signs with: only in the form
// receivers are given it, "whsec_" followed by the base64 (ParseSecret). A
// bare base64 is refused here: where a secret is configured to sign, a hex
// string or a passphrase that happens to be valid base64 is a mistake, not
// another key.
func ParseSigningSecret(s string) (Secret, error) {
	if !strings.HasPrefix(s, SecretPrefix) {
		return Secret{}, errors.New("stdwebhooks: a signing secret is " + SecretPrefix + " followed by the base64 of its key, as receivers are given it")
	}
	return ParseSecret(s)
}

// IsZero reports whether the secret holds no key (Sign skips it).
func (s Secret) IsZero() bool { return len(s.key) == 0 }

// AnyKey reports whether some of secrets holds a key: whether Sign under
// them gives a signature. It computes none.
func AnyKey(secrets ...Secret) bool {
	for _, s := range secrets {
		if !s.IsZero() {
			return true
		}
	}
	return false
}

// String returns a placeholder, never the key.
func (s Secret) String() string {
	if s.IsZero() {
		return "whsec_(none)"
	}
	return "whsec_(redacted)"
}

// GoString returns a placeholder, never the key (for %#v).
func (s Secret) GoString() string { return "stdwebhooks.Secret(" + s.String() + ")" }

// mac returns HMAC-SHA256 under the secret's key of "<id>.<ts>.<body>".
func (s Secret) mac(msgID, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(msgID))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// unixSeconds is the webhook-timestamp form of t.
func unixSeconds(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// Sign returns the webhook-signature value of the message: one
// "v1,<base64 HMAC-SHA256(key, "<msgID>.<unix seconds>.<body>")>" per
// secret, in the order given, separated by spaces. Signing with the old and
// the new secret during a rotation lets receivers holding either verify.
// Zero Secrets are skipped; with none left the value is empty, which Verify
// refuses. msgID should be printable ASCII without spaces, at most
// MaxIDBytes long: Verify refuses other ids.
func Sign(msgID string, timestamp time.Time, body []byte, secrets ...Secret) string {
	ts := unixSeconds(timestamp)
	var b strings.Builder
	for _, s := range secrets {
		if s.IsZero() {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(signatureVersion + ",")
		b.WriteString(base64.StdEncoding.EncodeToString(s.mac(msgID, ts, body)))
	}
	return b.String()
}

// Headers returns the headers of a delivery of the message: webhook-id,
// webhook-timestamp (unix seconds) and webhook-signature (see Sign).
func Headers(msgID string, timestamp time.Time, body []byte, secrets ...Secret) http.Header {
	h := make(http.Header, 3)
	h.Set(HeaderID, msgID)
	h.Set(HeaderTimestamp, unixSeconds(timestamp))
	h.Set(HeaderSignature, Sign(msgID, timestamp, body, secrets...))
	return h
}

// Verify checks a delivery: the three headers are present once each and well
// formed, webhook-timestamp is within tolerance of now either way (the bound
// on replays), and some v1 signature of webhook-signature is the HMAC of
// the message under some secret (several during a rotation). Signatures are
// compared in constant time, against every secret whatever matched. Errors
// wrap ErrVerification and say what is wrong without quoting the body, a
// signature or a secret.
func Verify(h http.Header, body []byte, now time.Time, tolerance time.Duration, secrets ...Secret) error {
	if tolerance <= 0 {
		return verr("the timestamp tolerance must be positive")
	}
	msgID, err := single(h, HeaderID)
	if err != nil {
		return err
	}
	if err := checkID(msgID); err != nil {
		return err
	}
	tsText, err := single(h, HeaderTimestamp)
	if err != nil {
		return err
	}
	ts, err := parseTimestamp(tsText)
	if err != nil {
		return err
	}
	if err := checkAge(ts, now, tolerance); err != nil {
		return err
	}
	sigText, err := single(h, HeaderSignature)
	if err != nil {
		return err
	}
	sigs := v1Signatures(sigText)
	if len(sigs) == 0 {
		return verr(HeaderSignature + " holds no well-formed v1 signature")
	}

	usable, ok := 0, false
	for _, s := range secrets {
		if s.IsZero() {
			continue
		}
		usable++
		want := s.mac(msgID, tsText, body)
		for _, got := range sigs {
			if hmac.Equal(want, got) {
				ok = true // keep going: the time taken does not say which matched
			}
		}
	}
	switch {
	case usable == 0:
		return verr("no signing secret to verify with")
	case !ok:
		return verr("no signature matches")
	}
	return nil
}

func verr(reason string) error { return fmt.Errorf("%w: %s", ErrVerification, reason) }

// single returns the value of a header that must be present exactly once
// and not empty.
func single(h http.Header, name string) (string, error) {
	vals := h.Values(name)
	switch {
	case len(vals) == 0 || (len(vals) == 1 && vals[0] == ""):
		return "", verr("missing " + name + " header")
	case len(vals) > 1:
		return "", verr("more than one " + name + " header")
	}
	return vals[0], nil
}

// checkID accepts printable ASCII ids without spaces, at most MaxIDBytes.
func checkID(id string) error {
	if len(id) > MaxIDBytes {
		return verr(fmt.Sprintf("%s is longer than %d bytes", HeaderID, MaxIDBytes))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return verr(HeaderID + " holds a character other than printable ASCII")
		}
	}
	return nil
}

// maxTimestampDigits keeps time.Unix from overflowing (its internal
// seconds count starts in year 1); 18 digits reach far past year 10^10.
const maxTimestampDigits = 18

// parseTimestamp reads unix seconds written as Sign writes them: decimal
// digits, no sign, no leading zero.
func parseTimestamp(s string) (int64, error) {
	bad := verr(HeaderTimestamp + " is not unix seconds (decimal digits)")
	if len(s) > maxTimestampDigits {
		return 0, bad
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, bad
		}
	}
	ts, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(ts, 10) != s {
		return 0, bad
	}
	return ts, nil
}

// checkAge refuses a timestamp more than tolerance before or after now.
func checkAge(ts int64, now time.Time, tolerance time.Duration) error {
	t := time.Unix(ts, 0)
	// Sub saturates instead of overflowing: each way is computed as a
	// non-negative difference, so an absurd value cannot wrap around.
	if age := now.Sub(t); age > tolerance {
		return verr(fmt.Sprintf("%s %d is %s old, more than the tolerance of %s", HeaderTimestamp, ts, showAge(age), tolerance))
	}
	if ahead := t.Sub(now); ahead > tolerance {
		return verr(fmt.Sprintf("%s %d is %s in the future, more than the tolerance of %s", HeaderTimestamp, ts, showAge(ahead), tolerance))
	}
	return nil
}

// showAge shows a positive difference to the second, or as "over 292 years"
// when the subtraction saturated.
func showAge(d time.Duration) string {
	if d == time.Duration(math.MaxInt64) {
		return "over 292 years"
	}
	return d.Round(time.Second).String()
}

// v1Signatures returns the decoded v1 entries of a webhook-signature value.
// Entries of other versions, and v1 entries that are not base64 of 32
// bytes, are skipped.
func v1Signatures(v string) [][]byte {
	var out [][]byte
	for _, entry := range strings.Fields(v) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != signatureVersion || len(sig) != sigLen {
			continue
		}
		b, err := base64.StdEncoding.Strict().DecodeString(sig)
		if err != nil || len(b) != sha256.Size {
			continue
		}
		out = append(out, b)
	}
	return out
}

// sigLen is the length of a base64 HMAC-SHA256 (32 bytes, padded).
var sigLen = base64.StdEncoding.EncodedLen(sha256.Size)
