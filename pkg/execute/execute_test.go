package execute

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// snap snapshots path and closes the snapshot when the test ends.
func snap(t *testing.T, path string, exec bool) *Snapshot {
	t.Helper()
	s, err := TakeSnapshot(path, -1, exec, nil)
	if err != nil {
		t.Fatalf("TakeSnapshot(%s): %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func writeFile(t *testing.T, path string, data string, perm os.FileMode) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), perm); err != nil {
		t.Fatal(err)
	}
	return path
}

// run runs spec and fails the test if the program could not be started.
func run(t *testing.T, spec Spec) (res *Result, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	if spec.Stdout == nil {
		spec.Stdout = &out
	}
	if spec.Stderr == nil {
		spec.Stderr = &errb
	}
	res, err := Run(spec)
	if err != nil {
		t.Fatalf("Run(%q): %v", spec.Argv, err)
	}
	return res, out.String(), errb.String()
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// alive reports whether pid is a live process. A killed process whose
// parent is gone may linger as a zombie if PID 1 does not reap (as in some
// containers); it is dead all the same.
func alive(pid int) bool {
	if unix.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}

func waitDead(t *testing.T, pid int) {
	t.Helper()
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if !alive(pid) {
			return
		}
	}
	t.Errorf("process %d is still alive", pid)
}

func firstLinePID(t *testing.T, out string) int {
	t.Helper()
	line, _, _ := strings.Cut(out, "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		t.Fatalf("no pid on the first line of %q", out)
	}
	return pid
}

func TestShellMetacharactersReachProgramLiterally(t *testing.T) {
	printf := snap(t, "/usr/bin/printf", true)
	for _, arg := range []string{
		"x; touch pwned",
		"$(touch pwned)",
		"`touch pwned`",
		"a\ntouch pwned",
		"| touch pwned",
		"&& touch pwned",
		"> pwned",
		`'"\`,
		"*",
		"$HOME ${IFS}",
		"",
		"\xff\xfe not utf-8",
	} {
		t.Run(fmt.Sprintf("%q", arg), func(t *testing.T) {
			dir := t.TempDir()
			res, out, _ := run(t, Spec{
				Program: printf,
				Argv:    []string{"/usr/bin/printf", `%s\000`, arg, "next"},
				Dir:     dir,
			})
			if res.ExitCode != 0 {
				t.Fatalf("exit code %d", res.ExitCode)
			}
			if want := arg + "\x00next\x00"; out != want {
				t.Errorf("program saw %q, want %q", out, want)
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				t.Errorf("a shell ran: %s was created", e.Name())
			}
		})
	}
}

func TestArgvZeroIsSpecArgv(t *testing.T) {
	res, out, _ := run(t, Spec{
		Program: snap(t, "/bin/sh", true),
		Argv:    []string{"/opt/tools/deploy", "-c", `printf %s "$0"`},
	})
	if res.ExitCode != 0 || out != "/opt/tools/deploy" {
		t.Errorf("exit %d, $0 = %q; want 0, %q", res.ExitCode, out, "/opt/tools/deploy")
	}
}

func TestEnvironmentIsExactlySpecEnv(t *testing.T) {
	dir := t.TempDir()
	evil := writeFile(t, filepath.Join(dir, "evil.sh"), "touch "+filepath.Join(dir, "pwned")+"\n", 0o755)
	t.Setenv("LD_PRELOAD", filepath.Join(dir, "evil.so"))
	t.Setenv("BASH_ENV", evil)
	t.Setenv("ENV", evil)
	t.Setenv("PATH", "/evil")
	t.Setenv("IFS", "x")
	envProg := snap(t, "/usr/bin/env", true)
	for _, tc := range []struct {
		name string
		env  []string
		want string
	}{
		{"one variable", []string{"A=1"}, "A=1\n"},
		{"empty", []string{}, ""},
		{"nil inherits nothing either", nil, ""},
		{"order kept", []string{"Z=1", "A=2=3", "EMPTY="}, "Z=1\nA=2=3\nEMPTY=\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, out, errOut := run(t, Spec{Program: envProg, Argv: []string{"/usr/bin/env"}, Env: tc.env})
			if res.ExitCode != 0 || out != tc.want || errOut != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 0, %q, empty", res.ExitCode, out, errOut, tc.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
		t.Error("BASH_ENV/ENV script ran")
	}
}

func TestEnvironmentThatWouldBeRewrittenIsRefused(t *testing.T) {
	prog := snap(t, "/usr/bin/env", true)
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"duplicate", []string{"TOKEN=s3cret", "TOKEN=other"}},
		{"no equals sign", []string{"s3cret"}},
		{"empty name", []string{"=s3cret"}},
		{"empty entry", []string{""}},
		{"NUL byte", []string{"TOKEN=s3\x00cret"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := false
			_, err := Run(Spec{
				Program: prog, Argv: []string{"/usr/bin/env"}, Env: tc.env,
				Started: func(int) { started = true },
			})
			if err == nil || started {
				t.Fatalf("Run started the program (err %v)", err)
			}
			if strings.Contains(err.Error(), "s3") {
				t.Errorf("error leaks a value: %v", err)
			}
		})
	}
}

func TestProgramReplacedAfterSnapshotRunsSnapshot(t *testing.T) {
	const newScript = "#!/bin/sh\necho new\n"
	for _, tc := range []struct {
		name     string
		original func(path string)
		argv     []string
		replace  func(t *testing.T, path string)
	}{
		{
			name:     "script overwritten in place",
			original: func(p string) { writeFile(t, p, "#!/bin/sh\necho old\n", 0o755) },
			replace:  func(t *testing.T, p string) { writeFile(t, p, newScript, 0o755) },
		},
		{
			name:     "script renamed over",
			original: func(p string) { writeFile(t, p, "#!/bin/sh\necho old\n", 0o755) },
			replace: func(t *testing.T, p string) {
				writeFile(t, p+".new", newScript, 0o755)
				if err := os.Rename(p+".new", p); err != nil {
					t.Fatal(err)
				}
			},
		},
		{
			name: "binary renamed over",
			original: func(p string) {
				b, err := os.ReadFile("/bin/echo")
				if err != nil {
					t.Fatal(err)
				}
				writeFile(t, p, string(b), 0o755)
			},
			argv: []string{"old"},
			replace: func(t *testing.T, p string) {
				writeFile(t, p+".new", newScript, 0o755)
				if err := os.Rename(p+".new", p); err != nil {
					t.Fatal(err)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "prog")
			tc.original(path)
			prog := snap(t, path, true)
			tc.replace(t, path)
			if out, err := exec.Command(path).Output(); err != nil || string(out) != "new\n" {
				t.Fatalf("replacing did not take: %q, %v", out, err)
			}
			res, out, errOut := run(t, Spec{Program: prog, Argv: append([]string{path}, tc.argv...)})
			if res.ExitCode != 0 || out != "old\n" {
				t.Errorf("exit %d, stdout %q, stderr %q; want 0, %q", res.ExitCode, out, errOut, "old\n")
			}
		})
	}
}

func TestFileSnapshotIsPrivateAndReadOnly(t *testing.T) {
	const original = "original\n"
	path := writeFile(t, filepath.Join(t.TempDir(), "input"), original, 0o644)
	file := snap(t, path, false)
	writeFile(t, path, "modified, and longer than before\n", 0o644)

	t.Run("child reads the snapshot, not the file", func(t *testing.T) {
		res, out, _ := run(t, Spec{Program: snap(t, "/bin/cat", true), Argv: []string{"/bin/cat", FilePath(0)}, Files: []*Snapshot{file}})
		if res.ExitCode != 0 || out != original {
			t.Errorf("exit %d, read %q; want 0, %q", res.ExitCode, out, original)
		}
	})

	t.Run("every run starts at byte 0", func(t *testing.T) {
		// Reading the inherited descriptor itself, not reopening the path,
		// shares the offset with every other user of the snapshot.
		sh := snap(t, "/bin/sh", true)
		for i := range 2 {
			res, out, _ := run(t, Spec{Program: sh, Argv: []string{"/bin/sh", "-c", "exec /bin/cat <&4"}, Env: []string{}, Files: []*Snapshot{file}})
			if res.ExitCode != 0 || out != original {
				t.Errorf("run %d: exit %d, read %q; want 0, %q", i, res.ExitCode, out, original)
			}
		}
	})

	t.Run("child cannot write it", func(t *testing.T) {
		script := `
printf x >&4 && echo wrote through the descriptor
printf x >>"$1" && echo appended through the path
printf x >"$1" && echo truncated through the path
true`
		res, out, errOut := run(t, Spec{
			Program: snap(t, "/bin/sh", true),
			Argv:    []string{"/bin/sh", "-c", script, "sh", FilePath(0)},
			Files:   []*Snapshot{file},
		})
		if res.ExitCode != 0 || out != "" {
			t.Errorf("exit %d, stdout %q (stderr %q); want every write refused", res.ExitCode, out, errOut)
		}
		got := make([]byte, 64)
		n, _ := file.File.ReadAt(got, 0)
		if string(got[:n]) != original || file.Size != int64(len(original)) || file.SHA256 != digest([]byte(original)) {
			t.Errorf("snapshot now holds %q", got[:n])
		}
	})
}

func TestTakeSnapshot(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(t, 3<<20+7)
	path := writeFile(t, filepath.Join(dir, "data"), string(data), 0o644)
	empty := writeFile(t, filepath.Join(dir, "empty"), "", 0o644)
	n := int64(len(data))
	hexDigest := regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

	for _, tc := range []struct {
		name     string
		path     string
		max      int64
		want     []byte
		tooLarge bool
	}{
		{"unlimited", path, -1, data, false},
		{"exactly max", path, n, data, false},
		{"one byte over max", path, n - 1, nil, true},
		{"max zero", path, 0, nil, true},
		{"empty file, max zero", empty, 0, []byte{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := TakeSnapshot(tc.path, tc.max, false, nil)
			if tc.tooLarge {
				var tl *TooLargeError
				if !errors.As(err, &tl) || tl.Path != tc.path || tl.Max != tc.max {
					t.Fatalf("err = %v, want *TooLargeError{%s, %d}", err, tc.path, tc.max)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if s.Size != int64(len(tc.want)) || s.SHA256 != digest(tc.want) || !hexDigest.MatchString(s.SHA256) {
				t.Errorf("size %d, digest %s; want %d, %s", s.Size, s.SHA256, len(tc.want), digest(tc.want))
			}
			got, err := io.ReadAll(io.NewSectionReader(s.File, 0, 1<<40))
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Errorf("snapshot holds %d bytes (%v), want the %d of the file", len(got), err, len(tc.want))
			}
		})
	}

	t.Run("sealed and read-only", func(t *testing.T) {
		s := snap(t, path, false)
		seals, err := unix.FcntlInt(s.File.Fd(), unix.F_GET_SEALS, 0)
		want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
		if err != nil || seals&want != want {
			t.Errorf("seals %#x (%v), want at least %#x", seals, err, want)
		}
		fl, err := unix.FcntlInt(s.File.Fd(), unix.F_GETFL, 0)
		if err != nil || fl&unix.O_ACCMODE != unix.O_RDONLY {
			t.Errorf("descriptor flags %#x (%v), want read-only", fl, err)
		}
		// Even a fresh writable open (we are likely root) cannot change it.
		w, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", s.File.Fd()), os.O_WRONLY, 0)
		if err == nil {
			defer w.Close()
			if _, err := w.Write([]byte("x")); err == nil {
				t.Error("wrote to a sealed snapshot")
			}
			if err := w.Truncate(0); err == nil {
				t.Error("truncated a sealed snapshot")
			}
		}
	})

	t.Run("not a regular file", func(t *testing.T) {
		fifo := filepath.Join(dir, "fifo")
		if err := unix.Mkfifo(fifo, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{dir, fifo, "/dev/null", filepath.Join(dir, "missing")} {
			done := make(chan error, 1)
			go func() {
				s, err := TakeSnapshot(p, -1, false, nil)
				s.Close()
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil {
					t.Errorf("%s: snapshot taken", p)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: TakeSnapshot blocked", p)
			}
		}
	})

	t.Run("progress", func(t *testing.T) {
		var calls [][2]int64
		s, err := TakeSnapshot(path, -1, false, func(done, total int64) { calls = append(calls, [2]int64{done, total}) })
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if len(calls) != 1 || calls[0] != [2]int64{n, n} {
			t.Errorf("progress calls %v, want one at the end", calls)
		}
	})

	t.Run("progress on a large file", func(t *testing.T) {
		if testing.Short() {
			t.Skip("copies 129 MiB")
		}
		big := filepath.Join(dir, "big")
		f, err := os.Create(big)
		if err != nil {
			t.Fatal(err)
		}
		size := int64(129 << 20)
		err = f.Truncate(size) // sparse: cheap on disk
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		var calls []int64
		s, err := TakeSnapshot(big, -1, false, func(done, total int64) {
			if total != size {
				t.Errorf("total %d, want %d", total, size)
			}
			calls = append(calls, done)
		})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		if len(calls) < 2 || len(calls) > 3 || calls[len(calls)-1] != size {
			t.Fatalf("progress calls %v", calls)
		}
		for i := 1; i < len(calls)-1; i++ {
			if calls[i]-calls[i-1] < progressEvery {
				t.Errorf("progress calls %v closer than 64 MiB", calls)
			}
		}
	})
}

func TestExitStatus(t *testing.T) {
	sh := snap(t, "/bin/sh", true)
	for _, tc := range []struct {
		script string
		code   int
		signal string
	}{
		{"exit 0", 0, ""},
		{"exit 3", 3, ""},
		{"exit 200", 200, ""},
		{"kill -TERM $$", 128 + 15, "SIGTERM"},
		{"kill -KILL $$", 128 + 9, "SIGKILL"},
	} {
		t.Run(tc.script, func(t *testing.T) {
			res, _, _ := run(t, Spec{Program: sh, Argv: []string{"/bin/sh", "-c", tc.script}})
			if res.ExitCode != tc.code || res.Signal != tc.signal || res.TimedOut {
				t.Errorf("got %+v, want exit %d, signal %q", res, tc.code, tc.signal)
			}
			if res.Duration <= 0 {
				t.Errorf("duration %v", res.Duration)
			}
		})
	}
}

func TestTimeoutKillsTheWholeProcessGroup(t *testing.T) {
	start := time.Now()
	res, out, _ := run(t, Spec{
		Program: snap(t, "/bin/sh", true),
		Argv:    []string{"/bin/sh", "-c", "sleep 30 & echo $!; wait"},
		Timeout: 200 * time.Millisecond,
	})
	elapsed := time.Since(start)
	grandchild := firstLinePID(t, out)
	t.Cleanup(func() { unix.Kill(grandchild, unix.SIGKILL) })
	if res.ExitCode != 124 || !res.TimedOut || res.Signal != "SIGKILL" {
		t.Errorf("got %+v, want exit 124, timed out, SIGKILL", res)
	}
	if elapsed < 200*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("Run took %v", elapsed)
	}
	waitDead(t, grandchild)
}

func TestTimeoutDoesNotWaitForAnEscapedProcess(t *testing.T) {
	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		t.Skip("no setsid")
	}
	start := time.Now()
	res, out, _ := run(t, Spec{
		Program: snap(t, "/bin/sh", true),
		Argv:    []string{"/bin/sh", "-c", `/usr/bin/setsid /bin/sh -c 'echo $$; exec sleep 30' & sleep 30`},
		Timeout: time.Second,
	})
	elapsed := time.Since(start)
	escaped := firstLinePID(t, out)
	defer unix.Kill(escaped, unix.SIGKILL)
	if !res.TimedOut || res.ExitCode != 124 {
		t.Errorf("got %+v, want a timeout", res)
	}
	if elapsed > 5*time.Second {
		t.Errorf("Run took %v waiting for a process outside the group", elapsed)
	}
	if !strings.Contains(res.Error, "stdout: still held open") {
		t.Errorf("Error = %q, want it to say stdout was cut", res.Error)
	}
}

// lineSignaller sends sig on ch when the first line of output arrives.
type lineSignaller struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	ch   chan<- os.Signal
	sig  os.Signal
	sent bool
}

func (w *lineSignaller) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if !w.sent && bytes.Contains(w.buf.Bytes(), []byte("\n")) {
		w.sent = true
		w.ch <- w.sig
	}
	return len(p), nil
}

func TestSignalsAreForwardedToTheProcessGroup(t *testing.T) {
	signals := make(chan os.Signal, 1)
	out := &lineSignaller{ch: signals, sig: syscall.SIGTERM}
	start := time.Now()
	res, _, _ := run(t, Spec{
		Program: snap(t, "/bin/sh", true),
		Argv:    []string{"/bin/sh", "-c", "sleep 30 & echo $!; wait"},
		Timeout: 20 * time.Second,
		Stdout:  out,
		Signals: signals,
	})
	grandchild := firstLinePID(t, out.buf.String())
	t.Cleanup(func() { unix.Kill(grandchild, unix.SIGKILL) })
	if res.ExitCode != 128+15 || res.Signal != "SIGTERM" || res.TimedOut {
		t.Errorf("got %+v, want exit 143 by SIGTERM", res)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("Run took %v", elapsed)
	}
	waitDead(t, grandchild)
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestOutputIsCopiedLiveAndHashed(t *testing.T) {
	dir := t.TempDir()
	outData := randomBytes(t, 3<<20+1)
	for i := range 256 {
		outData[i] = byte(i)
	}
	errData := randomBytes(t, 1<<20+3)
	outSnap := snap(t, writeFile(t, filepath.Join(dir, "out"), string(outData), 0o644), false)
	errSnap := snap(t, writeFile(t, filepath.Join(dir, "err"), string(errData), 0o644), false)
	sh := snap(t, "/bin/sh", true)

	var separateOut, separateErr, shared bytes.Buffer
	for _, tc := range []struct {
		name           string
		stdout, stderr io.Writer
		check          func(t *testing.T, res *Result)
	}{
		{"separate writers", &separateOut, &separateErr, func(t *testing.T, res *Result) {
			if !bytes.Equal(separateOut.Bytes(), outData) || !bytes.Equal(separateErr.Bytes(), errData) {
				t.Errorf("writers got %d and %d bytes, not the program's output", separateOut.Len(), separateErr.Len())
			}
		}},
		{"one writer for both", &shared, &shared, func(t *testing.T, res *Result) {
			if shared.Len() != len(outData)+len(errData) {
				t.Errorf("writer got %d bytes, want %d", shared.Len(), len(outData)+len(errData))
			}
		}},
		{"failing writer", failingWriter{}, io.Discard, func(t *testing.T, res *Result) {
			if !strings.Contains(res.Error, "stdout") || !strings.Contains(res.Error, "disk full") {
				t.Errorf("Error = %q, want the stdout write failure", res.Error)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(Spec{
				Program: sh,
				Argv:    []string{"/bin/sh", "-c", `/bin/cat "$1" && /bin/cat "$2" >&2`, "sh", FilePath(0), FilePath(1)},
				Files:   []*Snapshot{outSnap, errSnap},
				Stdout:  tc.stdout,
				Stderr:  tc.stderr,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode != 0 {
				t.Fatalf("exit %d", res.ExitCode)
			}
			if want := (Stream{int64(len(outData)), digest(outData)}); res.Stdout != want {
				t.Errorf("stdout %+v, want %+v", res.Stdout, want)
			}
			if want := (Stream{int64(len(errData)), digest(errData)}); res.Stderr != want {
				t.Errorf("stderr %+v, want %+v", res.Stderr, want)
			}
			tc.check(t, res)
		})
	}
}

func TestStdin(t *testing.T) {
	cat := snap(t, "/bin/cat", true)
	file := writeFile(t, filepath.Join(t.TempDir(), "in"), "from a file", 0o644)
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tc := range []struct {
		name  string
		stdin io.Reader
		want  string
	}{
		{"nil is /dev/null", nil, ""},
		{"reader", strings.NewReader("from a reader"), "from a reader"},
		{"file", f, "from a file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, out, _ := run(t, Spec{Program: cat, Argv: []string{"/bin/cat"}, Stdin: tc.stdin, Timeout: 10 * time.Second})
			if res.ExitCode != 0 || out != tc.want {
				t.Errorf("exit %d, stdout %q; want 0, %q", res.ExitCode, out, tc.want)
			}
		})
	}

	t.Run("a reader that never ends does not hold Run", func(t *testing.T) {
		pr, pw := io.Pipe()
		defer pw.Close()
		prog := snap(t, "/bin/true", true)
		done := make(chan *Result, 1)
		go func() {
			res, _ := Run(Spec{Program: prog, Argv: []string{"/bin/true"}, Stdin: pr})
			done <- res
		}()
		select {
		case res := <-done:
			if res == nil || res.ExitCode != 0 {
				t.Errorf("got %+v, want exit 0", res)
			}
		case <-time.After(5 * time.Second):
			pw.Close()
			<-done
			t.Error("Run waited for stdin to end")
		}
	})
}

func TestStartFailureIsAnError(t *testing.T) {
	dir := t.TempDir()
	notExecutable := snap(t, writeFile(t, filepath.Join(dir, "text"), "just text, no #! line\n", 0o755), true)
	sh := snap(t, "/bin/sh", true)
	for _, tc := range []struct {
		name string
		spec Spec
		is   error
	}{
		{"not an executable format (and no fallback to a shell)", Spec{Program: notExecutable, Argv: []string{"/opt/x/text"}}, syscall.ENOEXEC},
		{"missing working directory", Spec{Program: sh, Argv: []string{"/opt/x/sh", "-c", "true"}, Dir: filepath.Join(dir, "missing")}, syscall.ENOENT},
		{"no program", Spec{Argv: []string{"/opt/x/none"}}, nil},
		{"missing file snapshot", Spec{Program: sh, Argv: []string{"/opt/x/sh"}, Files: []*Snapshot{nil}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := false
			tc.spec.Started = func(int) { started = true }
			res, err := Run(tc.spec)
			if err == nil || res != nil || started {
				t.Fatalf("Run = %+v, %v; want an error and no start", res, err)
			}
			if !strings.Contains(err.Error(), tc.spec.Argv[0]) {
				t.Errorf("error %q does not name %s", err, tc.spec.Argv[0])
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v is not %v", err, tc.is)
			}
		})
	}
	if _, err := Run(Spec{Program: sh}); err == nil {
		t.Error("Run with no argv succeeded")
	}
}

func TestFilePath(t *testing.T) {
	for i, want := range []string{"/dev/fd/4", "/dev/fd/5", "/dev/fd/13"} {
		if i == 2 {
			i = 9
		}
		if got := FilePath(i); got != want {
			t.Errorf("FilePath(%d) = %q, want %q", i, got, want)
		}
	}
}

func TestResultJSON(t *testing.T) {
	b, err := json.Marshal(&Result{ExitCode: 124, Signal: "SIGKILL", TimedOut: true, Duration: 5, Stdout: Stream{1, "sha256:a"}, Stderr: Stream{2, "sha256:b"}})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"exit_code":124,"signal":"SIGKILL","timed_out":true,"duration_ns":5,"stdout":{"size":1,"sha256":"sha256:a"},"stderr":{"size":2,"sha256":"sha256:b"}}`
	if string(b) != want {
		t.Errorf("got %s\nwant %s", b, want)
	}
}

// waitExited returns only once the program has exited, and leaves it to be
// reaped (WNOWAIT): its status is still there for cmd.Wait. The program
// runs a while, so that a wait that returns at once is seen: it finds no
// exited child.
func TestWaitExitedWaitsAndLeavesTheStatus(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "sleep 0.3; exit 7")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitExited(cmd.Process.Pid)
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, cmd.Process.Pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || info.Signo == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("waitExited returned while the program still ran (waitid: %v, signo %d)", err, info.Signo)
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("cmd.Wait after waitExited: %v; want the program's exit 7", err)
	}
}
