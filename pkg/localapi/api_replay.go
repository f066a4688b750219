package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/receipts"
)

// Replay is replay of the configured journal by the configured policy,
// registry and history, with no option: what the service answers. The
// commands with options (a path, --trust, --checkpoint…) replay in the
// caller's process (replayRun).
func (a API) Replay(_ context.Context, req api.ReplayRequest) (*api.ReplayResult, error) {
	j, err := NewReplayJudge(a.Env, ReplaySource{})
	if err != nil {
		return nil, err
	}
	in, note, err := OpenReplayJournal(j.Path, true)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	// As replayRun: collected only when memory nears a fixed bound.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(64 << 20))
	each := req.Each
	if each == nil {
		each = func(receipts.Result) {}
	}
	sum, err := j.Replayer.Replay(in, each)
	var notReceipts *receipts.NotReceiptsError
	if errors.As(err, &notReceipts) {
		return nil, &DataError{Err: fmt.Errorf("%s: %w", j.Path, err)}
	}
	if err != nil {
		return nil, err
	}
	return &api.ReplayResult{Summary: sum, Note: note}, nil
}

// ServeReplay is replay in the service: each verdict a line on the call's
// own socket, as it is reached.
func ServeReplay(ctx context.Context, a API, out io.Writer) (*api.ReplayResult, error) {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	var werr error
	r, err := a.Replay(ctx, api.ReplayRequest{Each: func(r receipts.Result) {
		if werr == nil {
			werr = enc.Encode(r)
		}
	}})
	if err == nil && werr != nil {
		return nil, werr
	}
	return r, err
}
