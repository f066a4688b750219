package approval_test

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
)

func principal(id, roles, key, extra string) string {
	return "[[principal]]\nid = \"" + id + "\"\nroles = [" + roles + "]\nkey = \"" + key + "\"\n" + extra + "\n"
}

// TestParsePolicy: the trust policy is decoded strictly, and one identity,
// whatever its form, maps to exactly one principal (docs/DESIGN.md §3 rule 6).
func TestParsePolicy(t *testing.T) {
	ka, kb := keyFor("a").Public().String(), keyFor("b").Public().String()
	ok := principal("a", `"agent"`, ka, `slack = "UA"`+"\n"+`github = "Alice"`+"\n"+`github_id = 101`)
	for _, c := range []struct {
		name string
		toml string
		want string // "" when it parses; otherwise a fragment of the error
		line int    // the line the error must name, 0 when not checked
	}{
		{"valid", ok + principal("b", `"approver", "operator"`, kb, `slack = "UB"`+"\n"+`github = "bob"`+"\n"+`github_id = 102`), "", 0},
		{"empty policy", "", "", 0},
		{"duplicate id", ok + principal("a", `"approver"`, kb, ""), `id is already "a"'s`, 0},
		{"duplicate key", ok + principal("b", `"approver"`, ka, ""), `key is already "a"'s`, 0},
		{"duplicate slack id", ok + principal("b", `"approver"`, kb, `slack = "UA"`), `slack user is already "a"'s`, 0},
		{"duplicate github login, other case", ok + principal("b", `"approver"`, kb, `github = "aLICE"`+"\n"+`github_id = 102`), `github login is already "a"'s`, 0},
		// A GitHub account is mapped by its numeric id (docs/BRIDGES.md,
		// "Identity"): a login alone is refused, naming the line.
		{"github login without github_id", ok + principal("b", `"approver"`, kb, `slack = "UB"`+"\n"+`github = "bob"`), `github = "bob" needs github_id`, 13},
		{"github_id without github login", ok + principal("b", `"approver"`, kb, `github_id = 102`), `github_id 102 needs github`, 12},
		{"negative github_id", ok + principal("b", `"approver"`, kb, `github = "bob"`+"\n"+`github_id = -5`), `is not a GitHub user id`, 13},
		{"duplicate github_id", ok + principal("b", `"approver"`, kb, `github = "bob"`+"\n"+`github_id = 101`), `github user id 101 is already "a"'s`, 13},
		{"github_id not a number", ok + principal("b", `"approver"`, kb, `github = "bob"`+"\n"+`github_id = "102"`), "github_id must be an integer, not a string", 13},
		{"unknown role", principal("a", `"admin"`, ka, ""), `unknown role "admin"`, 0},
		{"no roles", principal("a", ``, ka, ""), "roles is empty", 0},
		{"no id", principal("", `"agent"`, ka, ""), "id is required", 0},
		{"no key", principal("a", `"agent"`, "", ""), "key is required", 0},
		{"key without prefix", principal("a", `"agent"`, strings.TrimPrefix(ka, "ed25519:"), ""), "want \"ed25519:\"", 0},
		{"key not base64", principal("a", `"agent"`, "ed25519:!!!", ""), "illegal base64", 0},
		{"key too short", principal("a", `"agent"`, "ed25519:"+base64.StdEncoding.EncodeToString(make([]byte, 31)), ""), "31 bytes, want 32", 0},
		{"key with non-canonical base64", principal("a", `"agent"`, ka[:len(ka)-2]+"B=", ""), "illegal base64", 0},
		{"syntax error", "[[principal]]\nid = \"a\nroles = []\n", "", 2},
		{"wrong type", "[[principal]]\nid = 1\n", "id must be a string, not an integer", 2},
		// BurntSushi/toml names the line of the last principal's roles.
		{"wrong type in a middle principal", ok + principal("b", `"approver"`, kb, "") + "[[principal]]\nid = \"c\"\nroles = \"operator\"\n" + principal("d", `"agent"`, kb, ""), "roles must be a list of strings, not a string", 15},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := approval.ParsePolicy("trust.toml", []byte(c.toml))
			if c.want == "" && c.line == 0 {
				if err != nil {
					t.Fatalf("ParsePolicy: %v", err)
				}
				if !strings.HasPrefix(p.Digest, "sha256:") {
					t.Errorf("digest %q", p.Digest)
				}
				return
			}
			var ce *approval.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *ConfigError", err)
			}
			if ce.File != "trust.toml" || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q (file %q), want it to name trust.toml and say %q", err, ce.File, c.want)
			}
			if c.line > 0 && ce.Line != c.line {
				t.Fatalf("error on line %d, want line %d: %v", ce.Line, c.line, err)
			}
		})
	}
}

