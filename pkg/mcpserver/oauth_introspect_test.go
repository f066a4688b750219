package mcpserver_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// The introspection client of these tests, as the tokens file names it.
const (
	introClientID     = "prod-write-mcp"
	introClientSecret = "s3cret of the introspection client"
)

// introspector is an RFC 7662 introspection endpoint on an httptest
// server: it authenticates the resource server (client_secret_basic) and
// answers for each token what answers holds, or {"active": false}: the
// failure cases a real server will not produce on demand (a redirect, a
// 500, a malformed answer, each bad claim). The good path against a real
// endpoint, zitadel's, is TestOAuthIntrospectionRealAuthorizationServer
// (docs/adr/0047-mcp-http-limits-tls-origin-body.md).
type introspector struct {
	srv *httptest.Server
	// URL is the issuer these tests give it.
	URL string

	mu      sync.Mutex
	answers map[string]any // by token; a string is a raw body, an int a status
	seen    []string       // tokens asked about
	// redirect is where a 3xx answer points.
	redirect string
}

func newIntrospector(t *testing.T) *introspector {
	t.Helper()
	in := &introspector{answers: map[string]any{}}
	in.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		if r.Method != http.MethodPost || r.URL.Path != "/introspect" || r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		// RFC 6749 §2.3.1: each part form-encoded.
		if !ok || id != introClientID || secret != strings.ReplaceAll(introClientSecret, " ", "+") {
			w.Header().Set("WWW-Authenticate", "Basic")
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		if err := r.ParseForm(); err != nil || r.PostForm.Get("token_type_hint") != "access_token" || r.URL.RawQuery != "" {
			http.Error(w, "bad form", http.StatusBadRequest)
			return
		}
		tok := r.PostForm.Get("token")
		in.mu.Lock()
		in.seen = append(in.seen, tok)
		a, ok := in.answers[tok]
		in.mu.Unlock()
		switch a := a.(type) {
		case int:
			if a/100 == 3 {
				in.mu.Lock()
				w.Header().Set("Location", in.redirect)
				in.mu.Unlock()
			}
			w.WriteHeader(a)
			return
		case string:
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(a))
			return
		}
		if !ok {
			a = map[string]any{"active": false}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(a)
	}))
	t.Cleanup(in.srv.Close)
	in.URL = in.srv.URL
	return in
}

func (in *introspector) answer(token string, a any) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.answers[token] = a
}

func (in *introspector) asked() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.seen)
}

// good is what the endpoint answers for an active token of sub for the
// resource.
func (in *introspector) good(sub, scope string) map[string]any {
	now := time.Now()
	return map[string]any{
		"active": true, "iss": in.URL, "sub": sub, "aud": []string{resource}, "scope": scope,
		"exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(),
		"client_id": "the-agents-client", "token_type": "Bearer",
	}
}

// introTokens writes a tokens file whose issuer in introspects its opaque
// tokens, with the client secret beside it (mode secretMode), and loads
// it; extra is appended to the [oauth] table's entries.
func introTokens(t *testing.T, in *introspector, secretMode os.FileMode, extra string) (*mcpserver.Tokens, error) {
	t.Helper()
	return mcpserver.LoadTokens(writeIntroTokens(t, in, secretMode, extra))
}

