package mcpserver_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpserver"
	"github.com/prod-write/prod-write/pkg/testservers"
)

// asResource is an MCP HTTP endpoint on a loopback port, trusting a real
// authorization server (zitadel's OpenID provider, pkg/testservers): its
// [oauth] table is in a tokens file, read by LoadTokens as prod-write-net
// reads it.
type asResource struct {
	as       *testservers.AuthServer
	resource string // the canonical URI, the MCP endpoint's own URL
	backend  *fakeBackend
}

// Clients of the authorization server: agent-1's tokens are for the MCP
// endpoint; elsewhere's, from the same server, are for another resource.
// Both subjects are mapped by the tokens file, so that only the audience
// tells them apart.
const (
	clientAgent     = "agent-1"
	clientElsewhere = "elsewhere"
	clientSecret    = "s3cret-of-the-test"
)

func startASResource(t *testing.T) *asResource {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	resource := "http://" + ln.Addr().String() + "/mcp"
	scopes := []string{mcpserver.OAuthScopeRead, mcpserver.OAuthScopeAgent, mcpserver.OAuthScopeRun}
	as := testservers.StartAuthServer(t,
		testservers.AuthClient{ID: clientAgent, Secret: clientSecret, Audience: []string{resource}, Scopes: scopes},
		testservers.AuthClient{ID: clientElsewhere, Secret: clientSecret, Audience: []string{"http://" + ln.Addr().String() + "/other"}, Scopes: scopes},
	)
	// zitadel's provider types every JWT it signs "JWT" (pkg/op/signer.go),
	// its access tokens too: RFC 9068's at+jwt is not set, so the issuer
	// is untyped (docs/adr/0046-mcp-http-origin-token-type-limits.md).
	tokens := loadTokens(t, fmt.Sprintf(`[oauth]
resource = %q
issuers = [%[2]q]
untyped_issuers = [%[2]q]

[[oauth.principal]]
subject = %q
principal = "agent"
scope = "agent"

[[oauth.principal]]
subject = %q
principal = "agent"
scope = "agent"
`, resource, as.URL, clientAgent, clientElsewhere))
	r := &asResource{as: as, resource: resource, backend: newFake(t, "agent", approval.RoleAgent)}
	h := mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) { return r.backend, nil }, mcpserver.Options{})
	mux := http.NewServeMux()
	h.Mount(mux, "/mcp")
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	return r
}

// getJSON fetches u into v, failing t unless the answer is 200.
func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", u, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v\n%s", u, err, b)
	}
}

var resourceMetadataParam = regexp.MustCompile(`resource_metadata="([^"]+)"`)

// tokenEndpoint is found as a client finds it: the 401's resource_metadata,
// the metadata's authorization server, that server's discovery document.
func (r *asResource) tokenEndpoint(t *testing.T) string {
	t.Helper()
	resp, body := post(t, r.resource, initialize, "")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %s, want 401\n%s", resp.Status, body)
	}
	m := resourceMetadataParam.FindStringSubmatch(resp.Header.Get("WWW-Authenticate"))
	if m == nil {
		t.Fatalf("401 without resource_metadata: %q", resp.Header.Get("WWW-Authenticate"))
	}
	var prm struct {
		Resource             string   `json:"resource"`
		AuthorizationServers []string `json:"authorization_servers"`
	}
	getJSON(t, m[1], &prm)
	if prm.Resource != r.resource || !slices.Equal(prm.AuthorizationServers, []string{r.as.URL}) {
		t.Fatalf("metadata: resource %q, authorization_servers %q; want %q, [%q]", prm.Resource, prm.AuthorizationServers, r.resource, r.as.URL)
	}
	var disc struct {
		Issuer        string   `json:"issuer"`
		TokenEndpoint string   `json:"token_endpoint"`
		GrantTypes    []string `json:"grant_types_supported"`
	}
	getJSON(t, prm.AuthorizationServers[0]+"/.well-known/openid-configuration", &disc)
	if disc.Issuer != r.as.URL || !slices.Contains(disc.GrantTypes, "client_credentials") {
		t.Fatalf("the authorization server's discovery: issuer %q, grant types %q", disc.Issuer, disc.GrantTypes)
	}
	return disc.TokenEndpoint
}

