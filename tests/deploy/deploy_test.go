// Package deploy proves the three-account deployment of docs/DESIGN.md §13 and
// docs/adr/0011-runner-service.md with real accounts and a real runner
// service: `prod-write serve` runs as a service account holding only
// CAP_SETUID, CAP_SETGID and CAP_KILL, the agent is a client over the Unix socket, and
// programs run as the operation's run_as account. It runs only as root (CI
// runs as root) and says so when skipped.
//
// Every subtest is named for the attack it tries and says which defence
// makes it fail; with that defence removed the subtest fails.
package deploy

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/receipts"
)

// The accounts. pwtest-other is in no trust policy and runs nothing.
const (
	agentUser   = "pwtest-agent"
	serviceUser = "pwtest-svc"
	deployUser  = "pwtest-deploy"
	otherUser   = "pwtest-other"
)

// agentValue is what the agent puts in its own environment for the secret:
// it must never be what a program gets.
const agentValue = "agent-value"

type account struct {
	name     string
	uid, gid int
}

var rootAcct = account{name: "root"}

// ensureUser creates a system account for the test (or reuses one left by
// an earlier run) and removes it afterwards if it created it.
func ensureUser(t *testing.T, name string) account {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
		if err != nil {
			t.Fatalf("useradd %s: %v\n%s", name, err, out)
		}
		t.Cleanup(func() {
			if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
				t.Logf("userdel %s: %v\n%s", name, err, out)
			}
		})
		if u, err = user.Lookup(name); err != nil {
			t.Fatal(err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return account{name: name, uid: uid, gid: gid}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// syncBuffer is a bytes.Buffer several goroutines may write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type deployment struct {
	root string
	bin  string // prod-write; prod-write-cli and prod-write-net are beside it

	etc, config, trust string // the policy: root-owned, 0644
	state, runnerKey   string // the service's: 0700 / 0600
	creds              string // the service's credentials directory
	socket             string
	srv                string // "production": pwtest-deploy's, 0755
	admin              string // root's: the keys of smith, alice and gera
	smithKey, aliceKey string
	geraKey            string

	agentHome, agentWork, agentConfig, agentKey string
	appFile                                     string // the agent's private input, 0600
	otherHome, otherConfig                      string

	agent, svc, deploy, other account
	secret                    string // the value of DEPLOY_TOKEN in the credentials directory

	serveLog *syncBuffer
	outputs  *syncBuffer // every client's stdout and stderr, to search for the secret

	served   *exec.Cmd     // prod-write serve
	serveEnd chan struct{} // closed once it has exited
}

// result is how a command ended.
type result struct {
	out, err string
	code     int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.out, r.err)
}

// command builds a command run as acct in dir with exactly env: nothing of
// the test's own environment.
func command(acct account, dir string, env []string, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	if env == nil {
		cmd.Env = []string{}
	}
	if acct.uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(acct.uid), Gid: uint32(acct.gid)}}
	}
	cmd.WaitDelay = 15 * time.Second
	return cmd
}

// exec runs a command to its end and records what it printed.
func (d *deployment) exec(t *testing.T, acct account, dir string, env []string, name string, args ...string) result {
	t.Helper()
	cmd := command(acct, dir, env, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{out: out.String(), err: errb.String()}
	d.outputs.Write([]byte(r.out + r.err))
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %q as %s: %v", name, args, acct.name, err)
	}
	return r
}

// agentEnv is the agent's environment: its client configuration and key,
// and its own value for the secret the service holds.
func (d *deployment) agentEnv(extra ...string) []string {
	return append([]string{
		"PATH=/usr/bin:/bin",
		"HOME=" + d.agentHome,
		"PROD_WRITE_CONFIG=" + d.agentConfig,
		"PROD_WRITE_KEY=" + d.agentKey,
		"DEPLOY_TOKEN=" + agentValue,
	}, extra...)
}

// asAgent runs prod-write as the agent, from its working directory.
func (d *deployment) asAgent(t *testing.T, args ...string) result {
	t.Helper()
	return d.exec(t, d.agent, d.agentWork, d.agentEnv(), d.bin, args...)
}

// asAgentIn runs prod-write as the agent from dir, with PWD=dir as a shell
// that cd'd there would set (so a symlink stays a symlink to the client).
func (d *deployment) asAgentIn(t *testing.T, dir string, args ...string) result {
	t.Helper()
	return d.exec(t, d.agent, dir, d.agentEnv("PWD="+dir), d.bin, args...)
}

// asRoot runs prod-write as root, a client of the service like any other:
// the test acts as smith, alice and gera this way.
func (d *deployment) asRoot(t *testing.T, args ...string) result {
	t.Helper()
	return d.exec(t, rootAcct, d.admin, []string{"PATH=/usr/bin:/bin", "HOME=" + d.admin}, d.bin, append([]string{"--config", d.config}, args...)...)
}

var fpRE = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// planned is the part of `plan --json` the test reads.
type planned struct {
	Fingerprint string `json:"fingerprint"`
	Cwd         string `json:"cwd"`
	Planner     string `json:"planner"`
	Stored      bool   `json:"stored"`
}

// plan plans op as the agent from dir and returns the plan.
func (d *deployment) plan(t *testing.T, dir, op string, args ...string) planned {
	t.Helper()
	r := d.asAgentIn(t, dir, append([]string{"plan", op, "--target", "production", "--json"}, args...)...)
	if r.code != 0 {
		t.Fatalf("plan %s as the agent: %s", op, r)
	}
	var p planned
	if err := json.Unmarshal([]byte(r.out), &p); err != nil || !fpRE.MatchString(p.Fingerprint) {
		t.Fatalf("plan %s: no fingerprint in its output (%v): %s", op, err, r)
	}
	if !p.Stored || p.Planner != "agent" {
		t.Fatalf("plan %s was not stored as the agent's: %s", op, r)
	}
	return p
}

// approve is smith filing a certainty record and alice approving it.
func (d *deployment) approve(t *testing.T, fp string) {
	t.Helper()
	if r := d.asRoot(t, "file", fp, "--key", d.smithKey, "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high"); r.code != 0 {
		t.Fatalf("file as smith: %s", r)
	}
	if r := d.asRoot(t, "decide", fp, "approve", "--key", d.aliceKey); r.code != 0 {
		t.Fatalf("decide as alice: %s", r)
	}
}

// geraGo is a standing go for uses runs.
func (d *deployment) geraGo(t *testing.T, fp string, uses int) {
	t.Helper()
	if r := d.asRoot(t, "gera", "go", fp, "--uses", strconv.Itoa(uses), "--key", d.geraKey); r.code != 0 {
		t.Fatalf("gera go: %s", r)
	}
}

// refusalCode is the code of a --json refusal: the last line of stderr.
func refusalCode(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	var r struct {
		Outcome string `json:"outcome"`
		Code    string `json:"code"`
	}
	if json.Unmarshal([]byte(lines[len(lines)-1]), &r) != nil || r.Outcome != "refused" {
		return ""
	}
	return r.Code
}

