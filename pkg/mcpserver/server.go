// Package mcpserver serves prod-write's agent surface over the Model Context
// Protocol (docs/DESIGN.md §12), over stdio and, in the runner service (docs/DESIGN.md §13),
// over Streamable HTTP.
//
// # Tools
//
// The tools are derived, never listed by hand: list_operations, one
// plan_OPERATION tool per operation of the registry (its input schema built
// from the operation's targets, typed params and files), status,
// show_receipt and run. Each calls the CLI's own code path through a
// [Backend], so a plan made over MCP has the fingerprint the CLI gives for
// the same inputs, and run passes the one gate.
//
// # Scope
//
// A server acts for one principal: over stdio ([New]) the principal of its
// key, over Streamable HTTP ([NewHTTPHandler]) the principal a bearer token
// maps to. One function, [ResolveScope], decides for both which tools
// exist, from that principal's roles and a [Scope]: a plan tool needs the
// agent role; a read-only scope omits every tool that writes (each plan
// tool, since planning stores a signed plan, and run) and keeps
// list_operations, status, show_receipt and explain; run is offered only with
// AllowRun (--allow-run on stdio; allow_run and the service's --allow-run
// over HTTP), never in a read-only scope, and the gate, not the caller,
// decides whether a plan runs. Filing, deciding and recording a Gera
// decision are never served over MCP at all (docs/AGENTS.md says why). A
// tool outside the scope is not added to the server, so it is absent from
// tools/list; a call to it by name is refused by a receiving middleware
// before any handler runs, and a tool's role is checked again against the
// trust policy as it is at call time.
//
// # Stdio
//
// `prod-write mcp` serves over [StdioTransport]: the SDK's stdio transport
// behind a line filter, so that a malformed line is answered with a
// JSON-RPC error instead of ending the session, and every request read
// before stdin ends is answered before the session ends.
//
// # Schemas
//
// A plan tool's input schema states each param's type, enum, range and
// pattern. A registry pattern (Go RE2) reaches it only translated into the
// ECMA-262 dialect JSON Schema reads, exactly, or, when that cannot be
// done, not at all, the param's description then quoting it. A plan tool's
// arguments are held to the schema's JSON types, never converted.
//
// # Tokens
//
// Over HTTP, a [Tokens] file maps the sha256 of each bearer token, never
// the token, to a principal and a scope ([OpenTokensFile]). A request without
// a known bearer gets 401 and reaches no backend; the bearer is dropped
// from the request once resolved, and appears in no log, error or
// response. Each token has its own server and session table, so a session
// started with one token is unknown to every other.
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
	"log/slog"
	"sort"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/visible"
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
	// Over HTTP it is a ceiling: a token's allow_run counts only with it.
	AllowRun bool
	// ReadOnly omits every tool that writes (see [Scope]). Over HTTP it is
	// a ceiling: every token is then read-only.
	ReadOnly bool
	// Version is reported to clients.
	Version string
	// Logger receives the HTTP handler's events (a refused bearer, a
	// server that could not be built); nil discards them. No bearer value
	// ever reaches it.
	Logger *slog.Logger
	// Calls, when set (the runner service's), counts each call, so that
	// a stop treats it as a call on the socket, and refuses requests once
	// the service stops: see [NewHTTPHandler].
	Calls mcpapi.Calls
	// Rate and Burst bound each principal's requests over HTTP, all its
	// tokens together (a token bucket, docs/adr/0046-mcp-http-origin-token-type-limits.md):
	// zero means [DefaultRate] and [DefaultBurst].
	Rate  rate.Limit
	Burst int
}

// DefaultRate and DefaultBurst are a principal's rate limit over HTTP when
// [Options] sets none: room for an agent's bursts of calls, never for a
// loop that floods the service.
const (
	DefaultRate  rate.Limit = 10
	DefaultBurst int        = 50
)

// scope returns the scope the options give a stdio server, and the ceiling
// they put on every HTTP token.
func (o Options) scope() Scope { return Scope{ReadOnly: o.ReadOnly, AllowRun: o.AllowRun} }

// New builds the stdio server for b's registry and principal as they are
// now, in the scope the options give. A registry or key that cannot be
// loaded is an error: the server does not start half-configured.
func New(b Backend, o Options) (*mcp.Server, error) {
	srv, _, err := build(b, o.scope(), o.Version, hints{
		runWhy:   "this server was started without --allow-run",
		run:      "prod-write mcp --allow-run",
		readOnly: "a server that is not read-only",
	}, o.Calls, false)
	return srv, err
}

