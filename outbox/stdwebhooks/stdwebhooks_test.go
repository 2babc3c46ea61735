package stdwebhooks

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The test vector published with the Standard Webhooks specification (and
// used by its reference libraries).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorBody      = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

var vectorTime = time.Unix(vectorTimestamp, 0)

const tolerance = 5 * time.Minute

func mustSecret(t testing.TB, s string) Secret {
	t.Helper()
	sec, err := ParseSecret(s)
	if err != nil {
		t.Fatalf("ParseSecret: %v", err)
	}
	return sec
}

// secretOf returns a secret with key bytes n, n+1, …
func secretOf(t testing.TB, n byte) Secret {
	t.Helper()
	key := make([]byte, 32)
	for i := range key {
		key[i] = n + byte(i)
	}
	return mustSecret(t, SecretPrefix+base64.StdEncoding.EncodeToString(key))
}

func TestSignVector(t *testing.T) {
	t.Parallel()
	s := mustSecret(t, vectorSecret)
	if got := Sign(vectorID, vectorTime, []byte(vectorBody), s); got != vectorSignature {
		t.Fatalf("Sign(vector) = %s, want %s", got, vectorSignature)
	}
	h := Headers(vectorID, vectorTime, []byte(vectorBody), s)
	want := map[string]string{
		"webhook-id":        vectorID,
		"webhook-timestamp": "1614265330",
		"webhook-signature": vectorSignature,
	}
	for name, v := range want {
		if got := h.Values(name); len(got) != 1 || got[0] != v {
			t.Errorf("Headers: %s = %q, want [%q]", name, got, v)
		}
	}
	if len(h) != 3 {
		t.Errorf("Headers set %d headers, want 3: %v", len(h), h)
	}
	if err := Verify(h, []byte(vectorBody), vectorTime.Add(time.Minute), tolerance, s); err != nil {
		t.Fatalf("Verify(vector): %v", err)
	}
	// Sub-second parts of the signing time are not signed.
	if got := Sign(vectorID, vectorTime.Add(999*time.Millisecond), []byte(vectorBody), s); got != vectorSignature {
		t.Fatalf("Sign at .999 s = %s, want %s", got, vectorSignature)
	}
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	key24 := base64.StdEncoding.EncodeToString(make([]byte, 24))
	key25 := base64.StdEncoding.EncodeToString(make([]byte, 25)) // padded
	cases := []struct {
		name, in, wantErr string
	}{
		{"vector", vectorSecret, ""},
		{"padded", "whsec_" + key25, ""},
		{"64 bytes", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 64)), ""},
		{"no prefix", strings.TrimPrefix(vectorSecret, "whsec_"), ""},
		{"no prefix, padded", key25, ""},
		{"other prefix", "whsk_" + key24, "standard base64"},
		{"upper-case prefix", "WHSEC_" + key24, "standard base64"},
		{"prefix twice", "whsec_whsec_" + key24, "standard base64"},
		{"empty", "", "at least 24 bytes, this one has 0"},
		{"prefix only", "whsec_", "at least 24 bytes, this one has 0"},
		{"short key without prefix", base64.StdEncoding.EncodeToString(make([]byte, 23)), "at least 24 bytes, this one has 23"},
		{"short key", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 23)), "at least 24 bytes, this one has 23"},
		{"url-safe alphabet", "whsec_" + base64.URLEncoding.EncodeToString([]byte("\xfb\xff\xfe0123456789012345678901")), "standard base64"},
		{"unpadded", "whsec_" + strings.TrimRight(key25, "="), "standard base64"},
		{"trailing newline", vectorSecret + "\n", "standard base64"},
		{"inner newline", vectorSecret[:20] + "\r\n" + vectorSecret[20:], "standard base64"},
		{"space", vectorSecret + " ", "standard base64"},
		{"not base64", "whsec_this is not base64 at all!!", "standard base64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, err := ParseSecret(c.in)
			if c.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseSecret: %v", err)
				}
				if len(s.key) == 0 {
					t.Fatal("no key")
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("ParseSecret error %v, want one containing %q", err, c.wantErr)
			}
			if enc := strings.TrimPrefix(c.in, "whsec_"); len(enc) > 4 && strings.Contains(err.Error(), enc) {
				t.Fatalf("error quotes the secret: %v", err)
			}
		})
	}
}

