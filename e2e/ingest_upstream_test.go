package e2e_test

import (
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fulfillplatform/fulfillment/config"
	"github.com/fulfillplatform/fulfillment/ingest/yolfi"
	"github.com/fulfillplatform/fulfillment/rig/daemon"
)

// silentProxy forwards TCP connections to target (retarget moves it). cut makes every
// connection open at that moment go silent, both ways, without closing
// it — as when the far host vanishes, or a NAT or load balancer drops the
// flow, and no reset ever comes back. Connections made afterwards are
// forwarded again: the service is reachable, only the old path is dead.
type silentProxy struct {
	lis    net.Listener
	target string
	down   atomic.Bool // new connections are closed at once, as by a host that refuses them
	hang   atomic.Bool // new connections are silent from the start, as to a host that stopped answering
	mu     sync.Mutex
	open   []*atomic.Bool // one per connection: silenced
	conns  []net.Conn
	closed bool
}

func newSilentProxy(t *testing.T, target string) *silentProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &silentProxy{lis: lis, target: target}
	var conns sync.WaitGroup
	t.Cleanup(func() {
		_ = lis.Close()
		p.mu.Lock()
		p.closed = true
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		conns.Wait()
	})
	go func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			if p.down.Load() {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			to := p.target
			p.mu.Unlock()
			out, err := net.Dial("tcp", to)
			if err != nil {
				_ = in.Close()
				continue
			}
			silent := &atomic.Bool{}
			silent.Store(p.hang.Load())
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				_, _ = in.Close(), out.Close()
				return
			}
			p.open = append(p.open, silent)
			p.conns = append(p.conns, in, out)
			conns.Add(2)
			p.mu.Unlock()
			pipe := func(dst, src net.Conn) {
				defer conns.Done()
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 && !silent.Load() {
						if _, werr := dst.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						_ = dst.Close()
						return
					}
				}
			}
			go pipe(out, in)
			go pipe(in, out)
		}
	}()
	return p
}

func (p *silentProxy) addr() string { return p.lis.Addr().String() }

// retarget forwards new connections to target, as a name or a virtual
// address moved to another host does; the open ones stay where they are.
func (p *silentProxy) retarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
}

