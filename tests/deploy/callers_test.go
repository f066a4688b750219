package deploy

// What a caller hands the runner service, tried as an agent and as an
// account with no key would
// (docs/adr/0036-the-service-never-waits-on-a-caller.md): a paused
// terminal, a stopped or killed client, a client that never reads, every
// slot it may take, a bind mount in a user namespace of its own, and the
// plans it may not read.

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/receipts"
)

// outcomeGrace is what the service may add to an operation's timeout
// before the outcome receipt is durable, whatever the client does: the
// kill's drain (1 s), the relay's grace (1 s), one relay send in progress
// (2 s), and room for a loaded machine.
const outcomeGrace = 8 * time.Second

// pausedTerminal returns the slave of a new pseudo-terminal whose output
// is stopped, as ^S stops it: a write to it blocks once its buffer is
// full, until the master side is closed.
func pausedTerminal(t *testing.T) *os.File {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	must(t, unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0))
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	must(t, err)
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	must(t, err)
	must(t, unix.IoctlSetInt(int(s.Fd()), unix.TCXONC, unix.TCOOFF))
	t.Cleanup(func() { s.Close(); m.Close() })
	return s
}

// outcomeOf waits for the outcome of the n-th run of fp and returns how
// long after its intent it was written.
func (d *deployment) outcomeOf(t *testing.T, fp string, n int, bound time.Duration) (*receipts.Receipt, time.Duration) {
	t.Helper()
	var in, out *receipts.Receipt
	ok := waitFor(bound+outcomeGrace+10*time.Second, func() bool {
		ins, outs := d.runsOf(t, fp)
		if len(outs) < n {
			return false
		}
		for id, o := range outs {
			if out == nil || o.Seq > out.Seq {
				out, in = o, ins[id]
			}
		}
		return true
	})
	if !ok || in == nil {
		t.Fatalf("no outcome receipt for run %d of %s\n%s", n, fp, d.serveLog)
	}
	return out, out.Time.Sub(in.Time)
}

// startClient starts `prod-write args…` as acct from the agent's
// working directory, with stdout and stderr as given.
func (d *deployment) startClient(t *testing.T, acct account, env []string, stdout, stderr io.Writer, args ...string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := command(acct, d.agentWork, env, d.bin, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	must(t, cmd.Start())
	waited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(waited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		<-waited
	})
	return cmd, waited
}

func (d *deployment) otherEnv() []string {
	return []string{"PATH=/usr/bin:/bin", "HOME=" + d.otherHome, "PROD_WRITE_CONFIG=" + d.otherConfig}
}

// Defence: the service writes nothing onto a caller's descriptor, and
// relays program output through a bounded buffer the program never waits
// on (pkg/service Relay; runner.FinishOutput before the outcome). Without
// it, a client holding a paused terminal, stopped, or never reading, kept
// the outcome receipt from being written for as long as it liked.
func (d *deployment) clientsThatNeverRead(t *testing.T) {
	p := d.plan(t, d.agentWork, "spew")
	const runs = 5
	d.geraGo(t, p.Fingerprint, runs)
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	must(t, err)
	defer devnull.Close()
	n := 0
	for _, tc := range []struct {
		name   string
		acct   account
		env    []string
		stdout func() *os.File
		after  func(cmd *exec.Cmd) // once the intent is durable
	}{
		{"agent_holds_a_paused_terminal", d.agent, d.agentEnv(), func() *os.File { return pausedTerminal(t) }, nil},
		{"keyless_account_holds_a_paused_terminal", d.other, d.otherEnv(), func() *os.File { return pausedTerminal(t) }, nil},
		{"client_never_reads", d.agent, d.agentEnv(), func() *os.File {
			r, w, err := os.Pipe() // nobody reads r
			must(t, err)
			t.Cleanup(func() { r.Close(); w.Close() })
			return w
		}, nil},
		{"client_stopped", d.agent, d.agentEnv(), func() *os.File { return devnull }, func(cmd *exec.Cmd) { cmd.Process.Signal(syscall.SIGSTOP) }},
		{"client_killed", d.agent, d.agentEnv(), func() *os.File { return devnull }, func(cmd *exec.Cmd) { cmd.Process.Kill() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n++
			out := tc.stdout()
			cmd, _ := d.startClient(t, tc.acct, tc.env, out, devnull, "run", p.Fingerprint)
			if tc.after != nil {
				if !waitFor(10*time.Second, func() bool { in, _ := d.runsOf(t, p.Fingerprint); return len(in) == n }) {
					t.Fatalf("no intent receipt for run %d", n)
				}
				tc.after(cmd)
			}
			o, took := d.outcomeOf(t, p.Fingerprint, n, 3*time.Second)
			t.Logf("outcome %s after its intent: exit %d, stdout %d bytes, %d undelivered", took.Round(time.Millisecond), o.Outcome.ExitCode, o.Outcome.Stdout.Size, o.Outcome.Undelivered)
			if took > 3*time.Second+outcomeGrace {
				t.Errorf("the outcome came %s after the intent, past the 3 s timeout plus %s", took, outcomeGrace)
			}
			if o.Outcome.ExitCode != 0 || o.Outcome.Stdout.Size != 4000000 {
				t.Errorf("outcome %+v, want the program's own exit 0 and all 4000000 bytes hashed", o.Outcome)
			}
			if tc.name != "client_killed" && o.Outcome.Undelivered <= 0 {
				t.Errorf("the outcome says every byte reached a client that took none")
			}
		})
	}
	d.replayOK(t)
}

