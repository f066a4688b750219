package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// MCPBackend is the MCP server's backend (mcpapi.Backend): each tool is a
// call of the API the CLI's commands make (in process, or the runner
// service's when the configuration names one), with a copy of the Env
// whose streams are not the MCP stream.
type MCPBackend struct {
	f        *Env
	inflight sync.WaitGroup
	// remote is set when the configuration names a runner service: each
	// tool is then a call to it (mcpremote.go).
	remote bool
}

var _ mcpapi.Backend = (*MCPBackend)(nil)

// NewMCPBackend returns the backend acting under f's configuration and
// key.
func NewMCPBackend(f *Env) *MCPBackend {
	g := *f
	g.IO = &Streams{Out: io.Discard, Err: io.Discard}
	g.JSON = true
	g.ViaMCP = true
	// A tool's warnings go where f's would, never onto the MCP stream:
	// for `prod-write mcp`, its stderr (the MCP host's log).
	g.Notices = f.Notify
	b := &MCPBackend{f: &g}
	if c, err := g.LoadConfig(); err == nil && c.Service.Socket != "" && g.Call == nil {
		b.remote = true
	}
	return b
}

// with returns a copy of the backend's Env writing to out and errOut.
func (b *MCPBackend) with(out, errOut io.Writer) *Env {
	g := *b.f
	g.IO = &Streams{Out: out, Err: errOut}
	return &g
}

// reach is the API a tool's call c goes to: the runner service's client
// (the service authorizes the call there), or, in this process, the
// application once Authorize let the backend's caller make c (over HTTP,
// the token's principal).
func (b *MCPBackend) reach(c api.CallInfo, waitSlice time.Duration) (api.API, error) {
	if b.remote {
		return ServiceClient{Env: b.with(io.Discard, io.Discard), WaitSlice: waitSlice}, nil
	}
	redact, err := b.f.authorize(c)
	if err != nil {
		return nil, err
	}
	return API{Env: b.f, Redact: redact}, nil
}

func (b *MCPBackend) Registry() (*operations.Registry, error) {
	if b.remote {
		return b.remoteRegistry()
	}
	if _, err := b.f.authorize(api.CallOps.CallInfo); err != nil {
		return nil, err
	}
	return LoadRegistry(b.f)
}

func (b *MCPBackend) Principal() (*approval.Principal, error) {
	if !b.f.HasKey() {
		return nil, nil
	}
	if b.remote {
		return b.remotePrincipal()
	}
	a, err := b.reach(api.CallWhoami.CallInfo, 0)
	if err != nil {
		return nil, err
	}
	r, err := a.Whoami(context.Background())
	if err != nil {
		return nil, err
	}
	return r.Principal, nil
}

func (b *MCPBackend) Plan(req mcpapi.PlanRequest) (*api.PlanResult, error) {
	if len(req.Inline) > 0 {
		return nil, &UsageError{Msg: "only MCP over HTTP takes a file's content inline: here, name each file by its path"}
	}
	// The API the CLI's plan calls: in-process, or the service's, which
	// the client hands each file over to.
	a, err := b.reach(api.CallPlan.CallInfo, 0)
	if err != nil {
		return nil, err
	}
	return a.Plan(context.Background(), api.PlanRequest{Operation: req.Operation, Target: req.Target, Params: req.Params, Files: req.Files})
}

func (b *MCPBackend) Status(fp string) (any, *refusal.Error, error) {
	// The API the CLI's status calls: in-process, or the service's
	// (whose answer is typed: nothing of it reaches the MCP server's
	// stdout, the protocol's channel).
	a, err := b.reach(api.CallStatus.CallInfo, 0)
	if err != nil {
		return nil, nil, err
	}
	r, err := a.Status(context.Background(), api.StatusRequest{Fingerprint: fp})
	if err != nil {
		return nil, nil, err
	}
	return r, r.Refusal, nil
}

func (b *MCPBackend) Receipt(id string) ([]json.RawMessage, error) {
	// The API the CLI's receipts show calls: in-process, or the
	// service's, which redacts for a caller with no key of the policy.
	a, err := b.reach(api.CallReceiptsShow.CallInfo, 0)
	if err != nil {
		return nil, err
	}
	r, err := a.ReceiptsShow(context.Background(), api.ReceiptsShowRequest{ID: id})
	if err != nil {
		return nil, err
	}
	entries := make([]json.RawMessage, len(r.Entries))
	for i, e := range r.Entries {
		if entries[i], err = json.Marshal(e); err != nil {
			return nil, fmt.Errorf("encoding receipt %d of %s: %w", i, id, err)
		}
	}
	return entries, nil
}

// runOutputLimit bounds how much of a program's stdout and of its stderr a
// run result carries; the receipts hold the size and sha256 of all of it.
const runOutputLimit = 64 << 10

