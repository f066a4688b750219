package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/prod-write/prod-write/pkg/awsbackend"
	"github.com/prod-write/prod-write/pkg/cli"
	"github.com/prod-write/prod-write/pkg/fastrun"
	"github.com/prod-write/prod-write/pkg/netbackend"
	"github.com/prod-write/prod-write/pkg/testservers"
)

func TestMain(m *testing.M) {
	// WrapM stops the servers after the tests and says loudly when the
	// dynamo_* scripts were skipped for want of them.
	testscript.Main(testservers.WrapM(m), map[string]func(){
		// prod-write makes a run through the service itself and runs the
		// command tree (prod-write-cli, here in process) for anything
		// else; the tree links no AWS SDK and hands dynamo_* scripts'
		// commands to prod-write-net, as an installation does.
		"prod-write":  func() { os.Exit(fastrun.Main(func() int { return cli.Main(nil, nil) })) },
		cli.NetBinary: func() { os.Exit(cli.Main(awsbackend.Backend{}, netbackend.Backend{})) },
		// A real MCP client over Streamable HTTP, to spawn (mcp_cmds_test.go).
		"mcphttp-call": func() { os.Exit(mcpHTTPCallMain()) },
	})
}

// TestScript runs the end-to-end CLI scripts in testdata/script.
func TestScript(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "../../testdata/script",
		RequireExplicitExec: true,
		RequireUniqueNames:  true,
		Setup: func(env *testscript.Env) error {
			// Scripts see none of the caller's prod-write settings.
			env.Setenv("PROD_WRITE_CONFIG", "")
			env.Setenv("PROD_WRITE_KEY", "")
			// Every command a script runs is this test binary again, and
			// under -race its runtime sleeps a second at exit by default
			// (atexit_sleep_ms), in case another goroutine is about to
			// race: over the scripts' thousand commands that was most of
			// the package's time (665 s). A race is still reported as it
			// happens, and still fails the command (exit 66).
			env.Setenv("GORACE", "atexit_sleep_ms=0")
			// dynamo_* scripts get local DynamoDB and S3 servers.
			return testservers.ScriptSetup(env)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"setfp":           cmdSetFP,
			"setrun":          cmdSetRun,
			"expand":          testservers.CmdExpand,
			"s3":              testservers.CmdS3,
			"addprincipal":    cmdAddPrincipal,
			"tamper":          cmdTamper,
			"exits":           cmdExits,
			"fakeslack":       cmdFakeSlack,
			"slackclick":      cmdSlackClick,
			"fakegithub":      cmdFakeGitHub,
			"appendenv":       cmdAppendEnv,
			"waitsock":        cmdWaitSock,
			"waittcp":         cmdWaitTCP,
			"httpget":         cmdHTTPGet,
			"pageauthn":       cmdPageAuthn,
			"browser":         cmdBrowser,
			"mcpcall":         cmdMCPCall,
			"mcphttp":         cmdMCPHTTP,
			"freeaddr":        cmdFreeAddr,
			"fakessm":         cmdFakeSSM,
			"corruptevidence": cmdCorruptEvidence,
			"prefix":          cmdPrefix,
			"sighup":          cmdSigHUP,
			"waitlines":       cmdWaitLines,
			"waitglob":        cmdWaitGlob,
			"reachabledir":    cmdReachableDir,
			"rootonlydir":     cmdRootOnlyDir,
			"spawn":           cmdSpawn,
			"reap":            cmdReap,
			"awaitline":       cmdAwaitLine,
			"spawnkill":       cmdSpawnKill,
			"spawnsignal":     cmdSpawnSignal,
			"historize":       cmdHistorize,
			"setmatch":        cmdSetMatch,
			"execline":        cmdExecLine,
			"editlast":        cmdEditLast,
			"softauthn":       cmdSoftAuthn,
			"pasteunder":      cmdPasteUnder,
			"sleep": func(ts *testscript.TestScript, neg bool, args []string) {
				d, err := time.ParseDuration(args[0])
				ts.Check(err)
				time.Sleep(d)
			},
		},
		Condition: func(cond string) (bool, error) {
			if cond == "root" {
				// Running programs as another account needs root (or
				// CAP_SETUID); CI runs as root.
				return os.Geteuid() == 0, nil
			}
			if cond == "chromium" {
				// A script that needs a real browser: skipped without
				// one, unless PROD_WRITE_REQUIRE_SERVERS=1 (make test,
				// CI), where the browser command then fails.
				_, err := os.Stat(chromiumPath)
				return err == nil || os.Getenv("PROD_WRITE_REQUIRE_SERVERS") == "1", nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
	})
}

