package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"unicode"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/receipts"
)

// Preconditions (issue 22, docs/adr/0025-preconditions.md): an operation
// may name a read-only check whose stdout's digest its plans bind. The
// check is a plan of its own (a non-mutating operation, signed by the same
// planner) and runs through runRun like any other: the same reality check,
// the same gate, its own intent and outcome receipts. Plan runs it to learn
// the digest; run runs it again before anything is consumed.

// maxShownOutput is how much of a check's stdout is kept to be shown; all
// of it is hashed, whatever its size.
const maxShownOutput = 16 << 10

// checkOutput hashes all a check prints and keeps the first maxShownOutput
// bytes. It never fails a write, so a long output does not kill the check
// with a broken pipe.
type checkOutput struct {
	h    hash.Hash
	kept []byte
	size int64
}

func (c *checkOutput) Write(b []byte) (int, error) {
	c.h.Write(b)
	c.size += int64(len(b))
	if room := maxShownOutput - len(c.kept); room > 0 {
		c.kept = append(c.kept, b[:min(room, len(b))]...)
	}
	return len(b), nil
}

func (c *checkOutput) digest() string { return "sha256:" + hex.EncodeToString(c.h.Sum(nil)) }

// whole returns the output when all of it was kept.
func (c *checkOutput) whole() (string, bool) {
	return string(c.kept), int64(len(c.kept)) == c.size
}

// runCheck runs the stored check plan fp through runRun, its stdout
// captured (never the caller's streams: in the service those are the
// client's descriptors), its stderr and stdin nothing. It returns what was
// seen; a check that ran and failed is a result, not an error.
func runCheck(f *Factory, fp string) (*operations.PreconditionSeen, *checkOutput, error) {
	out := &checkOutput{h: sha256.New()}
	sub := *f
	sub.IO = &IOStreams{Out: out, Err: io.Discard}
	sub.JSON = false
	var seen *operations.PreconditionSeen
	sub.ranCheck = func(runID string, o *receipts.Outcome) {
		seen = &operations.PreconditionSeen{CheckFingerprint: fp, RunID: runID, ExitCode: o.ExitCode}
	}
	err := runRun(&RunOptions{F: &sub, Fingerprint: fp})
	var exit *ExitError
	if err != nil && !(errors.As(err, &exit) && seen != nil) {
		return nil, nil, err
	}
	if seen == nil {
		return nil, nil, errors.New("the precondition check left no outcome")
	}
	seen.OutputSHA256 = out.digest()
	return seen, out, nil
}

// bindPrecondition plans the operation's precondition check (signed by the
// same planner, stored), runs it, and binds its output into plan, whose
// fingerprint changes accordingly.
func bindPrecondition(f *Factory, reg *operations.Registry, op *operations.Operation, plan *operations.Plan, req operations.Request, signer *keys.Private, planner string, st store.Store) error {
	name, params := op.PreconditionRequest(plan.Target, plan.Params)
	creq := req
	creq.Operation, creq.Params, creq.Files = name, params, nil
	check, err := reg.Resolve(creq, operations.HashDigester{})
	if err != nil {
		if r, ok := refusal.As(err); ok {
			r.Reason = "precondition check " + name + ": " + r.Reason
		}
		return err
	}
	check.Planner, check.Created = planner, f.Now().UTC()
	env, err := approval.Sign(signer, approval.TypePlan, check)
	if err != nil {
		return err
	}
	if err := st.PutPlan(check.Fingerprint, env); err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("storing the precondition check's plan: %w", err)
	}
	seen, out, err := runCheck(f, check.Fingerprint)
	if err != nil {
		return fmt.Errorf("running precondition check %s: %w", name, err)
	}
	if seen.ExitCode != 0 {
		return &operations.InputError{Err: fmt.Errorf("precondition check %s exited %d (its receipts: run %s): nothing was planned", name, seen.ExitCode, seen.RunID)}
	}
	plan.Precondition = &operations.PreconditionBound{Check: name, CheckFingerprint: check.Fingerprint, OutputSHA256: seen.OutputSHA256}
	if s, ok := out.whole(); ok && op.Precondition.ShowOutput {
		plan.PreconditionOutput = &s
	}
	plan.Fingerprint = operations.Fingerprint(&plan.Bound)
	return nil
}

