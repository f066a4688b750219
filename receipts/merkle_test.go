package receipts

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"pgregory.net/rapid"
)

func journalOf(n int) []byte {
	var b bytes.Buffer
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, "{\"line\":%d}\n", i)
	}
	return b.Bytes()
}

func TestTreeProofsVerify(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 70).Draw(rt, "n")
		tr, err := TreeOf(bytes.NewReader(journalOf(n)))
		if err != nil {
			rt.Fatal(err)
		}
		size := uint64(rapid.IntRange(1, n).Draw(rt, "size"))
		idx := uint64(rapid.IntRange(0, int(size)-1).Draw(rt, "idx"))
		old := uint64(rapid.IntRange(0, int(size)).Draw(rt, "old"))
		root, err := tr.Root(size)
		if err != nil {
			rt.Fatal(err)
		}
		p, err := tr.InclusionProof(idx, size)
		if err != nil {
			rt.Fatal(err)
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, idx, size, tr.LeafHash(idx), p, root); err != nil {
			rt.Fatalf("inclusion %d in %d: %v", idx, size, err)
		}
		// A receipt that is not in the tree: its proof fails.
		other := rfc6962.DefaultHasher.HashLeaf([]byte(LineHash([]byte(`{"line":-1}`))))
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, idx, size, other, p, root); err == nil {
			rt.Fatalf("a line not in the journal proved included at %d of %d", idx, size)
		}
		oldRoot, err := tr.Root(old)
		if err != nil {
			rt.Fatal(err)
		}
		c, err := tr.ConsistencyProof(old, size)
		if err != nil {
			rt.Fatal(err)
		}
		if err := proof.VerifyConsistency(rfc6962.DefaultHasher, old, size, c, oldRoot, root); err != nil {
			rt.Fatalf("consistency %d..%d: %v", old, size, err)
		}
	})
}

func TestTreeTamperedJournalFailsConsistency(t *testing.T) {
	j := journalOf(8)
	tr, err := TreeOf(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	oldRoot, err := tr.Root(5)
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Replace(j, []byte(`{"line":2}`), []byte(`{"line":9}`), 1)
	if bytes.Equal(tampered, j) {
		t.Fatal("the journal holds no line 2 to rewrite")
	}
	tr2, err := TreeOf(bytes.NewReader(tampered))
	if err != nil {
		t.Fatal(err)
	}
	newRoot, err := tr2.Root(8)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tr2.ConsistencyProof(5, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, 5, 8, c, oldRoot, newRoot); err == nil {
		t.Fatal("a rewritten receipt still proved consistent with the old root")
	}
}
