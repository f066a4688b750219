package localapi

import (
	"context"
	"errors"

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

// CallService makes a typed call (pkg/api) to the runner service c
// names, with f's streams, working directory, key and environment
// (service.APICall), and returns the service's reply, its errors mapped
// to the CLI's (docs/adr/0031-waits-through-the-service.md).
func (f *Env) CallService(ctx context.Context, c *config.Config, op string, args any, extra []handover) ([]byte, error) {
	cwd, err := f.Getwd()
	if err != nil {
		return nil, err
	}
	call := service.APICall{
		Socket: c.Service.Socket, Op: op, API: api.Version, Args: args,
		JSON: f.JSON, ErrTTY: f.IO.ErrTTY,
		Stdin: f.IO.In, Stdout: f.IO.Out, Stderr: f.IO.Err,
		Cwd: cwd, Key: f.KeyFile(),
		LookupEnv: f.LookupEnv, OnHeld: heldHook(ctx),
		RelaySignals: op == api.CallRun.Op,
	}
	for _, h := range extra {
		call.Files = append(call.Files, service.HandOver{Name: h.name, Path: h.path})
	}
	b, err := call.Do(ctx)
	var unreachable *service.UnreachableError
	var open *service.OpenError
	var unanswered *service.UnansweredError
	switch {
	case errors.As(err, &unreachable):
		return nil, unreachableRefusal(unreachable.Socket, unreachable.Err)
	case errors.As(err, &open) && open.Name == "key":
		return nil, &config.Error{Msg: "cannot open the key", Err: open.Err}
	case errors.As(err, &open):
		return nil, &DataError{Err: open}
	case errors.As(err, &unanswered):
		// A call the service could not answer: it said why on stderr.
		return nil, &ExitError{Code: unanswered.Code}
	}
	return b, err
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
