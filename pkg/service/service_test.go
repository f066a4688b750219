package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// echoHandler writes the op and the peer's uid to the call's stdout and
// exits with the request's "code" argument; "ask" makes it ask the client
// for an environment variable first, "wait" for the client's signal.
type echoHandler struct{ calls atomic.Int64 }

func (h *echoHandler) Serve(ctx context.Context, c *Call) int {
	h.calls.Add(1)
	var a struct {
		Code int    `json:"code"`
		Ask  string `json:"ask"`
		File string `json:"file"`
		Wait bool   `json:"wait"`
	}
	json.Unmarshal(c.Request.Args, &a)
	out := c.Output(1)
	if a.Ask != "" {
		v, ok, err := c.Env(a.Ask)
		if err != nil {
			fmt.Fprintf(out, "error: %v\n", err)
			return 70
		}
		fmt.Fprintf(out, "%s=%q %v\n", a.Ask, v, ok)
	}
	if a.File != "" {
		fl, err := c.File(a.File)
		if err != nil {
			fmt.Fprintf(out, "error: %v\n", err)
			return 70
		}
		b, _ := io.ReadAll(fl)
		fl.Close()
		fmt.Fprintf(out, "file: %s\n", b)
	}
	if a.Wait {
		select {
		case s := <-c.Signals():
			fmt.Fprintf(out, "got %v\n", s)
		case <-time.After(5 * time.Second):
			fmt.Fprintln(out, "no signal")
		}
	}
	if out != nil {
		fmt.Fprintf(out, "%s uid=%d\n", c.Request.Op, c.Peer.UID)
	}
	return a.Code
}

// testOps are the calls the tests' servers take (the service's are
// api.Ops).
var testOps = []string{"plan", "run", "status"}

func startServer(t *testing.T, h Handler, tune func(*Server)) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	// Long enough that a client slowed by a loaded machine (CI runs every
	// package at once, under -race) is never cut off; the tests of the
	// timeout itself set their own.
	s := &Server{Handler: h, Ops: testOps, RequestTimeout: 10 * time.Second}
	if tune != nil {
		tune(s)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return sock
}

type answers map[string]string

func (a answers) Env(name string) (string, bool) { v, ok := a[name]; return v, ok }
func (a answers) Open(path string) (*os.File, error) {
	return OpenRead(path)
}

// call makes one call with a pipe as stdout and returns what the handler
// wrote there and the result.
func call(t *testing.T, sock string, req Request, a Answerer, sigs <-chan os.Signal) (string, *Result, error) {
	t.Helper()
	c, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var out syncBuffer
	res, err := Do(c, req, nil, a, sigs, &out, &out)
	return out.String(), res, err
}

