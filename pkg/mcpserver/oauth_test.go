package mcpserver_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// resource is the canonical URI of the MCP endpoint in these tests: only
// compared with the tokens' aud, never fetched.
const resource = "https://mcp.example.test/mcp"

// issuer is an authorization server in a test: OpenID discovery and a JWKS
// on an httptest server, and the key its tokens are signed with.
type issuer struct {
	srv *httptest.Server
	key *ecdsa.PrivateKey
	// hits counts the requests it answered.
	hits atomic.Int32
}

func newIssuer(t *testing.T) *issuer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	is := &issuer{key: key}
	mux := http.NewServeMux()
	is.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		is.hits.Add(1)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(is.srv.Close)
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{
			"issuer":                                is.srv.URL,
			"jwks_uri":                              is.srv.URL + "/jwks",
			"authorization_endpoint":                is.srv.URL + "/authorize",
			"token_endpoint":                        is.srv.URL + "/token",
			"id_token_signing_alg_values_supported": []string{"ES256"},
		})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &key.PublicKey, KeyID: "k1", Algorithm: "ES256", Use: "sig"}}})
	})
	return is
}

// claims are a token's; the zero fields are left out.
type tokenClaims struct {
	Issuer   string   `json:"iss,omitempty"`
	Subject  string   `json:"sub,omitempty"`
	Audience []string `json:"aud,omitempty"`
	Expiry   int64    `json:"exp,omitempty"`
	NotBef   int64    `json:"nbf,omitempty"`
	Scope    string   `json:"scope,omitempty"`
	Groups   []string `json:"groups,omitempty"`
}

// good returns the claims of a token is would issue for the resource.
func (is *issuer) good(sub, scope string) tokenClaims {
	now := time.Now()
	return tokenClaims{Issuer: is.srv.URL, Subject: sub, Audience: []string{resource}, Expiry: now.Add(time.Hour).Unix(), NotBef: now.Add(-time.Minute).Unix(), Scope: scope}
}

// mint signs c with key under kid.
func mint(t *testing.T, key *ecdsa.PrivateKey, kid string, c tokenClaims) string {
	t.Helper()
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: jose.JSONWebKey{Key: key, KeyID: kid}}, (&jose.SignerOptions{}).WithType("at+jwt"))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := jwt.Signed(sig).Claims(c).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// unsigned is c as a JWT with alg none.
func unsigned(c tokenClaims) string {
	enc := func(v any) string {
		b, _ := json.Marshal(v)
		return base64.RawURLEncoding.EncodeToString(b)
	}
	return enc(map[string]string{"alg": "none", "typ": "at+jwt", "kid": "k1"}) + "." + enc(c) + "."
}

// oauthTokens is a tokens file with an [oauth] table for the issuers: agent-1
// may plan, reader is read-only, whatever its token's scopes.
func oauthTokens(t *testing.T, issuers ...*issuer) *mcpserver.Tokens {
	t.Helper()
	var urls []string
	for _, is := range issuers {
		urls = append(urls, fmt.Sprintf("%q", is.srv.URL))
	}
	return loadTokens(t, fmt.Sprintf(`[oauth]
resource = %q
issuers = [%s]

[[oauth.principal]]
issuer = %s
subject = "agent-1"
principal = "agent"
scope = "agent"
allow_run = true

[[oauth.principal]]
issuer = %s
subject = "reader"
principal = "agent"
scope = "read-only"
`, resource, strings.Join(urls, ", "), urls[0], urls[0]))
}

// oauthServer serves the handler for tokens, by Mount, with b behind every
// token, and counts the servers built.
func oauthServer(t *testing.T, tokens *mcpserver.Tokens, b *fakeBackend, built *int) *httptest.Server {
	t.Helper()
	h := mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) {
		*built++
		return b, nil
	}, mcpserver.Options{AllowRun: true})
	mux := http.NewServeMux()
	h.Mount(mux, "/mcp")
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

var wantChallenge = `Bearer resource_metadata="https://mcp.example.test/.well-known/oauth-protected-resource/mcp", scope="prod-write:read prod-write:agent prod-write:run"`

