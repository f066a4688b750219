// Package boundary holds what keeps the trust boundary of SPEC §13 when
// prod-write runs with more privilege than its caller: as a binary setuid to
// a dedicated, unprivileged user that owns the state, the journal and the
// runner key (docs/DEPLOYMENT.md).
//
// In that mode three things must hold by mechanism:
//
//   - The policy comes from trusted files only: the configuration, trust
//     policy and registry must be owned by root (or prod-write's effective
//     user) and writable by no one else, along their whole path, so a caller
//     cannot point prod-write at a policy of its own ([CheckTrusted]).
//   - Files the caller names (file parameters, its key) are opened with the
//     caller's own credentials, never the privileged ones, so a caller cannot
//     make prod-write read the runner key for it ([AsCaller]).
//   - The program prod-write executes runs with the caller's credentials
//     ([ChildCredential]): it never inherits the privileged group.
package boundary

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Privileged reports whether the process runs with an effective user or
// group other than its real one (a setuid or setgid binary).
func Privileged() bool {
	return os.Geteuid() != os.Getuid() || os.Getegid() != os.Getgid()
}

var callerMu sync.Mutex

// AsCaller runs fn with the effective user and group set to the real ones,
// then restores them. Outside privileged mode it just runs fn. The change
// applies to every thread of the process (Go's syscall.Setegid uses
// AllThreadsSyscall), and calls are serialised.
func AsCaller(fn func() error) error {
	if !Privileged() {
		return fn()
	}
	callerMu.Lock()
	defer callerMu.Unlock()
	euid, egid := os.Geteuid(), os.Getegid()
	if egid != os.Getgid() {
		if err := syscall.Setegid(os.Getgid()); err != nil {
			return fmt.Errorf("dropping to the caller's group: %w", err)
		}
		defer mustRestore(syscall.Setegid, egid)
	}
	if euid != os.Getuid() {
		if err := syscall.Seteuid(os.Getuid()); err != nil {
			return fmt.Errorf("dropping to the caller's user: %w", err)
		}
		defer mustRestore(syscall.Seteuid, euid)
	}
	return fn()
}

func mustRestore(set func(int) error, id int) {
	if err := set(id); err != nil {
		// Continuing with the wrong credentials could mean writing the
		// journal as the caller; stop instead.
		panic(fmt.Sprintf("prod-write: cannot restore credentials: %v", err))
	}
}

// ChildCredential is the credential the executed program gets: the
// caller's, so it never inherits prod-write's privilege. Nil outside
// privileged mode (the child inherits the caller's credentials anyway).
//
// An unprivileged setuid process's setuid(2) to its real uid changes only
// the effective uid; the saved one is reset to it by the execve that
// follows, so the program cannot regain prod-write's user.
func ChildCredential() *syscall.Credential {
	if !Privileged() {
		return nil
	}
	return &syscall.Credential{
		Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()),
		// setgroups needs CAP_SETGID, which prod-write lacks; the
		// supplementary groups are the caller's already.
		NoSetGroups: true,
	}
}

// UntrustedError is a policy file that someone other than its owner could
// change.
type UntrustedError struct {
	Path   string
	Reason string
}

func (e *UntrustedError) Error() string {
	return fmt.Sprintf("%s cannot be trusted in privileged mode: %s", e.Path, e.Reason)
}

// CheckTrusted checks that path and every directory above it are owned by
// root or by the effective user, and writable by no group or other user, so
// that nobody else can change or replace it.
func CheckTrusted(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	for p := abs; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return &UntrustedError{Path: p, Reason: "cannot read its owner"}
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return &UntrustedError{Path: p, Reason: "is a symbolic link"}
		}
		if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
			return &UntrustedError{Path: p, Reason: fmt.Sprintf("is owned by uid %d, not root", st.Uid)}
		}
		sticky := fi.IsDir() && fi.Mode()&os.ModeSticky != 0
		if fi.Mode().Perm()&0o022 != 0 && !(sticky && p != abs) {
			return &UntrustedError{Path: p, Reason: fmt.Sprintf("mode %04o lets others write it", fi.Mode().Perm())}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}
