package mcpserver_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

var editor mcpserver.TokensEditor

// Add makes a random token, writes only its hash, and the service's
// loader then resolves the token to the principal and scope asked for.
func TestTokensEditorAddToANewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.toml")
	token, e, err := editor.Add(path, "agent", mcpserver.ScopeAgent, true)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(token, mcpserver.TokenPrefix) || len(token) != len(mcpserver.TokenPrefix)+43 {
		t.Errorf("token %q: want %s and 43 base64url characters (32 bytes)", token, mcpserver.TokenPrefix)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), token) || strings.Contains(string(data), strings.TrimPrefix(token, mcpserver.TokenPrefix)) {
		t.Fatalf("the file holds the token:\n%s", data)
	}
	hash := mcpserver.HashToken(token)
	if !strings.Contains(string(data), hash) {
		t.Errorf("the file does not hold the token's hash:\n%s", data)
	}
	if e.ID != hash[:mcpserver.IDLen] || e.Principal != "agent" || e.Scope != mcpserver.ScopeAgent || !e.AllowRun || e.Source != path+":1" {
		t.Errorf("entry %+v", e)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != mcpserver.NewFileMode {
		t.Errorf("a new file has mode %04o, want %04o", fi.Mode().Perm(), mcpserver.NewFileMode)
	}
	tokens, err := mcpserver.LoadTokens(path)
	if err != nil {
		t.Fatalf("the service's loader refuses the file Add wrote: %v", err)
	}
	if tok, ok := tokens.Resolve(token); !ok || tok.Principal != "agent" || tok.Scope != agentRun {
		t.Errorf("the token resolves to %+v, %v", tok, ok)
	}
	// Two tokens are never the same.
	other, _, err := editor.Add(path, "agent", mcpserver.ScopeReadOnly, false)
	if err != nil || other == token {
		t.Fatalf("second token %q, %v", other, err)
	}
}

// An existing file keeps every line it had, comments, origins and the
// [oauth] table included, and its mode, owner and group.
func TestTokensEditorAddKeepsTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens.toml")
	before := `# MCP over HTTP tokens
origins = ["https://console.example.com"]

[[token]]
# the gateway
sha256 = "` + mcpserver.HashToken("old-token") + `"
principal = "gateway"
scope = "read-only"

[oauth]
resource = "https://mcp.example.com/mcp"
issuers = ["https://idp.example.com"]

[[oauth.principal]]
subject = "svc-agent"
principal = "agent"
scope = "agent"`
	if err := os.WriteFile(path, []byte(before), 0o640); err != nil {
		t.Fatal(err)
	}
	gid := os.Getgid()
	if os.Geteuid() == 0 {
		gid = 65534 // a group the file keeps, which the writer is not in
		if err := os.Chown(path, 0, gid); err != nil {
			t.Fatal(err)
		}
	}
	token, e, err := editor.Add(path, "agent", mcpserver.ScopeReadOnly, false)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(data), before+"\n\n[[token]]\n") {
		t.Errorf("the file's lines were not kept, or the entry was not appended after a blank line:\n%s", data)
	}
	if e.Source != path+":19" || e.Scope != mcpserver.ScopeReadOnly || e.AllowRun {
		t.Errorf("entry %+v", e)
	}
	fi, _ := os.Stat(path)
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o640 || int(st.Gid) != gid || int(st.Uid) != os.Geteuid() {
		t.Errorf("mode %04o owner %d:%d, want 0640 %d:%d", fi.Mode().Perm(), st.Uid, st.Gid, os.Geteuid(), gid)
	}
	tokens, err := mcpserver.ParseTokens(path, data)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tokens.Resolve(token); !ok || tokens.Len() != 2 || tokens.OAuth() == nil {
		t.Errorf("read back: %d tokens, oauth %v", tokens.Len(), tokens.OAuth())
	}
	if leftovers, _ := filepath.Glob(filepath.Join(dir, ".tokens.toml.tmp-*")); len(leftovers) > 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

