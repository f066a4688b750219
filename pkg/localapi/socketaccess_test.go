package localapi

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/service"
)

// A caller refused the socket for permission is told which group may
// connect and what its account lacks; any other failure to connect still
// says the service is not running.
func TestUnreachableRefusal(t *testing.T) {
	const sock = "/run/prod-write/prod-write.sock"
	eacces := &os.SyscallError{Syscall: "connect", Err: syscall.EACCES}
	for _, tc := range []struct {
		name   string
		err    error
		access socketAccess
		reason []string
		needs  []string
	}{
		{
			name:   "not in the group",
			err:    eacces,
			access: socketAccess{mode: 0o660, gid: 990, group: "prod-write-callers", account: "agent"},
			reason: []string{sock, "permission denied", "only group prod-write-callers may connect", "agent is not a member"},
			needs:  []string{"membership of group prod-write-callers for agent", "sudo usermod -aG prod-write-callers agent", "then a new login"},
		},
		{
			name:   "added, not logged in again",
			err:    eacces,
			access: socketAccess{mode: 0o660, gid: 990, group: "prod-write-callers", account: "agent", member: true},
			reason: []string{"only group prod-write-callers may connect", "agent is a member, but this session started before it was added"},
			needs:  []string{"a new login of agent", "newgrp prod-write-callers"},
		},
		{
			name:   "in the group, mode without it",
			err:    eacces,
			access: socketAccess{mode: 0o600, gid: 990, group: "prod-write-callers", account: "agent", held: true, member: true},
			reason: []string{"its mode 0600 does not let its group, prod-write-callers"},
			needs:  []string{`socket_mode = "0660"`},
		},
		{
			name:   "a directory on the way",
			err:    eacces,
			access: socketAccess{account: "agent", statErr: &os.PathError{Op: "stat", Path: sock, Err: syscall.EACCES}},
			reason: []string{"this account, agent, cannot reach the socket"},
			needs:  []string{"search permission for agent on the directories above " + sock},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.access.refusal(sock, tc.err)
			if r.Code != ServiceUnavailable {
				t.Errorf("code %s, want %s", r.Code, ServiceUnavailable)
			}
			for _, w := range tc.reason {
				if !strings.Contains(r.Reason, w) {
					t.Errorf("reason %q lacks %q", r.Reason, w)
				}
			}
			needs := strings.Join(r.Missing, "; ")
			for _, w := range tc.needs {
				if !strings.Contains(needs, w) {
					t.Errorf("missing %q lacks %q", needs, w)
				}
			}
			if strings.Contains(needs, "a running prod-write serve") {
				t.Errorf("missing %q blames a service that is not running", needs)
			}
		})
	}
	// Not a permission: the service is not there, as before.
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ENOENT} {
		r := unreachableRefusal(sock, &os.SyscallError{Syscall: "connect", Err: errno})
		if !strings.HasPrefix(r.Reason, "cannot reach the runner service at "+sock) || len(r.Missing) != 1 || r.Missing[0] != "a running prod-write serve (docs/DEPLOYMENT.md)" {
			t.Errorf("%v: %q, missing %q", errno, r.Reason, r.Missing)
		}
	}
}

// End to end on a real socket: owned by a group this process is not in,
// mode 0660, connected to with file system credentials that are neither
// its owner's nor root's, the kernel's EACCES comes back through
// service.Dial as a refusal that names the socket's group.
func TestUnreachableRefusalOfARealSocket(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give the socket another owner and group")
	}
	// Not under t.TempDir(), whose parent only root may search: the
	// socket's own mode must be what refuses.
	dir, err := os.MkdirTemp("", "socketaccess-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "prod-write.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const nogroup = 65534
	if err := os.Chown(sock, nogroup, nogroup); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o660); err != nil {
		t.Fatal(err)
	}
	err = dialAsAnother(sock)
	if !errors.Is(err, syscall.EACCES) {
		t.Fatalf("connect as another account: %v, want EACCES", err)
	}
	a := lookSocketAccess(sock)
	if a.gid != nogroup || a.mode != 0o660 || a.held || a.group == "" {
		t.Fatalf("socket access %+v, want gid %d, mode 0660, not held", a, nogroup)
	}
	// As CallService hands it on (service.UnreachableError's Err).
	r := unreachableRefusal(sock, errors.Unwrap(err))
	if want := "only group " + a.group + " may connect"; !strings.Contains(r.Reason, want) || !strings.Contains(r.Reason, "permission denied") {
		t.Errorf("reason %q, want %q", r.Reason, want)
	}
	if _, ok := refusal.As(r); !ok {
		t.Error("not a refusal")
	}
	// The socket's mode was what refused: open to others, it connects.
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := dialAsAnother(sock); err != nil {
		t.Errorf("connect to a socket others may write: %v", err)
	}
}

// dialAsAnother connects to sock with file system credentials that are
// neither root's nor the socket's owner's, on a thread of its own that is
// dropped afterwards: the file system uid and gid are a thread's, and
// taking them from root drops its power to override permissions.
func dialAsAnother(sock string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Setfsgid(54321); err != nil {
			errc <- err
			return
		}
		if err := unix.Setfsuid(54321); err != nil {
			errc <- err
			return
		}
		c, err := service.Dial(sock)
		if err == nil {
			c.Close()
		}
		errc <- err
	}()
	return <-errc
}
