package runner

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/execute"
	"github.com/prod-write/prod-write/pkg/failpoint"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/receipts"
)

// ExitSoftware is the outcome's exit code when the program could not be
// executed (sysexits' EX_SOFTWARE, as the CLI's internal error).
const ExitSoftware = 70

// Ran is what a run did: the program ran and both its receipts are
// durable, whatever its exit status.
type Ran struct {
	Plan  *PlanContext
	RunID string
	// Intent and Done are the intent and outcome receipts' places in the
	// journal.
	Intent, Done receipts.Appended
	Outcome      *receipts.Outcome
	Result       *execute.Result
}

// snapshotDigester hashes what will run: each file and the program are
// copied into sealed memory, hashed on the way, and those copies are what
// the program gets (docs/DESIGN.md §6).
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
	if kind == "interpreter" {
		// Opened by path by the kernel, never snapshotted: hashed where
		// it is, so that the plan's hash of it is checked again.
		return operations.HashDigester{}.Digest(kind, name, path, max)
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

// Interpreter reads the "#!" line of the program's snapshot: of the very
// bytes that were hashed and will run.
func (s *snapshotDigester) Interpreter(programPath string) (string, error) {
	if s.program == nil {
		return operations.ReadInterpreter(programPath)
	}
	head := make([]byte, 256)
	n, err := s.program.File.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return operations.ParseShebang(head[:n])
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

// Run runs the plan stored under fp in the order of docs/DESIGN.md §6. It returns
// what ran once the outcome receipt is durable, whatever the program's
// exit status; an error means a refusal (nothing ran), a failure before
// the program started, or one after it (the error says which receipts it
// left).
func (r *Runner) Run(fp string) (ran *Ran, err error) {
	// Every attempt, allowed or refused, is a line of the decision log
	// (docs/DECISIONS.md); its id is the intent receipt's decision_id.
	dl, err := r.startDecision(fp)
	if err != nil {
		return nil, err
	}
	defer func() { dl.Finish(err) }()
	// 1. Load the plan.
	pc, err := r.Load(fp)
	if err != nil {
		return nil, err
	}
	dl.Loaded(pc)
	identity := r.Identity
	if identity == nil {
		identity = LoadIdentity
	}
	rk, rp, err := identity(pc.Config, pc.Policy)
	if err != nil {
		return nil, err
	}
	// Who the program runs as and its secrets: settled before anything is
	// consumed, so a run that cannot start spends nothing.
	var cred *syscall.Credential
	if r.Credential != nil {
		if cred, err = r.Credential(pc); err != nil {
			return nil, err
		}
	}
	env, err := pc.childEnv(r)
	if err != nil {
		return nil, err
	}
	// 2. Recompute the fingerprint from reality, snapshotting what will run.
	snaps := &snapshotDigester{files: map[string]*execute.Snapshot{}, cache: r.Snapshots, progress: r.Progress}
	defer snaps.Close()
	if err := pc.Reality(r, snaps); err != nil {
		return nil, err
	}
	// 3. The gate, and 4. the consumption of the approval, atomically.
	// What is spent is not read before the gate: the consumption is the
	// authority, and asking it alone keeps a run on a shared store to
	// three requests (plan, evidence, consume; docs/DESIGN.md §15). The gate first
	// counts nothing as spent; an anchor the store finds spent is counted
	// so and the gate asked again, so the run relies on the next unspent
	// approval if there is one, and is otherwise refused as the gate
	// refuses any spent approval (docs/adr/0015-idempotent-consumption.md).
	// The precondition check runs again before anything is consumed; the
	// gate judges what it saw (precondition.go). Not before the
	// gate has judged everything else: a plan nobody approved (or one
	// vetoed, withdrawn, frozen) must not make the service run its check.
	if pc.Plan.Precondition != nil {
		if err := pc.gateBeforeCheck(r); err != nil {
			return nil, err
		}
	}
	pre, err := pc.precondition(r)
	if err != nil {
		return nil, err
	}
	evidence, problems, err := pc.Store.Evidence(pc.Plan.Fingerprint)
	if err != nil {
		return nil, fmt.Errorf("reading evidence: %w", err)
	}
	// The run id is written into the consumption, so that a retried write
	// whose reply was lost finds its own use rather than spending another.
	runID := receipts.NewRunID(r.Now())
	// The break-glass history of whoever broke glass on this plan
	// (breakglass.go); unreadable parts refuse like unreadable evidence.
	hist, histProblems, err := BreakGlassHistory(pc.Store, pc.Policy, pc.Plan.Fingerprint, evidence)
	if err != nil {
		return nil, err
	}
	unreadable := append(ProblemStrings(problems), histProblems...)
	used := map[string]int{}
	// The stored sign count of each passkey credential: an assertion not
	// above its credential's is refused (ADR 0043).
	counts, err := pc.SignCounts()
	if err != nil {
		return nil, err
	}
	var dec *approval.Decision
	slot, lost, logReady := 0, false, false
	for {
		dec, err = approval.Evaluate(approval.Input{Plan: pc.Envelope, Evidence: evidence, Precondition: pre, Unreadable: unreadable, Policy: pc.Policy, Op: pc.Op, Now: r.Now(), Used: used, BreakGlass: hist, SignCounts: counts})
		if rf, ok := refusal.As(err); ok && lost && rf.Code == refusal.EvidenceConsumed {
			rf.Reason = "the approval this run relies on was consumed by another run: " + rf.Reason
			return nil, rf
		}
		if err != nil {
			return nil, err
		}
		// The gate said yes. Nothing is spent for a run whose allowed
		// line the decision log cannot take (ADR 0037).
		if !logReady {
			if err := dl.Ready(); err != nil {
				return nil, err
			}
			// Nothing is spent for a run whose receipts the journal's
			// disk has no room for.
			if err := r.roomFor(pc, evidence); err != nil {
				return nil, err
			}
			logReady = true
		}
		if dec.Anchor == "" {
			break
		}
		slot, err = pc.Store.Consume(dec.Anchor, dec.AnchorUses, runID)
		if errors.Is(err, store.ErrConsumed) {
			used[dec.Anchor], lost = dec.AnchorUses, true
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("consuming approval: %w", err)
		}
		break
	}
	// A break-glass run also spends its link: the record first, so that a
	// crash between the two leaves a record spent (to review) rather than
	// a breaker who can never break glass again (ADR 0028).
	if dec.Path == operations.PathBreakGlass {
		if err := consumeBreakGlassLink(pc, dec, runID); err != nil {
			return nil, err
		}
	}
	// A passkey approval spent also advances its credential's sign count,
	// by the store's conditional write: of two runs racing on one
	// credential the loser refuses here, before its intent. The lock per
	// credential is held until the intent is appended, so the journal's
	// order is the advances' order (replay checks it).
	unlockCounts, err := advanceSignCounts(pc, dec, runID)
	if err != nil {
		return nil, err
	}
	failpoint.Hit("after-consume")

	// 5. The intent receipt, durable before anything executes.
	j := &receipts.Journal{Path: pc.Config.JournalPath(), Key: rk, Runner: rp.ID, Host: JournalHost(pc.Config.Host), Now: r.Now, Sync: r.JournalSync}
	intent := pc.intent(r, dec, evidence, slot)
	intent.Precondition = pre
	if dec.Path == operations.PathBreakGlass {
		intent.BreakGlass = breakGlassSeen(dec, hist, pc.Policy)
	}
	intent = dl.Stamp(intent)
	in, err := j.Append(&receipts.Receipt{Kind: receipts.KindIntent, RunID: runID, Intent: intent})
	unlockCounts()
	if err != nil {
		return nil, fmt.Errorf("writing intent receipt (nothing ran): %w", err)
	}
	if err := dl.Allowed(dec, runID, in.Seq); err != nil {
		// A program never runs without its allowed line (ADR 0037).
		return nil, r.notStarted(j, pc, in, runID, err)
	}
	failpoint.Hit("after-intent")
	if dec.Path == operations.PathBreakGlass && r.WarnUnnotified != nil {
		r.WarnUnnotified(pc, dec, runID)
	}

	// 6. Execute: the snapshots, the planned argv, no shell.
	spec := execute.Spec{
		Program:    snaps.program,
		Argv:       pc.execArgv(snaps),
		Env:        env,
		Dir:        pc.Plan.Cwd,
		Stdin:      r.Stdin,
		Stdout:     r.Stdout,
		Stderr:     r.Stderr,
		Started:    func(int) { failpoint.Hit("after-start") },
		Credential: cred,
	}
	// A program only root can change runs by its path, as its author
	// expects, when it is still the very file that was hashed; any other
	// runs from its snapshot (docs/adr/0060-programs-run-by-their-path.md).
	spec.Path = execute.ByPath(snaps.program, spec.Argv[0])
	if r.Prepare != nil {
		r.Prepare(&spec, pc)
	}
	for _, fl := range pc.Plan.Files {
		spec.Files = append(spec.Files, snaps.files[fl.Name])
	}
	if pc.Op.Timeout != nil {
		spec.Timeout = pc.Op.Timeout.Duration
	}
	if r.Signals != nil {
		// The client's ^C and kill, relayed as requests; the service's
		// own signals are its own.
		spec.Signals = r.Signals()
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
	if r.FinishOutput != nil {
		// Bounded: the receipt waits a fixed grace at most for a client
		// that reads slowly, and none for one that stopped.
		out.Undelivered = r.FinishOutput()
	}
	if runErr != nil {
		out.ExitCode, out.Error = ExitSoftware, runErr.Error()
	} else {
		out.ExitCode, out.Signal, out.TimedOut, out.Duration, out.Error = res.ExitCode, res.Signal, res.TimedOut, res.Duration, res.Error
		out.Stdout = receipts.Stream(res.Stdout)
		out.Stderr = receipts.Stream(res.Stderr)
	}
	done, err := j.Append(&receipts.Receipt{Kind: receipts.KindOutcome, RunID: runID, Outcome: out})
	if err != nil {
		return nil, fmt.Errorf("writing outcome receipt (the program ran; its intent is receipt %d): %w", in.Seq, err)
	}
	// Best effort: the journal holds both receipts durably already; an
	// archive that cannot be reached only costs a warning (receipts sync).
	if r.Ship != nil {
		r.Ship(pc.Config, in, done)
	}
	if runErr != nil {
		return nil, fmt.Errorf("executing %s: %w", pc.Op.ProgramPath, runErr)
	}
	return &Ran{Plan: pc, RunID: runID, Intent: in, Done: done, Outcome: out, Result: res}, nil
}

// notStarted ends a run whose intent is durable but whose program will
// not start, for cause: an outcome receipt says so (exit 70, "not
// started: " and the cause), so the journal shows a run that never
// started rather than one that may have crashed. The approval's use stays
// spent (ADR 0006), and the error says so.
func (r *Runner) notStarted(j *receipts.Journal, pc *PlanContext, in receipts.Appended, runID string, cause error) error {
	out := &receipts.Outcome{Intent: in.Hash, ExitCode: ExitSoftware, Error: "not started: " + cause.Error()}
	done, err := j.Append(&receipts.Receipt{Kind: receipts.KindOutcome, RunID: runID, Outcome: out})
	if err != nil {
		return fmt.Errorf("%w; the program was not started, but its outcome receipt could not be written (its intent is receipt %d): %v", cause, in.Seq, err)
	}
	if r.Ship != nil {
		r.Ship(pc.Config, in, done)
	}
	return fmt.Errorf("%w; the program was not started (receipts %d and %d say so; the approval's use is spent)", cause, in.Seq, done.Seq)
}

// roomFor refuses, before anything is spent, a run whose receipts the
// journal's file system has no room for: its intent carries the plan and
// the evidence, each base64 once more in the receipt's envelope, and its
// outcome is small; need is four times their payloads, plus 1 MiB for the
// rest and a margin. Consumption comes before the intent
// (docs/adr/0006-consumption.md), so without this a full disk would spend
// a single-use approval on a run that never starts. A disk that fills
// between this check and the append still refuses the run before anything
// executes, with the approval spent.
func (r *Runner) roomFor(pc *PlanContext, evidence []*approval.Envelope) error {
	need := int64(len(pc.Envelope.Payload)) + 1<<20
	for _, e := range evidence {
		need += int64(len(e.Payload))
	}
	need *= 4
	dir := filepath.Dir(pc.Config.JournalPath())
	room := r.JournalRoom
	if room == nil {
		room = freeBytes
	}
	free, err := room(dir)
	if err != nil {
		return nil // cannot tell: the append decides
	}
	if free < need {
		return fmt.Errorf("the journal's file system has %d bytes free, under the %d a run's receipts need: nothing was spent, nothing ran; make room and run again: %w", free, need, &fs.PathError{Op: "write", Path: dir, Err: syscall.ENOSPC})
	}
	return nil
}

// freeBytes is how many bytes of dir's file system this process may write.
func freeBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// Runnable makes the checks run makes before anything is spent that do
// not depend on the moment or on the caller who runs: the account the
// program runs as (the service's run_as rules; the working directory is
// the running caller's, so not here) and each secret readable from the
// service's own sources. status makes them, so that it never says a run would proceed
// that run would refuse, and so does file, before a decision is posted.
// In local mode secrets come from run's own environment, which is not
// known before the run, so they are not checked here.
func (pc *PlanContext) Runnable(r *Runner) error {
	if r.Account != nil {
		if _, err := r.Account(pc); err != nil {
			return err
		}
	}
	if r.SecretReadable == nil {
		return nil
	}
	for _, e := range pc.Plan.Env {
		if e.Kind != operations.EnvSecret {
			continue
		}
		if err := r.SecretReadable(e.Name); err != nil {
			return pc.secretUnreadable(e.Name, err)
		}
	}
	return nil
}

func (pc *PlanContext) secretUnreadable(name string, err error) error {
	return pc.Refuse(refusal.ParamInvalid, "secret %s cannot be read from the service's credentials: %v", name, err).Needs("credential " + name + " in the service's credentials directory")
}

// childEnv builds the program's whole environment from the plan: values as
// bound, secrets read now by name. Nothing else is inherited.
func (pc *PlanContext) childEnv(r *Runner) ([]string, error) {
	env := []string{}
	for _, e := range pc.Plan.Env {
		switch e.Kind {
		case operations.EnvValue:
			env = append(env, e.Name+"="+e.Value)
		case operations.EnvSecret:
			if r.Secret != nil {
				v, err := r.Secret(e.Name)
				if err != nil {
					return nil, pc.secretUnreadable(e.Name, err)
				}
				env = append(env, e.Name+"="+v)
				continue
			}
			v, ok := r.LookupEnv(e.Name)
			if !ok {
				return nil, pc.Refuse(refusal.ParamInvalid, "secret %s is not set in run's environment", e.Name).Needs("environment variable " + e.Name)
			}
			env = append(env, e.Name+"="+v)
		}
	}
	return env, nil
}

// execArgv is the argv the program gets: the operation's template expanded
// with the plan's params, each file placeholder replaced by the path of its
// snapshot.
func (pc *PlanContext) execArgv(snaps *snapshotDigester) []string {
	index := map[string]int{}
	for i, fl := range pc.Plan.Files {
		index[fl.Name] = i
	}
	return pc.Op.Argv(pc.Plan.Target, pc.Plan.Params, func(name string) string { return execute.FilePath(index[name]) })
}

func (pc *PlanContext) intent(r *Runner, dec *approval.Decision, evidence []*approval.Envelope, slot int) *receipts.Intent {
	in := &receipts.Intent{
		Fingerprint:  pc.Plan.Fingerprint,
		Operation:    pc.Op,
		Plan:         pc.Envelope,
		Path:         dec.Path,
		Anchor:       dec.Anchor,
		Slot:         slot,
		PolicyDigest: pc.Policy.Digest,
		Signers:      map[string]string{},
		Invoker:      r.invoker(pc.Policy),
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
	if pr, ok := pc.Policy.ByID(pc.Plan.Planner); ok {
		in.Signers[pr.ID] = pr.Public().String()
	}
	return in
}

// invoker is who asked for the run (docs/FORMAT.md, the intent's
// invoker): as r.Invoker says, else this process's account.
func (r *Runner) invoker(p *approval.Policy) receipts.Invoker {
	if r.Invoker != nil {
		return r.Invoker(p)
	}
	return receipts.Invoker{UID: os.Getuid()}
}