// Each access token that fails a check is refused with 401 and the
// challenge that points to the metadata, and no server is built for it;
// the good token, checked in the same table, is served.
func TestOAuthRefusesEachBadToken(t *testing.T) {
	is := newIssuer(t)
	other := newIssuer(t) // an issuer that is not configured
	stranger, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	expired := is.good("agent-1", mcpserver.OAuthScopeAgent)
	expired.Expiry = time.Now().Add(-time.Hour).Unix()
	noExp := is.good("agent-1", mcpserver.OAuthScopeAgent)
	noExp.Expiry = 0
	early := is.good("agent-1", mcpserver.OAuthScopeAgent)
	early.NotBef = time.Now().Add(time.Hour).Unix()
	otherAud := is.good("agent-1", mcpserver.OAuthScopeAgent)
	otherAud.Audience = []string{"https://other.example.test/mcp"}
	noAud := is.good("agent-1", mcpserver.OAuthScopeAgent)
	noAud.Audience = nil
	wrongIss := is.good("agent-1", mcpserver.OAuthScopeAgent)
	wrongIss.Issuer = other.srv.URL
	unmapped := is.good("someone-else", mcpserver.OAuthScopeAgent)

	for _, c := range []struct {
		name  string
		token string
		ok    bool
	}{
		{"good", mint(t, is.key, "k1", is.good("agent-1", mcpserver.OAuthScopeAgent)), true},
		{"another audience", mint(t, is.key, "k1", otherAud), false},
		{"no audience", mint(t, is.key, "k1", noAud), false},
		{"expired", mint(t, is.key, "k1", expired), false},
		{"no expiry", mint(t, is.key, "k1", noExp), false},
		{"not yet valid", mint(t, is.key, "k1", early), false},
		{"an unknown key under the issuer's kid", mint(t, stranger, "k1", is.good("agent-1", mcpserver.OAuthScopeAgent)), false},
		{"an unknown kid", mint(t, stranger, "k2", is.good("agent-1", mcpserver.OAuthScopeAgent)), false},
		{"alg none", unsigned(is.good("agent-1", mcpserver.OAuthScopeAgent)), false},
		// Signed by the unconfigured issuer's own key, as its JWKS
		// publishes: only the configured list keeps it out.
		{"an issuer not configured", mint(t, other.key, "k1", wrongIss), false},
		{"a subject no entry maps", mint(t, is.key, "k1", unmapped), false},
		{"not a JWT", "opaque-token", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			built := 0
			srv := oauthServer(t, oauthTokens(t, is), newFake(t, "agent", approval.RoleAgent), &built)
			resp, body := post(t, srv.URL+"/mcp", initialize, "", "Bearer "+c.token)
			if c.ok {
				if resp.StatusCode != http.StatusOK || built != 1 {
					t.Fatalf("status %d (%s), %d servers built: want 200 and 1", resp.StatusCode, body, built)
				}
				return
			}
			if resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("status %d (%s), want 401", resp.StatusCode, body)
			}
			if got := resp.Header.Values("WWW-Authenticate"); !slices.Equal(got, []string{wantChallenge}) {
				t.Errorf("WWW-Authenticate %q, want %q", got, wantChallenge)
			}
			if built != 0 {
				t.Errorf("%d servers built for a refused token", built)
			}
			if strings.Contains(body, c.token) {
				t.Error("the answer holds the token")
			}
			// An issuer the token names is never asked for its keys
			// unless it is configured.
			if n := other.hits.Load(); n != 0 {
				t.Errorf("the unconfigured issuer answered %d requests", n)
			}
		})
	}
}

// A token in the query string is refused, even beside a good header, and
// a request with no token gets the challenge.
func TestOAuthRefusesQueryToken(t *testing.T) {
	is := newIssuer(t)
	built := 0
	srv := oauthServer(t, oauthTokens(t, is), newFake(t, "agent", approval.RoleAgent), &built)
	good := mint(t, is.key, "k1", is.good("agent-1", mcpserver.OAuthScopeAgent))
	resp, _ := post(t, srv.URL+"/mcp?access_token="+good, initialize, "", "Bearer "+good)
	if resp.StatusCode != http.StatusBadRequest || built != 0 {
		t.Errorf("token in the query: status %d, %d servers built; want 400 and none", resp.StatusCode, built)
	}
	if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, `Bearer error="invalid_request"`) || !strings.Contains(got, "resource_metadata=") {
		t.Errorf("WWW-Authenticate %q", got)
	}
	resp, _ = post(t, srv.URL+"/mcp", initialize, "")
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != wantChallenge {
		t.Errorf("no token: status %d, WWW-Authenticate %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
}

// The metadata document (RFC 9728) at both well-known URIs.
func TestOAuthMetadata(t *testing.T) {
	is := newIssuer(t)
	built := 0
	srv := oauthServer(t, oauthTokens(t, is), newFake(t, "agent", approval.RoleAgent), &built)
	for _, path := range []string{"/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		err = json.NewDecoder(resp.Body).Decode(&m)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d, %v", path, resp.StatusCode, err)
		}
		want := map[string]any{
			"resource":                 resource,
			"authorization_servers":    []any{is.srv.URL},
			"scopes_supported":         []any{"prod-write:read", "prod-write:agent", "prod-write:run"},
			"bearer_methods_supported": []any{"header"},
			"resource_name":            "prod-write",
		}
		got, _ := json.Marshal(m)
		exp, _ := json.Marshal(want)
		if string(got) != string(exp) {
			t.Errorf("%s:\n got %s\nwant %s", path, got, exp)
		}
	}
	if built != 0 {
		t.Errorf("metadata built %d servers", built)
	}
}

