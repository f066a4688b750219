package receipts

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"

	"github.com/prod-write/prod-write/approval"
)

// WitnessError says a checkpoint note is not cosigned by the witnesses a
// verifier asks for: fewer than Want distinct witnesses of the trust
// policy cosign it (Have did), or a cosignature line is malformed, or a
// witness's cosignature does not verify over this checkpoint (Reason).
type WitnessError struct {
	Have, Want int
	Reason     string
}

func (e *WitnessError) Error() string { return "checkpoint note witnesses: " + e.Reason }

// VerifyCosignatures checks that the checkpoint note b carries valid
// C2SP tlog-cosignature (cosignature/v1) cosignatures by at least k
// distinct witnesses of policy, and returns their names. Lines by keys
// the policy does not name (the runner's signature among them) count for
// nothing; a line that does not parse, or a cosignature by a witness of
// the policy that does not verify over this note's body (one made over
// another checkpoint), refuses the note whatever else it carries. The
// note's own signature is [OpenRunnerNote]'s to check. Verification is
// golang.org/x/mod/sumdb/note's Open with the witnesses' verifiers from
// github.com/transparency-dev/formats/note; one witness counts once
// (Open keeps one signature per key, and the policy refuses one key
// under two names).
//
// A cosignature made before since (its signed cosignature/v1 timestamp,
// read by the library's CoSigV1Timestamp) counts for nothing when since
// is set: a witness that cosigned long ago says nothing of what the log
// has shown it since (replay --witness-max-age).
func VerifyCosignatures(b []byte, policy *approval.Policy, k int, since time.Time) ([]string, error) {
	if k <= 0 {
		return nil, nil
	}
	if k > len(policy.Witnesses) {
		return nil, &WitnessError{Want: k, Reason: fmt.Sprintf("%d cosignatures asked for; the trust policy names %d witnesses", k, len(policy.Witnesses))}
	}
	var vs []note.Verifier
	for _, v := range policy.WitnessVerifiers() {
		vs = append(vs, cosigVerifier{v})
	}
	n, err := note.Open(b, note.VerifierList(vs...))
	var (
		unv *note.UnverifiedNoteError
		inv *note.InvalidSignatureError
	)
	switch {
	case errors.As(err, &unv):
		return nil, &WitnessError{Want: k, Reason: fmt.Sprintf("cosigned by none of the trust policy's witnesses; %d asked for", k)}
	case errors.As(err, &inv):
		return nil, &WitnessError{Want: k, Reason: fmt.Sprintf("witness %s's cosignature does not verify over this checkpoint", inv.Name)}
	case err != nil:
		return nil, &WitnessError{Want: k, Reason: fmt.Sprintf("the note does not read: %v", err)}
	}
	var names, stale []string
	for _, s := range n.Sigs {
		if !since.IsZero() {
			if at, err := fnote.CoSigV1Timestamp(s); err != nil || at.Before(since) {
				stale = append(stale, s.Name)
				continue
			}
		}
		if !slices.Contains(names, s.Name) {
			names = append(names, s.Name)
		}
	}
	if len(names) < k {
		reason := fmt.Sprintf("cosigned by %d of the trust policy's witnesses (%s); %d asked for", len(names), strings.Join(names, ", "), k)
		if len(stale) > 0 {
			reason += fmt.Sprintf("; cosigned before %s, so not counted: %s", since.UTC().Format(time.RFC3339), strings.Join(stale, ", "))
		}
		return names, &WitnessError{Have: len(names), Want: k, Reason: reason}
	}
	return names, nil
}

// cosigVerifier is a witness's cosignature/v1 verifier
// (transparency-dev/formats/note) as VerifyCosignatures hands it to
// note.Open: the cosignature must verify over the note's own text.
type cosigVerifier struct{ note.Verifier }

func (v cosigVerifier) Verify(msg, sig []byte) bool { return v.Verifier.Verify(msg, sig) }