// writeIntroTokens writes introTokens' files and returns the tokens
// file's path; the secret is introspect.secret beside it.
func writeIntroTokens(t *testing.T, in *introspector, secretMode os.FileMode, extra string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "introspect.secret"), []byte(introClientSecret+"\n"), secretMode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "introspect.secret"), secretMode); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokens.toml")
	data := fmt.Sprintf(`[oauth]
resource = %q
issuers = [%q]

[[oauth.principal]]
subject = "agent-1"
principal = "agent"
scope = "agent"

[[oauth.principal]]
subject = "reader"
principal = "agent"
scope = "read-only"

[[oauth.introspection]]
endpoint = %q
client_id = %q
client_secret_file = "introspect.secret"
%s`, resource, in.URL, in.URL+"/introspect", introClientID, extra)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// An opaque token is served only when the issuer's introspection endpoint
// says it is active, for this resource, unexpired and a bearer access
// token; every other answer, and every failure of the endpoint, is the
// same 401 as a bad JWT, and no server is built for it. Neither the token
// nor the client secret is in any answer or log line.
func TestOAuthIntrospectionRefusesEachBadToken(t *testing.T) {
	in := newIntrospector(t)
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a redirect was followed to %s: the token went on", r.URL)
	}))
	defer elsewhere.Close()
	in.mu.Lock()
	in.redirect = elsewhere.URL + "/introspect"
	in.mu.Unlock()
	with := func(k string, v any) map[string]any {
		a := in.good("agent-1", mcpserver.OAuthScopeAgent)
		if v == nil {
			delete(a, k)
		} else {
			a[k] = v
		}
		return a
	}
	cases := []struct {
		name   string
		answer any
		ok     bool
	}{
		{"good", in.good("agent-1", mcpserver.OAuthScopeAgent), true},
		{"aud a string", with("aud", resource), true},
		{"no iss", with("iss", nil), true},
		{"no token_type", with("token_type", nil), true},
		{"not active", with("active", false), false},
		{"active the string true", with("active", "true"), false},
		{"no active", with("active", nil), false},
		{"another audience", with("aud", []string{"https://other.example.test/mcp"}), false},
		{"no audience", with("aud", nil), false},
		{"expired", with("exp", time.Now().Add(-time.Minute).Unix()), false},
		{"no exp", with("exp", nil), false},
		{"exp a string", with("exp", fmt.Sprint(time.Now().Add(time.Hour).Unix())), false},
		{"not yet valid", with("nbf", time.Now().Add(time.Hour).Unix()), false},
		{"another issuer", with("iss", "https://other-idp.example.test"), false},
		{"a refresh token", with("token_use", "refresh_token"), false},
		{"a DPoP-bound token", with("token_type", "DPoP"), false},
		{"bound to a key", with("cnf", map[string]string{"jkt": "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"}), false},
		{"no sub", with("sub", nil), false},
		{"a subject no entry maps", with("sub", "someone-else"), false},
		{"the endpoint fails", http.StatusInternalServerError, false},
		{"the endpoint refuses the client", http.StatusUnauthorized, false},
		{"the endpoint redirects", http.StatusTemporaryRedirect, false},
		{"the endpoint answers no JSON", "<html>introspection</html>", false},
		{"the endpoint answers a JSON array", `[{"active":true}]`, false},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			token := fmt.Sprintf("opaque-%d-%x", i, time.Now().UnixNano())
			in.answer(token, c.answer)
			tokens, err := introTokens(t, in, 0o600, "")
			if err != nil {
				t.Fatal(err)
			}
			var logs syncBuffer
			built := 0
			h := mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) {
				built++
				return newFake(t, "agent", approval.RoleAgent), nil
			}, mcpserver.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			mux := http.NewServeMux()
			h.Mount(mux, "/mcp")
			srv := httptest.NewServer(mux)
			defer srv.Close()
			resp, body := post(t, srv.URL+"/mcp", initialize, "", "Bearer "+token)
			if c.ok {
				if resp.StatusCode != http.StatusOK || built != 1 {
					t.Fatalf("status %d (%s), %d servers built: want 200 and 1", resp.StatusCode, body, built)
				}
			} else {
				if resp.StatusCode != http.StatusUnauthorized || built != 0 {
					t.Fatalf("status %d (%s), %d servers built: want 401 and none", resp.StatusCode, body, built)
				}
				if got := resp.Header.Values("WWW-Authenticate"); !slices.Equal(got, []string{wantChallenge}) {
					t.Errorf("WWW-Authenticate %q, want %q", got, wantChallenge)
				}
			}
			if got := in.asked(); !slices.Contains(got, token) {
				t.Errorf("the endpoint was not asked about the token")
			}
			for _, s := range []string{body, logs.String()} {
				if strings.Contains(s, token) || strings.Contains(s, "s3cret") {
					t.Errorf("an answer or log line holds the token or the client secret: %s", s)
				}
			}
		})
	}
}

