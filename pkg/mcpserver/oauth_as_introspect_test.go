package mcpserver_test

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpserver"
	"github.com/prod-write/prod-write/pkg/testservers"
)

// Opaque tokens judged by a real authorization server's introspection
// endpoint (RFC 7662): zitadel's OpenID provider issues them by client
// credentials and answers for them, authenticating the resource server as
// one of its clients (client_secret_basic, each part form-encoded, as
// zitadel decodes it). The endpoint, its client authentication, the token's
// encryption and the answer's format are zitadel's; only what a token was
// issued as is this package's record (pkg/testservers). An active token for
// the resource lists and calls tools; the same server's opaque token for
// another resource, a token it never issued, and every token when the
// resource server's own secret is wrong, are each refused with 401.
func TestOAuthIntrospectionRealAuthorizationServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	res := "http://" + ln.Addr().String() + "/mcp"
	scopes := []string{mcpserver.OAuthScopeRead, mcpserver.OAuthScopeAgent, mcpserver.OAuthScopeRun}
	const introspector, introSecret = "prod-write-mcp", "an introspection secret/with+signs"
	as := testservers.StartAuthServer(t,
		testservers.AuthClient{ID: clientAgent, Secret: clientSecret, Audience: []string{res}, Scopes: scopes, Opaque: true},
		testservers.AuthClient{ID: clientElsewhere, Secret: clientSecret, Audience: []string{"http://" + ln.Addr().String() + "/other"}, Scopes: scopes, Opaque: true},
		testservers.AuthClient{ID: introspector, Secret: introSecret, Introspects: true},
	)
	// One listener, the handler of the secret under test.
	var current http.Handler
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { current.ServeHTTP(w, r) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	handler := func(secret string) func() {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "introspect.secret"), []byte(secret+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "tokens.toml")
		if err := os.WriteFile(path, []byte(fmt.Sprintf(`[oauth]
resource = %q
issuers = [%[2]q]

[[oauth.principal]]
subject = %q
principal = "agent"
scope = "agent"

[[oauth.principal]]
subject = %q
principal = "agent"
scope = "agent"

[[oauth.introspection]]
endpoint = %q
client_id = %q
client_secret_file = "introspect.secret"
`, res, as.URL, clientAgent, clientElsewhere, as.URL+"/oauth/introspect", introspector)), 0o600); err != nil {
			t.Fatal(err)
		}
		tokens, err := mcpserver.LoadTokens(path)
		if err != nil {
			t.Fatal(err)
		}
		h := mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) { return newFake(t, "agent", approval.RoleAgent), nil }, mcpserver.Options{})
		mux := http.NewServeMux()
		h.Mount(mux, "/mcp")
		current = mux
		return h.Close
	}
	closeH := handler(introSecret)
	defer func() { closeH() }()

	endpoint := as.URL + "/oauth/token"
	tok := clientCredentials(t, endpoint, clientAgent, mcpserver.OAuthScopeAgent, res)
	if strings.Count(tok, ".") == 2 {
		t.Fatalf("the authorization server issued a JWT, not an opaque token: %.20s…", tok)
	}
	cs, err := connectBearer(res, tok)
	if err != nil {
		t.Fatalf("connecting with the authorization server's opaque token: %v", err)
	}
	names := toolNames(t, cs)
	cs.Close()
	if !slices.Contains(names, "list_operations") || !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "plan_") }) || slices.Contains(names, "run") {
		t.Fatalf("tools of an introspected prod-write:agent token: %q", names)
	}

	refused := func(what, bearer string) {
		t.Helper()
		resp, body := post(t, res, initialize, "", "Bearer "+bearer)
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
			t.Errorf("%s: %s %q, want 401 with the challenge\n%s", what, resp.Status, resp.Header.Get("WWW-Authenticate"), body)
		}
		if strings.Contains(string(body), bearer) {
			t.Errorf("%s: the answer quotes the token", what)
		}
	}
	refused("the same server's opaque token for another resource", clientCredentials(t, endpoint, clientElsewhere, mcpserver.OAuthScopeAgent, res))
	refused("a token the server never issued", "bm90LWEtdG9rZW4tb2YtdGhpcy1zZXJ2ZXI")

	// The resource server's own secret wrong: the endpoint refuses it, and
	// so every token is refused, the good one too.
	closeH()
	closeH = handler("not the secret")
	refused("a good token, introspected with the wrong secret", tok)
}
