// Package approval holds the trust policy, the signed evidence of SPEC §5
// and the gate of SPEC §3: one pure function, [Evaluate], that every
// surface (run, status, replay, MCP, bridges) calls.
package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/BurntSushi/toml"

	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/tomlpos"
)

// Roles a principal may hold (SPEC §2).
const (
	RoleAgent    = "agent"
	RoleOperator = "operator"
	RoleApprover = "approver"
	RoleGera     = "gera"
	RoleBridge   = "bridge"
	RoleRunner   = "runner"
)

var knownRoles = []string{RoleAgent, RoleOperator, RoleApprover, RoleGera, RoleBridge, RoleRunner}

// Principal is an identity of the trust policy.
type Principal struct {
	ID     string   `toml:"id" json:"id"`
	Roles  []string `toml:"roles" json:"roles"`
	Key    string   `toml:"key" json:"key"`
	Slack  string   `toml:"slack" json:"slack,omitempty"`
	GitHub string   `toml:"github" json:"github,omitempty"`

	pub keys.Public
}

// Has reports whether p holds role.
func (p *Principal) Has(role string) bool { return slices.Contains(p.Roles, role) }

// Public returns the principal's public key.
func (p *Principal) Public() keys.Public { return p.pub }

// Policy is the trust policy: who may act, in which roles, with which keys.
type Policy struct {
	Principals []*Principal `toml:"principal"`
	// Digest is the sha256 of the policy file's bytes; receipts record it.
	Digest string `toml:"-"`

	byID, byKey, bySlack, byGitHub map[string]*Principal
	cache                          *sync.Map
	cached                         atomic.Int64
}

// ConfigError is a broken configuration or policy file (exit 78).
type ConfigError struct {
	File string
	Line int
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// LoadPolicy reads a trust policy, refusing one that group or others can
// write.
func LoadPolicy(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("reading trust policy: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, &keys.InsecureError{Path: path, Mode: fi.Mode(), What: "write"}
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, fmt.Errorf("reading trust policy: %w", err)
	}
	return ParsePolicy(path, buf.Bytes())
}

// ParsePolicy decodes a trust policy strictly: unknown keys, unknown roles,
// bad keys and duplicate ids, keys or channel identities are errors.
func ParsePolicy(name string, data []byte) (*Policy, error) {
	p := &Policy{}
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(p)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &ConfigError{File: name, Line: pe.Position.Line, Msg: pe.Message}
		}
		return nil, &ConfigError{File: name, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
	}
	if und := md.Undecoded(); len(und) > 0 {
		return nil, &ConfigError{File: name, Line: tomlpos.KeyLine(data, md.Keys(), und[0]), Msg: fmt.Sprintf("unknown key %q", und[0].String())}
	}
	sum := sha256.Sum256(data)
	p.Digest = "sha256:" + hex.EncodeToString(sum[:])
	p.byID, p.byKey, p.bySlack, p.byGitHub = map[string]*Principal{}, map[string]*Principal{}, map[string]*Principal{}, map[string]*Principal{}
	for i, pr := range p.Principals {
		bad := func(format string, args ...any) error {
			return &ConfigError{File: name, Msg: fmt.Sprintf("principal %d (%q): ", i+1, pr.ID) + fmt.Sprintf(format, args...)}
		}
		if pr.ID == "" {
			return nil, bad("id is required")
		}
		if pr.Key == "" {
			return nil, bad("key is required")
		}
		pub, err := keys.ParsePublic(pr.Key)
		if err != nil {
			return nil, bad("%v", err)
		}
		pr.pub = pub
		if len(pr.Roles) == 0 {
			return nil, bad("roles is empty")
		}
		for _, r := range pr.Roles {
			if !slices.Contains(knownRoles, r) {
				return nil, bad("unknown role %q (known: %s)", r, strings.Join(knownRoles, ", "))
			}
		}
		for _, u := range []struct {
			m    map[string]*Principal
			k    string
			what string
		}{{p.byID, pr.ID, "id"}, {p.byKey, pub.ID(), "key"}, {p.bySlack, pr.Slack, "slack user"}, {p.byGitHub, strings.ToLower(pr.GitHub), "github login"}} {
			if u.k == "" {
				continue
			}
			if other, dup := u.m[u.k]; dup {
				return nil, bad("%s is already %q's: one identity maps to exactly one principal", u.what, other.ID)
			}
			u.m[u.k] = pr
		}
	}
	return p, nil
}

// ByID returns the principal with id.
func (p *Policy) ByID(id string) (*Principal, bool) { pr, ok := p.byID[id]; return pr, ok }

// ByKey returns the principal whose key has the given key id.
func (p *Policy) ByKey(keyID string) (*Principal, bool) { pr, ok := p.byKey[keyID]; return pr, ok }

// BySlack returns the principal mapped to a Slack user id.
func (p *Policy) BySlack(user string) (*Principal, bool) { pr, ok := p.bySlack[user]; return pr, ok }

// ByGitHub returns the principal mapped to a GitHub login (case-insensitive,
// as GitHub logins are).
func (p *Policy) ByGitHub(login string) (*Principal, bool) {
	pr, ok := p.byGitHub[strings.ToLower(login)]
	return pr, ok
}
