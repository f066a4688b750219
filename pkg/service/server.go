package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Handler does the work of one call. It returns the command's exit status;
// everything it prints goes to the descriptors the client handed over.
//
// ctx is done once the service stops (Serve's context is done), after it
// has stopped accepting: a call that only waits (status --wait) ends then,
// and its client, asking again, finds no service (or, socket-activated, the
// one that replaces it). A call that runs a program ignores ctx: Serve
// waits for it, so a stop never cuts a run short.
type Handler interface {
	Serve(ctx context.Context, c *Call) int
}

// Call is one client's request as the handler sees it.
type Call struct {
	Peer    Peer
	Request *Request
	// Files are the descriptors attached to the request, by name.
	Files map[string]*os.File

	conn *Conn
	// sendMu orders the call's own sends (results, questions, the exit
	// status); stalled is set once one timed out (see Output).
	sendMu  sync.Mutex
	stalled bool
	mu      sync.Mutex // one Need in flight at a time
	// running is set once Signals is called: a program runs, and the
	// client can no longer be asked anything.
	running bool
	// The client's messages after its request, as read: answers to
	// Needs, and relayed signals.
	answers chan reply
	signals chan os.Signal
	gone    chan struct{} // closed once the client's end is closed
}

// reply is one message the client sent after its request: an answer to a
// Need, or a message that could not be read.
type reply struct {
	b     []byte
	files []*os.File
	err   error
}

func newCall(peer Peer, req *Request, conn *Conn) *Call {
	return &Call{
		Peer: peer, Request: req, Files: map[string]*os.File{}, conn: conn,
		answers: make(chan reply, 1),
		signals: make(chan os.Signal, 4),
		gone:    make(chan struct{}),
	}
}

// read reads what the client sends until its end of the connection is
// closed (or ours is, once the call has ended), then closes c.gone. It is
// the connection's only reader once the request is read: a signal goes to
// Signals' channel, anything else to the Need waiting for it, and a
// message nobody waits for is dropped.
func (c *Call) read() {
	defer close(c.gone)
	for {
		b, files, err := c.conn.Recv()
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				return // EOF, or a socket that can no longer be read
			}
			c.deliver(reply{err: err}) // too large, bad rights: the client is still there
			continue
		}
		var s Signal
		if strictJSON(b, &s) == nil && s.T == "signal" {
			closeAll(files)
			if sig, ok := Signals[s.Signal]; ok {
				select {
				case c.signals <- sig:
				default: // a burst of ^C is one request
				}
			}
			continue
		}
		c.deliver(reply{b: b, files: files})
	}
}

// deliver hands r to the Need waiting for an answer, or drops it.
func (c *Call) deliver(r reply) {
	select {
	case c.answers <- r:
	default:
		closeAll(r.files)
	}
}

// Gone is closed once the client's end of the connection is closed: the
// client exited, was killed, or closed its socket. A handler that waits
// (status --wait) stops waiting then, rather than hold the call's slot for
// a client that will read nothing. A program that runs does not stop (see
// Signals).
func (c *Call) Gone() <-chan struct{} { return c.gone }

// NeedTimeout bounds how long the service waits for a client to answer a
// Need: a client that stops answering holds only its own call, and not for
// long.
var NeedTimeout = 10 * time.Second

// ErrClientGone is a Need's error when the client's end of the connection
// was closed before it answered.
var ErrClientGone = errors.New("runner service: the client went away")

// Env asks the client for the value of an environment variable an
// operation passes by value (docs/DESIGN.md §9 env.pass). It is the only part of the
// caller's environment the service ever sees, and it is bound into the
// fingerprint by value.
func (c *Call) Env(name string) (string, bool, error) {
	g, _, err := c.need(Need{T: "need", Env: name})
	if err != nil {
		return "", false, err
	}
	return g.Value, g.Set, nil
}

// File asks the client to open path, as the caller, and hand it over.
func (c *Call) File(path string) (*os.File, error) {
	g, files, err := c.need(Need{T: "need", File: path})
	if err != nil {
		return nil, err
	}
	if g.Error != "" {
		closeAll(files)
		return nil, fmt.Errorf("the client could not open %s: %s", path, g.Error)
	}
	if len(files) != 1 {
		closeAll(files)
		return nil, protoErr(CodeBadRequest, "a file answer carries %d descriptors, not 1", len(files))
	}
	return files[0], nil
}

