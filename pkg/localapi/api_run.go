package localapi

import (
	"context"
	"errors"
	"io"

	"github.com/prod-write/prod-write/pkg/api"
)

// run on the application API (docs/API.md): in-process, through the
// runner service, and the service's answer to it. The program's output is
// not the result: in process it goes to the request's streams, and
// through the service it is relayed as Output messages, which the client
// writes to them (docs/adr/0036-the-service-never-waits-on-a-caller.md).

func (a API) Run(_ context.Context, req api.RunRequest) (*api.RunResult, error) {
	r := a.Env.Runner()
	r.Stdin, r.Stdout, r.Stderr = req.Stdin, OrDiscard(req.Stdout), OrDiscard(req.Stderr)
	r.Progress = a.Progress
	ran, err := r.Run(req.Fingerprint)
	if err != nil {
		return nil, err
	}
	pc, res := ran.Plan, ran.Result
	out := &api.RunResult{
		FormatVersion: FormatVersion, Outcome: "ran",
		Operation: pc.Plan.Operation, Fingerprint: pc.Plan.Fingerprint,
		ExitCode: res.ExitCode, Intent: ran.Intent.Seq, Receipt: ran.Done.Seq,
		TimedOut: res.TimedOut,
	}
	if res.TimedOut {
		// Only a program killed on it has one.
		out.Timeout = pc.Op.Timeout.Duration
	}
	if ran.Outcome != nil {
		out.UndeliveredBytes = ran.Outcome.Undelivered
	}
	return out, nil
}

// OrDiscard is w, or io.Discard for none.
func OrDiscard(w io.Writer) io.Writer {
	if w == nil {
		return io.Discard
	}
	return w
}

// Run through the service hands the caller's stdin over and writes what
// the service relays of the program's output to req's streams. The
// client's SIGINT and SIGTERM are relayed to the service while it runs
// (callServiceAPI, for op run). ctx does not end the call: a run carries
// on in the service, and its outcome would be lost to the caller.
func (a ServiceClient) Run(ctx context.Context, req api.RunRequest) (*api.RunResult, error) {
	g := *a.Env
	g.IO = &Streams{In: req.Stdin, Out: OrDiscard(req.Stdout), Err: OrDiscard(req.Stderr)}
	if a.Env.IO != nil {
		// Whether the service may send progress lines for a terminal.
		g.IO.ErrTTY = a.Env.IO.ErrTTY
	}
	var r api.RunResult
	if err := callInto(context.WithoutCancel(ctx), ServiceClient{Env: &g}, api.CallRun, api.RunRequest{Fingerprint: req.Fingerprint}, nil, &r); err != nil {
		return nil, err
	}
	if r.Outcome != "ran" {
		return nil, errors.New("the runner service's run answered no outcome")
	}
	return &r, nil
}
