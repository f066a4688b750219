package receipts

import (
	"github.com/prod-write/prod-write/approval"
)

// Explain answers "why was this allowed?" for an intent receipt, from what
// it carries: its path, the records it relied on (read, not verified here:
// replay verifies them), every veto and withdrawal the gate saw, and the
// digests of the policy and definition it was judged by. It returns nil
// for a receipt that is not an intent.
func Explain(r *Receipt) *approval.Explanation {
	if r == nil || r.Intent == nil {
		return nil
	}
	in := r.Intent
	x := approval.ExplainInput{PolicyDigest: in.PolicyDigest, Path: in.Path, Relied: in.Relied, Slot: in.Slot, At: r.Time}
	if in.Operation != nil {
		x.Operation, x.OperationDigest = in.Operation.Name, in.Operation.Digest
	}
	for _, env := range in.Evidence {
		a := approval.Describe(env)
		if a == nil {
			// An intent holds only what the gate could read; one that
			// cannot be read now is reported, not skipped.
			x.Unreadable++
			continue
		}
		x.Evidence = append(x.Evidence, a)
		if a.ID == in.Anchor {
			x.AnchorUses = a.Uses
		}
	}
	return approval.Explain(x)
}
