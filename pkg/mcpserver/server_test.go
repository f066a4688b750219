package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/cli"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/mcpserver"
	"github.com/prod-write/prod-write/pkg/netbackend"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// deployment is a real temporary deployment made by `prod-write init
// --demo`, with a config file to push.
type deployment struct {
	dir string
	env map[string]string // the environment every factory sees
}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	d := &deployment{dir: t.TempDir(), env: map[string]string{"AWS_REGION": "eu-west-1", "DEPLOY_TOKEN": "s3cret-token-value"}}
	if _, errb, code := d.cli(t, "", "init", "--demo", d.dir); code != 0 {
		t.Fatalf("init --demo: exit %d: %s", code, errb)
	}
	d.write(t, "app.toml", "[server]\nport = 8080\n")
	return d
}

func (d *deployment) write(t *testing.T, name, data string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(d.dir, name), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// journal is where the deployment's receipts are.
func (d *deployment) journal() string {
	return filepath.Join(d.dir, "state", "journal", "receipts.jsonl")
}

func (d *deployment) key(who string) string {
	if who == "" {
		return ""
	}
	return filepath.Join(d.dir, "keys", who+".key")
}

// factory is what `prod-write --config DIR/prod-write.toml --key KEY` run
// in DIR would use.
func (d *deployment) factory(key string) (*cli.Factory, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &cli.Factory{Env: localapi.Env{
		IO:         &cli.IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb},
		Now:        time.Now,
		LookupEnv:  func(k string) (string, bool) { v, ok := d.env[k]; return v, ok },
		Getwd:      func() (string, error) { return d.dir, nil },
		ConfigPath: filepath.Join(d.dir, "prod-write.toml"),
		KeyPath:    key,
		Net:        netbackend.Backend{}, // as in prod-write-net, which serves mcp
	}}, &out, &errb
}

// cli runs prod-write in-process, as the principal whose key is named
// (none when who is "").
func (d *deployment) cli(t *testing.T, who string, args ...string) (string, string, int) {
	t.Helper()
	f, out, errb := d.factory("")
	if k := d.key(who); k != "" {
		args = append(args, "--key", k)
	}
	if len(args) > 0 && args[0] != "init" {
		args = append(args, "--config", filepath.Join(d.dir, "prod-write.toml"))
	}
	code := cli.Run(args, f)
	return out.String(), errb.String(), code
}

// recorder notes every backend call a tool handler makes.
type recorder struct {
	mcpserver.Backend
	mu    sync.Mutex
	calls []string
}

func (r *recorder) note(call string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, call)
}

func (r *recorder) handled() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls)
}

func (r *recorder) Plan(req mcpserver.PlanRequest) (*api.PlanResult, error) {
	r.note("plan " + req.Operation)
	return r.Backend.Plan(req)
}

func (r *recorder) Status(fp string) (any, *refusal.Error, error) {
	r.note("status")
	return r.Backend.Status(fp)
}

func (r *recorder) Receipt(id string) ([]json.RawMessage, error) {
	r.note("receipt")
	return r.Backend.Receipt(id)
}

func (r *recorder) Run(fp string, inline map[string][]byte) (*mcpserver.RunResult, error) {
	r.note("run")
	return r.Backend.Run(fp, inline)
}

// connect starts a server for the deployment under who's key and returns
// an SDK client session to it over an in-memory transport.
func (d *deployment) connect(t *testing.T, who string, o mcpserver.Options) (*mcp.ClientSession, *recorder) {
	t.Helper()
	f, _, _ := d.factory(d.key(who))
	rec := &recorder{Backend: localapi.NewMCPBackend(&f.Env)}
	srv, err := mcpserver.New(rec, o)
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
	return cs, rec
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args any) (*mcp.CallToolResult, map[string]any) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d content items, want 1", name, len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("%s: content is %T", name, res.Content[0])
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(text.Text), &out); err != nil {
		t.Fatalf("%s: result is not a JSON object: %v\n%s", name, err, text.Text)
	}
	return res, out
}

