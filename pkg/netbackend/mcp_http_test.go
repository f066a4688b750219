package netbackend

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// stopCalls stands in for the runner service's calls: every call is
// admitted, and stop runs what OnStop was given.
type stopCalls struct {
	mu      sync.Mutex
	closers []func()
}

func (c *stopCalls) Join() (context.Context, func(), bool) {
	return context.Background(), func() {}, true
}

func (c *stopCalls) OnStop(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closers = append(c.closers, f)
}

func (c *stopCalls) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.closers {
		f()
	}
}

// mcpRequest sends one MCP request over HTTP with the bearer.
func mcpRequest(t *testing.T, method, url, body, session string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer the-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Once the service has no call left, MCP over HTTP shuts down at once,
// even while a client holds its session's standalone stream open: the
// sessions are closed, and the stop does not wait out the grace.
func TestServeMCPHTTPStopsWithAStreamOpen(t *testing.T) {
	defer func(g time.Duration) { mcpShutdownGrace = g }(mcpShutdownGrace)
	mcpShutdownGrace = time.Minute
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens.toml")
	entry := "[[token]]\nsha256 = \"" + mcpserver.HashToken("the-token") + "\"\nprincipal = \"agent\"\nscope = \"agent\"\n"
	if err := os.WriteFile(tokens, []byte(entry), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	b := newOneShotBackend(t)
	calls := &stopCalls{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done, listening := make(chan error, 1), make(chan struct{})
	go func() {
		done <- Backend{}.ServeMCPHTTP(ctx, config.Service{MCPListen: addr, MCPTokens: tokens}, func(string) (mcpapi.Backend, error) { return b, nil }, calls,
			slog.New(slog.DiscardHandler), func() { close(listening) })
	}()
	url := "http://" + addr + "/mcp"
	select {
	case err := <-done:
		t.Fatalf("ServeMCPHTTP: %v", err)
	case <-listening:
	}
	resp := mcpRequest(t, http.MethodPost, url, initializeLine, "")
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: status %d, session %q", resp.StatusCode, sid)
	}
	resp = mcpRequest(t, http.MethodPost, url, initializedLine, sid)
	resp.Body.Close()
	stream := mcpRequest(t, http.MethodGet, url, "", sid)
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("GET: status %d", stream.StatusCode)
	}

	calls.stop()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ServeMCPHTTP: %v", err)
		}
	case <-time.After(15 * time.Second): // a generous bound: at once
		t.Fatal("ServeMCPHTTP has not returned 15 s after the service had no call left")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("something still listens once ServeMCPHTTP returned")
	}
}