// wantRefused checks a refusal: exit 77 with code.
func wantRefused(t *testing.T, what string, r result, code string) {
	t.Helper()
	if r.code != 77 || refusalCode(r.err) != code {
		t.Errorf("%s: want exit 77 refused %s, got %s", what, code, r)
	}
}

// journalLines reads the journal as root.
func (d *deployment) journalLines(t *testing.T) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.state, "journal", "receipts.jsonl"))
	if os.IsNotExist(err) {
		return nil
	}
	must(t, err)
	var lines [][]byte
	for l := range bytes.SplitSeq(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			lines = append(lines, l)
		}
	}
	return lines
}

// runsOf returns the intents and outcomes of fp's runs, by run id.
func (d *deployment) runsOf(t *testing.T, fp string) (intents map[string]*receipts.Receipt, outcomes map[string]*receipts.Receipt) {
	t.Helper()
	intents, outcomes = map[string]*receipts.Receipt{}, map[string]*receipts.Receipt{}
	var all []*receipts.Receipt
	for _, l := range d.journalLines(t) {
		_, r, err := receipts.Decode(l)
		if err != nil {
			t.Fatalf("a journal line does not decode: %v\n%s", err, l)
		}
		all = append(all, r)
		if r.Intent != nil && r.Intent.Fingerprint == fp {
			intents[r.RunID] = r
		}
	}
	for _, r := range all {
		if r.Outcome != nil && intents[r.RunID] != nil {
			outcomes[r.RunID] = r
		}
	}
	return intents, outcomes
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replayOK has root replay the service's journal through the service.
func (d *deployment) replayOK(t *testing.T) {
	t.Helper()
	r := d.asRoot(t, "replay", "--json")
	var rep struct {
		Summary receipts.Summary `json:"summary"`
	}
	if r.code != 0 || json.Unmarshal([]byte(r.out), &rep) != nil || !rep.Summary.OK || rep.Summary.Failed != 0 {
		t.Errorf("replay of the service's journal: %s", r)
	}
}

// fileState is what the test compares of a file: owner, mode and bytes.
type fileState struct {
	uid  uint32
	mode fs.FileMode
	sum  string
}

// snapshot records every file under dir (as root).
func snapshot(t *testing.T, dir string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fileState{uid: fi.Sys().(*syscall.Stat_t).Uid, mode: fi.Mode()}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			st.sum = hex.EncodeToString(s[:])
		}
		out[p] = st
		return nil
	})
	must(t, err)
	return out
}

var payloadRE = regexp.MustCompile(`"payload"\s*:\s*"([A-Za-z0-9+/=_-]*)"`)

// holdsSecret reports whether b holds the secret, as it is or inside a
// base64 DSSE payload.
func holdsSecret(b []byte, secret string) bool {
	if bytes.Contains(b, []byte(secret)) {
		return true
	}
	for _, m := range payloadRE.FindAllSubmatch(b, -1) {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
			if p, err := enc.DecodeString(string(m[1])); err == nil && holdsSecret(p, secret) {
				return true
			}
		}
	}
	return false
}

// keygen makes a key with prod-write keygen, as owner, and returns its
// public key as trust.toml takes it.
func (d *deployment) keygen(t *testing.T, owner account, path string) string {
	t.Helper()
	r := d.exec(t, owner, "/", []string{"PATH=/usr/bin:/bin"}, d.bin, "keygen", "--out", path)
	if r.code != 0 {
		t.Fatalf("keygen --out %s as %s: %s", path, owner.name, r)
	}
	pub := strings.TrimSpace(r.out)
	if !strings.HasPrefix(pub, "ed25519:") {
		t.Fatalf("keygen printed %q", r.out)
	}
	return pub
}

// opsTOML is the registry. srv is the production directory.
func opsTOML(srv string) string {
	return `
[[operation]]
name = "deploy-config"
description = "Install a reviewed config file into production"
program = "install"
args = ["-m", "0644", "{file.config}", "` + srv + `/{param.name}"]
targets = ["production"]
run_as = "` + deployUser + `"
timeout = "30s"
[operation.params.name]
pattern = "^[a-z0-9-]{1,40}$"
[operation.files.config]
max_size = "64KiB"
[operation.env]
secret = ["DEPLOY_TOKEN"]

[[operation]]
name = "install-reviewed"
description = "deploy-config from a declared cwd: the caller's directory plays no part"
program = "install"
args = ["-m", "0644", "{file.config}", "` + srv + `/{param.name}"]
targets = ["production"]
run_as = "` + deployUser + `"
cwd = "/"
timeout = "30s"
[operation.params.name]
pattern = "^[a-z0-9-]{1,40}$"
[operation.files.config]
max_size = "64KiB"

[[operation]]
name = "introspect"
description = "Print the program's own ids, capability sets and environment names"
mutating = false
program = "grep"
args = ["-a", "-h", "-o", "-E", '^(Uid|Gid|Groups|Cap[A-Za-z]+):.*|DEPLOY_TOKEN=agent-value|[A-Z_]+=', "/proc/self/status", "/proc/self/environ"]
targets = ["production"]
run_as = "` + deployUser + `"
timeout = "30s"
[operation.env]
secret = ["DEPLOY_TOKEN"]
set = { APP_ENV = "{target}" }

[[operation]]
name = "hold"
description = "Hold a secret for a while"
program = "sleep"
args = ["{param.secs}"]
targets = ["production"]
run_as = "` + deployUser + `"
timeout = "30s"
[operation.params.secs]
pattern = "^[1-9]$"
[operation.env]
secret = ["DEPLOY_TOKEN"]

[[operation]]
name = "hold-short"
description = "Hold longer than its timeout allows"
program = "sleep"
args = ["{param.secs}"]
targets = ["production"]
run_as = "` + deployUser + `"
timeout = "1s"
[operation.params.secs]
pattern = "^[1-9]$"

[[operation]]
name = "spew"
description = "Write far more than a client will take"
program = "head"
args = ["-c", "4000000", "/dev/zero"]
targets = ["production"]
run_as = "` + deployUser + `"
timeout = "3s"

[[operation]]
name = "show-cwd"
description = "Print the directory the program runs in"
program = "pwd"
targets = ["production"]
run_as = "` + deployUser + `"
timeout = "30s"

[[operation]]
name = "as-agent"
description = "Runs as the agent's own account: must be refused"
program = "true"
targets = ["production"]
run_as = "` + agentUser + `"

[[operation]]
name = "as-service"
description = "Runs as the service's own account: must be refused"
program = "true"
targets = ["production"]
run_as = "` + serviceUser + `"

[[operation]]
name = "as-root"
description = "Runs as root without allow_root: must be refused"
program = "true"
targets = ["production"]
run_as = "root"
`
}