func (c *Call) need(n Need) (*Give, []*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running {
		return nil, nil, errors.New("runner service: no questions once a program runs")
	}
	// An answer sent before the question (or after an earlier one timed
	// out) is not this question's answer.
	select {
	case r := <-c.answers:
		closeAll(r.files)
	default:
	}
	if err := c.send(n); err != nil {
		return nil, nil, fmt.Errorf("asking the client: %w", err)
	}
	t := time.NewTimer(NeedTimeout)
	defer t.Stop()
	var r reply
	select {
	case r = <-c.answers:
	case <-c.gone:
		// read delivers before it closes gone: an answer sent just
		// before the client went is here.
		select {
		case r = <-c.answers:
		default:
			return nil, nil, ErrClientGone
		}
	case <-t.C:
		return nil, nil, protoErr(CodeTimeout, "the client did not answer within %s", NeedTimeout)
	}
	if r.err != nil {
		return nil, nil, fmt.Errorf("reading the client's answer: %w", r.err)
	}
	var g Give
	if err := strictJSON(r.b, &g); err != nil || g.T != "give" {
		closeAll(r.files)
		return nil, nil, protoErr(CodeBadRequest, "not an answer: %v", err)
	}
	return &g, r.files, nil
}

// Signals returns the signals the client relays (those relayed before the
// first call are kept, a burst as one). After the first call the client can
// no longer be asked anything: the connection only carries signals and, at
// the end, the exit status. A client that goes away sends nothing more; the
// program and its receipts carry on regardless.
func (c *Call) Signals() <-chan os.Signal {
	c.mu.Lock()
	c.running = true
	c.mu.Unlock()
	return c.signals
}

// Server serves calls on a listener.
//
// # Slots
//
// Slots are fair (docs/DESIGN.md §13, docs/adr/0036-the-service-never-waits-on-a-caller.md).
// A connection still sending its request holds one of its account's
// MaxPendingPerAccount slots, for at most RequestTimeout. Once the request
// is read, [Server.Classify] names the pools the call draws on, for
// example its principal's own, or the small pool every keyless caller
// shares; a call is admitted only if every one of them has room. So no
// principal can take another's slots, strangers share a few between them,
// and approvers and operators are served while agents and strangers hold
// everything they may. A refused call is answered busy, after its request
// was read: never a reset.
type Server struct {
	Handler Handler
	// Ops are the calls the server takes (api.Ops); a request naming
	// another is refused bad_request.
	Ops []string
	// MaxCalls bounds the connections still sending their request; one
	// more is answered busy. 0 means 256.
	MaxCalls int
	// MaxCallsPerAccount bounds the calls in progress of one calling
	// account (its uid, from SO_PEERCRED) when Classify is nil. 0 means
	// half of MaxCalls.
	MaxCallsPerAccount int
	// MaxPendingPerAccount bounds the connections of one account still
	// sending their request. 0 means 32.
	MaxPendingPerAccount int
	// Classify, if set, names the pools a call whose request has been
	// read draws on, with each pool's size. Nil: one pool per account,
	// of MaxCallsPerAccount.
	Classify func(*Call) []Pool
	// RequestTimeout bounds how long a client may take to send its
	// request once connected.
	RequestTimeout time.Duration
	Log            *log.Logger

	// wg counts the calls in progress, the socket's and those that
	// joined (Join): a stop waits for every one.
	wg sync.WaitGroup

	mu      sync.Mutex
	pending map[uint32]int
	inPool  map[string]int
	// calls is the context every call is handed, done once the service
	// stops (stopCalls); set up on first use, by Serve or Join.
	calls     context.Context
	stopCalls context.CancelFunc
	// stopping is set once the service stops: Join refuses from then on.
	stopping bool
	onStop   []func()
}

// Pool is one pool of slots a call draws on: its name and its size.
type Pool struct {
	Name string
	Size int
}

// callsLocked returns the calls' context, setting it up on first use.
func (s *Server) callsLocked() context.Context {
	if s.calls == nil {
		s.calls, s.stopCalls = context.WithCancel(context.Background())
	}
	return s.calls
}

