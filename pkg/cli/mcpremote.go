package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// The MCP server of a runner service's client (`prod-write mcp` with a
// configuration that names a socket): each tool is the same call the CLI
// makes, so the service's gate, policy and scope decide, and the client
// holds nothing but the agent's key and files.

// remoteError is an error the service reported for a call (its --json
// error line), with its stable code.
type remoteError struct {
	Code string
	Msg  string
	Exit int
}

func (e *remoteError) Error() string { return e.Msg }

// call makes one call with --json, writing its stdout and stderr to out
// and errOut, and returns the service's verdict as an error: the refusal
// or error its last stderr line reports, or an *ExitError for a non-zero
// status with neither.
func (b *mcpBackend) call(op string, args any, extra []handover, out, errOut io.Writer) ([]byte, error) {
	return b.callContext(context.Background(), op, args, extra, out, errOut)
}

// callContext is call ended early, its service call with it, when ctx is
// done (callServiceContext): for waits only.
func (b *mcpBackend) callContext(ctx context.Context, op string, args any, extra []handover, out, errOut io.Writer) ([]byte, error) {
	g := b.with(out, nil)
	tail := &lastLine{w: errOut}
	g.IO.Err = tail
	c, err := g.loadConfig()
	if err != nil {
		return nil, err
	}
	err = g.callServiceContext(ctx, c, op, args, extra)
	line := tail.last()
	var exit *ExitError
	if err == nil || !errors.As(err, &exit) {
		return line, err
	}
	var head struct {
		Outcome string `json:"outcome"`
		Code    string `json:"code"`
		Error   string `json:"error"`
	}
	if json.Unmarshal(line, &head) == nil {
		switch head.Outcome {
		case "refused":
			var r refusal.Error
			if json.Unmarshal(line, &r) == nil {
				return line, &r
			}
		case "error":
			return line, &remoteError{Code: head.Code, Msg: head.Error, Exit: exit.Code}
		}
	}
	return line, exit
}

func (b *mcpBackend) remoteRegistry() (*operations.Registry, error) {
	r, err := serviceAPI{f: b.with(io.Discard, io.Discard)}.Ops(context.Background())
	if err != nil {
		return nil, err
	}
	return registryOf(r.Operations)
}

func (b *mcpBackend) remotePrincipal() (*approval.Principal, error) {
	r, err := serviceAPI{f: b.with(io.Discard, io.Discard)}.Whoami(context.Background())
	if err != nil {
		return nil, err
	}
	return r.Principal, nil
}

// lastLine passes writes through to w and remembers the last complete line
// written, whatever the writes' boundaries (a pipe merges them).
type lastLine struct {
	mu   sync.Mutex
	w    io.Writer
	cur  []byte
	line []byte
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range p {
		if c == '\n' {
			l.line = append(l.line[:0], l.cur...)
			l.cur = l.cur[:0]
			continue
		}
		if len(l.cur) < 64<<10 {
			l.cur = append(l.cur, c)
		}
	}
	if l.w == nil {
		return len(p), nil
	}
	return l.w.Write(p)
}

func (l *lastLine) last() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]byte(nil), l.line...)
}
