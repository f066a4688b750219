package localapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/transparency-dev/formats/log"

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
