// Package execute runs one approved program exactly as it was planned.
//
// Approval binds bytes, not names, so nothing here trusts a path after it has
// been hashed: the program is executed from the very snapshot that was hashed
// (as sudo's fdexec does since CVE-2015-8239) and file parameters reach it as
// sealed snapshots, so replacing the binary or a file after the check changes
// nothing. There is never a shell, so no parameter is ever parsed as shell
// syntax, and the environment is the plan's and nothing else, so nothing like
// LD_PRELOAD or BASH_ENV leaks in from whoever runs prod-write.
//
// A program only root can change (RootOnly) is executed by its path instead,
// once its identity is checked against the snapshot (Spec.Path), so that a
// wrapper that finds itself through $0 runs as its author expects
// (docs/adr/0060-programs-run-by-their-path.md).
//
// Limits worth knowing: a "#!" interpreter (whose hash the plan binds), the
// dynamic loader and shared libraries are opened by path when the program
// starts; they are not part of the snapshot. A program run from its
// snapshot sees /proc/self/exe as a memfd, and a script sees $0 as
// /proc/self/fd/3.
package execute

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// programPath is how the child names its descriptor 3, the program snapshot.
// exec.Cmd hands an absolute Path to execve untouched: it neither looks it up
// nor stats it in the parent, where it would name some other descriptor. The
// descriptor stays open across execve, so a "#!" interpreter can open the
// script by this name too.
const programPath = "/proc/self/fd/3"

// firstFileFD is the child's descriptor of Spec.Files[0]; 0-2 are stdio and 3
// is the program.
const firstFileFD = 4

// drainGrace bounds how long Run keeps reading output after a timeout kill: a
// process that left the program's group (setsid) can hold the pipes open for
// ever, and the timeout is a promise that Run comes back.
const drainGrace = time.Second

// Spec is one execution, fully resolved.
type Spec struct {
	Program *Snapshot // the executable's snapshot; it is executed, not the path, unless Path is set
	// Path, when set, is executed instead of the snapshot: a program only
	// root can change (RootOnly), which Program.IsAt says is still the
	// file that was hashed (docs/adr/0060-programs-run-by-their-path.md).
	// It runs as its author expects: $0 and /proc/self/exe are its path.
	Path  string
	Argv  []string    // argv as the program sees it; Argv[0] is the resolved absolute path, for display
	Env   []string    // the whole environment, "NAME=value"; nothing is inherited
	Dir   string      // working directory
	Files []*Snapshot // file parameters; Files[i] is visible to the child at FilePath(i)

	// Timeout of 0 means none. On expiry the whole process group gets
	// SIGKILL, so helpers the program started die with it.
	Timeout time.Duration

	// Stdin may be nil, meaning /dev/null. An *os.File is handed to the
	// program as is; any other reader is fed through a pipe, and Run does not
	// wait for it to reach EOF once the program is gone.
	Stdin io.Reader
	// Output is copied live to Stdout and Stderr (either may be nil) and
	// hashed. Writes to them never overlap, so they may be the same writer.
	Stdout, Stderr io.Writer

	// Signals, if set, are forwarded to the program's process group. It has
	// a group of its own so that a timeout can kill all of it; that group is
	// not the terminal's foreground group, so a terminal's ^C does not reach
	// it except through here (and a read from the terminal stops it with
	// SIGTTIN).
	Signals <-chan os.Signal

	// Started, if set, is called with the child's pid right after it starts
	// (a failpoint hook).
	Started func(pid int)

	// Credential, if set, is what the program runs as: under the runner
	// service, the operation's run_as account (docs/DEPLOYMENT.md).
	Credential *syscall.Credential

	// Start, if set, starts the command instead of cmd.Start: the runner
	// service forks on a thread of its own whose ambient capabilities are
	// cleared (see [CaplessStarter]).
	Start func(*exec.Cmd) error
}

// FilePath returns the path by which the child opens file snapshot i.
func FilePath(i int) string {
	return "/dev/fd/" + strconv.Itoa(firstFileFD+i)
}

