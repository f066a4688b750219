// Package approval holds the trust policy, the signed evidence of docs/DESIGN.md §5
// and the gate of docs/DESIGN.md §3: one pure function, [Evaluate], that every
// surface (run, status, replay, MCP, bridges) calls.
package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/tomlpos"
)

// Roles a principal may hold (docs/DESIGN.md §2).
const (
	RoleAgent    = "agent"
	RoleOperator = "operator"
	RoleApprover = "approver"
	RoleGera     = "gera"
	RoleBridge   = "bridge"
	RoleRunner   = "runner"
)

var knownRoles = []string{RoleAgent, RoleOperator, RoleApprover, RoleGera, RoleBridge, RoleRunner, RoleFreeze, RoleBreakGlass}

// Principal is an identity of the trust policy.
type Principal struct {
	ID     string   `toml:"id" json:"id"`
	Roles  []string `toml:"roles" json:"roles"`
	Key    string   `toml:"key" json:"key"`
	Slack  string   `toml:"slack" json:"slack,omitempty"`
	GitHub string   `toml:"github" json:"github,omitempty"`
	// GitHubID is GitHub's numeric user id, by which a comment's or a
	// review's author is mapped; GitHub is the login, shown to people and
	// compared case-insensitively. A login can be renamed and then
	// registered by someone else, an id never changes hands, so a principal
	// with one must have the other (docs/BRIDGES.md, "Identity").
	GitHubID int64 `toml:"github_id" json:"github_id,omitempty"`
	// Since and RevokedAt bound when the principal's signatures count
	// (docs/adr/0017-replay-history.md): a record it signed before Since or
	// at or after RevokedAt is judged as signed by no principal, by the
	// gate and by replay. A principal removed after a compromise keeps its
	// entry with revoked_at, so that replay can tell "valid then, revoked
	// since".
	Since     time.Time `toml:"since" json:"since,omitzero"`
	RevokedAt time.Time `toml:"revoked_at" json:"revoked_at,omitzero"`
	// Passkeys are the principal's enrolled WebAuthn credentials
	// ([[principal.passkey]]); removing one revokes it (ADR 0043).
	Passkeys []*PasskeyCredential `toml:"passkey" json:"passkeys,omitempty"`

	pub keys.Public
}

// InForce reports whether p's signatures count at t.
func (p *Principal) InForce(t time.Time) bool {
	return !t.Before(p.Since) && (p.RevokedAt.IsZero() || t.Before(p.RevokedAt))
}

// Has reports whether p holds role.
func (p *Principal) Has(role string) bool { return slices.Contains(p.Roles, role) }

// Public returns the principal's public key.
func (p *Principal) Public() keys.Public { return p.pub }

// Policy is the trust policy: who may act, in which roles, with which keys.
type Policy struct {
	Principals []*Principal `toml:"principal"`
	// Freezes are the policy's freeze windows, inline and from its
	// calendars, sorted by start (docs/adr/0021-freezes.md).
	Freezes   []*Freeze         `toml:"freeze"`
	Calendars []*FreezeCalendar `toml:"freeze_calendar"`
	// Passkey is the approval page's origin and where approvals need a
	// passkey (docs/adr/0043-passkey-assertions-as-evidence.md).
	Passkey *PasskeyPolicy `toml:"passkey"`
	// Witnesses are the witnesses of the receipts log whose
	// cosignatures replay --witnesses counts ([[witness]], ADR 0044).
	Witnesses []*Witness `toml:"witness"`
	// Digest is the sha256 of the policy file's bytes; receipts record it.
	Digest string `toml:"-"`

	byID, byKey, bySlack, byGitHub map[string]*Principal
	byGitHubID                     map[int64]*Principal
	byCredential                   map[string]*PasskeyCredential
	cache                          *sync.Map
	cached                         atomic.Int64
}

// ConfigError is a broken configuration or policy file (exit 78): one that
// does not parse or check, or cannot be read at all (then Err is why).
type ConfigError struct {
	File string
	Line int
	Msg  string
	Err  error
}

