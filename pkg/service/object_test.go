package service

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
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

// openInOwnNamespace opens dir on a thread that has a mount namespace of
// its own in which mine is bind-mounted over dir: the descriptor a caller
// in a user namespace of its own would hand over.
func openInOwnNamespace(t *testing.T, mine, dir string) *os.File {
	t.Helper()
	got := make(chan *os.File, 1)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends in its namespace
		err := unix.Unshare(unix.CLONE_NEWNS)
		if err == nil {
			err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}
		if err == nil {
			err = unix.Mount(mine, dir, "", unix.MS_BIND, "")
		}
		if err != nil {
			errc <- err
			return
		}
		d, err := OpenDir(dir)
		if err != nil {
			errc <- err
			return
		}
		got <- d
	}()
	select {
	case err := <-errc:
		t.Skipf("no mount namespace here: %v", err)
	case d := <-got:
		// What readlink of /proc/self/fd/N says depends on the reading
		// thread's namespace (a test's threads differ; the service's do
		// not): the tests name the reviewed path themselves, as the
		// kernel names it to a service in the caller's view.
		t.Cleanup(func() { d.Close() })
		return d
	}
	return nil
}

// asNobody runs f on a thread whose ids are nobody's (65534): a service
// account that may not search root's private directories.
func asNobody(t *testing.T, f func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with its changed ids
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 65534, 65534, 65534); e != 0 {
			errc <- e
			return
		}
		errc <- f()
	}()
	return <-errc
}

// A caller in a mount namespace of its own, with another directory
// bind-mounted over the reviewed one, hands over a descriptor whose
// kernel name is the reviewed path: it does not stand for that path,
// whether or not the service may search its way there. A directory the
// service may not search, opened in the service's own namespace, does.
func TestSameObjectAndMountNamespaces(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a mount namespace")
	}
	dir, err := os.MkdirTemp("", "prod-write-object-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	open := filepath.Join(dir, "open")       // 0755: the service resolves it
	private := filepath.Join(dir, "private") // 0700 root's: nobody cannot search it
	os.Mkdir(open, 0o755)
	os.Mkdir(private, 0o700)
	mine := filepath.Join(dir, "mine")
	os.Mkdir(mine, 0o755)
	var reviewed [2]string
	for i, parent := range []string{open, private} {
		reviewed[i] = filepath.Join(parent, "reviewed")
		os.Mkdir(reviewed[i], 0o755)
	}
	genuine, err := OpenDir(reviewed[1])
	if err != nil {
		t.Fatal(err)
	}
	defer genuine.Close()
	swapped := [2]*os.File{openInOwnNamespace(t, mine, reviewed[0]), openInOwnNamespace(t, mine, reviewed[1])}
	for _, tc := range []struct {
		name   string
		fd     *os.File
		path   string
		nobody bool
		ok     bool
	}{
		{"bind mount over a directory the service resolves", swapped[0], reviewed[0], false, false},
		{"bind mount over a directory the service may not search", swapped[1], reviewed[1], true, false},
		{"a directory the service may not search, opened in its namespace", genuine, reviewed[1], true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := func() error { return SameObject(tc.fd, tc.path) }
			var err error
			if tc.nobody {
				err = asNobody(t, check)
			} else {
				err = check()
			}
			if tc.ok != (err == nil) {
				t.Fatalf("SameObject = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrNotThatPath) {
				t.Fatalf("error %v is not ErrNotThatPath", err)
			}
		})
	}
}