// Stream is the size and digest of everything the program wrote to one
// output.
type Stream struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Result is how the program ended.
type Result struct {
	// ExitCode is the status prod-write should exit with: the program's own,
	// 128+N when signal N killed it (as shells report it), 124 on timeout (as
	// timeout(1) does).
	ExitCode int           `json:"exit_code"`
	Signal   string        `json:"signal,omitempty"` // e.g. "SIGKILL", when a signal ended the program
	TimedOut bool          `json:"timed_out,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	Stdout   Stream        `json:"stdout"`
	Stderr   Stream        `json:"stderr"`
	// Error describes what went wrong after the program started (copying
	// its output). The program ran regardless, so this is part of the result
	// rather than a returned error that would lose it.
	Error string `json:"error,omitempty"`
}

// Run starts the program and waits for it and for its output. It returns an
// error only when the program could not be started; however the program
// ends, that is a Result.
//
// Without a Timeout, Run waits until every process holding the program's
// output open has closed it, as a shell pipeline would.
func Run(spec Spec) (*Result, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("execute: empty argv")
	}
	name := spec.Argv[0]
	if err := spec.check(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}

	var toClose []*os.File
	defer func() {
		for _, f := range toClose {
			f.Close()
		}
	}()

	extra := make([]*os.File, 0, 1+len(spec.Files))
	for _, s := range append([]*Snapshot{spec.Program}, spec.Files...) {
		// The child shares each descriptor's offset with us, and a snapshot
		// may already have been read: every run starts at byte 0.
		if _, err := s.File.Seek(0, io.SeekStart); err != nil {
			return nil, fmt.Errorf("starting %s: rewinding %s: %w", name, s.File.Name(), err)
		}
		extra = append(extra, s.File)
	}

	var mu sync.Mutex
	stdout, err := newCapture("stdout", spec.Stdout, &mu)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	toClose = append(toClose, stdout.r, stdout.w)
	stderr, err := newCapture("stderr", spec.Stderr, &mu)
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	toClose = append(toClose, stderr.r, stderr.w)

	env := spec.Env
	if env == nil {
		env = []string{} // exec.Cmd inherits our environment when Env is nil
	}
	path := programPath
	if spec.Path != "" {
		path = spec.Path
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        spec.Argv,
		Env:         env,
		Dir:         spec.Dir,
		Stdout:      stdout.w,
		Stderr:      stderr.w,
		ExtraFiles:  extra,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Credential: spec.Credential},
	}
	var feed func()
	var stdinR, stdinW *os.File
	switch in := spec.Stdin.(type) {
	case nil:
		// exec.Cmd opens /dev/null.
	case *os.File:
		cmd.Stdin = in
	default:
		// Our own pipe rather than exec.Cmd's: its Wait would block until
		// the reader reached EOF, even long after the program exited.
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("starting %s: %w", name, err)
		}
		toClose = append(toClose, r, w)
		cmd.Stdin, stdinR, stdinW = r, r, w
		feed = func() {
			io.Copy(w, in)
			w.Close()
		}
	}

	start := spec.Start
	if start == nil {
		start = (*exec.Cmd).Start
	}
	begin := time.Now()
	if err := start(cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	pid := cmd.Process.Pid
	// The child has its own copies; ours would keep its pipes open after
	// it is gone.
	stdout.w.Close()
	stderr.w.Close()
	if stdinR != nil {
		stdinR.Close()
	}
	if feed != nil {
		go feed()
	}

	var timeout <-chan time.Time
	if spec.Timeout > 0 {
		t := time.NewTimer(spec.Timeout)
		defer t.Stop()
		timeout = t.C
	}

	var copiers sync.WaitGroup
	copiers.Go(stdout.copy)
	copiers.Go(stderr.copy)
	drainedC := make(chan struct{})
	go func() {
		copiers.Wait()
		close(drainedC)
	}()
	exitedC := make(chan struct{})
	go func() {
		waitExited(pid)
		close(exitedC)
	}()

	if spec.Started != nil {
		spec.Started(pid)
	}

	// Until cmd.Wait below, the child is at worst a zombie, so its pid, which
	// is its group's id, cannot be reused: signalling -pid in this loop can
	// only reach the program's own processes.
	timedOut := false
	var killErrs []string
	signals := spec.Signals
	exited, drained := exitedC, drainedC
	for exited != nil || drained != nil {
		select {
		case <-exited:
			exited = nil
		case <-drained:
			drained = nil
		case <-timeout:
			timeout = nil
			timedOut = true
			if err := unix.Kill(-pid, unix.SIGKILL); err != nil {
				// Never claim a kill that did not happen (a runner
				// service without CAP_KILL gets EPERM for another
				// account's processes).
				killErrs = append(killErrs, fmt.Sprintf("killing the program's group on timeout: %v", err))
			}
			deadline := time.Now().Add(drainGrace)
			stdout.r.SetReadDeadline(deadline)
			stderr.r.SetReadDeadline(deadline)
		case sig, ok := <-signals:
			if !ok {
				signals = nil
				continue
			}
			if s, ok := sig.(syscall.Signal); ok {
				if err := unix.Kill(-pid, s); err != nil && err != unix.ESRCH {
					killErrs = append(killErrs, fmt.Sprintf("forwarding %v: %v", s, err))
				}
			}
		}
	}
	if stdinW != nil {
		stdinW.Close()
	}
	cmd.Wait() // reaps; a non-zero status is read from ProcessState below
	duration := time.Since(begin)
	if cmd.ProcessState == nil {
		return nil, fmt.Errorf("waiting for %s: no exit status", name)
	}

	res := &Result{
		Duration: duration,
		Stdout:   stdout.stream(),
		Stderr:   stderr.stream(),
	}
	ws := cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Exited():
		res.ExitCode = ws.ExitStatus()
	case ws.Signaled():
		res.ExitCode = 128 + int(ws.Signal())
		res.Signal = unix.SignalName(ws.Signal())
		if res.Signal == "" {
			res.Signal = ws.Signal().String()
		}
	}
	if timedOut && len(killErrs) == 0 {
		res.TimedOut = true
		res.ExitCode = 124
	}
	problems := killErrs
	for _, c := range []*capture{stdout, stderr} {
		problems = append(problems, c.problems()...)
	}
	res.Error = strings.Join(problems, "; ")
	return res, nil
}

// check refuses a spec whose environment exec.Cmd would silently rewrite
// (it drops duplicates and empty entries), so the child's environment is
// exactly the planned one. Messages name variables, never values: values
// may be secrets.
func (s *Spec) check() error {
	if s.Program == nil || s.Program.File == nil {
		return errors.New("no program snapshot")
	}
	for i, f := range s.Files {
		if f == nil || f.File == nil {
			return fmt.Errorf("file snapshot %d is missing", i)
		}
	}
	seen := make(map[string]bool, len(s.Env))
	for i, kv := range s.Env {
		k, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || k == "":
			return fmt.Errorf("environment entry %d is not NAME=value", i)
		case strings.IndexByte(kv, 0) >= 0:
			return fmt.Errorf("environment variable %q contains a NUL byte", k)
		case seen[k]:
			return fmt.Errorf("environment variable %q is set twice", k)
		}
		seen[k] = true
	}
	return nil
}

// waitExited returns once pid has exited, without reaping it. It waits on
// the process's pidfd through Go's poller, so the goroutine parks and holds
// no thread or P while the program runs: a blocking waitid(2) held one in a
// system call for the program's whole life, which the runtime's monitor
// polled every 20 µs to take back (the service's CPU per run, 6.2 → 5.8 ms
// measured; docs/adr/0057-a-small-run-client.md). A kernel without pidfds
// (before 5.3) waits as before.
func waitExited(pid int) {
	if fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK); err == nil {
		f := os.NewFile(uintptr(fd), "pidfd")
		defer f.Close()
		if rc, err := f.SyscallConn(); err == nil {
			var werr error
			err = rc.Read(func(fd uintptr) bool {
				// Readable is exited; asked without waiting, so a
				// wake-up that is not the exit waits again. Linux
				// sets si_signo (SIGCHLD) only when it reports a
				// child. EINTR is asked again here, never waited on:
				// the poller is edge-triggered, and an exit already
				// seen would not wake it a second time.
				var info unix.Siginfo
				for {
					werr = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
					if werr != unix.EINTR {
						return werr != nil || info.Signo != 0
					}
				}
			})
			if err == nil && werr == nil {
				return
			}
		}
	}
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			return
		}
	}
}

// capture drains one of the program's output pipes into the caller's writer
// live, counting and hashing every byte the program wrote, including bytes
// the writer refused: the record describes the program's output, not what a
// terminal happened to accept. Draining goes on after a write error so the
// program is never blocked or killed by SIGPIPE because of our side.
type capture struct {
	name     string
	r, w     *os.File // w is the child's end
	dst      io.Writer
	mu       *sync.Mutex
	sum      hash.Hash
	size     int64
	writeErr error
	readErr  error
}

func newCapture(name string, dst io.Writer, mu *sync.Mutex) (*capture, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	return &capture{name: name, r: r, w: w, dst: dst, mu: mu, sum: sha256.New()}, nil
}

// captureBuffers are reused across runs (the runner service makes many).
var captureBuffers = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func (c *capture) copy() {
	bp := captureBuffers.Get().(*[]byte)
	defer captureBuffers.Put(bp)
	buf := *bp
	for {
		n, err := c.r.Read(buf)
		if n > 0 {
			c.sum.Write(buf[:n])
			c.size += int64(n)
			if c.dst != nil && c.writeErr == nil {
				c.mu.Lock()
				_, c.writeErr = c.dst.Write(buf[:n])
				c.mu.Unlock()
			}
		}
		if err != nil {
			if err != io.EOF {
				c.readErr = err
			}
			return
		}
	}
}

func (c *capture) stream() Stream {
	return Stream{Size: c.size, SHA256: "sha256:" + hex.EncodeToString(c.sum.Sum(nil))}
}

func (c *capture) problems() []string {
	var p []string
	if c.writeErr != nil {
		p = append(p, fmt.Sprintf("%s: copying output: %v (size and digest still cover all of it)", c.name, c.writeErr))
	}
	switch {
	case errors.Is(c.readErr, os.ErrDeadlineExceeded):
		p = append(p, fmt.Sprintf("%s: still held open %v after the timeout kill, by a process outside the program's group; output after that was not read", c.name, drainGrace))
	case c.readErr != nil:
		p = append(p, fmt.Sprintf("%s: reading output: %v", c.name, c.readErr))
	}
	return p
}
