package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"golang.org/x/sys/unix"
)

// spawned is a command started by spawn and not yet reaped.
type spawned struct {
	cmd            *exec.Cmd
	mu             sync.Mutex
	stdout, stderr bytes.Buffer
	done           chan error
}

var (
	spawnMu sync.Mutex
	// spawns is keyed by spawnKey: scripts run in parallel, in one
	// process, and each has its own names.
	spawns = map[string]*spawned{}
)

// spawnKey names a spawned command within its own script.
func spawnKey(ts *testscript.TestScript, name string) string {
	return ts.Getenv("WORK") + "\x00" + name
}

// cmdSpawn starts a command in the background and returns only once a line
// of its stdout or stderr matches READY: the script then knows the command
// reached that point (a wait that started waiting) before it goes on, so
// what the command reports afterwards is caused by what the script does
// next, not by timing.
//
//	spawn NAME [-stdin FILE] READY-REGEXP PROGRAM ARGS…
func cmdSpawn(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 3 {
		ts.Fatalf("usage: spawn NAME [-stdin FILE] READY-REGEXP PROGRAM ARGS…")
	}
	name, args := args[0], args[1:]
	var stdin io.Reader
	if args[0] == "-stdin" {
		f, err := os.Open(ts.MkAbs(args[1]))
		ts.Check(err)
		stdin, args = f, args[2:]
	}
	ready := regexp.MustCompile(args[0])
	path, err := exec.LookPath(args[1])
	ts.Check(err)
	s := &spawned{cmd: exec.Command(path, args[2:]...), done: make(chan error, 1)}
	s.cmd.Dir = ts.MkAbs(".")
	for _, kv := range []string{"PATH", "HOME", "TMPDIR", "PROD_WRITE_CONFIG", "PROD_WRITE_KEY",
		"PROD_WRITE_SLACK_BOT_TOKEN", "PROD_WRITE_SLACK_SIGNING_SECRET", "PROD_WRITE_GITHUB_TOKEN",
		// dynamo_* scripts: the local servers' credentials (testservers.Env).
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION", "AWS_EC2_METADATA_DISABLED", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"} {
		if strings.HasPrefix(kv, "AWS_") && ts.Getenv(kv) == "" {
			continue // not a dynamo_* script: leave the SDK's defaults alone
		}
		s.cmd.Env = append(s.cmd.Env, kv+"="+ts.Getenv(kv))
	}
	s.cmd.Stdin = stdin
	outR, err := s.cmd.StdoutPipe()
	ts.Check(err)
	errR, err := s.cmd.StderrPipe()
	ts.Check(err)
	lines := make(chan string, 64)
	var wg sync.WaitGroup
	copyLines := func(r io.Reader, buf *bytes.Buffer) {
		defer wg.Done()
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			s.mu.Lock()
			buf.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}
	ts.Check(s.cmd.Start())
	wg.Add(2)
	go copyLines(outR, &s.stdout)
	go copyLines(errR, &s.stderr)
	go func() {
		wg.Wait()
		s.done <- s.cmd.Wait()
		close(lines)
	}()
	spawnMu.Lock()
	spawns[spawnKey(ts, name)] = s
	spawnMu.Unlock()
	ts.Defer(func() { _ = s.cmd.Process.Kill() })
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				ts.Fatalf("spawn %s: exited before %q:\n%s%s", name, args[0], s.stdout.String(), s.stderr.String())
			}
			if ready.MatchString(l) {
				go func() {
					for range lines {
					}
				}()
				return
			}
		case <-timeout:
			ts.Fatalf("spawn %s: no line matched %q in 30 s", name, args[0])
		}
	}
}