// TestParsePolicyLookups: the channel identities find their principal; a
// GitHub login in any case is the same login.
func TestParsePolicyLookups(t *testing.T) {
	p := mustPolicy(t, demoCast)
	if pr, ok := p.ByGitHub("BOB"); !ok || pr.ID != "bob" {
		t.Errorf("ByGitHub(BOB) = %v, %v", pr, ok)
	}
	if pr, ok := p.BySlack("UALICE"); !ok || pr.ID != "alice" {
		t.Errorf("BySlack(UALICE) = %v, %v", pr, ok)
	}
	if _, ok := p.BySlack(""); ok {
		t.Error("an empty Slack user maps to a principal")
	}
	if _, ok := p.ByGitHub(""); ok {
		t.Error("an empty GitHub login maps to a principal")
	}
	if pr, ok := p.ByGitHubID(gitHubID("bob")); !ok || pr.ID != "bob" || pr.GitHubID != gitHubID("Bob") {
		t.Errorf("ByGitHubID(bob's id) = %v, %v", pr, ok)
	}
	if _, ok := p.ByGitHubID(0); ok {
		t.Error("GitHub user id 0 maps to a principal")
	}
	if pr, ok := p.ByKey(keyFor("olive").Public().ID()); !ok || pr.ID != "olive" || !pr.Has(approval.RoleApprover) || pr.Has(approval.RoleAgent) {
		t.Errorf("ByKey(olive) = %v, %v", pr, ok)
	}
}

// TestParsePolicyUnknownKeyLine: an unknown key is an error naming the file
// and the line, as the registry reports its unknown keys (docs/DESIGN.md §9).
func TestParsePolicyUnknownKeyLine(t *testing.T) {
	src := principal("a", `"agent"`, keyFor("a").Public().String(), "") + principal("b", `"approver"`, keyFor("b").Public().String(), `slak = "UB"`)
	_, err := approval.ParsePolicy("trust.toml", []byte(src))
	var ce *approval.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `unknown key "principal.slak"`) {
		t.Fatalf("got %v, want an unknown key error", err)
	}
	if ce.Line != 10 {
		t.Fatalf("ParsePolicy reports unknown key %q at line %d, want 10: %v", "slak", ce.Line, err)
	}
}

// TestParsePolicySmallOrderKey: a public key of small order verifies a
// forged signature over any message, so a policy listing one lets anybody
// act as that principal. The policy must refuse such keys.
func TestParsePolicySmallOrderKey(t *testing.T) {
	identity := make([]byte, 32)
	identity[0] = 1 // the neutral element, encoded
	key := keys.PublicPrefix + base64.StdEncoding.EncodeToString(identity)
	p, err := approval.ParsePolicy("trust.toml", []byte(principal("ghost", `"approver", "gera"`, key, "")))
	if err != nil {
		return // refused, as it should be
	}
	// Show what accepting it means: a gera go nobody signed opens as ghost's.
	forged, _ := approval.Sign(keyFor("mallory"), approval.TypeGera, geraGo("sha256:"+zeros64, "ghost", 99))
	sig := make([]byte, 64)
	sig[0] = 1 // R = neutral element, S = 0: valid for every message under this key
	forged.Signatures[0].KeyID = keys.Public(identity).ID()
	forged.Signatures[0].Sig = base64.StdEncoding.EncodeToString(sig)
	if s, err := p.Open(forged); err == nil {
		t.Fatalf("ParsePolicy accepts the small-order key %s; a forged record then opens as %s's", key, s.Signer.ID)
	}
	t.Fatalf("ParsePolicy accepts the small-order key %s", key)
}

// TestLoadPolicyPermissions: like ssh and sudo, prod-write refuses a trust
// policy that group or others can write (docs/DESIGN.md §9), and reads one that they
// can only read.
func TestLoadPolicyPermissions(t *testing.T) {
	data := []byte(policyTOML(demoCast))
	for _, c := range []struct {
		mode   os.FileMode
		refuse bool
	}{
		{0o600, false}, {0o644, false}, {0o640, false}, {0o444, false},
		{0o666, true}, {0o660, true}, {0o620, true}, {0o602, true}, {0o664, true},
	} {
		t.Run(c.mode.String(), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "trust.toml")
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(path, c.mode); err != nil {
				t.Fatal(err)
			}
			p, err := approval.LoadPolicy(path)
			var ie *keys.InsecureError
			if c.refuse {
				if !errors.As(err, &ie) {
					t.Fatalf("mode %04o: got %v, want a *keys.InsecureError", c.mode, err)
				}
				if ie.Path != path || ie.Mode.Perm() != c.mode {
					t.Fatalf("InsecureError names %s %04o, want %s %04o", ie.Path, ie.Mode.Perm(), path, c.mode)
				}
				return
			}
			if err != nil {
				t.Fatalf("mode %04o: %v", c.mode, err)
			}
			if len(p.Principals) != len(demoCast) {
				t.Fatalf("loaded %d principals, want %d", len(p.Principals), len(demoCast))
			}
		})
	}
	// A policy that cannot be read is a configuration error naming the
	// file, as one that does not parse is; the cause still
	// unwraps.
	t.Run("missing", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "nope.toml")
		_, err := approval.LoadPolicy(path)
		if !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("got %v, want not-exist", err)
		}
		var ce *approval.ConfigError
		if !errors.As(err, &ce) || ce.File != path {
			t.Fatalf("got %v, want a *ConfigError naming %s", err, path)
		}
		if want := path + ": cannot read the trust policy: no such file or directory"; err.Error() != want {
			t.Fatalf("got %q, want %q", err, want)
		}
	})
	t.Run("a directory", func(t *testing.T) {
		path := t.TempDir()
		var ce *approval.ConfigError
		if _, err := approval.LoadPolicy(path); !errors.As(err, &ce) || ce.File != path || !strings.Contains(err.Error(), "is a directory") {
			t.Fatalf("got %v, want a *ConfigError naming %s, a directory", err, path)
		}
	})
	t.Run("broken, through wrapping", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "trust.toml")
		if err := os.WriteFile(path, []byte("[[principal]]\nid = \"x\"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		var ce *approval.ConfigError
		if _, err := approval.LoadPolicy(path); !errors.As(err, &ce) || ce.File != path {
			t.Fatalf("got %v, want a *ConfigError naming %s", err, path)
		}
	})
}

