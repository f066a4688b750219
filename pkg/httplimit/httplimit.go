// Package httplimit holds the limits of the runner service's HTTP
// listeners, in one place (docs/DEPLOYMENT.md, "Listener limits"): MCP over
// HTTP, the approval page, and the bridges' endpoints for Slack and GitHub.
// Each connection is one of the service's descriptors, and what a client
// can hold of them before and after it authenticates is bounded here.
package httplimit

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// Limits bound what a client of one listener can hold of the service
// (docs/adr/0047-mcp-http-limits-tls-origin-body.md).
type Limits struct {
	// Header is how long a request's headers may take to arrive.
	Header time.Duration
	// Body is how long a request's body may take to arrive, from its
	// headers; a body not read to its end by then (a stalled upload, or
	// the rest of a refused request's body) closes the connection. The
	// answer's own time is not bounded here: a wait for a decision, or a
	// session's stream, may last.
	Body time.Duration
	// Write, when not 0, bounds the whole answer from the end of the
	// request's headers: for listeners whose answers are short.
	Write time.Duration
	// Idle is how long a kept-alive connection may wait for its next
	// request.
	Idle time.Duration
	// Conns caps the connections open at once; past it, new ones wait in
	// the kernel's backlog until one closes.
	Conns int
	// PerAddr caps the connections open at once from one remote address:
	// past it, a new one from that address is closed at once, so that
	// one client cannot take every connection Conns allows.
	PerAddr int
}

// The service's listeners. A client behind a proxy or a gateway shares
// the proxy's address, so PerAddr leaves a proxy most of Conns.
var (
	// MCP is MCP over HTTP: no write deadline, since a wait for a
	// decision, or a session's stream, may last.
	MCP = Limits{Header: 5 * time.Second, Body: 30 * time.Second, Idle: 60 * time.Second, Conns: 512, PerAddr: 128}
	// Page is the approval page, behind its TLS termination.
	Page = Limits{Header: 10 * time.Second, Body: 30 * time.Second, Write: 60 * time.Second, Idle: 60 * time.Second, Conns: 256, PerAddr: 192}
	// Bridges is the endpoint of Slack's interactions and GitHub's
	// webhooks: each answer is short.
	Bridges = Limits{Header: 10 * time.Second, Body: 30 * time.Second, Write: 30 * time.Second, Idle: 60 * time.Second, Conns: 256, PerAddr: 192}
)

// Bound applies l to srv and ln: srv's header, write and idle timeouts and
// header size, a body deadline around srv's handler, and ln capped at l.Conns.
// It returns the listener to serve.
func (l Limits) Bound(srv *http.Server, ln net.Listener) net.Listener {
	srv.ReadHeaderTimeout = l.Header
	srv.WriteTimeout = l.Write
	srv.IdleTimeout = l.Idle
	srv.MaxHeaderBytes = 64 << 10
	srv.Handler = bodyWithin(srv.Handler, l.Body)
	if l.PerAddr > 0 {
		ln = &perAddr{Listener: ln, max: l.PerAddr, open: map[string]int{}}
	}
	return netutil.LimitListener(ln, l.Conns)
}

// perAddr closes a connection from an address that already holds max.
type perAddr struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[string]int
}

func (p *perAddr) Accept() (net.Conn, error) {
	for {
		c, err := p.Listener.Accept()
		if err != nil {
			return nil, err
		}
		host, _, err := net.SplitHostPort(c.RemoteAddr().String())
		if err != nil {
			host = c.RemoteAddr().String()
		}
		p.mu.Lock()
		if p.open[host] >= p.max {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.open[host]++
		p.mu.Unlock()
		return &addrConn{Conn: c, release: func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			if p.open[host]--; p.open[host] == 0 {
				delete(p.open, host)
			}
		}}, nil
	}
}

// addrConn releases its address's count once, when it closes.
type addrConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *addrConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// bodyWithin has each request's body arrive within d of its headers: the
// connection's read deadline, lifted once the body has been read to its
// end, so that the answer may take as long as it needs and the server can
// tell when the client goes away. A request with no body is not bounded
// further. The deadline stands while the server discards what a handler
// left unread (a refused request's body), so that discard cannot stall.
func bodyWithin(next http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body == nil || r.Body == http.NoBody || d <= 0 {
			next.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		if err := rc.SetReadDeadline(time.Now().Add(d)); err != nil {
			next.ServeHTTP(w, r)
			return
		}
		r.Body = &liftOnEOF{ReadCloser: r.Body, rc: rc}
		next.ServeHTTP(w, r)
	})
}

// liftOnEOF lifts the connection's read deadline once its body has been
// read to the end.
type liftOnEOF struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *liftOnEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if errors.Is(err, io.EOF) && !b.done {
		b.done = true
		b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}
