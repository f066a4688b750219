package mcpserver

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/time/rate"

	"github.com/prod-write/prod-write/approval"
)

// The OAuth scopes of MCP over HTTP (docs/adr/0042-oauth-resource-server.md).
// A token's scope claim narrows what its [[oauth.principal]] entry allows:
// it never widens it.
const (
	// OAuthScopeRead reaches the tools that read.
	OAuthScopeRead = "prod-write:read"
	// OAuthScopeAgent reaches the agent's tools: planning as well.
	OAuthScopeAgent = "prod-write:agent"
	// OAuthScopeRun adds run, where the entry allows run.
	OAuthScopeRun = "prod-write:run"
)

// scopesSupported are the scopes the metadata document publishes.
var scopesSupported = []string{OAuthScopeRead, OAuthScopeAgent, OAuthScopeRun}

// signingAlgs are the JWS algorithms an access token may be signed with:
// asymmetric only, so that no key the issuer publishes can be used as an
// HMAC secret, and never "none".
var signingAlgs = []string{
	oidc.RS256, oidc.RS384, oidc.RS512,
	oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.PS256, oidc.PS384, oidc.PS512,
	oidc.EdDSA,
}

// OAuth is the [oauth] table of a tokens file: MCP over HTTP as an OAuth 2.1
// resource server. Tokens are JWTs from the configured issuers, checked for
// signature (the issuer's JWKS, found by OpenID discovery), issuer,
// audience (Resource, always), expiry and not-before.
type OAuth struct {
	// Resource is the canonical URI of the MCP endpoint (RFC 8707,
	// RFC 9728): a token's aud must name it.
	Resource string
	// Issuers are the authorization servers whose tokens are accepted.
	Issuers []string
	// GroupsClaim is the claim holding a token's groups.
	GroupsClaim string
	// Principals map a token's claims to a principal and a scope.
	Principals []OAuthPrincipal
	// UntypedIssuers are the issuers whose access tokens do not carry
	// RFC 9068's typ at+jwt (docs/adr/0046-mcp-http-origin-token-type-limits.md):
	// theirs may be typed JWT or not at all, and an ID token is told
	// apart by its claims instead.
	UntypedIssuers []string
	// Introspection are the issuers whose opaque access tokens are
	// checked at their RFC 7662 introspection endpoint, at most one an
	// issuer.
	Introspection []*Introspection
}

// OAuthPrincipal is one [[oauth.principal]] entry: the tokens of Issuer
// whose sub is Subject, or whose groups hold Group, act for Principal
// within Scope.
type OAuthPrincipal struct {
	Issuer    string
	Subject   string
	Group     string
	Principal string
	Scope     Scope
	Source    string
}

// MetadataURL is where the protected resource metadata of o is (RFC 9728
// §3.1): the well-known path inserted between the resource's host and its
// path.
func (o *OAuth) MetadataURL() string {
	u, _ := url.Parse(o.Resource) // checked at load
	u.Path = wellKnown + strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	return u.String()
}

const wellKnown = "/.well-known/oauth-protected-resource"

type oauthTable struct {
	Resource    string           `toml:"resource"`
	Issuers     []string         `toml:"issuers"`
	GroupsClaim string           `toml:"groups_claim"`
	Untyped     []string         `toml:"untyped_issuers"`
	Principal   []oauthPrincipal `toml:"principal"`
	Introspect  []introspection  `toml:"introspection"`
}

type introspection struct {
	Issuer           string `toml:"issuer"`
	Endpoint         string `toml:"endpoint"`
	ClientID         string `toml:"client_id"`
	ClientSecretFile string `toml:"client_secret_file"`
	TokenPrefix      string `toml:"token_prefix"`
}

type oauthPrincipal struct {
	Issuer    string `toml:"issuer"`
	Subject   string `toml:"subject"`
	Group     string `toml:"group"`
	Principal string `toml:"principal"`
	Scope     string `toml:"scope"`
	AllowRun  bool   `toml:"allow_run"`
}

