package receipts

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prod-write/prod-write/pkg/durable"
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

// The fsync a journal uses when nobody injects one is durable.Sync, the
// one every durable write goes through: an append that never reached it
// would return while a power cut could still take its line, and a run
// would start on an intent receipt that is gone after the reboot. With
// Journal.Sync unset, each append syncs the journal once its whole line
// is written, and one whose sync fails returns that error.
func TestAppendNeverReturnsBeforeItsLineIsSynced(t *testing.T) {
	f := jtNew(t)
	orig := durable.Sync
	t.Cleanup(func() { durable.Sync = orig })
	var synced []int64 // the journal's size at each of its fsyncs
	var fail error
	durable.Sync = func(fl *os.File) error {
		if fl.Name() != f.path {
			return orig(fl)
		}
		fi, err := fl.Stat()
		if err != nil {
			return err
		}
		synced = append(synced, fi.Size())
		if fail != nil {
			return fail
		}
		return orig(fl)
	}
	j := f.journal()
	for range 2 {
		if _, err := j.Append(jtEntry("a", 0)); err != nil {
			t.Fatal(err)
		}
	}
	if size := int64(len(f.raw())); len(synced) != 2 || synced[1] != size || synced[0] == 0 || synced[0] >= size {
		t.Fatalf("the journal was synced at sizes %v; want once per append, each after its line (a journal of %d bytes)", synced, size)
	}

	fail = errors.New("EIO from a dying disk")
	if _, err := j.Append(jtEntry("b", 0)); !errors.Is(err, fail) {
		t.Fatalf("Append whose default sync fails = %v, want the sync's error", err)
	}
	if len(synced) != 3 {
		t.Fatalf("%d syncs of the journal after three appends, want 3", len(synced))
	}
}