// cmdReap waits (at most 60 s) for a spawned command to exit, copies its
// stdout and stderr to the script's, and checks its exit status:
//
//	reap NAME [EXIT-STATUS]
func cmdReap(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: reap NAME [EXIT-STATUS]")
	}
	spawnMu.Lock()
	s := spawns[spawnKey(ts, args[0])]
	delete(spawns, spawnKey(ts, args[0]))
	spawnMu.Unlock()
	if s == nil {
		ts.Fatalf("reap: nothing spawned as %s", args[0])
	}
	var err error
	select {
	case err = <-s.done:
	case <-time.After(60 * time.Second):
		ts.Fatalf("reap %s: still running after 60 s", args[0])
	}
	s.mu.Lock()
	fmt.Fprint(ts.Stdout(), s.stdout.String())
	fmt.Fprint(ts.Stderr(), s.stderr.String())
	s.mu.Unlock()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		ts.Fatalf("reap %s: %v", args[0], err)
	}
	want := "0"
	if len(args) == 2 {
		want = args[1]
	}
	if fmt.Sprint(code) != strings.TrimSpace(want) {
		ts.Fatalf("reap %s: exit status %d, want %s", args[0], code, want)
	}
}

// spawnedAs returns the command spawned as name, still running or exited
// but not yet reaped.
func spawnedAs(ts *testscript.TestScript, name string) *spawned {
	spawnMu.Lock()
	defer spawnMu.Unlock()
	s := spawns[spawnKey(ts, name)]
	if s == nil {
		ts.Fatalf("nothing spawned as %s", name)
	}
	return s
}

// cmdAwaitLine waits until a line of a spawned command's stdout or stderr
// matches REGEXP, at most WITHIN (a Go duration; 60 s if not given): a
// script waits for what a command logged (a service's line for a call)
// rather than for a time, and WITHIN, when given, is a generous bound on
// when it must come.
//
//	awaitline serve 'status: exit 128 .*the client went away' 15s
func cmdAwaitLine(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || len(args) > 3 {
		ts.Fatalf("usage: awaitline NAME REGEXP [WITHIN]")
	}
	within := 60 * time.Second
	if len(args) == 3 {
		d, err := time.ParseDuration(args[2])
		ts.Check(err)
		within = d
	}
	s := spawnedAs(ts, args[0])
	re, err := regexp.Compile("(?m)" + args[1])
	ts.Check(err)
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		s.mu.Lock()
		out := s.stdout.String() + s.stderr.String()
		s.mu.Unlock()
		if re.MatchString(out) {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("awaitline %s: no line matched %q in %s:\n%s", args[0], args[1], within, out)
		}
	}
}

// cmdSpawnKill sends a spawned command SIGKILL (a client that goes away
// without a word), or SIGINT or SIGTERM, waits for its process to exit
// whatever its status, and forgets it. It does not wait for the command's
// stdout and stderr to close: a runner service may still hold them.
//
//	spawnkill NAME [INT|TERM|KILL]
func cmdSpawnKill(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: spawnkill NAME [INT|TERM|KILL]")
	}
	sig := os.Kill
	if len(args) == 2 {
		switch args[1] {
		case "INT":
			sig = os.Interrupt
		case "TERM":
			sig = syscall.SIGTERM
		case "KILL":
		default:
			ts.Fatalf("spawnkill: signal %q: want INT, TERM or KILL", args[1])
		}
	}
	s := spawnedAs(ts, args[0])
	spawnMu.Lock()
	delete(spawns, spawnKey(ts, args[0]))
	spawnMu.Unlock()
	ts.Check(s.cmd.Process.Signal(sig))
	exited := make(chan struct{})
	go func() {
		// WNOWAIT: the process is left for cmd.Wait to reap (ECHILD if
		// it already has).
		var info unix.Siginfo
		for unix.Waitid(unix.P_PID, s.cmd.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
		}
		close(exited)
	}()
	select {
	case <-exited:
	case <-time.After(60 * time.Second):
		ts.Fatalf("spawnkill %s: still running after 60 s", args[0])
	}
}

// cmdSpawnSignal sends a spawned command a signal and returns at once: the
// command is still there to await lines from and to reap (a service asked
// to stop that finishes a run first).
//
//	spawnsignal NAME INT|TERM|HUP
func cmdSpawnSignal(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: spawnsignal NAME INT|TERM|HUP")
	}
	sigs := map[string]os.Signal{"INT": os.Interrupt, "TERM": syscall.SIGTERM, "HUP": syscall.SIGHUP}
	sig, ok := sigs[args[1]]
	if !ok {
		ts.Fatalf("spawnsignal: signal %q: want INT, TERM or HUP", args[1])
	}
	ts.Check(spawnedAs(ts, args[0]).cmd.Process.Signal(sig))
}