// A signing secret is the prefixed form only; what follows the prefix is
// read as ParseSecret reads it.
func TestParseSigningSecret(t *testing.T) {
	t.Parallel()
	bare := strings.TrimPrefix(vectorSecret, SecretPrefix)
	if s, err := ParseSigningSecret(vectorSecret); err != nil || len(s.key) == 0 {
		t.Errorf("ParseSigningSecret of the vector: %v", err)
	}
	if _, err := ParseSigningSecret(bare); err == nil || !strings.Contains(err.Error(), "a signing secret is whsec_") ||
		strings.Contains(err.Error(), bare) {
		t.Errorf("ParseSigningSecret of the bare base64: %v, want a refusal that does not quote it", err)
	}
	if _, err := ParseSigningSecret(SecretPrefix + "not base64"); err == nil || !strings.Contains(err.Error(), "standard base64") {
		t.Errorf("ParseSigningSecret of a prefixed non-base64: %v", err)
	}
}

func TestSecretNeverPrinted(t *testing.T) {
	t.Parallel()
	s := mustSecret(t, vectorSecret)
	enc := strings.TrimPrefix(vectorSecret, "whsec_")
	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x"} {
		for _, v := range []any{s, &s, []Secret{s}, struct{ S Secret }{s}} {
			got := fmt.Sprintf(format, v)
			if strings.Contains(got, enc) || strings.Contains(got, fmt.Sprintf("%v", s.key)) || strings.Contains(got, fmt.Sprintf("%x", s.key)) {
				t.Errorf("Sprintf(%s) shows the key: %s", format, got)
			}
		}
	}
	if got := fmt.Sprintf("%v", []Secret{{}}); got != "[whsec_(none)]" {
		t.Errorf("zero Secret prints %q", got)
	}
}

func TestRotation(t *testing.T) {
	t.Parallel()
	oldS, newS, other := secretOf(t, 1), secretOf(t, 100), secretOf(t, 200)
	body := []byte(`{"type":"order.fulfilled"}`)
	now := time.Unix(1_800_000_000, 0)

	sig := Sign("msg_1", now, body, oldS, newS)
	parts := strings.Split(sig, " ")
	if len(parts) != 2 || parts[0] != Sign("msg_1", now, body, oldS) || parts[1] != Sign("msg_1", now, body, newS) {
		t.Fatalf("Sign with two secrets = %q, want the two signatures in order", sig)
	}
	h := Headers("msg_1", now, body, oldS, newS)
	for _, secrets := range [][]Secret{{oldS}, {newS}, {other, newS}, {oldS, other}, {{}, newS}} {
		if err := Verify(h, body, now, tolerance, secrets...); err != nil {
			t.Errorf("Verify with %d secrets: %v", len(secrets), err)
		}
	}
	// A receiver holding both verifies a sender that signs with either.
	for _, s := range []Secret{oldS, newS} {
		if err := Verify(Headers("msg_1", now, body, s), body, now, tolerance, oldS, newS); err != nil {
			t.Errorf("Verify of one signature against both secrets: %v", err)
		}
	}
	mustRefuse(t, Verify(h, body, now, tolerance, other), "no signature matches")

	// Zero secrets are skipped when signing.
	if got := Sign("msg_1", now, body, Secret{}, newS, Secret{}); got != parts[1] {
		t.Errorf("Sign with zero secrets around = %q, want %q", got, parts[1])
	}
	if got := Sign("msg_1", now, body); got != "" {
		t.Errorf("Sign without secrets = %q, want empty", got)
	}
}

