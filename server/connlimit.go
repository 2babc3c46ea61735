package server

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
)

// connLimit is a listener that holds at most max connections open at once.
// Past it, a new connection takes the place of an idle keep-alive one,
// which is closed (its client connects again, as after http.idle_timeout),
// or is closed at once when none is idle. Clients holding connections open
// then cannot take every file the process may open, and idle ones never
// keep a probe or a new client waiting. Its track is the HTTP server's
// ConnState: it tells which connections are idle.
type connLimit struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[*limitedConn]http.ConnState
}

// limitConnections returns l holding at most limit connections open, as
// srv follows them: the one way an HTTP listener is capped
// (http.max_connections). TLS, if any, goes on top of it.
func limitConnections(srv *http.Server, l net.Listener, limit int) net.Listener {
	cl := &connLimit{Listener: l, max: limit, open: map[*limitedConn]http.ConnState{}}
	srv.ConnState = cl.track
	return cl
}

// limitedConn leaves its listener's count when it closes.
type limitedConn struct {
	net.Conn
	l    *connLimit
	once sync.Once
}

func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.open, c)
	c.l.mu.Unlock()
	var err error
	c.once.Do(func() { err = c.Conn.Close() })
	return err
}

// Accept returns the next connection admitted.
func (l *connLimit) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		c := &limitedConn{Conn: conn, l: l}
		if l.admit(c) {
			return c, nil
		}
		_ = conn.Close()
	}
}

// admit counts c in, making room by closing an idle connection when the
// listener holds max already; false when none is idle.
func (l *connLimit) admit(c *limitedConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.open) >= l.max {
		var idle *limitedConn
		for oc, st := range l.open {
			if st == http.StateIdle {
				idle = oc
				break
			}
		}
		if idle == nil {
			return false
		}
		delete(l.open, idle)
		idle.once.Do(func() { _ = idle.Conn.Close() })
	}
	l.open[c] = http.StateNew
	return true
}

// track follows the state of each connection (http.Server.ConnState).
func (l *connLimit) track(conn net.Conn, st http.ConnState) {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	c, ok := conn.(*limitedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, open := l.open[c]; !open {
		return // closed, or closed to make room
	}
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(l.open, c)
	default:
		l.open[c] = st
	}
}
