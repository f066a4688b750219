package cli

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

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// MCPOptions are mcp's inputs.
type MCPOptions struct {
	F        *Factory `json:"-"`
	AllowRun bool
}

// NewCmdMCP builds `mcp`.
func NewCmdMCP(f *Factory, runF func(*MCPOptions) error) *cobra.Command {
	opts := &MCPOptions{F: f}
	cmd := &cobra.Command{
		Use:   "mcp [--allow-run]",
		Short: "Serve the agent's surface over MCP on stdin and stdout",
		Long: `mcp serves prod-write to an agent over the Model Context Protocol, on stdin and
stdout. Its tools derive from the registry: list_operations, one plan tool
per operation (plan_NAME, whose input schema is the operation's targets,
params and files), status, show_receipt and explain; with --allow-run, run, which
still passes the gate. It acts for the principal of --key (or
$PROD_WRITE_KEY): the plan tools need the agent role. Nothing that files,
approves or records a decision is ever served. See docs/AGENTS.md.`,
		Example: `  PROD_WRITE_KEY=keys/agent.key prod-write mcp
  prod-write mcp --key keys/agent.key --config /etc/prod-write/prod-write.toml --allow-run`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return mcpRun(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.AllowRun, "allow-run", false, "also serve run (approved plans only: it passes the same gate)")
	return cmd
}

func mcpRun(o *MCPOptions) error {
	f := o.F
	if f.Net == nil {
		return f.HandOff("it serves MCP")
	}
	b := newMCPBackend(f)
	if f.KeyFile() == "" {
		fmt.Fprintf(f.IO.Err, "prod-write: warning: no key (--key or PROD_WRITE_KEY): serving read-only tools; plans cannot be made\n")
	} else if pr, err := b.Principal(); err == nil && pr != nil {
		var other []string
		for _, r := range pr.Roles {
			if r != approval.RoleAgent {
				other = append(other, r)
			}
		}
		if len(other) > 0 {
			// SPEC §13: whatever the agent can read, it can use elsewhere.
			fmt.Fprintf(f.IO.Err, "prod-write: warning: %s also holds %s; this server serves none of those roles, but whoever can read its key can act as %s on the CLI\n",
				pr.ID, strings.Join(other, ", "), pr.ID)
		}
	}
	// The MCP stream is f.IO's: nothing else may write to it, so the tools
	// run with streams of their own (see mcpBackend).
	err := f.Net.ServeMCP(context.Background(), b, o.AllowRun, f.IO.In, f.IO.Out)
	// A run in progress finishes, with its outcome receipt, before we exit.
	b.inflight.Wait()
	return err
}

// MCPBackend returns the backend of `prod-write mcp`: the CLI's own code
// paths, under f's configuration and key.
func MCPBackend(f *Factory) mcpapi.Backend { return newMCPBackend(f) }

// mcpBackend runs the tools through the same functions as the commands,
// with a copy of the factory whose streams are not the MCP stream.
type mcpBackend struct {
	f        *Factory
	inflight sync.WaitGroup
	// remote is set when the configuration names a runner service: each
	// tool is then a call to it (mcpremote.go).
	remote bool
}

var _ mcpapi.Backend = (*mcpBackend)(nil)

func newMCPBackend(f *Factory) *mcpBackend {
	g := *f
	g.IO = &IOStreams{Out: io.Discard, Err: io.Discard}
	g.JSON = true
	g.ViaMCP = true
	b := &mcpBackend{f: &g}
	if c, err := g.LoadConfig(); err == nil && c.Service.Socket != "" && g.Call == nil {
		b.remote = true
	}
	return b
}

// with returns a copy of the backend's factory writing to out and errOut.
func (b *mcpBackend) with(out, errOut io.Writer) *Factory {
	g := *b.f
	g.IO = &IOStreams{Out: out, Err: errOut}
	return &g
}

func (b *mcpBackend) Registry() (*operations.Registry, error) {
	if b.remote {
		return b.remoteRegistry()
	}
	return localapi.LoadRegistry(&b.f.Env)
}

func (b *mcpBackend) Principal() (*approval.Principal, error) {
	if !b.f.HasKey() {
		return nil, nil
	}
	if b.remote {
		return b.remotePrincipal()
	}
	r, err := localapi.API{Env: &b.f.Env}.Whoami(context.Background())
	if err != nil {
		return nil, err
	}
	return r.Principal, nil
}

func (b *mcpBackend) Plan(req mcpapi.PlanRequest) (*api.PlanResult, error) {
	if len(req.Inline) > 0 {
		return nil, &localapi.UsageError{Msg: "only MCP over HTTP takes a file's content inline: here, name each file by its path"}
	}
	// The API the CLI's plan calls: in-process, or the service's, which
	// the client hands each file over to.
	var a api.API = localapi.API{Env: &b.f.Env}
	if b.remote {
		a = localapi.Client{Env: &b.with(io.Discard, io.Discard).Env}
	}
	return a.Plan(context.Background(), api.PlanRequest{Operation: req.Operation, Target: req.Target, Params: req.Params, Files: req.Files})
}

func (b *mcpBackend) Status(fp string) (any, *refusal.Error, error) {
	// The API the CLI's status calls: in-process, or the service's
	// (whose answer is typed: nothing of it reaches the MCP server's
	// stdout, the protocol's channel).
	var a api.API = localapi.API{Env: &b.f.Env}
	if b.remote {
		a = localapi.Client{Env: &b.with(io.Discard, io.Discard).Env}
	}
	r, err := a.Status(context.Background(), api.StatusRequest{Fingerprint: fp})
	if err != nil {
		return nil, nil, err
	}
	return r, r.Refusal, nil
}

func (b *mcpBackend) Receipt(id string) ([]json.RawMessage, error) {
	// The API the CLI's receipts show calls: in-process, or the
	// service's, which redacts for a caller with no key of the policy.
	var a api.API = localapi.API{Env: &b.f.Env}
	if b.remote {
		a = localapi.Client{Env: &b.with(io.Discard, io.Discard).Env}
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

func (b *mcpBackend) Run(fp string, inline map[string][]byte) (*mcpapi.RunResult, error) {
	if len(inline) > 0 {
		return nil, &localapi.UsageError{Msg: "only MCP over HTTP takes a file's content inline"}
	}
	b.inflight.Add(1)
	defer b.inflight.Done()
	// The API the CLI's run calls: in-process, or the service's, which
	// relays the program's output. No stdin (the program reads
	// /dev/null), and the output goes to buffers: the MCP stream is never
	// the program's.
	var a api.API = localapi.API{Env: &b.f.Env}
	if b.remote {
		a = localapi.Client{Env: &b.with(io.Discard, io.Discard).Env}
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
func (b *mcpBackend) secrets() []string {
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

func (b *mcpBackend) ErrorCode(err error) string { return localapi.ErrorCode(err) }

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

func (b *mcpBackend) Wait(ctx context.Context, fp string, timeout time.Duration, progress func(string)) (any, *refusal.Error, bool, error) {
	// The API the CLI's status --wait calls: in-process, or the
	// service's, whose client asks again after each bounded wait.
	var a api.API = localapi.API{Env: &b.f.Env}
	if b.remote {
		a = localapi.Client{Env: &b.with(io.Discard, io.Discard).Env, WaitSlice: remoteWaitSlice}
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