// TestByGitHubAccount: a GitHub account is its numeric user id, and its
// login must agree with the policy (docs/BRIDGES.md, "Identity").
func TestByGitHubAccount(t *testing.T) {
	p := mustPolicy(t, demoCast)
	alice, bob := gitHubID("alice"), gitHubID("bob")
	for _, c := range []struct {
		login string
		id    int64
		want  string // the principal, "" for none, "refused" for a refusal
		says  string
	}{
		{"alice", alice, "alice", ""},
		{"ALICE", alice, "alice", ""},
		{"alice", 4242, "refused", "a renamed or re-registered login never counts"},
		{"alice", 0, "refused", "a login alone never counts"},
		{"alice-renamed", alice, "refused", "update github in trust.toml"},
		{"Bob", alice, "refused", "update github in trust.toml"},
		{"alice", bob, "refused", ""},
		{"mallory", 4242, "", ""},
		{"", 0, "", ""},
	} {
		pr, r := p.ByGitHubAccount(c.login, c.id)
		switch {
		case c.want == "refused":
			if r == nil || r.Code != "principal_unknown" || !strings.Contains(r.Reason, c.says) {
				t.Errorf("%s/%d: %v %v, want a refusal saying %q", c.login, c.id, pr, r, c.says)
			}
		case r != nil || (pr == nil) != (c.want == "") || (pr != nil && pr.ID != c.want):
			t.Errorf("%s/%d: %v %v, want %q", c.login, c.id, pr, r, c.want)
		}
	}
}

// TestParsePolicyTypeErrorLines: a value of the wrong type is named at its
// own line, in words for people. BurntSushi/toml names the line of the same
// key in the last [[principal]] (here 21 for roles on line 11).
func TestParsePolicyTypeErrorLines(t *testing.T) {
	ka, kb, kc := keyFor("a").Public().String(), keyFor("b").Public().String(), keyFor("c").Public().String()
	src := func(bad string) string {
		return "# trust policy\n\n" +
			"[[principal]]\nid = \"alice\"\nroles = [\"agent\"]\nkey = \"" + ka + "\"\n\n" + // lines 3-6
			"[[principal]]\nid = \"bob\"\n" + bad + "\nkey = \"" + kb + "\"\n\n" + // lines 8-12; bad on 10 or 11
			"# the last\n\n" +
			"[[principal]]\nid = \"carol\"\nroles = [\"approver\"]\nkey = \"" + kc + "\"\nslack = \"UC\"\ngithub = \"carol\"\ngithub_id = 3\n" // lines 16-22
	}
	for _, tc := range []struct {
		bad  string
		want string
	}{
		{"slack = \"UB\"\nroles = \"operator\"", `trust.toml:11: roles must be a list of strings, not a string`},
		{"roles = [\"operator\"]\nslack = 7", `trust.toml:11: slack must be a string, not an integer`},
		{"roles = [\"operator\"]\ngithub_id = \"12\"", `trust.toml:11: github_id must be an integer, not a string`},
		{"roles = [\"operator\", 2]\n", `trust.toml:10: roles must be a list of strings, but item 2 is an integer`},
		{"roles = { operator = true }\n", `trust.toml:10: roles must be a list of strings, not a table`},
	} {
		_, err := approval.ParsePolicy("trust.toml", []byte(src(tc.bad)))
		var ce *approval.ConfigError
		if !errors.As(err, &ce) || err.Error() != tc.want {
			t.Errorf("%q: error %v, want %s", tc.bad, err, tc.want)
		}
	}
}