// deploy lays out the deployment under a temporary root and starts the
// service.
func deploy(t *testing.T) *deployment {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the three-account runner-service test runs only as root (CI runs as root); run `sudo go test ./tests/deploy` to prove the trust boundary")
	}
	for _, tool := range []string{"useradd", "userdel", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the deployment test needs %s", tool)
		}
	}
	d := &deployment{
		agent: ensureUser(t, agentUser), svc: ensureUser(t, serviceUser),
		deploy: ensureUser(t, deployUser), other: ensureUser(t, otherUser),
		serveLog: &syncBuffer{}, outputs: &syncBuffer{},
	}
	var err error
	// Not t.TempDir: its parents are private to root, and the other
	// accounts must traverse to the binaries, the socket and their dirs.
	d.root, err = os.MkdirTemp("/tmp", "prod-write-deploy-")
	must(t, err)
	if os.Getenv("KEEP") == "" {
		t.Cleanup(func() { os.RemoveAll(d.root) })
	} else {
		t.Logf("KEEP: the deployment stays in %s", d.root)
	}
	must(t, os.Chmod(d.root, 0o755))

	mkdir := func(p string, mode os.FileMode, owner account) string {
		must(t, os.MkdirAll(p, mode))
		must(t, os.Chmod(p, mode))
		must(t, os.Chown(p, owner.uid, owner.gid))
		return p
	}
	write := func(p, data string, mode os.FileMode, owner account) {
		must(t, os.WriteFile(p, []byte(data), mode))
		must(t, os.Chmod(p, mode))
		must(t, os.Chown(p, owner.uid, owner.gid))
	}

	// The binaries, root's.
	binDir := mkdir(filepath.Join(d.root, "bin"), 0o755, rootAcct)
	d.bin = filepath.Join(binDir, "prod-write")
	mod, err := exec.Command("go", "env", "GOMOD").Output()
	must(t, err)
	build := exec.Command("go", "build", "-trimpath", "-o", binDir+"/", "./cmd/prod-write", "./cmd/prod-write-cli", "./cmd/prod-write-net")
	build.Dir = filepath.Dir(strings.TrimSpace(string(mod)))
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building prod-write, prod-write-cli and prod-write-net: %v\n%s", err, out)
	}
	for _, b := range []string{"prod-write", "prod-write-cli", "prod-write-net"} {
		must(t, os.Chmod(filepath.Join(binDir, b), 0o755))
	}

	d.etc = mkdir(filepath.Join(d.root, "etc"), 0o755, rootAcct)
	mkdir(filepath.Join(d.etc, "operations"), 0o755, rootAcct)
	d.state = mkdir(filepath.Join(d.root, "state"), 0o700, d.svc)
	d.creds = mkdir(filepath.Join(d.root, "creds"), 0o700, d.svc)
	runDir := mkdir(filepath.Join(d.root, "run"), 0o755, d.svc)
	d.socket = filepath.Join(runDir, "pw.sock")
	d.srv = mkdir(filepath.Join(d.root, "srv"), 0o755, d.deploy)
	d.admin = mkdir(filepath.Join(d.root, "admin"), 0o700, rootAcct)
	mkdir(filepath.Join(d.root, "home"), 0o755, rootAcct)
	d.agentHome = mkdir(filepath.Join(d.root, "home", "agent"), 0o700, d.agent)
	d.otherHome = mkdir(filepath.Join(d.root, "home", "other"), 0o700, d.other)
	mkdir(filepath.Join(d.root, "work"), 0o755, rootAcct)
	// The agent works in a directory the run_as account can enter: a
	// program whose operation declares no cwd runs in the caller's.
	d.agentWork = mkdir(filepath.Join(d.root, "work", "agent"), 0o755, d.agent)

	// The production secret, in the service's credentials directory.
	var rnd [16]byte
	_, err = rand.Read(rnd[:])
	must(t, err)
	d.secret = "pwsecret-" + hex.EncodeToString(rnd[:])
	write(filepath.Join(d.creds, "DEPLOY_TOKEN"), d.secret, 0o600, d.svc)

	// Keys, made with keygen by their owners.
	d.runnerKey = filepath.Join(d.state, "runner.key")
	d.agentKey = filepath.Join(d.agentHome, "agent.key")
	d.smithKey = filepath.Join(d.admin, "smith.key")
	d.aliceKey = filepath.Join(d.admin, "alice.key")
	d.geraKey = filepath.Join(d.admin, "gera.key")
	runner := d.keygen(t, d.svc, d.runnerKey)
	agent := d.keygen(t, d.agent, d.agentKey)
	smith := d.keygen(t, rootAcct, d.smithKey)
	alice := d.keygen(t, rootAcct, d.aliceKey)
	gera := d.keygen(t, rootAcct, d.geraKey)

	// The policy, root's.
	d.trust = filepath.Join(d.etc, "trust.toml")
	var trust strings.Builder
	for _, p := range []struct{ id, role, key string }{
		{"agent", "agent", agent}, {"smith", "operator", smith}, {"alice", "approver", alice},
		{"gera", "gera", gera}, {"runner", "runner", runner},
	} {
		fmt.Fprintf(&trust, "[[principal]]\nid = %q\nroles = [%q]\nkey = %q\n\n", p.id, p.role, p.key)
	}
	write(d.trust, trust.String(), 0o644, rootAcct)
	write(filepath.Join(d.etc, "operations", "ops.toml"), opsTOML(d.srv), 0o644, rootAcct)
	d.config = filepath.Join(d.etc, "prod-write.toml")
	write(d.config, fmt.Sprintf(`registry = "operations"
trust = "trust.toml"
state = %q
runner_key = %q
secure_path = ["/usr/bin", "/bin"]

[service]
socket = %q
# Every account may connect: the tests try what a caller with no key of
# the policy (pwtest-other) can do. The default is 0660.
socket_mode = "0666"
credentials = %q
`, d.state, d.runnerKey, d.socket, d.creds), 0o644, rootAcct)

	// The agent's and the other account's client configurations: only
	// where the service listens.
	client := fmt.Sprintf("[service]\nsocket = %q\n", d.socket)
	d.agentConfig = filepath.Join(d.agentHome, "prod-write.toml")
	write(d.agentConfig, client, 0o644, d.agent)
	d.otherConfig = filepath.Join(d.otherHome, "prod-write.toml")
	write(d.otherConfig, client, 0o644, d.other)
	// The agent's input: private to the agent, so only a descriptor the
	// agent's client opened can bring it to the service.
	d.appFile = filepath.Join(d.agentHome, "app.toml")
	write(d.appFile, "# reviewed config\nversion = 1\n", 0o600, d.agent)

	d.serve(t)
	return d
}

// serve starts `prod-write serve` as the service account with only
// CAP_SETUID, CAP_SETGID and CAP_KILL (to stop a run_as program on timeout
// or a relayed signal), as a systemd unit with AmbientCapabilities= would,
// and waits for its socket.
func (d *deployment) serve(t *testing.T) { d.serveUntil(t, t) }

