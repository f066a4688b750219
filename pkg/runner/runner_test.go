package runner_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/receipts"
)

// deployment is one host's configuration, written by hand: a registry of
// one mutating operation approved by a Gera go, a trust policy of an agent,
// a gera and this host's runner.
type deployment struct {
	dir         string
	agent, gera *keys.Private
}

func newDeployment(t *testing.T) *deployment {
	t.Helper()
	d := &deployment{dir: t.TempDir()}
	var runnerKey *keys.Private
	for _, k := range []**keys.Private{&d.agent, &d.gera, &runnerKey} {
		var err error
		if *k, err = keys.Generate(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(d.dir, "keys"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := runnerKey.WriteNew(filepath.Join(d.dir, "keys", "runner.key")); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		config.FileName: `registry = "operations"
trust = "trust.toml"
state = "state"
secure_path = ["/usr/bin", "/bin"]
runner_key = "keys/runner.key"
[store]
backend = "embedded"
`,
		"operations/say.toml": `[[operation]]
name = "say"
description = "print the target"
mutating = true
program = "echo"
args = ["said", "{target}"]
targets = ["staging"]
[operation.approval]
paths = ["gera"]
`,
		"trust.toml": fmt.Sprintf("[[principal]]\nid = \"agent\"\nroles = [\"agent\"]\nkey = %q\n\n[[principal]]\nid = \"gera\"\nroles = [\"gera\"]\nkey = %q\n\n[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = %q\n",
			d.agent.Public(), d.gera.Public(), runnerKey.Public()),
	}
	for name, data := range files {
		p := filepath.Join(d.dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// runner is the domain's run order as a test drives it: no command line,
// no factory; stdio in buffers.
func (d *deployment) runner(stdout, stderr io.Writer) *runner.Runner {
	none := func(string) (string, bool) { return "", false }
	return &runner.Runner{
		Now:    time.Now,
		Config: func() (*config.Config, error) { return config.Load(filepath.Join(d.dir, config.FileName)) },
		Registry: func(c *config.Config) (*operations.Registry, error) {
			return operations.Load(c.Registry, c.SecurePath)
		},
		Policy:    func(c *config.Config) (*approval.Policy, error) { return approval.LoadPolicy(c.Trust) },
		Store:     func(c *config.Config) (store.Store, error) { return store.OpenDir(c.StoreDir()) },
		PassEnv:   none,
		LookupEnv: none,
		Stdout:    stdout,
		Stderr:    stderr,
	}
}

// plan stores a plan of say on staging, signed by the agent, with a Gera
// go for uses runs.
func (d *deployment) plan(t *testing.T, uses int) string {
	t.Helper()
	r := d.runner(io.Discard, io.Discard)
	c, err := r.Config()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := r.Registry(c)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := reg.Resolve(operations.Request{Operation: "say", Target: "staging", Cwd: d.dir, Getenv: r.PassEnv}, operations.HashDigester{})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	plan.Planner, plan.Created = "agent", now
	st, err := r.Store(c)
	if err != nil {
		t.Fatal(err)
	}
	env, err := approval.Sign(d.agent, approval.TypePlan, plan)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutPlan(plan.Fingerprint, env); err != nil {
		t.Fatal(err)
	}
	goEnv, err := approval.Sign(d.gera, approval.TypeGera, approval.GeraDecision{
		Fingerprint: plan.Fingerprint, Decision: approval.Go, Uses: uses, Decider: "gera", Issued: now, Expires: now.Add(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	id, err := approval.ID(goEnv)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.PutEvidence(plan.Fingerprint, id, goEnv); err != nil {
		t.Fatal(err)
	}
	return plan.Fingerprint
}

// journal returns the receipts in the journal, in order.
func (d *deployment) journal(t *testing.T) []*receipts.Receipt {
	t.Helper()
	fl, err := os.Open(filepath.Join(d.dir, "state", "journal", "receipts.jsonl"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	var out []*receipts.Receipt
	err = receipts.Scan(fl, func(l receipts.Line) error {
		_, r, err := receipts.Decode(l.Bytes)
		if err != nil {
			return err
		}
		out = append(out, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The run order driven directly: an approved plan runs once and leaves an
// intent and an outcome receipt; a second run of its single-use approval
// is refused before anything runs, and leaves no receipt.
func TestRunOnceThenRefused(t *testing.T) {
	d := newDeployment(t)
	fp := d.plan(t, 1)

	var stdout, stderr bytes.Buffer
	ran, err := d.runner(&stdout, &stderr).Run(fp)
	if err != nil {
		t.Fatalf("first run: %v (stderr %q)", err, stderr.String())
	}
	if got := stdout.String(); got != "said staging\n" {
		t.Errorf("the program printed %q, want %q", got, "said staging\n")
	}
	if ran.Outcome.ExitCode != 0 || ran.Result.ExitCode != 0 {
		t.Errorf("exit %d (outcome %d), want 0", ran.Result.ExitCode, ran.Outcome.ExitCode)
	}
	if ran.Plan.Plan.Fingerprint != fp || ran.Intent.Seq != 1 || ran.Done.Seq != 2 {
		t.Errorf("ran %s with receipts %d and %d, want %s with 1 and 2", ran.Plan.Plan.Fingerprint, ran.Intent.Seq, ran.Done.Seq, fp)
	}
	j := d.journal(t)
	if len(j) != 2 || j[0].Kind != receipts.KindIntent || j[1].Kind != receipts.KindOutcome {
		t.Fatalf("journal after one run: %d receipts, want an intent and an outcome", len(j))
	}
	in, out := j[0], j[1]
	if in.RunID != ran.RunID || out.RunID != ran.RunID {
		t.Errorf("receipts name runs %s and %s, want %s", in.RunID, out.RunID, ran.RunID)
	}
	if in.Intent.Fingerprint != fp || in.Intent.Path != operations.PathGera || in.Intent.Slot != 0 {
		t.Errorf("intent: fingerprint %s path %v slot %d", in.Intent.Fingerprint, in.Intent.Path, in.Intent.Slot)
	}
	if out.Outcome.Intent != ran.Intent.Hash || out.Outcome.ExitCode != 0 {
		t.Errorf("outcome: intent %s exit %d, want %s and 0", out.Outcome.Intent, out.Outcome.ExitCode, ran.Intent.Hash)
	}

	stdout.Reset()
	ran, err = d.runner(&stdout, &stderr).Run(fp)
	r, ok := refusal.As(err)
	if !ok || r.Code != refusal.EvidenceConsumed {
		t.Fatalf("second run of a single-use go: %v (ran %v), want refused %s", err, ran, refusal.EvidenceConsumed)
	}
	if stdout.Len() != 0 {
		t.Errorf("the refused run printed %q: the program ran", stdout.String())
	}
	if j := d.journal(t); len(j) != 2 {
		t.Errorf("journal after the refused run: %d receipts, want the first run's 2", len(j))
	}
}

// decisionLog is a decision log that cannot take a line: from the start
// (ready fails), or only when the allowed line is written.
type decisionLog struct {
	ready, allowed error
	finished       error
}

var errUnloggable = errors.New("the decision log is full")

func (l *decisionLog) Loaded(*runner.PlanContext)                 {}
func (l *decisionLog) Ready() error                               { return l.ready }
func (l *decisionLog) Stamp(in *receipts.Intent) *receipts.Intent { return in }
func (l *decisionLog) Allowed(*approval.Decision, string, uint64) error {
	return l.allowed
}
func (l *decisionLog) Finish(err error) { l.finished = err }

// A run whose allowed line cannot be written never runs its program
// (docs/adr/0037-a-decision-log-that-never-drops-a-line.md). When the log
// says so before anything is spent, nothing is: no receipt, and the
// single-use approval runs afterwards. When the line fails only after the
// intent is durable, the program still does not start, and an outcome
// receipt says it did not; the use is spent, as the error says.
func TestRunStopsWhenItsDecisionCannotBeLogged(t *testing.T) {
	t.Run("before spending", func(t *testing.T) {
		d := newDeployment(t)
		fp := d.plan(t, 1)
		var stdout, stderr bytes.Buffer
		r := d.runner(&stdout, &stderr)
		dl := &decisionLog{ready: errUnloggable, allowed: errUnloggable}
		r.StartDecision = func(string) (runner.DecisionLog, error) { return dl, nil }
		if ran, err := r.Run(fp); !errors.Is(err, errUnloggable) || ran != nil {
			t.Fatalf("run with a log that cannot take its line: %v, %v", ran, err)
		}
		if !errors.Is(dl.finished, errUnloggable) {
			t.Errorf("the attempt finished with %v", dl.finished)
		}
		if stdout.Len() != 0 {
			t.Errorf("the program ran: %q", stdout.String())
		}
		if j := d.journal(t); len(j) != 0 {
			t.Fatalf("%d receipts, want none", len(j))
		}
		// Nothing was spent: the single use runs once the log is back.
		ran, err := d.runner(&stdout, &stderr).Run(fp)
		if err != nil {
			t.Fatalf("run once the log is back: %v", err)
		}
		if stdout.String() != "said staging\n" || ran.Intent.Seq != 1 {
			t.Errorf("printed %q, intent %d", stdout.String(), ran.Intent.Seq)
		}
	})
	t.Run("after the intent", func(t *testing.T) {
		d := newDeployment(t)
		fp := d.plan(t, 1)
		var stdout, stderr bytes.Buffer
		r := d.runner(&stdout, &stderr)
		r.StartDecision = func(string) (runner.DecisionLog, error) {
			return &decisionLog{allowed: errUnloggable}, nil
		}
		ran, err := r.Run(fp)
		if !errors.Is(err, errUnloggable) || ran != nil {
			t.Fatalf("run whose allowed line fails: %v, %v", ran, err)
		}
		if !strings.Contains(err.Error(), "not started") || !strings.Contains(err.Error(), "spent") {
			t.Errorf("the error does not say the program did not start and the use is spent: %v", err)
		}
		if stdout.Len() != 0 {
			t.Errorf("the program ran: %q", stdout.String())
		}
		j := d.journal(t)
		if len(j) != 2 || j[0].Kind != receipts.KindIntent || j[1].Kind != receipts.KindOutcome {
			t.Fatalf("%d receipts, want an intent and an outcome", len(j))
		}
		out := j[1].Outcome
		if j[1].RunID != j[0].RunID || out.ExitCode != runner.ExitSoftware || !strings.HasPrefix(out.Error, "not started: ") || out.Stdout.Size != 0 {
			t.Errorf("outcome %+v of run %s (intent's %s): want exit 70, not started", out, j[1].RunID, j[0].RunID)
		}
		_, err = d.runner(&stdout, &stderr).Run(fp)
		if r, ok := refusal.As(err); !ok || r.Code != refusal.EvidenceConsumed {
			t.Errorf("the next run: %v, want the use spent", err)
		}
	})
}

// A journal whose disk has no room for a run's receipts refuses the run
// before its approval is spent: the single-use go still counts, and runs
// once there is room (docs/adr/0006-consumption.md). Without the check
// the go would be consumed, then the intent's append fail.
func TestFullJournalDiskSpendsNothing(t *testing.T) {
	d := newDeployment(t)
	fp := d.plan(t, 1)
	r := d.runner(io.Discard, io.Discard)
	r.JournalRoom = func(string) (int64, error) { return 64 << 10, nil }
	_, err := r.Run(fp)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "nothing was spent") {
		t.Fatalf("run on a full disk: %v, want ENOSPC saying nothing was spent", err)
	}
	if got := d.journal(t); len(got) != 0 {
		t.Fatalf("%d receipts written", len(got))
	}
	r = d.runner(io.Discard, io.Discard)
	if _, err := r.Run(fp); err != nil {
		t.Fatalf("once there is room, the single-use go still runs it: %v", err)
	}
	if got := d.journal(t); len(got) != 2 {
		t.Fatalf("%d receipts, want the intent and the outcome", len(got))
	}
	// Replay agrees (docs/adr/0064-consumption-stays-before-the-intent.md):
	// one run, complete, its single use relied on once.
	policy, err := approval.LoadPolicy(filepath.Join(d.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	fl, err := os.Open(filepath.Join(d.dir, "state", "journal", "receipts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	sum, err := (&receipts.Replayer{Policy: policy}).Replay(fl, func(receipts.Result) {})
	if err != nil || !sum.OK || sum.Runs != 1 || sum.Incomplete != 0 || sum.Failed != 0 {
		t.Fatalf("replay: %+v %v; want one complete run that verifies", sum, err)
	}
}
