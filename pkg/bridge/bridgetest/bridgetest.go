// Package bridgetest builds a small world for the bridges' tests: a trust
// policy whose approvers have Slack and GitHub identities, a registry with
// one operation, an embedded store holding a signed plan and a certainty
// record, and the bridge's key. It is for tests only.
package bridgetest

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/store"
)

// Member is one principal of the test policy.
type Member struct {
	ID     string
	Roles  []string
	Slack  string
	GitHub string
	// GitHubID is the GitHub account's numeric id; 0 is the one the fake
	// GitHub gives the login ([GitHubUserID]).
	GitHubID int64
}

// Cast is the test policy. The planner (agent) and the filer (smith) also
// hold the approver role and have channel identities, so the bridges'
// separation-of-duties checks are tested on principals the role check
// alone would let through.
var Cast = []Member{
	{ID: "agent", Roles: []string{"agent", "approver"}, Slack: "UAGENT", GitHub: "agent-gh"},
	{ID: "smith", Roles: []string{"operator", "approver"}, Slack: "USMITH", GitHub: "smith-gh"},
	{ID: "alice", Roles: []string{"approver"}, Slack: "UALICE", GitHub: "alice"},
	{ID: "bob", Roles: []string{"approver"}, Slack: "UBOB", GitHub: "Bob"},
	{ID: "eve", Roles: []string{"operator"}, Slack: "UEVE", GitHub: "eve"},
	{ID: "bridge", Roles: []string{"bridge"}},
}

// Key returns the fixed key of a principal.
func Key(id string) *keys.Private {
	seed := sha256.Sum256([]byte("prod-write bridge test key: " + id))
	return keys.FromSeed(seed[:])
}

// Secret returns v as a bridge secret, loaded as the bridges load theirs
// ([bridge.LoadSecret], here from a variable set to v). v must be what
// LoadSecret keeps: not empty, no space at either end.
func Secret(v string) bridge.Secret {
	s, err := bridge.LoadSecret(func(string) (string, bool) { return v, true }, "PROD_WRITE_TEST_SECRET", "test_secret_file", "")
	if err != nil || s.Reveal() != v {
		panic(fmt.Sprintf("bridgetest.Secret: %q is not a secret LoadSecret keeps as it is (%v)", v, err))
	}
	return s
}

// PolicyTOML renders members as trust.toml.
func PolicyTOML(members []Member) string {
	var b strings.Builder
	for _, m := range members {
		fmt.Fprintf(&b, "\n[[principal]]\nid = %q\nroles = [", m.ID)
		for i, r := range m.Roles {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%q", r)
		}
		fmt.Fprintf(&b, "]\nkey = %q\n", Key(m.ID).Public().String())
		if m.Slack != "" {
			fmt.Fprintf(&b, "slack = %q\n", m.Slack)
		}
		if m.GitHub != "" {
			id := m.GitHubID
			if id == 0 {
				id = GitHubUserID(m.GitHub)
			}
			fmt.Fprintf(&b, "github = %q\ngithub_id = %d\n", m.GitHub, id)
		}
	}
	return b.String()
}

// World is a plan filed and waiting for answers.
type World struct {
	Dir      string
	Policy   *approval.Policy
	Registry *operations.Registry
	Store    *store.Dir
	Ledger   *bridge.Ledger
	Plan     *operations.Plan
	FP       string
	Record   string
	Now      func() time.Time
	// With [NewWithFile]: the file the operation replaces (its
	// diff_against), the plan's new file, and the directories diffs may
	// be read under; Source shows diffs by them.
	Current, NewFile string
	DiffRoots        []string
}

// Current and new contents of the file of [NewWithFile].
const (
	CurrentConfig = "listen = 80\nworkers = 4\nlog = \"info\"\n"
	NewConfig     = "listen = 8080\nworkers = 4\nlog = \"info\"\n"
)

// New makes a world whose operation needs approvers approvals.
func New(t testing.TB, approvers int) *World {
	t.Helper()
	return newWorld(t, approvers, false, false)
}

// NewWithFile is [New] whose operation, push-config, installs a file that
// replaces DIR/etc/staging.conf in place (diff_against), with DIR/etc as
// the one diff root; the plan binds DIR/new.conf. Both files are mode
// 0644, CurrentConfig and NewConfig.
func NewWithFile(t testing.TB, approvers int) *World {
	t.Helper()
	return newWorld(t, approvers, true, false)
}

