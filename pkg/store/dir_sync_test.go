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
