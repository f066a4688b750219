package execute

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/prod-write/prod-write/operations"
)

// A descriptor handed over (by a runner service's client) shares its
// offset with whoever opened it: what is hashed and snapshotted is the
// whole file, from byte 0, wherever the offset stands.
func TestHandedOverDescriptorReadFromTheStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("the whole file, not its tail"), 0o600); err != nil {
		t.Fatal(err)
	}
	whole, err := TakeSnapshot(path, -1, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Seek(10, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	snap, err := SnapshotFile(f, path, -1, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if snap.SHA256 != whole.SHA256 || snap.Size != whole.Size {
		t.Errorf("snapshot of a descriptor at offset 10: %d bytes %s, want %d bytes %s", snap.Size, snap.SHA256, whole.Size, whole.SHA256)
	}
	size, sum, err := operations.HashDigester{}.DigestFile("file", "f", f, path, -1)
	if err != nil || sum != whole.SHA256 || size != whole.Size {
		t.Errorf("hash of a descriptor at offset 10: %d %s %v, want %d %s", size, sum, err, whole.Size, whole.SHA256)
	}
}
