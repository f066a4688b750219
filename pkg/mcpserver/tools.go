package mcpserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/mcpapi"
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

// waitTool is the name of the tool that waits for a decision; it waits at
// most maxWait, by default defaultWait.
const (
	waitTool    = "wait_for_decision"
	maxWait     = 600
	defaultWait = 300
)

func waitSchema() *jsonschema.Schema {
	s := object(fingerprintProp(), prop{"timeout_seconds", &jsonschema.Schema{Type: "integer", Minimum: ptr(1.0), Maximum: ptr(float64(maxWait)),
		Default: json.RawMessage(strconv.Itoa(defaultWait)), Description: fmt.Sprintf("how long to wait at most, in seconds (default %d, at most %d)", defaultWait, maxWait)}})
	s.Required = []string{"fingerprint"}
	return s
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
			Name:  waitTool,
			Title: "Wait for the decision",
			Description: "Wait until a stored plan's decision request is decided, then return how: \"approved\" (the gate is open: call run), " +
				"\"denied\" (a veto, with the approver's reason verbatim: change what it names and plan again), \"withdrawn\" or \"expired\" " +
				"(nobody answered in time: plan and ask again); \"pending\" when timeout_seconds passed first (call it again). " +
				"Sends progress notifications while it waits when the call carries a progress token. The same as " +
				"`prod-write status FP --wait --timeout T --json`. isError when denied, withdrawn or expired.",
			InputSchema: waitSchema(),
			Annotations: readOnly(),
		}, handler: h.wait},
		{def: &mcp.Tool{
			Name:  "show_receipt",
			Title: "Show receipt",
			Description: "Show the receipt journal's entries for one run (by run id, at least 6 characters of it) or one entry (by sequence number), " +
				"unverified. The same as `prod-write receipts show ID`.",
			InputSchema: object(prop{"id", &jsonschema.Schema{Type: "string", MinLength: ptr(1),
				Description: "a journal sequence number, or a run id or a prefix of it of at least 6 characters"}}),
			Annotations: readOnly(),
		}, handler: h.showReceipt},
		{def: &mcp.Tool{
			Name:  "explain",
			Title: "Why was this allowed?",
			Description: "Explain, in one sentence a person can check and as fields, why a run was allowed or why a plan would or would not run now: " +
				"the approval path (Gera go N of M, or a certainty record by its filer + approvals and the channel of each: Slack, GitHub or the CLI), " +
				"the policy and registry digests it was judged by, and the veto rules checked. Give a fingerprint (before a run, as `prod-write status FP` explains it) " +
				"or a run id or the sequence number of an intent receipt (after a run, as `prod-write receipts show ID` explains it).",
			InputSchema: object(prop{"id", &jsonschema.Schema{Type: "string", MinLength: ptr(1),
				Description: "a plan's fingerprint (sha256: and 64 hex digits), a run id or a prefix of it of at least 6 characters, or an intent receipt's sequence number"}}),
			Annotations: readOnly(),
		}, handler: h.explain},
	}
	for _, op := range reg.All() {
		// Planning stores a signed plan: a write, though not to production.
		tools = append(tools, &tool{def: planTool(op, h.inline), role: approval.RoleAgent, writes: true, handler: h.plan(op)})
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
		InputSchema: runSchema(h.inline),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}, writes: true, runs: true, handler: h.run})
	return tools
}

// runSchema is run's input: the fingerprint and, over HTTP, optionally the
// content of each file the plan bound as supplied inline, again: the plan
// keeps it, so none is needed (docs/adr/0063-file-content-kept-with-the-plan.md).
func runSchema(inline bool) *jsonschema.Schema {
	if !inline {
		return object(fingerprintProp())
	}
	files := &jsonschema.Schema{Type: "object", AdditionalProperties: inlineFileSchema(fmt.Sprintf("at most %d bytes", mcpapi.MaxInlineFile)),
		Description: fmt.Sprintf("not needed: a plan keeps the content of its files supplied inline, and run takes it from there. If given, by file name, it must be the same content (at most %d bytes in all)", mcpapi.MaxInlineTotal)}
	s := object(fingerprintProp(), prop{"files", files})
	s.Required = []string{"fingerprint"}
	return s
}

