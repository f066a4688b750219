package mcpserver_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// The Streamable HTTP transport's DNS-rebinding defence: a request whose
// Origin is not one of the tokens file's origins is a 403 before its token
// is read and reaches no backend, even with a good token; no Origin (a
// client that is no browser) and a listed one are served.
func TestHTTPOriginValidated(t *testing.T) {
	tokens := loadTokens(t, `origins = ["https://console.example.com"]`, tokenEntry("good-token", "agent", agent))
	var built atomic.Int32
	b := newFake(t, "agent", approval.RoleAgent)
	srv := httptest.NewServer(mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) {
		built.Add(1)
		return b, nil
	}, mcpserver.Options{}))
	defer srv.Close()

	send := func(origins ...string) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(initialize))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer good-token")
		for _, o := range origins {
			req.Header.Add("Origin", o)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, o := range [][]string{
		{"http://attacker.example"},
		{"null"},
		{"https://console.example.com.attacker.example"},
		{"http://console.example.com"}, // another scheme is another origin
		{"https://console.example.com:8443"},
		{srv.URL}, // the server's own address is no exception: rebinding makes it the attacker's page
		{"https://console.example.com", "http://attacker.example"},
		{""},
	} {
		if got := send(o...); got != http.StatusForbidden {
			t.Errorf("Origin %q: status %d, want 403", o, got)
		}
	}
	if n := built.Load(); n != 0 {
		t.Errorf("a backend was asked for %d times from a refused origin", n)
	}
	if got := send("https://console.example.com"); got != http.StatusOK {
		t.Errorf("a listed origin: status %d, want 200", got)
	}
	if got := send("HTTPS://Console.Example.com"); got != http.StatusOK {
		t.Errorf("a listed origin in another case: status %d, want 200", got)
	}
	if got := send(); got != http.StatusOK {
		t.Errorf("no Origin: status %d, want 200", got)
	}
}

// Without origins in the file, every browser origin is refused; clients
// that send no Origin are served.
func TestHTTPNoOriginsRefusesBrowsers(t *testing.T) {
	tokens := loadTokens(t, tokenEntry("good-token", "agent", agent))
	b := newFake(t, "agent", approval.RoleAgent)
	srv := httptest.NewServer(mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) { return b, nil }, mcpserver.Options{}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(initialize))
	req.Header.Set("Origin", "http://localhost:6274")
	req.Header.Set("Authorization", "Bearer good-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("status %d, want 403", resp.StatusCode)
	}
}

func TestTokensOriginsMalformed(t *testing.T) {
	for _, o := range []string{"console.example.com", "https://console.example.com/", "https://console.example.com/mcp", "ftp://x", "https://u@x"} {
		_, err := mcpserver.ParseTokens("tokens.toml", []byte(`origins = ["`+o+`"]`+"\n"+tokenEntry("t", "agent", agent)))
		if err == nil || !strings.Contains(err.Error(), "tokens.toml:1: origins:") {
			t.Errorf("origin %q: err %v", o, err)
		}
	}
}
