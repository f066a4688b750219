package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/mcpserver"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// fakeBackend is a Backend with no deployment behind it. It records every
// call a tool handler makes (Principal, which the scope check itself calls,
// is not recorded), so a test can tell whether any handler ran.
type fakeBackend struct {
	reg *operations.Registry
	pr  *approval.Principal

	mu    sync.Mutex
	calls []string
}

func (f *fakeBackend) note(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

// handled returns the calls recorded since the last one and forgets them.
func (f *fakeBackend) handled() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.calls
	f.calls = nil
	return out
}

func (f *fakeBackend) Registry() (*operations.Registry, error) {
	f.note("registry")
	return f.reg, nil
}

func (f *fakeBackend) Principal() (*approval.Principal, error) { return f.pr, nil }

func (f *fakeBackend) Plan(req mcpserver.PlanRequest) (*api.PlanResult, error) {
	f.note("plan " + req.Operation)
	return &api.PlanResult{Plan: &operations.Plan{Fingerprint: "sha256:" + strings.Repeat("1", 64)}, Stored: true}, nil
}

func (f *fakeBackend) Status(string) (any, *refusal.Error, error) {
	f.note("status")
	return map[string]any{"allowed": true, "explanation": map[string]any{"allowed": true, "sentence": "Allowed without approval"}}, nil, nil
}

func (f *fakeBackend) Receipt(string) ([]json.RawMessage, error) {
	f.note("receipt")
	return []json.RawMessage{json.RawMessage(`{"seq":1}`)}, nil
}

func (f *fakeBackend) Run(fp string, _ map[string][]byte) (*mcpserver.RunResult, error) {
	f.note("run")
	return &mcpserver.RunResult{Outcome: "ran", Fingerprint: fp}, nil
}

func (f *fakeBackend) ErrorCode(error) string { return "internal" }

func (f *fakeBackend) Wait(_ context.Context, fp string, _ time.Duration, progress func(string)) (any, *refusal.Error, bool, error) {
	f.note("wait")
	progress("waiting for a decision")
	return map[string]any{"allowed": true, "request": map[string]any{"state": "approved"}}, nil, false, nil
}

