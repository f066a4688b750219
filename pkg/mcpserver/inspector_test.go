package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpserver"
	"github.com/prod-write/prod-write/pkg/testservers"
)

// inspectorVersion is the @modelcontextprotocol/inspector that
// scripts/test-deps.sh installs into .cache/node_modules; keep the two in
// step.
const inspectorVersion = "2.12.0"

// The MCP Inspector's CLI (`npx @modelcontextprotocol/inspector --cli URL
// --method tools/list --header "Authorization: Bearer …"`) connects with an
// access token a real authorization server issued, or with a static token
// of the tokens file, and lists the tools of the token's scope; without a
// token it ends at once, saying it needs an OAuth flow it cannot run
// without a TTY.
func TestInspectorCLIListsTools(t *testing.T) {
	node, launcher := inspectorOrSkip(t)
	r := startASResource(t)
	token := clientCredentials(t, r.tokenEndpoint(t), clientAgent, mcpserver.OAuthScopeAgent, r.resource)

	run := func(url string, args ...string) (string, string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, append([]string{launcher, "--cli", url, "--transport", "http", "--method", "tools/list"}, args...)...)
		// Its catalog and any state in a directory of the test's, no
		// proxy from the environment, no TTY to start an OAuth flow on.
		home := t.TempDir()
		cmd.Env = append(os.Environ(), "HOME="+home, "MCP_CATALOG_PATH="+filepath.Join(home, "mcp.json"), "NO_PROXY=*", "no_proxy=*", "CI=1")
		cmd.Stdin = nil
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		if ctx.Err() != nil {
			t.Fatalf("the Inspector CLI has not ended in 60 s\nstdout: %s\nstderr: %s", stdout.String(), stderr.String())
		}
		return stdout.String(), stderr.String(), err
	}

	list := func(what, url, token string) []string {
		t.Helper()
		stdout, stderr, err := run(url, "--header", "Authorization: Bearer "+token)
		if err != nil {
			t.Fatalf("the Inspector CLI with %s: %v\nstdout: %s\nstderr: %s", what, err, stdout, stderr)
		}
		var out struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		}
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatalf("the Inspector CLI's output with %s: %v\n%s\nstderr: %s", what, err, stdout, stderr)
		}
		var names []string
		for _, tl := range out.Tools {
			names = append(names, tl.Name)
		}
		t.Logf("tools listed to the Inspector CLI with %s: %q", what, names)
		return names
	}
	names := list("an access token", r.resource, token)
	if !slices.Contains(names, "list_operations") || !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "plan_") }) {
		t.Errorf("tools listed to the Inspector CLI: %q, want list_operations and the plan tools", names)
	}

	// A static read-only token of the tokens file: the read tools only.
	h := mcpserver.NewHTTPHandler(loadTokens(t, tokenEntry("static-ro-token", "agent", readOnly)), func(mcpserver.Token) (mcpserver.Backend, error) {
		return newFake(t, "agent", approval.RoleAgent), nil
	}, mcpserver.Options{})
	mux := http.NewServeMux()
	h.Mount(mux, "/mcp")
	srv := httptest.NewServer(mux)
	defer srv.Close()
	names = list("a static read-only token", srv.URL+"/mcp", "static-ro-token")
	if !slices.Contains(names, "list_operations") || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "plan_") || n == "run" }) {
		t.Errorf("tools listed to the Inspector CLI with a read-only token: %q, want list_operations and no tool that writes", names)
	}

	// No token: the 401's challenge sends it to OAuth, which it cannot
	// do without a TTY; it says so and ends, having listed nothing.
	stdout, stderr, err := run(r.resource)
	if err == nil || strings.Contains(stdout, "list_operations") {
		t.Errorf("the Inspector CLI without a token: %v\n%s", err, stdout)
	}
	if !strings.Contains(stderr, "auth_required") {
		t.Errorf("the Inspector CLI without a token: stderr %q, want its auth_required", stderr)
	}
}

// inspectorOrSkip returns node and the Inspector's launcher script,
// skipping loudly (or failing under PROD_WRITE_REQUIRE_SERVERS=1) as
// tsSDKOrSkip does.
func inspectorOrSkip(t *testing.T) (node, launcher string) {
	t.Helper()
	root, err := testservers.Root()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, ".cache", "node_modules", "@modelcontextprotocol", "inspector")
	absent := func(what, where string) {
		t.Helper()
		msg := fmt.Sprintf("%s is not installed (looked for %s). Install it with ./scripts/test-deps.sh (@modelcontextprotocol/inspector %s from npm into .cache/)", what, where, inspectorVersion)
		if os.Getenv(testservers.RequireEnv) == "1" {
			t.Fatalf("%s; %s=1, so this is a failure, not a skip", msg, testservers.RequireEnv)
		}
		banner := fmt.Sprintf("\n*** SKIPPED, NOT TESTED: %s of ./pkg/mcpserver/ ***\n*** %s ***\n\n", t.Name(), msg)
		fmt.Fprint(os.Stderr, banner)
		// As tsSDKAbsent: a file of the module, just written and read,
		// so that go test does not replay the skip as a bare "ok".
		marker := filepath.Join(root, ".cache", "inspector-skipped")
		if os.MkdirAll(filepath.Dir(marker), 0o755) == nil && os.WriteFile(marker, []byte(banner), 0o644) == nil {
			os.ReadFile(marker)
		}
		t.Skipf("SKIPPED, NOT TESTED: %s", msg)
	}
	node, err = exec.LookPath("node")
	if err != nil {
		absent("node (to run the MCP Inspector)", "node on $PATH")
	}
	pkg := filepath.Join(dir, "package.json")
	data, err := os.ReadFile(pkg)
	var meta struct {
		Version string            `json:"version"`
		Bin     map[string]string `json:"bin"`
	}
	if err != nil || json.Unmarshal(data, &meta) != nil || meta.Version != inspectorVersion || meta.Bin["mcp-inspector"] == "" {
		absent("@modelcontextprotocol/inspector "+inspectorVersion, pkg)
	}
	return node, filepath.Join(dir, meta.Bin["mcp-inspector"])
}
