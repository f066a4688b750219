package service

import (
	"errors"
	"fmt"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// SocketDirMode is the mode serve gives the socket's directory when it
// creates it: every caller may traverse it, and only its owner may add,
// remove or rename an entry (docs/DEPLOYMENT.md, "Without systemd").
const SocketDirMode = 0o755

// UnsafeDirError says why a directory on the way to the socket is refused:
// another account could replace the socket, and a listener of its own
// would receive callers' keys and stdio.
type UnsafeDirError struct {
	Dir    string
	Reason string
	Fix    string
}

func (e *UnsafeDirError) Error() string {
	s := fmt.Sprintf("%s %s: another account could put a listener of its own in the service's place", e.Dir, e.Reason)
	if e.Fix != "" {
		s += "; " + e.Fix
	}
	return s
}

// PrepareSocketDir checks the directory of the socket at path, and creates
// it (SocketDirMode, owned by the account serve runs as) when it is
// missing. The path is configuration, and serve is privileged: every
// directory from / to the socket's must be owned by root or by uid (the
// service's own account) and writable by nobody else, the socket's
// directory without exception, an ancestor unless it is sticky (as /tmp
// is: others may add their own entries there, never rename ours). So no
// other account can make serve create, bind, chmod or chown anything
// outside the directory it checked: it cannot plant a symbolic link or a
// directory of its own in the way (it is refused), nor swap one in after
// the check (it cannot write anything the check passed).
//
// A missing directory whose parent serve cannot write is reported with the
// command that creates it.
func PrepareSocketDir(path string, uid int) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("the socket %s: want an absolute path", path)
	}
	// Each component is opened without following it, in a directory
	// already checked; a symbolic link (/var/run -> /run) is followed by
	// hand, and only when found in such a directory, where no other
	// account can have planted or swap it.
	queue := splitPath(filepath.Dir(filepath.Clean(path)))
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening /: %w", err)
	}
	defer func() { unix.Close(fd) }()
	at := "/"
	if err := checkDir(fd, at, uid, len(queue) == 0); err != nil {
		return err
	}
	for links := 0; len(queue) > 0; {
		name := queue[0]
		queue = queue[1:]
		next := filepath.Join(at, name)
		nfd, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && len(queue) == 0 {
			nfd, err = makeDir(fd, at, name, uid)
		}
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			target, lerr := readlinkat(fd, name)
			if lerr != nil {
				return &UnsafeDirError{Dir: next, Reason: "is not a directory"}
			}
			if links++; links > 40 {
				return fmt.Errorf("the socket's directory: %s: %w", next, unix.ELOOP)
			}
			queue = append(splitPath(target), queue...)
			if filepath.IsAbs(target) {
				rfd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					return fmt.Errorf("opening /: %w", err)
				}
				unix.Close(fd)
				fd, at = rfd, "/"
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("the socket's directory: opening %s: %w", next, err)
		}
		unix.Close(fd)
		fd = nfd
		if name == ".." {
			at = filepath.Dir(at)
		} else {
			at = next
		}
		if err := checkDir(fd, at, uid, len(queue) == 0); err != nil {
			return err
		}
	}
	return nil
}

// splitPath is p's components, without empty ones and ".".
func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// readlinkat reads the symbolic link name in the directory open at fd.
func readlinkat(fd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// checkDir checks the directory open at fd: owned by root or uid, writable
// by nobody else (an ancestor may be sticky instead).
func checkDir(fd int, name string, uid int, socketDir bool) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("the socket's directory: %s: %w", name, err)
	}
	fix := fmt.Sprintf("as root: chown root:root %s && chmod go-w %s, or name a socket under a directory only root or the service may write", name, name)
	if socketDir {
		fix = fmt.Sprintf("as root: chown %s %s && chmod 0755 %s (or remove it and let serve create it)", account(uid), name, name)
	}
	if st.Uid != 0 && int(st.Uid) != uid {
		return &UnsafeDirError{Dir: name, Reason: fmt.Sprintf("is owned by uid %d, neither root nor the service (uid %d)", st.Uid, uid), Fix: fix}
	}
	if st.Mode&0o022 != 0 && (socketDir || st.Mode&unix.S_ISVTX == 0) {
		return &UnsafeDirError{Dir: name, Reason: fmt.Sprintf("is writable by group or others (mode %04o)", st.Mode&0o7777), Fix: fix}
	}
	return nil
}

// account names uid for a message: its name, or the number.
func account(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}

// makeDir creates name in the directory open at parent with SocketDirMode,
// whatever the umask, and opens it.
func makeDir(parent int, at, name string, uid int) (int, error) {
	path := filepath.Join(at, name)
	if err := unix.Mkdirat(parent, name, SocketDirMode); err != nil && !errors.Is(err, unix.EEXIST) {
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS) {
			return -1, fmt.Errorf("serve (%s) cannot create %s: %w; create it as root before starting serve: install -d -o %s -m 0755 %s", account(uid), path, err, account(uid), path)
		}
		return -1, err
	}
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(fd)
	// Only a directory of our own is chmod'ed; one that appeared meanwhile
	// is checked as it is.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil && int(st.Uid) == uid {
		if err := unix.Fchmod(fd, SocketDirMode); err != nil {
			return -1, err
		}
	}
	return unix.Openat(parent, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}
