// Package service is the runner service's socket protocol and server
// (docs/DESIGN.md §13, docs/adr/0011-runner-service.md): what crosses the Unix socket
// between a `prod-write` client and `prod-write serve`, and the accept loop
// that keeps one misbehaving client from wedging the others. It knows no
// command: a [Handler] (package cli's) does the work of each call.
//
// # Wire format (version 2)
//
// The socket is SOCK_SEQPACKET: every message is one datagram of at most
// [MaxMessage] bytes of JSON, with the descriptors it carries attached to it
// as SCM_RIGHTS, so a message and its descriptors arrive together or not at
// all and no framing can be torn. A call is:
//
//	client → service   Request{v, op, args, fds, json}   + descriptors named by fds
//	service → client   Need{…}                            (zero or more)
//	client → service   Give{…}                            + descriptors, one per Need
//	service → client   Output{fd, data}                   (zero or more)
//	service → client   Reply{body}                        (a typed result, when asked: Request.API)
//	client → service   Signal{…}                          (any time; for a program that runs)
//	service → client   Exit{code} or Failure{code, error}  (last)
//
// The service never writes onto a descriptor the caller handed over
// (docs/adr/0036-the-service-never-waits-on-a-caller.md): everything the
// caller is to see, a program's output included, comes back as Output
// messages on the service's own socket, each sent with a deadline, and the
// client writes it to its own stdout or stderr. Version 1 handed the
// caller's stdout and stderr over, and a paused terminal held the service.
//
// The service reads the connection throughout a call, so it sees at once
// when the client's end closes ([Call.Gone]): a wait for a decision then
// ends rather than hold the call's slot for nobody.
//
// The service identifies the caller's account by SO_PEERCRED. Who may plan,
// file, decide or run is still decided by signatures, never by the account.
package service

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Version is the protocol version this build speaks.
const Version = 2

const (
	// MaxMessage bounds one message. A request carries flags, not data:
	// file contents travel as descriptors.
	MaxMessage = 64 << 10
	// MaxFDs bounds the descriptors one message may carry.
	MaxFDs = 32
)

// Request opens a call.
type Request struct {
	V    int             `json:"v"`
	Op   string          `json:"op"`
	Args json.RawMessage `json:"args,omitempty"`
	// FDs names the descriptors attached, in order: "stdin" (handed to
	// a program that runs, never read by the service), "cwd", "key", or
	// "file:NAME" for a file parameter.
	FDs  []string `json:"fds,omitempty"`
	JSON bool     `json:"json,omitempty"`
	// ErrTTY says the client's stderr is a terminal (progress lines are
	// printed for one). The service never sees the terminal itself.
	ErrTTY bool `json:"err_tty,omitempty"`
	// API, when set, asks for the call's typed result (pkg/api, of that
	// version) in a Reply, instead of its rendered text: the client
	// renders it.
	API int `json:"api,omitempty"`
}

// Reply carries a call's typed result (pkg/api), its JSON in parts of at
// most MaxOutput bytes, before the Exit: More says another part follows.
// A call that failed sends none; its error is on stderr and in its exit
// status, as for any call.
type Reply struct {
	T    string `json:"t"` // "reply"
	Data []byte `json:"data"`
	More bool   `json:"more,omitempty"`
}

// Held tells the client that the service holds its call: the handler is
// running it (a wait has begun). A client that says "waiting" after it
// says so of a call the service has, never of one a stop could still
// refuse unread.
type Held struct {
	T string `json:"t"` // "held"
}

// MaxReply bounds a typed result a client takes in.
const MaxReply = 64 << 20

// Output is text for the client to write to its own stdout (FD 1) or
// stderr (FD 2): a command's result, or a program's output relayed.
type Output struct {
	T    string `json:"t"` // "out"
	FD   int    `json:"fd"`
	Data []byte `json:"data"`
}

// MaxOutput bounds the data of one Output message, so that it stays under
// MaxMessage once encoded.
const MaxOutput = 32 << 10

// Need asks the client for what the service may not take by itself: the
// value of an environment variable an operation passes by value, or a file
// the caller named, opened by the caller.
type Need struct {
	T    string `json:"t"` // "need"
	Env  string `json:"env,omitempty"`
	File string `json:"file,omitempty"` // the path, as the caller recorded it
}

