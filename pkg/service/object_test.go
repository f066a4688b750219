package service

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

func TestSameObject(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	for _, d := range []string{a, b} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(a, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "f")
	os.WriteFile(file, []byte("one"), 0o644)
	fa, _ := OpenDir(a)
	defer fa.Close()
	ff, _ := OpenRead(file)
	defer ff.Close()
	// The file replaced after it was opened: the same path, another inode.
	os.Remove(file)
	os.WriteFile(file, []byte("one"), 0o644)
	for _, tc := range []struct {
		name string
		fd   *os.File
		path string
		ok   bool
	}{
		{"the directory itself", fa, a, true},
		{"another directory", fa, b, false},
		{"a link to it", fa, filepath.Join(dir, "link"), false},
		{"a path that does not exist", fa, filepath.Join(dir, "none"), false},
		{"a file replaced since", ff, file, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := SameObject(tc.fd, tc.path)
			if tc.ok != (err == nil) {
				t.Fatalf("SameObject = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrNotThatPath) {
				t.Fatalf("error %v is not ErrNotThatPath", err)
			}
		})
	}
}

// A caller in a mount namespace of its own, with another directory
// bind-mounted over the reviewed one, hands over a descriptor whose
// kernel name is the reviewed path: it does not stand for that path.
func TestSameObjectRefusesABindMountInTheCallersNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a mount namespace")
	}
	dir := t.TempDir()
	reviewed, mine := filepath.Join(dir, "reviewed"), filepath.Join(dir, "mine")
	os.Mkdir(reviewed, 0o755)
	os.Mkdir(mine, 0o755)
	got := make(chan *os.File, 1)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends in its namespace
		err := unix.Unshare(unix.CLONE_NEWNS)
		if err == nil {
			err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}
		if err == nil {
			err = unix.Mount(mine, reviewed, "", unix.MS_BIND, "")
		}
		if err != nil {
			errc <- err
			return
		}
		d, err := OpenDir(reviewed)
		if err != nil {
			errc <- err
			return
		}
		got <- d
	}()
	var d *os.File
	select {
	case err := <-errc:
		t.Skipf("no mount namespace here: %v", err)
	case d = <-got:
	}
	defer d.Close()
	name, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(d.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	if name != reviewed {
		t.Fatalf("the kernel names the descriptor %q; the attack needs %q", name, reviewed)
	}
	if err := SameObject(d, name); !errors.Is(err, ErrNotThatPath) {
		t.Fatalf("SameObject(%s) = %v, want ErrNotThatPath", name, err)
	}
}