// Defence: slots are pools (pkg/service Server.Classify, pkg/cli pools):
// each principal its own, root its own, keyless callers 4 in all and 2
// each. Without them, the agent and a keyless account took every slot,
// and root, the approver and the operator got "connection reset by peer".
func (d *deployment) slotsStayFair(t *testing.T) {
	pending := d.plan(t, d.agentWork, "show-cwd")
	hold := d.plan(t, d.agentWork, "hold", "--param", "secs=9")
	d.geraGo(t, hold.Fingerprint, 3)
	other := d.plan(t, d.agentWork, "introspect")
	heldBefore, _ := d.runsOf(t, hold.Fingerprint)
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	must(t, err)
	defer devnull.Close()

	// The agent takes every slot it may, one call at a time: waits for a
	// decision, each admitted once it says it waits, until one is busy.
	admitted, busyAgent := 0, false
	var waits []*exec.Cmd
	defer func() {
		// Its slots come back once the service sees the clients go.
		for _, c := range waits {
			c.Process.Kill()
		}
		if !waitFor(20*time.Second, func() bool { return d.asAgent(t, "ops", "list").code == 0 }) {
			t.Errorf("the agent's slots did not come back once its clients went")
		}
	}()
	for i := 0; i < 100 && !busyAgent; i++ {
		errf, err := os.CreateTemp(d.root, "wait-")
		must(t, err)
		must(t, os.Chown(errf.Name(), d.agent.uid, d.agent.gid))
		cmd, waited := d.startClient(t, d.agent, d.agentEnv(), devnull, errf, "status", pending.Fingerprint, "--wait", "--timeout", "2m")
		waits = append(waits, cmd)
		for {
			b, _ := os.ReadFile(errf.Name())
			if strings.Contains(string(b), "waiting") {
				admitted++
				break
			}
			select {
			case <-waited:
				b, _ := os.ReadFile(errf.Name())
				if cmd.ProcessState.ExitCode() != 75 || !strings.Contains(string(b), "busy") {
					t.Fatalf("wait %d as the agent: exit %d: %s", i, cmd.ProcessState.ExitCode(), b)
				}
				busyAgent = true
			case <-time.After(20 * time.Millisecond): // polling its stderr
			}
			if busyAgent {
				break
			}
		}
	}
	if !busyAgent || admitted < 8 {
		t.Fatalf("the agent held %d calls and was never told busy", admitted)
	}
	t.Logf("the agent holds %d waits; its next call was busy (75)", admitted)

	// The keyless account takes its share: runs of an approved plan.
	admittedOther, busyOther := 0, false
	for i := 0; i < 6 && !busyOther; i++ {
		errf, err := os.CreateTemp(d.root, "run-")
		must(t, err)
		must(t, os.Chown(errf.Name(), d.other.uid, d.other.gid))
		cmd, waited := d.startClient(t, d.other, d.otherEnv(), devnull, errf, "run", hold.Fingerprint)
		want := len(heldBefore) + admittedOther + 1
		for {
			if in, _ := d.runsOf(t, hold.Fingerprint); len(in) == want {
				admittedOther++
				break
			}
			select {
			case <-waited:
				b, _ := os.ReadFile(errf.Name())
				if cmd.ProcessState.ExitCode() != 75 || !strings.Contains(string(b), "busy") {
					t.Fatalf("run %d as %s: exit %d: %s", i, otherUser, cmd.ProcessState.ExitCode(), b)
				}
				busyOther = true
			case <-time.After(20 * time.Millisecond):
			}
			if busyOther {
				break
			}
		}
	}
	if !busyOther || admittedOther != 2 {
		t.Fatalf("%s held %d runs (busy: %v), want 2 and then busy", otherUser, admittedOther, busyOther)
	}

	// Root, the operator and the approver are still served, at once.
	type call struct {
		who  string
		args []string
	}
	calls := []call{
		{"root: ops list", []string{"ops", "list"}},
		{"root: status", []string{"status", pending.Fingerprint}},
		{"operator: ops list", []string{"ops", "list", "--key", d.smithKey}},
		{"operator: file", []string{"file", other.Fingerprint, "--key", d.smithKey, "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high"}},
		{"approver: status", []string{"status", other.Fingerprint, "--key", d.aliceKey}},
	}
	results := make(chan string, len(calls))
	for _, c := range calls {
		go func() {
			// Served: answered, not busy (75) nor cut off (70); status
			// of a plan that may not run exits 77, and says so.
			r := d.asRoot(t, c.args...)
			if r.code != 0 && !(r.code == 77 && c.args[0] == "status" && strings.Contains(r.out, "fingerprint:")) {
				results <- c.who + ": " + r.String()
				return
			}
			results <- ""
		}()
	}
	for range calls {
		if e := <-results; e != "" {
			t.Errorf("while the agent and %s hold every slot they may: %s", otherUser, e)
		}
	}
	if r := d.asRoot(t, "decide", other.Fingerprint, "approve", "--key", d.aliceKey); r.code != 0 {
		t.Errorf("approver: decide: %s", r)
	}
	// The keyless runs go on when their clients go: their slots come back
	// with their outcomes.
	d.outcomeOf(t, hold.Fingerprint, len(heldBefore)+admittedOther, 9*time.Second)
}

