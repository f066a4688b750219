package mcpserver_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/mcpserver"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// planCapture is a fakeBackend that keeps the plan requests that reach it.
type planCapture struct {
	*fakeBackend
	mu   sync.Mutex
	reqs []mcpserver.PlanRequest
}

func (c *planCapture) Plan(req mcpserver.PlanRequest) (*api.PlanResult, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, req)
	c.mu.Unlock()
	return c.fakeBackend.Plan(req)
}

func (c *planCapture) taken() []mcpserver.PlanRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.reqs
	c.reqs = nil
	return out
}

func typedRegistry(t *testing.T) *operations.Registry {
	t.Helper()
	dir := t.TempDir()
	ops := `[[operation]]
name = "typed"
program = "true"
targets = ["staging"]
[operation.params.name]
pattern = "[a-z0-9]+"
[operation.params.count]
min = -5
max = 9
[operation.files.config]
max_size = "1KiB"
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

// A plan tool holds each argument to the JSON type its input schema gives:
// a string param given a number (or a boolean, null, an array, an object)
// is an isError param_invalid refusal naming the param, and no plan is
// made; it is never converted to the number's decimal text, as it was
// before. So for an integer param given a string or a fraction, a target
// or a file path that is not a string, and params or files that are not an
// object. An integer param given a JSON number of integral value (3, 3.0,
// 3e0) is planned with its decimal text.
func TestPlanArgumentTypesNotCoerced(t *testing.T) {
	b := &planCapture{fakeBackend: &fakeBackend{reg: typedRegistry(t), pr: &approval.Principal{ID: "agent", Roles: []string{approval.RoleAgent}}}}
	srv, err := mcpserver.New(b, mcpserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cs := connectServer(t, srv)
	args := func(target any, params, files map[string]any) map[string]any {
		return map[string]any{"target": target, "params": params, "files": files}
	}
	good := func(name, count any) map[string]any {
		return args("staging", map[string]any{"name": name, "count": count}, map[string]any{"config": "app.toml"})
	}
	refused := []struct {
		what  string
		args  map[string]any
		names string // what the reason must name
	}{
		{"string param given a number", good(42, 1), "param name: want a string, got a number"},
		{"string param given a float", good(4.5, 1), "param name: want a string, got a number"},
		{"string param given a boolean", good(true, 1), "param name: want a string, got a boolean"},
		{"string param given null", good(nil, 1), "param name: want a string, got null"},
		{"string param given an array", good([]any{"a"}, 1), "param name: want a string, got an array"},
		{"string param given an object", good(map[string]any{"a": "b"}, 1), "param name: want a string, got an object"},
		{"integer param given a string", good("api", "3"), "param count: want an integer (a JSON number), got a string"},
		{"integer param given a fraction", good("api", 3.5), "param count: want an integer (a JSON number), got the number 3.5"},
		{"integer param given a boolean", good("api", false), "param count: want an integer (a JSON number), got a boolean"},
		{"integer param given null", good("api", nil), "param count: want an integer (a JSON number), got null"},
		{"target given a number", args(1, map[string]any{"name": "api", "count": 1}, map[string]any{"config": "app.toml"}), "target: want a string, got a number"},
		{"target given null", args(nil, map[string]any{"name": "api", "count": 1}, map[string]any{"config": "app.toml"}), "target: want a string, got null"},
		{"file given a number", args("staging", map[string]any{"name": "api", "count": 1}, map[string]any{"config": 7}), "file config: want a path (a JSON string), got a number"},
		{"params given a string", map[string]any{"target": "staging", "params": "name=api", "files": map[string]any{"config": "app.toml"}}, "params: want an object, got a string"},
		{"files given null", map[string]any{"target": "staging", "params": map[string]any{"name": "api", "count": 1}, "files": nil}, "files: want an object, got null"},
		{"undeclared param given a number", good("api", 1), ""},
	}
	refused[len(refused)-1].args["params"].(map[string]any)["extra"] = 1
	refused[len(refused)-1].names = `declares no param "extra"`
	for _, tt := range refused {
		res, out := call(t, cs, "plan_typed", tt.args)
		if !res.IsError || out["outcome"] != "refused" || out["code"] != string(refusal.ParamInvalid) || out["operation"] != "typed" {
			t.Errorf("%s: %v, want an isError param_invalid refusal", tt.what, out)
			continue
		}
		if reason, _ := out["reason"].(string); !strings.Contains(reason, tt.names) {
			t.Errorf("%s: reason %q does not say %q", tt.what, reason, tt.names)
		}
		if reqs := b.taken(); len(reqs) != 0 {
			t.Errorf("%s: planned anyway: %+v", tt.what, reqs)
		}
	}

	for _, tt := range []struct {
		count string // as JSON text
		want  string
	}{{"3", "3"}, {"3.0", "3"}, {"-5", "-5"}, {"9e0", "9"}, {"0.5e1", "5"}, {"-0", "0"}} {
		res, out := call(t, cs, "plan_typed", json.RawMessage(`{"target":"staging","params":{"name":"api","count":`+tt.count+`},"files":{"config":"app.toml"}}`))
		if res.IsError {
			t.Errorf("count %v: %v", tt.count, out)
			continue
		}
		want := []mcpserver.PlanRequest{{Operation: "typed", Target: "staging", Params: map[string]string{"name": "api", "count": tt.want}, Files: map[string]string{"config": "app.toml"}}}
		if got := b.taken(); !reflect.DeepEqual(got, want) {
			t.Errorf("count %v: planned %+v, want %+v", tt.count, got, want)
		}
	}
}

// connectServer connects an SDK client to srv over an in-memory transport.
func connectServer(t *testing.T, srv *mcp.Server) *mcp.ClientSession {
	t.Helper()
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
