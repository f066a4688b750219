package receipts_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/cli"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/receipts"
)

// site is one runner host (host: init --demo, its own journal) and the
// repository of the protected branch its policy is deployed from (repo:
// trust.toml and operations/), on a clock the test moves: every command,
// commit and record happens at site.now.
type site struct {
	t          *testing.T
	host, repo string
	now        time.Time
}

const noopOp = "[[operation]]\nname = \"noop\"\nprogram = \"/bin/true\"\nargs = [\"{param.n}\"]\ntargets = [\"staging\"]\n[operation.params.n]\npattern = \"[0-9]+\"\n"

func newSite(t *testing.T) *site {
	t.Helper()
	s := &site{t: t, host: t.TempDir(), repo: t.TempDir(), now: time.Now().UTC().Add(-48 * time.Hour).Truncate(time.Second)}
	s.pw("init", "--demo", s.host)
	s.write(filepath.Join(s.host, "operations", "noop.toml"), noopOp)
	// The repository holds what the host was deployed from.
	s.copy(s.host, s.repo)
	return s
}

// pw runs prod-write on the host at s.now.
func (s *site) pw(args ...string) string {
	s.t.Helper()
	out, errs, code := s.pwCode(args...)
	if code != 0 {
		s.t.Fatalf("prod-write %v: exit %d\n%s%s", args, code, out, errs)
	}
	return out
}

func (s *site) pwCode(args ...string) (string, string, int) {
	var out, errb bytes.Buffer
	f := &cli.Factory{Env: localapi.Env{
		IO:        &cli.IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb},
		Now:       func() time.Time { return s.now },
		LookupEnv: func(string) (string, bool) { return "", false },
		Getwd:     func() (string, error) { return s.host, nil },
	}}
	code := cli.Run(args, f)
	return out.String(), errb.String(), code
}

func (s *site) key(id string) string { return filepath.Join(s.host, "keys", id+".key") }

func (s *site) write(path, data string) {
	s.t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

func (s *site) read(path string) string {
	s.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		s.t.Fatal(err)
	}
	return string(b)
}

// copy copies trust.toml and operations/*.toml from one tree to another.
func (s *site) copy(from, to string) {
	s.t.Helper()
	os.MkdirAll(filepath.Join(to, "operations"), 0o755)
	s.write(filepath.Join(to, "trust.toml"), s.read(filepath.Join(from, "trust.toml")))
	old, _ := filepath.Glob(filepath.Join(to, "operations", "*.toml"))
	for _, f := range old {
		os.Remove(f)
	}
	files, _ := filepath.Glob(filepath.Join(from, "operations", "*.toml"))
	for _, f := range files {
		s.write(filepath.Join(to, "operations", filepath.Base(f)), s.read(f))
	}
}

// deploy installs the repository's trust policy and registry on the host.
func (s *site) deploy() { s.copy(s.repo, s.host) }

// advance moves the clock.
func (s *site) advance(d time.Duration) { s.now = s.now.Add(d) }

// approvedRun plans noop n, has it filed by smith and approved by each of
// approvers, and runs it.
func (s *site) approvedRun(n int, approvers ...string) {
	s.t.Helper()
	fp := fpRE.FindString(s.pw("plan", "noop", "--target", "staging", "--param", fmt.Sprintf("n=%d", n), "--key", s.key("agent")))
	s.pw("file", fp, "--key", s.key("smith"), "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high")
	for _, a := range approvers {
		s.pw("decide", fp, "approve", "--key", s.key(a))
	}
	s.pw("run", fp)
}

// addApprover adds a principal with the approver role to the trust policy
// at path, its key written to the host's keys/.
func (s *site) addApprover(path, id string) {
	s.t.Helper()
	k, err := keys.Generate()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := k.WriteNew(s.key(id)); err != nil {
		s.t.Fatal(err)
	}
	s.write(path, s.read(path)+fmt.Sprintf("\n[[principal]]\nid = %q\nroles = [\"approver\"]\nkey = %q\n", id, k.Public().String()))
}

