package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
)

// Introspection is one [[oauth.introspection]] entry: the opaque access
// tokens of Issuer are checked at Endpoint (RFC 7662), the resource server
// authenticating as ClientID with the secret of a file only the service
// may read (docs/adr/0047-mcp-http-limits-tls-origin-body.md). What the
// endpoint answers is then judged as a JWT's claims are, and mapped by the
// same [[oauth.principal]] entries.
type Introspection struct {
	Issuer   string
	Endpoint string
	ClientID string
	// SecretFile holds the client's secret, read when the service
	// loads the tokens file ([OpenTokensFile]).
	SecretFile string
	// TokenPrefix, when set, is how this issuer's opaque tokens begin:
	// only a token that begins so is sent to Endpoint, so that no token
	// reaches an authorization server that did not issue it.
	TokenPrefix string
	Source      string

	secret string // never logged, never in an error
}

// parseIntrospection checks the [[oauth.introspection]] entries of o's
// table; starts are their lines.
func parseIntrospection(name string, starts []int, o *OAuth, entries []introspection) ([]*Introspection, error) {
	var out []*Introspection
	for i, e := range entries {
		l := 0
		if i < len(starts) {
			l = starts[i]
		}
		src := fmt.Sprintf("%s:%d", name, l)
		if l == 0 {
			src = fmt.Sprintf("%s (oauth.introspection %d)", name, i+1)
		}
		bad := func(format string, args ...any) error {
			return &approval.ConfigError{File: name, Line: l, Msg: fmt.Sprintf("oauth.introspection %d: %s", i+1, fmt.Sprintf(format, args...))}
		}
		in := &Introspection{Issuer: e.Issuer, Endpoint: e.Endpoint, ClientID: e.ClientID, SecretFile: e.ClientSecretFile, TokenPrefix: e.TokenPrefix, Source: src}
		if in.Issuer == "" && len(o.Issuers) == 1 {
			in.Issuer = o.Issuers[0]
		}
		if !slices.Contains(o.Issuers, in.Issuer) {
			return nil, bad("issuer %q is not one of oauth.issuers", in.Issuer)
		}
		if err := checkURL(in.Endpoint); err != nil {
			return nil, bad("endpoint: %v", err)
		}
		if in.ClientID == "" {
			return nil, bad("client_id is required: the endpoint authenticates this resource server as a client")
		}
		if in.SecretFile == "" {
			return nil, bad("client_secret_file is required: the file of the client's secret, which only the service may read")
		}
		if !filepath.IsAbs(in.SecretFile) {
			in.SecretFile = filepath.Join(filepath.Dir(name), in.SecretFile)
		}
		for _, prev := range out {
			if prev.Issuer == in.Issuer {
				return nil, bad("issuer %q already has its introspection endpoint at %s", in.Issuer, prev.Source)
			}
		}
		out = append(out, in)
	}
	if len(out) > 1 {
		// Which server issued an opaque token, only its prefix can say:
		// without one, a token would be sent to servers that did not
		// issue it, which could then use it here.
		for i, a := range out {
			if a.TokenPrefix == "" {
				return nil, &approval.ConfigError{File: name, Msg: fmt.Sprintf("oauth.introspection at %s: token_prefix is required when more than one issuer introspects: an opaque token is sent only to the server whose prefix begins it", a.Source)}
			}
			for _, b := range out[i+1:] {
				if strings.HasPrefix(a.TokenPrefix, b.TokenPrefix) || strings.HasPrefix(b.TokenPrefix, a.TokenPrefix) {
					return nil, &approval.ConfigError{File: name, Msg: fmt.Sprintf("oauth.introspection at %s and %s: token_prefix %q and %q overlap: a token would begin with both", a.Source, b.Source, a.TokenPrefix, b.TokenPrefix)}
				}
			}
		}
	}
	return out, nil
}

// maxSecretFile bounds a client secret file.
const maxSecretFile = 64 << 10

// loadSecret reads in's client secret from its file, judged as the file
// opened: regular, owned by the service's account, no access for its group
// or others, as the bridges' secret files (pkg/bridge) and keys.
func (in *Introspection) loadSecret() error {
	what := fmt.Sprintf("oauth.introspection at %s: client_secret_file", in.Source)
	f, err := os.OpenFile(in.SecretFile, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: %s is not a regular file", what, in.SecretFile)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("%s: %w", what, &keys.InsecureError{Path: in.SecretFile, Mode: fi.Mode(), What: "read or write"})
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("%s: %s is not owned by the service's account (uid %d)", what, in.SecretFile, os.Geteuid())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return fmt.Errorf("%s: reading %s: %w", what, in.SecretFile, err)
	}
	if len(b) > maxSecretFile {
		return fmt.Errorf("%s: %s is over 64 KiB", what, in.SecretFile)
	}
	in.secret = strings.TrimSpace(string(b))
	if in.secret == "" {
		return fmt.Errorf("%s: %s is empty", what, in.SecretFile)
	}
	return nil
}

// introspectionFor is the entry an opaque token is sent to: the one whose
// token_prefix begins it, or the only one, when it names none; nil if
// none is.
func (o *OAuth) introspectionFor(raw string) *Introspection {
	for _, in := range o.Introspection {
		if in.TokenPrefix == "" || strings.HasPrefix(raw, in.TokenPrefix) {
			return in
		}
	}
	return nil
}

// maxIntrospection bounds an introspection response.
const maxIntrospection = 1 << 20

// nbfLeeway is the clock skew allowed on a token's nbf, as go-oidc allows
// a JWT's.
const nbfLeeway = 5 * time.Minute

