package mcpserver

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/tomlpos"
)

// The values of a token's scope key.
const (
	ScopeReadOnly = "read-only"
	ScopeAgent    = "agent"
)

// Token is one entry of a tokens file: whom a bearer token acts for and what
// it may reach. It holds the sha256 of the token, never the token, so
// nothing that handles a Token (a log line, an error, a backend) can leak
// the bearer.
type Token struct {
	// Principal is the id, in the trust policy, of the principal the
	// token acts for.
	Principal string
	// Scope is what the token may reach, within the principal's roles.
	Scope Scope
	// Source is where the entry is: FILE:LINE, for messages.
	Source string

	sum [sha256.Size]byte
	// oauth marks an access token of an [oauth] issuer, mapped by the
	// [[oauth.principal]] entry at Source.
	oauth bool
}

// IDLen is the length of a token's [Token.ID].
const IDLen = 12

// ID names a static token's entry without its hash: the first [IDLen] hex
// digits of the sha256 the file holds. `prod-write mcp token list` shows
// it and `revoke` takes it; it is no secret, and says nothing of the
// token itself.
func (t Token) ID() string {
	if t.oauth {
		return ""
	}
	return hex.EncodeToString(t.sum[:])[:IDLen]
}

// ScopeName is the scope key's value of t's entry: read-only or agent.
func (t Token) ScopeName() string {
	if t.Scope.ReadOnly {
		return ScopeReadOnly
	}
	return ScopeAgent
}

// Tokens are the bearer tokens of MCP over HTTP, stored hashed.
type Tokens struct {
	list    []Token
	oauth   *OAuth
	origins map[string]bool // serialized origins, "https://host[:port]"
	// oauthTable is the [oauth] table as the file declares it, so that a
	// file read again can tell whether it changed (TokensFile).
	oauthTable *oauthTable
}

// OriginAllowed reports whether a request's Origin header may reach MCP
// over HTTP (docs/adr/0046-mcp-http-origin-token-type-limits.md): no Origin at all
// (a client that is no browser), or one of the file's origins exactly. Any
// other, "null" included, is a page a browser loaded from elsewhere, which
// is what a DNS-rebinding attack looks like to the server.
func (t *Tokens) OriginAllowed(origin []string) bool {
	switch len(origin) {
	case 0:
		return true
	case 1:
		return t != nil && t.origins[strings.ToLower(origin[0])]
	default:
		return false
	}
}

// OAuth returns the file's [oauth] table, or nil when it has none: then
// only the static tokens are served.
func (t *Tokens) OAuth() *OAuth {
	if t == nil {
		return nil
	}
	return t.oauth
}

// Len is the number of tokens.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.list)
}

// All returns the tokens in file order; a service checks with it that each
// names a principal of its trust policy before it serves.
func (t *Tokens) All() []Token {
	if t == nil {
		return nil
	}
	return slices.Clone(t.list)
}

