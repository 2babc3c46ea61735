package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/fulfillplatform/fulfillment/config"
	fulfillmentv1 "github.com/fulfillplatform/fulfillment/gen/fulfillment/v1"
)

// A token the service knows that holds no scope any command needs.
const svcWeakToken = "tok-weak-fulfillctl-0123456789"

// unknownID is an order (or subscription) id no service has.
const unknownID = "019a2b3c-4d5e-7f60-8a9b-0c1d2e3f4a5b"

// runAs runs the built binary against s with the token in tokenFile and
// returns its stdout, stderr and exit code.
func (s *service) runAs(t *testing.T, bin, tokenFile string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	saved := s.tokenFile
	s.tokenFile = tokenFile
	defer func() { s.tokenFile = saved }()
	return s.run(t, bin, args...)
}

// commandPaths lists the paths of every runnable command of fulfillctl but
// help, completion and the groups of commands (orders, redrive, …), e.g.
// "orders list".
func commandPaths() []string {
	var paths []string
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		if cmd.Runnable() && cmd.HasParent() && !cmd.HasSubCommands() && cmd.Name() != "help" && cmd.Name() != "completion" {
			paths = append(paths, strings.TrimPrefix(cmd.CommandPath(), "fulfillctl "))
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	return paths
}

// errorLine is the one style of every failure: exit 1, nothing on stdout,
// one line on stderr "fulfillctl: what failed: what to do", never a raw
// gRPC error.
var errorLine = regexp.MustCompile(`\Afulfillctl: [^\n]+\n\z`)

// emptyLine is the one style of every empty result.
var emptyLine = regexp.MustCompile(`\Ano [a-z][a-z -]* match( \([^\n]+\))?\n\z`)

// Every command fails in one style — refused for a missing scope, or for an
// unknown id, or for a flag — and every listing says "no … match" when
// empty; orders list and get print tables, and JSON with --json; watch
// --json prints each event's payload as an object.
func TestEveryCommandOneStyle(t *testing.T) {
	t.Parallel()
	s := startServiceWith(t, func(c *config.Config) {
		c.Auth.Tokens = append(c.Auth.Tokens, config.Token{Name: "weak", Secret: svcWeakToken,
			Scopes: []string{config.ScopeIngest}, Orgs: []string{config.AllOrgs}})
	})
	bin := buildCtl(t)
	dir := t.TempDir()
	weak := filepath.Join(dir, "weak-token")
	secret := filepath.Join(dir, "yolfi.secret")
	order := filepath.Join(dir, "order.json")
	for name, content := range map[string]string{
		weak:   svcWeakToken + "\n",
		secret: svcYolfiKey + "\n",
		order: `{"org_id": "org_a", "environment": "live", "merchant_order_id": "ctl-style-1", "lines": [{"sku": "pro",
			"kind": "license", "quantity": 1, "unit_price": {"currency": "USD", "minor_units": 500}}],
			"settlement": {"token": "USDT", "network": "TRON", "amount": "25.000000"}}`,
	} {
		if err := os.WriteFile(name, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hook := s.ingestURL + "/webhooks/" + svcEndpoint

	// Each command, run with the weak token: refused with the scope it
	// lacks and what to do. The commands that call no API fail on what
	// they are given instead.
	refused := map[string][]string{
		"orders create":        {"--file", order},
		"orders get":           {unknownID},
		"orders list":          nil,
		"orders start-payment": {unknownID, "--endpoint", svcEndpoint},
		"subscriptions list":   nil,
		"subscriptions get":    {unknownID},
		"subscriptions create": {"--org", svcOrg, "--provider", "yolfi", "--provider-subscription-id", "sub_1", "--customer-ref", "c1", "--plan", "pro"},
		"access check":         {"--org", svcOrg, "--customer-ref", "c1", "--plan", "pro"},
		"outbox list":          nil,
		"outbox get":           {"1"},
		"outbox retry":         {"1"},
		"outbox confirm":       {"1", "--note", "x"},
		"destinations list":    nil,
		"destinations disable": {"crm", "--reason", "maintenance"},
		"destinations enable":  {"crm"},
		"recon summary":        nil,
		"recon activity":       nil,
		"recon list":           nil,
		"recon get":            {"1"},
		"recon resolve":        {"1", "--resolution", "refunded", "--note", "x"},
		"events list":          nil,
		"events get":           {"1"},
		"events replay":        {"1"},
		"redrive plan":         {"--target", "events", "--org", svcOrg, "--state", "failed"},
		"redrive start":        {"--target", "events", "--org", svcOrg, "--state", "failed", "--yes"},
		"redrive get":          {"1"},
		"redrive list":         nil,
		"redrive cancel":       {"1"},
		"watch":                nil,
		"trigger":              {"payment", "--provider", "yolfi", "--url", hook, "--secret-file", secret, "--org", svcOrg, "--environment", "live"},
	}
	offline := map[string]struct {
		args []string
		want string
	}{
		"webhook send": {[]string{"--url", hook, "--secret-file", filepath.Join(dir, "missing")}, "fulfillctl: --secret-file: "},
		"listen":       {[]string{"--addr", "127.0.0.1:0", "--secret-env", "FULFILLCTL_STYLE_UNSET"}, "fulfillctl: "},
	}
	for _, path := range commandPaths() {
		args, api := refused[path]
		off, local := offline[path]
		switch {
		case api:
			stdout, stderr, code := s.runAs(t, bin, weak, append(strings.Fields(path), args...)...)
			if path == "watch" || path == "trigger" {
				// They say what they start, on stderr, before the service
				// answers: the error is the line after.
				if lines := strings.SplitAfter(stderr, "\n"); len(lines) == 3 {
					stderr = lines[1]
				}
			}
			if code != 1 || stdout != "" || !errorLine.MatchString(stderr) || strings.Contains(stderr, "rpc error") ||
				!strings.HasPrefix(stderr, `fulfillctl: PERMISSION_DENIED: token "weak" lacks the "`) ||
				!strings.HasSuffix(stderr, "; use a token with that scope and org (--token-file), or ask an admin for one\n") {
				t.Errorf("%s, with a token without the scope: exit %d, stdout %q, stderr %q", path, code, stdout, stderr)
			}
		case local:
			stdout, stderr, code := s.run(t, bin, append(strings.Fields(path), off.args...)...)
			if code != 1 || stdout != "" || !errorLine.MatchString(stderr) || !strings.HasPrefix(stderr, off.want) {
				t.Errorf("%s, given what cannot work: exit %d, stdout %q, stderr %q", path, code, stdout, stderr)
			}
		default:
			t.Errorf("%s: no case in this test; every command needs one", path)
		}
	}

	// Unknown ids, with a token that may ask: NOT_FOUND, in the same style.
	for _, args := range [][]string{{"orders", "get", unknownID}, {"subscriptions", "get", unknownID}, {"events", "replay", "999999"}} {
		stdout, stderr, code := s.run(t, bin, args...)
		if code != 1 || stdout != "" || !errorLine.MatchString(stderr) || !strings.HasPrefix(stderr, "fulfillctl: NOT_FOUND: ") ||
			strings.Contains(stderr, "rpc error") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	// A service that does not answer: what to check.
	stdout, stderr, code := s.run(t, bin, "--addr", "127.0.0.1:1", "orders", "list")
	if code != 1 || stdout != "" || !errorLine.MatchString(stderr) || !strings.HasPrefix(stderr, "fulfillctl: UNAVAILABLE: ") ||
		!strings.HasSuffix(stderr, "; check that fulfillmentd is running and reachable at 127.0.0.1:1 (--addr, $FULFILLCTL_ADDR)\n") {
		t.Errorf("orders list, no service: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	// An HTTP listener's address, an address with a scheme, an empty token
	// file: what is wrong, and what to do. They said "http2: frame too
	// large", "too many colons in address", and "no token: pass
	// --token-file FILE" with the file passed.
	emptyToken := filepath.Join(dir, "empty-token")
	if err := os.WriteFile(emptyToken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--addr", strings.TrimPrefix(s.ingestURL, "http://"), "orders", "list"},
			`^fulfillctl: UNAVAILABLE: .*http2: frame too large.*; \S+ answers HTTP/1\.1, not gRPC: is FULFILLCTL_ADDR \(--addr\) the gRPC address \(not the REST/HTTP one\)\?\n$`},
		{[]string{"--addr", "http://" + s.grpcAddr, "orders", "list"},
			`^fulfillctl: --addr "http://\S+": FULFILLCTL_ADDR \(--addr\) is host:port, without a scheme: use ` + regexp.QuoteMeta(s.grpcAddr) + `\n$`},
		{[]string{"--token-file", emptyToken, "orders", "list"},
			`^fulfillctl: the token file ` + regexp.QuoteMeta(emptyToken) + ` \(--token-file, \$FULFILLCTL_TOKEN_FILE\) is empty: write the bearer token in it\n$`},
	} {
		stdout, stderr, code := s.run(t, bin, c.args...)
		if code != 1 || stdout != "" || !errorLine.MatchString(stderr) || !regexp.MustCompile(c.want).MatchString(stderr) {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", c.args, code, stdout, stderr)
		}
	}

	// Every listing of an empty service: the one empty line, and exit 0.
	empty := map[string][]string{
		"orders list":        {"orders", "list"},
		"subscriptions list": {"subscriptions", "list"},
		"outbox list":        {"outbox", "list"},
		"destinations list":  {"destinations", "list"},
		"recon summary":      {"recon", "summary"},
		"recon list":         {"recon", "list"},
		"events list":        {"events", "list"},
		"redrive list":       {"redrive", "list"},
		"redrive plan":       {"redrive", "plan", "--target", "events", "--org", svcOrg, "--state", "failed"},
	}
	for what, args := range empty {
		stdout, stderr, code := s.run(t, bin, args...)
		last := stdout[strings.LastIndex(strings.TrimSuffix(stdout, "\n"), "\n")+1:] // plan says what it would do first
		if code != 0 || stderr != "" || !emptyLine.MatchString(last) || (what != "redrive plan" && last != stdout) {
			t.Errorf("%s on an empty service: exit %d, stdout %q, stderr %q", what, code, stdout, stderr)
		}
	}
	if out := s.ctlOK(t, "orders", "list", "--json"); fromJSON(t, out, &fulfillmentv1.ListOrdersResponse{}).GetOrders() != nil {
		t.Errorf("orders list --json on an empty service: %q", out)
	}

	// orders create, list and get: text, then JSON.
	out, errOut, err := s.ctl(t, "orders", "create", "--file", order)
	if err != nil || !regexp.MustCompile(`\Aorder (\S+) created\n\z`).MatchString(errOut) {
		t.Fatalf("orders create: %v, stderr %q", err, errOut)
	}
	wantMatches(t, "orders create", out, `(?m)^state +pending_payment$`, `(?m)^merchant order +ctl-style-1$`,
		`(?m)^total +500 USD minor units$`, `(?m)^settlement +25(\.0+)? USDT/TRON \(tolerance 0\)$`,
		`(?m)^lines \(1\):\nLINE +SKU +KIND +QUANTITY +UNIT PRICE +ACCOUNT +DESTINATION +PLAN\n0 +pro +license +1 +500 USD +- +- +-\n\z`)
	created := fromJSON(t, s.ctlOK(t, "orders", "create", "--file", order, "--json"), &fulfillmentv1.CreateOrderResponse{})
	id := created.GetOrder().GetId()
	if created.GetCreated() || id == "" {
		t.Fatalf("orders create again --json: %v, want the same order, not created", created)
	}
	s.sendPayment(t, "ctl-style-1", "inv_style", "pay_style")
	waitUntil(t, "the order fulfilled", func() bool {
		o, err := s.client.GetOrder(admin(t), &fulfillmentv1.GetOrderRequest{OrderId: id})
		return err == nil && o.GetOrder().GetState() == "fulfilled"
	})
	lines := strings.Split(strings.TrimSuffix(s.ctlOK(t, "orders", "list"), "\n"), "\n")
	if len(lines) != 2 || !regexp.MustCompile(`^ID +STATE +ORG +ENV +MERCHANT ORDER +TOTAL \(MINOR UNITS\) +LINES +CREATED$`).MatchString(lines[0]) ||
		!regexp.MustCompile(`^`+id+` +fulfilled +org_a +live +ctl-style-1 +500 USD +1 +`+timeRE+`$`).MatchString(lines[1]) {
		t.Errorf("orders list:\n%s", strings.Join(lines, "\n"))
	}
	if list := fromJSON(t, s.ctlOK(t, "orders", "list", "--json"), &fulfillmentv1.ListOrdersResponse{}); len(list.GetOrders()) != 1 || list.GetOrders()[0].GetId() != id {
		t.Errorf("orders list --json: %v", list)
	}
	if out := s.ctlOK(t, "orders", "list", "--state", "refunded"); !emptyLine.MatchString(out) {
		t.Errorf("orders list of no order: %q", out)
	}
	wantMatches(t, "orders get", s.ctlOK(t, "orders", "get", id),
		`\Aid +`+id+`\n`, `(?m)^state +fulfilled$`, `(?m)^org +org_a$`, `(?m)^environment +live$`,
		`(?m)^payment attempts \(1\):\nPROVIDER +REF +STATE +AMOUNT +CREATED\nyolfi +\S+ +confirmed +25(\.0+)? USDT/TRON +`+timeRE+`$`,
		`(?m)^payments started \(0\):$`,
		`(?m)^events \(1\):\nEVENT +TYPE +RECEIVED +DECISION\nevt_\S+ +payment\.confirmed +`+timeRE+` +fulfilled$`,
		`(?m)^entitlements \(1\):\nID +KIND +SKU +UNIT +GRANTED +REVOKED +REVOKED BECAUSE\n\S+ +license +pro +1 +`+timeRE+` +- +-$`,
		`(?m)^ledger entries \(0\):$`, `(?m)^deliveries \(0\):\n\z`)
	for _, flag := range []string{"--json", "-o=json"} {
		got := fromJSON(t, s.ctlOK(t, "orders", "get", id, flag), &fulfillmentv1.Order{})
		if got.GetId() != id || got.GetState() != "fulfilled" || len(got.GetHistory().GetEntitlements()) != 1 {
			t.Errorf("orders get %s: %v", flag, got)
		}
	}

	// watch --json: the payload is an object, the order's.
	w := s.watch(t, s.grpcAddr, "--json")
	line := w.waitEvents(t, 1)[0]
	if err := w.stop(); err != nil {
		t.Fatalf("watch interrupted: %v", err)
	}
	var ev struct {
		OrderID string `json:"order_id"`
		Payload struct {
			Type string `json:"type"`
			Data struct {
				OrderID string `json:"order_id"`
			} `json:"data"`
		} `json:"payload"`
	}
	if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.OrderID != id || ev.Payload.Type != "order.fulfilled" || ev.Payload.Data.OrderID != id {
		t.Errorf("watch --json printed %s (%v): want the payload as an object, of order %s", line, err, id)
	}
}
