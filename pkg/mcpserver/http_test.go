package mcpserver_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpserver"
	"github.com/prod-write/prod-write/pkg/refusal"
)

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

// post sends one raw MCP POST with the given Authorization values.
func post(t *testing.T, url, body, session string, auth ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	for _, a := range auth {
		req.Header.Add("Authorization", a)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// A request without a known bearer gets 401 with WWW-Authenticate: Bearer,
// one answer whatever was wrong, and reaches no backend.
func TestHTTPRefusesUnknownBearer(t *testing.T) {
	tokens := loadTokens(t, tokenEntry("good-token", "agent", agent))
	var built atomic.Int32
	b := newFake(t, "agent", approval.RoleAgent)
	srv := httptest.NewServer(mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) {
		built.Add(1)
		return b, nil
	}, mcpserver.Options{}))
	defer srv.Close()

	var first string
	for _, auth := range [][]string{
		nil,
		{"Bearer wrong-token"},
		{"Bearer good-token-"},
		{"Bearer " + mcpserver.HashToken("good-token")},
		{"Basic Z29vZC10b2tlbg=="},
		{"Token good-token"}, // the right token under another scheme
		{"Bearer"},
		{"good-token"},
		{"Bearer good-token", "Bearer good-token"},
	} {
		resp, body := post(t, srv.URL, initialize, "", auth...)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: status %d, want 401", auth, resp.StatusCode)
		}
		if got := resp.Header.Values("WWW-Authenticate"); !slices.Equal(got, []string{"Bearer"}) {
			t.Errorf("Authorization %q: WWW-Authenticate %q, want Bearer", auth, got)
		}
		if first == "" {
			first = body
		}
		if body != first {
			t.Errorf("Authorization %q: body %q differs from %q: it hints at what was wrong", auth, body, first)
		}
		for _, a := range auth {
			if _, v, _ := strings.Cut(a, " "); v != "" && strings.Contains(body, v) {
				t.Errorf("the response %q echoes the bearer", body)
			}
		}
	}
	if n := built.Load(); n != 0 {
		t.Errorf("a backend was asked for %d times without a known bearer", n)
	}
	// The SDK's client with a wrong bearer cannot connect; with the right
	// one, in any case of the scheme, it can.
	if cs, err := connectBearer(srv.URL, "wrong-token"); err == nil {
		cs.Close()
		t.Error("connected with an unknown bearer")
	}
	if resp, _ := post(t, srv.URL, initialize, "", "bearer good-token"); resp.StatusCode != http.StatusOK {
		t.Errorf("scheme in lower case: status %d", resp.StatusCode)
	}
	cs, err := connectBearer(srv.URL, "good-token")
	if err != nil {
		t.Fatalf("connecting with the right bearer: %v", err)
	}
	cs.Close()
}

// A session belongs to the token that started it: another token sending
// its session id reaches nothing, least of all the wider scope.
func TestHTTPSessionBoundToToken(t *testing.T) {
	tokens := loadTokens(t, tokenEntry("agent-token", "agent", agentRun), tokenEntry("ro-token", "agent", readOnly))
	b := newFake(t, "agent", approval.RoleAgent)
	h := mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) { return b, nil }, mcpserver.Options{AllowRun: true})
	srv := httptest.NewServer(h)
	defer srv.Close()
	cs, err := connectBearer(srv.URL, "agent-token")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if cs.ID() == "" {
		t.Fatal("no session id")
	}
	list := `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`
	resp, body := post(t, srv.URL, list, cs.ID(), "Bearer ro-token")
	if resp.StatusCode == http.StatusOK || strings.Contains(body, "plan_deploy") {
		t.Errorf("the read-only token reached the agent token's session: status %d, %s", resp.StatusCode, body)
	}
	resp, body = post(t, srv.URL, list, cs.ID(), "Bearer agent-token")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, "plan_deploy") {
		t.Errorf("the session's own token: status %d, %s", resp.StatusCode, body)
	}
}