// HashToken returns what a tokens file stores for a bearer token: the hex
// sha256 of its bytes. A token with enough entropy (32 random bytes, say)
// needs no slower hash: there is nothing to guess from its sha256.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Resolve returns the token whose hash is sha256(bearer). It compares the
// hash against every entry in constant time and never stops early, so the
// time it takes says nothing about which bytes, or which entry, matched.
func (t *Tokens) Resolve(bearer string) (Token, bool) {
	if t == nil || bearer == "" {
		return Token{}, false
	}
	sum := sha256.Sum256([]byte(bearer))
	found := -1
	for i := range t.list {
		eq := subtle.ConstantTimeCompare(sum[:], t.list[i].sum[:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return Token{}, false
	}
	return t.list[found], true
}

// parseTokensFile parses the tokens file read from path. At the
// service's start (start), a file without a token is refused and the
// introspection clients' secrets are read; when the file is read again,
// neither.
func parseTokensFile(path string, data []byte, start bool) (*Tokens, error) {
	t, err := parseTokens(path, data, !start)
	if err != nil {
		return nil, err
	}
	// The introspection clients' secrets are read at load, so that one
	// the service cannot use, or that another account may read, stops
	// the service before it serves.
	if t.oauth != nil && start {
		for _, in := range t.oauth.Introspection {
			if err := in.loadSecret(); err != nil {
				return nil, err
			}
		}
	}
	return t, nil
}

// readTokensFile returns the bytes of the tokens file at path and what
// fstat says of the file they were read from, refusing anything but a
// regular file that neither group nor others can write.
func readTokensFile(path string) ([]byte, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("reading tokens: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("reading tokens: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fi, &approval.ConfigError{File: path, Msg: "not a regular file"}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fi, &keys.InsecureError{Path: path, Mode: fi.Mode(), What: "write"}
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, nil, fmt.Errorf("reading tokens: %w", err)
	}
	return buf.Bytes(), fi, nil
}

type tokensFile struct {
	Origins []string     `toml:"origins"`
	Token   []tokenEntry `toml:"token"`
	OAuth   *oauthTable  `toml:"oauth"`
}

type tokenEntry struct {
	SHA256    string `toml:"sha256"`
	Principal string `toml:"principal"`
	Scope     string `toml:"scope"`
	AllowRun  bool   `toml:"allow_run"`
}

// parseTokens decodes a tokens file strictly: an unknown key, a missing
// or malformed hash, a duplicate hash, a missing principal, a scope that
// is neither read-only nor agent, or allow_run on a read-only token is an
// error naming the file and, where it can, the line. With none, a file
// that declares no token at all is no error: all its tokens were revoked,
// and every request is refused (TokensFile, RevokeToken). Only the
// service's start refuses it.
func parseTokens(name string, data []byte, none bool) (*Tokens, error) {
	var f tokensFile
	if err := tomlpos.Decode(data, &f); err != nil {
		var te *tomlpos.Error
		if !errors.As(err, &te) {
			return nil, &approval.ConfigError{File: name, Msg: err.Error()}
		}
		return nil, &approval.ConfigError{File: name, Line: te.Line, Msg: te.Msg}
	}
	t := &Tokens{list: make([]Token, 0, len(f.Token)), origins: map[string]bool{}}
	for _, o := range f.Origins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
			return nil, &approval.ConfigError{File: name, Line: firstLine(data, originsRE()), Msg: fmt.Sprintf("origins: %q is not an origin: scheme://host[:port], as a browser sends it in Origin", o)}
		}
		t.origins[strings.ToLower(o)] = true
	}
	if f.OAuth != nil {
		o, err := parseOAuth(name, firstLine(data, oauthHeaderRE()), headerLines(data, oauthPrincipalRE()), headerLines(data, oauthIntrospectionRE()), f.OAuth)
		if err != nil {
			return nil, err
		}
		t.oauth, t.oauthTable = o, f.OAuth
	}
	if len(f.Token) == 0 && t.oauth == nil && !none {
		return nil, &approval.ConfigError{File: name, Msg: "declares no [[token]] and no [oauth]: MCP over HTTP would refuse every request"}
	}
	starts := tokenLines(data)
	empty := sha256.Sum256(nil)
	seen := map[[sha256.Size]byte]string{}
	for i, e := range f.Token {
		line := 0
		if i < len(starts) {
			line = starts[i]
		}
		bad := func(format string, args ...any) error {
			return &approval.ConfigError{File: name, Line: line, Msg: fmt.Sprintf("token %d: ", i+1) + fmt.Sprintf(format, args...)}
		}
		tok := Token{Principal: e.Principal, Source: fmt.Sprintf("%s:%d", name, line)}
		if line == 0 { // an inline array of tables has no [[token]] lines
			tok.Source = fmt.Sprintf("%s (token %d)", name, i+1)
		}
		// Only the hash's form is reported, never its value: it is not a
		// secret, but nothing gains from echoing it.
		raw, err := hex.DecodeString(e.SHA256)
		if err != nil || len(raw) != sha256.Size {
			return nil, bad("sha256 must be %d hex digits: the sha256 of the bearer token, never the token itself", 2*sha256.Size)
		}
		copy(tok.sum[:], raw)
		if tok.sum == empty {
			return nil, bad("sha256 is the hash of the empty string, which is no token")
		}
		if prev, dup := seen[tok.sum]; dup {
			return nil, bad("sha256 is already the token's at %s: one token maps to exactly one principal", prev)
		}
		seen[tok.sum] = tok.Source
		if e.Principal == "" {
			return nil, bad("principal is required")
		}
		switch e.Scope {
		case ScopeReadOnly:
			if e.AllowRun {
				return nil, bad("allow_run is true on a read-only token: a read-only token never runs")
			}
			tok.Scope = Scope{ReadOnly: true}
		case ScopeAgent:
			tok.Scope = Scope{AllowRun: e.AllowRun}
		case "":
			// No default: a forgotten scope must not widen to agent.
			return nil, bad("scope is required (%q or %q)", ScopeReadOnly, ScopeAgent)
		default:
			return nil, bad("unknown scope %q (known: %s, %s)", e.Scope, ScopeReadOnly, ScopeAgent)
		}
		t.list = append(t.list, tok)
	}
	return t, nil
}

var (
	// compiled on first use, not at every start
	tokenHeaderRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^\s*\[\[\s*(token|"token"|'token')\s*\]\]`)
	})
	oauthHeaderRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^\s*\[\s*(oauth|"oauth"|'oauth')\s*\]`)
	})
	originsRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^\s*(origins|"origins"|'origins')\s*=`)
	})
	oauthPrincipalRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^\s*\[\[\s*(oauth|"oauth"|'oauth')\s*\.\s*(principal|"principal"|'principal')\s*\]\]`)
	})
	oauthIntrospectionRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^\s*\[\[\s*(oauth|"oauth"|'oauth')\s*\.\s*(introspection|"introspection"|'introspection')\s*\]\]`)
	})
)

// headerLines returns the 1-based lines that re matches, in order.
func headerLines(data []byte, re *regexp.Regexp) []int {
	var out []int
	for i, l := range tomlpos.CodeLines(data) {
		if re.MatchString(l) {
			out = append(out, i+1)
		}
	}
	return out
}

// firstLine is the first line re matches, or 0.
func firstLine(data []byte, re *regexp.Regexp) int {
	if ls := headerLines(data, re); len(ls) > 0 {
		return ls[0]
	}
	return 0
}

// tokenLines returns the 1-based lines on which a [[token]] table starts,
// in order.
func tokenLines(data []byte) []int {
	return headerLines(data, tokenHeaderRE())
}
