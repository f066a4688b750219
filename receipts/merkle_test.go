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
		root, _ := tr.Root(size)
		p, err := tr.InclusionProof(idx, size)
		if err != nil {
			rt.Fatal(err)
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, idx, size, tr.LeafHash(idx), p, root); err != nil {
			rt.Fatalf("inclusion %d in %d: %v", idx, size, err)
		}
		oldRoot, _ := tr.Root(old)
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
	tr, _ := TreeOf(bytes.NewReader(j))
	oldRoot, _ := tr.Root(5)
	tampered := bytes.Replace(j, []byte(`{"line":2}`), []byte(`{"line":9}`), 1)
	tr2, _ := TreeOf(bytes.NewReader(tampered))
	newRoot, _ := tr2.Root(8)
	c, _ := tr2.ConsistencyProof(5, 8)
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, 5, 8, c, oldRoot, newRoot); err == nil {
		t.Fatal("a rewritten receipt still proved consistent with the old root")
	}
}