// introspect asks in's endpoint about the opaque token raw (RFC 7662 §2)
// and returns the Token it stands for. The token is sent only there, in
// the body of a POST that follows no redirect. An answer is served only
// if it is 200 with a JSON object whose active is the boolean true, whose
// iss (when present) is in's issuer, whose aud names the resource, whose
// exp is still to come, whose nbf (when present) has come, and whose
// token_type and token_use (when present) say a bearer access token. Its
// sub is required by [verifier.resolve]. Its
// errors never hold raw or the secret.
func (v *verifier) introspect(ctx context.Context, in *Introspection, raw string) (Token, time.Time, error) {
	if in.secret == "" {
		return Token{}, time.Time{}, fmt.Errorf("introspection at %s: no client secret was loaded", in.Source)
	}
	form := url.Values{"token": {raw}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.Endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return Token{}, time.Time{}, fmt.Errorf("introspection at %s: %w", in.Source, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// client_secret_basic: each part form-encoded first (RFC 6749 §2.3.1).
	req.SetBasicAuth(url.QueryEscape(in.ClientID), url.QueryEscape(in.secret))
	resp, err := v.introspectClient.Do(req)
	if err != nil {
		return Token{}, time.Time{}, fmt.Errorf("introspecting a token of issuer %q: %w", in.Issuer, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Token{}, time.Time{}, fmt.Errorf("introspecting a token of issuer %q: %s answered %s", in.Issuer, in.Endpoint, resp.Status)
	}
	var all map[string]json.RawMessage
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxIntrospection)).Decode(&all); err != nil {
		return Token{}, time.Time{}, fmt.Errorf("introspecting a token of issuer %q: the answer is no JSON object: %w", in.Issuer, err)
	}
	// active must be the boolean true: "true", 1 or its absence is not.
	if string(all["active"]) != "true" {
		return Token{}, time.Time{}, fmt.Errorf("issuer %q: the token is not active", in.Issuer)
	}
	str := func(k string) (string, bool, error) {
		r, ok := all[k]
		if !ok {
			return "", false, nil
		}
		var s string
		if err := json.Unmarshal(r, &s); err != nil {
			return "", true, fmt.Errorf("issuer %q: the introspected %s is not a string", in.Issuer, k)
		}
		return s, true, nil
	}
	num := func(k string) (time.Time, bool, error) {
		r, ok := all[k]
		if !ok {
			return time.Time{}, false, nil
		}
		var f float64
		if err := json.Unmarshal(r, &f); err != nil {
			return time.Time{}, true, fmt.Errorf("issuer %q: the introspected %s is not a number", in.Issuer, k)
		}
		return time.Unix(int64(f), 0), true, nil
	}
	if iss, ok, err := str("iss"); err != nil {
		return Token{}, time.Time{}, err
	} else if ok && iss != in.Issuer {
		return Token{}, time.Time{}, fmt.Errorf("issuer %q: the introspected token's iss is %q", in.Issuer, iss)
	}
	// The audience is the canonical resource URI, always (RFC 8707), as
	// for a JWT: an answer that names none is refused.
	if !slices.Contains(stringsClaim(all["aud"]), v.o.Resource) {
		return Token{}, time.Time{}, fmt.Errorf("issuer %q: the introspected token's aud does not name %s", in.Issuer, v.o.Resource)
	}
	now := time.Now()
	exp, ok, err := num("exp")
	switch {
	case err != nil:
		return Token{}, time.Time{}, err
	case !ok:
		return Token{}, time.Time{}, fmt.Errorf("issuer %q: the introspected token has no exp", in.Issuer)
	case !now.Before(exp):
		return Token{}, time.Time{}, fmt.Errorf("issuer %q: the introspected token expired at %s", in.Issuer, exp.UTC().Format(time.RFC3339))
	}
	if nbf, ok, err := num("nbf"); err != nil {
		return Token{}, time.Time{}, err
	} else if ok && now.Add(nbfLeeway).Before(nbf) {
		return Token{}, time.Time{}, fmt.Errorf("issuer %q: the introspected token is not valid before %s", in.Issuer, nbf.UTC().Format(time.RFC3339))
	}
	// A refresh token, or one bound to a key (DPoP) that this server
	// does not check, is no bearer access token.
	if tt, ok, err := str("token_type"); err != nil {
		return Token{}, time.Time{}, err
	} else if ok && !strings.EqualFold(tt, "bearer") {
		return Token{}, time.Time{}, fmt.Errorf("issuer %q: the introspected token_type is %q, not Bearer", in.Issuer, tt)
	}
	if tu, ok, err := str("token_use"); err != nil {
		return Token{}, time.Time{}, err
	} else if ok && tu != "access_token" {
		return Token{}, time.Time{}, fmt.Errorf("issuer %q: the introspected token_use is %q, not access_token", in.Issuer, tu)
	}
	if _, ok := all["cnf"]; ok {
		return Token{}, time.Time{}, fmt.Errorf("issuer %q: the introspected token is bound to a key (cnf), which this server does not check", in.Issuer)
	}
	sub, _, err := str("sub")
	if err != nil {
		return Token{}, time.Time{}, err
	}
	scope, _, err := str("scope")
	if err != nil {
		return Token{}, time.Time{}, err
	}
	tok, err := v.resolve(in.Issuer, sub, stringsClaim(all[v.o.GroupsClaim]), strings.Fields(scope))
	return tok, exp, err
}

// errNotJWT is a bearer that is no compact JWS: an opaque token.
var errNotJWT = errors.New("not a JWT")