// refusedCall calls a tool that must be refused as a protocol error, and
// returns the typed refusal the error carries.
func refusedCall(t *testing.T, cs *mcp.ClientSession, name string, args any) map[string]any {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err == nil {
		t.Fatalf("%s: got a result (isError=%v), want a protocol error", name, res.IsError)
	}
	var werr *jsonrpc.Error
	if !errors.As(err, &werr) {
		t.Fatalf("%s: error %v (%T) is not a JSON-RPC error", name, err, err)
	}
	if werr.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("%s: JSON-RPC code %d, want %d", name, werr.Code, jsonrpc.CodeInvalidParams)
	}
	var r map[string]any
	if err := json.Unmarshal(werr.Data, &r); err != nil {
		t.Fatalf("%s: error data %q is not the typed refusal: %v", name, werr.Data, err)
	}
	if r["outcome"] != "refused" || r["code"] == "" || r["reason"] == "" {
		t.Errorf("%s: error data %s is not a typed refusal", name, werr.Data)
	}
	return r
}

func (d *deployment) planArgs() map[string]any {
	return map[string]any{
		"target": "staging",
		"params": map[string]any{"service": "api"},
		"files":  map[string]any{"config": "app.toml"},
	}
}

// planOverMCP plans config-push through the agent's server and returns the
// fingerprint.
func planOverMCP(t *testing.T, cs *mcp.ClientSession, args map[string]any) string {
	t.Helper()
	res, out := call(t, cs, "plan_config-push", args)
	if res.IsError {
		t.Fatalf("plan_config-push: isError: %v", out)
	}
	fp, _ := out["fingerprint"].(string)
	if !strings.HasPrefix(fp, "sha256:") || out["stored"] != true || out["planner"] != "agent" {
		t.Fatalf("plan_config-push: %v", out)
	}
	return fp
}

// Under an agent's key, nothing that files, decides, records a Gera
// decision or runs is listed; only the read tools and one plan tool per
// operation are.
func TestAgentToolsHaveNoMutatingTool(t *testing.T) {
	d := newDeployment(t)
	cs, _ := d.connect(t, "agent", mcpserver.Options{})
	names := toolNames(t, cs)
	want := []string{"explain", "list_operations", "plan_config-push", "plan_list-configs", "show_receipt", "status", "wait_for_decision"}
	if !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
	for _, n := range names {
		for _, bad := range []string{"run", "decide", "approve", "deny", "file", "gera", "withdraw"} {
			if strings.Contains(n, bad) {
				t.Errorf("tool %q is listed under an agent's key", n)
			}
		}
	}
}

// --allow-run adds run, and nothing else; a key that is not an agent's
// gets no plan tool; no key gets only the read tools.
func TestToolsFollowKeyAndOptions(t *testing.T) {
	d := newDeployment(t)
	tests := []struct {
		who  string
		o    mcpserver.Options
		want []string
	}{
		{"agent", mcpserver.Options{AllowRun: true}, []string{"explain", "list_operations", "plan_config-push", "plan_list-configs", "run", "show_receipt", "status", "wait_for_decision"}},
		{"smith", mcpserver.Options{}, []string{"explain", "list_operations", "show_receipt", "status", "wait_for_decision"}},
		{"gera", mcpserver.Options{}, []string{"explain", "list_operations", "show_receipt", "status", "wait_for_decision"}},
		{"", mcpserver.Options{}, []string{"explain", "list_operations", "show_receipt", "status", "wait_for_decision"}},
	}
	for _, tt := range tests {
		cs, _ := d.connect(t, tt.who, tt.o)
		if got := toolNames(t, cs); !slices.Equal(got, tt.want) {
			t.Errorf("key %q, %+v: tools = %v, want %v", tt.who, tt.o, got, tt.want)
		}
	}
}