// An introspected token goes through the same scope resolver as a JWT: a
// read-only entry, or a token with prod-write:read only, lists no tool
// that writes, and its call to one is the 403 insufficient_scope with the
// JSON-RPC refusal, before any handler.
func TestOAuthIntrospectionScope(t *testing.T) {
	in := newIntrospector(t)
	tokens, err := introTokens(t, in, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	in.answer("opaque-agent", in.good("agent-1", mcpserver.OAuthScopeAgent))
	in.answer("opaque-agent-reading", in.good("agent-1", mcpserver.OAuthScopeRead))
	in.answer("opaque-reader", in.good("reader", mcpserver.OAuthScopeAgent))
	b := newFake(t, "agent", approval.RoleAgent)
	h := mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) { return b, nil }, mcpserver.Options{})
	for _, c := range []struct {
		token string
		plans bool
	}{{"opaque-agent", true}, {"opaque-agent-reading", false}, {"opaque-reader", false}} {
		names := toolNames(t, dialHTTP(t, h, c.token))
		if got := slices.Contains(names, "plan_deploy"); got != c.plans {
			t.Errorf("%s: tools %v: plan_deploy listed %v, want %v", c.token, names, got, c.plans)
		}
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	b.handled() // the listings'
	call := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"plan_deploy","arguments":{"target":"staging"}}}`
	resp, body := post(t, srv.URL, call, "", "Bearer opaque-reader")
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(resp.Header.Get("WWW-Authenticate"), `error="insufficient_scope"`) || !strings.Contains(body, `"id":3`) {
		t.Errorf("a read-only introspected token calling plan_deploy: status %d, WWW-Authenticate %q, body %s", resp.StatusCode, resp.Header.Get("WWW-Authenticate"), body)
	}
	if got := b.handled(); len(got) != 0 {
		t.Errorf("the backend was called for the refused call: %v", got)
	}
}

// A JWT is never sent to the introspection endpoint, and with more than
// one introspecting issuer an opaque token goes only to the one whose
// token_prefix begins it, or to none.
func TestOAuthIntrospectionSendsATokenOnlyToItsIssuer(t *testing.T) {
	in := newIntrospector(t)
	tokens, err := introTokens(t, in, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) {
		return newFake(t, "agent", approval.RoleAgent), nil
	}, mcpserver.Options{}))
	defer srv.Close()
	jwtish := "eyJhbGciOiJFUzI1NiJ9.eyJpc3MiOiJodHRwczovL290aGVyIn0.c2ln"
	if resp, _ := post(t, srv.URL, initialize, "", "Bearer "+jwtish); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a JWT of no configured issuer: status %d, want 401", resp.StatusCode)
	}
	if got := in.asked(); len(got) != 0 {
		t.Errorf("the introspection endpoint was asked about %q", got)
	}

	other := newIntrospector(t)
	two := fmt.Sprintf("token_prefix = \"a_\"\n\n[[oauth.introspection]]\nissuer = %q\nendpoint = %q\nclient_id = %q\nclient_secret_file = \"introspect.secret\"\ntoken_prefix = \"b_\"\n", other.URL, other.URL+"/introspect", introClientID)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "introspect.secret"), []byte(introClientSecret), 0o600)
	path := filepath.Join(dir, "tokens.toml")
	data := fmt.Sprintf("[oauth]\nresource = %q\nissuers = [%q, %q]\n\n[[oauth.principal]]\nissuer = %q\nsubject = \"agent-1\"\nprincipal = \"agent\"\nscope = \"agent\"\n\n[[oauth.introspection]]\nissuer = %q\nendpoint = %q\nclient_id = %q\nclient_secret_file = \"introspect.secret\"\n%s",
		resource, in.URL, other.URL, other.URL, in.URL, in.URL+"/introspect", introClientID, two)
	os.WriteFile(path, []byte(data), 0o600)
	tokens, err = mcpserver.LoadTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	other.answer("b_agent", other.good("agent-1", mcpserver.OAuthScopeAgent))
	srv2 := httptest.NewServer(mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) {
		return newFake(t, "agent", approval.RoleAgent), nil
	}, mcpserver.Options{}))
	defer srv2.Close()
	if resp, body := post(t, srv2.URL, initialize, "", "Bearer b_agent"); resp.StatusCode != http.StatusOK {
		t.Errorf("b_agent: status %d (%s), want 200", resp.StatusCode, body)
	}
	if resp, _ := post(t, srv2.URL, initialize, "", "Bearer c_agent"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("c_agent, no issuer's prefix: status %d, want 401", resp.StatusCode)
	}
	if got := in.asked(); len(got) != 0 {
		t.Errorf("issuer a_ was asked about %q", got)
	}
	if got := other.asked(); !slices.Equal(got, []string{"b_agent"}) {
		t.Errorf("issuer b_ was asked about %q, want b_agent only", got)
	}
}

// The client secret file is judged at load as a key is: one its group or
// others may read, or another account owns, stops the load; so do an
// [[oauth.introspection]] entry without what it needs, and two issuers
// whose opaque tokens could not be told apart.
func TestOAuthIntrospectionLoad(t *testing.T) {
	in := newIntrospector(t)
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		_, err := introTokens(t, in, mode, "")
		var ie *keys.InsecureError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "client_secret_file") {
			t.Errorf("secret mode %04o: err %v, want a keys.InsecureError naming client_secret_file", mode, err)
		}
	}
	if os.Geteuid() == 0 {
		path := writeIntroTokens(t, in, 0o600, "")
		if err := os.Chown(filepath.Join(filepath.Dir(path), "introspect.secret"), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := mcpserver.LoadTokens(path); err == nil || !strings.Contains(err.Error(), "not owned by the service's account") {
			t.Errorf("a secret owned by uid 65534: err %v, want it refused", err)
		}
	} else {
		t.Log("not root: a secret owned by another account is not tested")
	}
	path := writeIntroTokens(t, in, 0o600, "")
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "introspect.secret"), []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := mcpserver.LoadTokens(path); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("an empty secret: err %v, want it refused", err)
	}
	for _, c := range []struct{ entry, want string }{
		{"[[oauth.introspection]]\nendpoint = \"http://idp.example.test/introspect\"\nclient_id = \"x\"\nclient_secret_file = \"s\"\n", "endpoint: not https"},
		{"[[oauth.introspection]]\nendpoint = \"https://idp.example.test/introspect\"\nclient_secret_file = \"s\"\n", "client_id is required"},
		{"[[oauth.introspection]]\nendpoint = \"https://idp.example.test/introspect\"\nclient_id = \"x\"\n", "client_secret_file is required"},
		{"[[oauth.introspection]]\nissuer = \"https://other.example.test\"\nendpoint = \"https://idp.example.test/introspect\"\nclient_id = \"x\"\nclient_secret_file = \"s\"\n", "is not one of oauth.issuers"},
	} {
		src := fmt.Sprintf("[oauth]\nresource = %q\nissuers = [\"https://idp.example.test\"]\n\n[[oauth.principal]]\nsubject = \"a\"\nprincipal = \"agent\"\nscope = \"agent\"\n\n%s", resource, c.entry)
		if _, err := mcpserver.ParseTokens("tokens.toml", []byte(src)); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "tokens.toml:10: oauth.introspection 1:") {
			t.Errorf("%q: err %v, want tokens.toml:10 and %q", c.entry, err, c.want)
		}
	}
	entry := func(iss, prefix string) string {
		return fmt.Sprintf("[[oauth.introspection]]\nissuer = %q\nendpoint = \"https://idp.example.test/introspect\"\nclient_id = \"x\"\nclient_secret_file = \"s\"\ntoken_prefix = %q\n", iss, prefix)
	}
	for _, c := range []struct{ entries, want string }{
		{entry("https://a.example.test", "") + entry("https://b.example.test", "b_"), "token_prefix is required"},
		{entry("https://a.example.test", "at_") + entry("https://b.example.test", "at_x"), "overlap"},
		{entry("https://a.example.test", "a_") + entry("https://a.example.test", "b_"), "already has its introspection endpoint"},
	} {
		src := fmt.Sprintf("[oauth]\nresource = %q\nissuers = [\"https://a.example.test\", \"https://b.example.test\"]\n\n[[oauth.principal]]\nissuer = \"https://a.example.test\"\nsubject = \"a\"\nprincipal = \"agent\"\nscope = \"agent\"\n\n%s", resource, c.entries)
		if _, err := mcpserver.ParseTokens("tokens.toml", []byte(src)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err %v, want %q", c.entries, err, c.want)
		}
	}
}

// An introspected token's groups map it as a JWT's do; one without a sub
// is refused even when its group is mapped: its sessions would be shared
// with every other token of the group.
func TestOAuthIntrospectionGroups(t *testing.T) {
	in := newIntrospector(t)
	tokens, err := introTokens(t, in, 0o600, "\n[[oauth.principal]]\ngroup = \"deployers\"\nprincipal = \"agent\"\nscope = \"agent\"\n")
	if err != nil {
		t.Fatal(err)
	}
	member := in.good("svc-deploy", mcpserver.OAuthScopeAgent)
	member["groups"] = []string{"deployers"}
	in.answer("opaque-member", member)
	anonymous := in.good("", mcpserver.OAuthScopeAgent)
	delete(anonymous, "sub")
	anonymous["groups"] = []string{"deployers"}
	in.answer("opaque-anonymous", anonymous)
	srv := httptest.NewServer(mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) {
		return newFake(t, "agent", approval.RoleAgent), nil
	}, mcpserver.Options{}))
	defer srv.Close()
	if resp, body := post(t, srv.URL, initialize, "", "Bearer opaque-member"); resp.StatusCode != http.StatusOK {
		t.Errorf("a member of a mapped group: status %d (%s), want 200", resp.StatusCode, body)
	}
	if resp, _ := post(t, srv.URL, initialize, "", "Bearer opaque-anonymous"); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a member of a mapped group without a sub: status %d, want 401", resp.StatusCode)
	}
}

// An active answer is kept (at most a minute, never past the token's exp):
// a client's requests with one opaque token ask its endpoint once. Tokens
// not kept are asked about at a bounded rate: a flood of junk opaque
// tokens (attacker input, before any authentication) is refused rather
// than relayed to the authorization server, and a token already kept is
// still served during it.
func TestOAuthIntrospectionCachedAndBounded(t *testing.T) {
	in := newIntrospector(t)
	tokens, err := introTokens(t, in, 0o600, "")
	if err != nil {
		t.Fatal(err)
	}
	in.answer("opaque-agent", in.good("agent-1", mcpserver.OAuthScopeAgent))
	built := 0
	srv := oauthServer(t, tokens, newFake(t, "agent", approval.RoleAgent), &built)
	for range 3 {
		if resp, _ := post(t, srv.URL+"/mcp", initialize, "", "Bearer opaque-agent"); resp.StatusCode != http.StatusOK {
			t.Fatalf("opaque-agent: %d", resp.StatusCode)
		}
	}
	if n := len(in.asked()); n != 1 {
		t.Fatalf("three requests with one token asked the endpoint %d times, want 1", n)
	}
	const junk = 200
	refused := 0
	for i := range junk {
		resp, _ := post(t, srv.URL+"/mcp", initialize, "", fmt.Sprintf("Bearer opaque-junk-%d", i))
		if resp.StatusCode == http.StatusUnauthorized {
			refused++
		}
	}
	if asked := len(in.asked()) - 1; refused != junk || asked >= junk/2 {
		t.Fatalf("%d junk tokens: %d refused, %d relayed to the endpoint; want all refused, most without asking", junk, refused, asked)
	}
	if resp, _ := post(t, srv.URL+"/mcp", initialize, "", "Bearer opaque-agent"); resp.StatusCode != http.StatusOK {
		t.Fatalf("the kept token during the flood: %d", resp.StatusCode)
	}
}