func TestCallRoundTrip(t *testing.T) {
	h := &echoHandler{}
	sock := startServer(t, h, nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	os.WriteFile(path, []byte("caller's bytes"), 0o600)
	out, res, err := call(t, sock, Request{Op: "plan", Args: json.RawMessage(fmt.Sprintf(`{"code":3,"ask":"AWS_REGION","file":%q}`, path))}, answers{"AWS_REGION": "eu-west-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Code != 3 || res.Failure != nil {
		t.Fatalf("result %+v, want code 3", res)
	}
	want := fmt.Sprintf("AWS_REGION=\"eu-west-1\" true\nfile: caller's bytes\nplan uid=%d\n", os.Getuid())
	if out != want {
		t.Fatalf("handler wrote %q, want %q", out, want)
	}
}

// A signal the client receives reaches the handler as a request.
func TestSignalRelayed(t *testing.T) {
	sock := startServer(t, &echoHandler{}, nil)
	sigs := make(chan os.Signal, 1)
	go func() {
		time.Sleep(100 * time.Millisecond)
		sigs <- unix.SIGINT
	}()
	out, res, err := call(t, sock, Request{Op: "run", Args: json.RawMessage(`{"wait":true}`)}, answers{}, sigs)
	if err != nil || res.Code != 0 {
		t.Fatalf("res %+v err %v", res, err)
	}
	if !strings.HasPrefix(out, "got interrupt\n") {
		t.Fatalf("handler saw %q, want the relayed SIGINT", out)
	}
}

// rawSend writes one datagram as a hostile client would.
func rawSend(t *testing.T, sock string, b []byte, fds ...int) *net.UnixConn {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if b != nil {
		if _, _, err := c.WriteMsgUnix(b, oob, nil); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func readFailure(t *testing.T, c *net.UnixConn) Code {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	conn := NewConn(c)
	b, _, err := conn.Recv()
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	kind, _, res, _, err := decodeReply(b)
	if err != nil || kind != "failure" {
		t.Fatalf("reply %q (%v), want a failure", b, err)
	}
	return res.Failure.Code
}

// Malformed, oversized, truncated and slow requests each get a typed
// error, the handler never runs, and the service goes on serving others.
func TestHostileRequests(t *testing.T) {
	h := &echoHandler{}
	sock := startServer(t, h, func(s *Server) { s.RequestTimeout = 300 * time.Millisecond })
	devnull, _ := os.Open(os.DevNull)
	defer devnull.Close()
	fd := int(devnull.Fd())
	many := make([]int, MaxFDs+1)
	for i := range many {
		many[i] = fd
	}
	big := []byte(`{"v":2,"op":"plan","args":{"x":"` + strings.Repeat("a", MaxMessage) + `"}}`)
	tests := []struct {
		name string
		msg  []byte
		fds  []int
		want Code
	}{
		{"not json", []byte("hello"), nil, CodeBadRequest},
		{"truncated json", []byte(`{"v":2,"op":"pl`), nil, CodeBadRequest},
		{"unknown field", []byte(`{"v":2,"op":"plan","root":true}`), nil, CodeBadRequest},
		{"two values", []byte(`{"v":2,"op":"plan"}{"v":2}`), nil, CodeBadRequest},
		{"other version", []byte(`{"v":1,"op":"plan"}`), nil, CodeVersion},
		{"unknown op", []byte(`{"v":2,"op":"serve"}`), nil, CodeBadRequest},
		{"path traversal in fd name", []byte(`{"v":2,"op":"plan","fds":["file:../x"]}`), []int{fd}, CodeBadRequest},
		{"fd named twice", []byte(`{"v":2,"op":"plan","fds":["key","key"]}`), []int{fd, fd}, CodeBadRequest},
		{"a stdout handed over (version 1)", []byte(`{"v":2,"op":"plan","fds":["stdout"]}`), []int{fd}, CodeBadRequest},
		{"fds not named", []byte(`{"v":2,"op":"plan"}`), []int{fd}, CodeBadRequest},
		{"names without fds", []byte(`{"v":2,"op":"plan","fds":["key"]}`), nil, CodeBadRequest},
		{"oversized", big, nil, CodeTooLarge},
		{"too many fds", []byte(`{"v":2,"op":"plan"}`), many, CodeTooLarge},
		{"slow: nothing sent", nil, nil, CodeTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := rawSend(t, sock, tt.msg, tt.fds...)
			defer c.Close()
			if got := readFailure(t, c); got != tt.want {
				t.Fatalf("code %s, want %s", got, tt.want)
			}
		})
	}
	if n := h.calls.Load(); n != 0 {
		t.Fatalf("the handler ran %d times for requests that should have been refused", n)
	}
	// Still serving.
	if _, res, err := call(t, sock, Request{Op: "status", Args: json.RawMessage(`{}`)}, answers{}, nil); err != nil || res.Code != 0 {
		t.Fatalf("after hostile requests: %+v %v", res, err)
	}
}

// A client that connects and says nothing holds only its own call: others
// are served meanwhile, and it is cut off after the request timeout.
func TestSlowClientDoesNotWedge(t *testing.T) {
	sock := startServer(t, &echoHandler{}, func(s *Server) { s.RequestTimeout, s.MaxPendingPerAccount = 2*time.Second, 32 })
	var idle []*net.UnixConn
	for range 20 {
		idle = append(idle, rawSend(t, sock, nil))
	}
	start := time.Now()
	if _, res, err := call(t, sock, Request{Op: "status", Args: json.RawMessage(`{}`)}, answers{}, nil); err != nil || res.Code != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("a call behind 20 idle clients took %s", d)
	}
	for _, c := range idle {
		if got := readFailure(t, c); got != CodeTimeout {
			t.Fatalf("idle client got %s, want timeout", got)
		}
		c.Close()
	}
}

// A client that asks a question and then never answers is timed out; the
// handler gets an error, not a hang.
func TestUnansweredNeed(t *testing.T) {
	old := NeedTimeout
	NeedTimeout = 200 * time.Millisecond
	t.Cleanup(func() { NeedTimeout = old })
	sock := startServer(t, &echoHandler{}, nil)
	c := rawSend(t, sock, []byte(`{"v":2,"op":"plan","args":{"ask":"X"}}`))
	defer c.Close()
	var out []byte
	for { // the question, then what the handler says, then its exit
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _, err := NewConn(c).Recv()
		if err != nil {
			t.Fatal(err)
		}
		kind, _, _, o, err := decodeReply(b)
		if err != nil {
			t.Fatal(err)
		}
		if kind == "out" {
			out = append(out, o.Data...)
		}
		if kind == "exit" || kind == "failure" {
			break
		}
	}
	if !strings.Contains(string(out), "timeout") {
		t.Fatalf("handler wrote %q, want a timeout error", out)
	}
}

// Busy: one more call than its pool holds is refused at once, not queued,
// and the client reads the answer (never a reset).
func TestBusy(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 2)
	h := HandlerFunc(func(ctx context.Context, c *Call) int { started <- struct{}{}; <-release; return 0 })
	sock := startServer(t, h, func(s *Server) { s.MaxCallsPerAccount = 2 })
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			call(t, sock, Request{Op: "status"}, answers{}, nil)
		}()
	}
	<-started
	<-started
	_, res, err := call(t, sock, Request{Op: "status"}, answers{}, nil)
	if err != nil || res.Failure == nil || res.Failure.Code != CodeBusy {
		t.Fatalf("a third call got %+v, %v; want busy", res, err)
	}
	close(release)
	wg.Wait()
}

