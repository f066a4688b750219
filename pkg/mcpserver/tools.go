package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// planPrefix names an operation's plan tool: plan_config-push. Operation
// names (^[a-z][a-z0-9-]{0,62}$) are valid in MCP tool names as they are.
const planPrefix = "plan_"

// tool is one tool the server may expose.
type tool struct {
	def *mcp.Tool
	// role is what the server's principal must hold to see and call the
	// tool; "" for anyone.
	role string
	// writes marks a tool that changes state (a stored plan, a run): a
	// read-only scope omits it.
	writes bool
	// runs marks run, which a scope offers only with AllowRun.
	runs    bool
	handler mcp.ToolHandler
}

// runTool is the name of the tool that runs an approved plan.
const runTool = "run"

// catalogue derives every tool there may be from the registry. Nothing else
// adds a tool; which of them a server exposes is [ResolveScope]'s decision.
func catalogue(reg *operations.Registry, h *handlers) []*tool {
	tools := []*tool{
		{def: &mcp.Tool{
			Name:  "list_operations",
			Title: "List operations",
			Description: "List the operations of prod-write's registry: for each, its description, whether it is mutating, " +
				"its targets, typed params and files, environment and accepted approval paths. The same as `prod-write ops list --json`. " +
				"Each operation has a plan_OPERATION tool.",
			InputSchema: object(),
			Annotations: readOnly(),
		}, handler: h.listOperations},
		{def: &mcp.Tool{
			Name:  "status",
			Title: "Plan status",
			Description: "Show a stored plan's evidence and what is still missing before it may run: the fingerprint recomputed from reality, " +
				"every record (who, which path, expiry, uses, whether it counts and why not), any veto, and the gate's verdict. " +
				"The same as `prod-write status FP --json`. isError when run would not pass the gate now; the result then carries the " +
				"refusal (code, reason, missing) and the full status.",
			InputSchema: object(fingerprintProp()),
			Annotations: readOnly(),
		}, handler: h.status},
		{def: &mcp.Tool{
			Name:  "show_receipt",
			Title: "Show receipt",
			Description: "Show the receipt journal's entries for one run (by run id, at least 6 characters of it) or one entry (by sequence number), " +
				"unverified. The same as `prod-write receipts show ID`.",
			InputSchema: object(prop{"id", &jsonschema.Schema{Type: "string", MinLength: ptr(1),
				Description: "a journal sequence number, or a run id or a prefix of it of at least 6 characters"}}),
			Annotations: readOnly(),
		}, handler: h.showReceipt},
	}
	for _, op := range reg.All() {
		// Planning stores a signed plan: a write, though not to production.
		tools = append(tools, &tool{def: planTool(op), role: approval.RoleAgent, writes: true, handler: h.plan(op.Name)})
	}
	// run needs no role of the server's principal: the gate, not the
	// caller, decides whether the plan may run.
	tools = append(tools, &tool{def: &mcp.Tool{
		Name:  runTool,
		Title: "Run an approved plan",
		Description: "Run a stored plan, the same as `prod-write run FP`: recompute its fingerprint from reality, pass the gate " +
			"(the approval it needs is consumed), write a durable intent receipt, execute the program with no shell, write the outcome receipt. " +
			"Refused, and nothing runs, unless the plan was approved. Returns the exit code, the receipt numbers and the program's output " +
			"(bounded, secrets redacted); isError when refused or when the program exits non-zero.",
		InputSchema: object(fingerprintProp()),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}, writes: true, runs: true, handler: h.run})
	return tools
}

// planTool is the plan tool of op: its input schema is op's targets, typed
// params and files, each required as the CLI requires them.
func planTool(op *operations.Operation) *mcp.Tool {
	props := []prop{{"target", &jsonschema.Schema{Type: "string", Enum: anys(op.Targets), Description: "the target environment"}}}
	if len(op.Params) > 0 {
		var ps []prop
		for _, name := range slices.Sorted(maps.Keys(op.Params)) {
			ps = append(ps, prop{name, paramSchema(op.Params[name])})
		}
		params := object(ps...)
		params.Description = "the operation's parameters, each validated as declared in the registry"
		props = append(props, prop{"params", params})
	}
	if len(op.Files) > 0 {
		var fs []prop
		for _, name := range slices.Sorted(maps.Keys(op.Files)) {
			f := op.Files[name]
			desc := fmt.Sprintf("path of the file (absolute, or relative to the server's working directory), at most %d bytes; its bytes are bound by the fingerprint", int64(f.MaxSize))
			if f.Description != "" {
				desc = f.Description + ": " + desc
			}
			fs = append(fs, prop{name, &jsonschema.Schema{Type: "string", MinLength: ptr(1), Description: desc}})
		}
		files := object(fs...)
		files.Description = "the operation's file parameters, as paths"
		props = append(props, prop{"files", files})
	}
	return &mcp.Tool{
		Name:        planPrefix + op.Name,
		Title:       "Plan " + op.Name,
		Description: planDescription(op),
		InputSchema: object(props...),
		// Planning stores a record but changes nothing in production, and
		// the same inputs give the same plan.
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}
}

