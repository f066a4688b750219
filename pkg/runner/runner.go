// Package runner holds the run order of an approved plan (docs/DESIGN.md §6) and the
// plan context it needs: the configuration, trust policy, store, registry
// and the plan as stored, and reality recomputed from the files as they are
// now.
//
// It knows no command line, no command factory and no terminal (docs/DESIGN.md §14):
// the CLI in local mode, the runner service and the tests each build a
// [Runner] of what they have (a clock, loaders, the caller's stdio and
// files, the service's credential and secret hooks) and call [Runner.Run]
// or [Runner.Load]. What a run did comes back as a [Ran] or an error;
// printing it is the caller's (docs/adr/0034-run-order-package.md).
//
// # The order
//
// [Runner.Run] does, in this order: load the plan; settle the account the
// program runs as and its secrets; recompute the fingerprint from reality,
// snapshotting what will run; the gate (after the precondition check runs
// again, for a plan that binds one); consume the approval atomically; write
// and fsync the intent receipt; execute the snapshots; write the outcome
// receipt.
package runner

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/execute"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/receipts"
)

// Runner is what the run order and the plan context depend on. The CLI
// builds one from its factory, the service from a call; a nil hook is
// documented at its field.
type Runner struct {
	Now func() time.Time

	// Config, Registry, Policy and Store load what the plan is judged by
	// (in the service: what it loaded and keeps warm). What they warn of
	// is their own to tell (localapi.Env.Warn), never the program's stderr.
	Config   func() (*config.Config, error)
	Registry func(c *config.Config) (*operations.Registry, error)
	Policy   func(*config.Config) (*approval.Policy, error)
	Store    func(*config.Config) (store.Store, error)
	// PolicyShared says the policy is shared by concurrent calls and
	// caches verifications already (the service): Load leaves it be.
	PolicyShared bool
	// ResolveFingerprint turns what the caller typed (a unique prefix) into
	// a whole fingerprint; nil takes it as given.
	ResolveFingerprint func(*config.Config, string) (string, error)
	// Identity is this host's signing identity for receipts; nil loads the
	// configured runner key ([LoadIdentity]).
	Identity func(*config.Config, *approval.Policy) (*keys.Private, *approval.Principal, error)

	// PassEnv reads the caller's value of a variable an operation passes
	// by value; ResolveDir resolves a working directory as the caller sees
	// it (nil: [operations.ResolveDir]).
	PassEnv    func(string) (string, bool)
	ResolveDir func(string) (string, error)
	// CallerCwd, when set, is the working directory the caller handed over
	// (the service): reality is resolved from it, not from the directory
	// the plan names, and the fingerprint says whether they are the same.
	CallerCwd func() (string, error)
	// OpenFile opens a file parameter as the caller has it (the service:
	// the descriptor the client handed over); nil opens it by path.
	OpenFile func(name, path string) (*os.File, error)
	// Inline, when set (the service), opens file parameter name of a plan
	// that binds it as supplied inline (MCP over HTTP) with sum: the
	// content the call supplied, or else the content kept with the plan
	// (sum "" at plan time, when only the call's will do). close says the
	// caller closes it (docs/adr/0063-file-content-kept-with-the-plan.md).
	Inline func(name, sum string) (fl *os.File, close bool, err error)

	// LookupEnv reads a secret from run's environment (local mode).
	LookupEnv func(string) (string, bool)
	// Secret, when set, reads a secret from the service's own sources
	// instead; a caller's environment is never read then.
	Secret func(name string) (string, error)
	// SecretReadable, when set, says whether Secret would read name,
	// reading no value (status and file, PlanContext.Runnable).
	SecretReadable func(name string) error
	// Credential, when set, is the account the program runs as (the
	// service: the operation's run_as), settled before anything is
	// consumed.
	Credential func(*PlanContext) (*syscall.Credential, error)
	// Account, when set, is Credential without what depends on the caller
	// who runs (the working directory it hands over): what status and
	// file check before a run (PlanContext.Runnable).
	Account func(*PlanContext) (*syscall.Credential, error)
	// Prepare, when set, adjusts the execution the service decides (its
	// fork, the directory entered through a descriptor).
	Prepare func(*execute.Spec, *PlanContext)
	// Snapshots, when set, keeps programs' sealed snapshots between runs.
	Snapshots *execute.SnapshotCache
	// Signals, when set, gives the signals relayed to the program (the
	// service: the client's, as requests); nil forwards this process's own
	// SIGINT and SIGTERM.
	Signals func() <-chan os.Signal
	// FinishOutput, when set, is called once the program has ended and
	// before its outcome receipt is written: it ends the relay of the
	// program's output to a client (the service), waiting a bounded grace
	// at most, and returns how many bytes the client was never given.
	FinishOutput func() int64

	// Stdin, Stdout and Stderr are the program's; Stderr also carries a
	// precondition's drift. Progress, when set, hears the hashing of large files.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Progress       func(name string, done, total int64)

	// JournalSync, if set, replaces the journal's fsync (tests).
	JournalSync func(*os.File) error
	// JournalRoom, if set, replaces how many bytes the journal's file
	// system has free for this process (tests: a disk that is full).
	JournalRoom func(dir string) (int64, error)
	// Invoker names who asked for the run, for the intent; nil is this
	// process's account and no principal.
	Invoker func(*approval.Policy) receipts.Invoker
	// StartDecision begins the decision log's record of an attempt
	// (docs/DECISIONS.md); nil keeps none.
	StartDecision func(asked string) (DecisionLog, error)
	// Ship archives a run's receipts, best effort, warning when it cannot;
	// nil ships nothing.
	Ship func(c *config.Config, entries ...receipts.Appended)
	// WarnUnnotified, when set, is told of a break-glass run whose intent
	// is durable, to warn when no bridge announced it.
	WarnUnnotified func(pc *PlanContext, dec *approval.Decision, runID string)
}

