package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/outbox/stdwebhooks"
)

// lockedBuffer is an io.Writer tests can read while a server writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSuffix(l.b.String(), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// waitLines waits until out holds n lines and returns them.
func (l *lockedBuffer) waitLines(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines := l.lines()
		if len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited for %d output lines, have %d: %q", n, len(lines), lines)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// testSecret returns a whsec_ secret with key bytes n, n+1, …
func testSecret(n byte) string {
	key := make([]byte, 32)
	for i := range key {
		key[i] = n + byte(i)
	}
	return stdwebhooks.SecretPrefix + base64.StdEncoding.EncodeToString(key)
}

func parseSecret(t *testing.T, s string) stdwebhooks.Secret {
	t.Helper()
	sec, err := stdwebhooks.ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// secretFile writes secret (with a trailing newline, as editors do) to a
// file and returns its path.
func secretFile(t *testing.T, secret string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startListen serves listen's handler, configured by l, on a loopback
// listener until the test ends, and returns its URL and output.
func startListen(t *testing.T, l listenFlags) (string, *lockedBuffer) {
	t.Helper()
	out := &lockedBuffer{}
	rc, err := l.receiver(func(string) (string, bool) { return "", false }, out)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rc.serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), out
}

// post sends body with headers h to url and returns the answer.
func post(t *testing.T, client *http.Client, url string, h http.Header, body []byte) (status int, answer string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// lineRe matches a human line: time, path, id, type, verification, size,
// answer.
var lineRe = regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3}  (.+?)  (.+?)  (\S+)  (verified|NOT VERIFIED: .+)  (\d+ B|\? B)  -> (\d{3})( \(.+\))?$`)

func TestListenHuman(t *testing.T) {
	t.Parallel()
	secretText := testSecret(1)
	secret := parseSecret(t, secretText)
	other := parseSecret(t, testSecret(50))
	url, out := startListen(t, listenFlags{secretFiles: []string{secretFile(t, secretText)}, status: http.StatusOK})
	client := &http.Client{Timeout: 10 * time.Second}
	body := []byte(`{"type":"order.fulfilled","data":{"order_id":"ord_1"}}`)
	now := time.Now()

	cases := []struct {
		name     string
		path     string
		h        http.Header
		body     []byte
		status   int
		answer   string // in the answer's body
		wantLine string // regexp of the whole line after the time
	}{
		{"verified", "/hooks", stdwebhooks.Headers("msg_1", now, body, secret), body,
			200, "OK", `/hooks  msg_1  order.fulfilled  verified  54 B  -> 200`},
		{"repeat", "/hooks", stdwebhooks.Headers("msg_1", now, body, secret), body,
			200, "OK", `/hooks  msg_1 \(repeat 2\)  order.fulfilled  verified  54 B  -> 200`},
		{"repeat, signed again later", "/", stdwebhooks.Headers("msg_1", now.Add(time.Second), body, secret), body,
			200, "OK", `/  msg_1 \(repeat 3\)  order.fulfilled  verified  54 B  -> 200`},
		{"another message", "/", stdwebhooks.Headers("msg_2", now, []byte(`[1]`), secret), []byte(`[1]`),
			200, "OK", `/  msg_2  -  verified  3 B  -> 200`},
		{"wrong secret", "/", stdwebhooks.Headers("msg_3", now, body, other), body,
			401, "webhook verification failed: no signature matches", `/  msg_3  order.fulfilled  NOT VERIFIED: no signature matches  54 B  -> 401`},
		{"tampered body", "/", stdwebhooks.Headers("msg_3", now, body, secret), []byte(`{"type":"order.refunded"}`),
			401, "no signature matches", `/  msg_3  order.refunded  NOT VERIFIED: no signature matches  25 B  -> 401`},
		{"too old", "/", stdwebhooks.Headers("msg_4", now.Add(-10*time.Minute), body, secret), body,
			401, "old, more than the tolerance of 5m0s", `/  msg_4  order.fulfilled  NOT VERIFIED: webhook-timestamp \d+ is 10m[01]s old, more than the tolerance of 5m0s  54 B  -> 401`},
		{"unsigned", "/", http.Header{}, body,
			401, "missing webhook-id header", `/  -  order.fulfilled  NOT VERIFIED: missing webhook-id header  54 B  -> 401`},
		{"id with a tab and a space", "/", http.Header{"Webhook-Id": {"msg\t x"}}, nil,
			401, "", `/  "msg\\t x"  -  NOT VERIFIED: webhook-id holds a character other than printable ASCII  0 B  -> 401`},
		{"body over 1 MiB", "/", stdwebhooks.Headers("msg_5", now, nil, secret), make([]byte, 1<<20+1),
			413, "body over 1 MiB", `/  msg_5  -  NOT VERIFIED: body over 1 MiB  1048577 B  -> 413`},
		{"body of 1 MiB", "/", stdwebhooks.Headers("msg_6", now, make([]byte, 1<<20), secret), make([]byte, 1<<20),
			200, "OK", `/  msg_6  -  verified  1048576 B  -> 200`},
	}
	// One after the other: the lines and the repeat counts follow the order.
	for i, c := range cases {
		status, answer := post(t, client, url+c.path, c.h, c.body)
		if status != c.status || !strings.Contains(answer, c.answer) {
			t.Errorf("%s: answered %d %q, want %d containing %q", c.name, status, answer, c.status, c.answer)
		}
		lines := out.waitLines(t, i+1)
		line := lines[i]
		if !lineRe.MatchString(line) || !regexp.MustCompile(`^\S+  `+c.wantLine+`$`).MatchString(line) {
			t.Errorf("%s: line\n%s\nwant\n<time>  %s", c.name, line, c.wantLine)
		}
	}
	if len(out.lines()) != len(cases) {
		t.Errorf("%d lines for %d requests", len(out.lines()), len(cases))
	}

	// Not a POST.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/favicon.ico", http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != http.MethodPost {
		t.Errorf("GET answered %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if line := out.waitLines(t, len(cases)+1)[len(cases)]; !strings.HasSuffix(line, "  GET /favicon.ico  -  -  NOT VERIFIED: not a POST  0 B  -> 405") {
		t.Errorf("GET line: %s", line)
	}
}

// jsonLine is a --json line.
type jsonLine struct {
	Time      time.Time `json:"time"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	WebhookID string    `json:"webhook_id"`
	Type      string    `json:"type"`
	Size      int64     `json:"size"`
	Verified  bool      `json:"verified"`
	Reason    string    `json:"reason"`
	Attempt   int       `json:"attempt"`
	Repeat    bool      `json:"repeat"`
	Status    int       `json:"status"`
	Note      string    `json:"note"`
}

func decodeLine(t *testing.T, line string) jsonLine {
	t.Helper()
	var l jsonLine
	dec := json.NewDecoder(strings.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		t.Fatalf("line %s: %v", line, err)
	}
	return l
}

func TestListenFailFirstJSON(t *testing.T) {
	t.Parallel()
	secretText := testSecret(7)
	secret := parseSecret(t, secretText)
	url, out := startListen(t, listenFlags{
		secretFiles: []string{secretFile(t, secretText)},
		status:      http.StatusAccepted,
		failFirst:   2,
		json:        true,
	})
	client := &http.Client{Timeout: 10 * time.Second}
	body := []byte(`{"type":"fulfillment.requested"}`)
	deliver := func(id string) int {
		status, _ := post(t, client, url+"/outbox", stdwebhooks.Headers(id, time.Now(), body, secret), body)
		return status
	}
	type want struct {
		id      string
		status  int
		attempt int
		note    string
	}
	wants := []want{
		{"msg_a", 500, 1, "--fail-first 2"},
		{"msg_a", 500, 2, "--fail-first 2"},
		{"msg_b", 500, 1, "--fail-first 2"},
		{"msg_a", 202, 3, ""},
		{"msg_a", 202, 4, ""},
		{"msg_b", 500, 2, "--fail-first 2"},
		{"msg_b", 202, 3, ""},
	}
	start := time.Now()
	for i, w := range wants {
		if got := deliver(w.id); got != w.status {
			t.Errorf("delivery %d of %s answered %d, want %d", w.attempt, w.id, got, w.status)
		}
		l := decodeLine(t, out.waitLines(t, i+1)[i])
		wantLine := jsonLine{
			Time: l.Time, Method: "POST", Path: "/outbox", WebhookID: w.id, Type: "fulfillment.requested",
			Size: int64(len(body)), Verified: true, Attempt: w.attempt, Repeat: w.attempt > 1, Status: w.status, Note: w.note,
		}
		if l != wantLine {
			t.Errorf("line %d:\n got %+v\nwant %+v", i, l, wantLine)
		}
		if l.Time.Before(start.Add(-time.Second)) || l.Time.After(time.Now()) || l.Time.Location() != time.UTC {
			t.Errorf("line %d: time %v", i, l.Time)
		}
	}

	// A delivery that does not verify is not counted for its id.
	status, _ := post(t, client, url, stdwebhooks.Headers("msg_c", time.Now(), body, parseSecret(t, testSecret(8))), body)
	if status != http.StatusUnauthorized {
		t.Errorf("wrong secret answered %d", status)
	}
	l := decodeLine(t, out.waitLines(t, len(wants)+1)[len(wants)])
	if l.Verified || l.Attempt != 0 || l.Repeat || l.Status != 401 || l.Reason != "no signature matches" || l.WebhookID != "msg_c" {
		t.Errorf("unverified line: %+v", l)
	}
	if got := deliver("msg_c"); got != 500 {
		t.Errorf("first verified delivery of msg_c answered %d, want 500", got)
	}
}

func TestListenRotation(t *testing.T) {
	t.Parallel()
	oldText, newText := testSecret(10), testSecret(90)
	oldS, newS := parseSecret(t, oldText), parseSecret(t, newText)
	url, out := startListen(t, listenFlags{
		secretFiles: []string{secretFile(t, oldText), secretFile(t, newText)},
		status:      http.StatusNoContent,
	})
	client := &http.Client{Timeout: 10 * time.Second}
	body := []byte(`{"type":"order.created"}`)
	for i, secrets := range [][]stdwebhooks.Secret{{oldS}, {newS}, {oldS, newS}, {parseSecret(t, testSecret(200)), newS}} {
		if status, _ := post(t, client, url, stdwebhooks.Headers("msg_r", time.Now(), body, secrets...), body); status != http.StatusNoContent {
			t.Errorf("signed with secrets %d: answered %d", i, status)
		}
	}
	if status, _ := post(t, client, url, stdwebhooks.Headers("msg_r", time.Now(), body, parseSecret(t, testSecret(200))), body); status != http.StatusUnauthorized {
		t.Errorf("signed with neither: answered %d", status)
	}
	lines := out.waitLines(t, 5)
	if !strings.Contains(lines[3], "msg_r (repeat 4)") || !strings.HasSuffix(lines[3], "verified  24 B  -> 204") {
		t.Errorf("fourth line: %s", lines[3])
	}
}

func TestListenDelay(t *testing.T) {
	t.Parallel()
	secretText := testSecret(20)
	secret := parseSecret(t, secretText)
	const delay = 300 * time.Millisecond
	url, out := startListen(t, listenFlags{secretFiles: []string{secretFile(t, secretText)}, status: 200, delay: delay})
	body := []byte(`{}`)

	start := time.Now()
	status, _ := post(t, &http.Client{Timeout: 10 * time.Second}, url, stdwebhooks.Headers("msg_d", time.Now(), body, secret), body)
	if took := time.Since(start); status != 200 || took < delay {
		t.Errorf("answered %d after %s, want 200 after %s at least", status, took, delay)
	}

	// A sender that gives up first gets nothing, and the line says so.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = stdwebhooks.Headers("msg_e", time.Now(), body, secret)
	resp, err := (&http.Client{Timeout: 50 * time.Millisecond}).Do(req)
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("answered %d before the delay", resp.StatusCode)
	}
	line := out.waitLines(t, 2)[1]
	if !strings.HasSuffix(line, "  msg_e  -  verified  2 B  -> 200 (not sent: the client left or listen is stopping)") {
		t.Errorf("line of the abandoned delivery: %s", line)
	}
}

