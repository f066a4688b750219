package mcpserver_test

import (
	"encoding/json"
	"io"
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

// An Origin refused is a 403 whose body is a JSON-RPC error response with
// no id, as the Streamable HTTP transport's security warning allows: a
// client that reads only JSON-RPC can say what happened.
func TestHTTPOriginRefusalIsJSONRPCError(t *testing.T) {
	tokens := loadTokens(t, `origins = ["https://console.example.com"]`, tokenEntry("good-token", "agent", agent))
	b := newFake(t, "agent", approval.RoleAgent)
	srv := httptest.NewServer(mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) { return b, nil }, mcpserver.Options{}))
	defer srv.Close()
	for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
		req, err := http.NewRequest(method, srv.URL, strings.NewReader(initialize))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer good-token")
		req.Header.Set("Origin", "http://attacker.example")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: status %d, want 403", method, resp.StatusCode)
		}
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: Content-Type %q, want application/json", method, ct)
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(body, &fields); err != nil {
			t.Fatalf("%s: body %q is no JSON object: %v", method, body, err)
		}
		if _, ok := fields["id"]; ok {
			t.Errorf("%s: body %s has an id: the request's message was never read", method, body)
		}
		if len(fields) != 2 || string(fields["jsonrpc"]) != `"2.0"` {
			t.Errorf("%s: body %s, want exactly jsonrpc \"2.0\" and error", method, body)
		}
		var e struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		}
		if err := json.Unmarshal(fields["error"], &e); err != nil || e.Code != mcpserver.CodeTransportRefused || !strings.Contains(e.Message, "Origin") {
			t.Errorf("%s: error %s (%v), want code %d and a message naming the Origin", method, fields["error"], err, mcpserver.CodeTransportRefused)
		}
		if strings.Contains(string(body), "good-token") {
			t.Errorf("%s: body %s holds the bearer", method, body)
		}
	}
}