// Join admits a call that reached the service by another way than its
// socket (MCP over HTTP), so that a stop treats it as a call on the socket
// (docs/adr/0031-waits-through-the-service.md): ctx is the context the
// socket's calls are handed, done once the service stops, after every
// listener is closed (a call that only waits ends then; one that runs a
// program ignores it), and Serve waits until done is called, without a
// time limit. Once the service stops, Join refuses: ok is false, and the
// call is to be refused as one the closed listener would not accept.
func (s *Server) Join() (ctx context.Context, done func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil, nil, false
	}
	// Added before the service stops, so before Serve waits.
	s.wg.Add(1)
	var once sync.Once
	return s.callsLocked(), func() { once.Do(s.wg.Done) }, true
}

// OnStop has closeListener called once the service stops: after the socket's
// listener is closed and before any call learns of the stop, so that a
// client whose wait ends and that asks again is accepted nowhere. It
// closes another listener (MCP over HTTP) and must not wait for calls. If
// the service already stops, it is called now.
func (s *Server) OnStop(closeListener func()) {
	s.mu.Lock()
	if !s.stopping {
		s.onStop = append(s.onStop, closeListener)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	closeListener()
}

// stop refuses calls from now on, closes the other listeners, and then
// tells the calls in progress that the service stops.
func (s *Server) stop() {
	s.mu.Lock()
	s.stopping = true
	closers := s.onStop
	s.onStop = nil
	s.callsLocked()
	s.mu.Unlock()
	for _, closeListener := range closers {
		closeListener()
	}
	s.stopCalls()
}

// admitPending takes one of uid's slots for a connection still sending
// its request, or reports that it has none left.
func (s *Server) admitPending(uid uint32, max int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[uid] >= max {
		return false
	}
	if s.pending == nil {
		s.pending = map[uint32]int{}
	}
	s.pending[uid]++
	return true
}

func (s *Server) releasePending(uid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[uid]--; s.pending[uid] <= 0 {
		delete(s.pending, uid)
	}
}

// admit takes a slot in every pool, or in none and names the full one.
func (s *Server) admit(pools []Pool) (full string, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range pools {
		if s.inPool[p.Name] >= p.Size {
			return p.Name, false
		}
	}
	if s.inPool == nil {
		s.inPool = map[string]int{}
	}
	for _, p := range pools {
		s.inPool[p.Name]++
	}
	return "", true
}

func (s *Server) release(pools []Pool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range pools {
		if s.inPool[p.Name]--; s.inPool[p.Name] <= 0 {
			delete(s.inPool, p.Name)
		}
	}
}

// Serve accepts connections until ctx is done, then waits for the calls in
// progress, those that joined included (a run is never cut short by a stop
// request). The context handed to the handlers is done once the listeners
// are closed (see Handler, OnStop): a wait ends at once, and its client's
// next call is not accepted here. A Server serves once.
func (s *Server) Serve(ctx context.Context, l *net.UnixListener) error {
	maxCalls := s.MaxCalls
	if maxCalls <= 0 {
		maxCalls = 256
	}
	perAccount := s.MaxCallsPerAccount
	if perAccount <= 0 {
		perAccount = max(1, maxCalls/2)
	}
	pendingPerAccount := s.MaxPendingPerAccount
	if pendingPerAccount <= 0 {
		pendingPerAccount = 32
	}
	classify := s.Classify
	if classify == nil {
		classify = func(c *Call) []Pool {
			return []Pool{{Name: "uid:" + strconv.FormatUint(uint64(c.Peer.UID), 10), Size: perAccount}}
		}
	}
	slots := make(chan struct{}, maxCalls)
	s.mu.Lock()
	calls := s.callsLocked()
	s.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			// Closed before the calls learn of the stop: a client
			// whose wait ends now and asks again finds no listener
			// here.
			l.Close()
			s.stop()
		})
	}
	returned := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
		case <-returned: // Serve returned on an error
		}
		stop()
	}()
	defer func() {
		close(returned)
		// Stopped before waiting: no call joins once Wait has begun.
		stop()
		s.wg.Wait()
	}()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors: back off rather than spin.
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return err
		}
		peer, err := PeerOf(c)
		if err != nil {
			s.logf("refusing a connection: %v", err)
			c.Close()
			continue
		}
		if !s.admitPending(peer.UID, pendingPerAccount) {
			// Not logged: an account hammering the socket would fill
			// the log.
			busy(c, "too many calls of this account are still sending their request; try again")
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			s.releasePending(peer.UID)
			busy(c, "too many calls in progress; try again")
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.serveConn(calls, c, peer, func() {
				<-slots
				s.releasePending(peer.UID)
			}, classify)
		}()
	}
}