// parseOAuth checks an [oauth] table; starts are the lines of its
// [[oauth.principal]] tables, istarts those of its [[oauth.introspection]]
// tables and line that of [oauth].
func parseOAuth(name string, line int, starts, istarts []int, t *oauthTable) (*OAuth, error) {
	bad := func(l int, format string, args ...any) error {
		return &approval.ConfigError{File: name, Line: l, Msg: fmt.Sprintf(format, args...)}
	}
	if err := checkURL(t.Resource); err != nil {
		return nil, bad(line, "oauth.resource: %v: it is the canonical URI of this MCP endpoint, which every token's aud must name", err)
	}
	if len(t.Issuers) == 0 {
		return nil, bad(line, "oauth.issuers is required: the authorization servers whose tokens are accepted")
	}
	for _, iss := range t.Issuers {
		if err := checkURL(iss); err != nil {
			return nil, bad(line, "oauth.issuers: %q: %v", iss, err)
		}
	}
	for _, iss := range t.Untyped {
		if !slices.Contains(t.Issuers, iss) {
			return nil, bad(line, "oauth.untyped_issuers: %q is not one of oauth.issuers", iss)
		}
	}
	o := &OAuth{Resource: t.Resource, Issuers: t.Issuers, GroupsClaim: t.GroupsClaim, UntypedIssuers: t.Untyped}
	if o.GroupsClaim == "" {
		o.GroupsClaim = "groups"
	}
	if len(t.Principal) == 0 {
		return nil, bad(line, "declares no [[oauth.principal]]: every token would be refused")
	}
	seen := map[string]string{}
	for i, e := range t.Principal {
		l := 0
		if i < len(starts) {
			l = starts[i]
		}
		src := fmt.Sprintf("%s:%d", name, l)
		if l == 0 {
			src = fmt.Sprintf("%s (oauth.principal %d)", name, i+1)
		}
		pbad := func(format string, args ...any) error {
			return bad(l, "oauth.principal %d: %s", i+1, fmt.Sprintf(format, args...))
		}
		p := OAuthPrincipal{Issuer: e.Issuer, Subject: e.Subject, Group: e.Group, Principal: e.Principal, Source: src}
		if p.Issuer == "" && len(o.Issuers) == 1 {
			p.Issuer = o.Issuers[0]
		}
		if !slices.Contains(o.Issuers, p.Issuer) {
			return nil, pbad("issuer %q is not one of oauth.issuers", p.Issuer)
		}
		if (p.Subject == "") == (p.Group == "") {
			return nil, pbad("exactly one of subject and group is required")
		}
		if p.Principal == "" {
			return nil, pbad("principal is required")
		}
		key := p.Issuer + "\x00" + p.Subject + "\x00" + p.Group
		if prev, dup := seen[key]; dup {
			return nil, pbad("maps the same claim as the entry at %s", prev)
		}
		seen[key] = src
		switch e.Scope {
		case ScopeReadOnly:
			if e.AllowRun {
				return nil, pbad("allow_run is true on a read-only entry: a read-only principal never runs")
			}
			p.Scope = Scope{ReadOnly: true}
		case ScopeAgent:
			p.Scope = Scope{AllowRun: e.AllowRun}
		case "":
			return nil, pbad("scope is required (%q or %q)", ScopeReadOnly, ScopeAgent)
		default:
			return nil, pbad("unknown scope %q (known: %s, %s)", e.Scope, ScopeReadOnly, ScopeAgent)
		}
		o.Principals = append(o.Principals, p)
	}
	in, err := parseIntrospection(name, istarts, o, t.Introspect)
	if err != nil {
		return nil, err
	}
	o.Introspection = in
	return o, nil
}

