package server

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit is a listener that holds at most max connections open at once.
// Past it, a new connection takes the place of an idle keep-alive one, or
// else of the oldest connection that has not yet sent a whole request's
// headers (sent nothing, or is still in its TLS handshake or its headers);
// the one it replaces is closed (a keep-alive client connects
// again, as after http.idle_timeout). When every connection is busy with a
// request, the new one is closed at once, and a WARN line says so. Clients
// holding connections open then cannot take every file the process may
// open, and neither idle nor silent ones keep a probe or a new client
// waiting: a client that connects sends its request headers at once,
// before as many newer connections come. Its track is the HTTP server's ConnState:
// it tells which connections are idle, and which have sent nothing yet.
type connLimit struct {
	net.Listener
	max  int
	log  *slog.Logger
	mu   sync.Mutex
	open map[*limitedConn]connState
}

// connState is what connLimit knows of an open connection.
type connState struct {
	state http.ConnState
	since time.Time // admitted, for a new one
}

// limitConnections returns l holding at most limit connections open, as
// srv follows them: the one way an HTTP listener is capped
// (http.max_connections). TLS, if any, goes on top of it.
func limitConnections(srv *http.Server, l net.Listener, limit int, log *slog.Logger) net.Listener {
	cl := &connLimit{Listener: l, max: limit, log: log, open: map[*limitedConn]connState{}}
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
		// Rate-limited by cause, as every WARN line is.
		l.log.Warn("connection refused: every connection the listener may hold is busy with a request (http.max_connections)",
			"listener", l.Addr().String(), "max_connections", l.max)
	}
}

// admit counts c in, making room when the listener holds max already by
// closing an idle connection, else the oldest still new (no whole request
// headers yet); false
// when every connection is busy with a request.
func (l *connLimit) admit(c *limitedConn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.open) >= l.max {
		var room *limitedConn
		var oldest time.Time
		for oc, st := range l.open {
			if st.state == http.StateIdle {
				room = oc
				break
			}
			if st.state == http.StateNew && (room == nil || st.since.Before(oldest)) {
				room, oldest = oc, st.since
			}
		}
		if room == nil {
			return false
		}
		delete(l.open, room)
		room.once.Do(func() { _ = room.Conn.Close() })
	}
	l.open[c] = connState{http.StateNew, time.Now()}
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
	prev, open := l.open[c]
	if !open {
		return // closed, or closed to make room
	}
	switch st {
	case http.StateClosed, http.StateHijacked:
		delete(l.open, c)
	default:
		l.open[c] = connState{st, prev.since}
	}
}