func mustRefuse(t *testing.T, err error, want string) {
	t.Helper()
	if !errors.Is(err, ErrVerification) {
		t.Fatalf("error %v, want one wrapping ErrVerification", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q, want one containing %q", err, want)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	s := mustSecret(t, vectorSecret)
	body := []byte(vectorBody)
	now := vectorTime
	good := func() http.Header { return Headers(vectorID, vectorTime, body, s) }
	with := func(name string, vals ...string) http.Header {
		h := good()
		h.Del(name)
		for _, v := range vals {
			h.Add(name, v)
		}
		return h
	}
	sigOf := func(id string, ts int64, b string) string {
		return Sign(id, time.Unix(ts, 0), []byte(b), s)
	}
	otherVersion := "v1a," + base64.StdEncoding.EncodeToString(make([]byte, 64))
	mac := strings.TrimPrefix(vectorSignature, "v1,")

	cases := []struct {
		name    string
		h       http.Header
		body    string
		now     time.Time
		secrets []Secret
		want    string // "" = verified
	}{
		{"vector", good(), vectorBody, now, []Secret{s}, ""},
		{"canonical names", http.Header{
			"Webhook-Id": {vectorID}, "Webhook-Timestamp": {"1614265330"}, "Webhook-Signature": {vectorSignature},
		}, vectorBody, now, []Secret{s}, ""},
		{"among other versions and junk", with(HeaderSignature, otherVersion+" v2,abc  junk "+vectorSignature+" v1,!!!"), vectorBody, now, []Secret{s}, ""},
		{"tab separated", with(HeaderSignature, otherVersion+"\t"+vectorSignature), vectorBody, now, []Secret{s}, ""},

		{"tampered body", good(), `{"test": 2432232315}`, now, []Secret{s}, "no signature matches"},
		{"body with trailing newline", good(), vectorBody + "\n", now, []Secret{s}, "no signature matches"},
		{"empty body", good(), "", now, []Secret{s}, "no signature matches"},
		{"tampered id", with(HeaderID, "msg_p5jXN8AQM9LWM0D4loKWxJel"), vectorBody, now, []Secret{s}, "no signature matches"},
		{"tampered timestamp", with(HeaderTimestamp, "1614265331"), vectorBody, now, []Secret{s}, "no signature matches"},
		{"signature of another message", with(HeaderSignature, sigOf(vectorID, vectorTimestamp, `{}`)), vectorBody, now, []Secret{s}, "no signature matches"},
		{"wrong secret", good(), vectorBody, now, []Secret{secretOf(t, 7)}, "no signature matches"},
		{"no secret", good(), vectorBody, now, nil, "no signing secret"},
		{"zero secret", good(), vectorBody, now, []Secret{{}}, "no signing secret"},

		{"at the tolerance, old", good(), vectorBody, now.Add(tolerance), []Secret{s}, ""},
		{"at the tolerance, future", good(), vectorBody, now.Add(-tolerance), []Secret{s}, ""},
		{"too old", good(), vectorBody, now.Add(tolerance + time.Second), []Secret{s}, "webhook-timestamp 1614265330 is 5m1s old, more than the tolerance of 5m0s"},
		{"too far in the future", good(), vectorBody, now.Add(-tolerance - time.Second), []Secret{s}, "is 5m1s in the future"},
		{"years old", good(), vectorBody, time.Unix(1_900_000_000, 0), []Secret{s}, "old, more than the tolerance"},
		{"far future timestamp", with(HeaderTimestamp, "999999999999999999"), vectorBody, now, []Secret{s}, "is over 292 years in the future"},
		{"zero timestamp", with(HeaderTimestamp, "0"), vectorBody, now, []Secret{s}, "old, more than the tolerance"},

		{"no id", with(HeaderID), vectorBody, now, []Secret{s}, "missing webhook-id header"},
		{"empty id", with(HeaderID, ""), vectorBody, now, []Secret{s}, "missing webhook-id header"},
		{"two ids", with(HeaderID, vectorID, vectorID), vectorBody, now, []Secret{s}, "more than one webhook-id header"},
		{"id with space", with(HeaderID, "msg 1"), vectorBody, now, []Secret{s}, "printable ASCII"},
		{"id with control", with(HeaderID, "msg\x001"), vectorBody, now, []Secret{s}, "printable ASCII"},
		{"id not ASCII", with(HeaderID, "msg_é"), vectorBody, now, []Secret{s}, "printable ASCII"},
		{"id too long", with(HeaderID, strings.Repeat("m", MaxIDBytes+1)), vectorBody, now, []Secret{s}, "longer than 256 bytes"},

		{"no timestamp", with(HeaderTimestamp), vectorBody, now, []Secret{s}, "missing webhook-timestamp header"},
		{"two timestamps", with(HeaderTimestamp, "1614265330", "1614265330"), vectorBody, now, []Secret{s}, "more than one webhook-timestamp"},
		{"timestamp in milliseconds", with(HeaderTimestamp, "1614265330000"), vectorBody, now, []Secret{s}, "in the future"},
		{"timestamp with fraction", with(HeaderTimestamp, "1614265330.5"), vectorBody, now, []Secret{s}, "not unix seconds"},
		{"timestamp with sign", with(HeaderTimestamp, "+1614265330"), vectorBody, now, []Secret{s}, "not unix seconds"},
		{"negative timestamp", with(HeaderTimestamp, "-1"), vectorBody, now, []Secret{s}, "not unix seconds"},
		{"timestamp with leading zero", with(HeaderTimestamp, "01614265330"), vectorBody, now, []Secret{s}, "not unix seconds"},
		{"timestamp with space", with(HeaderTimestamp, " 1614265330"), vectorBody, now, []Secret{s}, "not unix seconds"},
		{"RFC 3339 timestamp", with(HeaderTimestamp, "2021-02-25T15:02:10Z"), vectorBody, now, []Secret{s}, "not unix seconds"},
		{"timestamp overflowing int64", with(HeaderTimestamp, "99999999999999999999"), vectorBody, now, []Secret{s}, "not unix seconds"},

		{"no signature", with(HeaderSignature), vectorBody, now, []Secret{s}, "missing webhook-signature header"},
		{"two signature headers", with(HeaderSignature, vectorSignature, vectorSignature), vectorBody, now, []Secret{s}, "more than one webhook-signature"},
		{"only spaces", with(HeaderSignature, "   "), vectorBody, now, []Secret{s}, "no well-formed v1 signature"},
		{"bare base64", with(HeaderSignature, mac), vectorBody, now, []Secret{s}, "no well-formed v1 signature"},
		{"other version only", with(HeaderSignature, "v2,"+mac), vectorBody, now, []Secret{s}, "no well-formed v1 signature"},
		{"upper-case version", with(HeaderSignature, "V1,"+mac), vectorBody, now, []Secret{s}, "no well-formed v1 signature"},
		{"equals instead of comma", with(HeaderSignature, "v1="+mac), vectorBody, now, []Secret{s}, "no well-formed v1 signature"},
		{"truncated", with(HeaderSignature, vectorSignature[:len(vectorSignature)-2]), vectorBody, now, []Secret{s}, "no well-formed v1 signature"},
		{"unpadded", with(HeaderSignature, strings.TrimSuffix(vectorSignature, "=")), vectorBody, now, []Secret{s}, "no well-formed v1 signature"},
		{"hex", with(HeaderSignature, "v1,"+fmt.Sprintf("%x", make([]byte, 22))), vectorBody, now, []Secret{s}, "no well-formed v1 signature"},
		{"url-safe alphabet", with(HeaderSignature, "v1,"+strings.NewReplacer("+", "-", "/", "_").Replace(mac)), vectorBody, now, []Secret{s}, "no well-formed v1 signature"},
		{"one bit off", with(HeaderSignature, "v1,h"+mac[1:]), vectorBody, now, []Secret{s}, "no signature matches"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := Verify(c.h, []byte(c.body), c.now, tolerance, c.secrets...)
			if c.want == "" {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				return
			}
			mustRefuse(t, err, c.want)
			for _, leak := range []string{vectorBody, mac, strings.TrimPrefix(vectorSecret, "whsec_")} {
				if strings.Contains(err.Error(), leak) {
					t.Fatalf("error quotes the body, the signature or the secret: %v", err)
				}
			}
		})
	}
}

func TestVerifyTolerance(t *testing.T) {
	t.Parallel()
	s := secretOf(t, 3)
	h := Headers("msg_1", vectorTime, nil, s)
	for _, tol := range []time.Duration{0, -time.Second} {
		mustRefuse(t, Verify(h, nil, vectorTime, tol, s), "tolerance must be positive")
	}
	// Sub-second parts of now count: a second's tolerance admits up to a
	// second either way of the signed second.
	if err := Verify(h, nil, vectorTime.Add(time.Second), time.Second, s); err != nil {
		t.Fatalf("one second later, tolerance 1s: %v", err)
	}
	mustRefuse(t, Verify(h, nil, vectorTime.Add(time.Second+time.Millisecond), time.Second, s), "old")
}

func TestAnyKey(t *testing.T) {
	t.Parallel()
	key, err := ParseSecret(SecretPrefix + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		secrets []Secret
		want    bool
	}{
		{nil, false},
		{[]Secret{{}}, false},
		{[]Secret{{}, key}, true},
		{[]Secret{key}, true},
	} {
		if got := AnyKey(c.secrets...); got != c.want {
			t.Errorf("AnyKey(%v) = %v, want %v", c.secrets, got, c.want)
		}
		if got := Sign("id", time.Unix(1, 0), nil, c.secrets...) != ""; got != c.want {
			t.Errorf("Sign under %v signed: %v, AnyKey says %v", c.secrets, got, c.want)
		}
	}
}
