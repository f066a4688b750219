// Package mcpserver serves prod-write's agent surface over the Model Context
// Protocol (SPEC §12).
//
// # Tools
//
// The tools are derived, never listed by hand: list_operations, one
// plan_OPERATION tool per operation of the registry (its input schema built
// from the operation's targets, typed params and files), status and
// show_receipt; with [Options.AllowRun], run. Each calls the CLI's own code
// path through a [Backend], so a plan made over MCP has the fingerprint the
// CLI gives for the same inputs, and run passes the one gate.
//
// # Scope
//
// The server acts for the principal of its key. A tool whose role that
// principal lacks is not added to the server, so it is absent from
// tools/list; filing, deciding and recording a Gera decision are never
// served over MCP at all (docs/AGENTS.md says why). A call to a tool
// the server does not expose is refused by a receiving middleware before any
// handler runs, and the role is checked again against the trust policy as it
// is at call time.
//
// # Errors
//
// A refusal to call a tool is a JSON-RPC error whose data is the typed
// refusal ({"outcome":"refused","code":…}). A tool that ran and failed — a
// plan refused with param_invalid, a status whose gate is closed, a program
// that exited non-zero — returns a result with isError set, carrying the same
// JSON object the CLI prints with --json.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// ToolAbsent is the refusal code of a call to a tool that does not exist
// under any key.
const ToolAbsent refusal.Code = "tool_absent"

// Backend, PlanRequest and RunResult are defined in package mcpapi, which
// links no MCP SDK, so that package cli can implement Backend without it.
type (
	Backend     = mcpapi.Backend
	PlanRequest = mcpapi.PlanRequest
	RunResult   = mcpapi.RunResult
)

// Options configure the server.
type Options struct {
	// AllowRun exposes the run tool, which still passes the one gate.
	AllowRun bool
	// Version is reported to clients.
	Version string
}

// New builds the server for b's registry and principal as they are now.
// A registry or key that cannot be loaded is an error: the server does
// not start half-configured.
func New(b Backend, o Options) (*mcp.Server, error) {
	reg, err := b.Registry()
	if err != nil {
		return nil, err
	}
	pr, err := b.Principal()
	if err != nil {
		return nil, err
	}
	h := &handlers{b: b}
	s := &scope{b: b, exposed: map[string]*tool{}, registry: reg, principal: pr, allowRun: o.AllowRun}
	for _, t := range catalogue(reg, h, o) {
		if holds(pr, t.role) {
			s.exposed[t.def.Name] = t
		}
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "prod-write", Version: o.Version}, &mcp.ServerOptions{
		Instructions: instructions(pr, s),
		// No logging capability: nothing but tool results crosses the wire.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	for _, name := range s.names() {
		srv.AddTool(s.exposed[name].def, s.exposed[name].handler)
	}
	srv.AddReceivingMiddleware(s.middleware)
	return srv, nil
}

// holds reports whether pr may use a tool that needs role ("" for anyone).
func holds(pr *approval.Principal, role string) bool {
	return role == "" || (pr != nil && pr.Has(role))
}

// scope decides which tool calls reach a handler.
type scope struct {
	b       Backend
	exposed map[string]*tool
	// registry and principal are as they were when the tools were chosen.
	registry  *operations.Registry
	principal *approval.Principal
	allowRun  bool
}

func (s *scope) names() []string {
	out := make([]string, 0, len(s.exposed))
	for n := range s.exposed {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// middleware refuses a tools/call for a tool that is not exposed, or whose
// role the server's principal no longer holds, before any handler runs.
func (s *scope) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		p, ok := req.GetParams().(*mcp.CallToolParamsRaw)
		if !ok || p == nil {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "tools/call without params"}
		}
		if err := s.admit(p.Name); err != nil {
			return nil, err
		}
		return next(ctx, method, req)
	}
}

// admit returns nil when the named tool may run now, and otherwise the
// protocol error that refuses the call.
func (s *scope) admit(name string) error {
	t, ok := s.exposed[name]
	if !ok {
		return protocolRefusal(s.absent(name))
	}
	if t.role == "" {
		return nil
	}
	pr, err := s.b.Principal()
	if err != nil {
		if r, ok := refusal.As(err); ok {
			return protocolRefusal(r)
		}
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf("checking the key's principal: %v", err)}
	}
	if !holds(pr, t.role) {
		return protocolRefusal(missingRole(pr, name, t.role))
	}
	return nil
}

// never are tools that exist on the CLI but are never served over MCP,
// whatever the key, each with who acts instead (docs/AGENTS.md says why).
var never = map[string]string{
	"file":    "an operator's (role operator)",
	"decide":  "an approver's (role approver)",
	"approve": "an approver's (role approver)",
	"deny":    "an approver's (role approver)",
	"gera":    "Gera's (role gera)",
}

// absent is the refusal of a call to a tool the server does not expose.
func (s *scope) absent(name string) *refusal.Error {
	if who, ok := never[name]; ok {
		return refusal.New(refusal.RoleMissing, "%s is not served over MCP under any key: it is %s act, on the CLI or a bridge", name, who).Needs("a human using the CLI or a bridge")
	}
	if name == "run" && !s.allowRun {
		return refusal.New(refusal.RoleMissing, "run is not served: this server was started without --allow-run").Needs("prod-write mcp --allow-run")
	}
	if op, ok := strings.CutPrefix(name, planPrefix); ok {
		if _, known := s.registry.Get(op); known {
			return missingRole(s.principal, name, approval.RoleAgent).For(op, "")
		}
		return refusal.New(refusal.OperationAbsent, "no operation named %q is in the registry", op).For(op, "")
	}
	return refusal.New(ToolAbsent, "prod-write serves no tool named %q", name)
}

func missingRole(pr *approval.Principal, tool, role string) *refusal.Error {
	if pr == nil {
		return refusal.New(refusal.PrincipalUnknown, "%s needs a key, and this server has none", tool).Needs("a key: --key FILE or PROD_WRITE_KEY")
	}
	return refusal.New(refusal.RoleMissing, "%s does not hold the %s role that %s needs", pr.ID, role, tool).Needs("role " + role)
}

// refused is a refusal as the CLI prints it with --json.
type refused struct {
	Outcome string `json:"outcome"`
	*refusal.Error
}

// protocolRefusal is a refusal as a JSON-RPC error: the message is the
// sentence, the data the typed refusal.
func protocolRefusal(r *refusal.Error) error {
	data, _ := marshal(refused{"refused", r})
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: r.Error(), Data: data}
}

// marshal encodes v compactly, leaving <, > and & as they are (as the
// CLI's JSON output does).
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func instructions(pr *approval.Principal, s *scope) string {
	who := "You act for no principal: this server has no key, so it can read but not plan."
	if pr != nil {
		who = fmt.Sprintf("You act as principal %s (roles: %s).", pr.ID, strings.Join(pr.Roles, ", "))
	}
	text := who + " prod-write gates production writes: nothing runs unless the exact invocation was approved. " +
		"Call list_operations to see what exists, then a plan_OPERATION tool: it validates, fingerprints and stores " +
		"your plan, runs nothing, and returns the plan's fingerprint. Humans then approve it (a certainty record plus " +
		"an approval, or a standing Gera go); status shows what is present and what is missing. You cannot file, " +
		"approve, deny or record decisions over this server."
	if s.allowRun {
		text += " run executes a plan only when the gate passes, and every run leaves a receipt (show_receipt)."
	}
	return text
}
