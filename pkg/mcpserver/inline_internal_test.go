package mcpserver

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/mcpapi"
)

func inlineOp(t *testing.T) *operations.Operation {
	t.Helper()
	dir := t.TempDir()
	ops := "[[operation]]\nname = \"push\"\nprogram = \"true\"\ntargets = [\"staging\"]\n[operation.files.config]\nmax_size = \"8MiB\"\n"
	if err := os.WriteFile(filepath.Join(dir, "ops.toml"), []byte(ops), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := operations.Load(dir, []string{"/usr/bin", "/bin"})
	if err != nil {
		t.Fatal(err)
	}
	op, _ := reg.Get("push")
	return op
}

// The schema marks as required only what a call can supply: over stdio a
// file is a path; over HTTP it is {content, encoding?}, content alone
// required, and run's files (needed only by a plan with inline files) are
// not required.
func TestInlineSchemas(t *testing.T) {
	op := inlineOp(t)
	ps := planTool(op, false).InputSchema.(*jsonschema.Schema)
	if s := ps.Properties["files"].Properties["config"]; s.Type != "string" {
		t.Errorf("stdio file schema %+v, want a path", s)
	}
	hs := planTool(op, true).InputSchema.(*jsonschema.Schema)
	f := hs.Properties["files"].Properties["config"]
	if f.Type != "object" || !slices.Equal(f.Required, []string{"content"}) || f.Properties["encoding"] == nil {
		t.Errorf("HTTP file schema %+v, want {content (required), encoding}", f)
	}
	if !slices.Equal(hs.Required, []string{"target", "files"}) {
		t.Errorf("HTTP plan schema requires %v", hs.Required)
	}
	if r := runSchema(true); !slices.Equal(r.Required, []string{"fingerprint"}) || r.Properties["files"] == nil {
		t.Errorf("HTTP run schema %+v", r)
	}
	if r := runSchema(false); r.Properties["files"] != nil {
		t.Errorf("stdio run schema takes files: %+v", r)
	}
}

func callReq(name string, args any) *mcp.CallToolRequest {
	b, _ := json.Marshal(args)
	return &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{Name: name, Arguments: b}}
}

// Files supplied inline are attacker input: decoded only within the
// bounds, judged from the encoded length before decoding, and a refusal
// never quotes the content.
func TestInlineFileArguments(t *testing.T) {
	op := inlineOp(t)
	marker := "s3cr3t-arg-marker"
	file := func(v any) map[string]any {
		return map[string]any{"target": "staging", "files": map[string]any{"config": v}}
	}
	pr, err := planArgs(op, callReq("plan_push", file(map[string]any{"content": "a = \"" + marker + "\"\n"})), true)
	if err != nil || string(pr.Inline["config"]) != "a = \""+marker+"\"\n" || len(pr.Files) != 0 {
		t.Fatalf("utf-8: %+v %v", pr, err)
	}
	pr, err = planArgs(op, callReq("plan_push", file(map[string]any{"content": base64.StdEncoding.EncodeToString([]byte{0, 0xff}), "encoding": "base64"})), true)
	if err != nil || string(pr.Inline["config"]) != "\x00\xff" {
		t.Fatalf("base64: %+v %v", pr, err)
	}
	// Exactly at the bound, in base64 (padding included): taken.
	exact := base64.StdEncoding.EncodeToString(make([]byte, mcpapi.MaxInlineFile))
	if _, err := planArgs(op, callReq("plan_push", file(map[string]any{"content": exact, "encoding": "base64"})), true); err != nil {
		t.Errorf("%d bytes in base64: %v", mcpapi.MaxInlineFile, err)
	}
	over := strings.Repeat(marker, mcpapi.MaxInlineFile/len(marker)+1)
	for name, args := range map[string]map[string]any{
		"a path":              file("/etc/shadow"),
		"over the bound":      file(map[string]any{"content": over}),
		"over it, in base64":  file(map[string]any{"content": strings.Repeat("A", (mcpapi.MaxInlineFile/3+1)*4), "encoding": "base64"}),
		"not base64":          file(map[string]any{"content": marker + "!", "encoding": "base64"}),
		"an unknown encoding": file(map[string]any{"content": marker, "encoding": "rot13"}),
		"an unknown field":    file(map[string]any{"content": marker, "path": "/etc/shadow"}),
		"no content":          file(map[string]any{"encoding": "utf-8"}),
		"an undeclared file":  {"target": "staging", "files": map[string]any{"config": map[string]any{"content": "x"}, "../../state": map[string]any{"content": marker}}},
	} {
		_, err := planArgs(op, callReq("plan_push", args), true)
		if err == nil {
			t.Errorf("%s: taken", name)
			continue
		}
		if strings.Contains(err.Error(), marker) || strings.Contains(err.Error(), "AAAA") {
			t.Errorf("%s: the refusal quotes the content: %.200s", name, err)
		}
	}
	// Over stdio a file is still a path.
	if pr, err := planArgs(op, callReq("plan_push", file("./config.toml")), false); err != nil || pr.Files["config"] != "./config.toml" || pr.Inline != nil {
		t.Errorf("stdio: %+v %v", pr, err)
	}
	// run over HTTP: the fingerprint, and files by name (which the
	// plan binds inline, the backend judges).
	fp := "sha256:" + strings.Repeat("a", 64)
	got, inline, err := runArgs(callReq("run", map[string]any{"fingerprint": fp, "files": map[string]any{"config": map[string]any{"content": "x"}}}))
	if err != nil || got != fp || string(inline["config"]) != "x" {
		t.Errorf("run: %s %v %v", got, inline, err)
	}
	if _, _, err := runArgs(callReq("run", map[string]any{"fingerprint": fp, "files": map[string]any{"config": map[string]any{"content": over}}})); err == nil || strings.Contains(err.Error(), marker) {
		t.Errorf("run over the bound: %v", err)
	}
}
