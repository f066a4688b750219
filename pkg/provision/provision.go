// Package provision writes a runner service host's layout, as
// docs/DEPLOYMENT.md draws it: root's policy (prod-write.toml, trust.toml,
// operations/), the service account's state, keys, bridge secrets and
// credentials directory, and the agent's client configuration. It is what
// `prod-write setup service` runs, as root.
//
// Every path it writes is one an attacker would like to steer, so it
// walks each path one component at a time from the root it was given,
// with openat(2) and O_NOFOLLOW: a symbolic link is followed only in a
// directory no account but root may write (as /var/run is), and refused
// anywhere else; files are created with O_EXCL, then given their owner
// and mode through their own descriptor (never by name, and whatever the
// umask); a directory of the layout that exists must already belong to
// root or to its owner-to-be. It never overwrites: if any file it would
// write exists, it writes nothing and says which.
//
// # Errors
//
// [*ExistsError] lists the files that exist; [*UnsafeError] names a path
// whose owner, mode or kind make writing through it unsafe.
package provision

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Account is a local account: a file's owner-to-be.
type Account struct {
	Name     string
	UID, GID int
}

// Root is uid 0.
var Root = Account{Name: "root"}

// File is one file to write.
type File struct {
	Path  string // absolute, below the root prefix
	Data  []byte
	Owner Account
	Mode  os.FileMode
}

// Dir is one directory of the layout.
type Dir struct {
	Path  string
	Owner Account
	Mode  os.FileMode
}

// Layout is what to write: directories first, in order, then files.
type Layout struct {
	Dirs  []Dir
	Files []File
}

// ExistsError is returned when a file of the layout exists: nothing was
// written.
type ExistsError struct{ Paths []string }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("setup never overwrites, and these exist: %s", strings.Join(e.Paths, ", "))
}

// UnsafeError is a path setup will not write through.
type UnsafeError struct {
	Path   string
	Reason string
}

func (e *UnsafeError) Error() string { return fmt.Sprintf("%s: %s", e.Path, e.Reason) }

// Writer writes a [Layout] below Root, a directory prefix ("/" on a real
// host; a scratch directory in tests). The prefix itself is trusted: the
// operator named it.
type Writer struct {
	Root string
}

// Write checks that no file of l exists, then makes its directories and
// writes its files. It returns [*ExistsError] before writing anything when
// one exists, and [*UnsafeError] when a path goes through a symbolic link
// or a directory another account controls.
func (w *Writer) Write(l Layout) error {
	var exists []string
	for _, f := range l.Files {
		ok, err := w.exists(f.Path)
		if err != nil {
			return err
		}
		if ok {
			exists = append(exists, f.Path)
		}
	}
	if len(exists) > 0 {
		return &ExistsError{Paths: exists}
	}
	// Every directory's way is checked before anything is made, so that a
	// refusal leaves nothing behind.
	for _, d := range l.Dirs {
		fd, err := w.walk(d.Path, &d, false)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return err
		}
		unix.Close(fd)
	}
	for _, d := range l.Dirs {
		fd, err := w.openDir(d.Path, &d)
		if err != nil {
			return err
		}
		unix.Close(fd)
	}
	for _, f := range l.Files {
		if err := w.writeFile(f); err != nil {
			return err
		}
	}
	return nil
}

// components splits an absolute path below the prefix into its names.
func components(p string) ([]string, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p {
		return nil, &UnsafeError{Path: p, Reason: "not a clean absolute path"}
	}
	var names []string
	for _, n := range strings.Split(p, "/") {
		if n != "" {
			names = append(names, n)
		}
	}
	return names, nil
}

// Exists reports whether p exists below the root (as anything, a
// dangling link included), walking its parents as Write does, without
// creating them.
func (w *Writer) Exists(p string) (bool, error) { return w.exists(p) }

func (w *Writer) exists(p string) (bool, error) {
	fd, err := w.walk(filepath.Dir(p), nil, false)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	err = unix.Fstatat(fd, filepath.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("checking %s: %w", p, err)
	}
	return true, nil
}

// openDir opens directory p, creating what is missing of it: its last
// component as d says (owner and mode set, or checked and set when it
// exists), the others root:root 0755.
func (w *Writer) openDir(p string, d *Dir) (int, error) { return w.walk(p, d, true) }

func (w *Writer) walk(p string, last *Dir, create bool) (int, error) {
	names, err := components(p)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Open(w.Root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening the root %s: %w", w.Root, err)
	}
	at := "/"
	for i, name := range names {
		here := filepath.Join(at, name)
		want := &Dir{Path: here, Owner: Root, Mode: 0o755}
		isLast := i == len(names)-1
		if isLast && last != nil {
			want = last
		}
		next, err := w.step(fd, at, name, want, create, isLast && last != nil)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd, at = next, here
	}
	return fd, nil
}

