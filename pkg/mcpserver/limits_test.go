package mcpserver_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// syncBuffer is a log sink the handler's goroutines may write at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A principal over its bucket gets 429 with Retry-After, before any
// backend is built; the bucket is the principal's, all its tokens
// together, and another principal's is its own.
func TestHTTPRateLimitPerPrincipal(t *testing.T) {
	tokens := loadTokens(t, tokenEntry("a-1", "agent", agent), tokenEntry("a-2", "agent", readOnly), tokenEntry("o-1", "other", agent))
	var built atomic.Int32
	srv := httptest.NewServer(mcpserver.NewHTTPHandler(tokens, func(tok mcpserver.Token) (mcpserver.Backend, error) {
		built.Add(1)
		return newFake(t, tok.Principal, approval.RoleAgent), nil
	}, mcpserver.Options{Rate: 0.001, Burst: 2}))
	defer srv.Close()

	for i, bearer := range []string{"a-1", "a-2"} {
		if resp, body := post(t, srv.URL, initialize, "", "Bearer "+bearer); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d (%s), want 200", i+1, resp.StatusCode, body)
		}
	}
	before := built.Load()
	for _, bearer := range []string{"a-1", "a-2"} {
		resp, _ := post(t, srv.URL, initialize, "", "Bearer "+bearer)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("token %s over its principal's bucket: status %d, want 429", bearer, resp.StatusCode)
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 {
			t.Errorf("Retry-After %q, want whole seconds", resp.Header.Get("Retry-After"))
		}
	}
	if n := built.Load(); n != before {
		t.Errorf("%d backends built for refused requests", n-before)
	}
	if resp, body := post(t, srv.URL, initialize, "", "Bearer o-1"); resp.StatusCode != http.StatusOK {
		t.Errorf("another principal: status %d (%s), want 200", resp.StatusCode, body)
	}
	// Unknown bearers are a 401, not counted against anyone.
	if resp, _ := post(t, srv.URL, initialize, "", "Bearer nobody"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("unknown bearer: status %d, want 401", resp.StatusCode)
	}
}

// Each MCP request over HTTP is one log line naming the principal, the
// token's entry, the method and tool, the outcome and the time it took;
// the bearer appears in none.
func TestHTTPCallLog(t *testing.T) {
	const bearer = "call-log-secret-token"
	tokens := loadTokens(t, tokenEntry(bearer, "agent", readOnly))
	var logs syncBuffer
	b := newFake(t, "agent", approval.RoleAgent)
	srv := httptest.NewServer(mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) { return b, nil }, mcpserver.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))}))
	defer srv.Close()
	cs, err := connectBearer(srv.URL, bearer)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	// out of scope: a JSON-RPC refusal, logged with its code
	_, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "plan_deploy", Arguments: map[string]any{}})
	out := logs.String()
	for _, want := range []string{
		`mcp over http: principal agent (`,
		`tokens.toml:1): initialize: ok (`,
		`tokens.toml:1): tools/list: ok (`,
		`tokens.toml:1): tools/call plan_deploy: error -`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log has no %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, bearer) {
		t.Error("the log holds the bearer")
	}
}

// A request body larger than MaxRequestBody is refused unread past the
// bound, and reaches no tool.
func TestHTTPBodyBounded(t *testing.T) {
	tokens := loadTokens(t, tokenEntry("good-token", "agent", agent))
	b := newFake(t, "agent", approval.RoleAgent)
	srv := httptest.NewServer(mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) { return b, nil }, mcpserver.Options{}))
	defer srv.Close()
	big := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"pad":"` + strings.Repeat("x", mcpserver.MaxRequestBody) + `"}}`
	resp, _ := post(t, srv.URL, big, "", "Bearer good-token")
	if resp.StatusCode != http.StatusRequestEntityTooLarge && resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a body over the bound: status %d, want 413 or 400", resp.StatusCode)
	}
	if resp, body := post(t, srv.URL, initialize, "", "Bearer good-token"); resp.StatusCode != http.StatusOK {
		t.Errorf("a small body: status %d (%s)", resp.StatusCode, body)
	}
	// What inline files need, above the SDK's own default of 4 MiB, is
	// not refused for its size.
	under := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"},"pad":"` + strings.Repeat("x", mcpserver.MaxRequestBody-1<<10) + `"}}`
	if resp, body := post(t, srv.URL, under, "", "Bearer good-token"); resp.StatusCode == http.StatusRequestEntityTooLarge {
		t.Errorf("a body of %d bytes, under the bound: status %d (%.200s)", len(under), resp.StatusCode, body)
	}
}
