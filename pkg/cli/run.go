package cli

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/execute"
	"github.com/prod-write/prod-write/pkg/failpoint"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/receipts"
)

// RunOptions are run's inputs.
type RunOptions struct {
	F           *Factory `json:"-"`
	Fingerprint string
}

// NewCmdRun builds `run`.
func NewCmdRun(f *Factory, runF func(*RunOptions) error) *cobra.Command {
	opts := &RunOptions{F: f}
	return &cobra.Command{
		Use:   "run FP",
		Short: "Run an approved plan: gate, consume, fsynced intent, exec, outcome",
		Long: `run loads the plan, recomputes its fingerprint from reality (the program and
files are snapshotted and hashed, and those snapshots are what runs), asks
the gate, consumes the approval atomically, writes and fsyncs the intent
receipt, executes the program with no shell and a scratch environment,
writes the outcome receipt, and exits with the program's status (128+N for
signal N, 124 on the operation's timeout; 77 if refused, and then nothing
ran).`,
		Example: "  prod-write run sha256:9f…",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Fingerprint = args[0]
			if runF != nil {
				return runF(opts)
			}
			return f.dispatch("run", opts, nil, func() error { return runRun(opts) })
		},
	}
}

// snapshotDigester hashes what will run: each file and the program are
// copied into sealed memory, hashed on the way, and those copies are what
// the program gets (SPEC §6).
type snapshotDigester struct {
	progress func(string, int64, int64)
	cache    *execute.SnapshotCache // programs' snapshots kept by the service
	program  *execute.Snapshot
	files    map[string]*execute.Snapshot
}

func (s *snapshotDigester) Digest(kind, name, path string, max int64) (int64, string, error) {
	var progress func(int64, int64)
	if s.progress != nil && kind == "file" {
		progress = func(done, total int64) { s.progress(name, done, total) }
	}
	var snap *execute.Snapshot
	var err error
	if kind == "program" && s.cache != nil {
		snap, err = s.cache.Take(path, max, true)
	} else {
		snap, err = execute.TakeSnapshot(path, max, kind == "program", progress)
	}
	if err != nil {
		var tl *execute.TooLargeError
		if errors.As(err, &tl) {
			return 0, "", &operations.TooLargeError{Path: tl.Path, Max: tl.Max}
		}
		return 0, "", err
	}
	if kind == "program" {
		s.program = snap
	} else {
		s.files[name] = snap
	}
	return snap.Size, snap.SHA256, nil
}

// DigestFile snapshots a file already open (one the caller handed over).
func (s *snapshotDigester) DigestFile(kind, name string, fl *os.File, path string, max int64) (int64, string, error) {
	snap, err := execute.SnapshotFile(fl, path, max, false, nil)
	if err != nil {
		var tl *execute.TooLargeError
		if errors.As(err, &tl) {
			return 0, "", &operations.TooLargeError{Path: tl.Path, Max: tl.Max}
		}
		return 0, "", err
	}
	s.files[name] = snap
	return snap.Size, snap.SHA256, nil
}

func (s *snapshotDigester) Close() {
	if s.program != nil {
		s.program.Close()
	}
	for _, f := range s.files {
		f.Close()
	}
}

// runner is this host's signing identity for receipts.
func (f *Factory) runnerIdentity(c *config.Config, p *approval.Policy) (*keys.Private, *approval.Principal, error) {
	if f.call != nil {
		st := f.call.svc.current()
		return st.runnerKey, st.runner, st.runnerErr
	}
	return runnerIdentity(c, p)
}

func runnerIdentity(c *config.Config, p *approval.Policy) (*keys.Private, *approval.Principal, error) {
	if c.RunnerKey == "" {
		return nil, nil, &config.Error{Path: c.Path, Msg: "runner_key is not set: this host cannot sign receipts, so it cannot run"}
	}
	k, err := keys.Load(c.RunnerKey)
	if err != nil {
		return nil, nil, err
	}
	pr, ok := p.ByKey(k.Public().ID())
	if !ok || !pr.Has(approval.RoleRunner) {
		return nil, nil, &config.Error{Path: c.Path, Msg: fmt.Sprintf("runner_key %s belongs to no principal with the runner role", c.RunnerKey)}
	}
	return k, pr, nil
}