// rotateRunner gives the runner a new key: in the trust policy at path
// and in the host's key file (which the host uses once the policy is
// deployed).
func (s *site) rotateRunner(path string) (newKey *keys.Private) {
	s.t.Helper()
	old, err := keys.Load(s.key("runner"))
	if err != nil {
		s.t.Fatal(err)
	}
	k, err := keys.Generate()
	if err != nil {
		s.t.Fatal(err)
	}
	data := s.read(path)
	edited := strings.Replace(data, old.Public().String(), k.Public().String(), 1)
	if edited == data {
		s.t.Fatal("the runner's key is not in the trust policy")
	}
	s.write(path, edited)
	return k
}

// git runs the real git in the repository at s.now.
func (s *site) git(args ...string) string {
	s.t.Helper()
	cmd := exec.Command("git", append([]string{"-C", s.repo, "-c", "user.name=ci", "-c", "user.email=ci@example.org", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)...)
	date := fmt.Sprintf("@%d +0000", s.now.Unix())
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		s.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// commit commits everything in the repository at s.now.
func (s *site) commit(msg string) string {
	s.t.Helper()
	s.git("add", "-A")
	s.git("commit", "-q", "-m", msg)
	return s.git("rev-parse", "HEAD")
}

// replayAgainst replays the host's journal against the trust policy of
// the checkout at repo, as CI does: `replay JOURNAL --trust repo/trust.toml`
// and nothing else.
func (s *site) replayAgainst(repo string, extra ...string) (verdict, string) {
	s.t.Helper()
	out, errs, code := s.pwCode(append([]string{"replay", filepath.Join(s.host, "state", "journal", "receipts.jsonl"), "--trust", filepath.Join(repo, "trust.toml"), "--json"}, extra...)...)
	v := verdict{code: code, codes: map[int][]string{}, warnings: map[int][]string{}}
	if code > 1 {
		return v, errs
	}
	var rep struct {
		Receipts []receipts.Result `json:"receipts"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		s.t.Fatalf("replay output is not JSON: %v\n%s\n%s", err, out, errs)
	}
	for _, r := range rep.Receipts {
		if r.Kind == receipts.KindIntent && r.Operation == "" {
			s.t.Errorf("line %d: an intent's row names no operation", r.Line)
		}
		for _, p := range r.Problems {
			v.codes[r.Line] = append(v.codes[r.Line], p.Code)
			v.all = append(v.all, p.Code)
			errs += fmt.Sprintf("line %d: %s: %s\n", r.Line, p.Code, p.Detail)
		}
	}
	return v, errs
}

func (s *site) replayOK(step string) {
	s.t.Helper()
	if v, why := s.replayAgainst(s.repo); v.code != 0 {
		s.t.Fatalf("%s: replay exit %d, want 0: %v\n%s", step, v.code, v.codes, why)
	}
}

func requireGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		if os.Getenv("PROD_WRITE_REQUIRE_SERVERS") == "1" {
			t.Fatalf("git is missing and PROD_WRITE_REQUIRE_SERVERS=1: run scripts/test-deps.sh as root")
		}
		t.Skip("git is missing (scripts/test-deps.sh installs it)")
	}
}

// newBranchSite is a site whose repository is a git repository with the
// host's first deployment committed on main an hour before the first run.
func newBranchSite(t *testing.T) *site {
	t.Helper()
	requireGit(t)
	s := newSite(t)
	s.git("init", "-q", "-b", "main")
	s.commit("the first policy and registry")
	s.advance(time.Hour)
	return s
}

// TestReplayJudgesByTheBranch: with the trust policy and registry in a git
// work tree, replay reads when each version was in force from the
// branch's first-parent history, with no record and no flag. Three
// routine changes, each made as docs/CI.md says (merge, deploy within the
// rollout, run), keep replay at exit 0 after every step, runs made under
// the old version between the merge and the deploy included.
func TestReplayJudgesByTheBranch(t *testing.T) {
	s := newBranchSite(t)
	s.approvedRun(1, "alice")
	s.replayOK("the first run")

	// An approver added: merged, deployed ten minutes later, with a run
	// under the old policy in between and one by the new approver after.
	s.addApprover(filepath.Join(s.repo, "trust.toml"), "carol")
	s.commit("add carol as an approver")
	s.advance(5 * time.Minute)
	s.approvedRun(2, "alice")
	s.advance(5 * time.Minute)
	s.deploy()
	s.approvedRun(3, "carol")
	s.replayOK("an approver added")

	// The runner key rotated: the host takes its new key as the policy
	// is deployed.
	s.advance(time.Hour)
	k := s.rotateRunner(filepath.Join(s.repo, "trust.toml"))
	s.commit("rotate the runner key")
	s.advance(2 * time.Minute)
	s.approvedRun(4, "alice") // the old key, within the rollout
	s.advance(2 * time.Minute)
	s.deploy()
	os.Remove(s.key("runner"))
	if err := k.WriteNew(s.key("runner")); err != nil {
		t.Fatal(err)
	}
	s.approvedRun(5, "alice")
	s.replayOK("the runner key rotated")

	// An operation's approvers raised from 1 to 2.
	s.advance(time.Hour)
	s.write(filepath.Join(s.repo, "operations", "noop.toml"), strings.Replace(noopOp, "targets =", "approval = { approvers = 2 }\ntargets =", 1))
	s.commit("noop needs two approvers")
	s.advance(time.Minute)
	s.approvedRun(6, "alice")
	s.advance(time.Minute)
	s.deploy()
	s.approvedRun(7, "alice", "carol")
	s.replayOK("approvers raised to 2")

	// A run under the old definition after the rollout is what replay
	// exists to notice: a host that never loaded the change.
	s.advance(2 * time.Hour)
	s.write(filepath.Join(s.host, "operations", "noop.toml"), noopOp)
	s.approvedRun(8, "alice")
	v, why := s.replayAgainst(s.repo)
	if last := maxLine(v); v.code != 1 || len(v.codes) != 1 || !contains(v.codes[last], receipts.Superseded) {
		t.Fatalf("a run under the old definition two hours after its replacement: exit %d %v, want superseded on its intent\n%s", v.code, v.codes, why)
	}
	// The same with a longer allowance: the rollout is the caller's.
	if v, why := s.replayAgainst(s.repo, "--rollout", "3h"); v.code != 0 {
		t.Fatalf("--rollout 3h: exit %d %v\n%s", v.code, v.codes, why)
	}

	// Every operation removed: git keeps no empty operations/, and the
	// branch's registry is then empty, not unreadable.
	s.advance(time.Minute)
	s.git("rm", "-q", "operations/config.toml", "operations/noop.toml")
	s.commit("no operations left")
	if v, why := s.replayAgainst(s.repo, "--rollout", "3h"); v.code != 0 {
		t.Fatalf("after every operation was removed: exit %d %v\n%s", v.code, v.codes, why)
	}
}

func maxLine(v verdict) int {
	m := 0
	for l := range v.codes {
		m = max(m, l)
	}
	return m
}

// TestReplayBranchRefuses: what replay judges by is the branch's
// first-parent history and nothing else. A version committed on a side
// branch that never merged, a receipt dated before its version landed,
// a version a force-push removed, and a merge whose side commit is older
// than the merge each fail with a code that says why; a shallow clone and
// a work tree whose policy is not HEAD's are refused outright.
func TestReplayBranchRefuses(t *testing.T) {
	t.Run("a version on a side branch never merged", func(t *testing.T) {
		s := newBranchSite(t)
		s.approvedRun(1, "alice")
		s.git("checkout", "-q", "-b", "side")
		s.addApprover(filepath.Join(s.repo, "trust.toml"), "mallory")
		s.commit("mallory approves")
		s.deploy()
		s.advance(time.Minute)
		s.approvedRun(2, "mallory")
		s.git("checkout", "-q", "main")
		v, why := s.replayAgainst(s.repo)
		if v.code != 1 || !contains(v.codes[3], receipts.UnknownPolicy) || len(v.codes[1]) != 0 {
			t.Fatalf("exit %d %v, want unknown_policy on the side branch's run only\n%s", v.code, v.codes, why)
		}
		if !strings.Contains(why, "never merged") {
			t.Fatalf("the report does not say why:\n%s", why)
		}
		// Replayed from the side branch itself, it passes: the
		// checkout is what decides, so CI must check out the
		// protected branch (docs/CI.md).
		s.git("checkout", "-q", "side")
		if v, why := s.replayAgainst(s.repo); v.code != 0 {
			t.Fatalf("from the side branch: exit %d %v\n%s", v.code, v.codes, why)
		}
	})

	t.Run("merged without fast-forward: in force from the merge", func(t *testing.T) {
		s := newBranchSite(t)
		s.git("checkout", "-q", "-b", "side")
		s.addApprover(filepath.Join(s.repo, "trust.toml"), "carol")
		s.commit("carol approves")
		s.deploy() // deployed from the side branch before the merge
		s.advance(time.Minute)
		s.approvedRun(1, "carol")
		s.advance(time.Hour)
		s.git("checkout", "-q", "main")
		s.git("merge", "-q", "--no-ff", "-m", "merge side", "side")
		v, why := s.replayAgainst(s.repo)
		if v.code != 1 || !contains(v.codes[1], receipts.NotYetInForce) {
			t.Fatalf("exit %d %v, want not_yet_in_force: the side commit is older than its merge\n%s", v.code, v.codes, why)
		}
		s.advance(time.Minute)
		s.approvedRun(2, "carol")
		if v, _ := s.replayAgainst(s.repo); len(v.codes[3]) != 0 {
			t.Fatalf("a run after the merge: %v, want none", v.codes[3])
		}
	})

	t.Run("a receipt dated before its version landed", func(t *testing.T) {
		s := newBranchSite(t)
		s.approvedRun(1, "alice")
		s.advance(time.Hour)
		s.addApprover(filepath.Join(s.repo, "trust.toml"), "carol")
		s.commit("add carol")
		s.deploy()
		// The host's clock (or a runner-key holder) says it ran half
		// an hour before the change landed.
		s.advance(-30 * time.Minute)
		s.approvedRun(2, "carol")
		v, why := s.replayAgainst(s.repo)
		if v.code != 1 || !contains(v.codes[3], receipts.NotYetInForce) {
			t.Fatalf("exit %d %v, want not_yet_in_force on the backdated intent\n%s", v.code, v.codes, why)
		}
	})

	t.Run("a commit dated before its parent counts from its parent's time", func(t *testing.T) {
		s := newBranchSite(t)
		s.write(filepath.Join(s.repo, "README"), "the policy\n")
		s.commit("a readme")
		landed := s.now
		// Committed with a date two hours back (a clock behind, or a
		// date set by hand): it cannot have landed before its parent.
		s.advance(-2 * time.Hour)
		s.addApprover(filepath.Join(s.repo, "trust.toml"), "carol")
		s.commit("add carol, dated back")
		s.deploy()
		s.now = landed.Add(-30 * time.Minute)
		s.approvedRun(1, "carol")
		v, why := s.replayAgainst(s.repo)
		if v.code != 1 || !contains(v.codes[1], receipts.NotYetInForce) {
			t.Fatalf("exit %d %v, want not_yet_in_force: the commit landed no earlier than its parent\n%s", v.code, v.codes, why)
		}
	})

	t.Run("a version a force-push removed", func(t *testing.T) {
		s := newBranchSite(t)
		base := s.git("rev-parse", "HEAD")
		s.addApprover(filepath.Join(s.repo, "trust.toml"), "carol")
		s.commit("add carol")
		s.deploy()
		s.advance(time.Minute)
		s.approvedRun(1, "carol")
		s.replayOK("before the rewrite")
		// The branch rewritten: carol's version is gone from it, and a
		// different change stands in its place.
		s.git("reset", "-q", "--hard", base)
		s.write(filepath.Join(s.repo, "trust.toml"), s.read(filepath.Join(s.repo, "trust.toml"))+"\n# rewritten\n")
		s.commit("rewritten")
		v, why := s.replayAgainst(s.repo)
		if v.code != 1 || !contains(v.codes[1], receipts.UnknownPolicy) || !strings.Contains(why, "rewrite") {
			t.Fatalf("exit %d %v, want unknown_policy saying a rewrite may have removed it\n%s", v.code, v.codes, why)
		}
	})

	t.Run("a shallow clone", func(t *testing.T) {
		s := newBranchSite(t)
		s.approvedRun(1, "alice")
		s.advance(time.Minute)
		s.write(filepath.Join(s.repo, "README"), "x\n")
		s.commit("another commit")
		clone := filepath.Join(t.TempDir(), "trusted")
		if out, err := exec.Command("git", "clone", "-q", "--depth", "1", "file://"+s.repo, clone).CombinedOutput(); err != nil {
			t.Fatalf("git clone --depth 1: %v\n%s", err, out)
		}
		v, why := s.replayAgainst(clone)
		if v.code != 78 || !strings.Contains(why, "fetch-depth: 0") {
			t.Fatalf("exit %d, want 78 naming fetch-depth: 0\n%s", v.code, why)
		}
		// A full clone of the same branch replays.
		full := filepath.Join(t.TempDir(), "trusted")
		if out, err := exec.Command("git", "clone", "-q", "file://"+s.repo, full).CombinedOutput(); err != nil {
			t.Fatalf("git clone: %v\n%s", err, out)
		}
		if v, why := s.replayAgainst(full); v.code != 0 {
			t.Fatalf("a full clone: exit %d %v\n%s", v.code, v.codes, why)
		}
	})

	t.Run("a work tree whose policy is not HEAD's", func(t *testing.T) {
		s := newBranchSite(t)
		s.approvedRun(1, "alice")
		s.addApprover(filepath.Join(s.repo, "trust.toml"), "carol")
		v, why := s.replayAgainst(s.repo)
		if v.code != 78 || !strings.Contains(why, "commit the change") {
			t.Fatalf("exit %d, want 78 saying the work tree differs from HEAD\n%s", v.code, why)
		}
	})
}

// TestHistoryRecordInOrder is docs/CI.md's order on a tree with no git:
// record, run, change the policy (the deploy), run, record a while later.
// The new version counts from the record before it, so the run between
// the deploy and the record verifies.
func TestHistoryRecordInOrder(t *testing.T) {
	s := newSite(t)
	p := &protected{w: &world{t: t, dir: s.host}, trust: filepath.Join(s.host, "trust.toml"), registry: filepath.Join(s.host, "operations"), history: filepath.Join(s.host, "history")}
	s.advance(time.Minute)
	p.record(t, s.now, "1h")
	s.advance(time.Minute)
	s.approvedRun(1, "alice")
	s.advance(time.Minute)
	s.addApprover(p.trust, "carol")
	s.advance(time.Minute)
	s.approvedRun(2, "carol")
	s.advance(3 * time.Second)
	p.record(t, s.now, "1h")
	if v, why := s.replayAgainst(s.host); v.code != 0 {
		t.Fatalf("exit %d %v, want 0\n%s", v.code, v.codes, why)
	}
	// The defence stays: a run under the first policy after its
	// rollout fails.
	s.advance(2 * time.Hour)
	first := s.read(filepath.Join(p.history, "trust", strings.Replace(firstTrust(t, p.history), ":", "-", 1)+".toml"))
	now := s.read(p.trust)
	s.write(p.trust, first)
	s.approvedRun(3, "alice")
	s.write(p.trust, now)
	if v, why := s.replayAgainst(s.host); v.code != 1 || !contains(v.codes[maxLine(v)], receipts.Superseded) {
		t.Fatalf("exit %d %v, want superseded on the late run\n%s", v.code, v.codes, why)
	}
}

// firstTrust is the digest of the first trust policy versions.toml lists.
func firstTrust(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, receipts.VersionsFile))
	if err != nil {
		t.Fatal(err)
	}
	v, err := receipts.ParseVersions("versions.toml", b)
	if err != nil {
		t.Fatal(err)
	}
	return v.Trust[0].Digest
}