// precondition runs the plan's precondition check again, before the gate
// and before anything is consumed, and returns what it saw for the gate
// (which decides) and the intent (which keeps it for replay). A check plan
// that is not the operation's precondition for this plan's target and
// params, or a check that cannot run, refuses; a changed output refuses
// here too, showing both outputs when the operation allows it, and the
// gate would refuse it anyway.
// gateBeforeCheck asks the gate everything but the precondition, which is
// all a refusal can need: the check itself runs only for a plan the gate
// would otherwise let through (one more read of the evidence, for plans
// with a precondition only).
func (pc *planContext) gateBeforeCheck(f *Factory) error {
	evidence, problems, err := pc.store.Evidence(pc.plan.Fingerprint)
	if err != nil {
		return fmt.Errorf("reading evidence: %w", err)
	}
	hist, histProblems, err := breakGlassHistory(pc.store, pc.policy, pc.plan.Fingerprint, evidence)
	if err != nil {
		return err
	}
	_, err = approval.Evaluate(approval.Input{Plan: pc.env, Evidence: evidence, PreconditionUnchecked: true,
		Unreadable: append(problemStrings(problems), histProblems...), Policy: pc.policy, Op: pc.op, Now: f.Now(), Used: map[string]int{}, BreakGlass: hist})
	return err
}

func (pc *planContext) precondition(f *Factory) (*operations.PreconditionSeen, error) {
	want := pc.plan.Precondition
	if want == nil || pc.op.Precondition == nil {
		return nil, nil // the gate refuses a plan that lacks one its operation needs
	}
	refuse := func(format string, args ...any) error {
		return pc.refuse(refusal.PreconditionChanged, format, args...).Needs("a new plan of what is there now")
	}
	cpc, err := loadPlan(f, want.CheckFingerprint)
	if err != nil {
		return nil, refuse("precondition check %s cannot be loaded: %v", want.Check, err)
	}
	// The plan names its check by fingerprint; that check must be this
	// operation's precondition for this plan, or an agent could bind a
	// harmless check whose output never changes. Asked before the check
	// runs; the gate asks again of the check plan seen carries, and so
	// does replay.
	name := pc.op.Precondition.Check
	if err := approval.IsPreconditionCheck(pc.op, pc.plan, cpc.plan); err != nil {
		return nil, refuse("%v", err)
	}
	seen, out, err := runCheck(f, want.CheckFingerprint)
	if err != nil {
		var why string
		if r, ok := refusal.As(err); ok {
			why = string(r.Code) + ": " + r.Reason
		} else {
			why = err.Error()
		}
		return nil, refuse("precondition check %s could not run again: %s", name, why)
	}
	seen.CheckPlan = cpc.env
	if seen.ExitCode == 0 && seen.OutputSHA256 == want.OutputSHA256 {
		return seen, nil
	}
	if pc.op.Precondition.ShowOutput {
		fmt.Fprintf(f.IO.Err, "prod-write: precondition %s printed, when planned:\n", name)
		if pc.plan.PreconditionOutput != nil {
			fmt.Fprint(f.IO.Err, indent(*pc.plan.PreconditionOutput))
		} else {
			fmt.Fprintf(f.IO.Err, "  (not kept: %s)\n", want.OutputSHA256)
		}
		now, whole := out.whole()
		fmt.Fprintf(f.IO.Err, "prod-write: and now (exit %d):\n%s", seen.ExitCode, indent(now))
		if !whole {
			fmt.Fprintf(f.IO.Err, "  … (%d bytes in all)\n", out.size)
		}
	}
	return seen, nil
}

// indent shows output lines under a heading, each prefixed with "  | ".
func indent(s string) string {
	if s == "" {
		return "  (nothing)\n"
	}
	out := ""
	for len(s) > 0 {
		line := s
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			line, s = s[:i], s[i+1:]
		} else {
			s = ""
		}
		if strings.IndexFunc(line, unicode.IsControl) >= 0 {
			// Never raw control bytes to a terminal.
			line = strconv.Quote(line)
		}
		out += "  | " + line + "\n"
	}
	return out
}
