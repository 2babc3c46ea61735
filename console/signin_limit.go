package console

import (
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Failed sign-ins are limited per client address: signInBurst in a row,
// then one every signInEvery. While a client is limited every sign-in from
// it is refused, a right token too, so that the limit says nothing about
// the tokens it tries. API tokens are long random strings; the limit keeps
// a guesser from even trying many, and keeps its noise out of the audit.
const (
	signInBurst = 5
	signInEvery = 12 * time.Second
	// signInClients bounds the clients remembered. Past it, the clients
	// whose limit has refilled (who hold nothing back) are forgotten; if
	// every one is still limited, each further client shares one limit,
	// overflowClient's, until some refill. A flood of addresses neither
	// grows the memory nor wipes the limits of the clients in it.
	signInClients  = 10_000
	overflowClient = "(any other client)"
)

type signInLimit struct {
	mu      sync.Mutex
	clients map[string]*rate.Limiter
	// trying counts each client's sign-ins begun and not yet ended: each
	// may fail, so each holds one of the client's remaining attempts, and
	// sign-ins sent at once cannot all pass before the first is counted.
	trying map[string]int
	// pruned is when the full memory was last searched for refilled
	// clients: at most once a signInEvery, so that a flood of newcomers
	// does not scan the whole memory with every failed sign-in.
	pruned time.Time
}

func newSignInLimit() *signInLimit {
	return &signInLimit{clients: map[string]*rate.Limiter{}, trying: map[string]int{}}
}

// clientOf is the client a request came from: an IPv4 address, or an
// IPv6 address's /64, which one host usually holds whole, so that
// rotating addresses within it gains no fresh sign-in attempts. It is the
// request's peer, unless that is one of proxies: then X-Forwarded-For is
// read from its end, each proxy having appended the peer it saw, and the
// first address that is not a trusted proxy is the client. Entries before
// that one are whatever the client wrote, and are never read; from any
// other peer the header is ignored, as a client could name any address in
// it.
func clientOf(r *http.Request, proxies []netip.Prefix) string {
	a, ok := peerAddr(r)
	if !ok { // not an address and port: as it is, without a port
		if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
			return host
		}
		return r.RemoteAddr
	}
	if trusted(a, proxies) {
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break // not an address: the nearest trusted hop stands
			}
			a = hop.WithZone("").Unmap()
			if !trusted(a, proxies) {
				break
			}
		}
	}
	if a.Is6() {
		return netip.PrefixFrom(a, 64).Masked().String()
	}
	return a.String()
}

// fromTrusted reports whether r's peer is one of proxies.
func fromTrusted(r *http.Request, proxies []netip.Prefix) bool {
	a, ok := peerAddr(r)
	return ok && trusted(a, proxies)
}

// peerAddr is the address r came from (its zone dropped, IPv4 unmapped);
// false when RemoteAddr holds none.
func peerAddr(r *http.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().WithZone("").Unmap(), true
}

// trusted reports whether a is in one of proxies.
func trusted(a netip.Addr, proxies []netip.Prefix) bool {
	for _, p := range proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// begin starts a sign-in of client: how long it must wait first (and nil),
// or 0 and the function that ends the sign-in, saying whether it failed,
// which must be called.
func (l *signInLimit) begin(client string, now time.Time) (wait time.Duration, end func(failed bool, at time.Time)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := l.waitLocked(client, now); d > 0 {
		return d, nil
	}
	l.trying[client]++
	return 0, func(failed bool, at time.Time) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.trying[client]--
		if l.trying[client] <= 0 {
			delete(l.trying, client)
		}
		if failed {
			l.failedLocked(client, at)
		}
	}
}

// wait says how long client must wait before its next sign-in; 0 when it
// may sign in now.
func (l *signInLimit) wait(client string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waitLocked(client, now)
}

func (l *signInLimit) waitLocked(client string, now time.Time) time.Duration {
	tokens := float64(signInBurst)
	if lim, ok := l.limiter(client); ok {
		tokens = lim.TokensAt(now)
	}
	short := float64(l.trying[client]) + 1 - tokens // attempts wanted past those left
	if short <= 0 {
		return 0
	}
	return max(time.Duration(short*float64(signInEvery)), time.Second)
}

// failed counts a failed sign-in of client.
func (l *signInLimit) failed(client string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failedLocked(client, now)
}

func (l *signInLimit) failedLocked(client string, now time.Time) {
	lim, ok := l.clients[client]
	if !ok {
		if len(l.clients) >= signInClients && now.Sub(l.pruned) >= signInEvery {
			l.pruned = now
			for c, lim := range l.clients {
				if lim.TokensAt(now) >= signInBurst {
					delete(l.clients, c)
				}
			}
		}
		if len(l.clients) >= signInClients {
			client = overflowClient
			lim, ok = l.clients[client]
		}
		if !ok {
			lim = rate.NewLimiter(rate.Every(signInEvery), signInBurst)
			l.clients[client] = lim
		}
	}
	lim.AllowN(now, 1)
}

// limiter is client's limiter, or the overflow's when client is not
// remembered and the memory is full.
func (l *signInLimit) limiter(client string) (*rate.Limiter, bool) {
	if lim, ok := l.clients[client]; ok {
		return lim, true
	}
	if len(l.clients) >= signInClients {
		lim, ok := l.clients[overflowClient]
		return lim, ok
	}
	return nil, false
}