// restart stops the service with SIGTERM and starts it again, as
// `systemctl restart` would: prod-write.toml is read only at start. The
// new service reports to t but runs until until ends, so that a subtest
// may restart the service its test's later subtests use.
func (d *deployment) restart(t, until *testing.T) {
	t.Helper()
	must(t, d.served.Process.Signal(syscall.SIGTERM))
	select {
	case <-d.serveEnd:
	case <-time.After(10 * time.Second):
		t.Fatalf("prod-write serve did not stop within 10s of SIGTERM\n%s", d.serveLog)
	}
	// Else the new service's wait for its socket would find the old one.
	if _, err := os.Lstat(d.socket); err == nil {
		t.Fatalf("the stopped service left its socket %s behind", d.socket)
	}
	d.serveUntil(t, until)
}

// serveUntil is serve, reporting to t, with the service stopped when
// until ends.
func (d *deployment) serveUntil(t, until *testing.T) {
	t.Helper()
	cmd := exec.Command(d.bin, "serve", "--config", d.config)
	cmd.Dir = d.root
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.Stdout, cmd.Stderr = d.serveLog, d.serveLog
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential:  &syscall.Credential{Uid: uint32(d.svc.uid), Gid: uint32(d.svc.gid)},
		AmbientCaps: []uintptr{unix.CAP_SETUID, unix.CAP_SETGID, unix.CAP_KILL},
		Setpgid:     true,
	}
	must(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()
	d.served, d.serveEnd = cmd, exited
	until.Cleanup(func() {
		// A service restarted since has exited already: the signal then
		// fails, and exited is closed.
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		// The log is shared: the last service started logs it all.
		if d.served == cmd {
			until.Logf("the service's log:\n%s", d.serveLog)
		}
	})
	up := waitFor(10*time.Second, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		fi, err := os.Stat(d.socket)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	})
	select {
	case <-exited:
		t.Fatalf("prod-write serve exited: %v\n%s", cmd.ProcessState, d.serveLog)
	default:
	}
	if !up {
		t.Fatalf("prod-write serve did not listen on %s within 10s\n%s", d.socket, d.serveLog)
	}
}

// procOf finds the process running as uid whose argv[0] is argv0.
func procOf(uid int, argv0 string) int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		fi, err := os.Stat("/proc/" + e.Name())
		if err != nil || int(fi.Sys().(*syscall.Stat_t).Uid) != uid {
			continue
		}
		cl, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && string(bytes.SplitN(cl, []byte{0}, 2)[0]) == argv0 {
			return pid
		}
	}
	return 0
}