// inlineFileSchema is a file supplied inline: its content, as UTF-8 text
// or, with encoding "base64", standard base64. Only the content is
// required.
func inlineFileSchema(desc string) *jsonschema.Schema {
	s := object(
		prop{"content", &jsonschema.Schema{Type: "string", Description: "the file's bytes: UTF-8 text, or base64 when encoding says so"}},
		prop{"encoding", &jsonschema.Schema{Type: "string", Enum: []any{"utf-8", "base64"}, Default: json.RawMessage(`"utf-8"`), Description: "how content encodes the bytes"}},
	)
	s.Required = []string{"content"}
	s.Description = desc
	return s
}

// planTool is the plan tool of op: its input schema is op's targets, typed
// params and files, each required as the CLI requires them. A file is a
// path over stdio; with inline (MCP over HTTP, whose caller shares no
// file system with the service) it is its content.
func planTool(op *operations.Operation, inline bool) *mcp.Tool {
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
			if inline {
				desc := fmt.Sprintf("the file's content, at most %d bytes (and %d over MCP HTTP); its bytes are bound by the fingerprint, and the plan keeps none of them: run takes them again", min(int64(f.MaxSize), mcpapi.MaxInlineFile), mcpapi.MaxInlineFile)
				if f.Description != "" {
					desc = f.Description + ": " + desc
				}
				fs = append(fs, prop{name, inlineFileSchema(desc)})
				continue
			}
			desc := fmt.Sprintf("path of the file (absolute, or relative to the server's working directory), at most %d bytes; its bytes are bound by the fingerprint", int64(f.MaxSize))
			if f.Description != "" {
				desc = f.Description + ": " + desc
			}
			fs = append(fs, prop{name, &jsonschema.Schema{Type: "string", MinLength: ptr(1), Description: desc}})
		}
		files := object(fs...)
		files.Description = "the operation's file parameters, as paths"
		if inline {
			files.Description = fmt.Sprintf("the operation's file parameters, each as its content supplied inline (at most %d bytes in all)", mcpapi.MaxInlineTotal)
		}
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
		fmt.Fprintf(&b, "Mutating: it runs only after approval (accepted paths: %s; %d approver(s) on record+approvals). ",
			strings.Join(operations.PathNames(op.Approval.Paths), ", "), op.Approval.Approvers)
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
//
// A pattern reaches the schema only as [ecmaPattern] translates it, never
// as the registry's RE2 text, which ECMA-262 validators reject or read
// otherwise; one that cannot be translated exactly is stated in the
// description instead.
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
			desc = strings.TrimSpace(desc + " (its decimal form must match the RE2 pattern " + anchored(p.Pattern) + ")")
		}
	} else {
		s = &jsonschema.Schema{Type: "string", Enum: anys(p.Enum)}
		if p.Pattern != "" {
			if ecma, ok := ecmaPattern(p.Pattern); ok {
				s.Pattern = ecma
			} else {
				desc = strings.TrimSpace(desc + " (the server checks the value against the RE2 pattern " + anchored(p.Pattern) +
					", which a JSON Schema pattern cannot state exactly, so this schema has none)")
			}
		}
	}
	s.Description = desc
	return s
}

// anchored is a registry pattern as the registry matches it: the whole
// value (a JSON Schema pattern matches any part of it).
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
type handlers struct {
	b Backend
	// inline: files are content supplied in the call (MCP over HTTP),
	// not paths.
	inline bool
}

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

