package service

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Answerer answers the service's questions, as the caller: it runs in the
// client, with the caller's own credentials.
type Answerer interface {
	// Env returns the caller's value of an environment variable.
	Env(name string) (string, bool)
	// Open opens a file the caller named, for reading.
	Open(path string) (*os.File, error)
}

// Caller answers the service's questions as the calling process: from its
// environment, and with files it opens itself.
type Caller struct {
	LookupEnv func(string) (string, bool)
	// OnHeld, when set, is called when the service says it holds the
	// call ([Held]).
	OnHeld func()
}

// Held implements [Holder].
func (c Caller) Held() {
	if c.OnHeld != nil {
		c.OnHeld()
	}
}

// Holder is an [Answerer] that hears when the service holds its call.
type Holder interface{ Held() }

// Env implements [Answerer].
func (c Caller) Env(name string) (string, bool) { return c.LookupEnv(name) }

// Open implements [Answerer].
func (c Caller) Open(path string) (*os.File, error) { return OpenRead(path) }

// NotSentError is [Do]'s error when the request could not be sent: the
// service received nothing, so the call can be made again from the start.
type NotSentError struct{ Err error }

func (e *NotSentError) Error() string { return "sending the request: " + e.Err.Error() }
func (e *NotSentError) Unwrap() error { return e.Err }

// Do makes one call: it sends req with files attached (named by req.FDs),
// answers the service's questions through a, writes what the service
// sends for the caller's stdout and stderr to stdout and stderr, relays
// every signal received on sigs while waiting, and returns how the call
// ended. The files are the caller's and stay open.
//
// Writing to stdout and stderr may block (a paused terminal): that holds
// this client only. The service stops sending to a client that stops
// reading, and carries on without it.
func Do(c *Conn, req Request, files []*os.File, a Answerer, sigs <-chan os.Signal, stdout, stderr io.Writer) (*Result, error) {
	req.V = Version
	if err := c.Send(req, files...); err != nil {
		// A service that refused the connection at once (busy) answered
		// before it closed: that answer, not the failed send, says why.
		if res := refusedAtOnce(c); res != nil {
			return res, nil
		}
		return nil, &NotSentError{err}
	}
	done := make(chan struct{})
	defer close(done)
	var body []byte // the typed result, once it came
	if sigs != nil {
		go func() {
			for {
				select {
				case <-done:
					return
				case s := <-sigs:
					name := ""
					for n, v := range Signals {
						if v == s {
							name = n
						}
					}
					if name != "" {
						c.Send(Signal{T: "signal", Signal: name})
					}
				}
			}
		}()
	}
	for {
		b, got, err := c.Recv()
		closeAll(got) // the service hands nothing over
		if err != nil {
			if IsClosed(err) {
				return nil, errors.New("the runner service closed the connection before the call ended (see its log)")
			}
			return nil, fmt.Errorf("reading the runner service's reply: %w", err)
		}
		kind, need, res, out, err := decodeReply(b)
		if err != nil {
			return nil, err
		}
		switch kind {
		case "reply":
			if len(body)+len(res.Body) > MaxReply {
				return nil, protoErr(CodeTooLarge, "a reply over %d bytes", MaxReply)
			}
			body = append(body, res.Body...)
			continue
		case "held":
			if h, ok := a.(Holder); ok {
				h.Held()
			}
			continue
		case "out":
			w := stdout
			if out.FD == 2 {
				w = stderr
			}
			if w != nil {
				w.Write(out.Data)
			}
			continue
		case "need":
		default:
			if res.Failure == nil {
				res.Body = body
			}
			return res, nil
		}
		if err := answer(c, need, a); err != nil {
			return nil, err
		}
	}
}

// refusedAtOnce reads, without waiting, a Failure the service sent before
// it closed a connection it would not take.
func refusedAtOnce(c *Conn) *Result {
	c.c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	defer c.c.SetReadDeadline(time.Time{})
	for range 2 { // the first read may report the reset instead
		b, got, err := c.Recv()
		closeAll(got)
		if err != nil {
			if errors.Is(err, syscall.ECONNRESET) {
				continue
			}
			return nil
		}
		if kind, _, res, _, err := decodeReply(b); err == nil && kind == "failure" {
			return res
		}
		return nil
	}
	return nil
}

func answer(c *Conn, n *Need, a Answerer) error {
	switch {
	case n.Env != "":
		v, ok := a.Env(n.Env)
		return c.Send(Give{T: "give", Set: ok, Value: v})
	case n.File != "":
		f, err := a.Open(n.File)
		if err != nil {
			msg := err.Error()
			var pe *os.PathError
			if errors.As(err, &pe) {
				msg = pe.Err.Error()
			}
			return c.Send(Give{T: "give", Error: msg})
		}
		defer f.Close()
		return c.Send(Give{T: "give"}, f)
	}
	return protoErr(CodeBadRequest, "an empty question")
}

// OpenRead opens a file the caller named the way a client hands it over:
// read-only, without blocking on a FIFO and without taking a terminal.
func OpenRead(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
}

// OpenDir opens a directory as a descriptor to hand over (O_PATH: no read
// permission needed, and nothing can be done with it but name it).
func OpenDir(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}