// The service's options are a ceiling on every token: without AllowRun no
// token runs, and ReadOnly makes every token read-only.
func TestHTTPOptionsBoundTokens(t *testing.T) {
	tests := []struct {
		o         mcpserver.Options
		want      []string
		run, plan refusal.Code
	}{
		{mcpserver.Options{}, []string{"explain", "list_operations", "plan_deploy", "plan_inspect", "show_receipt", "status", "wait_for_decision"}, refusal.RoleMissing, ""},
		{mcpserver.Options{AllowRun: true, ReadOnly: true}, []string{"explain", "list_operations", "show_receipt", "status", "wait_for_decision"}, mcpserver.OutOfScope, mcpserver.OutOfScope},
	}
	for _, tt := range tests {
		tokens := loadTokens(t, tokenEntry("agent-token", "agent", agentRun))
		b := newFake(t, "agent", approval.RoleAgent)
		cs := dialHTTP(t, mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) { return b, nil }, tt.o), "agent-token")
		if got := toolNames(t, cs); !slices.Equal(got, tt.want) {
			t.Errorf("%+v: tools %v, want %v", tt.o, got, tt.want)
		}
		b.handled()
		_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"fingerprint": "sha256:" + strings.Repeat("0", 64)}})
		if code := refusalCode(t, "run", err); code != tt.run {
			t.Errorf("%+v: run refused with %q, want %q", tt.o, code, tt.run)
		}
		if tt.plan != "" {
			_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "plan_deploy", Arguments: map[string]any{"target": "staging"}})
			if code := refusalCode(t, "plan_deploy", err); code != tt.plan {
				t.Errorf("%+v: plan_deploy refused with %q, want %q", tt.o, code, tt.plan)
			}
		}
		if calls := b.handled(); len(calls) != 0 {
			t.Errorf("%+v: handlers ran: %v", tt.o, calls)
		}
	}
}

// A token is served only by a backend acting for its principal: the scope
// was resolved against that principal's roles. A backend that cannot be
// made is not remembered: the next request tries again.
func TestHTTPBackendActsForTheTokensPrincipal(t *testing.T) {
	tokens := loadTokens(t, tokenEntry("gw-token", "gateway", agent))
	var mu sync.Mutex
	var backend mcpserver.Backend = newFake(t, "agent", approval.RoleAgent)
	var logs logBuffer
	h := mcpserver.NewHTTPHandler(tokens, func(tok mcpserver.Token) (mcpserver.Backend, error) {
		mu.Lock()
		defer mu.Unlock()
		if backend == nil {
			return nil, errors.New("trust policy unreadable")
		}
		return backend, nil
	}, mcpserver.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	srv := httptest.NewServer(h)
	defer srv.Close()

	resp, body := post(t, srv.URL, initialize, "", "Bearer gw-token")
	if resp.StatusCode != http.StatusInternalServerError || strings.Contains(body, "agent") {
		t.Errorf("a backend for another principal: status %d, body %q", resp.StatusCode, body)
	}
	mu.Lock()
	backend = nil
	mu.Unlock()
	if resp, _ := post(t, srv.URL, initialize, "", "Bearer gw-token"); resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("no backend: status %d", resp.StatusCode)
	}
	mu.Lock()
	backend = newFake(t, "gateway", approval.RoleAgent)
	mu.Unlock()
	cs, err := connectBearer(srv.URL, "gw-token")
	if err != nil {
		t.Fatalf("once the backend acts for the token's principal: %v", err)
	}
	cs.Close()
	for _, want := range []string{`not for the token's principal \"gateway\"`, "trust policy unreadable"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, logs.String())
		}
	}
}

// The bearer appears in no log line and no response, whatever happens:
// refused, served, refused calls, a backend that fails.
func TestHTTPBearerNeverLeaks(t *testing.T) {
	const good, bad = "s3cret-bearer-good", "s3cret-bearer-bad"
	tokens := loadTokens(t, tokenEntry(good, "agent", readOnly))
	var logs logBuffer
	var fail atomic.Bool
	fail.Store(true)
	b := newFake(t, "agent", approval.RoleAgent)
	h := mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) {
		if fail.Load() {
			return nil, errors.New("backend down")
		}
		return b, nil
	}, mcpserver.Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	srv := httptest.NewServer(h)
	defer srv.Close()

	var bodies []string
	for _, auth := range []string{"Bearer " + bad, "Bearer " + good} {
		_, body := post(t, srv.URL, initialize, "", auth)
		bodies = append(bodies, body)
	}
	fail.Store(false)
	cs, err := connectBearer(srv.URL, good)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "plan_deploy", Arguments: map[string]any{"target": "staging"}})
	if err == nil {
		t.Fatal("plan_deploy was not refused to a read-only token")
	}
	bodies = append(bodies, err.Error())
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "status", Arguments: map[string]any{"fingerprint": "sha256:" + strings.Repeat("0", 64)}})
	if err != nil {
		t.Fatal(err)
	}
	bodies = append(bodies, textOf(res))
	cs.Close()

	if logs.String() == "" {
		t.Fatal("nothing was logged: the test would prove nothing")
	}
	for _, secret := range []string{good, bad} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log holds a bearer:\n%s", logs.String())
		}
		for _, body := range bodies {
			if strings.Contains(body, secret) {
				t.Errorf("a response holds a bearer: %s", body)
			}
		}
	}
}

// logBuffer is a log destination the handler's goroutines may write while
// the test reads it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}