// Defence: a descriptor stands for a path only if the service resolves
// the path to the same object (pkg/service SameObject). Without it, the
// agent, in a user namespace of its own with its directory bind-mounted
// over a reviewed one, ran its own files under the reviewed cwd's name.
func (d *deployment) bindMountSwap(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1) here")
	}
	// The reviewed directory: root's, 0755, the operation runs from the
	// caller's cwd.
	reviewed := filepath.Join(d.root, "work", "reviewed")
	must(t, os.MkdirAll(reviewed, 0o755))
	p := d.plan(t, reviewed, "show-cwd")
	d.geraGo(t, p.Fingerprint, 2)
	mine := filepath.Join(d.agentWork, "mine")
	must(t, os.MkdirAll(mine, 0o755))
	must(t, os.Chown(mine, d.agent.uid, d.agent.gid))
	// As the agent: a user and mount namespace of its own, its directory
	// over the reviewed one, and run from there.
	lines := len(d.journalLines(t))
	code, out, errb := d.inOwnMountNamespace(t, unshare, `mount --bind "$1" "$2" && cd "$2" && exec "$3" run "$4" --json`, mine, reviewed, d.bin, p.Fingerprint)
	if code != 77 || refusalCode(errb) != "fingerprint_mismatch" || !strings.Contains(errb, reviewed) {
		t.Fatalf("run from a bind mount over %s: exit %d, want 77 fingerprint_mismatch naming the cwd:\n%s%s", reviewed, code, out, errb)
	}
	if n := len(d.journalLines(t)); n != lines {
		t.Errorf("the refused run wrote %d receipts", n-lines)
	}
	// The same directory, unmounted, still runs.
	if r := d.asAgentIn(t, reviewed, "run", p.Fingerprint); r.code != 0 || strings.TrimSpace(r.out) != reviewed {
		t.Errorf("run from %s itself: %s", reviewed, r)
	}
}

// inOwnMountNamespace runs script (sh -c) as the agent, in a user and mount
// namespace of its own (unshare -Urm), with args as $1…, and returns its
// exit status and output. It skips the test where the agent may not make
// such namespaces.
func (d *deployment) inOwnMountNamespace(t *testing.T, unshare, script string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := command(d.agent, d.agentWork, d.agentEnv(), unshare, append([]string{"-Urm", "sh", "-c", script, "sh"}, args...)...)
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if strings.Contains(errb.String(), "unshare failed") || strings.Contains(errb.String(), "mount:") {
		t.Skipf("user namespaces are not available to %s here: %s", agentUser, errb.String())
	}
	code = -1
	if err == nil {
		code = 0
	} else if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return code, out.String(), errb.String()
}