func (s *Server) logf(format string, args ...any) {
	if s.Log != nil {
		s.Log.Printf(format, args...)
	}
}

// busy answers a connection that gets no slot, and closes it. What the
// client sent already is read first (without waiting for more): a socket
// closed with unread data resets its peer, whose read then fails with
// ECONNRESET instead of finding this answer.
func busy(c *net.UnixConn, msg string) {
	conn := NewConn(c)
	drain(c)
	conn.SendWithin(time.Second, Failure{T: "failure", Code: CodeBusy, Error: msg})
	conn.Close()
}

// drain reads and drops, without blocking, every message queued on c.
func drain(c *net.UnixConn) {
	raw, err := c.SyscallConn()
	if err != nil {
		return
	}
	raw.Read(func(fd uintptr) bool {
		buf := make([]byte, MaxMessage+1)
		oob := make([]byte, unix.CmsgSpace(MaxFDs*4))
		for {
			_, oobn, _, _, err := unix.Recvmsg(int(fd), buf, oob, unix.MSG_DONTWAIT|unix.MSG_CMSG_CLOEXEC)
			if err != nil {
				return true // EAGAIN: nothing more queued
			}
			files, _ := parseRights(oob[:oobn])
			closeAll(files)
		}
	})
}

// serveConn serves one connection. endPending gives back the slots of a
// connection still sending its request, once it is read.
func (s *Server) serveConn(ctx context.Context, uc *net.UnixConn, peer Peer, endPending func(), classify func(*Call) []Pool) {
	conn := NewConn(uc)
	defer conn.Close()
	pendingEnded := false
	defer func() {
		if !pendingEnded {
			endPending()
		}
	}()
	timeout := s.RequestTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	uc.SetReadDeadline(time.Now().Add(timeout))
	b, files, err := conn.Recv()
	uc.SetReadDeadline(time.Time{})
	if err != nil {
		var pe *Error
		var ne net.Error
		switch {
		case errors.As(err, &pe):
		case errors.As(err, &ne) && ne.Timeout():
			pe = protoErr(CodeTimeout, "no request within %s", timeout)
		case IsClosed(err):
			return
		default:
			pe = protoErr(CodeBadRequest, "%v", err)
		}
		s.logf("uid %d: %s", peer.UID, pe.Code)
		conn.SendWithin(WriteTimeout, Failure{T: "failure", Code: pe.Code, Error: pe.Msg})
		return
	}
	req, err := DecodeRequest(b, len(files), s.Ops)
	if err != nil {
		closeAll(files)
		pe := err.(*Error)
		s.logf("uid %d: %s", peer.UID, pe.Code)
		conn.SendWithin(WriteTimeout, Failure{T: "failure", Code: pe.Code, Error: pe.Msg})
		return
	}
	defer closeAll(files)
	call := newCall(peer, req, conn)
	for i, n := range req.FDs {
		call.Files[n] = files[i]
	}
	endPending()
	pendingEnded = true
	pools := classify(call)
	if full, ok := s.admit(pools); !ok {
		// The request was read: the client finds this answer.
		conn.SendWithin(WriteTimeout, Failure{T: "failure", Code: CodeBusy, Error: fmt.Sprintf("too many calls in progress in pool %s; try again", full)})
		return
	}
	defer s.release(pools)
	// Read from now on, so that the call learns when its client goes
	// (Gone); the deferred Close above ends the reading.
	go call.read()
	code := s.handle(ctx, call)
	if err := call.send(Exit{T: "exit", Code: code}); err != nil && !IsClosed(err) && !errors.Is(err, syscall.EPIPE) {
		s.logf("uid %d: %s: sending the exit status: %v", peer.UID, req.Op, err)
	}
}

// handle runs the handler, turning a panic into an internal error for this
// call alone.
func (s *Server) handle(ctx context.Context, call *Call) (code int) {
	defer func() {
		if r := recover(); r != nil {
			s.logf("uid %d: %s: internal error: %v", call.Peer.UID, call.Request.Op, r)
			code = 70
		}
	}()
	return s.Handler.Serve(ctx, call)
}