// hints say, in a refusal, why a tool the principal could use is omitted and
// what would expose it; they differ between a stdio server (its flags) and
// an HTTP token (its entry in the tokens file).
type hints struct{ runWhy, run, readOnly string }

// build makes the server for b acting under s, whichever the transport:
// [ResolveScope] decides its tools, and the receiving middleware refuses a
// call to any other before a handler runs. It also returns the scope
// decision, with the principal the tools were chosen for.
//
// With inline (HTTP), a file is content supplied in the call, not a path:
// the caller shares no file system with the service.
func build(b Backend, s Scope, version string, hs hints, calls mcpapi.Calls, inline bool) (*mcp.Server, *scope, error) {
	reg, err := b.Registry()
	if err != nil {
		return nil, nil, err
	}
	pr, err := b.Principal()
	if err != nil {
		return nil, nil, err
	}
	allowed := ResolveScope(reg, pr, s)
	h := &handlers{b: b, inline: inline}
	sc := &scope{b: b, exposed: map[string]*tool{}, registry: reg, principal: pr, scope: s, hints: hs}
	for _, t := range catalogue(reg, h) {
		if allowed[t.def.Name] {
			sc.exposed[t.def.Name] = t
		}
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "prod-write", Version: version}, &mcp.ServerOptions{
		Instructions: instructions(pr, sc),
		// No logging capability: nothing but tool results crosses the wire.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	for _, name := range sc.names() {
		srv.AddTool(sc.exposed[name].def, sc.exposed[name].handler)
	}
	srv.AddReceivingMiddleware(sc.middleware)
	if calls != nil {
		// Outermost: a call refused for its scope is still a call.
		srv.AddReceivingMiddleware(joined(calls))
	}
	return srv, sc, nil
}

// joined makes each request a call of the service's (Options.Calls): a stop
// waits for its handler to return, and its context is also done once the
// service stops, which ends a wait_for_decision (pending, as when its
// request is cancelled) and nothing else: run and plan ignore it. A request
// that comes once the service stops is refused before any handler runs.
// Notifications are not calls: nothing answers them.
func joined(calls mcpapi.Calls) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if strings.HasPrefix(method, "notifications/") {
				return next(ctx, method, req)
			}
			stop, done, ok := calls.Join()
			if !ok {
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: errStopping}
			}
			defer done()
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(stop, cancel)()
			return next(ctx, method, req)
		}
	}
}

// errStopping is the answer to a request that comes once the runner
// service stops.
const errStopping = "the runner service is stopping: nothing was done; call again once it is back"

// scope decides which tool calls reach a handler.
type scope struct {
	b       Backend
	exposed map[string]*tool
	// registry and principal are as they were when the tools were chosen.
	registry  *operations.Registry
	principal *approval.Principal
	scope     Scope
	hints     hints
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
	if name == runTool {
		if s.scope.ReadOnly {
			return refusal.New(OutOfScope, "run is not served in a read-only scope").Needs(s.hints.readOnly)
		}
		return refusal.New(refusal.RoleMissing, "run is not served: %s", s.hints.runWhy).Needs(s.hints.run)
	}
	if op, ok := strings.CutPrefix(name, planPrefix); ok {
		if _, known := s.registry.Get(op); !known {
			return refusal.New(refusal.OperationAbsent, "no operation named %q is in the registry", op).For(op, "")
		}
		if s.scope.ReadOnly {
			return refusal.New(OutOfScope, "%s is not served in a read-only scope: planning stores a signed plan", name).Needs(s.hints.readOnly).For(op, "")
		}
		return missingRole(s.principal, name, approval.RoleAgent).For(op, "")
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
	// A model relays what it reads to people: what would not show as
	// itself is written as \u escapes, the value the same
	// (docs/adr/0062-showing-agent-text.md).
	return visible.JSON(bytes.TrimRight(buf.Bytes(), "\n")), nil
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
	if s.scope.ReadOnly {
		text += " This scope is read-only: you can list operations and read a plan's status and receipts, but not plan or run."
	}
	if _, ok := s.exposed[runTool]; ok {
		text += " run executes a plan only when the gate passes, and every run leaves a receipt (show_receipt)."
	}
	return text
}
