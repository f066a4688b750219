package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/service"
)

// handover is a file the caller named, which the client opens with the
// caller's own rights and hands to the service as a descriptor.
type handover struct {
	name string // the descriptor's name in the request ("file:config", "stdout"…)
	path string
}

// ServiceUnavailable is the refusal of a client that cannot reach the
// runner service: nothing ran.
const ServiceUnavailable refusal.Code = "service_unavailable"

// callServiceAPI makes a typed call (pkg/api) to the runner service c
// names, handing over the caller's files, and returns the service's
// reply. When ctx is done the connection is closed, so the service sees
// its client go and ends a wait at once
// (docs/adr/0031-waits-through-the-service.md); a run carries on.
func (f *Factory) callServiceAPI(ctx context.Context, c *config.Config, op string, args any, extra []handover) ([]byte, error) {
	req := service.Request{Op: op, JSON: f.JSON, API: api.Version}
	if args != nil {
		b, err := json.Marshal(args)
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

	stdout := f.IO.Out
	in, err := streams.reader(f.IO.In)
	if err != nil {
		return nil, err
	}
	if in != nil {
		add("stdin", in)
	}
	// The service sends what we are to see over the socket; we write it
	// to our own streams (protocol version 2).
	req.ErrTTY = f.IO.ErrTTY
	cwd, err := f.Getwd()
	if err != nil {
		return nil, err
	}
	d, err := service.OpenDir(cwd)
	if err != nil {
		return nil, fmt.Errorf("opening the working directory: %w", err)
	}
	closers = append(closers, d)
	add("cwd", d)
	if path := f.KeyFile(); path != "" {
		k, err := service.OpenRead(path)
		if err != nil {
			return nil, &config.Error{Msg: "cannot open the key", Err: err}
		}
		closers = append(closers, k)
		add("key", k)
	}
	sort.Slice(extra, func(i, j int) bool { return extra[i].name < extra[j].name })
	for _, h := range extra {
		fl, err := service.OpenRead(h.path)
		if err != nil {
			return nil, &dataError{err: fmt.Errorf("%s: %w", h.name, err)}
		}
		closers = append(closers, fl)
		add(h.name, fl)
	}
	conn, err := service.Dial(c.Service.Socket)
	if err != nil {
		return nil, refusal.New(ServiceUnavailable, "cannot reach the runner service at %s: %v", c.Service.Socket, errors.Unwrap(err)).Needs("a running prod-write serve (docs/DEPLOYMENT.md)")
	}
	defer conn.Close()
	stopClosing := context.AfterFunc(ctx, func() { conn.Close() })
	defer stopClosing()
	var sigs chan os.Signal
	if op == "run" {
		// ^C and kill reach the program as requests to the service; a
		// client that dies anyway changes nothing in the service's order.
		sigs = make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sigs)
	}
	res, err := service.Do(conn, req, files, service.Caller{LookupEnv: f.LookupEnv, OnHeld: heldHook(ctx)}, sigs, stdout, f.IO.Err)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("the call to the runner service was cancelled: %w", ctx.Err())
		}
		return nil, err
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
		// A call the service could not answer: it said why on stderr.
		return nil, &ExitError{Code: res.Code}
	}
	return nil, errors.New("the runner service answered no typed result (is it older than this client?)")
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

// heldKey is the context key of the function a call runs once the service
// holds it (withHeld).
type heldKey struct{}

// withHeld returns ctx whose call to the service runs fn once the service
// says it holds the call (service.Held): what fn says (a wait's "waiting"
// line) is then true of a call the service runs, never of one a stop
// could still refuse unread.
func withHeld(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, heldKey{}, fn)
}

func heldHook(ctx context.Context) func() {
	fn, _ := ctx.Value(heldKey{}).(func())
	return fn
}
