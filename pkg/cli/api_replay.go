package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/receipts"
)

// maxReplayLine bounds one verdict the service sends.
const maxReplayLine = 16 << 20

func (a serviceAPI) Replay(ctx context.Context, req api.ReplayRequest) (*api.ReplayResult, error) {
	lw := &resultLines{each: req.Each}
	g := *a.f
	g.IO = &IOStreams{Out: lw, Err: a.f.IO.Err, ErrTTY: a.f.IO.ErrTTY}
	var r api.ReplayResult
	err := (serviceAPI{f: &g}).call(ctx, "replay", req, &r)
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

// replayThroughService is replay with no option through the service: its
// verdicts rendered here as they come, as replayRun renders its own.
func replayThroughService(ctx context.Context, f *Factory) error {
	out := newReplayOutput(f, false)
	r, err := serviceAPI{f: f}.Replay(ctx, api.ReplayRequest{Each: func(r receipts.Result) { out.emit(replayResult{Result: r}) }})
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
