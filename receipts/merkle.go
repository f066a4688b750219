package receipts

import (
	"encoding/hex"
	"fmt"
	"io"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// Tree is the journal as an RFC 6962 Merkle log: leaf i is the
// 32-byte LineHash of journal line i, hashed as an RFC 6962 leaf. The tree
// is derived from the journal, so it is durable exactly when the line is
// (docs/adr/0044-journal-merkle-log.md). Torn tails are not leaves.
type Tree struct {
	leaves [][]byte // RFC 6962 leaf hashes
	// levels[k] are the roots of the complete subtrees of 2^k leaves,
	// levels[0] being leaves: built once for proofs, so that each proof
	// costs O(log n) lookups, and dropped by an append.
	levels [][][]byte
}

var rf = &compact.RangeFactory{Hash: rfc6962.DefaultHasher.HashChildren}

// TreeOf reads the journal r into a Tree.
func TreeOf(r io.Reader) (*Tree, error) {
	t := &Tree{}
	err := Scan(r, func(l Line) error {
		if l.Torn {
			return nil
		}
		h := l.Hash
		if l.Long == 0 {
			h = LineHash(l.Bytes)
		}
		return t.AppendLineHash(h)
	})
	return t, err
}

// AppendLineHash adds the leaf of a line whose LineHash is hexHash.
func (t *Tree) AppendLineHash(hexHash string) error {
	b, err := hex.DecodeString(hexHash)
	if err != nil || len(b) != 32 {
		return fmt.Errorf("line hash %q is not 32 bytes of hex", hexHash)
	}
	t.leaves = append(t.leaves, rfc6962.DefaultHasher.HashLeaf(b))
	t.levels = nil
	return nil
}

// Size is the number of leaves.
func (t *Tree) Size() uint64 { return uint64(len(t.leaves)) }

// LeafHash is leaf i's RFC 6962 hash.
func (t *Tree) LeafHash(i uint64) []byte { return t.leaves[i] }

// Root is the root hash of the first size leaves.
func (t *Tree) Root(size uint64) ([]byte, error) {
	if err := t.within(size); err != nil {
		return nil, err
	}
	return t.rootOf(size)
}

// within refuses a tree size beyond the journal's.
func (t *Tree) within(size uint64) error {
	if size > t.Size() {
		return fmt.Errorf("tree size %d is beyond the journal's %d entries", size, t.Size())
	}
	return nil
}

func (t *Tree) rootOf(end uint64) ([]byte, error) {
	if end == 0 {
		return rfc6962.DefaultHasher.EmptyRoot(), nil
	}
	r := rf.NewEmptyRange(0)
	for _, h := range t.leaves[:end] {
		if err := r.Append(h, nil); err != nil {
			return nil, err
		}
	}
	return r.GetRootHash(nil)
}

// node is the hash of the perfect subtree at level, index.
func (t *Tree) node(level uint, index uint64) []byte {
	if t.levels == nil {
		t.levels = [][][]byte{t.leaves}
		for below := t.leaves; len(below) > 1; {
			up := make([][]byte, len(below)/2)
			for i := range up {
				up[i] = rfc6962.DefaultHasher.HashChildren(below[2*i], below[2*i+1])
			}
			t.levels = append(t.levels, up)
			below = up
		}
	}
	return t.levels[level][index]
}

func (t *Tree) fetch(n proof.Nodes) ([][]byte, error) {
	hs := make([][]byte, len(n.IDs))
	for i, id := range n.IDs {
		if (id.Index+1)<<id.Level > t.Size() {
			return nil, fmt.Errorf("node %d/%d is beyond the tree", id.Level, id.Index)
		}
		hs[i] = t.node(id.Level, id.Index)
	}
	return n.Rehash(hs, rfc6962.DefaultHasher.HashChildren)
}

// InclusionProof proves leaf index is in the tree of the given size.
func (t *Tree) InclusionProof(index, size uint64) ([][]byte, error) {
	if err := t.within(size); err != nil {
		return nil, err
	}
	n, err := proof.Inclusion(index, size)
	if err != nil {
		return nil, err
	}
	return t.fetch(n)
}

// ConsistencyProof proves the tree of size1 is a prefix of that of size2.
func (t *Tree) ConsistencyProof(size1, size2 uint64) ([][]byte, error) {
	if err := t.within(size2); err != nil {
		return nil, err
	}
	n, err := proof.Consistency(size1, size2)
	if err != nil {
		return nil, err
	}
	return t.fetch(n)
}