func TestSeenIDs(t *testing.T) {
	t.Parallel()
	s := newSeenIDs(2)
	for _, step := range []struct {
		id   string
		want int
	}{
		{"a", 1}, {"b", 1}, {"a", 2}, // a is now the most recent
		{"c", 1},           // forgets b
		{"a", 3}, {"b", 1}, // forgets c
		{"c", 1},
	} {
		if got := s.add(step.id); got != step.want {
			t.Fatalf("add(%s) = %d, want %d", step.id, got, step.want)
		}
	}
	if s.order.Len() != 2 || len(s.byID) != 2 {
		t.Fatalf("holds %d/%d ids, want 2", s.order.Len(), len(s.byID))
	}
}

func TestListenFlags(t *testing.T) {
	t.Parallel()
	good := testSecret(30)
	goodFile := secretFile(t, good)
	short := stdwebhooks.SecretPrefix + base64.StdEncoding.EncodeToString([]byte("short"))
	env := map[string]string{"GOOD": good + "\n", "RAW": strings.TrimPrefix(good, "whsec_"), "HEX": "whsec_" + strings.Repeat("ab", 24) + "!", "EMPTY": ""}
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }

	cases := []struct {
		name    string
		l       listenFlags
		secrets int
		wantErr string
	}{
		{"file", listenFlags{secretFiles: []string{goodFile}, status: 200}, 1, ""},
		{"env", listenFlags{secretEnvs: []string{"GOOD"}, status: 200}, 1, ""},
		{"several", listenFlags{secretFiles: []string{goodFile, goodFile}, secretEnvs: []string{"GOOD"}, status: 599, failFirst: 3, delay: time.Second}, 3, ""},
		{"none", listenFlags{status: 200}, 0, "no secret"},
		{"status 199", listenFlags{secretFiles: []string{goodFile}, status: 199}, 0, "--status 199: must be an HTTP status from 200 to 599"},
		{"status 600", listenFlags{secretFiles: []string{goodFile}, status: 600}, 0, "--status 600"},
		{"negative delay", listenFlags{secretFiles: []string{goodFile}, status: 200, delay: -time.Second}, 0, "--delay -1s: must not be negative"},
		{"negative fail-first", listenFlags{secretFiles: []string{goodFile}, status: 200, failFirst: -1}, 0, "--fail-first -1: must not be negative"},
		{"missing file", listenFlags{secretFiles: []string{filepath.Join(t.TempDir(), "nope")}, status: 200}, 0, "--secret-file: open"},
		{"short secret in file", listenFlags{secretFiles: []string{secretFile(t, short)}, status: 200}, 0, "at least 24 bytes"},
		{"unset env", listenFlags{secretEnvs: []string{"UNSET"}, status: 200}, 0, "--secret-env: environment variable UNSET is not set"},
		{"empty env", listenFlags{secretEnvs: []string{"EMPTY"}, status: 200}, 0, "EMPTY is not set"},
		{"env without prefix", listenFlags{secretEnvs: []string{"RAW"}, status: 200}, 1, ""},
		{"env not base64", listenFlags{secretEnvs: []string{"HEX"}, status: 200}, 0, "--secret-env HEX: stdwebhooks: a secret must be whsec_ followed by standard base64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rc, err := c.l.receiver(lookup, io.Discard)
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(rc.secrets) != c.secrets {
					t.Fatalf("%d secrets, want %d", len(rc.secrets), c.secrets)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, c.wantErr)
			}
			for _, secret := range []string{good, strings.TrimPrefix(good, "whsec_"), short} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("error quotes the secret: %v", err)
				}
			}
		})
	}
}