// Defence: a file handed over stands for the path the plan binds only if
// the service resolves that path to the same object (pkg/cli sameObject,
// for file parameters). Without it, the agent, in a mount namespace of its
// own with its file bind-mounted over a reviewed, root-owned one, had a
// plan stored that names the reviewed path and binds the agent's bytes:
// the approver reads "config: /…/reviewed/app.toml" and approves the
// agent's file.
func (d *deployment) bindMountFileSwap(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1) here")
	}
	dir := filepath.Join(d.root, "work", "reviewed-files")
	must(t, os.MkdirAll(dir, 0o755))
	reviewed := filepath.Join(dir, "app.toml")
	must(t, os.WriteFile(reviewed, []byte("# reviewed config\nversion = 1\n"), 0o644))
	mine := filepath.Join(d.agentWork, "mine.toml")
	must(t, os.WriteFile(mine, []byte("# the agent's own\nversion = 666\n"), 0o644))
	must(t, os.Chown(mine, d.agent.uid, d.agent.gid))
	// From an operation with a declared cwd: the caller's own directory,
	// which its mount namespace makes another object too, plays no part.
	before := snapshot(t, d.state)
	code, out, errb := d.inOwnMountNamespace(t, unshare, `mount --bind "$1" "$2" && exec "$3" plan install-reviewed --target production --param name=swapped --file config="$2" --json`, mine, reviewed, d.bin)
	if code != 77 || refusalCode(errb) != "fingerprint_mismatch" || !strings.Contains(errb, reviewed) {
		t.Fatalf("plan with %s bind-mounted over %s: exit %d, want 77 fingerprint_mismatch naming the file:\n%s%s", mine, reviewed, code, out, errb)
	}
	if diff := diffSnapshots(before, snapshot(t, d.state)); diff != "" {
		t.Errorf("the refused plan changed the state directory:\n%s", diff)
	}
	// The reviewed file itself, with nothing over it, plans.
	if p := d.plan(t, d.agentWork, "install-reviewed", "--param", "name=swapped", "--file", "config="+reviewed); !p.Stored {
		t.Errorf("plan with %s itself was not stored", reviewed)
	}
}

