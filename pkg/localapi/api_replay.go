package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/prod-write/prod-write/pkg/api"
)

// ServeReplay is replay in the service: each verdict a line on the call's
// own socket, as it is reached.
func ServeReplay(ctx context.Context, a API, req api.ReplayRequest, out io.Writer) (*api.ReplayResult, error) {
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	var werr error
	req.Each = func(r api.ReplayVerdict) {
		if werr == nil {
			werr = enc.Encode(r)
		}
	}
	r, err := a.Replay(ctx, req)
	if err == nil && werr != nil {
		return nil, werr
	}
	return r, err
}

func (a ServiceClient) Replay(ctx context.Context, req api.ReplayRequest) (*api.ReplayResult, error) {
	lw := &resultLines{each: req.Each}
	g := *a.Env
	g.IO = &Streams{Out: lw, Err: a.Env.IO.Err, ErrTTY: a.Env.IO.ErrTTY}
	var r api.ReplayResult
	err := callInto(ctx, ServiceClient{Env: &g}, api.CallReplay, req, nil, &r)
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
	each func(api.ReplayVerdict)
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
		var r api.ReplayVerdict
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