func runRun(o *RunOptions) (err error) {
	f := o.F
	// Every attempt, allowed or refused, is a line of the decision log
	// (docs/DECISIONS.md); its id is the intent receipt's decision_id.
	dl, err := f.startDecision(o.Fingerprint)
	if err != nil {
		return err
	}
	defer func() { dl.finish(err) }()
	if f.call == nil {
		go keys.Warm()
		// run is short and allocates little: collecting garbage would only
		// add latency in front of the program (docs/PERFORMANCE.md). A
		// memory limit still bounds it. (Not in the service, which lives
		// long and runs many calls at once.)
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(256 << 20))
	}
	// 1. Load the plan.
	pc, err := loadPlan(f, o.Fingerprint)
	if err != nil {
		return err
	}
	dl.pc = pc
	rk, rp, err := f.runnerIdentity(pc.cfg, pc.policy)
	if err != nil {
		return err
	}
	// Who the program runs as and its secrets: settled before anything is
	// consumed, so a run that cannot start spends nothing.
	var cred *syscall.Credential
	if f.call != nil {
		if cred, err = f.call.credential(pc); err != nil {
			return err
		}
	}
	env, err := pc.childEnv(f)
	if err != nil {
		return err
	}
	// 2. Recompute the fingerprint from reality, snapshotting what will run.
	snaps := &snapshotDigester{files: map[string]*execute.Snapshot{}}
	if f.call != nil {
		snaps.cache = &f.call.svc.snapshots
	}
	if f.IO.ErrTTY && !f.JSON {
		snaps.progress = progressPrinter(f.IO.Err)
	}
	defer snaps.Close()
	if err := pc.reality(f, callerFiles{snaps, f}); err != nil {
		return err
	}
	// 3. The gate, and 4. the consumption of the approval, atomically.
	// What is spent is not read before the gate: the consumption is the
	// authority, and asking it alone keeps a run on a shared store to
	// three requests (plan, evidence, consume; SPEC §15). The gate first
	// counts nothing as spent; an anchor the store finds spent is counted
	// so and the gate asked again, so the run relies on the next unspent
	// approval if there is one, and is otherwise refused as the gate
	// refuses any spent approval (docs/adr/0015-idempotent-consumption.md).
	// The precondition check runs again before anything is consumed; the
	// gate judges what it saw (issue 22, precondition.go). Not before the
	// gate has judged everything else: a plan nobody approved (or one
	// vetoed, withdrawn, frozen) must not make the service run its check.
	if pc.plan.Precondition != nil {
		if err := pc.gateBeforeCheck(f); err != nil {
			return err
		}
	}
	pre, err := pc.precondition(f)
	if err != nil {
		return err
	}
	evidence, problems, err := pc.store.Evidence(pc.plan.Fingerprint)
	if err != nil {
		return fmt.Errorf("reading evidence: %w", err)
	}
	// The run id is written into the consumption, so that a retried write
	// whose reply was lost finds its own use rather than spending another.
	runID := newRunID()
	// The break-glass history of whoever broke glass on this plan (issue
	// 22, breakglass.go); unreadable parts refuse like unreadable evidence.
	hist, histProblems, err := breakGlassHistory(pc.store, pc.policy, pc.plan.Fingerprint, evidence)
	if err != nil {
		return err
	}
	unreadable := append(problemStrings(problems), histProblems...)
	used := map[string]int{}
	var dec *approval.Decision
	slot, lost := 0, false
	for {
		dec, err = approval.Evaluate(approval.Input{Plan: pc.env, Evidence: evidence, Precondition: pre, Unreadable: unreadable, Policy: pc.policy, Op: pc.op, Now: f.Now(), Used: used, BreakGlass: hist})
		if r, ok := refusal.As(err); ok && lost && r.Code == refusal.EvidenceConsumed {
			r.Reason = "the approval this run relies on was consumed by another run: " + r.Reason
			return r
		}
		if err != nil {
			return err
		}
		if dec.Anchor == "" {
			break
		}
		slot, err = pc.store.Consume(dec.Anchor, dec.AnchorUses, runID)
		if errors.Is(err, store.ErrConsumed) {
			used[dec.Anchor], lost = dec.AnchorUses, true
			continue
		}
		if err != nil {
			return fmt.Errorf("consuming approval: %w", err)
		}
		break
	}
	// A break-glass run also spends its link: the record first, so that a
	// crash between the two leaves a record spent (to review) rather than
	// a breaker who can never break glass again (ADR 0028).
	if dec.Path == operations.PathBreakGlass {
		if err := consumeBreakGlassLink(pc, dec, runID); err != nil {
			return err
		}
	}
	failpoint.Hit("after-consume")

	// 5. The intent receipt, durable before anything executes.
	j := &receipts.Journal{Path: pc.cfg.JournalPath(), Key: rk, Runner: rp.ID, Host: journalHost(pc.cfg.Host), Now: f.Now, Sync: f.JournalSync}
	intent := pc.intent(f, dec, evidence, slot)
	intent.Precondition = pre
	if dec.Path == operations.PathBreakGlass {
		intent.BreakGlass = breakGlassSeen(dec, hist, pc.policy)
	}
	intent = dl.stamp(intent)
	in, err := j.Append(&receipts.Receipt{Kind: receipts.KindIntent, RunID: runID, Intent: intent})
	if err != nil {
		return fmt.Errorf("writing intent receipt (nothing ran): %w", err)
	}
	dl.allowed(dec, runID, in.Seq)
	failpoint.Hit("after-intent")
	if dec.Path == operations.PathBreakGlass {
		warnUnnotified(f, pc, dec, runID)
	}

	// 6. Execute: the snapshots, the planned argv, no shell.
	spec := execute.Spec{
		Program:    snaps.program,
		Argv:       pc.execArgv(snaps),
		Env:        env,
		Dir:        pc.plan.Cwd,
		Stdin:      f.IO.In,
		Stdout:     f.IO.Out,
		Stderr:     f.IO.Err,
		Started:    func(int) { failpoint.Hit("after-start") },
		Credential: cred,
	}
	if f.call != nil {
		f.call.prepare(&spec, pc)
	}
	for _, fl := range pc.plan.Files {
		spec.Files = append(spec.Files, snaps.files[fl.Name])
	}
	if pc.op.Timeout != nil {
		spec.Timeout = pc.op.Timeout.Duration
	}
	if f.call != nil {
		// The client's ^C and kill, relayed as requests; the service's
		// own signals are its own.
		if f.call.c != nil {
			spec.Signals = f.call.c.Signals()
		}
	} else {
		sigs := make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		defer signal.Stop(sigs)
		spec.Signals = sigs
	}
	res, runErr := execute.Run(spec)
	failpoint.Hit("after-exit")

	// 7. The outcome receipt.
	out := &receipts.Outcome{Intent: in.Hash}
	if runErr != nil {
		out.ExitCode, out.Error = ExitSoftware, runErr.Error()
	} else {
		out.ExitCode, out.Signal, out.TimedOut, out.Duration, out.Error = res.ExitCode, res.Signal, res.TimedOut, res.Duration, res.Error
		out.Stdout = receipts.Stream(res.Stdout)
		out.Stderr = receipts.Stream(res.Stderr)
	}
	done, err := j.Append(&receipts.Receipt{Kind: receipts.KindOutcome, RunID: runID, Outcome: out})
	if err != nil {
		return fmt.Errorf("writing outcome receipt (the program ran; its intent is receipt %d): %w", in.Seq, err)
	}
	if f.ranCheck != nil {
		f.ranCheck(runID, out)
	}
	// Best effort: the journal holds both receipts durably already; an
	// archive that cannot be reached only costs a warning (receipts sync).
	shipReceipts(f, pc.cfg, in, done)
	if runErr != nil {
		return fmt.Errorf("executing %s: %w", pc.op.ProgramPath, runErr)
	}
	switch {
	case f.JSON:
		printRan(f.IO.Err, pc.plan.Operation, pc.plan.Fingerprint, res.ExitCode, in.Seq, done.Seq)
	case res.TimedOut:
		// Always said: the program's own output may end mid-line.
		fmt.Fprintf(f.IO.Err, "prod-write: %s timed out after %s and was killed (exit %d); receipts %d and %d\n",
			pc.plan.Operation, pc.op.Timeout.Duration, res.ExitCode, in.Seq, done.Seq)
	case f.IO.ErrTTY:
		// For a person at a terminal; scripts read the exit status.
		fmt.Fprintf(f.IO.Err, "prod-write: ran %s %.19s… (exit %d); receipts %d and %d\n",
			pc.plan.Operation, pc.plan.Fingerprint, res.ExitCode, in.Seq, done.Seq)
	}
	if res.ExitCode != 0 {
		return &ExitError{Code: res.ExitCode}
	}
	return nil
}