// HandlerFunc adapts a function.
type HandlerFunc func(ctx context.Context, c *Call) int

func (f HandlerFunc) Serve(ctx context.Context, c *Call) int { return f(ctx, c) }

// A hundred concurrent clients each get their own answer.
func TestHundredClients(t *testing.T) {
	h := &echoHandler{}
	sock := startServer(t, h, func(s *Server) { s.MaxPendingPerAccount = 128 })
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("V%d", i)
			out, res, err := call(t, sock, Request{Op: "plan", Args: json.RawMessage(fmt.Sprintf(`{"code":%d,"ask":%q}`, i%7, name))}, answers{name: fmt.Sprint(i)}, nil)
			switch {
			case err != nil:
				errs <- err
			case res.Code != i%7:
				errs <- fmt.Errorf("client %d got code %d", i, res.Code)
			case !strings.HasPrefix(out, fmt.Sprintf("%s=%q true\n", name, fmt.Sprint(i))):
				errs <- fmt.Errorf("client %d got %q", i, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := h.calls.Load(); n != 100 {
		t.Fatalf("%d calls served, want 100", n)
	}
}

// The peer is the kernel's: SO_PEERCRED names this process.
func TestPeerIsTheKernels(t *testing.T) {
	peers := make(chan Peer, 1)
	h := HandlerFunc(func(ctx context.Context, c *Call) int { peers <- c.Peer; return 0 })
	sock := startServer(t, h, nil)
	if _, _, err := call(t, sock, Request{Op: "status"}, answers{}, nil); err != nil {
		t.Fatal(err)
	}
	got := <-peers
	if got.UID != uint32(os.Getuid()) || got.PID != int32(os.Getpid()) {
		t.Fatalf("peer %+v, want uid %d pid %d", got, os.Getuid(), os.Getpid())
	}
}

// A stale socket file is replaced; a live one is not taken over.
func TestListenStaleAndLive(t *testing.T) {
	sock := startServer(t, &echoHandler{}, nil)
	if _, err := Listen(sock, 0o600); err == nil || !strings.Contains(err.Error(), "another service") {
		t.Fatalf("listening on a live socket: %v", err)
	}
	stale := filepath.Join(t.TempDir(), "stale.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: stale, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	l2, err := Listen(stale, 0o640)
	if err != nil {
		t.Fatalf("replacing a stale socket: %v", err)
	}
	defer l2.Close()
	if fi, _ := os.Stat(stale); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", fi.Mode().Perm())
	}
}

// fdNameRE is the protocol's rule for descriptor names as a regexp: the
// oracle validFDName is held equal to.
var fdNameRE = regexp.MustCompile(`^(stdin|cwd|key|file:[A-Za-z0-9_.-]{1,64})$`)

func TestValidFDName(t *testing.T) {
	long := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"stdin", true}, {"cwd", true}, {"key", true}, {"stdout", false}, {"stderr", false}, {"trust", false}, {"file:config", true}, {"file:a.b_c-D9", true},
		{"file:" + long, true}, {"file:" + long + "a", false}, {"file:", false},
		{"file:a/b", false}, {"file:a b", false}, {"file:é", false}, {"File:x", false},
		{"stdin ", false}, {"", false}, {"file:x\n", false}, {"stdinx", false},
	} {
		if got := validFDName(tc.name); got != tc.ok {
			t.Errorf("validFDName(%q) = %v, want %v", tc.name, got, tc.ok)
		}
		if want := fdNameRE.MatchString(tc.name); want != tc.ok {
			t.Errorf("the table disagrees with the rule for %q", tc.name)
		}
	}
}

