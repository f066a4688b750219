package receipts

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// An append is durable only once its fsync returns: an append whose sync
// fails returns that error (so run never executes after it), and the first
// append also syncs the journal's directory, before the file's sync.
func TestAppendSyncs(t *testing.T) {
	f := jtNew(t)
	var events []string
	j := f.journal()
	j.Sync = func(fl *os.File) error {
		events = append(events, "sync "+filepath.Base(fl.Name()))
		return fl.Sync()
	}
	j.SyncDir = func(dir string) error {
		events = append(events, "syncdir "+filepath.Base(dir))
		return nil
	}
	if _, err := j.Append(jtEntry("a", 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Append(jtEntry("b", 0)); err != nil {
		t.Fatal(err)
	}
	want := []string{"syncdir journal", "sync receipts.jsonl", "sync receipts.jsonl"}
	if !slices.Equal(events, want) {
		t.Fatalf("durability events %q, want %q", events, want)
	}
}

func TestAppendWhoseSyncFailsFails(t *testing.T) {
	disk := errors.New("EIO from a dying disk")
	for _, tc := range []struct {
		name string
		set  func(*Journal)
	}{
		{"file sync", func(j *Journal) { j.Sync = func(*os.File) error { return disk } }},
		{"directory sync on creation", func(j *Journal) { j.SyncDir = func(string) error { return disk } }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := jtNew(t)
			j := f.journal()
			tc.set(j)
			_, err := j.Append(jtEntry("a", 0))
			if !errors.Is(err, disk) {
				t.Fatalf("Append = %v, want the sync's error", err)
			}
		})
	}
}