func (b *MCPBackend) Run(fp string, inline map[string][]byte) (*mcpapi.RunResult, error) {
	if len(inline) > 0 {
		return nil, &UsageError{Msg: "only MCP over HTTP takes a file's content inline"}
	}
	b.inflight.Add(1)
	defer b.inflight.Done()
	// The API the CLI's run calls: in-process, or the service's, which
	// relays the program's output. No stdin (the program reads
	// /dev/null), and the output goes to buffers: the MCP stream is never
	// the program's.
	a, err := b.reach(api.CallRun.CallInfo, 0)
	if err != nil {
		return nil, err
	}
	stdout, stderr := &capture{limit: runOutputLimit}, &capture{limit: runOutputLimit}
	r, err := a.Run(context.Background(), api.RunRequest{Fingerprint: fp, Stdout: stdout, Stderr: stderr})
	if err != nil {
		return nil, err
	}
	// Through the service the secrets are the service's: the client knows
	// none of their values, and the service relays the program's output
	// as it is.
	var redact []string
	if !b.remote {
		redact = b.secrets()
	}
	res := &mcpapi.RunResult{Outcome: r.Outcome, Operation: r.Operation, Fingerprint: r.Fingerprint, ExitCode: r.ExitCode, Intent: r.Intent, Receipt: r.Receipt}
	res.Stdout, res.StdoutTruncated = stdout.text(redact)
	res.Stderr, res.StderrTruncated = stderr.text(redact)
	return res, nil
}

// secrets returns the values, as set now, of every variable that any
// operation declares secret: they never appear in a result, even when a
// program prints them.
func (b *MCPBackend) secrets() []string {
	reg, err := b.Registry()
	if err != nil {
		return nil
	}
	var out []string
	for _, op := range reg.All() {
		for _, n := range op.Env.Secret {
			if v, ok := b.f.LookupEnv(n); ok && v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

func (b *MCPBackend) ErrorCode(err error) string { return ErrorCode(err) }

// capture keeps the first limit bytes written to it.
type capture struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	limit     int
	truncated bool
}

func (c *capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := min(len(p), c.limit-c.buf.Len())
	c.buf.Write(p[:kept])
	if kept < len(p) {
		c.truncated = true
	}
	return len(p), nil
}

// text is what was kept, with each secret value redacted. When the output
// was cut, the cut may fall inside a secret, so as many bytes as the
// longest secret (less one) are dropped from the end as well.
func (c *capture) text(secrets []string) (string, bool) {
	b := c.buf.Bytes()
	if c.truncated {
		longest := 0
		for _, s := range secrets {
			longest = max(longest, len(s))
		}
		b = b[:max(0, len(b)-max(0, longest-1))]
	}
	s := string(b)
	// Longest first, so that a secret inside another goes with it.
	sort.Slice(secrets, func(i, j int) bool { return len(secrets[i]) > len(secrets[j]) })
	for _, v := range secrets {
		s = strings.ReplaceAll(s, v, "[redacted]")
	}
	return s, c.truncated
}

// remoteWaitSlice bounds one wait the MCP server asks of the runner
// service: each ends with a progress notification.
const remoteWaitSlice = 10 * time.Second

func (b *MCPBackend) Wait(ctx context.Context, fp string, timeout time.Duration, progress func(string)) (any, *refusal.Error, bool, error) {
	// The API the CLI's status --wait calls: in-process, or the
	// service's, whose client asks again after each bounded wait.
	a, err := b.reach(api.CallWait.CallInfo, remoteWaitSlice)
	if err != nil {
		return nil, nil, false, err
	}
	r, err := a.Wait(ctx, api.WaitRequest{Fingerprint: fp, Timeout: timeout, Progress: func(s *api.StatusResult) {
		if s.Request != nil {
			progress(fmt.Sprintf("waiting for a decision on %s: %s; missing: %s", s.Request.ID, s.Request.Sentence(), strings.Join(s.Request.Missing, "; ")))
		}
	}})
	if err != nil {
		return nil, nil, false, err
	}
	return r.Status, r.Status.Refusal, r.Pending, nil
}

// Remote reports whether each tool is a call to the runner service.
func (b *MCPBackend) Remote() bool { return b.remote }

// Drain waits for the runs in progress, each to its outcome receipt.
func (b *MCPBackend) Drain() { b.inflight.Wait() }

// The MCP server of a runner service's client (`prod-write mcp` with a
// configuration that names a socket): each tool is the same call the CLI
// makes, so the service's gate, policy and scope decide, and the client
// holds nothing but the agent's key and files.

func (b *MCPBackend) remoteRegistry() (*operations.Registry, error) {
	r, err := ServiceClient{Env: b.with(io.Discard, io.Discard)}.Ops(context.Background())
	if err != nil {
		return nil, err
	}
	return RegistryOf(r.Operations)
}

func (b *MCPBackend) remotePrincipal() (*approval.Principal, error) {
	r, err := ServiceClient{Env: b.with(io.Discard, io.Discard)}.Whoami(context.Background())
	if err != nil {
		return nil, err
	}
	return r.Principal, nil
}
