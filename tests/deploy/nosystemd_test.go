package deploy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testedMarker precedes each block of docs/DEPLOYMENT.md this test runs.
const testedMarker = "<!-- tested: tests/deploy runs this block -->"

// deploymentBlocks returns the ```sh blocks of docs/DEPLOYMENT.md that
// follow testedMarker, in order.
func deploymentBlocks(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../docs/DEPLOYMENT.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, part := range strings.Split(string(b), testedMarker)[1:] {
		part = strings.TrimLeft(part, "\n")
		if !strings.HasPrefix(part, "```sh\n") {
			t.Fatal("a tested marker is not followed by a ```sh block")
		}
		part = part[len("```sh\n"):]
		end := strings.Index(part, "\n```")
		if end < 0 {
			t.Fatal("a tested block does not end")
		}
		blocks = append(blocks, part[:end+1])
	}
	return blocks
}

// nsPrelude is not the documentation's: it gives the script a mount
// namespace of its own in which /etc (a copy, so useradd writes only
// there), /var/lib, /var/log, /var/mail, /run, /srv, /home and
// /usr/local/bin are directories under $ROOT. Nothing of the host's
// accounts or directories changes, and another test's accounts do not
// collide with these: the copy's login.defs allocates uids and gids
// where no host account lives.
const nsPrelude = `set -euo pipefail
[ "$(readlink /proc/self/ns/mnt)" != "$HOST_NS" ] || { echo "not in a mount namespace of our own" >&2; exit 99; }
mkdir -p "$ROOT/etc"
cp -a /etc/. "$ROOT/etc/"
mount --bind "$ROOT/etc" /etc
sed -i -E -e '/^(SYS_)?(UID|GID)_(MIN|MAX)/d' /etc/login.defs
printf 'SYS_UID_MIN 58000\nSYS_UID_MAX 58999\nSYS_GID_MIN 58000\nSYS_GID_MAX 58999\nUID_MIN 59000\nUID_MAX 59999\nGID_MIN 59000\nGID_MAX 59999\n' >> /etc/login.defs
for d in /var/lib /var/log /var/mail /run /srv /home /usr/local/bin; do
  [ -d "$d" ] || continue
  mkdir -p "$ROOT$d"
  mount --bind "$ROOT$d" "$d"
done
cd "$CLONE"
`