func (h *handlers) plan(op *operations.Operation) mcp.ToolHandler {
	return func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		pr, err := planArgs(op, req, h.inline)
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

// waitProgressEvery is how often a waiting call sends a progress
// notification (besides one when it starts waiting).
var waitProgressEvery = 10 * time.Second

func (h *handlers) wait(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		Fingerprint string `json:"fingerprint"`
		Timeout     *int   `json:"timeout_seconds"`
	}
	if err := decodeArgs(req, &in); err != nil {
		return h.failure(err), nil
	}
	if in.Fingerprint == "" {
		return h.failure(argError(req, "fingerprint is required").Needs("fingerprint")), nil
	}
	if !fpPattern().MatchString(in.Fingerprint) {
		return h.failure(argError(req, "fingerprint %q is not sha256: and 64 lowercase hex digits", in.Fingerprint)), nil
	}
	timeout := defaultWait
	if in.Timeout != nil {
		timeout = *in.Timeout
	}
	if timeout < 1 || timeout > maxWait {
		return h.failure(argError(req, "timeout_seconds %d: want 1 to %d", timeout, maxWait)), nil
	}
	token := req.Params.GetProgressToken()
	var sent float64
	var last time.Time
	progress := func(msg string) {
		if token == nil || req.Session == nil || (!last.IsZero() && time.Since(last) < waitProgressEvery) {
			return
		}
		last = time.Now()
		sent++
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: sent, Message: msg})
	}
	ask, done := h.elicitApproval(ctx, req, in.Fingerprint)
	if ask != nil {
		return ask, nil
	}
	report, r, pending, err := h.b.Wait(ctx, in.Fingerprint, time.Duration(timeout)*time.Second, progress)
	done(ctx, !pending && err == nil)
	if err != nil {
		return h.failure(err), nil
	}
	outcome := "approved"
	if pending {
		outcome = "pending"
	} else if r != nil {
		outcome = "refused"
		var st struct {
			Request struct {
				State string `json:"state"`
			} `json:"request"`
		}
		if b, err := json.Marshal(report); err == nil && json.Unmarshal(b, &st) == nil && st.Request.State != "" {
			outcome = st.Request.State
		}
	}
	out := struct {
		Outcome string         `json:"outcome"`
		Refusal *refusal.Error `json:"refusal,omitempty"`
		Status  any            `json:"status"`
	}{outcome, r, report}
	return result(out, r != nil && !pending), nil
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

// explain answers "why was this allowed?" from what status and receipts
// show already compute: no path of its own to the gate or the journal.
func (h *handlers) explain(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		ID string `json:"id"`
	}
	if err := decodeArgs(req, &in); err != nil {
		return h.failure(err), nil
	}
	if in.ID == "" {
		return h.failure(argError(req, "id is required")), nil
	}
	var docs []any
	if strings.HasPrefix(in.ID, "sha256:") {
		report, _, err := h.b.Status(in.ID)
		if err != nil {
			return h.failure(err), nil
		}
		docs = append(docs, report)
	} else {
		entries, err := h.b.Receipt(in.ID)
		if err != nil {
			return h.failure(err), nil
		}
		for _, e := range entries {
			docs = append(docs, e)
		}
	}
	for _, d := range docs {
		b, err := json.Marshal(d)
		if err != nil {
			return h.failure(err), nil
		}
		var doc struct {
			Explanation json.RawMessage `json:"explanation"`
		}
		if json.Unmarshal(b, &doc) == nil && len(doc.Explanation) > 0 && string(doc.Explanation) != "null" {
			return result(map[string]any{"explanation": doc.Explanation}, false), nil
		}
	}
	return h.failure(argError(req, "%s names no plan or intent receipt to explain (an outcome's run id explains its run)", in.ID)), nil
}

// approvalInput names the input request a wait makes for the approval page.
const approvalInput = "approval_page"