// checkURL accepts an absolute https URL without a fragment, or http on a
// loopback host (a test, or a proxy on the same machine).
func checkURL(s string) error {
	if s == "" {
		return errors.New("missing")
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || u.Fragment != "" || u.RawQuery != "" {
		return errors.New("not an absolute URL without query or fragment")
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if ip := net.ParseIP(u.Hostname()); (ip != nil && ip.IsLoopback()) || u.Hostname() == "localhost" {
			return nil
		}
	}
	return errors.New("not https (http only on a loopback host)")
}

// errInsufficientScope is a valid token that carries none of the scopes of
// MCP over HTTP.
var errInsufficientScope = errors.New("the token carries none of the prod-write scopes")

// verifier checks access tokens against o. Each issuer's provider (its
// discovery document and JWKS) is fetched on first use and kept; a fetch
// that fails is tried again at the next token.
type verifier struct {
	o      *OAuth
	client *http.Client

	// introspectClient is client following no redirect: a token is sent
	// to the introspection endpoint configured and nowhere else.
	introspectClient *http.Client

	mu      sync.Mutex
	issuers map[string]*issuerState

	// introspected are the introspection endpoints' positive answers, by
	// the token's hash, for at most introspectedFor and never past the
	// token's exp; askLimit bounds how often an endpoint is asked about a
	// token not among them (docs/adr/0042-oauth-resource-server.md).
	imu          sync.Mutex
	introspected map[[32]byte]introspectedToken
	askLimit     *rate.Limiter
}

// introspectedToken is a cached answer.
type introspectedToken struct {
	tok   Token
	until time.Time
}

// introspectedFor bounds how long an active answer is trusted without
// asking again: a token revoked at its issuer stops counting here within
// it. maxIntrospected bounds how many are kept.
const (
	introspectedFor = time.Minute
	maxIntrospected = 10000
)

// askRate and askBurst bound the introspection requests made for tokens
// not cached: unauthenticated callers cannot make the service hammer an
// authorization server, nor queue behind it.
var (
	askRate  = rate.Limit(20)
	askBurst = 40
)

// issuerState is one issuer's verifier, discovered on first use. Its own
// lock is held while it is discovered, so that an issuer that does not
// answer delays only the tokens that name it, never another issuer's; a
// failed discovery is remembered for discoveryRetry, so that tokens
// naming an issuer that is down are refused at once, without asking it
// again each time (docs/adr/0042-oauth-resource-server.md).
type issuerState struct {
	mu     sync.Mutex
	iv     *oidc.IDTokenVerifier
	err    error
	failed time.Time
}

// discoveryRetry is how long a failed discovery is remembered.
var discoveryRetry = 30 * time.Second

func newVerifier(o *OAuth, client *http.Client) *verifier {
	if client == nil {
		// No proxy from anyone's environment, as for the bridges.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
		client = &http.Client{Timeout: 10 * time.Second, Transport: t}
	}
	ic := *client
	ic.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &verifier{o: o, client: client, introspectClient: &ic, issuers: map[string]*issuerState{},
		introspected: map[[32]byte]introspectedToken{}, askLimit: rate.NewLimiter(askRate, askBurst)}
}

// claims are what is read of a verified token.
type claims struct {
	Subject string          `json:"sub"`
	Scope   string          `json:"scope"`
	SCP     json.RawMessage `json:"scp"`
}

// verify returns the Token raw stands for. Its errors never hold raw:
// they say which check failed, for the service's log.
func (v *verifier) verify(ctx context.Context, raw string) (Token, error) {
	iss, err := unverifiedIssuer(raw)
	if errors.Is(err, errNotJWT) {
		// An opaque token: only an issuer's introspection endpoint can
		// say what it is, and only the one whose prefix begins it.
		if in := v.o.introspectionFor(raw); in != nil {
			return v.introspectCached(ctx, in, raw)
		}
	}
	if err != nil {
		return Token{}, err
	}
	// Only a configured issuer's keys are ever fetched: an issuer the
	// token names is attacker input until its signature is checked.
	if !slices.Contains(v.o.Issuers, iss) {
		return Token{}, fmt.Errorf("issuer %q is not configured", iss)
	}
	iv, err := v.issuer(ctx, iss)
	if err != nil {
		return Token{}, err
	}
	idt, err := iv.Verify(oidc.ClientContext(ctx, v.client), raw)
	if err != nil {
		return Token{}, fmt.Errorf("verifying the token of issuer %q: %w", iss, err)
	}
	var c claims
	if err := idt.Claims(&c); err != nil {
		return Token{}, fmt.Errorf("reading the token's claims: %w", err)
	}
	var all map[string]json.RawMessage
	if err := idt.Claims(&all); err != nil {
		return Token{}, fmt.Errorf("reading the token's claims: %w", err)
	}
	if err := accessToken(raw, all, slices.Contains(v.o.UntypedIssuers, iss)); err != nil {
		return Token{}, fmt.Errorf("the token of issuer %q: %w", iss, err)
	}
	scopes := strings.Fields(c.Scope)
	scopes = append(scopes, stringsClaim(c.SCP)...)
	return v.resolve(idt.Issuer, idt.Subject, stringsClaim(all[v.o.GroupsClaim]), scopes)
}

// resolve maps a verified access token of iss — a JWT's claims, or what
// its introspection endpoint answered — to its Token: the one
// [[oauth.principal]] entry that maps its subject or groups, narrowed by
// its scopes.
func (v *verifier) resolve(iss, sub string, groups, scopes []string) (Token, error) {
	if sub == "" {
		// The sessions are by subject: tokens without one, mapped by a
		// group, would share theirs.
		return Token{}, fmt.Errorf("a token of issuer %q has no sub", iss)
	}
	var match []OAuthPrincipal
	for _, p := range v.o.Principals {
		if p.Issuer == iss && ((p.Subject != "" && p.Subject == sub) || (p.Group != "" && slices.Contains(groups, p.Group))) {
			match = append(match, p)
		}
	}
	switch len(match) {
	case 0:
		return Token{}, fmt.Errorf("no [[oauth.principal]] maps subject %q of issuer %q", sub, iss)
	case 1:
	default:
		srcs := make([]string, len(match))
		for i, p := range match {
			srcs[i] = p.Source
		}
		return Token{}, fmt.Errorf("subject %q of issuer %q is mapped by more than one entry (%s): which one would be a guess", sub, iss, strings.Join(srcs, ", "))
	}
	p := match[0]
	var s Scope
	switch {
	case slices.Contains(scopes, OAuthScopeAgent) && !p.Scope.ReadOnly:
		s = Scope{AllowRun: p.Scope.AllowRun && slices.Contains(scopes, OAuthScopeRun)}
	case slices.Contains(scopes, OAuthScopeRead), slices.Contains(scopes, OAuthScopeAgent):
		s = Scope{ReadOnly: true}
	default:
		return Token{}, errInsufficientScope
	}
	tok := Token{Principal: p.Principal, Scope: s, Source: p.Source, oauth: true}
	// One server, and so one set of sessions, per subject, entry and
	// scope: a refreshed token goes on with its session, and no other
	// subject reaches it.
	tok.sum = sha256.Sum256(fmt.Appendf(nil, "oauth\x00%s\x00%s\x00%s\x00%t\x00%t", iss, sub, p.Source, s.ReadOnly, s.AllowRun))
	return tok, nil
}

// issuer returns iss's verifier, discovering it on first use.
func (v *verifier) issuer(ctx context.Context, iss string) (*oidc.IDTokenVerifier, error) {
	v.mu.Lock()
	st := v.issuers[iss]
	if st == nil {
		st = &issuerState{}
		v.issuers[iss] = st
	}
	v.mu.Unlock()
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.iv != nil {
		return st.iv, nil
	}
	if st.err != nil && time.Since(st.failed) < discoveryRetry {
		return nil, fmt.Errorf("%w (failed %s ago; asked again after %s)", st.err, time.Since(st.failed).Round(time.Second), discoveryRetry)
	}
	iv, err := v.discover(ctx, iss)
	if err != nil {
		st.err, st.failed = err, time.Now()
		return nil, err
	}
	st.iv, st.err = iv, nil
	return iv, nil
}

// discover discovers iss: its OpenID configuration, or its RFC 8414
// metadata, and a verifier of its keys.
func (v *verifier) discover(ctx context.Context, iss string) (*oidc.IDTokenVerifier, error) {
	// The keys are fetched later, with the context of the request that
	// needs them; discovery is bounded by the client's timeout.
	cctx := oidc.ClientContext(context.WithoutCancel(ctx), v.client)
	p, err := oidc.NewProvider(cctx, iss)
	if err != nil {
		// An OAuth authorization server need not speak OpenID Connect:
		// its RFC 8414 metadata names its keys as well.
		var err2 error
		p, err2 = v.rfc8414(cctx, iss)
		if err2 != nil {
			return nil, fmt.Errorf("discovering issuer %q: OpenID discovery: %w; RFC 8414: %w", iss, err, err2)
		}
	}
	iv := p.VerifierContext(cctx, &oidc.Config{
		// The audience is the canonical resource URI, always (RFC 8707):
		// a token issued for another resource is never accepted here.
		ClientID:             v.o.Resource,
		SupportedSigningAlgs: signingAlgs,
		SkipExpiryCheck:      false,
		// never: "none" is no signature
		InsecureSkipSignatureCheck: false,
	})
	return iv, nil
}

// idTokenClaims are claims only an OpenID Connect ID token carries
// (OpenID Connect Core §2, §3.1.3.6, §3.3.2.11), never an access token of
// RFC 9068.
var idTokenClaims = []string{"nonce", "at_hash", "c_hash", "s_hash"}

// accessToken checks that a verified JWT is an access token, not an ID
// token or another JWT of the issuer's that names this resource in its
// audience: its header's typ is at+jwt (RFC 9068 §2.1, §4), or, for an
// untyped issuer, JWT or absent with none of an ID token's own claims.
func accessToken(raw string, all map[string]json.RawMessage, untyped bool) error {
	head, _, _ := strings.Cut(raw, ".")
	b, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return errors.New("its header is not base64url")
	}
	var h struct {
		Typ *string `json:"typ"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return errors.New("its header is not a JSON object")
	}
	// A media type, compared without regard to case; "application/" may
	// be left out (RFC 7515 §4.1.9).
	typ := ""
	if h.Typ != nil {
		typ = strings.TrimPrefix(strings.ToLower(*h.Typ), "application/")
	}
	if typ == "at+jwt" {
		return nil
	}
	if !untyped {
		return fmt.Errorf("typ %q is not at+jwt: an access token of this issuer is typed (RFC 9068), an ID token is not", typ)
	}
	if h.Typ != nil && typ != "jwt" {
		return fmt.Errorf("typ %q is neither at+jwt nor JWT", typ)
	}
	for _, k := range idTokenClaims {
		if _, ok := all[k]; ok {
			return fmt.Errorf("it carries %s, a claim of ID tokens: an ID token is no access token", k)
		}
	}
	return nil
}

// maxMetadata bounds an authorization server's metadata document.
const maxMetadata = 1 << 20

// rfc8414 builds iss's provider from its OAuth 2.0 authorization server
// metadata (RFC 8414 §3): at the well-known path inserted between the
// issuer's host and its path, its issuer exactly iss (§3.3, or a server
// could stand in for another), its jwks_uri https (http only on a
// loopback host), as the issuers themselves are.
func (v *verifier) rfc8414(ctx context.Context, iss string) (*oidc.Provider, error) {
	u, err := url.Parse(iss) // checked at load
	if err != nil {
		return nil, err
	}
	u.Path = "/.well-known/oauth-authorization-server" + strings.TrimSuffix(u.Path, "/")
	u.RawPath = ""
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", u, resp.Status)
	}
	var md struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxMetadata)).Decode(&md); err != nil {
		return nil, fmt.Errorf("%s: %w", u, err)
	}
	if md.Issuer != iss {
		return nil, fmt.Errorf("%s: its issuer %q is not %q", u, md.Issuer, iss)
	}
	if err := checkURL(md.JWKSURI); err != nil {
		return nil, fmt.Errorf("%s: jwks_uri: %v", u, err)
	}
	return (&oidc.ProviderConfig{IssuerURL: iss, JWKSURL: md.JWKSURI}).NewProvider(ctx), nil
}

// unverifiedIssuer reads the iss of a JWT before it is verified, only to
// choose the configured issuer whose keys verify it.
func unverifiedIssuer(raw string) (string, error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return "", errNotJWT
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", errors.New("not a JWT: its payload is not base64url")
	}
	var c struct {
		Issuer string `json:"iss"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return "", errors.New("not a JWT: its payload is not a JSON object")
	}
	return c.Issuer, nil
}