// childEnv builds the program's whole environment from the plan: values as
// bound, secrets read now by name. Nothing else is inherited.
func (pc *planContext) childEnv(f *Factory) ([]string, error) {
	env := []string{}
	for _, e := range pc.plan.Env {
		switch e.Kind {
		case operations.EnvValue:
			env = append(env, e.Name+"="+e.Value)
		case operations.EnvSecret:
			if f.call != nil {
				v, err := f.call.svc.secret(e.Name)
				if err != nil {
					return nil, pc.refuse(refusal.ParamInvalid, "secret %s cannot be read from the service's credentials: %v", e.Name, err).Needs("credential " + e.Name + " in the service's credentials directory")
				}
				env = append(env, e.Name+"="+v)
				continue
			}
			v, ok := f.LookupEnv(e.Name)
			if !ok {
				return nil, pc.refuse(refusal.ParamInvalid, "secret %s is not set in run's environment", e.Name).Needs("environment variable " + e.Name)
			}
			env = append(env, e.Name+"="+v)
		}
	}
	return env, nil
}

// execArgv is the argv the program gets: the operation's template expanded
// with the plan's params, each file placeholder replaced by the path of its
// snapshot.
func (pc *planContext) execArgv(snaps *snapshotDigester) []string {
	index := map[string]int{}
	for i, fl := range pc.plan.Files {
		index[fl.Name] = i
	}
	return pc.op.Argv(pc.plan.Target, pc.plan.Params, func(name string) string { return execute.FilePath(index[name]) })
}