func planDescription(op *operations.Operation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Plan operation %s", op.Name)
	if op.Description != "" {
		fmt.Fprintf(&b, ": %s", strings.TrimSuffix(op.Description, "."))
	}
	b.WriteString(". ")
	if op.IsMutating() {
		fmt.Fprintf(&b, "Mutating: it runs only after approval (accepted paths: %s; %d approver(s) on smith+trinity). ",
			strings.Join(op.Approval.Paths, ", "), op.Approval.Approvers)
	} else {
		b.WriteString("Not mutating: it needs no approval, and a run still leaves a receipt. ")
	}
	b.WriteString("Planning runs nothing: it validates the inputs, resolves the program on the secure path, hashes it and each file, " +
		"and stores the plan signed by this server's key. Returns the plan and its fingerprint, the same as `prod-write plan " +
		op.Name + " --json`; isError with the typed refusal when the inputs do not validate.")
	return b.String()
}

// paramSchema carries a param's type, pattern, enum and range into JSON
// Schema. The registry still decides: the schema tells a client how to
// call, and every value is validated again by the registry.
func paramSchema(p operations.Param) *jsonschema.Schema {
	var s *jsonschema.Schema
	desc := p.Description
	if p.Type == "integer" {
		s = &jsonschema.Schema{Type: "integer"}
		if p.Min != nil {
			s.Minimum = ptr(float64(*p.Min))
		}
		if p.Max != nil {
			s.Maximum = ptr(float64(*p.Max))
		}
		for _, e := range p.Enum {
			if n, err := strconv.ParseInt(e, 10, 64); err == nil {
				s.Enum = append(s.Enum, n)
			} else {
				s.Enum = append(s.Enum, e)
			}
		}
		// JSON Schema applies a pattern to strings only; say it instead.
		if p.Pattern != "" {
			desc = strings.TrimSpace(desc + " (its decimal form must match " + anchored(p.Pattern) + ")")
		}
	} else {
		s = &jsonschema.Schema{Type: "string", Enum: anys(p.Enum)}
		if p.Pattern != "" {
			s.Pattern = anchored(p.Pattern)
		}
	}
	s.Description = desc
	return s
}

// anchored is a registry pattern as JSON Schema states it: the registry
// matches the whole value, a JSON Schema pattern any part of it.
func anchored(pattern string) string { return "^(?:" + pattern + ")$" }

type prop struct {
	name   string
	schema *jsonschema.Schema
}

// object is a closed object schema whose properties are all required.
func object(props ...prop) *jsonschema.Schema {
	s := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{}, AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}
	for _, p := range props {
		s.Properties[p.name] = p.schema
		s.Required = append(s.Required, p.name)
		s.PropertyOrder = append(s.PropertyOrder, p.name)
	}
	return s
}

var fpPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^sha256:[0-9a-f]{64}$`) }) // compiled on first use, not at every start

func fingerprintProp() prop {
	return prop{"fingerprint", &jsonschema.Schema{Type: "string", Pattern: fpPattern().String(), Description: "the plan's fingerprint, as a plan tool returned it"}}
}

func readOnly() *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}
}

func ptr[T any](v T) *T { return &v }

func anys(in []string) []any {
	if len(in) == 0 {
		return nil
	}
	out := make([]any, len(in))
	for i, v := range in {
		out[i] = v
	}
	return out
}

// handlers are the tools' handlers. Each one ran: whatever happens, it
// returns a result (isError on failure), never a protocol error.
type handlers struct{ b Backend }

func (h *handlers) listOperations(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	if err := decodeArgs(req, &struct{}{}); err != nil {
		return h.failure(err), nil
	}
	reg, err := h.b.Registry()
	if err != nil {
		return h.failure(err), nil
	}
	return result(map[string]any{"operations": reg.All()}, false), nil
}

func (h *handlers) plan(op string) mcp.ToolHandler {
	return func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		pr, err := planArgs(op, req)
		if err != nil {
			return h.failure(err), nil
		}
		out, err := h.b.Plan(pr)
		if err != nil {
			return h.failure(err), nil
		}
		return result(out, false), nil
	}
}

func (h *handlers) status(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	fp, err := fingerprintArg(req)
	if err != nil {
		return h.failure(err), nil
	}
	report, r, err := h.b.Status(fp)
	if err != nil {
		return h.failure(err), nil
	}
	if r != nil {
		return result(struct {
			refused
			Status any `json:"status"`
		}{refused{"refused", r}, report}, true), nil
	}
	return result(report, false), nil
}

func (h *handlers) showReceipt(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		ID string `json:"id"`
	}
	if err := decodeArgs(req, &in); err != nil {
		return h.failure(err), nil
	}
	if in.ID == "" {
		return h.failure(argError(req, "id is required")), nil
	}
	entries, err := h.b.Receipt(in.ID)
	if err != nil {
		return h.failure(err), nil
	}
	return result(map[string]any{"receipts": entries}, false), nil
}

func (h *handlers) run(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	fp, err := fingerprintArg(req)
	if err != nil {
		return h.failure(err), nil
	}
	res, err := h.b.Run(fp)
	if err != nil {
		return h.failure(err), nil
	}
	return result(res, res.ExitCode != 0), nil
}

// failure is a tool that ran and failed, reported as the CLI reports it
// with --json: the typed refusal, or an error with its stable code.
func (h *handlers) failure(err error) *mcp.CallToolResult {
	if r, ok := refusal.As(err); ok {
		return result(refused{"refused", r}, true)
	}
	return result(map[string]string{"outcome": "error", "code": h.b.ErrorCode(err), "error": err.Error()}, true)
}

// result carries v both as JSON text, for a model to read, and as
// structured content.
func result(v any, isError bool) *mcp.CallToolResult {
	b, err := marshal(v)
	if err != nil {
		b, _ = marshal(map[string]string{"outcome": "error", "code": "internal", "error": fmt.Sprintf("encoding the result: %v", err)})
		isError = true
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
		StructuredContent: json.RawMessage(b),
		IsError:           isError,
	}
}

// decodeArgs decodes a call's arguments into v strictly: an unknown key or
// a value of the wrong type is a param_invalid refusal.
func decodeArgs(req *mcp.CallToolRequest, v any) error {
	raw := bytes.TrimSpace(req.Params.Arguments)
	if len(raw) == 0 || string(raw) == "null" {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return argError(req, "arguments: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

func argError(req *mcp.CallToolRequest, format string, args ...any) *refusal.Error {
	r := refusal.New(refusal.ParamInvalid, req.Params.Name+": "+format, args...)
	if op, ok := strings.CutPrefix(req.Params.Name, planPrefix); ok {
		r.For(op, "")
	}
	return r
}

func fingerprintArg(req *mcp.CallToolRequest) (string, error) {
	var in struct {
		Fingerprint string `json:"fingerprint"`
	}
	if err := decodeArgs(req, &in); err != nil {
		return "", err
	}
	if in.Fingerprint == "" {
		return "", argError(req, "fingerprint is required").Needs("fingerprint")
	}
	return in.Fingerprint, nil
}

var integerRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^-?[0-9]+$`) }) // compiled on first use, not at every start

// planArgs decodes a plan tool's arguments into the request the CLI would
// make. A param may be a string or, for integer params, a JSON integer;
// either way it reaches the registry's validation as the decimal text the
// CLI's --param would carry.
func planArgs(op string, req *mcp.CallToolRequest) (PlanRequest, error) {
	var in struct {
		Target string                     `json:"target"`
		Params map[string]json.RawMessage `json:"params"`
		Files  map[string]string          `json:"files"`
	}
	if err := decodeArgs(req, &in); err != nil {
		return PlanRequest{}, err
	}
	pr := PlanRequest{Operation: op, Target: in.Target, Params: map[string]string{}, Files: map[string]string{}}
	for name, raw := range in.Params {
		raw = bytes.TrimSpace(raw)
		switch {
		case len(raw) > 0 && raw[0] == '"':
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return PlanRequest{}, argError(req, "param %s: %v", name, err)
			}
			pr.Params[name] = s
		case integerRE().Match(raw):
			pr.Params[name] = string(raw)
		default:
			return PlanRequest{}, argError(req, "param %s: want a string or an integer", name)
		}
	}
	for name, path := range in.Files {
		pr.Files[name] = path
	}
	return pr, nil
}