func FuzzValidFDName(f *testing.F) {
	for _, s := range []string{"stdin", "file:x", "file:", "file:a/b", "key\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, n string) {
		if got, want := validFDName(n), fdNameRE.MatchString(n); got != want {
			t.Fatalf("validFDName(%q) = %v, the rule says %v", n, got, want)
		}
	})
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"v":2,"op":"plan","args":{"Operation":"x"},"fds":["stdin","stdout","file:config"],"json":true}`), 3)
	f.Add([]byte(`{"v":2,"op":"run","fds":["cwd"]}`), 1)
	f.Add([]byte(`{"v":2}`), 0)
	f.Fuzz(func(t *testing.T, b []byte, nfds int) {
		r, err := DecodeRequest(b, nfds, testOps)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		// Whatever is accepted is of this version, names a served op and
		// exactly the descriptors attached, each once and well formed.
		if r.V != Version || len(r.FDs) != nfds {
			t.Fatalf("accepted %+v with %d fds", r, nfds)
		}
		seen := map[string]bool{}
		for _, n := range r.FDs {
			if seen[n] || !fdNameRE.MatchString(n) || strings.Contains(n, "/") {
				t.Fatalf("accepted descriptor name %q", n)
			}
			seen[n] = true
		}
	})
}

// One account cannot hold every slot with idle connections: its
// connections beyond MaxPendingPerAccount are answered busy at once while
// the service still has room for others, and its slots come back when
// they end.
func TestBusyPerAccount(t *testing.T) {
	release := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, c *Call) int { <-release; return 0 })
	sock := startServer(t, h, func(s *Server) { s.MaxCalls, s.MaxPendingPerAccount = 8, 2 })
	var held []*net.UnixConn
	for range 2 {
		held = append(held, rawSend(t, sock, nil)) // idle: still sending its request
	}
	// Accepted in order of connection: the third comes after both held ones.
	c := rawSend(t, sock, nil)
	if got := readFailure(t, c); got != CodeBusy {
		t.Fatalf("a third call of one account got %s, want busy", got)
	}
	c.Close()
	for _, c := range held {
		c.Close()
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, res, err := call(t, sock, Request{Op: "status"}, answers{}, nil)
		if err == nil && res.Failure == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the account's slots never came back: %+v %v", res, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Another account is served while one account holds all its slots. The
// other account is this test's own thread with its uid changed (root only):
// SO_PEERCRED records the connecting thread's credentials.
func TestOtherAccountServedWhileOneIsAtItsCap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to connect as a second account")
	}
	dir, err := os.MkdirTemp("", "prod-write-peers-") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s.sock")
	l, err := Listen(sock, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	uids := make(chan uint32, 8)
	h := HandlerFunc(func(ctx context.Context, c *Call) int { uids <- c.Peer.UID; return 0 })
	s := &Server{Handler: h, Ops: testOps, MaxCalls: 8, MaxPendingPerAccount: 2, RequestTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	defer func() { cancel(); <-done }()

	// This account (root) tries to hold every slot with idle connections:
	// it gets two.
	var idle []*net.UnixConn
	for range 8 {
		c := rawSend(t, sock, nil)
		defer c.Close()
		idle = append(idle, c)
	}
	// Six are answered busy at once; the two admitted hear nothing (their
	// request timeout is 10 s), so no reply is awaited from them.
	busy := make(chan bool, len(idle))
	for _, c := range idle {
		go func() {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			b, _, err := NewConn(c).Recv()
			busy <- err == nil && strings.Contains(string(b), string(CodeBusy))
		}()
	}
	for busyN := 0; busyN < 6; {
		if !<-busy {
			t.Fatalf("%d of root's 8 idle calls were answered busy before another heard nothing, want 6", busyN)
		}
		busyN++
	}

	// nobody (65534) is still served.
	type result struct {
		reply string
		err   error
	}
	got := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with its changed uid
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 65534, 65534, 65534); e != 0 {
			got <- result{err: fmt.Errorf("setresuid: %v", e)}
			return
		}
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			got <- result{err: err}
			return
		}
		defer unix.Close(fd)
		if err := unix.Connect(fd, &unix.SockaddrUnix{Name: sock}); err != nil {
			got <- result{err: fmt.Errorf("connect as nobody: %w", err)}
			return
		}
		if _, err := unix.Write(fd, []byte(`{"v":2,"op":"status"}`)); err != nil {
			got <- result{err: err}
			return
		}
		buf := make([]byte, 4096)
		n, err := unix.Read(fd, buf)
		if err != nil {
			got <- result{err: err}
			return
		}
		got <- result{reply: string(buf[:n])}
	}()
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !strings.Contains(r.reply, `"exit"`) {
		t.Fatalf("nobody's call got %s, want its exit status", r.reply)
	}
	if uid := <-uids; uid != 65534 {
		t.Fatalf("the handler saw uid %d, want 65534", uid)
	}
}

// A client whose end of the connection closes (it exited, was killed) is
// seen gone at once: a handler waiting on Gone stops waiting, and a
// question the service asked it ends with ErrClientGone rather than after
// NeedTimeout.
func TestClientGone(t *testing.T) {
	old := NeedTimeout
	NeedTimeout = 30 * time.Second
	t.Cleanup(func() { NeedTimeout = old })
	for _, tc := range []struct {
		name, args string
	}{
		{"waiting", `{}`},
		{"asked a question", `{"ask":"X"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan struct{})
			ended := make(chan string, 1)
			h := HandlerFunc(func(ctx context.Context, c *Call) int {
				close(started)
				if strings.Contains(string(c.Request.Args), "ask") {
					_, _, err := c.Env("X")
					ended <- fmt.Sprintf("asked: %v", err)
					return 0
				}
				select {
				case <-c.Gone():
					ended <- "gone"
				case <-time.After(30 * time.Second):
					ended <- "still waiting after 30 s"
				}
				return 0
			})
			sock := startServer(t, h, nil)
			c := rawSend(t, sock, []byte(`{"v":2,"op":"status","args":`+tc.args+`}`))
			<-started
			if tc.args != `{}` {
				// The question reached the client: it goes without answering.
				c.SetReadDeadline(time.Now().Add(10 * time.Second))
				if b, _, err := NewConn(c).Recv(); err != nil || !strings.Contains(string(b), `"need"`) {
					t.Fatalf("got %q %v, want the service's question", b, err)
				}
			}
			c.Close()
			want := "gone"
			if tc.args != `{}` {
				want = "asked: " + ErrClientGone.Error()
			}
			if got := <-ended; got != want {
				t.Fatalf("the handler ended with %q, want %q", got, want)
			}
		})
	}
}

