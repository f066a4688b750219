package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"
)

// APICall is one typed call (pkg/api) as a client makes it: the caller's
// working directory, key and named files are opened here, with the
// caller's own rights, and handed to the service as descriptors; the
// service reads those, never a path (docs/DESIGN.md §13). What the service relays
// of a program's output is written to Stdout and Stderr, in the caller's
// process.
type APICall struct {
	Socket string // where the service listens
	Op     string // the call's name (docs/API.md)
	API    int    // the API version the client speaks
	Args   any    // the request, encoded as JSON (nil: none)
	JSON   bool   // the caller asked for JSON: no progress lines
	ErrTTY bool   // Stderr is a terminal: progress lines are wanted
	// Stdin is handed to a program that runs: as it is when it is a file
	// (a terminal, a pipe), else through a pipe this process feeds.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Cwd            string     // the caller's working directory
	Key            string     // the caller's key file, or ""
	Files          []HandOver // files the caller named
	// LookupEnv answers the service's questions for a variable an
	// operation passes by value (env.pass), and nothing else.
	LookupEnv func(string) (string, bool)
	// OnHeld, when set, runs once the service holds the call ([Held]).
	OnHeld func()
	// RelaySignals relays this process's SIGINT and SIGTERM to the
	// service while the call is in progress (a run: its program gets
	// them).
	RelaySignals bool
}

// HandOver is a file the caller named, handed over as a descriptor under
// Name ("file:config"…).
type HandOver struct {
	Name, Path string
}

// UnreachableError is a service that could not be reached: nothing ran.
type UnreachableError struct {
	Socket string
	Err    error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the runner service at %s: %v", e.Socket, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// OpenError is a file of the caller's that could not be opened to be
// handed over: the key (Name "key"), or a named file. Nothing was sent.
type OpenError struct {
	Name string
	Err  error
}

func (e *OpenError) Error() string { return fmt.Sprintf("%s: %v", e.Name, e.Err) }

func (e *OpenError) Unwrap() error { return e.Err }

// UnansweredError is a call the service could not answer with a typed
// reply: it said why on stderr, and ended the call with Code.
type UnansweredError struct{ Code int }

func (e *UnansweredError) Error() string { return "" }

// Do makes the call and returns the service's typed reply (an api.Answer,
// refusals and errors included). When ctx is done the connection is
// closed, so the service sees its client go and ends a wait at once; a run
// carries on in the service. With RelaySignals, SIGINT and SIGTERM are relayed
// to the service while it runs.
func (a APICall) Do(ctx context.Context) ([]byte, error) {
	req := Request{Op: a.Op, JSON: a.JSON, API: a.API, ErrTTY: a.ErrTTY}
	if a.Args != nil {
		b, err := json.Marshal(a.Args)
		if err != nil {
			return nil, err
		}
		req.Args = b
	}
	var files []*os.File
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	add := func(name string, fl *os.File) {
		req.FDs = append(req.FDs, name)
		files = append(files, fl)
	}
	streams := &clientStreams{}
	defer streams.wait()
	in, err := streams.reader(a.Stdin)
	if err != nil {
		return nil, err
	}
	if in != nil {
		add("stdin", in)
	}
	d, err := OpenDir(a.Cwd)
	if err != nil {
		return nil, fmt.Errorf("opening the working directory: %w", err)
	}
	closers = append(closers, d)
	add("cwd", d)
	if a.Key != "" {
		k, err := OpenRead(a.Key)
		if err != nil {
			return nil, &OpenError{Name: "key", Err: err}
		}
		closers = append(closers, k)
		add("key", k)
	}
	extra := append([]HandOver(nil), a.Files...)
	sort.Slice(extra, func(i, j int) bool { return extra[i].Name < extra[j].Name })
	for _, h := range extra {
		fl, err := OpenRead(h.Path)
		if err != nil {
			return nil, &OpenError{Name: h.Name, Err: err}
		}
		closers = append(closers, fl)
		add(h.Name, fl)
	}
	var sigs chan os.Signal
	if a.RelaySignals {
		// ^C and kill reach the program as requests to the service; a
		// client that dies anyway changes nothing in the service's order.
		sigs = make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sigs)
	}
	var res *Result
	for pause, asked := BusyPause, time.Now(); ; pause = min(2*pause, BusyPauseMax) {
		if res, err = a.once(ctx, req, files, sigs); err != nil {
			return nil, err
		}
		// Busy: the service took nothing of the call (no slot), so it is
		// asked again, a little later, for a while
		// (docs/adr/0036-the-service-never-waits-on-a-caller.md).
		if res.Failure == nil || res.Failure.Code != CodeBusy || time.Since(asked) >= BusyRetry {
			break
		}
		t := time.NewTimer(pause/2 + rand.N(pause/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, res.Failure
		case <-t.C:
		}
	}
	if res.Failure != nil {
		return nil, res.Failure
	}
	if res.Body != nil {
		// The call's outcome, refusals and errors included, is its
		// reply.
		return res.Body, nil
	}
	if res.Code != 0 {
		return nil, &UnansweredError{Code: res.Code}
	}
	return nil, errors.New("the runner service answered no typed result (is it older than this client?)")
}

// A call answered busy is made again, after a pause from BusyPause
// doubling to BusyPauseMax (each with jitter), for up to BusyRetry; then
// the busy answer is the call's.
var (
	BusyPause    = 20 * time.Millisecond
	BusyPauseMax = 500 * time.Millisecond
	BusyRetry    = 3 * time.Second
)

// once makes the call on a connection of its own.
func (a APICall) once(ctx context.Context, req Request, files []*os.File, sigs chan os.Signal) (*Result, error) {
	conn, err := Dial(a.Socket)
	if err != nil {
		return nil, &UnreachableError{Socket: a.Socket, Err: errors.Unwrap(err)}
	}
	defer conn.Close()
	stopClosing := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopClosing()
	res, err := Do(conn, req, files, Caller{LookupEnv: a.LookupEnv, OnHeld: a.OnHeld}, sigs, a.Stdout, a.Stderr)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("the call to the runner service was cancelled: %w", ctx.Err())
		}
		return nil, err
	}
	return res, nil
}

// clientStreams hands the caller's stdin over as a descriptor, for a
// program that runs: one that is a file already (a terminal, a pipe) goes
// as it is; any other (tests' buffers) through a pipe.
type clientStreams struct {
	close []*os.File
}

func (s *clientStreams) reader(r io.Reader) (*os.File, error) {
	switch r := r.(type) {
	case nil:
		return nil, nil
	case *os.File:
		return r, nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	s.close = append(s.close, pr)
	go func() {
		io.Copy(pw, r)
		pw.Close()
	}()
	return pr, nil
}

// wait closes our ends of the pipes.
func (s *clientStreams) wait() {
	for _, fl := range s.close {
		fl.Close()
	}
}