// Breaker is the principal of [NewBreakGlass]'s policy who may break
// glass; it holds no other role.
var Breaker = Member{ID: "bea", Roles: []string{approval.RoleBreakGlass}}

// NewBreakGlass is [New] whose operation also allows break-glass, and
// whose policy also has [Breaker].
func NewBreakGlass(t testing.TB, approvers int) *World {
	t.Helper()
	return newWorld(t, approvers, false, true)
}

func newWorld(t testing.TB, approvers int, withFile, breakGlass bool) *World {
	t.Helper()
	dir := t.TempDir()
	w := &World{Dir: dir, Now: time.Now}
	members, paths := Cast, `"smith+trinity"`
	if breakGlass {
		members, paths = append(append([]Member{}, Cast...), Breaker), `"smith+trinity", "break-glass"`
	}
	var err error
	if w.Policy, err = approval.ParsePolicy("trust.toml", []byte(PolicyTOML(members))); err != nil {
		t.Fatal(err)
	}
	opsDir := filepath.Join(dir, "operations")
	if err := os.Mkdir(opsDir, 0o755); err != nil {
		t.Fatal(err)
	}
	ops := fmt.Sprintf(`
[[operation]]
name = "touch-flag"
description = "touch a flag file"
program = "touch"
args = ["%s/{target}-{param.name}"]
targets = ["staging"]

[operation.params.name]
pattern = "^[a-z]+$"

[operation.approval]
paths = [%s]
approvers = %d
`, dir, paths, approvers)
	req := operations.Request{Operation: "touch-flag", Target: "staging", Params: map[string]string{"name": "ready"}, Cwd: dir}
	if withFile {
		ops = fmt.Sprintf(`
[[operation]]
name = "push-config"
description = "install a config file"
program = "install"
args = ["-m", "0644", "{file.config}", "%[1]s/etc/{target}.conf"]
targets = ["staging"]

[operation.files.config]
max_size = "64KiB"
diff_against = "%[1]s/etc/{target}.conf"

[operation.approval]
paths = ["smith+trinity"]
approvers = %[2]d
`, dir, approvers)
		w.Current, w.NewFile, w.DiffRoots = filepath.Join(dir, "etc", "staging.conf"), filepath.Join(dir, "new.conf"), []string{filepath.Join(dir, "etc")}
		if err := os.Mkdir(filepath.Join(dir, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		for path, data := range map[string]string{w.Current: CurrentConfig, w.NewFile: NewConfig} {
			if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		req = operations.Request{Operation: "push-config", Target: "staging", Files: map[string]string{"config": w.NewFile}, Cwd: dir}
	}
	if err := os.WriteFile(filepath.Join(opsDir, "ops.toml"), []byte(ops), 0o644); err != nil {
		t.Fatal(err)
	}
	if w.Registry, err = operations.Load(opsDir, config.DefaultSecurePath); err != nil {
		t.Fatal(err)
	}
	if w.Store, err = store.OpenDir(filepath.Join(dir, "state", "store")); err != nil {
		t.Fatal(err)
	}
	w.Ledger = &bridge.Ledger{Dir: filepath.Join(dir, "state", "bridge", "posts")}
	plan, err := w.Registry.Resolve(req, operations.HashDigester{})
	if err != nil {
		t.Fatal(err)
	}
	plan.Planner, plan.Created = "agent", time.Now().UTC().Add(-time.Minute)
	w.Plan, w.FP = plan, plan.Fingerprint
	if err := w.Store.PutPlan(w.FP, Sign(t, "agent", approval.TypePlan, plan)); err != nil {
		t.Fatal(err)
	}
	if withFile {
		// Kept with the plan, as planning keeps a file every account
		// may read (docs/adr/0063-file-content-kept-with-the-plan.md).
		if err := w.Store.PutContent(plan.Files[0].SHA256, []byte(NewConfig)); err != nil {
			t.Fatal(err)
		}
	}
	w.Record = w.File(t, "smith")
	return w
}

// Source is the world as a bridge reads it.
func (w *World) Source() bridge.Source {
	src := bridge.Source{Policy: w.Policy, Registry: w.Registry, Store: w.Store}
	if w.DiffRoots != nil {
		src.Diffs = &bridge.DiffRules{Roots: w.DiffRoots}
	}
	return src
}

// Attestor is the bridge's attestor, signing with the bridge's key.
func (w *World) Attestor(t testing.TB) *bridge.Attestor {
	t.Helper()
	a, err := bridge.NewAttestor(w.Source(), Key("bridge"), w.Now)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Sign signs v as signer.
func Sign(t testing.TB, signer, payloadType string, v any) *approval.Envelope {
	t.Helper()
	env, err := approval.Sign(Key(signer), payloadType, v)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// Put stores env as evidence of the world's plan and returns its id.
func (w *World) Put(t testing.TB, env *approval.Envelope) string {
	t.Helper()
	id, err := approval.ID(env)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Store.PutEvidence(w.FP, id, env); err != nil {
		t.Fatal(err)
	}
	return id
}

// File stores a certainty record by filer, expiring in an hour, and
// returns its id.
func (w *World) File(t testing.TB, filer string) string {
	t.Helper()
	return w.FileFor(t, filer, time.Hour)
}

// FileFor stores a certainty record by filer that expires ttl from now
// (the real clock), and returns its id.
func (w *World) FileFor(t testing.TB, filer string, ttl time.Duration) string {
	t.Helper()
	now := time.Now().UTC()
	rec := approval.CertaintyRecord{Fingerprint: w.FP, Summary: "touch the ready flag", Effect: "a flag file appears",
		BlastRadius: "staging only", Rollback: "rm the flag", Certainty: "high", Filer: filer,
		Issued: now.Add(-30 * time.Second), Expires: now.Add(ttl)}
	return w.Put(t, Sign(t, filer, approval.TypeSmith, rec))
}

// BreakGlass stores [Breaker]'s break-glass record of plan fp, issued at
// issued, under her index and, for the world's plan, as its evidence
// (a [NewBreakGlass] world's operation allows it), and returns its id.
func (w *World) BreakGlass(t testing.TB, fp string, issued time.Time) string {
	t.Helper()
	b := approval.BreakGlass{Fingerprint: fp, Breaker: Breaker.ID, Reason: "api down", Incident: "INC-1", Issued: issued, Expires: issued.Add(10 * time.Minute)}
	env := Sign(t, b.Breaker, approval.TypeBreakGlass, b)
	id, err := approval.ID(env)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.PutBreakGlass(w.Store, b.Breaker, id, env); err != nil {
		t.Fatal(err)
	}
	if fp == w.FP {
		w.Put(t, env)
	}
	return id
}

// Withdraw stores the planner's withdrawal.
func (w *World) Withdraw(t testing.TB) {
	t.Helper()
	w.Put(t, Sign(t, "agent", approval.TypeWithdraw, approval.Withdrawal{Fingerprint: w.FP, Planner: "agent", Issued: time.Now().UTC()}))
}

// Answers returns the Trinity answers stored for the plan.
func (w *World) Answers(t testing.TB) []approval.Answer {
	t.Helper()
	evidence, _, err := w.Store.Evidence(w.FP)
	if err != nil {
		t.Fatal(err)
	}
	var out []approval.Answer
	for _, env := range evidence {
		s, err := w.Policy.Open(env)
		if err != nil || s.Type != approval.TypeTrinity {
			continue
		}
		var a approval.Answer
		if err := s.Decode(&a); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// Gate asks the gate whether run would pass now (rule 2, reality, aside:
// the world's program and files do not change).
func (w *World) Gate(t testing.TB) error {
	t.Helper()
	env, err := w.Store.GetPlan(w.FP)
	if err != nil {
		t.Fatal(err)
	}
	evidence, _, err := w.Store.Evidence(w.FP)
	if err != nil {
		t.Fatal(err)
	}
	op, _ := w.Registry.Get(w.Plan.Operation)
	_, gateErr := approval.Evaluate(approval.Input{Plan: env, Evidence: evidence, Policy: w.Policy, Op: op, Now: time.Now(), Used: map[string]int{}, PreconditionUnchecked: true})
	return gateErr
}
