package mcpserver_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// A handler that follows a tokens file serves a token `mcp token add`
// appends at the next request, and refuses one `mcp token revoke`
// removes, ending its session; a change it cannot load leaves the tokens
// before served, logged once; an entry whose scope is narrowed in place
// gets a new server in the new scope.
func TestHTTPFollowsTheTokensFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.toml")
	if err := os.WriteFile(path, []byte(tokenEntry("tok-a", "agent", agentRun)), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	f, err := mcpserver.OpenTokensFile(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	b := newFake(t, "agent", approval.RoleAgent)
	srv := httptest.NewServer(mcpserver.NewFileHTTPHandler(f, func(mcpserver.Token) (mcpserver.Backend, error) { return b, nil }, mcpserver.Options{AllowRun: true}))
	defer srv.Close()
	ctx := context.Background()

	csA, err := connectBearer(srv.URL, "tok-a")
	if err != nil {
		t.Fatal(err)
	}
	defer csA.Close()

	// Added: served at once.
	added, _, err := editor.Add(path, "agent", mcpserver.ScopeReadOnly, false)
	if err != nil {
		t.Fatal(err)
	}
	csN, err := connectBearer(srv.URL, added)
	if err != nil {
		t.Fatalf("a token just added is refused: %v", err)
	}
	if names := toolSet(t, csN); names["plan_deploy"] || !names["status"] {
		t.Errorf("the read-only token added lists %v", names)
	}
	csN.Close()

	// Revoked: refused, and its session ends.
	if _, err := editor.Revoke(path, mcpserver.HashToken("tok-a")[:mcpserver.IDLen]); err != nil {
		t.Fatal(err)
	}
	if _, err := csA.ListTools(ctx, nil); err == nil {
		t.Error("the session of a revoked token still answers")
	}
	if cs, err := connectBearer(srv.URL, "tok-a"); err == nil {
		cs.Close()
		t.Error("a revoked token connects")
	}

	// A change that cannot be loaded: the tokens before are served, and
	// the refusal is logged once.
	if err := os.WriteFile(path, []byte("[[token]]\nsha256 = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		cs, err := connectBearer(srv.URL, added)
		if err != nil {
			t.Fatalf("a malformed change stopped the tokens before: %v", err)
		}
		cs.Close()
	}
	if n := strings.Count(logs.String(), "cannot be loaded"); n != 1 {
		t.Errorf("the refused change was logged %d times, want once:\n%s", n, logs.String())
	}

	// A file others may write is not read until it is fixed.
	if err := os.WriteFile(path, []byte(tokenEntry("tok-c", "agent", agentRun)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o620); err != nil {
		t.Fatal(err)
	}
	if cs, err := connectBearer(srv.URL, "tok-c"); err == nil {
		cs.Close()
		t.Error("a token of a group-writable file is served")
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	csC, err := connectBearer(srv.URL, "tok-c")
	if err != nil {
		t.Fatalf("the file fixed, its token is refused: %v", err)
	}
	defer csC.Close()
	if cs, err := connectBearer(srv.URL, added); err == nil {
		cs.Close()
		t.Error("a token the file no longer holds is served")
	}
	if names := toolSet(t, csC); !names["plan_deploy"] || !names["run"] {
		t.Fatalf("tok-c lists %v", names)
	}

	// The same hash narrowed in place to read-only: the wider session
	// ends, a new one is read-only.
	if err := os.WriteFile(path, []byte(tokenEntry("tok-c", "agent", readOnly)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := csC.ListTools(ctx, nil); err == nil {
		t.Error("the session of a narrowed token still answers")
	}
	cs, err := connectBearer(srv.URL, "tok-c")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if names := toolSet(t, cs); names["plan_deploy"] || names["run"] {
		t.Errorf("the narrowed token lists %v", names)
	}
}

func toolSet(t *testing.T, cs *mcp.ClientSession) map[string]bool {
	t.Helper()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, tl := range res.Tools {
		out[tl.Name] = true
	}
	return out
}

// The [oauth] table is read at start only: a file read again serves its
// new tokens with the table loaded then, and says so in the log.
func TestTokensFileKeepsTheOAuthTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.toml")
	table := func(resource string) string {
		return fmt.Sprintf("[oauth]\nresource = %q\nissuers = [\"https://idp.example.com\"]\n\n[[oauth.principal]]\nsubject = \"svc\"\nprincipal = \"agent\"\nscope = \"agent\"\n", resource)
	}
	if err := os.WriteFile(path, []byte(tokenEntry("tok-a", "agent", agent)+"\n"+table("https://mcp.example.com/mcp")), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	f, err := mcpserver.OpenTokensFile(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	before := f.Tokens().OAuth()
	if err := os.WriteFile(path, []byte(tokenEntry("tok-b", "agent", agent)+"\n"+table("https://other.example.com/mcp")), 0o600); err != nil {
		t.Fatal(err)
	}
	now := f.Tokens()
	if _, ok := now.Resolve("tok-b"); !ok {
		t.Error("the new token is not served")
	}
	if now.OAuth() != before || now.OAuth().Resource != "https://mcp.example.com/mcp" {
		t.Errorf("the [oauth] table served is %+v, want the one loaded at start", now.OAuth())
	}
	if !strings.Contains(logs.String(), "[oauth] table changed") {
		t.Errorf("no log line says the [oauth] table waits for a restart:\n%s", logs.String())
	}
}

// With no file at all, the tokens before are served and it is logged.
func TestTokensFileGone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.toml")
	if err := os.WriteFile(path, []byte(tokenEntry("tok-1", "agent", agent)), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	f, err := mcpserver.OpenTokensFile(path, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, ok := f.Tokens().Resolve("tok-1"); !ok {
			t.Fatal("the tokens before are not served")
		}
	}
	if n := strings.Count(logs.String(), "cannot be loaded"); n != 1 {
		t.Errorf("logged %d times, want once:\n%s", n, logs.String())
	}
}
