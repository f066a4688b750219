package localapi

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/prod-write/prod-write/receipts"
)

// The cadence's tree, read a little at a time (a torn last line left
// for later, a line longer than receipts.MaxLine among them), is the tree
// of the journal's complete lines; a journal cut shorter is read again.
func TestJournalTailIsTheTree(t *testing.T) {
	path := filepath.Join(t.TempDir(), "receipts.jsonl")
	j := &journalTail{path: path}
	if err := j.catchUp(); err != nil || j.tree.Size() != 0 {
		t.Fatalf("no journal yet: %v, %d leaves", err, j.tree.Size())
	}
	var all []byte
	check := func(step string) {
		t.Helper()
		if err := j.catchUp(); err != nil {
			t.Fatal(err)
		}
		want, err := receipts.TreeOf(bytes.NewReader(all))
		if err != nil {
			t.Fatal(err)
		}
		if j.tree.Size() != want.Size() {
			t.Fatalf("%s: %d leaves; want %d", step, j.tree.Size(), want.Size())
		}
		if want.Size() > 0 {
			got, _ := j.tree.Root(want.Size())
			root, _ := want.Root(want.Size())
			if !bytes.Equal(got, root) {
				t.Fatalf("%s: another root", step)
			}
		}
	}
	write := func(step string, b []byte) {
		t.Helper()
		all = append(all, b...)
		if err := os.WriteFile(path, all, 0o600); err != nil {
			t.Fatal(err)
		}
		check(step)
	}
	write("two lines", []byte("{\"a\":1}\n{\"a\":2}\n"))
	write("a torn line", []byte("{\"a\":3"))
	write("the torn line ended", []byte("}\n"))
	write("a long line", append(bytes.Repeat([]byte("x"), receipts.MaxLine+10), '\n'))
	write("an empty line and one more", []byte("\n{\"a\":5}\n"))
	all = all[:len("{\"a\":1}\n")]
	write("cut to one line, then one other", []byte("{\"b\":2}\n"))
}

// A journal rewritten in place past its old length is read again.
func TestJournalTailRewritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "receipts.jsonl")
	j := &journalTail{path: path}
	if err := os.WriteFile(path, []byte("{\"a\":1}\n{\"a\":2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := j.catchUp(); err != nil {
		t.Fatal(err)
	}
	rewritten := []byte("{\"a\":1}\n{\"z\":2}\n{\"a\":3}\n")
	if err := os.WriteFile(path, rewritten, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := j.catchUp(); err != nil {
		t.Fatal(err)
	}
	want, err := receipts.TreeOf(bytes.NewReader(rewritten))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := j.tree.Root(j.tree.Size())
	root, _ := want.Root(want.Size())
	if j.tree.Size() != 3 || !bytes.Equal(got, root) {
		t.Fatalf("the tail kept the old lines: %d leaves", j.tree.Size())
	}
}