func (e *ConfigError) Error() string {
	msg := e.Msg
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, msg)
	}
	return fmt.Sprintf("%s: %s", e.File, msg)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// PolicyReadError is the error for a trust policy at path that cannot be
// read (missing, a directory, unreadable): a configuration error naming
// the file, as a prod-write.toml that cannot be read is, never a bare I/O
// error.
func PolicyReadError(path string, err error) *ConfigError {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the path is already in the message
	}
	return &ConfigError{File: path, Msg: "cannot read the trust policy", Err: err}
}

// LoadPolicy reads a trust policy, refusing one that group or others can
// write. Every error but that refusal (a [*keys.InsecureError]) is a
// [*ConfigError] naming the file.
func LoadPolicy(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, PolicyReadError(path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, PolicyReadError(path, err)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, &keys.InsecureError{Path: path, Mode: fi.Mode(), What: "write"}
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, PolicyReadError(path, err)
	}
	return ParsePolicy(path, buf.Bytes())
}

// ParsePolicy decodes a trust policy strictly: unknown keys, unknown roles,
// bad keys and duplicate ids, keys or channel identities are errors. Freeze
// calendars are read relative to name's directory.
func ParsePolicy(name string, data []byte) (*Policy, error) {
	return ParsePolicyWith(name, data, DirCalendars(filepath.Dir(name)))
}

// ParsePolicyWith is [ParsePolicy] reading freeze calendars with read
// (replay's history reads them by digest).
func ParsePolicyWith(name string, data []byte, read CalendarReader) (*Policy, error) {
	p := &Policy{}
	if err := tomlpos.Decode(data, p); err != nil {
		var te *tomlpos.Error
		if !errors.As(err, &te) {
			return nil, &ConfigError{File: name, Msg: err.Error()}
		}
		return nil, &ConfigError{File: name, Line: te.Line, Msg: te.Msg}
	}
	sum := sha256.Sum256(data)
	p.Digest = "sha256:" + hex.EncodeToString(sum[:])
	p.byID, p.byKey, p.bySlack, p.byGitHub = map[string]*Principal{}, map[string]*Principal{}, map[string]*Principal{}, map[string]*Principal{}
	p.byGitHubID = map[int64]*Principal{}
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
		if err := p.mapGitHubID(name, data, i, pr); err != nil {
			return nil, err
		}
	}
	if err := p.parsePasskeys(name, data); err != nil {
		return nil, err
	}
	if err := p.parseWitnesses(name, data); err != nil {
		return nil, err
	}
	if err := p.loadFreezes(name, read); err != nil {
		return nil, err
	}
	return p, nil
}

// mapGitHubID maps principal i's numeric GitHub user id. A login without
// an id is refused rather than matched by login: the bridge would then
// have to trust a login, which GitHub lets a stranger register once its
// owner renames it (docs/BRIDGES.md, "Identity").
func (p *Policy) mapGitHubID(name string, data []byte, i int, pr *Principal) error {
	bad := func(key, format string, args ...any) error {
		return &ConfigError{File: name, Line: principalKeyLine(data, i, key),
			Msg: fmt.Sprintf("principal %d (%q): ", i+1, pr.ID) + fmt.Sprintf(format, args...)}
	}
	switch {
	case pr.GitHub == "" && pr.GitHubID == 0:
		return nil
	case pr.GitHubID == 0:
		return bad("github", "github = %q needs github_id, GitHub's numeric user id (gh api users/%s --jq .id): the bridge maps GitHub accounts by id, never by login alone", pr.GitHub, pr.GitHub)
	case pr.GitHubID < 0:
		return bad("github_id", "github_id %d is not a GitHub user id", pr.GitHubID)
	case pr.GitHub == "":
		return bad("github_id", "github_id %d needs github, the account's login (shown in answers and replies)", pr.GitHubID)
	}
	if other, dup := p.byGitHubID[pr.GitHubID]; dup {
		return bad("github_id", "github user id %d is already %q's: one identity maps to exactly one principal", pr.GitHubID, other.ID)
	}
	p.byGitHubID[pr.GitHubID] = pr
	return nil
}