// Give answers a Need: Set and Value for an environment variable, or one
// descriptor attached (Error when the client could not open the file).
type Give struct {
	T     string `json:"t"` // "give"
	Set   bool   `json:"set,omitempty"`
	Value string `json:"value,omitempty"`
	Error string `json:"error,omitempty"`
}

// Signal relays a signal the client received, as a request.
type Signal struct {
	T      string `json:"t"` // "signal"
	Signal string `json:"signal"`
}

// Exit ends a call that ran: the command's exit status.
type Exit struct {
	T    string `json:"t"` // "exit"
	Code int    `json:"code"`
}

// Failure ends a call the service could not take: a typed protocol
// error. Nothing was read or changed.
type Failure struct {
	T     string `json:"t"` // "failure"
	Code  Code   `json:"code"`
	Error string `json:"error"`
}

// Code is a protocol error's stable code.
type Code string

// Protocol error codes.
const (
	CodeBadRequest Code = "bad_request" // not a request of this version
	CodeTooLarge   Code = "too_large"   // over MaxMessage or MaxFDs
	CodeTimeout    Code = "timeout"     // the client was too slow
	CodeVersion    Code = "version"     // another protocol version
	CodeBusy       Code = "busy"        // too many calls at once
	CodeInternal   Code = "internal"
)

// Error is a protocol error: the request was not taken.
type Error struct {
	Code Code
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("runner service: %s: %s", e.Code, e.Msg) }

func protoErr(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// validFDName reports whether n names a descriptor the protocol knows:
// one of the fixed names, or file:NAME with NAME of 1 to 64 characters
// from [A-Za-z0-9_.-]. (Not a regexp: compiling one at start-up cost every
// client 0.5 ms; docs/PERFORMANCE.md.)
func validFDName(n string) bool {
	switch n {
	case "stdin", "cwd", "key":
		return true
	}
	name, ok := strings.CutPrefix(n, "file:")
	if !ok || len(name) < 1 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '.', c == '-':
		default:
			return false
		}
	}
	return true
}

// DecodeRequest decodes and checks a request carrying nfds descriptors,
// for a server of ops (the table of calls, api.Ops). It is strict:
// unknown fields, another version, an op not among ops, a descriptor name
// that is malformed or repeated, or a count that does not match the
// descriptors attached, are each a *Error.
func DecodeRequest(b []byte, nfds int, ops []string) (*Request, error) {
	var r Request
	if err := strictJSON(b, &r); err != nil {
		return nil, protoErr(CodeBadRequest, "%v", err)
	}
	if r.V != Version {
		return nil, protoErr(CodeVersion, "protocol version %d; this service speaks %d", r.V, Version)
	}
	if !slices.Contains(ops, r.Op) {
		return nil, protoErr(CodeBadRequest, "unknown op %q", r.Op)
	}
	if len(r.FDs) != nfds {
		return nil, protoErr(CodeBadRequest, "%d descriptors named, %d attached", len(r.FDs), nfds)
	}
	seen := map[string]bool{}
	for _, n := range r.FDs {
		if !validFDName(n) {
			return nil, protoErr(CodeBadRequest, "descriptor name %q", n)
		}
		if seen[n] {
			return nil, protoErr(CodeBadRequest, "descriptor %q attached twice", n)
		}
		seen[n] = true
	}
	return &r, nil
}

// strictJSON decodes exactly one JSON value with no unknown fields.
func strictJSON(b []byte, v any) error {
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the message")
	}
	return nil
}

// Conn is one end of a call. Its sends may come from several goroutines
// (a relay, a question, the exit status): each is one datagram, sent whole.
type Conn struct {
	c      *net.UnixConn
	sendMu sync.Mutex // one deadline at a time
}

// NewConn wraps a connected SOCK_SEQPACKET socket.
func NewConn(c *net.UnixConn) *Conn { return &Conn{c: c} }

// Dial connects to the service's socket.
func Dial(path string) (*Conn, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, err
	}
	return &Conn{c: c}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// Raw is the underlying socket, for deadlines.
func (c *Conn) Raw() *net.UnixConn { return c.c }

// Send writes v as one message with files attached.
func (c *Conn) Send(v any, files ...*os.File) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	return c.send(v, files...)
}