var fpRE = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

var runRE = regexp.MustCompile(`"run_id": ?"([0-9a-f]{8,64})"`)

// cmdSetRun sets the variable named by its argument to the first run id in
// the previous command's stdout (receipts list --json):
//
//	exec prod-write receipts list --json
//	setrun RUN
func cmdSetRun(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: setrun VAR")
	}
	m := runRE.FindStringSubmatch(ts.ReadFile("stdout"))
	if m == nil {
		ts.Fatalf("no run id in stdout")
	}
	ts.Setenv(args[0], m[1])
}

// cmdSetFP sets the variable named by its argument to the first
// fingerprint in the previous command's stdout:
//
//	exec prod-write plan ...
//	setfp FP
func cmdSetFP(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: setfp VAR")
	}
	fp := fpRE.FindString(ts.ReadFile("stdout"))
	if fp == "" {
		ts.Fatalf("no fingerprint in stdout")
	}
	ts.Setenv(args[0], fp)
}

// cmdWaitSock waits up to 10 s for a runner service's socket to appear:
//
//	exec prod-write serve --config svc/prod-write.toml &serve&
//	waitsock svc.sock
func cmdWaitSock(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitsock PATH")
	}
	path := ts.MkAbs(args[0])
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			return
		}
	}
	ts.Fatalf("no socket at %s after 10s", path)
}

// cmdWaitTCP waits up to 10 s until something accepts connections at
// ADDR: a server's Unix socket can exist before its TCP listener does.
//
//	waittcp $MCP_ADDR
func cmdWaitTCP(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waittcp ADDR")
	}
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var c net.Conn
		if c, err = net.DialTimeout("tcp", args[0], time.Second); err == nil {
			c.Close()
			return
		}
	}
	ts.Fatalf("nothing accepts connections at %s after 10s: %v", args[0], err)
}

// cmdHTTPGet GETs URL and prints the answer's status, its headers (one
// "Name: value" a line, sorted) and its body on stdout.
//
//	httpget URL
func cmdHTTPGet(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: httpget URL")
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(args[0])
	ts.Check(err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	ts.Check(err)
	var names []string
	for k := range resp.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintf(ts.Stdout(), "status: %d\n", resp.StatusCode)
	for _, k := range names {
		fmt.Fprintf(ts.Stdout(), "%s: %s\n", k, strings.Join(resp.Header[k], ", "))
	}
	fmt.Fprintf(ts.Stdout(), "\n%s", body)
}

// cmdReachableDir sets VAR to a new directory that another account (a
// run_as program) can reach by its path, removed when the script ends:
// $WORK's ancestors are the test's own (mode 0700), so a program that
// runs as nobody in an operation's declared cwd cannot be under $WORK.
//
//	reachabledir HOLD_DIR
func cmdReachableDir(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: reachabledir VAR")
	}
	dir, err := os.MkdirTemp("", "prod-write-script-")
	ts.Check(err)
	ts.Defer(func() { os.RemoveAll(dir) })
	ts.Check(os.Chmod(dir, 0o755))
	ts.Setenv(args[0], dir)
}

// cmdWaitLines waits up to 20 s until a file holds at least N complete
// lines: a script waits for a receipt rather than for a time.
//
//	waitlines $WORK/svc/state/journal/receipts.jsonl 3
func cmdWaitLines(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waitlines FILE N")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	path := ts.MkAbs(args[0])
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && bytes.Count(b, []byte("\n")) >= n {
			return
		}
	}
	ts.Fatalf("%s has fewer than %d lines after 20s", path, n)
}

// cmdWaitGlob waits (20 s at most) until a file matches PATTERN: a record
// a background command writes after what the script saw of it (the
// bridge records a follow-up's event once the post is made):
//
//	waitglob state/bridge/events/*/unapproved-*.json
func cmdWaitGlob(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitglob PATTERN")
	}
	pattern := ts.MkAbs(args[0])
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m, err := filepath.Glob(pattern); err == nil && len(m) > 0 {
			return
		}
	}
	ts.Fatalf("no file matches %s after 20s", pattern)
}

