package mcpserver_test

import (
	"crypto/ecdsa"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// mintTyp signs c, with the extra claims, under typ (none when typ is "").
func mintTyp(t *testing.T, key *ecdsa.PrivateKey, typ string, c tokenClaims, extra map[string]any) string {
	t.Helper()
	opts := &jose.SignerOptions{}
	if typ != "" {
		opts = opts.WithType(jose.ContentType(typ))
	}
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: "k1"}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(sig).Claims(c).Claims(extra).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// An access token is typed at+jwt (RFC 9068): a JWT of the same issuer,
// for the same audience, typed otherwise or not at all — an ID token whose
// client id is the resource, say — is a 401. An issuer listed in
// untyped_issuers (one that, like zitadel's, types every JWT "JWT") has its
// untyped tokens accepted, but never one with an ID token's claims.
func TestOAuthAccessTokenType(t *testing.T) {
	typed, untyped := newIssuer(t), newIssuer(t)
	tokens := loadTokens(t, fmt.Sprintf(`[oauth]
resource = %q
issuers = [%q, %q]
untyped_issuers = [%q]

[[oauth.principal]]
issuer = %[2]q
subject = "agent-1"
principal = "agent"
scope = "agent"

[[oauth.principal]]
issuer = %[3]q
subject = "agent-1"
principal = "agent"
scope = "agent"
`, resource, typed.srv.URL, untyped.srv.URL, untyped.srv.URL))
	nonce := map[string]any{"nonce": "n-0S6_WzA2Mj"}
	atHash := map[string]any{"at_hash": "77QmUPtjPfzWtF2AnpK9RQ"}
	for _, c := range []struct {
		name  string
		token string
		ok    bool
	}{
		{"typed: at+jwt", mintTyp(t, typed.key, "at+jwt", typed.good("agent-1", mcpserver.OAuthScopeAgent), nil), true},
		{"typed: application/at+jwt", mintTyp(t, typed.key, "application/at+jwt", typed.good("agent-1", mcpserver.OAuthScopeAgent), nil), true},
		{"typed: AT+JWT", mintTyp(t, typed.key, "AT+JWT", typed.good("agent-1", mcpserver.OAuthScopeAgent), nil), true},
		{"typed: JWT", mintTyp(t, typed.key, "JWT", typed.good("agent-1", mcpserver.OAuthScopeAgent), nil), false},
		{"typed: no typ", mintTyp(t, typed.key, "", typed.good("agent-1", mcpserver.OAuthScopeAgent), nil), false},
		{"typed: an ID token", mintTyp(t, typed.key, "JWT", typed.good("agent-1", mcpserver.OAuthScopeAgent), nonce), false},
		{"typed: dpop+jwt", mintTyp(t, typed.key, "dpop+jwt", typed.good("agent-1", mcpserver.OAuthScopeAgent), nil), false},
		{"untyped: JWT", mintTyp(t, untyped.key, "JWT", untyped.good("agent-1", mcpserver.OAuthScopeAgent), nil), true},
		{"untyped: no typ", mintTyp(t, untyped.key, "", untyped.good("agent-1", mcpserver.OAuthScopeAgent), nil), true},
		{"untyped: at+jwt", mintTyp(t, untyped.key, "at+jwt", untyped.good("agent-1", mcpserver.OAuthScopeAgent), nil), true},
		{"untyped: an ID token (nonce)", mintTyp(t, untyped.key, "JWT", untyped.good("agent-1", mcpserver.OAuthScopeAgent), nonce), false},
		{"untyped: an ID token (at_hash)", mintTyp(t, untyped.key, "", untyped.good("agent-1", mcpserver.OAuthScopeAgent), atHash), false},
		{"untyped: dpop+jwt", mintTyp(t, untyped.key, "dpop+jwt", untyped.good("agent-1", mcpserver.OAuthScopeAgent), nil), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			built := 0
			srv := oauthServer(t, tokens, newFake(t, "agent", approval.RoleAgent), &built)
			resp, body := post(t, srv.URL+"/mcp", initialize, "", "Bearer "+c.token)
			switch {
			case c.ok && (resp.StatusCode != http.StatusOK || built != 1):
				t.Fatalf("status %d (%s), %d servers built: want 200 and 1", resp.StatusCode, body, built)
			case !c.ok && (resp.StatusCode != http.StatusUnauthorized || built != 0):
				t.Fatalf("status %d (%s), %d servers built: want 401 and none", resp.StatusCode, body, built)
			}
			if strings.Contains(body, c.token) {
				t.Error("the answer holds the token")
			}
		})
	}
}

func TestOAuthUntypedIssuerMustBeConfigured(t *testing.T) {
	_, err := mcpserver.ParseTokens("tokens.toml", []byte(`[oauth]
resource = "https://mcp.example.test/mcp"
issuers = ["https://idp.example.test"]
untyped_issuers = ["https://other.example.test"]

[[oauth.principal]]
subject = "a"
principal = "p"
scope = "agent"
`))
	if err == nil || !strings.Contains(err.Error(), `oauth.untyped_issuers: "https://other.example.test" is not one of oauth.issuers`) {
		t.Errorf("err %v", err)
	}
}