// stringsClaim reads a claim that is a string array, or one
// space-separated string.
func stringsClaim(raw json.RawMessage) []string {
	if len(raw) == 0 {
		return nil
	}
	var list []string
	if json.Unmarshal(raw, &list) == nil {
		return list
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return strings.Fields(s)
	}
	return nil
}

// introspectCached is introspect, answered from the answers kept when the
// token is among them, and refused without asking when the endpoint has
// been asked about too many other tokens of late.
func (v *verifier) introspectCached(ctx context.Context, in *Introspection, raw string) (Token, error) {
	key := sha256.Sum256([]byte(raw))
	now := time.Now()
	v.imu.Lock()
	if c, ok := v.introspected[key]; ok && now.Before(c.until) {
		v.imu.Unlock()
		return c.tok, nil
	}
	v.imu.Unlock()
	if !v.askLimit.Allow() {
		return Token{}, fmt.Errorf("introspection of issuer %q: too many tokens to ask about of late; try again", in.Issuer)
	}
	tok, exp, err := v.introspect(ctx, in, raw)
	if err != nil {
		return Token{}, err
	}
	until := now.Add(introspectedFor)
	if exp.Before(until) {
		until = exp
	}
	v.imu.Lock()
	defer v.imu.Unlock()
	if len(v.introspected) >= maxIntrospected {
		for k, c := range v.introspected {
			if !now.Before(c.until) {
				delete(v.introspected, k)
			}
		}
	}
	if len(v.introspected) < maxIntrospected {
		v.introspected[key] = introspectedToken{tok: tok, until: until}
	}
	return tok, nil
}