// elicitApproval, for a client that takes URL-mode elicitation, shows
// the agent's user the plan's approval page when a wait starts on a
// decision that needs a human (docs/adr/0048-approval-page.md):
// a link, never a form, since what an approver decides there is signed by
// the approver's own passkey, which neither the agent nor its client can
// answer for. Nothing is asked when the deployment serves no page, the
// gate is open, or the decision is no longer pending.
//
// On 2026-07-28 it is a multi-round-trip input request (SEP-2322): the
// first call returns it in place of a result (ask), and the client calls
// again with its response, whatever the user did with the link; that call
// waits. A client of an older protocol is sent the elicitation/create
// while the wait runs, not before it: its answer waits on its user, or
// never comes from a client that went away, and the wait must still end
// within its timeout_seconds, holding nothing after (the go-sdk, asked
// with an input request, would send it itself and wait for the answer
// without a bound). The returned done then says, once the wait ends
// decided, that the elicitation is complete
// (notifications/elicitation/complete), and withdraws an elicitation
// still unanswered (notifications/cancelled).
func (h *handlers) elicitApproval(ctx context.Context, req *mcp.CallToolRequest, fp string) (ask *mcp.CallToolResult, done func(ctx context.Context, decided bool)) {
	nothing := func(context.Context, bool) {}
	ss := req.Session
	if ss == nil {
		return nil, nothing
	}
	complete := func(eid string) func(context.Context, bool) {
		return func(ctx context.Context, decided bool) {
			if decided {
				_ = ss.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: eid})
			}
		}
	}
	if _, answered := req.Params.InputResponses[approvalInput]; answered {
		// The elicitation id came back as the request state: only ever a
		// notification to this same client, and only in its own form.
		eid := req.Params.RequestState
		if len(eid) != 32 || strings.Trim(eid, "0123456789abcdef") != "" {
			return nil, nothing
		}
		return nil, complete(eid)
	}
	ip := ss.InitializeParams()
	if ip == nil || ip.Capabilities == nil || ip.Capabilities.Elicitation == nil || ip.Capabilities.Elicitation.URL == nil {
		return nil, nothing
	}
	report, r, err := h.b.Status(fp)
	if err != nil || r == nil {
		return nil, nothing
	}
	page, pending := approvalPageOf(report)
	if page == "" || !pending {
		return nil, nothing
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, nothing
	}
	eid := hex.EncodeToString(id[:])
	params := &mcp.ElicitParams{Mode: "url", URL: page, ElicitationID: eid,
		Message: "This plan needs an approver's decision, made with their passkey on the approval page. Share the link with an approver."}
	if ip.ProtocolVersion >= multiRoundTrip {
		return &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{approvalInput: params}, RequestState: eid}, nothing
	}
	ectx, withdraw := context.WithCancel(ctx)
	asked := make(chan struct{})
	go func() {
		defer close(asked)
		// Whatever the answer, or none: the wait goes on.
		_, _ = ss.Elicit(ectx, params)
	}()
	said := complete(eid)
	return nil, func(ctx context.Context, decided bool) {
		said(ctx, decided)
		withdraw()
		<-asked
	}
}

// multiRoundTrip is the first protocol version with multi-round-trip
// requests (SEP-2322), by the go-sdk's rule: a client that negotiated it
// or later takes an input request in a result.
const multiRoundTrip = "2026-07-28"

// approvalPageOf reads a status report's approval page and whether its
// decision request is pending.
func approvalPageOf(report any) (page string, pending bool) {
	var st struct {
		ApprovalPage string `json:"approval_page"`
		Request      struct {
			State string `json:"state"`
		} `json:"request"`
	}
	b, err := json.Marshal(report)
	if err != nil || json.Unmarshal(b, &st) != nil {
		return "", false
	}
	return st.ApprovalPage, st.Request.State == "pending"
}

