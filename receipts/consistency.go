package receipts

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/prod-write/prod-write/approval"
)

// NoteError is a checkpoint note that cannot be trusted: BadOrigin when
// its first line is not prod-write/receipts/HOST (the note is malformed),
// otherwise no runner key of the policy signs it for its origin.
type NoteError struct {
	BadOrigin bool
	Reason    string
}

func (e *NoteError) Error() string { return "checkpoint note: " + e.Reason }

// OpenRunnerNote verifies the checkpoint note b with the key of a runner
// of policy, for the origin its first line names, and returns it with the
// host that origin names. It returns a [*NoteError] when it does not
// verify.
func OpenRunnerNote(b []byte, policy *approval.Policy) (*log.Checkpoint, string, error) {
	first, _, _ := bytes.Cut(b, []byte("\n"))
	origin := string(first)
	host, ok := strings.CutPrefix(origin, NoteOrigin(""))
	if !ok || host == "" {
		return nil, "", &NoteError{BadOrigin: true, Reason: fmt.Sprintf("its origin %q is not prod-write/receipts/HOST", origin)}
	}
	why := "the policy names no runner"
	for _, pr := range policy.Principals {
		if !pr.Has(approval.RoleRunner) || pr.Public() == nil {
			continue
		}
		cp, err := OpenNoteCheckpoint(b, origin, pr.Public())
		if err == nil {
			return cp, host, nil
		}
		why = err.Error()
	}
	return nil, "", &NoteError{Reason: why}
}

// ConsistencyRefusedError says two checkpoints are not consistent: the
// journal is not the tree one of them signs (cut off, rewritten, or a
// forked view), or a consistency proof between them does not verify. It
// is the only error [Tree.Consistency] and [VerifyConsistency] return for
// checkpoints that verify but disagree.
type ConsistencyRefusedError struct{ Reason string }

func (e *ConsistencyRefusedError) Error() string { return "consistency refused: " + e.Reason }

func refuseConsistency(format string, args ...any) error {
	return &ConsistencyRefusedError{Reason: fmt.Sprintf(format, args...)}
}

// Consistency checks that the tree holds both checkpoints, each the root
// of its first Size leaves, and returns the RFC 6962 consistency proof of
// the tree of old.Size leaves into that of new.Size. Two checkpoints of
// one size with different roots (a forked view) cannot both hold.
func (t *Tree) Consistency(old, new *log.Checkpoint) ([][]byte, error) {
	if old.Origin != new.Origin {
		return nil, refuseConsistency("OLD is of %q, NEW of %q: two logs", old.Origin, new.Origin)
	}
	if old.Size > new.Size {
		return nil, refuseConsistency("OLD counts %d entries, NEW %d: OLD must be the earlier", old.Size, new.Size)
	}
	for _, c := range []struct {
		name string
		cp   *log.Checkpoint
	}{{"OLD", old}, {"NEW", new}} {
		if c.cp.Size > t.Size() {
			return nil, refuseConsistency("%s counts %d entries; the journal holds %d: receipts were cut off", c.name, c.cp.Size, t.Size())
		}
		root, err := t.Root(c.cp.Size)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(root, c.cp.Hash) {
			return nil, refuseConsistency("the journal's first %d entries are not the tree %s signs: receipts were rewritten, or %s is of a forked view", c.cp.Size, c.name, c.name)
		}
	}
	p, err := t.ConsistencyProof(old.Size, new.Size)
	if err != nil {
		return nil, fmt.Errorf("consistency proof %d to %d: %w", old.Size, new.Size, err)
	}
	return p, nil
}

// VerifyConsistency verifies hashes as the RFC 6962 consistency proof of
// old's tree into new's (transparency-dev/merkle's
// proof.VerifyConsistency), with no journal: what anyone holding the two
// verified checkpoints and the proof checks.
func VerifyConsistency(old, new *log.Checkpoint, hashes [][]byte) error {
	if old.Origin != new.Origin {
		return refuseConsistency("OLD is of %q, NEW of %q: two logs", old.Origin, new.Origin)
	}
	// The library takes any root for a tree of no leaf.
	for _, c := range []*log.Checkpoint{old, new} {
		if c.Size == 0 && !bytes.Equal(c.Hash, rfc6962.DefaultHasher.EmptyRoot()) {
			return refuseConsistency("a checkpoint of no entry signs a root that is not the empty tree's")
		}
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, old.Size, new.Size, hashes, old.Hash, new.Hash); err != nil {
		return refuseConsistency("the proof of the tree of %d entries into that of %d does not verify: %v", old.Size, new.Size, err)
	}
	return nil
}
