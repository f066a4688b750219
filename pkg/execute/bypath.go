package execute

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinks bounds the symbolic links RootOnly follows, as the kernel's
// MAXSYMLINKS does.
const maxLinks = 40

// RootOnly says whether only root can change what path names: every
// directory the kernel walks to reach it, every symbolic link it follows
// on the way, and the file it ends at are owned by root and writable by no
// group or other. Nil when so; otherwise an error naming the first that is
// not. Such a program is executed by its path, as its author expects
// ($0, /proc/self/exe), once its identity is checked against the snapshot
// that was hashed (docs/adr/0060-programs-run-by-their-path.md); the trust
// sudo gives its secure path. A symbolic link's own mode means nothing:
// the directory that holds it is what decides who can replace it.
func RootOnly(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%s is not an absolute path", path)
	}
	if err := rootOwned("/"); err != nil {
		return err
	}
	done := "/"
	rest := components(path)
	links := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			done = filepath.Dir(done)
			continue
		}
		next := filepath.Join(done, c)
		var st unix.Stat_t
		if err := unix.Lstat(next, &st); err != nil {
			return fmt.Errorf("%s: %w", next, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			if links++; links > maxLinks {
				return fmt.Errorf("%s: too many symbolic links", path)
			}
			target, err := os.Readlink(next)
			if err != nil {
				return fmt.Errorf("%s: %w", next, err)
			}
			if filepath.IsAbs(target) {
				done = "/"
			}
			rest = append(components(target), rest...)
		case unix.S_IFDIR:
			if err := judge(next, &st); err != nil {
				return err
			}
			done = next
		case unix.S_IFREG:
			if len(rest) > 0 && strings.Join(rest, "") != "" {
				return fmt.Errorf("%s is not a directory", next)
			}
			return judge(next, &st)
		default:
			return fmt.Errorf("%s is not a regular file", next)
		}
	}
	return fmt.Errorf("%s names a directory, not a program", path)
}

func components(p string) []string { return strings.Split(p, "/") }

func rootOwned(p string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return judge(p, &st)
}

// judge is RootOnly's test of one directory or file.
func judge(p string, st *unix.Stat_t) error {
	if st.Uid != 0 {
		return fmt.Errorf("%s is owned by uid %d, not root", p, st.Uid)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("%s is writable by its group or others (mode %04o)", p, st.Mode&0o7777)
	}
	return nil
}

// Identity is what a file was when it was snapshotted: the same device,
// inode, size and change times later mean the same bytes, for a file only
// root can change (RootOnly).
type Identity struct {
	Dev, Ino     uint64
	Size         int64
	Mtime, Ctime unix.Timespec
}

func identityOf(st *unix.Stat_t) Identity {
	return Identity{Dev: st.Dev, Ino: st.Ino, Size: st.Size, Mtime: st.Mtim, Ctime: st.Ctim}
}

// ErrChanged is what IsAt says of a path that no longer names the file the
// snapshot was taken of.
var ErrChanged = errors.New("the file at the path is not the one that was hashed")

// IsAt checks that path (its symbolic links followed, as execve follows
// them) still names the very file the snapshot was copied from, unchanged
// since: the check before a program is executed by its path.
func (s *Snapshot) IsAt(path string) error {
	if s.source == (Identity{}) {
		return fmt.Errorf("%s: %w (the snapshot does not know its source)", path, ErrChanged)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if identityOf(&st) != s.source {
		return fmt.Errorf("%s: %w", path, ErrChanged)
	}
	return nil
}

// ByPath is the path to execute the program snapshot s was taken of: path
// itself when only root can change it (RootOnly) and it is still the very
// file s was copied from (IsAt), else "" (run the snapshot).
func ByPath(s *Snapshot, path string) string {
	if RootOnly(path) != nil || s.IsAt(path) != nil {
		return ""
	}
	return path
}

// Mode says how a program will be executed: "path" when RootOnly holds
// for it, else "snapshot", with the reason.
func Mode(path string) (mode, why string) {
	if err := RootOnly(path); err != nil {
		return "snapshot", err.Error()
	}
	return "path", "only root can change it or any directory above it"
}