// statusField returns the value of a /proc/PID/status line.
func statusField(status, name string) string {
	for l := range strings.SplitSeq(status, "\n") {
		if v, ok := strings.CutPrefix(l, name+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func TestRunnerServiceBoundary(t *testing.T) {
	start := time.Now()
	d := deploy(t)
	t.Logf("deployment up in %s", time.Since(start).Round(time.Millisecond))
	journalLen := func() int { return len(d.journalLines(t)) }

	// Defences: files travel as descriptors the agent's client opened
	// (pkg/cli/client.go callService, pkg/service Call.File); the program
	// runs as run_as (servicecall.Call.Credential). Without the first, the
	// service (pwtest-svc) could not read the agent's 0600 file and plan
	// would fail; without the second, the file would be the agent's or the
	// service's, not pwtest-deploy's.
	t.Run("happy_path_files_travel_as_descriptors_and_run_as_writes_production", func(t *testing.T) {
		if r := d.exec(t, d.svc, "/", []string{"PATH=/usr/bin:/bin"}, "/usr/bin/cat", d.appFile); r.code == 0 {
			t.Fatalf("the service account can read the agent's private file, so this proves nothing: %s", r)
		}
		p := d.plan(t, d.agentWork, "deploy-config", "--param", "name=app1", "--file", "config="+d.appFile)
		if p.Cwd != d.agentWork {
			t.Errorf("plan cwd %q, want %q", p.Cwd, d.agentWork)
		}
		// Not approved yet: refused, nothing runs.
		wantRefused(t, "run before approval", d.asAgent(t, "run", p.Fingerprint, "--json"), "no_approval")
		d.approve(t, p.Fingerprint)
		before := journalLen()
		if r := d.asAgent(t, "run", p.Fingerprint); r.code != 0 {
			t.Fatalf("approved run as the agent: %s", r)
		}
		target := filepath.Join(d.srv, "app1")
		fi, err := os.Stat(target)
		if err != nil {
			t.Fatalf("the production file did not appear: %v", err)
		}
		if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid != d.deploy.uid {
			t.Errorf("the production file is owned by uid %d, want %s (%d)", uid, deployUser, d.deploy.uid)
		}
		if fi.Mode().Perm() != 0o644 {
			t.Errorf("the production file has mode %v, want 0644", fi.Mode())
		}
		want, _ := os.ReadFile(d.appFile)
		if got, _ := os.ReadFile(target); !bytes.Equal(got, want) {
			t.Errorf("the production file holds %q, want %q", got, want)
		}
		if n := journalLen(); n != before+2 {
			t.Errorf("the journal grew by %d lines, want 2 (intent and outcome)", n-before)
		}
		intents, outcomes := d.runsOf(t, p.Fingerprint)
		for id, in := range intents {
			if in.Intent.Invoker.UID != d.agent.uid || in.Intent.Invoker.Principal != "agent" {
				t.Errorf("intent %s names invoker %+v, want uid %d principal agent", id, in.Intent.Invoker, d.agent.uid)
			}
			if o := outcomes[id]; o == nil || o.Outcome.ExitCode != 0 {
				t.Errorf("run %s: outcome %+v", id, o)
			}
		}
		d.replayOK(t)
	})

	// Defence: production privilege belongs to run_as, not to the agent
	// (srv is pwtest-deploy's, 0755). Were srv the agent's, or writable by
	// it, the gate would guard nothing.
	t.Run("agent_writes_production_itself", func(t *testing.T) {
		direct := filepath.Join(d.srv, "direct")
		r := d.exec(t, d.agent, d.agentWork, d.agentEnv(), "/usr/bin/install", "-m", "0644", d.appFile, direct)
		if r.code == 0 || !strings.Contains(r.err, "Permission denied") {
			t.Errorf("the agent ran the production write itself: %s", r)
		}
		if _, err := os.Lstat(direct); err == nil {
			t.Errorf("%s exists", direct)
		}
	})

	// Defences: secrets come only from the service's credentials
	// directory (servicecall.State.Secret; the service reads no environment for
	// a call), which only the service can read; the program runs as
	// another account than the agent, so the agent cannot read its
	// environ; receipts bind secrets by name only. Each assertion fails if
	// its defence is removed: a secret taken from the caller would be
	// agent-value; a creds dir the agent can read is read; a program run as
	// the agent has an environ the agent can read.
	t.Run("agent_reads_or_injects_the_secret", func(t *testing.T) {
		// The credentials directory is out of the agent's reach.
		r := d.exec(t, d.agent, d.agentWork, d.agentEnv(), "/usr/bin/cat", filepath.Join(d.creds, "DEPLOY_TOKEN"))
		if r.code == 0 || strings.Contains(r.out, d.secret) || !strings.Contains(r.err, "Permission denied") {
			t.Errorf("the agent read the service's credential: %s", r)
		}

		// The program's environment: DEPLOY_TOKEN is there, and it is not
		// the agent's value.
		p := d.plan(t, d.agentWork, "introspect")
		r = d.asAgent(t, "run", p.Fingerprint)
		if r.code != 0 {
			t.Fatalf("introspect: %s", r)
		}
		names := regexp.MustCompile(`(?m)^([A-Z_]+)=`).FindAllStringSubmatch(r.out, -1)
		var got []string
		for _, m := range names {
			got = append(got, m[1])
		}
		slices.Sort(got)
		if !slices.Equal(got, []string{"APP_ENV", "DEPLOY_TOKEN"}) {
			t.Errorf("the program's environment names %v, want exactly [APP_ENV DEPLOY_TOKEN]\n%s", got, r.out)
		}
		if strings.Contains(r.out, agentValue) {
			t.Errorf("the program got the agent's DEPLOY_TOKEN:\n%s", r.out)
		}

		// While a program holding the secret runs: its value is the
		// service's (read by root, the test, and never printed), and the
		// agent cannot read it.
		p = d.plan(t, d.agentWork, "hold", "--param", "secs=3")
		d.geraGo(t, p.Fingerprint, 1)
		cmd := command(d.agent, d.agentWork, d.agentEnv(), d.bin, "run", p.Fingerprint)
		var out, errb syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		must(t, cmd.Start())
		waited := make(chan struct{})
		go func() {
			cmd.Wait()
			d.outputs.Write([]byte(out.String() + errb.String()))
			close(waited)
		}()
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-waited
		})
		var pid int
		if !waitFor(5*time.Second, func() bool { pid = procOf(d.deploy.uid, "/usr/bin/sleep"); return pid != 0 }) {
			t.Fatalf("the held program did not show up as %s\nclient: %s%s", deployUser, out.String(), errb.String())
		}
		environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		must(t, err)
		vars := strings.Split(strings.TrimRight(string(environ), "\x00"), "\x00")
		if !slices.Equal(vars, []string{"DEPLOY_TOKEN=" + d.secret}) {
			// Do not print the environment: it would put the secret in the log.
			t.Errorf("the program's environment is not exactly DEPLOY_TOKEN from the credentials directory (%d variables; agent's value: %v)",
				len(vars), slices.Contains(vars, "DEPLOY_TOKEN="+agentValue))
		}
		r = d.exec(t, d.agent, d.agentWork, d.agentEnv(), "/usr/bin/cat", fmt.Sprintf("/proc/%d/environ", pid))
		if r.code == 0 || strings.Contains(r.out, d.secret) {
			t.Errorf("the agent read the running program's environment (exit %d)", r.code)
		}

		// Nowhere in the receipts or the store, nor in anything a client printed.
		<-waited
		if c := cmd.ProcessState.ExitCode(); c != 0 {
			t.Errorf("hold: exit %d: %s", c, errb.String())
		}
		for path, b := range readTree(t, d.state) {
			if holdsSecret(b, d.secret) {
				t.Errorf("%s holds the secret", path)
			}
		}
		if holdsSecret([]byte(d.outputs.String()+out.String()+errb.String()), d.secret) {
			t.Error("a client printed the secret")
		}
	})

	// Defence: programs are forked from the CaplessStarter thread, whose
	// ambient set is cleared (pkg/execute/capless.go); run_as sets the
	// uid. Without the first the program keeps CAP_SETUID/CAP_SETGID in
	// its ambient and permitted sets (the service's, raised by systemd or
	// here by AmbientCaps) and can become any account.
	t.Run("program_inherits_the_service_capabilities", func(t *testing.T) {
		p := d.plan(t, d.agentWork, "introspect")
		r := d.asAgent(t, "run", p.Fingerprint)
		if r.code != 0 {
			t.Fatalf("introspect: %s", r)
		}
		for _, c := range []string{"CapEff", "CapPrm", "CapAmb"} {
			v := statusField(r.out, c)
			if n, err := strconv.ParseUint(v, 16, 64); err != nil || n != 0 {
				t.Errorf("the program's %s is %q, want zero", c, v)
			}
		}
		// The inheritable set too: raising ambient capabilities needed
		// them there, and a file with inheritable file capabilities would
		// turn them back on. The capless thread clears it.
		if n, err := strconv.ParseUint(statusField(r.out, "CapInh"), 16, 64); err != nil || n != 0 {
			t.Errorf("the program's CapInh is %q, want zero", statusField(r.out, "CapInh"))
		}
		id := strconv.Itoa(d.deploy.uid)
		if uids := strings.Fields(statusField(r.out, "Uid")); !slices.Equal(uids, []string{id, id, id, id}) {
			t.Errorf("the program's Uid line is %v, want %s's %s everywhere", uids, deployUser, id)
		}
		gid := strconv.Itoa(d.deploy.gid)
		if gids := strings.Fields(statusField(r.out, "Gid")); !slices.Equal(gids, []string{gid, gid, gid, gid}) {
			t.Errorf("the program's Gid line is %v, want %s's %s everywhere", gids, deployUser, gid)
		}
	})

	// Defence: servicecall.Call.Credential refuses run_as = the caller's own
	// account and run_as = the service's, before anything is consumed.
	// Without it the first program would run as the agent (guarding
	// nothing), the second as the service (able to rewrite the journal and
	// read the runner key).
	t.Run("run_as_the_agent_or_the_service_account", func(t *testing.T) {
		for _, op := range []string{"as-agent", "as-service", "as-root"} {
			p := d.plan(t, d.agentWork, op)
			if op == "as-agent" {
				// Filed by smith, whose account is not the run_as.
				d.approve(t, p.Fingerprint)
			} else {
				// An account no caller may run as: file posts no
				// decision for it (status predicts run); a gera go
				// is given anyway, for run to refuse.
				wantRefused(t, op+" filed", d.asRoot(t, "file", p.Fingerprint, "--key", d.smithKey,
					"--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high", "--json"), "run_as_refused")
				d.geraGo(t, p.Fingerprint, 1)
			}
			before := d.journalLines(t)
			wantRefused(t, op+" run by the agent", d.asAgent(t, "run", p.Fingerprint, "--json"), "run_as_refused")
			if after := d.journalLines(t); len(after) != len(before) {
				t.Errorf("%s: a refused run wrote %d receipts", op, len(after)-len(before))
			}
			// Nothing consumed: the approval still counts; and status
			// says what run said (status predicts run), not "allowed".
			r := d.asAgent(t, "status", p.Fingerprint, "--json")
			var st struct {
				Allowed bool `json:"allowed"`
				Refusal *struct {
					Code string `json:"code"`
				} `json:"refusal"`
				Evidence []struct {
					Kind  string `json:"kind"`
					Valid bool   `json:"valid"`
					Used  int    `json:"used"`
				} `json:"evidence"`
			}
			if r.code != 77 || json.Unmarshal([]byte(r.out), &st) != nil || st.Allowed || st.Refusal == nil || st.Refusal.Code != "run_as_refused" {
				t.Errorf("%s: status after the refused run: want exit 77, run_as_refused, as run: %s", op, r)
			}
			for _, e := range st.Evidence {
				if !e.Valid || e.Used != 0 {
					t.Errorf("%s: after the refused run, the %s no longer counts: %s", op, e.Kind, r)
				}
			}
			if len(st.Evidence) == 0 {
				t.Errorf("%s: status shows no evidence: %s", op, r)
			}
		}
	})

	// Defence: the client opens --out itself, as the caller, and hands the
	// descriptor over (pkg/cli/client.go); keygen is local and writes as the
	// caller. Were --out sent as a path for the service to open, the agent
	// could make it write (or truncate) the store and the journal.
	t.Run("agent_names_service_paths_as_out", func(t *testing.T) {
		before := snapshot(t, d.state)
		for _, out := range []string{
			filepath.Join(d.state, "store", "forged.json"),
			filepath.Join(d.state, "journal", "receipts.jsonl"),
		} {
			r := d.asAgent(t, "receipts", "checkpoint", "--out", out)
			if r.code == 0 || !strings.Contains(strings.ToLower(r.err), "permission denied") {
				t.Errorf("receipts checkpoint --out %s as the agent: %s", out, r)
			}
		}
		key := filepath.Join(d.state, "x.key")
		if r := d.asAgent(t, "keygen", "--out", key); r.code == 0 || !strings.Contains(strings.ToLower(r.err), "permission denied") {
			t.Errorf("keygen --out %s as the agent: %s", key, r)
		}
		if diff := diffSnapshots(before, snapshot(t, d.state)); diff != "" {
			t.Errorf("the service's state changed:\n%s", diff)
		}
	})

	// Defence: rlimits, umask, proxies, CA files and LD_PRELOAD never cross
	// the socket; the service keeps its own umask (0077) and builds the
	// program's environment from scratch. If RLIMIT_FSIZE=0 reached the
	// program, install would die of SIGXFSZ; if it reached the service, the
	// journal append would; LD_PRELOAD reaching the program would make its
	// loader complain on stderr; umask 0777 reaching the service would
	// leave its files mode 0000.
	t.Run("client_context_leaks_into_the_service_or_the_program", func(t *testing.T) {
		p := d.plan(t, d.agentWork, "deploy-config", "--param", "name=app-hostile", "--file", "config="+d.appFile)
		d.approve(t, p.Fingerprint)
		before := snapshot(t, d.state)
		lines := len(d.journalLines(t))
		modes := map[fs.FileMode]bool{}
		for _, s := range before {
			if s.mode.IsRegular() {
				modes[s.mode] = true
			}
		}
		wrapper := `umask 0777; ulimit -f 0; exec /usr/bin/env LD_PRELOAD=/nonexistent.so HTTPS_PROXY=http://127.0.0.1:9 HTTP_PROXY=http://127.0.0.1:9 ALL_PROXY=http://127.0.0.1:9 SSL_CERT_FILE=/nonexistent SSL_CERT_DIR=/nonexistent LC_ALL=xx_XX.UTF-8 "$0" "$@"`
		// The hostile context is real: the wrapper's own child has it.
		r := d.exec(t, d.agent, d.agentWork, d.agentEnv(), "/bin/sh", "-c", wrapper, "/usr/bin/grep", "-h", "-E", "^Umask|^Max file size", "/proc/self/status", "/proc/self/limits")
		if !regexp.MustCompile(`(?m)^Umask:\s+0777$`).MatchString(r.out) || !regexp.MustCompile(`(?m)^Max file size\s+0\s+0\s`).MatchString(r.out) {
			t.Fatalf("the wrapper does not set umask 0777 and RLIMIT_FSIZE 0: %s", r)
		}
		r = d.exec(t, d.agent, d.agentWork, d.agentEnv(), "/bin/sh", "-c", wrapper, d.bin, "run", p.Fingerprint)
		if r.code != 0 {
			t.Fatalf("run under the hostile context: %s", r)
		}
		if strings.Contains(r.err, "ld.so") || strings.Contains(r.err, "LD_PRELOAD") {
			t.Errorf("LD_PRELOAD reached the program: %s", r)
		}
		fi, err := os.Stat(filepath.Join(d.srv, "app-hostile"))
		want, _ := os.ReadFile(d.appFile)
		if err != nil || fi.Size() != int64(len(want)) || fi.Mode().Perm() != 0o644 {
			t.Errorf("the production file under the hostile context: %v %v", fi, err)
		}
		if n := len(d.journalLines(t)); n != lines+2 {
			t.Errorf("the journal grew by %d lines, want 2", n-lines)
		}
		for p, s := range snapshot(t, d.state) {
			if s.uid != uint32(d.svc.uid) {
				t.Errorf("%s is owned by uid %d, not the service's", p, s.uid)
			}
			if s.mode.IsRegular() && !modes[s.mode] {
				t.Errorf("%s has mode %v, none of the service's own modes %v", p, s.mode, modes)
			}
			if old, ok := before[p]; ok && old.mode != s.mode {
				t.Errorf("%s changed mode from %v to %v", p, old.mode, s.mode)
			}
		}
		d.replayOK(t)
	})

	// Defence: the cwd is an O_PATH descriptor the client opened; the
	// service fingerprints its kernel path (symlinks resolved) and the
	// child enters it through /proc/self/fd/N. Were the cwd a path the
	// service resolved itself, the agent could plan in one directory and
	// run the same approval in another (a swapped symlink, or just cd).
	t.Run("cwd_swapped_after_approval", func(t *testing.T) {
		a := filepath.Join(d.agentWork, "a")
		b := filepath.Join(d.agentWork, "b")
		link := filepath.Join(d.agentWork, "here")
		for _, dir := range []string{a, b} {
			must(t, os.Mkdir(dir, 0o755))
			must(t, os.Chown(dir, d.agent.uid, d.agent.gid))
		}
		pointLink := func(to string) {
			os.Remove(link)
			must(t, os.Symlink(to, link))
			must(t, os.Lchown(link, d.agent.uid, d.agent.gid))
		}
		pointLink(a)

		// Planned through the symlink: the plan binds the directory.
		p := d.plan(t, link, "show-cwd")
		if p.Cwd != a {
			t.Errorf("the plan records cwd %q, want the resolved %q", p.Cwd, a)
		}
		d.geraGo(t, p.Fingerprint, 2)
		if r := d.asAgentIn(t, link, "run", p.Fingerprint); r.code != 0 || strings.TrimSpace(r.out) != a {
			t.Errorf("run from the same directory: want exit 0 printing %s, got %s", a, r)
		}

		// The same approval, run after swapping the symlink, or from
		// another directory: refused, nothing consumed.
		pointLink(b)
		wantRefused(t, "run through the swapped symlink", d.asAgentIn(t, link, "run", p.Fingerprint, "--json"), "fingerprint_mismatch")
		wantRefused(t, "run from another directory", d.asAgentIn(t, b, "run", p.Fingerprint, "--json"), "fingerprint_mismatch")
		// The second use is still there: it was not consumed by the refusals.
		if r := d.asAgentIn(t, a, "run", p.Fingerprint); r.code != 0 || strings.TrimSpace(r.out) != a {
			t.Errorf("run from the planned directory after the refusals: want exit 0 printing %s, got %s", a, r)
		}
	})

	// Defence: the program enters the working directory through the
	// descriptor the client handed over (/proc/self/fd/N), which checks
	// only that directory's own mode: a directory the agent keeps 0755
	// inside its 0700 home is reachable that way and by no path run_as
	// could walk. Entered by path instead, the run fails here (and a path
	// could be swapped after the check).
	t.Run("cwd_reachable_only_through_the_descriptor", func(t *testing.T) {
		dir := filepath.Join(d.agentHome, "project")
		must(t, os.Mkdir(dir, 0o755))
		must(t, os.Chown(dir, d.agent.uid, d.agent.gid))
		p := d.plan(t, dir, "show-cwd")
		d.geraGo(t, p.Fingerprint, 1)
		if r := d.asAgentIn(t, dir, "run", p.Fingerprint); r.code != 0 || strings.TrimSpace(r.out) != dir {
			t.Errorf("run from %s (0755, in the agent's 0700 home): want exit 0 printing it, got %s", dir, r)
		}
	})

	// Defence: whatever would stop a run from starting is settled before
	// the approval is consumed (pkg/cli/run.go: "a run that cannot start
	// spends nothing"; ADR 0011 §4-5 for run_as and secrets). The agent
	// working in its own 0700 home is the common case: with no cwd in the
	// operation, the program is to enter that directory as run_as, which
	// it cannot. Such a run must fail without spending the approval.
	t.Run("run_from_a_cwd_run_as_cannot_enter", func(t *testing.T) {
		p := d.plan(t, d.agentHome, "show-cwd")
		d.geraGo(t, p.Fingerprint, 1)
		r := d.asAgentIn(t, d.agentHome, "run", p.Fingerprint, "--json")
		if r.code == 0 {
			t.Fatalf("the program entered the agent's 0700 home as %s: %s", deployUser, r)
		}
		t.Logf("run from the agent's private home: %s", r)
		st := d.asAgentIn(t, d.agentHome, "status", p.Fingerprint, "--json")
		var s struct {
			Allowed bool `json:"allowed"`
		}
		if st.code != 0 || json.Unmarshal([]byte(st.out), &s) != nil || !s.Allowed {
			_, outcomes := d.runsOf(t, p.Fingerprint)
			for _, o := range outcomes {
				t.Logf("outcome receipt: exit %d, error %q", o.Outcome.ExitCode, o.Outcome.Error)
			}
			t.Errorf("a run that could not start (%s cannot enter %s) spent the approval: status exit %d, refusal %s",
				deployUser, d.agentHome, st.code, refusalCode(st.err))
		}
	})

	// Defence: the service's order does not depend on the client: a client
	// that dies or is stopped changes nothing, the outcome receipt is still
	// written (docs/DESIGN.md §13). Were the run tied to the client's connection (the
	// program killed, or the outcome left unwritten when the client goes),
	// no outcome would appear. (A service that killed the program when the
	// client goes is caught by the exit status only once the service can
	// signal run_as programs at all: see the next subtest.)
	t.Run("client_killed_or_stopped_mid_run", func(t *testing.T) {
		p := d.plan(t, d.agentWork, "hold", "--param", "secs=2")
		d.geraGo(t, p.Fingerprint, 2)
		for i, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
			var out, errb syncBuffer
			cmd, waited := d.startClient(t, d.agent, d.agentEnv(), &out, &errb, "run", p.Fingerprint)
			// Mid-run: once the intent is durable, ~300 ms in.
			if !waitFor(10*time.Second, func() bool { in, _ := d.runsOf(t, p.Fingerprint); return len(in) == i+1 }) {
				t.Fatalf("%v: no intent receipt for run %d: %s%s", sig, i+1, out.String(), errb.String())
			}
			time.Sleep(300 * time.Millisecond)
			must(t, cmd.Process.Signal(sig))
			if !waitFor(10*time.Second, func() bool { _, o := d.runsOf(t, p.Fingerprint); return len(o) == i+1 }) {
				t.Fatalf("client %v mid-run: no outcome receipt within 10s\n%s", sig, d.serveLog)
			}
			_, outcomes := d.runsOf(t, p.Fingerprint)
			for id, o := range outcomes {
				if o.Outcome.ExitCode != 0 || o.Outcome.Signal != "" {
					t.Errorf("client %v mid-run: run %s ended %+v, want the program's own exit 0", sig, id, o.Outcome)
				}
			}
			if sig == syscall.SIGSTOP {
				// Continued, the client still gets the relayed status.
				cmd.Process.Signal(syscall.SIGCONT)
				<-waited
				if c := cmd.ProcessState.ExitCode(); c != 0 {
					t.Errorf("the stopped client, continued, exited %d: %s", c, errb.String())
				}
			}
		}
		d.replayOK(t)
	})

	// Defences: the operation's timeout kills the program's process group
	// (docs/DESIGN.md §6), and a client's SIGINT is relayed to the program as a
	// request (docs/DESIGN.md §13). Under the service the program runs as run_as, a
	// uid the service account may not signal without CAP_KILL: the kill
	// must still happen, or a hung write holds production (and the
	// service's call) for ever while its receipt says it was stopped.
	t.Run("program_outlives_its_timeout_or_a_relayed_sigint", func(t *testing.T) {
		gone := func() bool { return procOf(d.deploy.uid, "/usr/bin/sleep") == 0 }
		p := d.plan(t, d.agentWork, "hold-short", "--param", "secs=4")
		d.geraGo(t, p.Fingerprint, 1)
		began := time.Now()
		r := d.asAgent(t, "run", p.Fingerprint, "--json")
		took := time.Since(began)
		_, outcomes := d.runsOf(t, p.Fingerprint)
		for _, o := range outcomes {
			t.Logf("timeout: client exit %d after %s; outcome exit %d, signal %q, timed out %v, duration %s, error %q",
				r.code, took.Round(time.Millisecond), o.Outcome.ExitCode, o.Outcome.Signal, o.Outcome.TimedOut, o.Outcome.Duration, o.Outcome.Error)
			if !o.Outcome.TimedOut || o.Outcome.Duration > 2500*time.Millisecond {
				t.Errorf("a 1s timeout did not stop `sleep 4`: it ran %s", o.Outcome.Duration.Round(time.Millisecond))
			}
		}
		if r.code != 124 || took > 3500*time.Millisecond || len(outcomes) != 1 {
			t.Errorf("run past a 1s timeout: want exit 124 within ~2s, got exit %d after %s (%d outcomes)", r.code, took.Round(time.Millisecond), len(outcomes))
		}
		waitFor(5*time.Second, gone)

		p = d.plan(t, d.agentWork, "hold", "--param", "secs=4")
		d.geraGo(t, p.Fingerprint, 1)
		cmd := command(d.agent, d.agentWork, d.agentEnv(), d.bin, "run", p.Fingerprint)
		var out, errb syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		must(t, cmd.Start())
		waited := make(chan struct{})
		go func() {
			cmd.Wait()
			d.outputs.Write([]byte(out.String() + errb.String()))
			close(waited)
		}()
		t.Cleanup(func() {
			cmd.Process.Kill()
			<-waited
		})
		if !waitFor(5*time.Second, func() bool { in, _ := d.runsOf(t, p.Fingerprint); return len(in) == 1 }) {
			t.Fatalf("no intent receipt: %s%s", out.String(), errb.String())
		}
		time.Sleep(300 * time.Millisecond)
		began = time.Now()
		must(t, cmd.Process.Signal(syscall.SIGINT))
		<-waited
		took = time.Since(began)
		_, outcomes = d.runsOf(t, p.Fingerprint)
		for _, o := range outcomes {
			t.Logf("SIGINT: client exit %d %s after the signal; outcome exit %d, signal %q, duration %s",
				cmd.ProcessState.ExitCode(), took.Round(time.Millisecond), o.Outcome.ExitCode, o.Outcome.Signal, o.Outcome.Duration)
			if o.Outcome.Signal != "SIGINT" || o.Outcome.ExitCode != 130 {
				t.Errorf("the client's SIGINT did not reach the program: outcome exit %d, signal %q", o.Outcome.ExitCode, o.Outcome.Signal)
			}
		}
		if took > 2*time.Second || cmd.ProcessState.ExitCode() != 130 {
			t.Errorf("run after a relayed SIGINT: want exit 130 at once, got exit %d after %s", cmd.ProcessState.ExitCode(), took.Round(time.Millisecond))
		}
		waitFor(5*time.Second, gone)
	})

	// Defence: who may plan, file, decide or run is decided by signatures,
	// not by who can connect (the socket is 0666); an unsigned plan is not
	// stored and an unapproved one does not run.
	t.Run("unrelated_account_without_a_key", func(t *testing.T) {
		env := []string{"PATH=/usr/bin:/bin", "HOME=" + d.otherHome, "PROD_WRITE_CONFIG=" + d.otherConfig}
		input := filepath.Join(d.otherHome, "mine.toml")
		must(t, os.WriteFile(input, []byte("version = 666\n"), 0o600))
		must(t, os.Chown(input, d.other.uid, d.other.gid))
		other := func(args ...string) result { return d.exec(t, d.other, d.otherHome, env, d.bin, args...) }

		if r := other("ops", "list"); r.code != 0 || !strings.Contains(r.out, "deploy-config") {
			t.Errorf("ops list as %s: %s", otherUser, r)
		}
		plans := filepath.Join(d.state, "store")
		before := snapshot(t, plans)
		r := other("plan", "deploy-config", "--target", "production", "--param", "name=evil", "--file", "config="+input, "--json")
		if r.code != 64 {
			t.Errorf("plan with no key: want exit 64 (nothing stored): %s", r)
		}
		r = other("plan", "deploy-config", "--target", "production", "--param", "name=evil", "--file", "config="+input, "--json", "--dry-run")
		var p planned
		if r.code != 0 || json.Unmarshal([]byte(r.out), &p) != nil || p.Stored || !fpRE.MatchString(p.Fingerprint) {
			t.Errorf("plan --dry-run with no key: want exit 0 and nothing stored: %s", r)
		}
		key := filepath.Join(d.otherHome, "other.key")
		d.keygen(t, d.other, key)
		wantRefused(t, "plan with a key of no principal", other("plan", "deploy-config", "--target", "production", "--param", "name=evil", "--file", "config="+input, "--key", key, "--json"), "principal_unknown")
		if diff := diffSnapshots(before, snapshot(t, plans)); diff != "" {
			t.Errorf("the store changed:\n%s", diff)
		}
		lines := len(d.journalLines(t))
		wantRefused(t, "run of the unstored plan", other("run", p.Fingerprint, "--json"), "plan_absent")
		// A plan the agent stored, approved by nobody, run from the
		// directory it was planned in.
		q := d.plan(t, d.agentWork, "show-cwd")
		wantRefused(t, "run of an unapproved plan as "+otherUser, d.exec(t, d.other, d.agentWork, env, d.bin, "run", q.Fingerprint, "--json"), "no_approval")
		wantRefused(t, "run of an unapproved plan as the agent", d.asAgent(t, "run", q.Fingerprint, "--json"), "no_approval")
		if n := len(d.journalLines(t)); n != lines {
			t.Errorf("refused runs wrote %d receipts", n-lines)
		}
		if _, err := os.Lstat(filepath.Join(d.srv, "evil")); err == nil {
			t.Error("the unrelated account's write reached production")
		}
	})

	t.Run("clients_that_never_read", d.clientsThatNeverRead)
	t.Run("slots_stay_fair_while_two_accounts_take_all_they_may", d.slotsStayFair)
	t.Run("bind_mount_over_the_reviewed_cwd_in_a_user_namespace", d.bindMountSwap)
	t.Run("bind_mount_over_a_reviewed_file_in_a_user_namespace", d.bindMountFileSwap)
	t.Run("keyless_account_reads_no_plan", d.keylessReadsNoPlan)

	// doctor's text is being rewritten elsewhere: record it, and only
	// require that it either passes or names findings.
	t.Run("doctor_as_the_agent", func(t *testing.T) {
		r := d.exec(t, rootAcct, d.admin, []string{"PATH=/usr/bin:/bin"}, d.bin, "doctor", "--as", agentUser, "--config", d.config)
		t.Logf("doctor --as %s: %s", agentUser, r)
		if r.code != 0 && (r.code != 1 || strings.TrimSpace(r.out) == "") {
			t.Errorf("doctor: want exit 0, or 1 with findings: %s", r)
		}
	})

	// Last: nothing any client printed, during all of the above, held the
	// secret.
	t.Run("secret_in_no_client_output", func(t *testing.T) {
		if holdsSecret([]byte(d.outputs.String()), d.secret) {
			t.Error("a client printed the secret")
		}
		if holdsSecret([]byte(d.serveLog.String()), d.secret) {
			t.Error("the service logged the secret")
		}
	})
	// Last, as it stops the service.
	t.Run("serve_stops_while_a_client_holds_a_paused_terminal", d.serveStopsWhileAClientHoldsAPausedTerminal)
	t.Logf("the whole test took %s", time.Since(start).Round(time.Millisecond))
}

// readTree reads every regular file under dir.
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	must(t, filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = b
		return err
	}))
	return out
}

// diffSnapshots names what differs between two snapshots.
func diffSnapshots(a, b map[string]fileState) string {
	var out []string
	for p, s := range a {
		if t, ok := b[p]; !ok {
			out = append(out, "removed: "+p)
		} else if s != t {
			out = append(out, fmt.Sprintf("changed: %s (%+v -> %+v)", p, s, t))
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			out = append(out, "added: "+p)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}