// The section "Without systemd" of docs/DEPLOYMENT.md, run as it stands:
// the setup blocks, the configuration, the run script a supervisor starts
// (setpriv, the three capabilities, the socket's directory made by it),
// started, reloaded and stopped as on a host with no supervisor at all (its
// pid in root's file), and the first approved run, which ends with replay
// exiting 0. The documented stop comes last, while a run is in progress: it
// returns once the service has exited, that run's outcome written.
func TestWithoutSystemdAsDocumented(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the documented deployment runs only as root (CI runs as root): it creates accounts and mounts")
	}
	for _, tool := range []string{"unshare", "setpriv", "setsid", "runuser", "useradd", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the documented deployment needs %s", tool)
		}
	}
	blocks := deploymentBlocks(t)
	if len(blocks) != 6 {
		t.Fatalf("docs/DEPLOYMENT.md has %d tested blocks, want 6 (setup, configuration, run script, no supervisor, first run, changing the policy)", len(blocks))
	}
	setup, configuration, runScript, noSupervisor, firstRun, changes := blocks[0], blocks[1], blocks[2], blocks[3], blocks[4], blocks[5]
	// With no supervisor: its start (and the pid function), its reload and
	// its stop, each from its comment on.
	start, rest, ok1 := strings.Cut(noSupervisor, "\n# Reload")
	docHUP, stop, ok2 := strings.Cut(rest, "\n# Stop")
	if !ok1 || !ok2 || !strings.Contains(start, "setsid") || !strings.Contains(start, "/run/prod-write.pid") ||
		!strings.Contains(docHUP, "kill -HUP") || !strings.Contains(stop, "kill -TERM") {
		t.Fatalf("the block for a host with no supervisor is not a start, a \"# Reload\" by SIGHUP and a \"# Stop\" by SIGTERM:\n%s", noSupervisor)
	}
	// The documentation's reload in the changes block is systemd's; here it
	// is the reload of a host with no supervisor, and the test waits for
	// the service to say it reloaded (or that it refused).
	const docReload = "reload() { systemctl reload prod-write; }"
	if !strings.Contains(changes, docReload) {
		t.Fatalf("the changes block does not define %q", docReload)
	}
	changes = strings.Replace(changes, docReload, strings.Replace(testReload, "DOC_RELOAD", "# Reload"+strings.TrimRight(docHUP, "\n"), 1), 1)
	for _, want := range []string{"setpriv", "+setuid,+setgid,+kill", "--no-new-privs", "install -d -o prod-write -g prod-write -m 0755 /run/prod-write"} {
		if !strings.Contains(runScript, want) {
			t.Errorf("the run script lacks %q", want)
		}
	}

	root, err := os.MkdirTemp("/tmp", "prod-write-nosystemd-")
	must(t, err)
	must(t, os.Chmod(root, 0o755))
	if os.Getenv("KEEP") == "" {
		t.Cleanup(func() { os.RemoveAll(root) })
	} else {
		t.Logf("KEEP: the deployment stays in %s", root)
	}
	// The clone: `make build` leaves the two binaries in bin/.
	clone := filepath.Join(root, "clone")
	must(t, os.MkdirAll(filepath.Join(clone, "bin"), 0o755))
	mod, err := exec.Command("go", "env", "GOMOD").Output()
	must(t, err)
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(clone, "bin")+"/", "./cmd/prod-write", "./cmd/prod-write-cli", "./cmd/prod-write-net")
	build.Dir = filepath.Dir(strings.TrimSpace(string(mod)))
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	hostNS, err := os.Readlink("/proc/self/ns/mnt")
	must(t, err)
	var rnd [16]byte
	_, err = rand.Read(rnd[:])
	must(t, err)
	token := "pwsecret-" + hex.EncodeToString(rnd[:])

	// One shell, in a mount namespace of its own, runs the blocks in the
	// order the documentation gives them, the service started, reloaded
	// and stopped as on a host with no supervisor. The test awaits the
	// socket (polled, with a bound) and, to stop, a run in progress.
	script := nsPrelude + setup + configuration + runScript + start + `
LOG=/var/log/prod-write.log
trap 'p=$(pwpid 2>/dev/null) && kill -TERM "$p"; true' EXIT
for i in $(seq 600); do
  [ -S /run/prod-write/prod-write.sock ] && break
  if [ -s /run/prod-write.pid ] && ! kill -0 "$(cat /run/prod-write.pid)" 2>/dev/null; then echo "the service exited" >&2; exit 98; fi
  sleep 0.05
done
[ -S /run/prod-write/prod-write.sock ]
SERVE=$(cat /run/prod-write.pid)
[ "$(pwpid)" = "$SERVE" ] && echo "pid file: the service's"
stat -c 'pid file: %U:%G %a' /run/prod-write.pid
stat -c 'log: %U:%G %a' "$LOG"
stat -c 'socket dir: %U:%G %a' /run/prod-write
stat -c 'socket: %U:%G %a' /run/prod-write/prod-write.sock
grep -E '^(Uid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs)' /proc/$SERVE/status
stat -c 'home config: %U %a' /home/agent/.config
` + firstRun + `
stat -c 'installed: %U %a' /srv/app/api.toml
` + changes + `
# Not the documentation's: an edit reloaded without a record is refused,
# the service keeps the policy it had, and doctor names what the history
# lacks; recorded, the same reload is taken.
printf '\n# an edit nobody recorded\n' >> /etc/prod-write/trust.toml
if reload; then echo "an unrecorded reload was taken" >&2; exit 97; fi
grep -c 'reload failed, still judging by the policy loaded before: .*does not have in force.*prod-write history record' "$LOG" | sed 's/^/refused reloads: /'
prod-write doctor --config /etc/prod-write/prod-write.toml || true
record && reload && echo "recorded, then reloaded"
prod-write --config /etc/prod-write/prod-write.toml replay

# Not the documentation's: an operation that runs for 2 s, approved and
# started; once its intent is in the journal, the documented stop.
cat > /etc/prod-write/operations/slow.toml <<'EOF'
[[operation]]
name = "slow"
program = "sleep"
args = ["2"]
targets = ["production"]
run_as = "deployer"
EOF
chmod 0644 /etc/prod-write/operations/slow.toml
record && reload
FP=$(act agent plan slow --target production | awk '/^fingerprint:/ {print $2}')
filed "$FP" slow && act alice decide "$FP" approve
receipts() { wc -l < /var/lib/prod-write/journal/receipts.jsonl; }
n=$(receipts)
(act agent run "$FP"; echo "slow run: exit $?") > "$ROOT/slow.out" 2>&1 &
RUN=$!
for i in $(seq 600); do [ "$(receipts)" -gt "$n" ] && break; sleep 0.05; done
[ "$(receipts)" -gt "$n" ] && echo "slow run: started"
` + stop + `
[ -e /run/prod-write.pid ] || echo "stopped: pid file removed"
readlink /proc/$SERVE/exe > /dev/null 2>&1 || echo "stopped: the service exited"
grep -c 'prod-write serve: stopped$' "$LOG" | sed 's/^/stopped: logged /'
# With the service gone, replay reads the journal itself (a PATH: local).
prod-write --config /etc/prod-write/prod-write.toml replay /var/lib/prod-write/journal/receipts.jsonl
wait $RUN
cat "$ROOT/slow.out"
`
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "bash", "-c", script)
	cmd.Dir = root
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
		"ROOT=" + root, "CLONE=" + clone, "HOST_NS=" + hostNS, "TOKEN=" + token}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	// The service left the script's process group (setsid): if the
	// documented stop did not end it, the test does.
	if b, rerr := os.ReadFile(filepath.Join(root, "run/prod-write.pid")); rerr == nil {
		t.Error("the pid file is still there: the documented stop did not run or did not remove it")
		if pid, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && pid > 1 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	serveLog, _ := os.ReadFile(filepath.Join(root, "var/log/prod-write.log"))
	t.Logf("the documented steps:\n%s\nthe service's log:\n%s", out.String(), serveLog)
	if err != nil {
		t.Fatalf("the documented steps failed: %v", err)
	}
	got := out.String()
	for _, want := range []string{
		"pid file: the service's",
		"pid file: root:root 600",
		"log: root:root 600",
		"socket dir: prod-write:prod-write 755",
		"socket: prod-write:prod-write-callers 660",
		// setuid, setgid and kill (bits 7, 6 and 5), and nothing else
		// (the service clears its ambient set itself).
		"CapPrm:\t00000000000000e0", "CapEff:\t00000000000000e0", "CapBnd:\t00000000000000e0",
		"ok: no weakness found (checked as agent)",
		"NoNewPrivs:\t1",
		"home config: agent 755",
		"[server]\nport = 8080\n",
		"installed: deployer 644",
		"0 failed, 0 incomplete",
		// Changing the policy: four runs, across an approver added,
		// the runner key rotated and approvers raised to 2, all green;
		// doctor clean after the operation's removal.
		"4 runs: 0 failed, 0 incomplete",
		"refused reloads: 1",
		"history-lacks-version",
		"recorded, then reloaded",
		// The documented stop, with a run in progress: it returned once
		// the service had exited, the run's outcome written, and the run
		// succeeded.
		"slow run: started",
		"stopped: pid file removed",
		"stopped: the service exited",
		"stopped: logged 1",
		"5 runs: 0 failed, 0 incomplete",
		"slow run: exit 0",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if n := strings.Count(got, "ok: no weakness found (checked as agent)"); n != 2 {
		t.Errorf("doctor as the agent found no weakness %d times, want 2 (after the first run and after the changes)", n)
	}
	if strings.Contains(got, token) || strings.Contains(string(serveLog), token) {
		t.Error("the secret was printed")
	}
	// The host's accounts are untouched.
	passwd, err := os.ReadFile("/etc/passwd")
	must(t, err)
	for _, name := range []string{"prod-write:", "deployer:", "smith:"} {
		if bytes.Contains(passwd, []byte("\n"+name)) {
			t.Errorf("the host's /etc/passwd gained %s", name)
		}
	}
}

// testReload is the reload of the changes block: the documented one
// (DOC_RELOAD), then the service's word that it reloaded (success) or
// refused (failure), awaited in its log with a bound.
const testReload = `reload() {
  n=$(grep -c 'reloaded the trust policy and registry' "$LOG" || true)
  f=$(grep -c 'reload failed' "$LOG" || true)
  {
DOC_RELOAD
  } || return 1
  for i in $(seq 600); do
    [ "$(grep -c 'reloaded the trust policy and registry' "$LOG" || true)" -gt "$n" ] && return 0
    [ "$(grep -c 'reload failed' "$LOG" || true)" -gt "$f" ] && return 1
    sleep 0.05
  done
  echo "the service said nothing of the reload" >&2
  return 1
}`

// The unit's bounding and ambient sets, the run script's without systemd,
// and what the documentation says the service holds are the same three
// capabilities (the docs once said two while the unit held three).
// Runs as any user.
func TestCapabilitiesAgree(t *testing.T) {
	unit, err := os.ReadFile("../../packaging/systemd/prod-write.service")
	must(t, err)
	var bounding, ambient string
	for _, l := range strings.Split(string(unit), "\n") {
		if v, ok := strings.CutPrefix(l, "CapabilityBoundingSet="); ok {
			bounding = v
		}
		if v, ok := strings.CutPrefix(l, "AmbientCapabilities="); ok {
			ambient = v
		}
	}
	want := "CAP_SETUID CAP_SETGID CAP_KILL"
	if bounding != want || ambient != want {
		t.Fatalf("the unit: CapabilityBoundingSet=%q AmbientCapabilities=%q, want %q", bounding, ambient, want)
	}
	var setpriv []string
	for _, c := range strings.Fields(want) {
		setpriv = append(setpriv, "+"+strings.ToLower(strings.TrimPrefix(c, "CAP_")))
	}
	run := deploymentBlocks(t)[2]
	for _, flag := range []string{"--inh-caps", "--ambient-caps", "--bounding-set"} {
		if w := flag + "=-all," + strings.Join(setpriv, ","); !strings.Contains(run, w) {
			t.Errorf("the run script lacks %s", w)
		}
	}
	for _, doc := range []string{"../../docs/DEPLOYMENT.md", "../../packaging/README.md"} {
		b, err := os.ReadFile(doc)
		must(t, err)
		s := string(b)
		for _, wrong := range []string{"only the two", "two capabilities", "`CapabilityBoundingSet=CAP_SETUID CAP_SETGID`", "`CAP_SETGID` only"} {
			if strings.Contains(s, wrong) {
				t.Errorf("%s says %q: the service holds three", doc, wrong)
			}
		}
		if !strings.Contains(s, "CAP_KILL") {
			t.Errorf("%s never names CAP_KILL", doc)
		}
	}
}

// oneCommandMarker precedes the one command of "In one command".
const oneCommandMarker = "<!-- tested: tests/deploy runs this one command -->"

// "In one command" of docs/DEPLOYMENT.md, run as it stands: the
// setup block's steps 1 and 2 (the accounts and the binaries), then the
// one command, then the history record and doctor as the agent (the lines
// the command prints),
// which finds no weakness in what it wrote; and the same command again,
// which refuses, writing nothing. The section's table of what the command
// did of each step and what is left is checked against what it wrote,
// and "Step by step" says at each step what the command did of it.
func TestSetupServiceInOneCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the documented deployment runs only as root (CI runs as root): it creates accounts and mounts")
	}
	for _, tool := range []string{"unshare", "useradd", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the documented deployment needs %s", tool)
		}
	}
	b, err := os.ReadFile("../../docs/DEPLOYMENT.md")
	must(t, err)
	_, after, ok := strings.Cut(string(b), oneCommandMarker+"\n```sh\n")
	if !ok {
		t.Fatal("docs/DEPLOYMENT.md has no one command marked")
	}
	one, _, ok := strings.Cut(after, "\n```")
	if !ok || strings.Count(strings.TrimSpace(one), "\n") != 0 || !strings.HasPrefix(one, "prod-write setup service") {
		t.Fatalf("the one command is not one setup service line: %q", one)
	}
	setupBlock := deploymentBlocks(t)[0]
	steps, _, ok := strings.Cut(setupBlock, "\n# 3.")
	if !ok || !strings.Contains(steps, "# 1.") || !strings.Contains(steps, "# 2.") {
		t.Fatalf("the setup block has no steps 1 and 2 before a step 3:\n%s", steps)
	}
	done, left := oneCommandTable(t, after)
	for n := 3; n <= 8; n++ {
		if c := stepComment(setupBlock, n); !strings.Contains(c, "(setup service:") {
			t.Errorf("step %d of the setup block does not say what setup service did of it:\n%s", n, c)
		}
	}
	_, byHand, _ := strings.Cut(string(b), "\n### Step by step\n")
	byHand, _, _ = strings.Cut(byHand, testedMarker)
	if !strings.Contains(byHand, "one command") {
		t.Errorf("\"Step by step\" does not say what is left after the one command:\n%s", byHand)
	}
	// What the table says the command wrote, and what it says is left.
	var exists strings.Builder
	for _, p := range append(append([]string(nil), done...), left...) {
		fmt.Fprintf(&exists, "[ -e '%s' ] && echo 'exists: %s' || echo 'absent: %s'\n", p, p, p)
	}

	root, err := os.MkdirTemp("/tmp", "prod-write-setup-")
	must(t, err)
	must(t, os.Chmod(root, 0o755))
	t.Cleanup(func() { os.RemoveAll(root) })
	clone := filepath.Join(root, "clone")
	must(t, os.MkdirAll(filepath.Join(clone, "bin"), 0o755))
	mod, err := exec.Command("go", "env", "GOMOD").Output()
	must(t, err)
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(clone, "bin")+"/", "./cmd/prod-write", "./cmd/prod-write-cli", "./cmd/prod-write-net")
	build.Dir = filepath.Dir(strings.TrimSpace(string(mod)))
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	hostNS, err := os.Readlink("/proc/self/ns/mnt")
	must(t, err)
	script := nsPrelude + steps + "\n" + one + `
echo "setup: exit $?"
` + exists.String() + `grep -c '^id = ' /etc/prod-write/trust.toml | sed 's/^/principals: /'
prod-write history record --config /etc/prod-write/prod-write.toml
prod-write doctor --config /etc/prod-write/prod-write.toml --as agent
echo "doctor: exit $?"
set +e
cp /etc/prod-write/trust.toml "$ROOT/trust.before"
` + one + `
echo "again: exit $?"
cmp /etc/prod-write/trust.toml "$ROOT/trust.before" && echo "trust.toml unchanged"
`
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--mount", "--propagation", "private", "bash", "-c", script)
	cmd.Dir = root
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
		"ROOT=" + root, "CLONE=" + clone, "HOST_NS=" + hostNS}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	t.Logf("the documented steps:\n%s", out.String())
	if err != nil {
		t.Fatalf("the documented steps failed: %v", err)
	}
	got := out.String()
	for _, want := range []string{"setup: exit 0", "prod-write history record --config /etc/prod-write/prod-write.toml\n", "ok: no weakness found (checked as agent)", "doctor: exit 0", "again: exit 65", "trust.toml unchanged",
		// The runner's alone: the others' are left to add.
		"principals: 1"} {
		if !strings.Contains(got, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	for _, p := range done {
		if !strings.Contains(got, "exists: "+p+"\n") {
			t.Errorf("\"In one command\" says setup service wrote %s; it did not", p)
		}
	}
	for _, p := range left {
		if !strings.Contains(got, "absent: "+p+"\n") {
			t.Errorf("\"In one command\" leaves %s to do; setup service wrote it", p)
		}
	}
	passwd, err := os.ReadFile("/etc/passwd")
	must(t, err)
	if bytes.Contains(passwd, []byte("\nprod-write:")) {
		t.Error("the host's /etc/passwd gained prod-write")
	}
}

// oneCommandTable reads the table of "In one command" (text is the
// document from the one command on): a row for each step of the setup
// block and for what follows it, each with what setup service did and
// what is left. It returns the absolute paths each column names in
// backquotes.
func oneCommandTable(t *testing.T, text string) (done, left []string) {
	t.Helper()
	section, _, _ := strings.Cut(text, "\n### ")
	var rows []string
	for _, l := range strings.Split(section, "\n") {
		if !strings.HasPrefix(l, "| ") || strings.HasPrefix(l, "| ---") {
			continue
		}
		cells := strings.Split(strings.Trim(l, "| "), " | ")
		if len(cells) != 3 {
			t.Fatalf("a row of the table is not step | done | left: %q", l)
		}
		rows = append(rows, cells[0])
		done = append(done, backquotedPaths(cells[1])...)
		left = append(left, backquotedPaths(cells[2])...)
		if strings.Contains(cells[0], "check") && !strings.Contains(cells[2], "prod-write doctor") ||
			strings.Contains(cells[0], "configuration") && !strings.Contains(cells[2], "prod-write history record") {
			t.Errorf("the table's row %q does not name what is left: %q", cells[0], cells[2])
		}
	}
	for _, want := range []string{"1.", "2.", "3.", "4.", "5.", "6.", "7.", "8.", "the configuration", "starting the service", "the check"} {
		found := false
		for _, r := range rows {
			found = found || strings.HasPrefix(r, want)
		}
		if !found {
			t.Errorf("\"In one command\" has no table row for %q (rows: %q)", want, rows)
		}
	}
	if len(done) == 0 || len(left) == 0 {
		t.Fatalf("the table names no path done (%q) or left (%q)", done, left)
	}
	return done, left
}

// backquotedPaths returns the absolute paths a table cell names, each
// alone in backquotes.
func backquotedPaths(cell string) []string {
	var out []string
	parts := strings.Split(cell, "`")
	for i := 1; i < len(parts); i += 2 {
		if p := parts[i]; strings.HasPrefix(p, "/") && !strings.ContainsAny(p, " '*") {
			out = append(out, p)
		}
	}
	return out
}

// stepComment returns the comment that opens step n of the setup block.
func stepComment(block string, n int) string {
	_, rest, ok := strings.Cut(block, fmt.Sprintf("\n# %d.", n))
	if !ok {
		return ""
	}
	var c []string
	for i, l := range strings.Split(rest, "\n") {
		if i > 0 && !strings.HasPrefix(l, "#") {
			break
		}
		c = append(c, l)
	}
	return strings.Join(c, "\n")
}
