package localapi

import (
	"bytes"
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

func (a Client) Replay(ctx context.Context, req api.ReplayRequest) (*api.ReplayResult, error) {
	lw := &resultLines{each: req.Each}
	g := *a.Env
	g.IO = &Streams{Out: lw, Err: a.Env.IO.Err, ErrTTY: a.Env.IO.ErrTTY}
	var r api.ReplayResult
	err := (Client{Env: &g}).call(ctx, "replay", req, &r)
	if lw.err != nil {
		return nil, lw.err
	}
	if err == nil && len(lw.buf) > 0 {
		err = errors.New("the runner service's replay ended a verdict mid-line")
	}
	if err != nil {
		return nil, err
	}
	return &r, nil
}

// resultLines reads the verdicts a service's replay sends, one JSON line
// each, and hands each on as it ends.
type resultLines struct {
	each func(receipts.Result)
	buf  []byte
	err  error
}

func (w *resultLines) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.buf = append(w.buf, p...)
			if len(w.buf) > maxReplayLine {
				w.err = fmt.Errorf("the runner service's replay sent a verdict over %d bytes", maxReplayLine)
				return 0, w.err
			}
			return n, nil
		}
		line := append(w.buf, p[:i]...)
		p, w.buf = p[i+1:], w.buf[:0]
		var r receipts.Result
		if err := json.Unmarshal(line, &r); err != nil {
			w.err = fmt.Errorf("the runner service's replay: %w", err)
			return 0, w.err
		}
		if w.each != nil {
			w.each(r)
		}
	}
	return n, nil
}

// maxReplayLine bounds one verdict the service sends.
const maxReplayLine = 16 << 20