// clientCredentials asks the authorization server at endpoint for a token
// for client id (RFC 6749 §4.4, client_secret_basic), naming the resource
// (RFC 8707).
func clientCredentials(t *testing.T, endpoint, id, scope, resource string) string {
	t.Helper()
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {scope}, "resource": {resource}}
	req, err := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(clientSecret))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("token for %s: %s\n%s", id, resp.Status, b)
	}
	var tr struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
	}
	if err := json.Unmarshal(b, &tr); err != nil || tr.AccessToken == "" || !strings.EqualFold(tr.TokenType, "bearer") {
		t.Fatalf("token for %s: %v\n%s", id, err, b)
	}
	return tr.AccessToken
}

// audience is the aud of the JWT raw, unverified: only to show what the
// authorization server issued.
func audience(t *testing.T, raw string) []string {
	t.Helper()
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		t.Fatalf("the access token is not a JWT: %d parts", len(parts))
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Aud any `json:"aud"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	switch a := c.Aud.(type) {
	case string:
		return []string{a}
	case []any:
		var out []string
		for _, s := range a {
			out = append(out, fmt.Sprint(s))
		}
		return out
	}
	return nil
}

// A token that a real authorization server issued by client credentials,
// found from the 401's resource_metadata, lists and calls the tools; a
// token of the same server for another audience is refused with 401.
func TestOAuthRealAuthorizationServer(t *testing.T) {
	r := startASResource(t)
	endpoint := r.tokenEndpoint(t)

	tok := clientCredentials(t, endpoint, clientAgent, mcpserver.OAuthScopeAgent, r.resource)
	if aud := audience(t, tok); !slices.Equal(aud, []string{r.resource}) {
		t.Fatalf("the authorization server issued a token for %q, want [%q]", aud, r.resource)
	}
	cs, err := connectBearer(r.resource, tok)
	if err != nil {
		t.Fatalf("connecting with the authorization server's token: %v", err)
	}
	defer cs.Close()
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	if !slices.Contains(names, "list_operations") || !slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "plan_") }) {
		t.Fatalf("tools of prod-write:agent: %q, want list_operations and the plan tools", names)
	}
	if slices.Contains(names, "run") {
		t.Errorf("run listed for a token without prod-write:run: %q", names)
	}
	cr, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_operations", Arguments: map[string]any{}})
	if err != nil || cr.IsError {
		t.Fatalf("list_operations: %v %+v", err, cr)
	}

	// A read-only token of the same client: no plan tools.
	ro := clientCredentials(t, endpoint, clientAgent, mcpserver.OAuthScopeRead, r.resource)
	rcs, err := connectBearer(r.resource, ro)
	if err != nil {
		t.Fatal(err)
	}
	defer rcs.Close()
	if names := toolNames(t, rcs); slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "plan_") }) {
		t.Errorf("a prod-write:read token lists %q", names)
	}

	// The same server's token for another resource, of a mapped subject.
	other := clientCredentials(t, endpoint, clientElsewhere, mcpserver.OAuthScopeAgent, r.resource)
	if aud := audience(t, other); slices.Contains(aud, r.resource) {
		t.Fatalf("the other client's token names the resource: %q", aud)
	}
	resp, body := post(t, r.resource, initialize, "", "Bearer "+other)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Fatalf("a token for another audience: %s %q, want 401 with the challenge\n%s", resp.Status, resp.Header.Get("WWW-Authenticate"), body)
	}
	if _, err := connectBearer(r.resource, other); err == nil {
		t.Fatal("the go-sdk client connected with a token for another audience")
	}
}