func (pc *planContext) intent(f *Factory, dec *approval.Decision, evidence []*approval.Envelope, slot int) *receipts.Intent {
	in := &receipts.Intent{
		Fingerprint:  pc.plan.Fingerprint,
		Operation:    pc.op,
		Plan:         pc.env,
		Path:         dec.Path,
		Anchor:       dec.Anchor,
		Slot:         slot,
		PolicyDigest: pc.policy.Digest,
		Signers:      map[string]string{},
		Invoker:      invoker(f, pc.policy),
	}
	relied := map[string]bool{}
	for _, s := range dec.Relied {
		in.Relied = append(in.Relied, s.ID)
		relied[s.ID] = true
	}
	// The freeze grants that let it through a freeze are kept too; they
	// are not consumed, so they are not among the relied-on records.
	keep := map[string]bool{}
	for _, s := range dec.Granted {
		keep[s.ID] = true
	}
	// Keep what the gate relied on, and every veto or withdrawal it saw, so
	// replay judges the run by the same evidence.
	for _, a := range dec.Evidence {
		if a.Signed == nil {
			continue
		}
		if relied[a.ID] || keep[a.ID] || a.Verdict == approval.NoGo || a.Verdict == approval.Deny || a.Kind == approval.KindWithdrawal {
			in.Evidence = append(in.Evidence, a.Signed.Env)
			in.Signers[a.Signer] = a.Signed.Signer.Public().String()
		}
	}
	if pr, ok := pc.policy.ByID(pc.plan.Planner); ok {
		in.Signers[pr.ID] = pr.Public().String()
	}
	return in
}

// invoker is who asked for the run: the account (in the service, the
// kernel's SO_PEERCRED, not anything the client says) and the principal of
// the key it presented, if any.
func invoker(f *Factory, p *approval.Policy) receipts.Invoker {
	inv := receipts.Invoker{UID: os.Getuid()}
	if f.call != nil {
		inv.UID = -1 // MCP over HTTP: a token, no account
		if f.call.c != nil {
			inv.UID = int(f.call.c.Peer.UID)
		}
	}
	if f.hasKey() {
		if k, _, err := f.loadKey(); err == nil {
			if pr, ok := p.ByKey(k.Public().ID()); ok {
				inv.Principal = pr.ID
			}
		}
	}
	return inv
}

func newRunID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
