package localapi

import (
	"context"
	"io"

	"github.com/prod-write/prod-write/pkg/api"
)

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