// TestListenCommand runs the command itself: flags, the address it prints,
// a delivery, and a clean stop.
func TestListenCommand(t *testing.T) {
	t.Parallel()
	secretText := testSecret(40)
	secret := parseSecret(t, secretText)

	root := newRootCmd()
	root.SetArgs([]string{"listen", "--addr", "127.0.0.1:0", "--secret-file", secretFile(t, secretText), "--json", "--status", "202"})
	out := &lockedBuffer{}
	errR, errW := io.Pipe()
	root.SetOut(out)
	root.SetErr(errW)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("listen: %v", err)
		}
		_ = errW.Close()
	}()

	first, err := bufio.NewReader(errR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, errR) }()
	m := regexp.MustCompile(`^listening on (http://127\.0\.0\.1:\d+) \(secrets: 1; answering 202, fail-first 0, delay 0s\); Ctrl-C stops\n$`).FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("first line on stderr: %q", first)
	}
	body := []byte(`{"type":"order.created"}`)
	if status, _ := post(t, &http.Client{Timeout: 10 * time.Second}, m[1]+"/x", stdwebhooks.Headers("msg_cmd", time.Now(), body, secret), body); status != 202 {
		t.Fatalf("answered %d", status)
	}
	l := decodeLine(t, out.waitLines(t, 1)[0])
	if !l.Verified || l.WebhookID != "msg_cmd" || l.Type != "order.created" || l.Path != "/x" || l.Status != 202 {
		t.Fatalf("line: %+v", l)
	}
}

