package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// measureEnv names the file a measuring child of the bench writes its
// child's wall time and peak memory to.
//
// A child's peak memory is not what the bench can read of it directly.
// Go starts a child with vfork (CLONE_VM): at its exec the kernel records
// the high-water mark of the memory it shared, the bench's own, as the
// child's ru_maxrss. A bench that has just generated a million receipts
// made every child look as large as itself (161 MB where replay used 80).
// So the bench runs each measured command under a fresh copy of itself,
// small, which runs the command and reports what wait4 says of it.
const measureEnv = "PROD_WRITE_BENCH_MEASURE"

// measureChild runs os.Args[1:] as a measuring child (measureEnv set) and
// exits with the command's status.
func measureChild(out string) {
	cmd := exec.Command(os.Args[1], os.Args[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, measureEnv+"=") })
	t := time.Now()
	err := cmd.Run()
	el := time.Since(t)
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		fmt.Fprintln(os.Stderr, "prod-write-bench:", err)
		os.Exit(70)
	}
	rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss // KiB on Linux
	if err := os.WriteFile(out, fmt.Appendf(nil, "%d %d\n", el.Nanoseconds(), rss), 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "prod-write-bench:", err)
		os.Exit(70)
	}
	os.Exit(cmd.ProcessState.ExitCode())
}

// measured runs cmd (not started) under a measuring child, and returns
// the command's own wall time and peak memory (KiB).
func measured(cmd *exec.Cmd) (time.Duration, int64, error) {
	f, err := os.CreateTemp("", "prod-write-bench-measure-*")
	if err != nil {
		return 0, 0, err
	}
	f.Close()
	defer os.Remove(f.Name())
	self, err := os.Executable()
	if err != nil {
		return 0, 0, err
	}
	cmd.Args = append([]string{self}, append([]string{cmd.Path}, cmd.Args[1:]...)...)
	cmd.Path = self
	if cmd.Env == nil {
		cmd.Env = os.Environ()
	}
	cmd.Env = append(cmd.Env, measureEnv+"="+f.Name())
	if err := cmd.Run(); err != nil {
		return 0, 0, err
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return 0, 0, err
	}
	fields := strings.Fields(string(b))
	if len(fields) != 2 {
		return 0, 0, fmt.Errorf("the measuring child wrote %q", b)
	}
	ns, err1 := strconv.ParseInt(fields[0], 10, 64)
	rss, err2 := strconv.ParseInt(fields[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, err
	}
	return time.Duration(ns), rss, nil
}