// A read-only token (by its entry, or by its scopes) that calls a tool
// that writes gets 403 insufficient_scope naming the scope needed, with
// the JSON-RPC refusal in the body, and nothing runs; an agent token's
// call is not refused so; a tool that only reads is served.
func TestOAuthStepUp(t *testing.T) {
	is := newIssuer(t)
	call := func(name string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":%q,"arguments":{}}}`, name)
	}
	for _, c := range []struct {
		name, sub, scope, tool string
		want                   string // the scope the 403 names, "" for no 403
	}{
		{"read-only entry plans", "reader", mcpserver.OAuthScopeAgent, "plan_deploy", "prod-write:agent"},
		{"read-only entry runs", "reader", mcpserver.OAuthScopeAgent + " " + mcpserver.OAuthScopeRun, "run", "prod-write:agent prod-write:run"},
		{"read scope plans", "agent-1", mcpserver.OAuthScopeRead, "plan_inspect", "prod-write:agent"},
		{"read scope runs", "agent-1", mcpserver.OAuthScopeRead, "run", "prod-write:agent prod-write:run"},
		{"read scope files", "agent-1", mcpserver.OAuthScopeRead, "file", ""},
		{"read scope lists", "agent-1", mcpserver.OAuthScopeRead, "list_operations", ""},
		{"agent plans", "agent-1", mcpserver.OAuthScopeAgent, "plan_deploy", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newFake(t, "agent", approval.RoleAgent)
			built := 0
			srv := oauthServer(t, oauthTokens(t, is), b, &built)
			tok := mint(t, is.key, "k1", is.good(c.sub, c.scope))
			resp, body := post(t, srv.URL+"/mcp", call(c.tool), "", "Bearer "+tok)
			if c.want == "" {
				if resp.StatusCode == http.StatusForbidden {
					t.Fatalf("403 (%s), want the SDK's answer", body)
				}
				return
			}
			if resp.StatusCode != http.StatusForbidden {
				t.Fatalf("status %d (%s), want 403", resp.StatusCode, body)
			}
			want := fmt.Sprintf(`Bearer error="insufficient_scope", scope=%q, resource_metadata="https://mcp.example.test/.well-known/oauth-protected-resource/mcp"`, c.want)
			if got := resp.Header.Values("WWW-Authenticate"); !slices.Equal(got, []string{want}) {
				t.Errorf("WWW-Authenticate %q, want %q", got, want)
			}
			var msg struct {
				ID    int `json:"id"`
				Error struct {
					Code int `json:"code"`
					Data struct {
						Code string `json:"code"`
					} `json:"data"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(body), &msg); err != nil || msg.ID != 7 || msg.Error.Code != -32602 || msg.Error.Data.Code != string(mcpserver.OutOfScope) {
				t.Errorf("body %s (%v): want the JSON-RPC refusal out_of_scope for id 7", body, err)
			}
			if h := b.handled(); slices.ContainsFunc(h, func(s string) bool { return s != "registry" }) {
				t.Errorf("handlers ran: %q", h)
			}
		})
	}
}

// Through the SDK's own client: an agent token lists the agent's tools, a
// read-only one only those that read; the same resolver as static tokens.
func TestOAuthScopeThroughClient(t *testing.T) {
	is := newIssuer(t)
	for _, c := range []struct {
		sub, scope string
		plans      bool
	}{
		{"agent-1", mcpserver.OAuthScopeAgent, true},
		{"agent-1", mcpserver.OAuthScopeRead, false},
		{"reader", mcpserver.OAuthScopeAgent, false},
	} {
		built := 0
		srv := oauthServer(t, oauthTokens(t, is), newFake(t, "agent", approval.RoleAgent), &built)
		cs, err := connectBearer(srv.URL+"/mcp", mint(t, is.key, "k1", is.good(c.sub, c.scope)))
		if err != nil {
			t.Fatalf("%s %s: %v", c.sub, c.scope, err)
		}
		res, err := cs.ListTools(context.Background(), nil)
		cs.Close()
		if err != nil {
			t.Fatal(err)
		}
		plans := slices.ContainsFunc(res.Tools, func(tl *mcp.Tool) bool { return strings.HasPrefix(tl.Name, "plan_") })
		if plans != c.plans {
			t.Errorf("%s with %s: plan tools listed %v, want %v", c.sub, c.scope, plans, c.plans)
		}
	}
}

// The [oauth] table is parsed strictly, each error naming file:line.
func TestParseOAuthRefuses(t *testing.T) {
	head := "[oauth]\nresource = \"https://mcp.example.test/mcp\"\nissuers = [\"https://idp.example.test\"]\n"
	for _, c := range []struct{ name, file, want string }{
		{"read-only entry with run", head + "\n[[oauth.principal]]\nsubject = \"a\"\nprincipal = \"p\"\nscope = \"read-only\"\nallow_run = true\n", ":5: oauth.principal 1: allow_run is true on a read-only entry"},
		{"no scope", head + "\n[[oauth.principal]]\nsubject = \"a\"\nprincipal = \"p\"\n", ":5: oauth.principal 1: scope is required"},
		{"subject and group", head + "\n[[oauth.principal]]\nsubject = \"a\"\ngroup = \"g\"\nprincipal = \"p\"\nscope = \"agent\"\n", ":5: oauth.principal 1: exactly one of subject and group"},
		{"unknown issuer", head + "\n[[oauth.principal]]\nissuer = \"https://evil.example.test\"\nsubject = \"a\"\nprincipal = \"p\"\nscope = \"agent\"\n", ":5: oauth.principal 1: issuer \"https://evil.example.test\" is not one of"},
		{"duplicate", head + "\n[[oauth.principal]]\nsubject = \"a\"\nprincipal = \"p\"\nscope = \"agent\"\n\n[[oauth.principal]]\nsubject = \"a\"\nprincipal = \"q\"\nscope = \"agent\"\n", ":10: oauth.principal 2: maps the same claim as the entry at tokens.toml:5"},
		{"http resource", "[oauth]\nresource = \"http://mcp.example.test/mcp\"\nissuers = [\"https://idp.example.test\"]\n[[oauth.principal]]\nsubject = \"a\"\nprincipal = \"p\"\nscope = \"agent\"\n", ":1: oauth.resource: not https"},
		{"no issuers", "[oauth]\nresource = \"https://mcp.example.test/mcp\"\n[[oauth.principal]]\nsubject = \"a\"\nprincipal = \"p\"\nscope = \"agent\"\n", ":1: oauth.issuers is required"},
		{"unknown key", head + "audience = \"x\"\n[[oauth.principal]]\nsubject = \"a\"\nprincipal = \"p\"\nscope = \"agent\"\n", ":4:"},
		{"no principal", head, "declares no [[oauth.principal]]"},
	} {
		_, err := mcpserver.ParseTokens("tokens.toml", []byte(c.file))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// A JWT's groups map it by a group entry; one without a sub is refused
// even so: the sessions are by subject, and its would be every token's of
// the group.
func TestOAuthGroupsNeedASubject(t *testing.T) {
	is := newIssuer(t)
	tokens := loadTokens(t, fmt.Sprintf("[oauth]\nresource = %q\nissuers = [%q]\n\n[[oauth.principal]]\ngroup = \"deployers\"\nprincipal = \"agent\"\nscope = \"agent\"\n", resource, is.srv.URL))
	member := is.good("svc-deploy", mcpserver.OAuthScopeAgent)
	member.Groups = []string{"deployers"}
	anonymous := member
	anonymous.Subject = ""
	stranger := is.good("svc-other", mcpserver.OAuthScopeAgent)
	stranger.Groups = []string{"others"}
	for _, c := range []struct {
		name string
		c    tokenClaims
		want int
	}{{"a member", member, http.StatusOK}, {"a member without a sub", anonymous, http.StatusUnauthorized}, {"not a member", stranger, http.StatusUnauthorized}} {
		built := 0
		srv := oauthServer(t, tokens, newFake(t, "agent", approval.RoleAgent), &built)
		if resp, body := post(t, srv.URL+"/mcp", initialize, "", "Bearer "+mint(t, is.key, "k1", c.c)); resp.StatusCode != c.want {
			t.Errorf("%s: status %d (%s), want %d", c.name, resp.StatusCode, body, c.want)
		}
	}
}