func (h *handlers) run(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var fp string
	var inline map[string][]byte
	var err error
	if h.inline {
		fp, inline, err = runArgs(req)
	} else {
		fp, err = fingerprintArg(req)
	}
	if err != nil {
		return h.failure(err), nil
	}
	res, err := h.b.Run(fp, inline)
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
// make, holding each value to the JSON type the tool's input schema gives
// it: the target, each string param and each file path a JSON string, each
// integer param a JSON number of integral value. A value of another type is
// a param_invalid refusal naming it, never converted: a number given for a
// string param is not its decimal text, nor a string for an integer param
// its number. An integer reaches the registry's validation as the decimal
// text the CLI's --param would carry.
//
// With inline (MCP over HTTP), a file is its content instead: see
// [inlineFiles].
func planArgs(op *operations.Operation, req *mcp.CallToolRequest, inline bool) (PlanRequest, error) {
	var in struct {
		Target json.RawMessage `json:"target"`
		Params json.RawMessage `json:"params"`
		Files  json.RawMessage `json:"files"`
	}
	if err := decodeArgs(req, &in); err != nil {
		return PlanRequest{}, err
	}
	pr := PlanRequest{Operation: op.Name, Params: map[string]string{}, Files: map[string]string{}}
	if in.Target != nil {
		if k := jsonKind(in.Target); k != "a string" {
			return PlanRequest{}, argError(req, "target: want a string, got %s", k).Needs("target as a JSON string")
		}
		json.Unmarshal(in.Target, &pr.Target)
	}
	params, err := argObject(req, "params", in.Params)
	if err != nil {
		return PlanRequest{}, err
	}
	for _, name := range slices.Sorted(maps.Keys(params)) {
		raw := params[name]
		p, declared := op.Params[name]
		switch k := jsonKind(raw); {
		case !declared:
			// The registry refuses it, whatever its type.
			return PlanRequest{}, argError(req, "operation %s declares no param %q", op.Name, name)
		case p.Type == "integer":
			text, ok := integerText(raw)
			if !ok {
				what := k
				if k == "a number" {
					what = "the number " + string(raw)
				}
				return PlanRequest{}, argError(req, "param %s: want an integer (a JSON number), got %s", name, what).Needs("param " + name + " as a JSON integer")
			}
			pr.Params[name] = text
		case k != "a string":
			return PlanRequest{}, argError(req, "param %s: want a string, got %s", name, k).Needs("param " + name + " as a JSON string")
		default:
			var v string
			json.Unmarshal(raw, &v)
			pr.Params[name] = v
		}
	}
	files, err := argObject(req, "files", in.Files)
	if err != nil {
		return PlanRequest{}, err
	}
	if inline {
		pr.Files = nil
		pr.Inline, err = inlineFiles(req, files, func(name string) bool { _, ok := op.Files[name]; return ok }, op.Name)
		return pr, err
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if k := jsonKind(files[name]); k != "a string" {
			return PlanRequest{}, argError(req, "file %s: want a path (a JSON string), got %s", name, k).Needs("file " + name + " as a JSON string")
		}
		var path string
		json.Unmarshal(files[name], &path)
		pr.Files[name] = path
	}
	return pr, nil
}

// runArgs decodes run's arguments over HTTP: the fingerprint and the
// files supplied inline.
func runArgs(req *mcp.CallToolRequest) (string, map[string][]byte, error) {
	var in struct {
		Fingerprint string          `json:"fingerprint"`
		Files       json.RawMessage `json:"files"`
	}
	if err := decodeArgs(req, &in); err != nil {
		return "", nil, err
	}
	if in.Fingerprint == "" {
		return "", nil, argError(req, "fingerprint is required").Needs("fingerprint")
	}
	files, err := argObject(req, "files", in.Files)
	if err != nil {
		return "", nil, err
	}
	// Which names the plan binds inline, the backend knows.
	inline, err := inlineFiles(req, files, func(string) bool { return true }, "")
	return in.Fingerprint, inline, err
}

// inlineFiles decodes files supplied inline, each {"content": …,
// "encoding": "utf-8" | "base64"}. They are attacker input to a
// privileged process: a name that declared refuses is refused, and so is
// content over [mcpapi.MaxInlineFile] bytes or, in all, over
// [mcpapi.MaxInlineTotal], judged from its encoded length before any of
// it is decoded; no refusal quotes content.
func inlineFiles(req *mcp.CallToolRequest, files map[string]json.RawMessage, declared func(string) bool, op string) (map[string][]byte, error) {
	out := map[string][]byte{}
	total := 0
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if !declared(name) {
			return nil, argError(req, "operation %s declares no file %q", op, name)
		}
		if k := jsonKind(files[name]); k != "an object" {
			return nil, argError(req, "file %s: want its content supplied inline ({\"content\": …}), got %s", name, k).Needs("file " + name + " as {\"content\": …}")
		}
		var f struct {
			Content  *string `json:"content"`
			Encoding string  `json:"encoding"`
		}
		dec := json.NewDecoder(bytes.NewReader(files[name]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil || f.Content == nil {
			return nil, argError(req, "file %s: want {\"content\": STRING, \"encoding\": \"utf-8\" or \"base64\"}", name).Needs("file " + name + " as {\"content\": …}")
		}
		size := len(*f.Content)
		switch f.Encoding {
		case "", "utf-8":
		case "base64":
			size = len(strings.TrimRight(*f.Content, "=")) * 3 / 4
		default:
			return nil, argError(req, "file %s: encoding must be \"utf-8\" or \"base64\"", name)
		}
		// Judged before decoding: bounded work whatever was sent.
		if size > mcpapi.MaxInlineFile {
			return nil, argError(req, "file %s: content over MCP HTTP's bound of %d bytes", name, mcpapi.MaxInlineFile)
		}
		if total += size; total > mcpapi.MaxInlineTotal {
			return nil, argError(req, "files: content over MCP HTTP's bound of %d bytes in all", mcpapi.MaxInlineTotal)
		}
		b := []byte(*f.Content)
		if f.Encoding == "base64" {
			var err error
			if b, err = base64.StdEncoding.DecodeString(*f.Content); err != nil {
				return nil, argError(req, "file %s: content is not standard base64", name)
			}
		}
		out[name] = b
	}
	return out, nil
}

// argObject decodes the argument name, absent or a JSON object.
func argObject(req *mcp.CallToolRequest, name string, raw json.RawMessage) (map[string]json.RawMessage, error) {
	if raw == nil {
		return nil, nil
	}
	if k := jsonKind(raw); k != "an object" {
		return nil, argError(req, "%s: want an object, got %s", name, k).Needs(name + " as a JSON object")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, argError(req, "%s: %v", name, err)
	}
	return m, nil
}

// jsonKind names the JSON type of a valid JSON value.
func jsonKind(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// integerText returns the decimal text of a JSON number whose value is an
// integer, as JSON Schema's "integer" counts it (3, 3.0 and 3e0 alike).
func integerText(raw json.RawMessage) (string, bool) {
	raw = bytes.TrimSpace(raw)
	if jsonKind(raw) != "a number" {
		return "", false
	}
	if integerRE().Match(raw) {
		if string(raw) == "-0" {
			return "0", true
		}
		return string(raw), true
	}
	// A fraction or an exponent. Bounded, so that 1e999999999 costs
	// nothing: the registry takes no integer beyond int64 anyway.
	lit := string(raw)
	if len(lit) > 64 {
		return "", false
	}
	if _, exp, ok := strings.Cut(strings.ToLower(lit), "e"); ok {
		if e, err := strconv.Atoi(exp); err != nil || e < -64 || e > 64 {
			return "", false
		}
	}
	r, ok := new(big.Rat).SetString(lit)
	if !ok || !r.IsInt() {
		return "", false
	}
	return r.Num().String(), true
}