// cmdSigHUP sends SIGHUP to this script's processes whose command line
// contains every argument (testscript's kill knows only INT and KILL):
//
//	sighup serve --config svc/prod-write.toml
func cmdSigHUP(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: sighup WORD...")
	}
	dirs, err := os.ReadDir("/proc")
	ts.Check(err)
	n := 0
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil {
			continue
		}
		cmdline := strings.ReplaceAll(string(b), "\x00", " ")
		// Only the script's own background commands, which this test process
		// started: a child the service forked has the service's cmdline until
		// it execs, and a SIGHUP in that window kills the program (exit 129).
		if ppid(pid) != os.Getpid() {
			continue
		}
		// Only processes of this script: their working directory is under $WORK.
		// (WORK itself or below it: another script's WORK may share a
		// prefix, as script-service_mcp and script-service_mcp_http do.)
		cwd, _ := os.Readlink("/proc/" + d.Name() + "/cwd")
		if work := ts.Getenv("WORK"); cwd != work && !strings.HasPrefix(cwd, work+"/") {
			continue
		}
		all := true
		for _, a := range args {
			all = all && strings.Contains(cmdline, a)
		}
		if all {
			ts.Check(syscall.Kill(pid, syscall.SIGHUP))
			n++
		}
	}
	if n == 0 {
		ts.Fatalf("sighup: no process matches %q", args)
	}
}

// ppid is the parent of pid, from /proc/PID/stat, or -1.
func ppid(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 2 {
		return -1
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		return -1
	}
	return n
}

// cmdSetMatch sets VAR to the first submatch of REGEXP in FILE, and fails
// when there is none:
//
//	setmatch ID '"decision_id":"([0-9a-f-]+)"' state/decisions.jsonl
func cmdSetMatch(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: setmatch VAR REGEXP FILE")
	}
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	m := re.FindStringSubmatch(ts.ReadFile(args[2]))
	if len(m) < 2 {
		ts.Fatalf("setmatch: no match of %s in %s", args[1], args[2])
	}
	ts.Setenv(args[0], m[1])
}

// cmdExecLine runs, as exits does, the command line a command printed
// (held in the variable VAR, e.g. by setmatch), split as a POSIX shell
// splits bare and single-quoted words; anything a shell would expand or
// read differently fails the script:
//
//	setmatch CMD 'with: (.*)' stderr
//	execline 0 CMD
func cmdExecLine(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: execline CODE VAR")
	}
	words, err := shellWords(ts.Getenv(args[1]))
	if err != nil {
		ts.Fatalf("execline: $%s: %v", args[1], err)
	}
	cmdExits(ts, false, append([]string{args[0]}, words...))
}

// cmdEditLast replaces the first OLD in FILE's last line by NEW, as
// someone editing a journal's newest entry would:
//
//	editlast ci/receipts.jsonl '"sig":"' '"sig":"A'
func cmdEditLast(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: editlast FILE OLD NEW")
	}
	lines := strings.SplitAfter(strings.TrimSuffix(ts.ReadFile(args[0]), "\n"), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, args[1]) {
		ts.Fatalf("editlast: no %q in the last line of %s", args[1], args[0])
	}
	lines[len(lines)-1] = strings.Replace(last, args[1], args[2], 1) + "\n"
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(strings.Join(lines, "")), 0o644))
}

// shellWords splits s into words as sh would, for bare and single-quoted
// words only.
func shellWords(s string) ([]string, error) {
	var words []string
	var w strings.Builder
	in, quoted := false, false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quoted && c == '\'':
			quoted = false
		case quoted:
			w.WriteByte(c)
		case c == '\'':
			quoted, in = true, true
		case c == ' ':
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		case strings.IndexByte("\"\\$`*?[]~#&|;<>(){}!\t\n", c) >= 0:
			return nil, fmt.Errorf("%q at byte %d: a shell would read it otherwise", c, i)
		default:
			w.WriteByte(c)
			in = true
		}
	}
	if quoted {
		return nil, errors.New("an unterminated quote")
	}
	if in {
		words = append(words, w.String())
	}
	if len(words) == 0 {
		return nil, errors.New("no command")
	}
	return words, nil
}

// cmdExits runs a command and checks its exit status, keeping its stdout
// and stderr for the commands after it:
//
//	exits 77 prod-write run $FP --json
//	stderr '"code":"no_approval"'
func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits CODE COMMAND [ARG]...")
	}
	want, err := strconv.Atoi(args[0])
	if err != nil {
		ts.Fatalf("exits: %q is not a number", args[0])
	}
	got := 0
	if err := ts.Exec(args[1], args[2:]...); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			ts.Fatalf("exits: %v", err)
		}
		got = ee.ExitCode()
	}
	if got != want {
		ts.Fatalf("exit status %d, want %d", got, want)
	}
}
