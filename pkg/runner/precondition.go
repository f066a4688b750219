package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"strconv"
	"strings"
	"unicode"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// Preconditions (docs/adr/0025-preconditions.md): an operation
// may name a read-only check whose stdout's digest its plans bind. The
// check is a plan of its own (a non-mutating operation, signed by the same
// planner) and runs through [Runner.Run] like any other: the same reality
// check, the same gate, its own intent and outcome receipts. Plan runs it
// to learn the digest; run runs it again before anything is consumed.

// maxShownOutput is how much of a check's stdout is kept to be shown; all
// of it is hashed, whatever its size.
const maxShownOutput = 16 << 10

// CheckOutput hashes all a check prints and keeps the first maxShownOutput
// bytes. It never fails a write, so a long output does not kill the check
// with a broken pipe.
type CheckOutput struct {
	h    hash.Hash
	kept []byte
	size int64
}

func (c *CheckOutput) Write(b []byte) (int, error) {
	c.h.Write(b)
	c.size += int64(len(b))
	if room := maxShownOutput - len(c.kept); room > 0 {
		c.kept = append(c.kept, b[:min(room, len(b))]...)
	}
	return len(b), nil
}

func (c *CheckOutput) digest() string { return "sha256:" + hex.EncodeToString(c.h.Sum(nil)) }

// Whole returns the output when all of it was kept.
func (c *CheckOutput) Whole() (string, bool) {
	return string(c.kept), int64(len(c.kept)) == c.size
}

// RunCheck runs the stored check plan fp through [Runner.Run], its stdout
// captured (never the caller's streams: in the service those are the
// client's descriptors), its stderr and stdin nothing. It returns what was
// seen; a check that ran and failed is a result, not an error.
func (r *Runner) RunCheck(fp string) (*operations.PreconditionSeen, *CheckOutput, error) {
	out := &CheckOutput{h: sha256.New()}
	sub := *r
	sub.Stdin, sub.Stdout, sub.Stderr, sub.Progress = nil, out, io.Discard, nil
	ran, err := sub.Run(fp)
	if err != nil {
		return nil, nil, err
	}
	seen := &operations.PreconditionSeen{CheckFingerprint: fp, RunID: ran.RunID, ExitCode: ran.Outcome.ExitCode}
	seen.OutputSHA256 = out.digest()
	return seen, out, nil
}

// gateBeforeCheck asks the gate everything but the precondition, which is
// all a refusal can need: the check itself runs only for a plan the gate
// would otherwise let through (one more read of the evidence, for plans
// with a precondition only).
func (pc *PlanContext) gateBeforeCheck(r *Runner) error {
	evidence, problems, err := pc.Store.Evidence(pc.Plan.Fingerprint)
	if err != nil {
		return fmt.Errorf("reading evidence: %w", err)
	}
	hist, histProblems, err := BreakGlassHistory(pc.Store, pc.Policy, pc.Plan.Fingerprint, evidence)
	if err != nil {
		return err
	}
	counts, err := pc.SignCounts()
	if err != nil {
		return err
	}
	_, err = approval.Evaluate(approval.Input{Plan: pc.Envelope, Evidence: evidence, PreconditionUnchecked: true,
		Unreadable: append(ProblemStrings(problems), histProblems...), Policy: pc.Policy, Op: pc.Op, Now: r.Now(), Used: map[string]int{}, BreakGlass: hist, SignCounts: counts})
	return err
}

// precondition runs the plan's precondition check again, before the gate
// and before anything is consumed, and returns what it saw for the gate
// (which decides) and the intent (which keeps it for replay). A check plan
// that is not the operation's precondition for this plan's target and
// params, or a check that cannot run, refuses; a changed output refuses
// here too, showing both outputs when the operation allows it, and the
// gate would refuse it anyway.
func (pc *PlanContext) precondition(r *Runner) (*operations.PreconditionSeen, error) {
	want := pc.Plan.Precondition
	if want == nil || pc.Op.Precondition == nil {
		return nil, nil // the gate refuses a plan that lacks one its operation needs
	}
	refuse := func(format string, args ...any) error {
		return pc.Refuse(refusal.PreconditionChanged, format, args...).Needs("a new plan of what is there now")
	}
	cpc, err := r.Load(want.CheckFingerprint)
	if err != nil {
		return nil, refuse("precondition check %s cannot be loaded: %v", want.Check, err)
	}
	// The plan names its check by fingerprint; that check must be this
	// operation's precondition for this plan, or an agent could bind a
	// harmless check whose output never changes. Asked before the check
	// runs; the gate asks again of the check plan seen carries, and so
	// does replay.
	name := pc.Op.Precondition.Check
	if err := approval.IsPreconditionCheck(pc.Op, pc.Plan, cpc.Plan); err != nil {
		return nil, refuse("%v", err)
	}
	seen, out, err := r.RunCheck(want.CheckFingerprint)
	if err != nil {
		var why string
		if rf, ok := refusal.As(err); ok {
			why = string(rf.Code) + ": " + rf.Reason
		} else {
			why = err.Error()
		}
		return nil, refuse("precondition check %s could not run again: %s", name, why)
	}
	seen.CheckPlan = cpc.Envelope
	if seen.ExitCode == 0 && seen.OutputSHA256 == want.OutputSHA256 {
		return seen, nil
	}
	if pc.Op.Precondition.ShowOutput {
		fmt.Fprintf(r.Stderr, "prod-write: precondition %s printed, when planned:\n", name)
		if pc.Plan.PreconditionOutput != nil {
			fmt.Fprint(r.Stderr, Indent(*pc.Plan.PreconditionOutput))
		} else {
			fmt.Fprintf(r.Stderr, "  (not kept: %s)\n", want.OutputSHA256)
		}
		now, whole := out.Whole()
		fmt.Fprintf(r.Stderr, "prod-write: and now (exit %d):\n%s", seen.ExitCode, Indent(now))
		if !whole {
			fmt.Fprintf(r.Stderr, "  … (%d bytes in all)\n", out.size)
		}
	}
	return seen, nil
}

// Indent shows output lines under a heading, each prefixed with "  | ".
func Indent(s string) string {
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