// fakeRegistry is a registry of two operations, one mutating and one not,
// both of whose programs resolve on any Unix.
func fakeRegistry(t testing.TB) *operations.Registry {
	t.Helper()
	dir := t.TempDir()
	ops := `[[operation]]
name = "deploy"
program = "true"
targets = ["staging"]

[[operation]]
name = "inspect"
mutating = false
program = "true"
targets = ["staging"]
`
	if err := os.WriteFile(filepath.Join(dir, "ops.toml"), []byte(ops), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := operations.Load(dir, []string{"/usr/bin", "/bin"})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func newFake(t testing.TB, id string, roles ...string) *fakeBackend {
	return &fakeBackend{reg: fakeRegistry(t), pr: &approval.Principal{ID: id, Roles: roles}}
}

// A transport connects a client to a server for backend b in scope s.
type transport struct {
	name    string
	connect func(t *testing.T, b *fakeBackend, s mcpserver.Scope) *mcp.ClientSession
}

var transports = []transport{
	{"stdio", connectStdio},
	{"http", connectHTTP},
}

// connectStdio is `prod-write mcp`: New over an in-memory transport.
func connectStdio(t *testing.T, b *fakeBackend, s mcpserver.Scope) *mcp.ClientSession {
	t.Helper()
	srv, err := mcpserver.New(b, mcpserver.Options{ReadOnly: s.ReadOnly, AllowRun: s.AllowRun})
	if err != nil {
		t.Fatalf("mcpserver.New: %v", err)
	}
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs
}

// connectHTTP is the service: a tokens file with one token in scope s for
// b's principal, the handler on an httptest server (allowing run, so that
// the token alone decides), and the SDK's Streamable HTTP client sending
// the bearer.
func connectHTTP(t *testing.T, b *fakeBackend, s mcpserver.Scope) *mcp.ClientSession {
	t.Helper()
	bearer := "tok-" + t.Name()
	tokens := loadTokens(t, tokenEntry(bearer, b.pr.ID, s))
	h := mcpserver.NewHTTPHandler(tokens, func(tok mcpserver.Token) (mcpserver.Backend, error) { return b, nil }, mcpserver.Options{AllowRun: true})
	return dialHTTP(t, h, bearer)
}

// dialHTTP serves h and connects the SDK's Streamable HTTP client to it
// with the bearer.
func dialHTTP(t *testing.T, h http.Handler, bearer string) *mcp.ClientSession {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cs, err := connectBearer(srv.URL, bearer)
	if err != nil {
		t.Fatalf("connecting over HTTP: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func connectBearer(url, bearer string) (*mcp.ClientSession, error) {
	tr := &mcp.StreamableClientTransport{
		Endpoint:   url,
		HTTPClient: &http.Client{Transport: bearerTransport{bearer: bearer, base: http.DefaultTransport}},
		MaxRetries: -1,
	}
	return mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(context.Background(), tr, nil)
}

// bearerTransport adds `Authorization: Bearer …` to every request.
type bearerTransport struct {
	bearer string
	base   http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.bearer)
	return b.base.RoundTrip(r)
}

// tokenEntry is a [[token]] table for bearer.
func tokenEntry(bearer, principal string, s mcpserver.Scope) string {
	scope := mcpserver.ScopeAgent
	if s.ReadOnly {
		scope = mcpserver.ScopeReadOnly
	}
	return fmt.Sprintf("[[token]]\nsha256 = %q\nprincipal = %q\nscope = %q\nallow_run = %v\n", mcpserver.HashToken(bearer), principal, scope, s.AllowRun)
}

// loadTokens writes a tokens file, mode 0600, and loads it.
func loadTokens(t testing.TB, entries ...string) *mcpserver.Tokens {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.toml")
	if err := os.WriteFile(path, []byte(strings.Join(entries, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := mcpserver.LoadTokens(path)
	if err != nil {
		t.Fatalf("LoadTokens: %v", err)
	}
	return tokens
}

var (
	readOnly = mcpserver.Scope{ReadOnly: true}
	agent    = mcpserver.Scope{}
	agentRun = mcpserver.Scope{AllowRun: true}
)

// One table, both transports: under each scope, whether each tool is
// listed, and whether a call to it by name is refused as a JSON-RPC error
// (with the typed refusal the scope check writes, not the SDK's "unknown
// tool") before any handler runs, or reaches its handler.
func TestScopeOnEveryTransport(t *testing.T) {
	fp := map[string]any{"fingerprint": "sha256:" + strings.Repeat("0", 64)}
	args := map[string]any{
		"list_operations": nil,
		"status":          fp,
		"show_receipt":    map[string]any{"id": "1"},
		"explain":         map[string]any{"id": fp["fingerprint"]},
		"plan_deploy":     map[string]any{"target": "staging"},
		"plan_inspect":    map[string]any{"target": "staging"},
		"run":             fp,
		"file":            fp,
		"decide":          map[string]any{"fingerprint": fp["fingerprint"], "answer": "approve"},
		"gera":            fp,
	}
	type row struct {
		tool   string
		listed bool
		refuse refusal.Code // "" when the call reaches its handler
	}
	// What every scope shares: the read tools, and never filing or
	// deciding.
	common := []row{
		{"list_operations", true, ""},
		{"status", true, ""},
		{"show_receipt", true, ""},
		{"explain", true, ""},
		{"file", false, refusal.RoleMissing},
		{"decide", false, refusal.RoleMissing},
		{"gera", false, refusal.RoleMissing},
	}
	tests := []struct {
		name  string
		scope mcpserver.Scope
		rows  []row
	}{
		{"read-only", readOnly, append([]row{
			{"plan_deploy", false, mcpserver.OutOfScope},
			{"plan_inspect", false, mcpserver.OutOfScope},
			{"run", false, mcpserver.OutOfScope},
		}, common...)},
		// allow_run never reaches a read-only scope.
		{"read-only with run", mcpserver.Scope{ReadOnly: true, AllowRun: true}, append([]row{
			{"plan_deploy", false, mcpserver.OutOfScope},
			{"run", false, mcpserver.OutOfScope},
		}, common...)},
		{"agent", agent, append([]row{
			{"plan_deploy", true, ""},
			{"plan_inspect", true, ""},
			{"run", false, refusal.RoleMissing},
		}, common...)},
		{"agent with run", agentRun, append([]row{
			{"plan_deploy", true, ""},
			{"plan_inspect", true, ""},
			{"run", true, ""},
		}, common...)},
	}
	for _, tr := range transports {
		for _, tt := range tests {
			if tt.scope.ReadOnly && tt.scope.AllowRun && tr.name == "http" {
				continue // a tokens file refuses this entry (TestLoadTokensRefuses)
			}
			t.Run(tr.name+"/"+tt.name, func(t *testing.T) {
				b := newFake(t, "agent", approval.RoleAgent)
				cs := tr.connect(t, b, tt.scope)
				listed := toolNames(t, cs)
				b.handled()
				for _, r := range tt.rows {
					if got := slices.Contains(listed, r.tool); got != r.listed {
						t.Errorf("%s: listed = %v, want %v (tools: %v)", r.tool, got, r.listed, listed)
					}
					res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: r.tool, Arguments: args[r.tool]})
					calls := b.handled()
					if r.refuse == "" {
						if err != nil {
							t.Errorf("%s: protocol error %v, want the handler's result", r.tool, err)
						} else if res.IsError || len(calls) == 0 {
							t.Errorf("%s: isError=%v, handler calls %v: the handler did not run", r.tool, res.IsError, calls)
						}
						continue
					}
					if err == nil {
						t.Errorf("%s: got a result (isError=%v), want a JSON-RPC error", r.tool, res.IsError)
					} else if code := refusalCode(t, r.tool, err); code != r.refuse {
						t.Errorf("%s: refusal code %q, want %q (%v)", r.tool, code, r.refuse, err)
					}
					if len(calls) != 0 {
						t.Errorf("%s: handlers ran for a refused call: %v", r.tool, calls)
					}
				}
			})
		}
	}
}

// refusalCode checks that err is the JSON-RPC error of a refusal and
// returns its code.
func refusalCode(t *testing.T, tool string, err error) refusal.Code {
	t.Helper()
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		t.Errorf("%s: error %v (%T) is not a JSON-RPC error", tool, err, err)
		return ""
	}
	if werr.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("%s: JSON-RPC code %d, want %d", tool, werr.Code, jsonrpc.CodeInvalidParams)
	}
	var r struct {
		Outcome string       `json:"outcome"`
		Code    refusal.Code `json:"code"`
		Reason  string       `json:"reason"`
	}
	if err := json.Unmarshal(werr.Data, &r); err != nil || r.Outcome != "refused" || r.Reason == "" {
		t.Errorf("%s: error data %q is not a typed refusal (%v)", tool, werr.Data, err)
	}
	return r.Code
}

// ResolveScope is what both transports list: its names and nothing else.
func TestResolveScopeIsTheToolList(t *testing.T) {
	reg := fakeRegistry(t)
	tests := []struct {
		pr    *approval.Principal
		scope mcpserver.Scope
		want  []string
	}{
		{&approval.Principal{ID: "agent", Roles: []string{approval.RoleAgent}}, readOnly, []string{"explain", "list_operations", "show_receipt", "status", "wait_for_decision"}},
		{&approval.Principal{ID: "agent", Roles: []string{approval.RoleAgent}}, agent, []string{"explain", "list_operations", "plan_deploy", "plan_inspect", "show_receipt", "status", "wait_for_decision"}},
		{&approval.Principal{ID: "agent", Roles: []string{approval.RoleAgent}}, agentRun, []string{"explain", "list_operations", "plan_deploy", "plan_inspect", "run", "show_receipt", "status", "wait_for_decision"}},
		{&approval.Principal{ID: "smith", Roles: []string{approval.RoleOperator}}, agent, []string{"explain", "list_operations", "show_receipt", "status", "wait_for_decision"}},
		{nil, agentRun, []string{"explain", "list_operations", "run", "show_receipt", "status", "wait_for_decision"}},
	}
	for _, tt := range tests {
		got := mcpserver.ResolveScope(reg, tt.pr, tt.scope)
		var names []string
		for n, ok := range got {
			if ok {
				names = append(names, n)
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, tt.want) {
			t.Errorf("%+v, %+v: %v, want %v", tt.pr, tt.scope, names, tt.want)
		}
		for _, tr := range transports {
			b := &fakeBackend{reg: reg, pr: tt.pr}
			if tt.pr == nil && tr.name == "http" {
				continue // a token always names a principal
			}
			t.Run(tr.name, func(t *testing.T) {
				if listed := toolNames(t, tr.connect(t, b, tt.scope)); !slices.Equal(listed, tt.want) {
					t.Errorf("%s lists %v, ResolveScope says %v", tr.name, listed, tt.want)
				}
			})
		}
	}
}