// Defence: a caller with no key of the policy gets status redacted
// (pkg/api StatusResult.Redact, in the service's serveAPI) and is refused
// the other calls that show what a plan binds (pkg/cli plansReadByKeyOnly).
// Without them, pwtest-other listed every plan and read its argv, params,
// paths and env.pass values. Every call it can make is tried, and none
// prints any.
func (d *deployment) keylessReadsNoPlan(t *testing.T) {
	p := d.plan(t, d.agentWork, "deploy-config", "--param", "name=keyless-probe", "--file", "config="+d.appFile)
	d.approve(t, p.Fingerprint)
	if r := d.asAgent(t, "run", p.Fingerprint); r.code != 0 {
		t.Fatalf("run: %s", r)
	}
	// A use left, so that a run gets as far as the plan's file.
	d.geraGo(t, p.Fingerprint, 1)
	intents, _ := d.runsOf(t, p.Fingerprint)
	seq := ""
	for _, in := range intents {
		seq = strconv.FormatUint(in.Seq, 10)
	}
	// What the plan binds, not what the registry says of every plan.
	secretish := []string{"keyless-probe", d.appFile, "version = 1"}
	other := func(args ...string) result { return d.exec(t, d.other, d.otherHome, d.otherEnv(), d.bin, args...) }
	for _, args := range [][]string{
		{"status", p.Fingerprint}, {"status", p.Fingerprint, "--json"},
		{"status", p.Fingerprint, "--wait", "--timeout", "1s"},
		// A run would ask it for the plan's file by its path.
		{"run", p.Fingerprint}, {"run", p.Fingerprint, "--json"},
		// Each attestation's predicate is the plan's content (ADR 0040).
		{"receipts", "export", "--in-toto"},
	} {
		// From the directory the plan binds, which run_as may enter.
		r := d.exec(t, d.other, d.agentWork, d.otherEnv(), d.bin, args...)
		if r.code != 77 {
			t.Errorf("%q as %s: exit %d, want 77 (refused):\n%s", args, otherUser, r.code, r)
		}
		for _, v := range secretish {
			if strings.Contains(r.out+r.err, v) {
				t.Errorf("%q as %s printed %q", args, otherUser, v)
			}
		}
	}
	// receipts show answers redacted (ADR 0040): the run, its
	// fingerprint and exit status, nothing the plan binds.
	ran := ""
	for _, in := range intents {
		ran = in.RunID
	}
	for _, args := range [][]string{{"receipts", "show", seq}, {"receipts", "show", seq, "--json"}, {"receipts", "show", ran, "--json"}} {
		r := d.exec(t, d.other, d.agentWork, d.otherEnv(), d.bin, args...)
		if r.code != 0 || !strings.Contains(r.out, `"redacted": true`) || !strings.Contains(r.out, p.Fingerprint) {
			t.Errorf("%q as %s: exit %d, want a redacted answer:\n%s", args, otherUser, r.code, r)
		}
		for _, v := range secretish {
			if strings.Contains(r.out+r.err, v) {
				t.Errorf("%q as %s printed %q", args, otherUser, v)
			}
		}
	}
	// The calls that sign a record: refused by the key lookup (it has
	// none), before anything of the plan but its operation and
	// fingerprint is said, and nothing is stored.
	evidence := func() int {
		var s struct {
			Evidence []json.RawMessage `json:"evidence"`
		}
		r := d.asAgent(t, "status", p.Fingerprint, "--json")
		if err := json.Unmarshal([]byte(r.out), &s); err != nil {
			t.Fatalf("status --json as the agent: %v: %s", err, r)
		}
		return len(s.Evidence)
	}
	stored := evidence()
	runID := ""
	for _, in := range intents {
		runID = in.RunID
	}
	for _, args := range [][]string{
		{"file", p.Fingerprint, "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high"},
		{"decide", p.Fingerprint, "approve"}, {"decide", p.Fingerprint, "deny"},
		{"gera", "go", p.Fingerprint}, {"gera", "no-go", p.Fingerprint},
		{"withdraw", p.Fingerprint},
		{"freeze", "grant", p.Fingerprint, "--freeze", "any", "--reason", "r"},
		{"break-glass", p.Fingerprint, "--reason", "r", "--incident", "INC-1"},
		{"break-glass", "review", runID},
	} {
		for _, args := range [][]string{args, append(slices.Clone(args), "--json")} {
			r := d.exec(t, d.other, d.agentWork, d.otherEnv(), d.bin, args...)
			if r.code == 0 {
				t.Errorf("%q as %s: not refused:\n%s", args, otherUser, r)
			}
			for _, v := range secretish {
				if strings.Contains(r.out+r.err, v) {
					t.Errorf("%q as %s printed %q:\n%s", args, otherUser, v, r)
				}
			}
		}
	}
	if n := evidence(); n != stored {
		t.Errorf("%d pieces of evidence after %s's calls, %d before", n, otherUser, stored)
	}
	for _, args := range [][]string{
		{"ops", "list"}, {"ops", "list", "--json"},
		{"receipts", "list"}, {"receipts", "list", "--json"},
		{"replay"}, {"replay", "--json"},
		{"__complete", "status", "sha256:"},
	} {
		r := other(args...)
		for _, v := range secretish {
			if strings.Contains(r.out+r.err, v) {
				t.Errorf("%q as %s printed %q:\n%s", args, otherUser, v, r)
			}
		}
	}
	// The agent, with its key, reads it.
	if r := d.asAgent(t, "status", p.Fingerprint); !strings.Contains(r.out, "keyless-probe") {
		t.Errorf("status as the agent: %s", r)
	}
}

// Defence: a stop waits for a run, and the run's outcome does not wait on
// its client (ADR 0031, ADR 0036). Without the relay, a client holding a
// paused terminal kept `serve` from stopping on SIGTERM.
func (d *deployment) serveStopsWhileAClientHoldsAPausedTerminal(t *testing.T) {
	p := d.plan(t, d.agentWork, "spew")
	d.geraGo(t, p.Fingerprint, 1)
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	must(t, err)
	defer devnull.Close()
	before, _ := d.runsOf(t, p.Fingerprint)
	d.startClient(t, d.agent, d.agentEnv(), pausedTerminal(t), devnull, "run", p.Fingerprint)
	if !waitFor(10*time.Second, func() bool { in, _ := d.runsOf(t, p.Fingerprint); return len(in) == len(before)+1 }) {
		t.Fatal("no intent receipt")
	}
	began := time.Now()
	must(t, d.served.Process.Signal(syscall.SIGTERM))
	// The run's 3 s timeout, its outcome's grace, and the last sends to
	// the stalled client (one WriteTimeout, 10 s).
	bound := 3*time.Second + outcomeGrace + 10*time.Second
	select {
	case <-d.serveEnd:
	case <-time.After(bound):
		t.Fatalf("serve did not stop within %s of SIGTERM while a client held a paused terminal\n%s", bound, d.serveLog)
	}
	t.Logf("serve stopped %s after SIGTERM", time.Since(began).Round(time.Millisecond))
	if _, outs := d.runsOf(t, p.Fingerprint); len(outs) != len(before)+1 {
		t.Fatalf("serve stopped without the run's outcome receipt")
	}
	// (replay goes through the service, which is gone: the receipts were
	// replayed by the subtests before, and runsOf read this one.)
}