// DecisionLog hears one run attempt: the plan once loaded, the intent of
// an allowed run, and how the attempt ended. A run whose allowed line
// cannot be written does not start
// (docs/adr/0037-a-decision-log-that-never-drops-a-line.md).
type DecisionLog interface {
	Loaded(*PlanContext)
	// Ready is asked once the gate allows the run, before anything is
	// spent: an error (the log cannot take a line) stops the run there.
	Ready() error
	// Stamp gives the intent its decision id.
	Stamp(*receipts.Intent) *receipts.Intent
	// Allowed writes the allowed line once the intent receipt is
	// durable: an error stops the run before the program starts.
	Allowed(dec *approval.Decision, runID string, seq uint64) error
	// Finish is said when the attempt returns; err is nil for a run.
	Finish(err error)
}

type noDecisionLog struct{}

func (noDecisionLog) Loaded(*PlanContext)                              {}
func (noDecisionLog) Ready() error                                     { return nil }
func (noDecisionLog) Stamp(in *receipts.Intent) *receipts.Intent       { return in }
func (noDecisionLog) Allowed(*approval.Decision, string, uint64) error { return nil }
func (noDecisionLog) Finish(error)                                     {}

func (r *Runner) startDecision(asked string) (DecisionLog, error) {
	if r.StartDecision == nil {
		return noDecisionLog{}, nil
	}
	return r.StartDecision(asked)
}

// PlanContext is what every command acting on a stored plan needs.
type PlanContext struct {
	Config   *config.Config
	Registry *operations.Registry
	Policy   *approval.Policy
	Store    store.Store
	Envelope *approval.Envelope
	Plan     *operations.Plan
	Op       *operations.Operation
}