// A file or directory another account may write, a file another account
// owns, and a file that does not parse are refused, and nothing is
// written.
func TestTokensEditorRefuses(t *testing.T) {
	good := tokenEntry("old-token", "agent", agent)
	for _, c := range []struct {
		name     string
		content  string
		mode     os.FileMode
		dirMode  os.FileMode
		uid      int // 0: the caller's
		scope    string
		wantErr  func(error) bool
		rootOnly bool
	}{
		{name: "group-writable", content: good, mode: 0o664, wantErr: isInsecure},
		{name: "others-writable", content: good, mode: 0o606, wantErr: isInsecure},
		{name: "directory others may write", content: good, mode: 0o644, dirMode: 0o777, wantErr: isInsecure},
		{name: "owned by another account", content: good, mode: 0o644, uid: 65534, wantErr: isConfig, rootOnly: true},
		{name: "malformed", content: "[[token]]\nsha256 = 1\n", mode: 0o644, wantErr: isConfig},
		{name: "unknown scope", content: good, mode: 0o644, scope: "admin", wantErr: isConfig},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.rootOnly && os.Geteuid() != 0 {
				t.Skip("needs root to chown")
			}
			dir := filepath.Join(t.TempDir(), "etc")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "tokens.toml")
			if err := os.WriteFile(path, []byte(c.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, c.mode); err != nil {
				t.Fatal(err)
			}
			if c.dirMode != 0 {
				if err := os.Chmod(dir, c.dirMode); err != nil {
					t.Fatal(err)
				}
			}
			if c.uid != 0 {
				if err := os.Chown(path, c.uid, -1); err != nil {
					t.Fatal(err)
				}
			}
			scope := c.scope
			if scope == "" {
				scope = mcpserver.ScopeAgent
			}
			token, _, err := editor.Add(path, "agent", scope, false)
			if err == nil || !c.wantErr(err) {
				t.Fatalf("Add: %v", err)
			}
			if token != "" || strings.Contains(err.Error(), mcpserver.TokenPrefix) {
				t.Errorf("a refused Add gave a token: %q, %v", token, err)
			}
			if data, _ := os.ReadFile(path); string(data) != c.content {
				t.Errorf("the file changed:\n%s", data)
			}
			if c.scope != "" {
				return // the file itself is fine
			}
			if _, err := editor.Revoke(path, mcpserver.HashToken("old-token")[:12]); err == nil {
				t.Error("Revoke edited the file")
			}
			if data, _ := os.ReadFile(path); string(data) != c.content {
				t.Errorf("the file changed:\n%s", data)
			}
		})
	}
}

func isInsecure(err error) bool {
	var e *keys.InsecureError
	return errors.As(err, &e)
}

func isConfig(err error) bool {
	var e *approval.ConfigError
	return errors.As(err, &e)
}

// Revoke removes the lines of one entry, from the comments right above its
// header to its last key, and nothing else; an id that is no entry's, or several entries', is
// refused; the last entry may go, leaving a file that serves no one.
func TestTokensEditorRevoke(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.toml")
	a, b, c := mcpserver.HashToken("token-a"), mcpserver.HashToken("token-b"), mcpserver.HashToken("token-c")
	content := fmt.Sprintf(`# tokens
[[token]]
sha256 = %q
principal = "agent"
scope = "agent"

# the gateway's
[[token]]
sha256 = %q  # rotated yearly
principal = "gateway"
scope = "read-only"

# the last
[[token]]
sha256 = %q
principal = "agent"
scope = "read-only"
`, a, b, c)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "abc", "zzzzzzzzzzzz", strings.Repeat("0", 12), b + "0"} {
		var idErr *mcpapi.TokenIDError
		if _, err := editor.Revoke(path, id); !errors.As(err, &idErr) {
			t.Errorf("Revoke(%q): %v, want a TokenIDError", id, err)
		}
	}
	e, err := editor.Revoke(path, strings.ToUpper(b[:mcpserver.IDLen]))
	if err != nil {
		t.Fatal(err)
	}
	if e.Principal != "gateway" || e.ID != b[:mcpserver.IDLen] || e.Source != path+":8" {
		t.Errorf("revoked %+v", e)
	}
	want := fmt.Sprintf(`# tokens
[[token]]
sha256 = %q
principal = "agent"
scope = "agent"

# the last
[[token]]
sha256 = %q
principal = "agent"
scope = "read-only"
`, a, c)
	if data, _ := os.ReadFile(path); string(data) != want {
		t.Errorf("after revoking the middle entry:\n%s\nwant:\n%s", data, want)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %04o, want 0600 kept", fi.Mode().Perm())
	}
	entries, err := editor.List(path)
	if err != nil || len(entries) != 2 || entries[0].ID != a[:mcpserver.IDLen] || entries[1].Source != path+":8" {
		t.Fatalf("List: %+v, %v", entries, err)
	}
	for _, h := range []string{a, c} {
		if _, err := editor.Revoke(path, h); err != nil {
			t.Fatal(err)
		}
	}
	if data, _ := os.ReadFile(path); string(data) != "# tokens\n" {
		t.Errorf("after revoking every entry:\n%q", data)
	}
	if entries, err := editor.List(path); err != nil || len(entries) != 0 {
		t.Errorf("List of a file without tokens: %+v, %v", entries, err)
	}
	// The service does not start on it: it would refuse every request.
	if _, err := mcpserver.LoadTokens(path); err == nil {
		t.Error("LoadTokens accepts a file without a token")
	}
}

