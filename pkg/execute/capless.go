package execute

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// CaplessStarter starts commands from one OS thread whose ambient
// capability set is empty.
//
// The runner service holds CAP_SETUID and CAP_SETGID (systemd's
// AmbientCapabilities=) so that it can start each program as its
// operation's run_as account. Ambient capabilities survive execve, and a
// change between two non-zero uids does not clear them: a program started
// from an ordinary thread would inherit the power to become any account,
// the agent's and root's included. Capabilities are per thread and fork
// copies only the forking thread's, so forking from a thread whose ambient
// set was cleared gives the program none (a memfd carries no file
// capabilities either). Permitted and effective sets are kept: the service
// still needs them for setuid(2) in the child.
type CaplessStarter struct {
	reqs chan startReq
}

type startReq struct {
	cmd  *exec.Cmd
	done chan error
}

// NewCaplessStarter locks a goroutine to a new thread, clears that
// thread's ambient capabilities, and serves Start from it.
func NewCaplessStarter() (*CaplessStarter, error) {
	s := &CaplessStarter{reqs: make(chan startReq)}
	ready := make(chan error, 1)
	go func() {
		// Never unlocked: when the goroutine ends, the thread ends with
		// it rather than serve others with its changed state.
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
			ready <- fmt.Errorf("clearing ambient capabilities: %w", err)
			return
		}
		// And the inheritable set, which raising ambient capabilities
		// needed: a program that execs a file with inheritable file
		// capabilities would otherwise get them.
		if err := clearInheritable(); err != nil {
			ready <- fmt.Errorf("clearing inheritable capabilities: %w", err)
			return
		}
		ready <- nil
		for r := range s.reqs {
			r.done <- r.cmd.Start()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	return s, nil
}

// clearInheritable empties this thread's inheritable capability set,
// keeping the permitted and effective sets.
func clearInheritable() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	if data[0].Inheritable == 0 && data[1].Inheritable == 0 {
		return nil
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	return unix.Capset(&hdr, &data[0])
}

// Start starts cmd from the capless thread.
func (s *CaplessStarter) Start(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	s.reqs <- startReq{cmd, done}
	return <-done
}
