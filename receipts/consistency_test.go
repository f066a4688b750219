package receipts

import (
	"bytes"
	"errors"
	"testing"

	"github.com/transparency-dev/formats/log"
	"pgregory.net/rapid"
)

func checkpointOf(t interface{ Fatal(...any) }, tr *Tree, size uint64) *log.Checkpoint {
	root, err := tr.Root(size)
	if err != nil {
		t.Fatal(err)
	}
	return &log.Checkpoint{Origin: NoteOrigin("db1"), Size: size, Hash: root}
}

// Any two checkpoints of one journal are consistent, and the proof
// verifies alone; a tampered proof does not.
func TestTreeConsistencyOfTwoCheckpoints(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(0, 70).Draw(rt, "n")
		tr, err := TreeOf(bytes.NewReader(journalOf(n)))
		if err != nil {
			rt.Fatal(err)
		}
		newSize := uint64(rapid.IntRange(0, n).Draw(rt, "new"))
		oldSize := uint64(rapid.IntRange(0, int(newSize)).Draw(rt, "old"))
		old, new := checkpointOf(rt, tr, oldSize), checkpointOf(rt, tr, newSize)
		p, err := tr.Consistency(old, new)
		if err != nil {
			rt.Fatalf("%d into %d: %v", oldSize, newSize, err)
		}
		if err := VerifyConsistency(old, new, p); err != nil {
			rt.Fatalf("%d into %d: %v", oldSize, newSize, err)
		}
		if len(p) > 0 {
			i := rapid.IntRange(0, len(p)-1).Draw(rt, "i")
			bad := append([][]byte(nil), p...)
			bad[i] = bytes.Repeat([]byte{0xee}, 32)
			var ref *ConsistencyRefusedError
			if err := VerifyConsistency(old, new, bad); !errors.As(err, &ref) {
				rt.Fatalf("a tampered proof %d into %d: %v", oldSize, newSize, err)
			}
		}
	})
}

// The journal is refused against a checkpoint it does not hold: one
// counting more entries (cut off), one of another tree (rewritten), and
// two of one size with different roots (a forked view: at most one is
// this journal's). A checkpoint of no entry must sign the empty root.
func TestTreeConsistencyRefuses(t *testing.T) {
	j := journalOf(8)
	tr, err := TreeOf(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	rewritten, err := TreeOf(bytes.NewReader(bytes.Replace(j, []byte(`{"line":2}`), []byte(`{"line":9}`), 1)))
	if err != nil {
		t.Fatal(err)
	}
	cut, err := TreeOf(bytes.NewReader(journalOf(6)))
	if err != nil {
		t.Fatal(err)
	}
	old, new := checkpointOf(t, tr, 5), checkpointOf(t, tr, 8)
	fork := checkpointOf(t, rewritten, 5)
	other := *new
	other.Origin = NoteOrigin("db2")
	refused := func(name string, err error) {
		t.Helper()
		var ref *ConsistencyRefusedError
		if !errors.As(err, &ref) {
			t.Errorf("%s: %v, want it refused", name, err)
		}
	}
	if _, err := tr.Consistency(old, new); err != nil {
		t.Fatal(err)
	}
	_, err = cut.Consistency(old, new)
	refused("a journal cut short of NEW", err)
	_, err = rewritten.Consistency(old, new)
	refused("a journal rewritten under OLD", err)
	_, err = tr.Consistency(fork, new)
	refused("OLD of a forked view", err)
	_, err = tr.Consistency(old, fork)
	refused("NEW older than OLD", err)
	_, err = tr.Consistency(old, &other)
	refused("NEW of another log", err)
	refused("NEW of another log, alone", VerifyConsistency(old, &other, nil))
	// Of one size, another root: no proof joins them.
	refused("a forked view, alone", VerifyConsistency(old, fork, nil))
	empty := &log.Checkpoint{Origin: old.Origin, Size: 0, Hash: bytes.Repeat([]byte{1}, 32)}
	refused("a tree of no entry with a root", VerifyConsistency(empty, new, nil))
	if err := VerifyConsistency(checkpointOf(t, tr, 0), new, nil); err != nil {
		t.Errorf("the empty tree into 8: %v", err)
	}
}