// Listen listens on path: the socket systemd handed over (LISTEN_FDS, socket
// activation) when there is one, else a new socket at path with mode,
// replacing a stale one, in a directory PrepareSocketDir checked (and
// created when missing).
func Listen(path string, mode os.FileMode) (*net.UnixListener, error) {
	if l, err := activated(); l != nil || err != nil {
		return l, err
	}
	uid := os.Getuid()
	if err := PrepareSocketDir(path, uid); err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		// A socket left by a service that died: nobody answers on it.
		if c, err := net.Dial("unixpacket", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s: another service is listening", path)
		}
		os.Remove(path)
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		if errors.Is(err, syscall.EACCES) {
			// Root's directory, as systemd makes it for its socket unit.
			dir := filepath.Dir(path)
			return nil, fmt.Errorf("%w: serve (%s) cannot write %s; without systemd's socket unit the directory must be the service's: as root, install -d -o %s -m 0755 %s",
				err, account(uid), dir, account(uid), dir)
		}
		return nil, err
	}
	l.SetUnlinkOnClose(true)
	if err := os.Chmod(path, mode); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// activated returns the listener systemd passed (fd 3), if LISTEN_PID names
// this process.
func activated() (*net.UnixListener, error) {
	if pid, _ := strconv.Atoi(os.Getenv("LISTEN_PID")); pid != os.Getpid() {
		return nil, nil
	}
	if n, _ := strconv.Atoi(os.Getenv("LISTEN_FDS")); n != 1 {
		return nil, fmt.Errorf("socket activation: want 1 socket, LISTEN_FDS=%q", os.Getenv("LISTEN_FDS"))
	}
	os.Unsetenv("LISTEN_PID")
	os.Unsetenv("LISTEN_FDS")
	os.Unsetenv("LISTEN_FDNAMES")
	syscall.CloseOnExec(3)
	fl, err := net.FileListener(os.NewFile(3, "systemd socket"))
	if err != nil {
		return nil, fmt.Errorf("socket activation: %w", err)
	}
	l, ok := fl.(*net.UnixListener)
	if !ok {
		fl.Close()
		return nil, errors.New("socket activation: fd 3 is not a Unix socket")
	}
	return l, nil
}

// Result is how a call ended, as the client sees it.
type Result struct {
	Code    int
	Failure *Error
	// Body is the call's typed result, when it asked for one (Request.API)
	// and the call produced it.
	Body []byte
}

// decodeReply decodes the service's messages to a client.
func decodeReply(b []byte) (kind string, need *Need, res *Result, out *Output, err error) {
	var head struct {
		T string `json:"t"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return "", nil, nil, nil, protoErr(CodeBadRequest, "reply: %v", err)
	}
	switch head.T {
	case "reply":
		var r Reply
		if err := strictJSON(b, &r); err != nil {
			return "", nil, nil, nil, protoErr(CodeBadRequest, "reply: %v", err)
		}
		return "reply", nil, &Result{Body: r.Data}, nil, nil
	case "held":
		var h Held
		if err := strictJSON(b, &h); err != nil {
			return "", nil, nil, nil, protoErr(CodeBadRequest, "held: %v", err)
		}
		return "held", nil, nil, nil, nil
	case "out":
		var o Output
		if err := strictJSON(b, &o); err != nil || (o.FD != 1 && o.FD != 2) {
			return "", nil, nil, nil, protoErr(CodeBadRequest, "out: fd %d: %v", o.FD, err)
		}
		return "out", nil, nil, &o, nil
	case "need":
		var n Need
		if err := strictJSON(b, &n); err != nil {
			return "", nil, nil, nil, protoErr(CodeBadRequest, "need: %v", err)
		}
		return "need", &n, nil, nil, nil
	case "exit":
		var e Exit
		if err := strictJSON(b, &e); err != nil {
			return "", nil, nil, nil, protoErr(CodeBadRequest, "exit: %v", err)
		}
		return "exit", nil, &Result{Code: e.Code}, nil, nil
	case "failure":
		var f Failure
		if err := strictJSON(b, &f); err != nil {
			return "", nil, nil, nil, protoErr(CodeBadRequest, "failure: %v", err)
		}
		return "failure", nil, &Result{Failure: &Error{Code: f.Code, Msg: f.Error}}, nil, nil
	}
	return "", nil, nil, nil, protoErr(CodeBadRequest, "unknown reply %q", head.T)
}
