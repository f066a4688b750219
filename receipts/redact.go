package receipts

import "github.com/prod-write/prod-write/pkg/dsse"

// Redacted is r as a caller with no key of the trust policy reads it
// (docs/adr/0040-what-a-keyless-caller-reads-of-a-receipt.md): what names
// and hashes the run (kind, seq, prev, time, run id, runner, host, the
// fingerprint, the operation's definition as the registry holds it, the
// path, anchor, slot, relied record ids, policy digest, signers' public
// keys, invoker, decision id, exit status, signal, timeout, duration,
// output sizes and digests, the precondition check's fingerprint, run,
// exit status and digest, a repair's offsets and hashes), and nothing the
// plan binds or its evidence says: the signed plan (argv, params, file
// paths, cwd, environment values), every evidence, break-glass and review
// envelope (free text about the plan: summaries, reasons, notes), the
// precondition check's own signed plan, and an outcome's error text
// (which may quote the program's path or a file's). r is not changed. The
// result is no longer what the runner signed: it is for reading, never
// for verifying.
func Redacted(r *Receipt) *Receipt {
	if r == nil {
		return nil
	}
	c := *r
	if in := r.Intent; in != nil {
		ci := *in
		ci.Plan = nil
		ci.Evidence = []*dsse.Envelope{}
		if in.Precondition != nil {
			p := *in.Precondition
			p.CheckPlan = nil
			ci.Precondition = &p
		}
		if in.BreakGlass != nil {
			ci.BreakGlass = &BreakGlassSeen{Breaker: in.BreakGlass.Breaker}
		}
		c.Intent = &ci
	}
	if o := r.Outcome; o != nil {
		co := *o
		co.Error = ""
		c.Outcome = &co
	}
	if r.Review != nil {
		c.Review = &Review{}
	}
	return &c
}

// PlanTarget is the target of the plan an intent ran, read from its signed
// plan without verifying it (replay verifies), or "" for a receipt that is
// not an intent or whose plan does not read. A redacted receipt keeps it:
// the target is what status shows a keyless caller too.
func PlanTarget(r *Receipt) string {
	if r == nil || r.Intent == nil {
		return ""
	}
	p, err := rawPlan(r.Intent.Plan)
	if err != nil {
		return ""
	}
	return p.Target
}
