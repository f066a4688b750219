package mcpserver_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// newRFC8414Issuer is an OAuth authorization server that is no OpenID
// provider: RFC 8414 metadata only, for the issuer at path under its URL
// (the metadata at the well-known path inserted before it), no
// /.well-known/openid-configuration. The metadata names claimed as its
// issuer ("" for its own URL).
func newRFC8414Issuer(t *testing.T, path, claimed string) (iss string, key *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	iss = srv.URL + path
	if claimed == "" {
		claimed = iss
	}
	mux.HandleFunc("/.well-known/oauth-authorization-server"+path, func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"issuer":                   claimed,
			"jwks_uri":                 srv.URL + "/keys",
			"token_endpoint":           srv.URL + "/token",
			"response_types_supported": []string{"code"},
		})
	})
	mux.HandleFunc("/keys", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	return iss, key
}

// An issuer that publishes RFC 8414 metadata and no OpenID discovery is
// usable: its jwks_uri verifies its tokens, with the same checks. One
// whose metadata names another issuer, or that publishes neither, serves
// no token.
func TestOAuthRFC8414Issuer(t *testing.T) {
	for _, c := range []struct {
		name, path, claimed string
		ok                  bool
	}{
		{"at the root", "", "", true},
		{"with a path", "/tenant/a", "", true},
		{"metadata naming another issuer", "", "https://idp.example.test", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			iss, key := newRFC8414Issuer(t, c.path, c.claimed)
			tokens := loadTokens(t, fmt.Sprintf(`[oauth]
resource = %q
issuers = [%q]

[[oauth.principal]]
subject = "agent-1"
principal = "agent"
scope = "agent"
`, resource, iss))
			built := 0
			srv := oauthServer(t, tokens, newFake(t, "agent", approval.RoleAgent), &built)
			claims := tokenClaims{Issuer: iss, Subject: "agent-1", Audience: []string{resource}, Scope: mcpserver.OAuthScopeAgent}
			good := claims
			good.Expiry, good.NotBef = time.Now().Add(time.Hour).Unix(), time.Now().Add(-time.Minute).Unix()
			resp, body := post(t, srv.URL+"/mcp", initialize, "", "Bearer "+mint(t, key, "k1", good))
			if c.ok != (resp.StatusCode == http.StatusOK) {
				t.Fatalf("status %d (%s), want ok=%v", resp.StatusCode, body, c.ok)
			}
			if !c.ok {
				return
			}
			// The same checks hold: another audience is refused.
			other := good
			other.Audience = []string{"https://other.example.test/mcp"}
			if resp, _ := post(t, srv.URL+"/mcp", initialize, "", "Bearer "+mint(t, key, "k1", other)); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("another audience: status %d, want 401", resp.StatusCode)
			}
		})
	}
	t.Run("no metadata at all", func(t *testing.T) {
		srv0 := httptest.NewServer(http.NotFoundHandler())
		defer srv0.Close()
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tokens := loadTokens(t, fmt.Sprintf("[oauth]\nresource = %q\nissuers = [%q]\n\n[[oauth.principal]]\nsubject = \"agent-1\"\nprincipal = \"agent\"\nscope = \"agent\"\n", resource, srv0.URL))
		built := 0
		srv := oauthServer(t, tokens, newFake(t, "agent", approval.RoleAgent), &built)
		c := tokenClaims{Issuer: srv0.URL, Subject: "agent-1", Audience: []string{resource}, Scope: mcpserver.OAuthScopeAgent}
		c.Expiry, c.NotBef = time.Now().Add(time.Hour).Unix(), time.Now().Add(-time.Minute).Unix()
		if resp, _ := post(t, srv.URL+"/mcp", initialize, "", "Bearer "+mint(t, key, "k1", c)); resp.StatusCode != http.StatusUnauthorized || built != 0 {
			t.Errorf("status %d, %d built: want 401, none", resp.StatusCode, built)
		}
	})
}
