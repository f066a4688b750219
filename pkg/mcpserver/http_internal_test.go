package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// readBackend serves status for principal agent, with an empty registry.
type readBackend struct{}

func (readBackend) Registry() (*operations.Registry, error) { return &operations.Registry{}, nil }
func (readBackend) Principal() (*approval.Principal, error) {
	return &approval.Principal{ID: "agent", Roles: []string{approval.RoleAgent}}, nil
}
func (readBackend) Plan(PlanRequest) (*api.PlanResult, error) { return nil, nil }
func (readBackend) Status(string) (any, *refusal.Error, error) {
	return map[string]any{"allowed": true}, nil, nil
}
func (readBackend) Receipt(string) ([]json.RawMessage, error)         { return nil, nil }
func (readBackend) Run(string, map[string][]byte) (*RunResult, error) { return nil, nil }
func (readBackend) ErrorCode(error) string                            { return "internal" }
func (readBackend) Wait(context.Context, string, time.Duration, func(string)) (any, *refusal.Error, bool, error) {
	return nil, nil, true, nil
}

type headerTransport struct{ h http.Header }

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(r)
}

// The SDK hands every request's headers to the server's methods and tools:
// the handler drops the bearer before, so no tool, backend or log can see
// it.
func TestHTTPDropsTheBearerBeforeTheSDK(t *testing.T) {
	const bearer = "s3cret-bearer"
	tokens, err := ParseTokens("tokens.toml", []byte(`[[token]]
sha256 = "`+HashToken(bearer)+`"
principal = "agent"
scope = "read-only"
`))
	if err != nil {
		t.Fatal(err)
	}
	h := NewHTTPHandler(tokens, func(Token) (Backend, error) { return readBackend{}, nil }, Options{})
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := &http.Client{Transport: headerTransport{http.Header{"Authorization": {"Bearer " + bearer}, "X-Probe": {"seen"}}}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: client, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	tok, _ := tokens.Resolve(bearer)
	h.mu.Lock()
	ts := h.servers[serverKey(tok)]
	h.mu.Unlock()
	if ts == nil || ts.srv == nil {
		t.Fatal("the token's server was not built")
	}
	var mu sync.Mutex
	var seen []http.Header
	ts.srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if extra := req.GetExtra(); extra != nil {
				mu.Lock()
				seen = append(seen, extra.Header.Clone())
				mu.Unlock()
			}
			return next(ctx, method, req)
		}
	})
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "status", Arguments: map[string]any{"fingerprint": "sha256:" + strings.Repeat("0", 64)}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("no request reached the server: the test would prove nothing")
	}
	for _, hd := range seen {
		if hd.Get("X-Probe") != "seen" {
			t.Errorf("the server saw headers %v without the probe: the test would prove nothing", hd)
		}
		if v := hd.Values("Authorization"); len(v) != 0 {
			t.Errorf("the server was handed the Authorization header %q", v)
		}
	}
}
