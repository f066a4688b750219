package netbackend

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// startMCPHTTP serves MCP over HTTP as s says, on a free loopback address
// and, unless s names one, with a tokens file of one agent token
// "the-token"; it returns the address, and stops the server when the test
// ends. An error of ServeMCPHTTP before it listens is returned instead.
func startMCPHTTP(t *testing.T, s config.Service) (string, error) {
	t.Helper()
	if s.MCPTokens == "" {
		s.MCPTokens = filepath.Join(t.TempDir(), "tokens.toml")
		entry := "[[token]]\nsha256 = \"" + mcpserver.HashToken("the-token") + "\"\nprincipal = \"agent\"\nscope = \"agent\"\n"
		if err := os.WriteFile(s.MCPTokens, []byte(entry), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.MCPListen = ln.Addr().String()
	ln.Close()
	b := newOneShotBackend(t)
	calls := &stopCalls{}
	ctx, cancel := context.WithCancel(context.Background())
	done, listening := make(chan error, 1), make(chan struct{})
	go func() {
		done <- Backend{}.ServeMCPHTTP(ctx, s, func(string) (mcpapi.Backend, error) { return b, nil }, calls, slog.New(slog.DiscardHandler), func() { close(listening) })
	}()
	select {
	case err := <-done:
		cancel()
		return "", err
	case <-listening:
	}
	t.Cleanup(func() {
		calls.stop()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ServeMCPHTTP: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("ServeMCPHTTP has not returned 15 s after the service had no call left")
		}
	})
	return s.MCPListen, nil
}

// postInitialize sends an initialize request with the bearer the-token
// through client and returns the status, the body read.
func postInitialize(t *testing.T, client *http.Client, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(initializeLine))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer the-token")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// The service's [service] mcp_rate and mcp_burst are the limit MCP over
// HTTP serves with: with a burst of 2 and a rate that refills nothing
// within the test, a third request is a 429; unset, the default burst of
// 50 serves it.
func TestServeMCPHTTPTakesTheConfiguredRate(t *testing.T) {
	addr, err := startMCPHTTP(t, config.Service{MCPRate: 0.001, MCPBurst: 2})
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr + "/mcp"
	for i := range 2 {
		if resp := postInitialize(t, http.DefaultClient, url); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d of a burst of 2: status %d, want 200", i+1, resp.StatusCode)
		}
	}
	resp := postInitialize(t, http.DefaultClient, url)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("request 3 of a burst of 2: status %d, want 429", resp.StatusCode)
	}
	// 1/0.001 s a request: the wait is about 1000 s, not the default's 0.1 s.
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 900 {
		t.Errorf("Retry-After %q, want about 1000 s (mcp_rate 0.001)", resp.Header.Get("Retry-After"))
	}

	addr, err = startMCPHTTP(t, config.Service{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if resp := postInitialize(t, http.DefaultClient, "http://"+addr+"/mcp"); resp.StatusCode != http.StatusOK {
			t.Fatalf("default limit, request %d: status %d, want 200", i+1, resp.StatusCode)
		}
	}
}
