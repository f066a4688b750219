package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/store/storetest"
)

// TestDirConsumeIsDurable: a spent use survives a crash before Consume
// returns (its marker's directory entry is fsynced after the marker is
// created), and a consumption whose fsync fails is an error, never a slot
// the run may rely on.
func TestDirConsumeIsDurable(t *testing.T) {
	d := openDir(t)
	consumed := filepath.Join(d.Root, "consumed")
	id := storetest.ID("durable")
	orig := durable.Sync
	t.Cleanup(func() { durable.Sync = orig })

	var synced []string
	durable.Sync = func(f *os.File) error {
		// Which slot markers exist when the directory is synced.
		ents, _ := os.ReadDir(f.Name())
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		synced = append(synced, f.Name()+": "+strconv.Quote(filepath.Join(names...)))
		return orig(f)
	}
	run := storetest.NewRun()
	if slot, err := d.Consume(id, 2, run); err != nil || slot != 0 {
		t.Fatalf("Consume = %d, %v", slot, err)
	}
	// The slot and the run's claim, both there when the directory is synced.
	if want := []string{consumed + ": " + strconv.Quote(filepath.Join(id+".0", id+".run-"+run))}; !slices.Equal(synced, want) {
		t.Fatalf("fsyncs %q, want %q", synced, want)
	}

	durable.Sync = func(f *os.File) error { return &os.PathError{Op: "sync", Path: f.Name(), Err: syscall.EIO} }
	if slot, err := d.Consume(id, 2, storetest.NewRun()); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Consume with a failing fsync = %d, %v; want EIO", slot, err)
	}
}

// TestDirConsumeOneInode: a use spends one inode, not two: the run's claim
// is a hard link to the slot's file, which names both the slot and the
// run. A claim an earlier version wrote as a file of its own ("SLOT")
// still gives its run its slot back.
func TestDirConsumeOneInode(t *testing.T) {
	d := openDir(t)
	consumed := filepath.Join(d.Root, "consumed")
	id := storetest.ID("one-inode")
	run := storetest.NewRun()
	if slot, err := d.Consume(id, 3, run); err != nil || slot != 0 {
		t.Fatalf("Consume = %d, %v", slot, err)
	}
	slotFile, claim := filepath.Join(consumed, id+".0"), filepath.Join(consumed, id+".run-"+run)
	a, err1 := os.Stat(slotFile)
	b, err2 := os.Stat(claim)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(a, b) {
		t.Errorf("the claim is an inode of its own")
	}
	if data, _ := os.ReadFile(slotFile); string(data) != "0 "+run {
		t.Errorf("the slot's file holds %q, want %q", data, "0 "+run)
	}
	if slot, err := d.Consume(id, 3, run); err != nil || slot != 0 {
		t.Errorf("a retry = %d, %v; want slot 0 back", slot, err)
	}

	// An earlier version's store: slot 1 held by old, its claim a file
	// holding "1".
	old := storetest.NewRun()
	if err := os.WriteFile(filepath.Join(consumed, id+".1"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(consumed, id+".run-"+old), []byte("1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if slot, err := d.Consume(id, 3, old); err != nil || slot != 1 {
		t.Errorf("a retry of an earlier version's claim = %d, %v; want slot 1 back", slot, err)
	}
	if slot, err := d.Consume(id, 3, storetest.NewRun()); err != nil || slot != 2 {
		t.Errorf("a new run = %d, %v; want slot 2", slot, err)
	}
}