// SendWithin is Send that gives up after d: how the service sends, so that
// a client that stops reading holds one send for at most d. A send that
// timed out is an error that wraps os.ErrDeadlineExceeded.
func (c *Conn) SendWithin(d time.Duration, v any, files ...*os.File) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if err := c.c.SetWriteDeadline(time.Now().Add(d)); err != nil {
		return err
	}
	defer c.c.SetWriteDeadline(time.Time{})
	return c.send(v, files...)
}

func (c *Conn) send(v any, files ...*os.File) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > MaxMessage {
		return protoErr(CodeTooLarge, "message of %d bytes", len(b))
	}
	if len(files) > MaxFDs {
		return protoErr(CodeTooLarge, "%d descriptors", len(files))
	}
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	_, _, err = c.c.WriteMsgUnix(b, oob, nil)
	return err
}

// Recv reads one message and the descriptors attached to it (close-on-exec).
// A message or descriptor count over the limits is a *Error, and any
// descriptors that did arrive are closed. io.EOF means the peer closed.
func (c *Conn) Recv() ([]byte, []*os.File, error) {
	buf := make([]byte, MaxMessage+1)
	oob := make([]byte, unix.CmsgSpace(MaxFDs*4))
	n, oobn, flags, _, err := c.c.ReadMsgUnix(buf, oob)
	files, ferr := parseRights(oob[:oobn])
	if err != nil {
		closeAll(files)
		return nil, nil, err
	}
	if ferr != nil {
		closeAll(files)
		return nil, nil, ferr
	}
	if flags&unix.MSG_TRUNC != 0 || n > MaxMessage {
		closeAll(files)
		return nil, nil, protoErr(CodeTooLarge, "message over %d bytes", MaxMessage)
	}
	if flags&unix.MSG_CTRUNC != 0 {
		closeAll(files)
		return nil, nil, protoErr(CodeTooLarge, "more than %d descriptors", MaxFDs)
	}
	if n == 0 && len(files) == 0 {
		return nil, nil, errEOF
	}
	return buf[:n], files, nil
}

// errEOF is a closed peer: a SOCK_SEQPACKET read of zero bytes.
var errEOF error = closedError{}

// closedError is errEOF's type, written out rather than made by
// fmt.Errorf: as a package variable, that ran fmt's code, cold, before
// main in every process that links this package. The small client
// (pkg/fastrun) runs no fmt otherwise before its request is sent, and its
// runs took 0.25–0.5 ms less without it (docs/PERFORMANCE.md, "No fmt before main").
type closedError struct{}

func (closedError) Error() string {
	return "runner service: connection closed: " + os.ErrClosed.Error()
}

func (closedError) Unwrap() error { return os.ErrClosed }

// IsClosed reports whether err is the peer having closed the connection.
func IsClosed(err error) bool { return errors.Is(err, os.ErrClosed) || errors.Is(err, net.ErrClosed) }

func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, protoErr(CodeBadRequest, "control message: %v", err)
	}
	var files []*os.File
	var bad error
	for _, m := range msgs {
		if m.Header.Level != unix.SOL_SOCKET || m.Header.Type != unix.SCM_RIGHTS {
			bad = protoErr(CodeBadRequest, "control message of type %d", m.Header.Type)
			continue
		}
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			bad = protoErr(CodeBadRequest, "rights: %v", err)
			continue
		}
		for _, fd := range fds {
			// ReadMsgUnix passes MSG_CMSG_CLOEXEC, so none of these leak
			// into a program the service starts.
			files = append(files, os.NewFile(uintptr(fd), "descriptor"))
		}
	}
	return files, bad
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// Peer is the calling account, from SO_PEERCRED: taken from the kernel when
// the client connected, not from anything the client says.
type Peer struct {
	UID, GID uint32
	PID      int32
}

// PeerOf returns the credentials of c's peer.
func PeerOf(c *net.UnixConn) (Peer, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err == nil {
		err = cerr
	}
	if err != nil {
		return Peer{}, fmt.Errorf("SO_PEERCRED: %w", err)
	}
	return Peer{UID: cred.Uid, GID: cred.Gid, PID: cred.Pid}, nil
}

// Signals a client may relay, by name.
var Signals = map[string]syscall.Signal{"SIGINT": syscall.SIGINT, "SIGTERM": syscall.SIGTERM}
