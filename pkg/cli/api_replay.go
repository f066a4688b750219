package cli

import (
	"context"
	"io"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/receipts"
)

// replayThroughService is replay with no option through the service: its
// verdicts rendered here as they come, as replayRun renders its own.
func replayThroughService(ctx context.Context, f *Factory) error {
	out := newReplayOutput(f, false)
	r, err := localapi.Client{Env: &f.Env}.Replay(ctx, api.ReplayRequest{Each: func(r receipts.Result) { out.emit(replayResult{Result: r}) }})
	if err != nil {
		if !out.first || out.rows > 0 || ExitCode(err) == ExitDataErr {
			// What was replayed before it stopped, as replayRun shows.
			if f.JSON {
				io.WriteString(out.w, "]}\n")
			}
			out.w.Flush()
		}
		return err
	}
	out.note = r.Note
	return out.end(r.Summary, nil, nil)
}