// Load reads the configuration, registry, policy and store, and the plan
// stored under fp (or the prefix of one, when ResolveFingerprint allows).
func (r *Runner) Load(fp string) (*PlanContext, error) {
	pc := &PlanContext{}
	var err error
	if pc.Config, err = r.Config(); err != nil {
		return nil, err
	}
	if r.ResolveFingerprint != nil {
		if fp, err = r.ResolveFingerprint(pc.Config, fp); err != nil {
			return nil, err
		}
	}
	// Parsing the registry is the largest part of loading; it reads files
	// and nothing else, so it runs on another core while the policy and
	// the plan are read. Errors are still reported in the order of the
	// steps: registry, policy, pins, then the plan.
	type loaded struct {
		reg *operations.Registry
		err error
	}
	regC := make(chan loaded, 1)
	go func() {
		reg, err := r.Registry(pc.Config)
		regC <- loaded{reg, err}
	}()
	var planErr error
	pc.Policy, err = r.Policy(pc.Config)
	if err == nil {
		planErr = pc.readPlan(r, fp)
	}
	l := <-regC
	if l.err != nil {
		return nil, l.err
	}
	if err != nil {
		return nil, err
	}
	pc.Registry = l.reg
	if err := CheckPins(pc.Config, pc.Policy, pc.Registry); err != nil {
		return nil, err
	}
	if planErr != nil {
		return nil, planErr
	}
	op, ok := pc.Registry.Get(pc.Plan.Operation)
	if !ok {
		return nil, refusal.New(refusal.OperationAbsent, "operation %q is no longer in the registry", pc.Plan.Operation).For(pc.Plan.Operation, fp)
	}
	pc.Op = op
	return pc, nil
}

// readPlan opens the store and reads, verifies and decodes the plan stored
// under fp.
func (pc *PlanContext) readPlan(r *Runner, fp string) error {
	var err error
	if pc.Store, err = r.Store(pc.Config); err != nil {
		return err
	}
	pc.Envelope, err = pc.Store.GetPlan(fp)
	if errors.Is(err, store.ErrNotFound) {
		return refusal.New(refusal.PlanAbsent, "no plan with this fingerprint is stored").For("", fp).Needs("a signed plan (prod-write plan --key …)")
	}
	if err != nil {
		return err
	}
	// The gate opens the plan again; remember the signature verified here
	// rather than verify it twice. (The service's policy is shared by its
	// calls and caches from the start.)
	if !r.PolicyShared {
		pc.Policy.CacheVerifications()
	}
	if pc.Plan, _, err = pc.Policy.DecodePlan(pc.Envelope); err != nil {
		if rf, ok := refusal.As(err); ok {
			rf.For("", fp)
		}
		return err
	}
	if pc.Plan.Fingerprint != fp {
		return refusal.New(refusal.FingerprintMismatch, "the plan stored under this fingerprint is for %s", pc.Plan.Fingerprint).For(pc.Plan.Operation, fp)
	}
	return nil
}

// CheckPins refuses to act on a trust policy or registry other than the
// ones prod-write.toml pins (docs/DESIGN.md §13): a change that edits them cannot
// also be judged by them.
func CheckPins(c *config.Config, p *approval.Policy, reg *operations.Registry) error {
	if c.Pin.Trust != "" && c.Pin.Trust != p.Digest {
		return refusal.New(refusal.PolicyPinMismatch, "the trust policy %s has digest %s, but prod-write.toml pins %s", c.Trust, p.Digest, c.Pin.Trust).Needs("the pinned trust policy")
	}
	if c.Pin.Registry != "" && c.Pin.Registry != reg.Digest {
		return refusal.New(refusal.PolicyPinMismatch, "the registry %s has digest %s, but prod-write.toml pins %s", c.Registry, reg.Digest, c.Pin.Registry).Needs("the pinned registry")
	}
	return nil
}

// NoRunAs makes each mutating operation of reg that names no run_as
// unavailable, saying where it is declared: under the runner service it
// has no account to run as, so it is refused when it is planned, before
// anyone is asked to approve it, not when it is run (docs/DEPLOYMENT.md).
// It returns what it made unavailable, for the service's log.
func NoRunAs(reg *operations.Registry) []string {
	var out []string
	for _, op := range reg.All() {
		if !op.IsMutating() || op.RunAs != "" || op.Unavailable != "" {
			continue
		}
		op.Unavailable = fmt.Sprintf("%s: mutating operation %s declares no run_as: under the runner service it has no account of its own to run as, so it can never run; add run_as = \"ACCOUNT\" (docs/DEPLOYMENT.md)", op.Source, op.Name)
		out = append(out, op.Unavailable)
	}
	return out
}