func TestListenCommandNeedsSecret(t *testing.T) {
	t.Parallel()
	root := newRootCmd()
	root.SetArgs([]string{"listen", "--addr", "127.0.0.1:0"})
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	err := root.ExecuteContext(t.Context())
	if err == nil || !strings.Contains(err.Error(), "[secret-file secret-env] is required") {
		t.Fatalf("listen without a secret: %v", err)
	}
}

func TestShown(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"msg_1":            "msg_1",
		"order.créé":       "order.créé",
		"a b":              `"a b"`,
		"a\nb":             `"a\nb"`,
		"\x1b[31mred":      `"\x1b[31mred"`,
		"bad\xffutf8":      `"bad\xffutf8"`,
		"zero\u200bwidth":  `"zero\u200bwidth"`,
		"bidi\u202eswitch": `"bidi\u202eswitch"`,
	} {
		if got := shown(in); got != want {
			t.Errorf("shown(%q) = %s, want %s", in, got, want)
		}
	}
	if got := cut(strings.Repeat("é", 200), 255); got != strings.Repeat("é", 127)+"…" {
		t.Errorf("cut on a rune boundary: %q", got)
	}
}

func TestEventType(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"type":"order.created"}`:           "order.created",
		`{"data":{"type":"inner"}}`:          "",
		`{"Type":"order.created"}`:           "",
		`{"type":7}`:                         "",
		`{"type":"a","type":"b"}`:            "b",
		`[{"type":"order.created"}]`:         "",
		`{"type":"order.created"} trailing`:  "",
		`not json`:                           "",
		``:                                   "",
		`{"type":"order.created","x":[1,2]}`: "order.created",
	} {
		if got := eventType([]byte(body)); got != want {
			t.Errorf("eventType(%s) = %q, want %q", body, got, want)
		}
	}
}