// drop closes every connection open now, as a service that stops does.
func (p *silentProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// cut silences every connection open now.
func (p *silentProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.open {
		s.Store(true)
	}
}

// freeze silences every connection, open now or made later, until thaw:
// the far host hangs (a stopped process, a full disk) without refusing or
// resetting anything.
func (p *silentProxy) freeze() {
	p.hang.Store(true)
	p.cut()
}

// thaw forwards new connections again; the ones frozen stay silent.
func (p *silentProxy) thaw() { p.hang.Store(false) }

// A gateway process (fulfillmentd ingest) whose connection to the service
// went silent — no answer, no reset — while the service stays reachable
// on a new connection: webhooks are answered 503 for a while (the provider
// retries), and the gateway finds out that the connection is dead and
// connects again within seconds, so that webhooks are stored and answered
// 200 again. It used to keep the dead connection for as long as the
// kernel did (with requests in flight, about a quarter of an hour; here,
// for good), answering every webhook 503 after its ingest.timeout.
func TestIngestProcessUpstreamGoesSilent(t *testing.T) {
	t.Parallel()
	s, proxy, via := gatewayBehindProxy(t, "silent")

	proxy.cut()
	ev := event(yolfi.TypeInvoiceCreated, "silent-1", "inv_silent_1")
	took := sendUntilStored(t, via, ev, 60*time.Second, "its upstream connection went silent, the service reachable all along")
	t.Logf("stored again %v after the connection went silent", took.Round(100*time.Millisecond))
	if n := s.count(t, "SELECT count(*) FROM inbox_events WHERE event_id = $1", ev.ID); n != 1 {
		t.Errorf("%d inbox rows for the webhook acknowledged, want 1", n)
	}
}

// A gateway process (fulfillmentd ingest) whose service was unreachable
// for a while (here 20 s: connections refused) stores webhooks again
// within seconds of the service's return. Between its attempts to
// connect, gRPC waits longer each time, by default up to two minutes: the
// gateway answered 503 for 7 s more after a 20-s outage, and could for two
// minutes after a long one, while a provider that retries a
// few times over minutes (Yolfi: three attempts in four) gives up.
func TestIngestProcessUpstreamBackAfterAnOutage(t *testing.T) {
	t.Parallel()
	_, proxy, via := gatewayBehindProxy(t, "outage")

	proxy.down.Store(true)
	proxy.drop()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
		if code := via.send(t, liveEP, liveSecret, event(yolfi.TypeInvoiceCreated, "outage-x", "")); code != http.StatusServiceUnavailable {
			t.Fatalf("webhook answered %d while the service is unreachable, want 503 (the provider retries)", code)
		}
	}
	proxy.down.Store(false)
	took := sendUntilStored(t, via, event(yolfi.TypeInvoiceCreated, "outage-1", "inv_outage_1"), 30*time.Second,
		"the service is reachable again")
	t.Logf("stored again %v after the service was reachable again", took.Round(100*time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("stored again %v after the service was reachable again, want within 5 s", took.Round(100*time.Millisecond))
	}
}

// gatewayBehindProxy runs a service, and a gateway process (2 s to store
// a webhook) reaching it through a silentProxy, and stores one webhook
// through them (tag names it): the service, the proxy, and the service as
// the gateway's webhooks reach it.
func gatewayBehindProxy(t *testing.T, tag string) (s *stack, proxy *silentProxy, via *stack) {
	t.Helper()
	s = startStack(t)
	proxy = newSilentProxy(t, s.grpcAddr)
	via = startIngestProcess(t, s, proxy.addr(), 2*time.Second)
	via.sendOK(t, event(yolfi.TypeInvoiceCreated, tag+"-0", "inv_"+tag+"_0"))
	return s, proxy, via
}

// sendUntilStored sends ev through via until it is answered 200, every
// other answer a 503 (the provider retries), for at most within; it
// returns how long that took. what says what kept it from being stored.
func sendUntilStored(t *testing.T, via *stack, ev yolfi.Payload, within time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		code := via.send(t, liveEP, liveSecret, ev)
		if code == http.StatusOK {
			return time.Since(start)
		}
		if code != http.StatusServiceUnavailable {
			t.Fatalf("webhook answered %d while %s, want 503 (the provider retries)", code, what)
		}
		if time.Since(start) > within {
			t.Fatalf("the gateway still answers 503 %v after %s", time.Since(start).Round(time.Second), what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startIngestProcess runs fulfillmentd ingest (the webhook gateway alone)
// forwarding to the service of s at upstream, storing each webhook within
// timeout (ingest.timeout), and returns s as seen through it: webhooks go
// to the process, counts to s's database.
func startIngestProcess(t *testing.T, s *stack, upstream string, timeout time.Duration) *stack {
	t.Helper()
	bin := procPlainBuild.binary(t)

	addrs, err := daemon.FreeAddrs(1)
	if err != nil {
		t.Fatal(err)
	}
	const tokenEnv, secretEnv = "E2E_UPSTREAM_TOKEN", "E2E_YOLFI_LIVE_SECRET"
	cfg := &config.Config{
		Listen:    config.Listen{Ingest: addrs[0]},
		Log:       config.Log{Level: "info"},
		Endpoints: []config.Endpoint{daemon.YolfiEndpoint(liveEP, orgA, "live", secretEnv)},
		Ingest: config.Ingest{Timeout: timeout,
			Upstream: config.Upstream{Addr: upstream, TokenEnv: tokenEnv}},
	}
	cfgPath := filepath.Join(t.TempDir(), "ingest.yaml")
	if err := daemon.WriteConfig(cfgPath, cfg); err != nil {
		t.Fatal(err)
	}
	out := &daemon.Buffer{}
	child, err := daemon.Start(bin, []string{"ingest", "--config", cfgPath},
		daemon.ChildEnv(tokenEnv+"="+ingestToken, secretEnv+"="+liveSecret), out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := child.Stop(15 * time.Second); err != nil {
			t.Errorf("fulfillmentd ingest: %v", err)
		}
		if t.Failed() {
			t.Logf("fulfillmentd ingest output:\n%s", out.Tail(16<<10))
		}
	})
	gateway := "http://" + addrs[0]
	waitFor(t, "fulfillmentd ingest to serve", func() bool {
		resp, err := http.Get(gateway + "/healthz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return &stack{ingestURL: gateway, client: s.client, db: s.db}
}