// step opens name in the directory fd (at, for messages), creating it
// when create is set, and, for a directory of the layout (own), sets its
// owner and mode.
func (w *Writer) step(fd int, at, name string, want *Dir, create, own bool) (int, error) {
	here := filepath.Join(at, name)
	var parent unix.Stat_t
	if err := unix.Fstat(fd, &parent); err != nil {
		return -1, fmt.Errorf("checking %s: %w", at, err)
	}
	made := false
	next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) && create {
		if err := unix.Mkdirat(fd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, fmt.Errorf("creating %s: %w", here, err)
		} else if err == nil {
			made = true
		}
		next, err = unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		var st unix.Stat_t
		if lerr := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); lerr != nil || st.Mode&unix.S_IFMT != unix.S_IFLNK {
			return -1, &UnsafeError{Path: here, Reason: "not a directory"}
		}
		// Only root could have made this link: follow it, as the
		// kernel would.
		if parent.Uid != 0 || parent.Mode&0o022 != 0 || own {
			return -1, &UnsafeError{Path: here, Reason: "a symbolic link, in a directory another account may write (or where a directory of the layout belongs); setup follows none: remove it, or name the directory it points to"}
		}
		next, err = unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return -1, fmt.Errorf("opening %s: %w", here, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(next, &st); err != nil {
		unix.Close(next)
		return -1, fmt.Errorf("checking %s: %w", here, err)
	}
	switch {
	case made && st.Uid != uint32(os.Geteuid()):
		// Swapped for another account's between mkdir and open.
		unix.Close(next)
		return -1, &UnsafeError{Path: here, Reason: "replaced by another account's directory while setup made it"}
	case !made && st.Uid != 0 && st.Uid != uint32(want.Owner.UID) && (own || st.Mode&0o022 != 0):
		unix.Close(next)
		return -1, &UnsafeError{Path: here, Reason: fmt.Sprintf("exists and belongs to uid %d, neither root nor %s", st.Uid, want.Owner.Name)}
	case !made && !own && st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
		unix.Close(next)
		return -1, &UnsafeError{Path: here, Reason: fmt.Sprintf("mode %04o: others may replace what setup writes below it", st.Mode&0o7777)}
	}
	if (made || own) && create {
		if err := unix.Fchown(next, want.Owner.UID, want.Owner.GID); err != nil {
			unix.Close(next)
			return -1, fmt.Errorf("chown %s to %s: %w", here, want.Owner.Name, err)
		}
		if err := unix.Fchmod(next, uint32(want.Mode.Perm())); err != nil {
			unix.Close(next)
			return -1, fmt.Errorf("chmod %s: %w", here, err)
		}
	}
	if made {
		if err := unix.Fsync(fd); err != nil {
			unix.Close(next)
			return -1, fmt.Errorf("syncing %s: %w", at, err)
		}
	}
	return next, nil
}

// writeFile creates f exclusively in its directory, sets its owner and
// mode through its descriptor, writes and fsyncs it and its directory.
func (w *Writer) writeFile(f File) error {
	if len(f.Data) == 0 {
		return &UnsafeError{Path: f.Path, Reason: "setup never writes an empty file"}
	}
	dir, err := w.walk(filepath.Dir(f.Path), nil, true)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	fd, err := unix.Openat(dir, filepath.Base(f.Path), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) {
		return &ExistsError{Paths: []string{f.Path}}
	}
	if err != nil {
		return fmt.Errorf("creating %s: %w", f.Path, err)
	}
	file := os.NewFile(uintptr(fd), f.Path)
	defer file.Close()
	if err := file.Chown(f.Owner.UID, f.Owner.GID); err != nil {
		return fmt.Errorf("chown %s to %s: %w", f.Path, f.Owner.Name, err)
	}
	if err := file.Chmod(f.Mode.Perm()); err != nil {
		return fmt.Errorf("chmod %s: %w", f.Path, err)
	}
	if n, err := file.Write(f.Data); err != nil || n != len(f.Data) {
		return fmt.Errorf("writing %s: %w", f.Path, errors.Join(err, errShort(n, len(f.Data))))
	}
	if err := file.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", f.Path, err)
	}
	if err := file.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", f.Path, err)
	}
	if err := unix.Fsync(dir); err != nil {
		return fmt.Errorf("syncing %s: %w", filepath.Dir(f.Path), err)
	}
	return nil
}

func errShort(n, want int) error {
	if n == want {
		return nil
	}
	return fmt.Errorf("wrote %d of %d bytes", n, want)
}