// A call to a tool that is not exposed is a protocol error carrying the
// typed refusal, and no handler runs: the backend sees no call, nothing is
// stored and nothing runs.
func TestUnexposedToolRefusedBeforeHandler(t *testing.T) {
	d := newDeployment(t)
	agent, _ := d.connect(t, "agent", mcpserver.Options{})
	fp := planOverMCP(t, agent, d.planArgs())
	fpArgs := map[string]any{"fingerprint": fp}

	cs, rec := d.connect(t, "agent", mcpserver.Options{})
	tests := []struct {
		tool string
		args any
		code refusal.Code
	}{
		{"run", fpArgs, refusal.RoleMissing},
		{"decide", map[string]any{"fingerprint": fp, "answer": "approve"}, refusal.RoleMissing},
		{"approve", fpArgs, refusal.RoleMissing},
		{"file", fpArgs, refusal.RoleMissing},
		{"gera", fpArgs, refusal.RoleMissing},
		{"plan_no-such-op", map[string]any{"target": "staging"}, refusal.OperationAbsent},
		{"rm_rf", nil, mcpserver.ToolAbsent},
	}
	for _, tt := range tests {
		r := refusedCall(t, cs, tt.tool, tt.args)
		if r["code"] != string(tt.code) {
			t.Errorf("%s: refusal code %v, want %s", tt.tool, r["code"], tt.code)
		}
	}
	if calls := rec.handled(); len(calls) != 0 {
		t.Errorf("handlers ran for refused calls: %v", calls)
	}
	if _, err := os.Stat(d.journal()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a receipt journal exists after refused calls (err %v)", err)
	}
	out, _, code := d.cli(t, "", "status", fp, "--json")
	var st struct {
		Allowed  bool  `json:"allowed"`
		Evidence []any `json:"evidence"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || code != cli.ExitRefused || st.Allowed || len(st.Evidence) != 0 {
		t.Errorf("status after refused calls: exit %d, evidence appeared:\n%s", code, out)
	}

	// Without a key, a plan tool is refused in the same way: the server
	// acts for no principal.
	anon, rec := d.connect(t, "", mcpserver.Options{})
	if r := refusedCall(t, anon, "plan_config-push", d.planArgs()); r["code"] != string(refusal.PrincipalUnknown) {
		t.Errorf("plan without a key: refusal %v", r)
	}
	// Under a key without the agent role, it is role_missing.
	approver, rec2 := d.connect(t, "alice", mcpserver.Options{})
	if r := refusedCall(t, approver, "plan_config-push", d.planArgs()); r["code"] != string(refusal.RoleMissing) || r["operation"] != "config-push" {
		t.Errorf("plan under an approver's key: refusal %v", r)
	}
	if calls := append(rec.handled(), rec2.handled()...); len(calls) != 0 {
		t.Errorf("handlers ran: %v", calls)
	}
}

// Scope is judged at call time too: a plan tool listed when the server
// started is refused, before its handler runs, once the trust policy no
// longer gives the key's principal the agent role.
func TestRoleCheckedAtCallTime(t *testing.T) {
	d := newDeployment(t)
	cs, rec := d.connect(t, "agent", mcpserver.Options{})
	if !slices.Contains(toolNames(t, cs), "plan_config-push") {
		t.Fatal("plan_config-push not listed")
	}
	trust := filepath.Join(d.dir, "trust.toml")
	b, err := os.ReadFile(trust)
	if err != nil {
		t.Fatal(err)
	}
	demoted := strings.Replace(string(b), "id = \"agent\"\nroles = [\"agent\"]", "id = \"agent\"\nroles = [\"operator\"]", 1)
	if demoted == string(b) {
		t.Fatal("could not find the agent principal in trust.toml")
	}
	if err := os.WriteFile(trust, []byte(demoted), 0o644); err != nil {
		t.Fatal(err)
	}
	r := refusedCall(t, cs, "plan_config-push", d.planArgs())
	if r["code"] != string(refusal.RoleMissing) {
		t.Errorf("refusal %v, want role_missing", r)
	}
	if calls := rec.handled(); len(calls) != 0 {
		t.Errorf("handler ran: %v", calls)
	}
	if entries, _ := os.ReadDir(filepath.Join(d.dir, "state", "store", "plans")); len(entries) > 0 {
		t.Errorf("a plan was stored: %v", entries)
	}
}

// The plan tool and `prod-write plan … --json` give the same fingerprint
// (and the same bound inputs) for the same inputs.
func TestPlanMatchesCLI(t *testing.T) {
	d := newDeployment(t)
	out, errb, code := d.cli(t, "", "plan", "config-push", "--target", "staging", "--param", "service=api", "--file", "config=app.toml", "--json", "--dry-run")
	if code != 0 {
		t.Fatalf("cli plan: exit %d: %s", code, errb)
	}
	var viaCLI map[string]any
	if err := json.Unmarshal([]byte(out), &viaCLI); err != nil {
		t.Fatal(err)
	}
	if viaCLI["stored"] != false {
		t.Fatalf("the keyless CLI plan was stored: %s", out)
	}

	cs, _ := d.connect(t, "agent", mcpserver.Options{})
	res, viaMCP := call(t, cs, "plan_config-push", d.planArgs())
	if res.IsError {
		t.Fatalf("plan_config-push: %v", viaMCP)
	}
	if viaMCP["fingerprint"] != viaCLI["fingerprint"] {
		t.Errorf("fingerprint over MCP %v, on the CLI %v", viaMCP["fingerprint"], viaCLI["fingerprint"])
	}
	for _, k := range []string{"operation", "operation_digest", "target", "params", "argv", "program_sha256", "cwd", "env", "files", "mutating"} {
		if !reflect.DeepEqual(viaMCP[k], viaCLI[k]) {
			t.Errorf("%s over MCP %v, on the CLI %v", k, viaMCP[k], viaCLI[k])
		}
	}
	if strings.Contains(textOf(res), d.env["DEPLOY_TOKEN"]) {
		t.Error("the secret's value is in the plan result")
	}
	// The structured content is the same object as the text.
	var structured map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(b, &structured)
	if !reflect.DeepEqual(structured, viaMCP) {
		t.Errorf("structured content %v differs from the text %v", structured, viaMCP)
	}
}

func textOf(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// A tool that ran and was refused returns isError with the typed refusal,
// not a protocol error.
func TestPlanRefusalIsToolError(t *testing.T) {
	d := newDeployment(t)
	cs, _ := d.connect(t, "agent", mcpserver.Options{})
	tests := []struct {
		name string
		args map[string]any
		code refusal.Code
	}{
		{"bad pattern", map[string]any{"target": "staging", "params": map[string]any{"service": "API; rm -rf /"}, "files": map[string]any{"config": "app.toml"}}, refusal.ParamInvalid},
		{"target not allowed", map[string]any{"target": "prod", "params": map[string]any{"service": "api"}, "files": map[string]any{"config": "app.toml"}}, refusal.TargetNotAllowed},
		{"missing param", map[string]any{"target": "staging", "files": map[string]any{"config": "app.toml"}}, refusal.ParamInvalid},
		{"unknown argument", map[string]any{"target": "staging", "params": map[string]any{"service": "api"}, "files": map[string]any{"config": "app.toml"}, "shell": "sh"}, refusal.ParamInvalid},
		{"param of the wrong type", map[string]any{"target": "staging", "params": map[string]any{"service": true}, "files": map[string]any{"config": "app.toml"}}, refusal.ParamInvalid},
	}
	for _, tt := range tests {
		res, out := call(t, cs, "plan_config-push", tt.args)
		if !res.IsError {
			t.Errorf("%s: not isError: %v", tt.name, out)
			continue
		}
		if out["outcome"] != "refused" || out["code"] != string(tt.code) || out["operation"] != "config-push" || out["reason"] == "" {
			t.Errorf("%s: result %v, want a %s refusal of config-push", tt.name, out, tt.code)
		}
		if _, ok := out["missing"].([]any); !ok {
			t.Errorf("%s: missing is %v, want a list", tt.name, out["missing"])
		}
	}
	// A file that is not there is a failure, not a refusal.
	res, out := call(t, cs, "plan_config-push", map[string]any{"target": "staging", "params": map[string]any{"service": "api"}, "files": map[string]any{"config": "nope.toml"}})
	if !res.IsError || out["outcome"] != "error" || out["code"] != "bad_input" {
		t.Errorf("missing file: %v", out)
	}
}

// status reports what is missing (isError, with the refusal and the CLI's
// status JSON), and the open gate once the plan is approved.
func TestStatusReportsMissingEvidence(t *testing.T) {
	d := newDeployment(t)
	cs, _ := d.connect(t, "agent", mcpserver.Options{})
	fp := planOverMCP(t, cs, d.planArgs())

	res, out := call(t, cs, "status", map[string]any{"fingerprint": fp})
	if !res.IsError {
		t.Fatalf("status of an unapproved plan is not isError: %v", out)
	}
	if out["outcome"] != "refused" || out["code"] != string(refusal.NoApproval) || out["fingerprint"] != fp || out["operation"] != "config-push" {
		t.Errorf("status refusal: %v", out)
	}
	if missing, _ := out["missing"].([]any); len(missing) == 0 {
		t.Errorf("status names nothing missing: %v", out)
	}
	cliOut, _, code := d.cli(t, "", "status", fp, "--json")
	if code != cli.ExitRefused {
		t.Fatalf("cli status: exit %d", code)
	}
	var viaCLI any
	if err := json.Unmarshal([]byte(cliOut), &viaCLI); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out["status"], viaCLI) {
		t.Errorf("status over MCP:\n%v\non the CLI:\n%v", out["status"], viaCLI)
	}

	// Humans file and approve on the CLI; status then says the gate is open.
	if _, errb, code := d.cli(t, "smith", "file", fp, "--summary", "push api config", "--effect", "api reloads", "--blast-radius", "api in staging", "--rollback", "push the old file", "--certainty", "high"); code != 0 {
		t.Fatalf("file: exit %d: %s", code, errb)
	}
	res, out = call(t, cs, "status", map[string]any{"fingerprint": fp})
	if !res.IsError || out["code"] != string(refusal.NoApproval) {
		t.Errorf("status with a record but no approval: %v", out)
	}
	if _, errb, code := d.cli(t, "alice", "decide", fp, "approve"); code != 0 {
		t.Fatalf("decide: exit %d: %s", code, errb)
	}
	res, out = call(t, cs, "status", map[string]any{"fingerprint": fp})
	if res.IsError || out["allowed"] != true || out["path"] != "record+approvals" {
		t.Errorf("status of an approved plan: %v", out)
	}

	// A fingerprint with no plan is a refusal too.
	res, out = call(t, cs, "status", map[string]any{"fingerprint": "sha256:" + strings.Repeat("0", 64)})
	if !res.IsError || out["code"] != string(refusal.PlanAbsent) {
		t.Errorf("status of no plan: %v", out)
	}
}

// The tool list derives from the registry: an operation file added to the
// test's registry, and nothing else, gives a plan tool whose schema carries
// its targets, types, patterns, enums and ranges, and which plans what the
// CLI plans.
func TestToolsDeriveFromRegistry(t *testing.T) {
	d := newDeployment(t)
	d.write(t, "operations/scale.toml", `[[operation]]
name = "scale-service"
description = "Set a service's replica count"
program = "true"
args = ["{param.service}", "{param.replicas}", "{param.region}", "{target}"]
targets = ["canary", "production"]

[operation.params.service]
description = "the service"
pattern = "[a-z]+"

[operation.params.replicas]
description = "how many replicas"
min = 1
max = 12

[operation.params.region]
enum = ["eu", "us"]
`)
	cs, _ := d.connect(t, "agent", mcpserver.Options{})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	for _, tl := range res.Tools {
		if tl.Name == "plan_scale-service" {
			b, _ := json.Marshal(tl.InputSchema)
			json.Unmarshal(b, &schema)
			if !strings.Contains(tl.Description, "Set a service's replica count") {
				t.Errorf("description %q does not come from the registry", tl.Description)
			}
		}
	}
	if schema == nil {
		t.Fatal("plan_scale-service is not listed")
	}
	get := func(path ...string) any {
		var v any = schema
		for _, p := range path {
			m, _ := v.(map[string]any)
			v = m[p]
		}
		return v
	}
	checks := []struct {
		path []string
		want any
	}{
		{[]string{"type"}, "object"},
		{[]string{"additionalProperties"}, false},
		{[]string{"required"}, []any{"target", "params"}},
		{[]string{"properties", "target", "enum"}, []any{"canary", "production"}},
		{[]string{"properties", "params", "required"}, []any{"region", "replicas", "service"}},
		{[]string{"properties", "params", "additionalProperties"}, false},
		{[]string{"properties", "params", "properties", "service", "type"}, "string"},
		{[]string{"properties", "params", "properties", "service", "pattern"}, "^[a-z]+$"},
		{[]string{"properties", "params", "properties", "service", "description"}, "the service"},
		{[]string{"properties", "params", "properties", "replicas", "type"}, "integer"},
		{[]string{"properties", "params", "properties", "replicas", "minimum"}, 1.0},
		{[]string{"properties", "params", "properties", "replicas", "maximum"}, 12.0},
		{[]string{"properties", "params", "properties", "region", "enum"}, []any{"eu", "us"}},
		{[]string{"properties", "files"}, nil},
	}
	for _, c := range checks {
		if got := get(c.path...); !reflect.DeepEqual(got, c.want) {
			t.Errorf("schema %s = %#v, want %#v", strings.Join(c.path, "."), got, c.want)
		}
	}

	// Planned over MCP (an integer as a JSON number) and on the CLI: one
	// fingerprint.
	out, errb, code := d.cli(t, "", "plan", "scale-service", "--target", "canary", "--param", "service=api", "--param", "replicas=3", "--param", "region=eu", "--json", "--dry-run")
	if code != 0 {
		t.Fatalf("cli plan: exit %d: %s", code, errb)
	}
	var viaCLI map[string]any
	json.Unmarshal([]byte(out), &viaCLI)
	r, viaMCP := call(t, cs, "plan_scale-service", map[string]any{"target": "canary", "params": map[string]any{"service": "api", "replicas": 3, "region": "eu"}})
	if r.IsError || viaMCP["fingerprint"] != viaCLI["fingerprint"] {
		t.Errorf("plan_scale-service: %v; CLI fingerprint %v", viaMCP, viaCLI["fingerprint"])
	}
	// The registry's range still decides.
	r, viaMCP = call(t, cs, "plan_scale-service", map[string]any{"target": "canary", "params": map[string]any{"service": "api", "replicas": 13, "region": "eu"}})
	if !r.IsError || viaMCP["code"] != string(refusal.ParamInvalid) {
		t.Errorf("replicas 13: %v", viaMCP)
	}
	// list_operations is the registry, as `ops list --json` shows it.
	_, ops := call(t, cs, "list_operations", nil)
	var names []string
	for _, op := range ops["operations"].([]any) {
		names = append(names, op.(map[string]any)["name"].(string))
	}
	if want := []string{"config-push", "list-configs", "scale-service"}; !slices.Equal(names, want) {
		t.Errorf("list_operations: %v, want %v", names, want)
	}
}

// run passes the one gate: refused, with nothing run, before approval; run
// once approved, with receipts; the program's output comes back in the
// result with secrets redacted.
func TestRunPassesTheGate(t *testing.T) {
	d := newDeployment(t)
	d.write(t, "operations/env.toml", `[[operation]]
name = "show-env"
description = "Print the environment the program gets"
mutating = false
program = "env"
targets = ["staging"]
[operation.env]
secret = ["DEPLOY_TOKEN"]
set = { GREETING = "hello from {target}" }
`)
	cs, _ := d.connect(t, "agent", mcpserver.Options{AllowRun: true})
	fp := planOverMCP(t, cs, d.planArgs())

	res, out := call(t, cs, "run", map[string]any{"fingerprint": fp})
	if !res.IsError || out["outcome"] != "refused" || out["code"] != string(refusal.NoApproval) {
		t.Fatalf("run before approval: %v", out)
	}
	if _, err := os.Stat(d.journal()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused run wrote receipts (err %v)", err)
	}
	if _, err := os.Stat(filepath.Join(d.dir, "srv", "staging", "api.toml")); err == nil {
		t.Fatal("the refused run installed the file")
	}

	d.cli(t, "smith", "file", fp, "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high")
	if _, errb, code := d.cli(t, "alice", "decide", fp, "approve"); code != 0 {
		t.Fatalf("decide: %s", errb)
	}
	res, out = call(t, cs, "run", map[string]any{"fingerprint": fp})
	if res.IsError || out["outcome"] != "ran" || out["exit_code"] != 0.0 {
		t.Fatalf("approved run: %v", out)
	}
	if _, err := os.Stat(d.journal()); err != nil {
		t.Fatalf("no journal after a run: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(d.dir, "srv", "staging", "api.toml"))
	if err != nil || string(got) != "[server]\nport = 8080\n" {
		t.Errorf("installed file: %q, %v", got, err)
	}
	_, rc := call(t, cs, "show_receipt", map[string]any{"id": "1"})
	if entries, _ := rc["receipts"].([]any); len(entries) != 1 {
		t.Errorf("show_receipt 1: %v", rc)
	}
	// Single use: a second run is refused.
	res, out = call(t, cs, "run", map[string]any{"fingerprint": fp})
	if !res.IsError || out["code"] != string(refusal.EvidenceConsumed) {
		t.Errorf("second run: %v", out)
	}

	// A non-mutating operation runs without approval; what it prints comes
	// back, without the secret's value.
	res, out = call(t, cs, "plan_show-env", map[string]any{"target": "staging"})
	if res.IsError {
		t.Fatal(out)
	}
	res, out = call(t, cs, "run", map[string]any{"fingerprint": out["fingerprint"]})
	if res.IsError {
		t.Fatalf("run show-env: %v", out)
	}
	stdout, _ := out["stdout"].(string)
	if !strings.Contains(stdout, "GREETING=hello from staging") || !strings.Contains(stdout, "DEPLOY_TOKEN=[redacted]") {
		t.Errorf("stdout %q", stdout)
	}
	if strings.Contains(textOf(res), d.env["DEPLOY_TOKEN"]) {
		t.Errorf("the secret's value is in the run result: %s", textOf(res))
	}
}

// `prod-write mcp` serves on its own stdin and stdout: a client speaking to
// it through them sees only protocol messages, even when run's program
// writes to its stdout and stderr.
func TestMCPCommandOverStdio(t *testing.T) {
	d := newDeployment(t)
	d.write(t, "operations/noisy.toml", `[[operation]]
name = "noisy"
mutating = false
program = "env"
args = ["--help"]
targets = ["staging"]
`)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	f, _, errb := d.factory("")
	f.IO.In, f.IO.Out = inR, outW
	done := make(chan int)
	go func() {
		code := cli.Run([]string{"mcp", "--allow-run", "--config", filepath.Join(d.dir, "prod-write.toml"), "--key", d.key("agent")}, f)
		outW.Close()
		done <- code
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(context.Background(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(toolNames(t, cs), "plan_noisy") {
		t.Fatal("plan_noisy not listed")
	}
	_, out := call(t, cs, "plan_noisy", map[string]any{"target": "staging"})
	res, out := call(t, cs, "run", map[string]any{"fingerprint": out["fingerprint"]})
	if res.IsError || !strings.Contains(out["stdout"].(string), "Usage") && !strings.Contains(out["stdout"].(string), "usage") {
		t.Errorf("run noisy: %v", out)
	}
	cs.Close()
	inW.Close()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("mcp exited %d: %s", code, errb)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mcp did not exit when its client went away")
	}
}
