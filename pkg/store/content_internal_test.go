package store

import (
	"errors"
	"syscall"
	"testing"
)

// Content a caller sent never takes the room receipts need: with less
// than ContentReserve left after it, the embedded store refuses it,
// saying the disk is full, and keeps nothing; content already kept is
// still accepted again (nothing is written).
func TestContentLeavesTheReserve(t *testing.T) {
	d, err := OpenDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	kept, fresh := []byte("kept before the disk filled\n"), []byte("CREATE TABLE t (id int);\n")
	if err := d.PutContent(SumOf(kept), kept); err != nil {
		t.Fatal(err)
	}
	var free int64
	was := freeBytes
	freeBytes = func(string) (int64, error) { return free, nil }
	t.Cleanup(func() { freeBytes = was })
	for _, tc := range []struct {
		free int64
		ok   bool
	}{
		{ContentReserve + int64(len(fresh)) + 1, true},
		{ContentReserve + int64(len(fresh)), false},
		{0, false},
	} {
		free = tc.free
		data := append(fresh[:len(fresh):len(fresh)], byte(tc.free%251)) // one byte more
		sum := SumOf(data)
		err := d.PutContent(sum, data)
		if tc.ok != (err == nil) || !tc.ok && !errors.Is(err, syscall.ENOSPC) {
			t.Errorf("%d bytes free: %v", tc.free, err)
		}
		if _, err := d.Content(sum); !tc.ok && !errors.Is(err, ErrNotFound) {
			t.Errorf("%d bytes free: refused content was kept: %v", tc.free, err)
		}
	}
	if err := d.PutContent(SumOf(kept), kept); err != nil {
		t.Errorf("content kept before, again on a full disk: %v", err)
	}
}