// An id that begins more than one entry's hash is refused, naming both,
// and one too short to be an id is refused as none.
func TestTokensEditorRevokeAmbiguous(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.toml")
	// Two tokens whose hashes share their first 6 hex digits, the
	// shortest id: a birthday search of a few thousand hashes.
	var t1, t2 string
	seen := map[string]string{}
	for i := 0; t2 == ""; i++ {
		tok := fmt.Sprintf("tok-%d", i)
		p := mcpserver.HashToken(tok)[:6]
		if prev, ok := seen[p]; ok {
			t1, t2 = prev, tok
		}
		seen[p] = tok
	}
	content := tokenEntry(t1, "agent", agent) + "\n" + tokenEntry(t2, "gateway", readOnly)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	prefix := mcpserver.HashToken(t1)[:6]
	var idErr *mcpapi.TokenIDError
	if _, err := editor.Revoke(path, prefix); !errors.As(err, &idErr) || len(idErr.Sources) != 2 || !strings.Contains(err.Error(), path+":1") || !strings.Contains(err.Error(), path+":7") {
		t.Errorf("Revoke(%q): %v, want both entries named", prefix, err)
	}
	if _, err := editor.Revoke(path, prefix[:5]); !errors.As(err, &idErr) || len(idErr.Sources) != 0 {
		t.Errorf("Revoke(%q): %v, want no entry", prefix[:5], err)
	}
	if data, _ := os.ReadFile(path); string(data) != content {
		t.Error("the file changed")
	}
	if _, err := editor.Revoke(path, mcpserver.HashToken(t2)[:12]); err != nil {
		t.Errorf("a longer id of the same entry: %v", err)
	}
}

// Adds at once each keep their entry: the directory's lock orders them.
func TestTokensEditorConcurrentAdds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.toml")
	const n = 16
	var wg sync.WaitGroup
	tokens := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, _, err := editor.Add(path, "agent", mcpserver.ScopeAgent, false)
			if err != nil {
				t.Error(err)
			}
			tokens[i] = tok
		}()
	}
	wg.Wait()
	loaded, err := mcpserver.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Len() != n {
		t.Errorf("%d entries after %d adds at once", loaded.Len(), n)
	}
	for i, tok := range tokens {
		if _, ok := loaded.Resolve(tok); !ok {
			t.Errorf("the token of add %d was lost", i)
		}
	}
}

// List shows no hash, only its first digits.
func TestTokensEditorListShowsNoHash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.toml")
	if err := os.WriteFile(path, []byte(tokenEntry("secret-token", "agent", agentRun)), 0o600); err != nil {
		t.Fatal(err)
	}
	entries, err := editor.List(path)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(entries)
	if h := mcpserver.HashToken("secret-token"); strings.Contains(string(out), h) || strings.Contains(string(out), "secret-token") {
		t.Errorf("List shows the hash or the token: %s", out)
	}
	if want := fmt.Sprintf(`[{"id":%q,"principal":"agent","scope":"agent","allow_run":true,"source":%q}]`, mcpserver.HashToken("secret-token")[:12], path+":1"); string(out) != want {
		t.Errorf("List: %s, want %s", out, want)
	}
}
