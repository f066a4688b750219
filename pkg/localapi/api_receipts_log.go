package localapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/receipts"
)

func (a API) ReceiptsProve(_ context.Context, req api.ReceiptsProveRequest) (*api.ReceiptsProveResult, error) {
	if req.Seq == 0 {
		return nil, &UsageError{Msg: "receipts prove: sequence numbers start at 1"}
	}
	sj, err := openSigningJournal(a.Env)
	if err != nil {
		return nil, err
	}
	defer sj.journal.Close()
	// One pass: the tree's leaves, and the line that holds the receipt.
	t := &receipts.Tree{}
	index, lineHash := int64(-1), ""
	err = receipts.Scan(sj.journal, func(l receipts.Line) error {
		if l.Torn {
			return nil
		}
		h := l.Hash
		if l.Long == 0 {
			h = receipts.LineHash(l.Bytes)
		}
		if index < 0 {
			if _, r, err := receipts.DecodeLine(l); err == nil && r.Seq == req.Seq {
				index, lineHash = int64(t.Size()), h
			}
		}
		return t.AppendLineHash(h)
	})
	if err != nil {
		return nil, err
	}
	if index < 0 {
		return nil, &DataError{Err: fmt.Errorf("no receipt %d in the journal", req.Seq)}
	}
	size := req.Size
	if size == 0 {
		size = t.Size()
	}
	if uint64(index) >= size {
		return nil, &UsageError{Msg: fmt.Sprintf("receipt %d is entry %d, not within the first %d", req.Seq, index+1, size)}
	}
	if size > t.Size() {
		return nil, &UsageError{Msg: fmt.Sprintf("--size %d: the journal holds %d entries", size, t.Size())}
	}
	hashes, err := t.InclusionProof(uint64(index), size)
	if err != nil {
		return nil, err
	}
	root, err := t.Root(size)
	if err != nil {
		return nil, err
	}
	origin := receipts.NoteOrigin(runner.JournalHost(sj.cfg.Host))
	note, err := receipts.SignNoteCheckpoint(sj.key, origin, t, size)
	if err != nil {
		return nil, err
	}
	return &api.ReceiptsProveResult{Origin: origin, Seq: req.Seq, LeafIndex: uint64(index), TreeSize: size, RootHash: root,
		LineHash: lineHash, LeafHash: t.LeafHash(uint64(index)), Hashes: NonNil(hashes), Checkpoint: string(note)}, nil
}

// OpenNotePair verifies both notes under a runner key of policy, for one
// origin; a note that is not one is bad input.
func OpenNotePair(policy *approval.Policy, oldNote, newNote []byte) (*log.Checkpoint, *log.Checkpoint, error) {
	var cps [2]*log.Checkpoint
	for i, n := range []struct {
		name string
		b    []byte
	}{{"OLD", oldNote}, {"NEW", newNote}} {
		cp, _, err := receipts.OpenRunnerNote(n.b, policy)
		var ne *receipts.NoteError
		switch {
		case errors.As(err, &ne) && ne.BadOrigin:
			return nil, nil, &DataError{Err: fmt.Errorf("%s: %w", n.name, err)}
		case errors.As(err, &ne):
			return nil, nil, &receipts.ConsistencyRefusedError{Reason: n.name + ": " + err.Error()}
		case err != nil:
			return nil, nil, err
		}
		cps[i] = cp
	}
	if cps[0].Origin != cps[1].Origin {
		return nil, nil, &receipts.ConsistencyRefusedError{Reason: fmt.Sprintf("OLD is of %q, NEW of %q: two logs", cps[0].Origin, cps[1].Origin)}
	}
	if cps[0].Size > cps[1].Size {
		return nil, nil, &UsageError{Msg: fmt.Sprintf("OLD counts %d entries, NEW %d: OLD is the earlier checkpoint", cps[0].Size, cps[1].Size)}
	}
	return cps[0], cps[1], nil
}

func (a API) ReceiptsConsistency(_ context.Context, req api.ReceiptsConsistencyRequest) (*api.ReceiptsConsistencyResult, error) {
	c, err := a.Env.Config()
	if err != nil {
		return nil, err
	}
	policy, err := a.Env.Policy(c)
	if err != nil {
		return nil, err
	}
	old, new, err := OpenNotePair(policy, []byte(req.Old), []byte(req.New))
	if err != nil {
		return nil, err
	}
	if origin := receipts.NoteOrigin(runner.JournalHost(c.Host)); old.Origin != origin {
		return nil, &receipts.ConsistencyRefusedError{Reason: fmt.Sprintf("the notes are of %q; this journal is %q", old.Origin, origin)}
	}
	fl, err := OpenJournal(a.Env)
	if err != nil {
		return nil, err
	}
	defer fl.Close()
	t, err := receipts.TreeOf(fl)
	if err != nil {
		return nil, err
	}
	hashes, err := t.Consistency(old, new)
	if err != nil {
		return nil, err
	}
	return &api.ReceiptsConsistencyResult{Origin: old.Origin, OldSize: old.Size, NewSize: new.Size, OldRoot: old.Hash, NewRoot: new.Hash, Hashes: NonNil(hashes)}, nil
}

func (a ServiceClient) ReceiptsProve(ctx context.Context, req api.ReceiptsProveRequest) (*api.ReceiptsProveResult, error) {
	var r api.ReceiptsProveResult
	if err := callInto(ctx, a, api.CallProve, req, nil, &r); err != nil {
		return nil, err
	}
	// What the client prints, it checks: the proof against the root it
	// states (the note's signature is the verifier's to check, with the
	// runner key it trusts).
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, r.LeafIndex, r.TreeSize, r.LeafHash, r.Hashes, r.RootHash); err != nil {
		return nil, errors.New("the runner service's inclusion proof does not verify: " + err.Error())
	}
	return &r, nil
}

func (a ServiceClient) ReceiptsConsistency(ctx context.Context, req api.ReceiptsConsistencyRequest) (*api.ReceiptsConsistencyResult, error) {
	var r api.ReceiptsConsistencyResult
	if err := callInto(ctx, a, api.CallConsistency, req, nil, &r); err != nil {
		return nil, err
	}
	// What the client prints, it checks: the proof between the trees the
	// caller's own notes name (their signatures the service verified, and
	// are the caller's to verify again with the key it trusts).
	var cps [2]*log.Checkpoint
	for i, n := range []string{req.Old, req.New} {
		text, _, _ := strings.Cut(n, "\n\n")
		var cp log.Checkpoint
		if _, err := cp.Unmarshal([]byte(text + "\n")); err != nil {
			return nil, fmt.Errorf("a checkpoint note the service verified does not read here: %w", err)
		}
		cps[i] = &cp
	}
	if err := CheckConsistencyResult(&r, cps[0], cps[1]); err != nil {
		return nil, fmt.Errorf("the runner service's consistency proof: %w", err)
	}
	return &r, nil
}

// CheckConsistencyResult verifies r as the proof between old and new.
func CheckConsistencyResult(r *api.ReceiptsConsistencyResult, old, new *log.Checkpoint) error {
	if r.Origin != old.Origin || r.OldSize != old.Size || r.NewSize != new.Size || !bytes.Equal(r.OldRoot, old.Hash) || !bytes.Equal(r.NewRoot, new.Hash) {
		return &receipts.ConsistencyRefusedError{Reason: fmt.Sprintf("the proof is of %q from %d to %d entries, not of the notes' trees (%q from %d to %d)", r.Origin, r.OldSize, r.NewSize, old.Origin, old.Size, new.Size)}
	}
	return receipts.VerifyConsistency(old, new, r.Hashes)
}