// CheckHistory refuses a trust policy or registry that the history beside
// the trust policy does not have in force now (docs/DEPLOYMENT.md,
// "Changing the policy"): a runner service that loaded it would make runs
// that replay later fails. Without a history (no history/versions.toml)
// it refuses nothing and says why in warning: then replay has nothing but
// the current versions to judge by, unless CI replays against the git
// branch the policy is deployed from (docs/CI.md).
func CheckHistory(c *config.Config, p *approval.Policy, reg *operations.Registry, now time.Time) (warning string, err error) {
	dir := c.HistoryDir()
	err = receipts.CheckInForce(dir, p.Digest, reg.All(), now)
	if errors.Is(err, receipts.ErrNoHistory) {
		return fmt.Sprintf("no %s: after a change to the trust policy or the registry, replay of this host's journal will fail every earlier run, unless CI replays it against the git branch they are deployed from; start one with `prod-write history record` (docs/DEPLOYMENT.md)", filepath.Join(dir, receipts.VersionsFile)), nil
	}
	if err != nil {
		return "", &config.Error{Path: c.Trust, Msg: "not loaded", Err: err}
	}
	return "", nil
}

// Refuse is a refusal about pc's plan.
func (pc *PlanContext) Refuse(code refusal.Code, format string, args ...any) *refusal.Error {
	return refusal.New(code, format, args...).For(pc.Plan.Operation, pc.Plan.Fingerprint)
}

// LoadIdentity loads the runner key c names: this host's signing identity
// for receipts, which must belong to a principal with the runner role.
func LoadIdentity(c *config.Config, p *approval.Policy) (*keys.Private, *approval.Principal, error) {
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

// JournalHost is the host a journal's receipts and checkpoints name: the
// configured host, or else the machine's hostname, so that one host's
// journal never verifies as another's.
func JournalHost(configured string) string {
	if configured != "" {
		return configured
	}
	h, _ := os.Hostname()
	return h
}

// CallerFiles reads file parameters as the caller has them: by path, or,
// with Open set (the service), from the descriptor the client opened, so
// the service never opens a path a caller names (the program, on the
// secure path, is the registry's and read by whoever runs the gate); a
// file bound as supplied inline, through Inline, never from a path.
type CallerFiles struct {
	operations.Digester
	Open   func(name, path string) (*os.File, error)
	Inline func(name, sum string) (*os.File, bool, error)
	// Bound is the sum the plan judged binds for each file, by name: what
	// content kept with the plan is fetched by (none at plan time).
	Bound map[string]string
}

// fileDigester hashes a file already open; both digesters implement it.
type fileDigester interface {
	DigestFile(kind, name string, f *os.File, path string, max int64) (int64, string, error)
}

var (
	_ fileDigester = operations.HashDigester{}
	_ fileDigester = (*snapshotDigester)(nil)
)

func (c CallerFiles) Digest(kind, name, path string, max int64) (size int64, sum string, err error) {
	if bound, inline := operations.InlineName(path); kind == "file" && inline {
		if bound != name {
			return 0, "", &operations.InputError{Err: fmt.Errorf("file %s is bound as the inline content of another file", name)}
		}
		if c.Inline == nil {
			// Never read as a path here: only the runner service keeps
			// and takes inline content (docs/adr/0063-file-content-kept-with-the-plan.md).
			return 0, "", refusal.New(refusal.ParamInvalid, "file %s was supplied inline over MCP HTTP: only the runner service that keeps its content can run this plan", name).Needs("the runner service this plan was made on")
		}
		fl, owned, err := c.Inline(name, c.Bound[name])
		if err != nil {
			return 0, "", err
		}
		if owned {
			defer fl.Close()
		}
		return c.Digester.(fileDigester).DigestFile(kind, name, fl, path, max)
	}
	if kind != "file" || c.Open == nil {
		return c.Digester.Digest(kind, name, path, max)
	}
	fl, err := c.Open(name, path)
	if err != nil {
		return 0, "", err
	}
	return c.Digester.(fileDigester).DigestFile(kind, name, fl, path, max)
}

// Interpreter is the wrapped digester's, when it has one.
func (c CallerFiles) Interpreter(programPath string) (string, error) {
	if ir, ok := c.Digester.(operations.InterpreterReader); ok {
		return ir.Interpreter(programPath)
	}
	return "", nil
}

// CallerFiles wraps d to read file parameters as r's caller has them.
func (r *Runner) CallerFiles(d operations.Digester) CallerFiles {
	return CallerFiles{Digester: d, Open: r.OpenFile, Inline: r.Inline}
}
