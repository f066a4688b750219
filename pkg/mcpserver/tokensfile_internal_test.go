package mcpserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// tokenFile writes a tokens file of one read-only token for bearer.
func tokenFile(t *testing.T, path, bearer string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("[[token]]\nsha256 = \""+HashToken(bearer)+"\"\nprincipal = \"agent\"\nscope = \"read-only\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A change that leaves the file's identity as it was — within one tick
// of the file system's clock, of the same size, on an inode number just
// freed — is still seen while the change is recent: the bytes are
// compared.
func TestTokensFileComparesTheBytesOfARecentChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.toml")
	tokenFile(t, path, "tok-1")
	f, err := OpenTokensFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	frozen, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	f.seen = idOf(frozen)
	f.stat = func(string) (os.FileInfo, error) { return frozen, nil }
	tokenFile(t, path, "tok-2") // the same size: only the hash differs
	if _, ok := f.Tokens().Resolve("tok-2"); !ok {
		t.Fatal("a change the file's identity does not show, made just now, is not seen")
	}
}

// A token the file no longer holds loses its server, and its sessions
// end: a session's standalone stream does not outlive its token.
func TestHTTPEndsTheSessionsOfARevokedToken(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.toml")
	tokenFile(t, path, "tok-1")
	f, err := OpenTokensFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := NewFileHTTPHandler(f, func(Token) (Backend, error) { return readBackend{}, nil }, Options{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := &http.Client{Transport: headerTransport{http.Header{"Authorization": {"Bearer tok-1"}}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: client, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tok, _ := f.Tokens().Resolve("tok-1")
	h.mu.Lock()
	ts := h.servers[serverKey(tok)]
	h.mu.Unlock()
	if ts == nil || ts.srv == nil {
		t.Fatal("the token's server was not built")
	}
	sessions := func() int {
		n := 0
		for range ts.srv.Sessions() {
			n++
		}
		return n
	}
	// At least the client's (the SDK may hold a second while its
	// initialize races its first request): all of them end below.
	if sessions() < 1 {
		t.Fatalf("%d sessions before, want the client's", sessions())
	}
	tokenFile(t, path, "tok-2")
	h.current() // any request does this first
	h.mu.Lock()
	_, kept := h.servers[serverKey(tok)]
	h.mu.Unlock()
	if kept {
		t.Error("the revoked token's server is kept")
	}
	if n := sessions(); n != 0 {
		t.Errorf("%d sessions of the revoked token are left", n)
	}
}