// principalKeyLine returns the line of key in the i-th [[principal]] table
// of data, or 0 when it cannot be found (an inline table, say).
func principalKeyLine(data []byte, i int, key string) int {
	header := regexp.MustCompile(`^\s*\[\[\s*principal\s*\]\]`)
	keyRE := regexp.MustCompile(`^\s*` + regexp.QuoteMeta(key) + `\s*=`)
	n := -1
	for l, code := range tomlpos.CodeLines(data) {
		switch {
		case header.MatchString(code):
			n++
		case n != i:
		case strings.HasPrefix(strings.TrimSpace(code), "["):
			return 0 // another table: principal i's has ended
		case keyRE.MatchString(code):
			return l + 1
		}
		if n > i {
			return 0
		}
	}
	return 0
}

// ByID returns the principal with id.
func (p *Policy) ByID(id string) (*Principal, bool) { pr, ok := p.byID[id]; return pr, ok }

// ByKey returns the principal whose key has the given key id.
func (p *Policy) ByKey(keyID string) (*Principal, bool) { pr, ok := p.byKey[keyID]; return pr, ok }

// BySlack returns the principal mapped to a Slack user id.
func (p *Policy) BySlack(user string) (*Principal, bool) { pr, ok := p.bySlack[user]; return pr, ok }

// ByGitHubID returns the principal mapped to a numeric GitHub user id.
func (p *Policy) ByGitHubID(id int64) (*Principal, bool) {
	pr, ok := p.byGitHubID[id]
	return pr, ok
}

// ByGitHubAccount maps a GitHub account, as a comment or review names it,
// to its principal: by its numeric user id, and only when the login agrees
// with the trust policy. It refuses (principal_unknown) a login that is a
// principal's but comes with another id (the login was renamed away and
// registered again by someone else: never that principal), an id that is a
// principal's but comes with another login (the principal's account
// renamed, which trust.toml must say before it counts), and a login with no
// id. It returns nil, nil when neither the login nor the id is anyone's.
// The GitHub bridge judges identities with it alone (docs/BRIDGES.md,
// "Identity").
func (p *Policy) ByGitHubAccount(login string, id int64) (*Principal, *refusal.Error) {
	byID, idOK := p.ByGitHubID(id)
	byLogin, loginOK := p.ByGitHub(login)
	switch {
	case id == 0 && loginOK:
		return nil, refusal.New(refusal.PrincipalUnknown, "GitHub login %s is %s's, but GitHub gave no user id for it: a login alone never counts", login, byLogin.ID)
	case !idOK && loginOK:
		return nil, refusal.New(refusal.PrincipalUnknown,
			"GitHub login %s is %s's in the trust policy, but this account's user id %d is not %s's github_id %d: a renamed or re-registered login never counts",
			login, byLogin.ID, id, byLogin.ID, byLogin.GitHubID).Needs(fmt.Sprintf("a comment by the account with github_id %d", byLogin.GitHubID))
	case idOK && (!loginOK || byLogin != byID):
		return nil, refusal.New(refusal.PrincipalUnknown,
			"GitHub user id %d is %s's, whose login the trust policy says is %s, not %s: update github in trust.toml if the account was renamed",
			id, byID.ID, byID.GitHub, login).Needs("trust.toml's github for " + byID.ID + " to match the account's login")
	case idOK:
		return byID, nil
	}
	return nil, nil
}

// ByGitHub returns the principal mapped to a GitHub login (case-insensitive,
// as GitHub logins are). The login alone proves nothing: map an account
// with [Policy.ByGitHubAccount].
func (p *Policy) ByGitHub(login string) (*Principal, bool) {
	pr, ok := p.byGitHub[strings.ToLower(login)]
	return pr, ok
}
