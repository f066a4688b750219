package cli

import (
	"context"
	"errors"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// run on the application API (docs/API.md): in-process, through the
// runner service, and the service's answer to it. The program's output is
// not the result: in process it goes to the request's streams, and
// through the service it is relayed as Output messages, which the client
// writes to them (docs/adr/0036-the-service-never-waits-on-a-caller.md).

// Run through the service hands the caller's stdin over and writes what
// the service relays of the program's output to req's streams. The
// client's SIGINT and SIGTERM are relayed to the service while it runs
// (callServiceAPI, for op run). ctx does not end the call: a run carries
// on in the service, and its outcome would be lost to the caller.
func (a serviceAPI) Run(ctx context.Context, req api.RunRequest) (*api.RunResult, error) {
	g := *a.f
	g.IO = &IOStreams{In: req.Stdin, Out: localapi.OrDiscard(req.Stdout), Err: localapi.OrDiscard(req.Stderr)}
	if a.f.IO != nil {
		// Whether the service may send progress lines for a terminal.
		g.IO.ErrTTY = a.f.IO.ErrTTY
	}
	var r api.RunResult
	if err := (serviceAPI{f: &g}).call(context.WithoutCancel(ctx), "run", api.RunRequest{Fingerprint: req.Fingerprint}, &r); err != nil {
		return nil, err
	}
	if r.Outcome != "ran" {
		return nil, errors.New("the runner service's run answered no outcome")
	}
	return &r, nil
}