// A client that is still there is not gone: its answers and relayed
// signals reach the handler, and a signal relayed before the handler asks
// for signals is kept for it.
func TestClientThereIsNotGone(t *testing.T) {
	got := make(chan string, 1)
	h := HandlerFunc(func(ctx context.Context, c *Call) int {
		v, ok, err := c.Env("X")
		var sig os.Signal
		select {
		case sig = <-c.Signals():
		case <-time.After(10 * time.Second):
		}
		select {
		case <-c.Gone():
			got <- "gone"
		default:
			got <- fmt.Sprintf("X=%q %v %v, signal %v", v, ok, err, sig)
		}
		return 0
	})
	sock := startServer(t, h, nil)
	conn, err := Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sigs := make(chan os.Signal, 1)
	sigs <- unix.SIGINT
	if res, err := Do(conn, Request{Op: "run"}, nil, answers{"X": "x"}, sigs, io.Discard, io.Discard); err != nil || res.Code != 0 {
		t.Fatalf("%+v %v", res, err)
	}
	if s, want := <-got, `X="x" true <nil>, signal interrupt`; s != want {
		t.Fatalf("the handler saw %s, want %s", s, want)
	}
}

// A stop ends the calls that wait at once and waits for the ones that run:
// the handlers' context is done once the service stops, and only after
// the listener is closed (a waiter's client asking again finds nobody
// here); Serve still returns only when the run has ended.
func TestStopEndsWaitsNotRuns(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 2)
	waited := make(chan string, 1)
	release := make(chan struct{})
	h := HandlerFunc(func(ctx context.Context, c *Call) int {
		if c.Request.Op == "run" {
			started <- "run"
			<-release // a run ignores the stop
			return 0
		}
		started <- "wait"
		select {
		case <-ctx.Done():
			if c, err := Dial(sock); err == nil {
				c.Close()
				waited <- "stopped, and the listener still accepts"
			} else {
				waited <- "stopped"
			}
			return 124
		case <-time.After(15 * time.Second): // a generous bound: it ends at once
			waited <- "still waiting after 15 s"
			return 0
		}
	})
	s := &Server{Handler: h, Ops: testOps, RequestTimeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()

	type result struct {
		res *Result
		err error
	}
	runRes, waitRes := make(chan result, 1), make(chan result, 1)
	go func() {
		_, res, err := call(t, sock, Request{Op: "run"}, answers{}, nil)
		runRes <- result{res, err}
	}()
	if got := <-started; got != "run" {
		t.Fatalf("started %s, want the run", got)
	}
	go func() {
		_, res, err := call(t, sock, Request{Op: "status"}, answers{}, nil)
		waitRes <- result{res, err}
	}()
	if got := <-started; got != "wait" {
		t.Fatalf("started %s, want the wait", got)
	}
	cancel()
	if got := <-waited; got != "stopped" {
		t.Fatalf("the wait: %s, want stopped with the listener closed", got)
	}
	if r := <-waitRes; r.err != nil || r.res.Code != 124 {
		t.Fatalf("the waiter's call ended %+v %v, want its exit status 124", r.res, r.err)
	}
	select {
	case err := <-done:
		t.Fatalf("Serve returned (%v) with a run in progress", err)
	case r := <-runRes:
		t.Fatalf("the run's call ended (%+v %v) before the run did", r.res, r.err)
	default:
	}
	close(release)
	if r := <-runRes; r.err != nil || r.res.Code != 0 {
		t.Fatalf("the run's call ended %+v %v, want exit 0", r.res, r.err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// A call that joined (MCP over HTTP) is stopped as a socket call: the
// other listener is closed after the socket's and before any call learns
// of the stop; then a wait's context is done, no call joins any more, and
// Serve waits for the run that joined, however long it takes.
func TestStopTreatsJoinedCallsAsSocketCalls(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: &echoHandler{}, Ops: testOps, RequestTimeout: 10 * time.Second}
	// Joined before Serve starts, as MCP over HTTP starts first.
	runCtx, runDone, ok := s.Join()
	if !ok {
		t.Fatal("Join refused before the service stops")
	}
	closed := make(chan string, 1)
	s.OnStop(func() {
		switch {
		case runCtx.Err() != nil:
			closed <- "the calls learned of the stop before the other listener was closed"
		default:
			if c, err := Dial(sock); err == nil {
				c.Close()
				closed <- "the socket still accepts"
			} else {
				closed <- "closed"
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, l) }()
	waitCtx, waitDone, ok := s.Join()
	if !ok {
		t.Fatal("Join refused while the service serves")
	}

	cancel()
	if got := <-closed; got != "closed" {
		t.Fatalf("the other listener: %s", got)
	}
	select {
	case <-waitCtx.Done():
	case <-time.After(15 * time.Second): // a generous bound: it is done at once
		t.Fatal("a joined wait's context is not done 15 s after the stop")
	}
	waitDone()
	waitDone() // twice is once
	if _, _, ok := s.Join(); ok {
		t.Fatal("a call joined once the service stops")
	}
	if runCtx.Err() == nil {
		t.Fatal("the joined run's context is not done")
	}
	select {
	case err := <-done:
		t.Fatalf("Serve returned (%v) with a joined run in progress", err)
	default:
	}
	runDone()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	late := make(chan struct{})
	s.OnStop(func() { close(late) })
	select {
	case <-late:
	default:
		t.Fatal("OnStop after the stop did not call its function at once")
	}
}

// syncBuffer is a bytes.Buffer safe for the client's writes and the test's
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
