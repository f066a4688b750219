package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/mcpserver"
	"github.com/prod-write/prod-write/pkg/testservers"
)

// tsSDKVersion is the @modelcontextprotocol/sdk that scripts/test-deps.sh
// installs into .cache/node_modules; keep the two in step.
const tsSDKVersion = "1.32.2"

// tsUnsupported are the versions the TypeScript SDK offers that the
// go-sdk's server does not speak, with the version it answers instead:
// 2024-10-07 predates the go-sdk, whose oldest is 2024-11-05. The server
// answering another version it supports is the negotiation the MCP
// lifecycle prescribes, and the SDK must then accept the answer and work
// with it; any other version not negotiated fails.
var tsUnsupported = map[string]string{"2024-10-07": "2025-11-25"}

// The TypeScript SDK, with its own OAuth support (ClientCredentialsProvider),
// finds the authorization server from the 401's resource_metadata, gets a
// token from it, lists the tools and calls list_operations; then it opens a
// session offering each protocol version it supports, each negotiated.
func TestOAuthTypeScriptSDK(t *testing.T) {
	node, modules := tsSDKOrSkip(t)
	r := startASResource(t)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "ts_oauth_client.mjs"))
	cmd.Env = append(os.Environ(),
		"NODE_MODULES="+modules,
		"MCP_URL="+r.resource,
		"ISSUER="+r.as.URL,
		"CLIENT_ID="+clientAgent,
		"CLIENT_SECRET="+clientSecret,
		"SCOPE="+mcpserver.OAuthScopeAgent,
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	var out struct {
		SDKVersion string   `json:"sdkVersion"`
		Latest     string   `json:"latest"`
		Supported  []string `json:"supported"`
		Discovery  []struct {
			Method, URL string
			Status      int
		} `json:"discovery"`
		DefaultNegotiated string   `json:"defaultNegotiated"`
		Tools             []string `json:"tools"`
		ListOperations    struct {
			IsError bool `json:"isError"`
			Content int  `json:"content"`
		} `json:"listOperations"`
		Versions []struct {
			Offered    string `json:"offered"`
			Negotiated string `json:"negotiated"`
			Tools      int    `json:"tools"`
			Error      string `json:"error"`
		} `json:"versions"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("the client's output: %v\n%s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	t.Logf("@modelcontextprotocol/sdk %s: latest %s, supported %q", out.SDKVersion, out.Latest, out.Supported)
	if out.SDKVersion != tsSDKVersion {
		t.Fatalf("@modelcontextprotocol/sdk %s ran, want %s", out.SDKVersion, tsSDKVersion)
	}

	// The SDK's own discovery: the MCP POST refused with 401, the
	// metadata the challenge names, the authorization server's
	// discovery, its token endpoint, the POST again, served.
	var trail []string
	for _, f := range out.Discovery {
		trail = append(trail, fmt.Sprintf("%s %s %d", f.Method, f.URL, f.Status))
	}
	t.Logf("the SDK's requests up to the first session:\n%s", strings.Join(trail, "\n"))
	metadata := strings.Replace(r.resource, "/mcp", "/.well-known/oauth-protected-resource/mcp", 1)
	want := []string{
		"POST " + r.resource + " 401",
		"GET " + metadata + " 200",
		"POST " + r.as.URL + "/oauth/token 200",
		"POST " + r.resource + " 200",
	}
	for _, w := range want {
		if !slices.Contains(trail, w) {
			t.Errorf("the SDK made no request %q", w)
		}
	}
	if !slices.ContainsFunc(trail, func(s string) bool {
		return strings.HasPrefix(s, "GET "+r.as.URL+"/.well-known/") && strings.HasSuffix(s, " 200")
	}) {
		t.Errorf("the SDK read no discovery document of the authorization server")
	}

	if out.DefaultNegotiated != out.Latest {
		t.Errorf("the SDK offering %s negotiated %q", out.Latest, out.DefaultNegotiated)
	}
	if !slices.Contains(out.Tools, "list_operations") || !slices.ContainsFunc(out.Tools, func(n string) bool { return strings.HasPrefix(n, "plan_") }) {
		t.Errorf("tools listed to the SDK: %q", out.Tools)
	}
	if out.ListOperations.IsError || out.ListOperations.Content == 0 {
		t.Errorf("list_operations through the SDK: %+v", out.ListOperations)
	}

	if len(out.Versions) != len(out.Supported) || !slices.Contains(out.Supported, out.Latest) {
		t.Fatalf("versions tried %d of %d supported (latest %s)", len(out.Versions), len(out.Supported), out.Latest)
	}
	for _, v := range out.Versions {
		want := v.Offered
		if alt, ok := tsUnsupported[v.Offered]; ok {
			want = alt
		}
		t.Logf("offered %s: negotiated %q, %d tools %s", v.Offered, v.Negotiated, v.Tools, v.Error)
		if v.Error != "" || v.Negotiated != want || v.Tools == 0 {
			t.Errorf("offering %s: negotiated %q (want %s), %d tools, error %q", v.Offered, v.Negotiated, want, v.Tools, v.Error)
		}
	}
}

// tsSDKOrSkip returns node and the node_modules directory that holds the
// TypeScript SDK tsSDKVersion, skipping loudly (or failing under
// PROD_WRITE_REQUIRE_SERVERS=1) as ajvOrSkip does.
func tsSDKOrSkip(t *testing.T) (node, modules string) {
	t.Helper()
	root, err := testservers.Root()
	if err != nil {
		t.Fatal(err)
	}
	modules = filepath.Join(root, ".cache", "node_modules")
	node, err = exec.LookPath("node")
	if err != nil {
		tsSDKAbsent(t, "node (to run the TypeScript MCP SDK)", "node on $PATH")
	}
	pkg := filepath.Join(modules, "@modelcontextprotocol", "sdk", "package.json")
	data, err := os.ReadFile(pkg)
	var meta struct {
		Version string `json:"version"`
	}
	if err != nil || json.Unmarshal(data, &meta) != nil || meta.Version != tsSDKVersion {
		tsSDKAbsent(t, "@modelcontextprotocol/sdk "+tsSDKVersion, pkg)
	}
	return node, modules
}

func tsSDKAbsent(t *testing.T, what, where string) {
	t.Helper()
	msg := fmt.Sprintf("%s is not installed (looked for %s). Install it with ./scripts/test-deps.sh (@modelcontextprotocol/sdk %s from npm into .cache/)", what, where, tsSDKVersion)
	if os.Getenv(testservers.RequireEnv) == "1" {
		t.Fatalf("%s; %s=1, so this is a failure, not a skip", msg, testservers.RequireEnv)
	}
	banner := fmt.Sprintf("\n*** SKIPPED, NOT TESTED: %s of ./pkg/mcpserver/ ***\n*** %s ***\n*** Run it with: ./scripts/test-deps.sh && %s=1 go test ./pkg/mcpserver/ (or make test) ***\n\n",
		t.Name(), msg, testservers.RequireEnv)
	fmt.Fprint(os.Stderr, banner)
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		fmt.Fprint(tty, banner)
		tty.Close()
	}
	// As ajvAbsent: a file of the module, just modified and read, so that
	// go test does not replay the skip as a bare "ok".
	if root, err := testservers.Root(); err == nil {
		marker := filepath.Join(root, ".cache", "tssdk-skipped")
		if os.MkdirAll(filepath.Dir(marker), 0o755) == nil && os.WriteFile(marker, []byte(banner), 0o644) == nil {
			os.ReadFile(marker)
		}
	}
	t.Skipf("SKIPPED, NOT TESTED: %s", msg)
}
