// Package deploy proves the one-machine deployment of docs/DEPLOYMENT.md
// with two real users: it runs only as root (CI is root) and says so when
// skipped.
package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/prod-write/prod-write/pkg/keys"
)

const (
	agentUser   = "pwtest-agent"
	serviceUser = "pwtest-prodwrite"
)

type account struct {
	name     string
	uid, gid int
}

// ensureUser creates a system user for the test (or reuses one left by an
// earlier run) and removes it afterwards if it created it.
func ensureUser(t *testing.T, name string) account {
	t.Helper()
	u, err := user.Lookup(name)
	if err != nil {
		out, err := exec.Command("useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput()
		if err != nil {
			t.Fatalf("useradd %s: %v\n%s", name, err, out)
		}
		t.Cleanup(func() { exec.Command("userdel", name).Run() })
		if u, err = user.Lookup(name); err != nil {
			t.Fatal(err)
		}
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return account{name: name, uid: uid, gid: gid}
}

type deployment struct {
	root, bin, etc, state, runnerKey, trust, config string
	agent, service                                  account
	agentKey, smithKey, aliceKey                    string
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, data string, mode os.FileMode, owner account) {
	t.Helper()
	must(t, os.WriteFile(path, []byte(data), mode))
	must(t, os.Chmod(path, mode))
	must(t, os.Chown(path, owner.uid, owner.gid))
}

// deploy builds the layout of docs/DEPLOYMENT.md under a temporary root.
func deploy(t *testing.T) *deployment {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the two-user deployment test runs only as root (CI runs as root); run `sudo go test ./tests/deploy` to prove the trust boundary")
	}
	for _, tool := range []string{"useradd", "userdel"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the deployment test needs %s (Debian package passwd)", tool)
		}
	}
	rootAcct := account{name: "root"}
	d := &deployment{agent: ensureUser(t, agentUser), service: ensureUser(t, serviceUser)}
	// Not t.TempDir: its parents are private to root, and the agent must be
	// able to reach the binary and its own home.
	var err error
	d.root, err = os.MkdirTemp("/tmp", "prod-write-deploy-")
	must(t, err)
	if os.Getenv("KEEP") == "" {
		t.Cleanup(func() { os.RemoveAll(d.root) })
	}
	must(t, os.Chmod(d.root, 0o755))

	mkdir := func(p string, mode os.FileMode, owner account) string {
		must(t, os.MkdirAll(p, mode))
		must(t, os.Chmod(p, mode))
		must(t, os.Chown(p, owner.uid, owner.gid))
		return p
	}
	binDir := mkdir(filepath.Join(d.root, "bin"), 0o755, rootAcct)
	d.etc = mkdir(filepath.Join(d.root, "etc"), 0o755, rootAcct)
	mkdir(filepath.Join(d.etc, "operations"), 0o755, rootAcct)
	d.state = mkdir(filepath.Join(d.root, "state"), 0o700, d.service)
	mkdir(filepath.Join(d.root, "home"), 0o755, rootAcct)
	home := mkdir(filepath.Join(d.root, "home", "agent"), 0o700, d.agent)
	admin := mkdir(filepath.Join(d.root, "admin"), 0o700, rootAcct)

	// The binary, setuid to the service user.
	d.bin = filepath.Join(binDir, "prod-write")
	mod, err := exec.Command("go", "env", "GOMOD").Output()
	must(t, err)
	build := exec.Command("go", "build", "-o", binDir+"/", "./cmd/prod-write", "./cmd/prod-write-net")
	build.Dir = filepath.Dir(strings.TrimSpace(string(mod)))
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building prod-write and prod-write-net: %v\n%s", err, out)
	}
	must(t, os.Chmod(filepath.Join(binDir, "prod-write-net"), 0o755))
	must(t, os.Chown(d.bin, d.service.uid, d.service.gid))
	must(t, os.Chmod(d.bin, 0o4755|os.ModeSetuid))

	newKey := func(path string, owner account) keys.Public {
		k, err := keys.Generate()
		must(t, err)
		must(t, k.WriteNew(path))
		must(t, os.Chown(path, owner.uid, owner.gid))
		return k.Public()
	}
	d.runnerKey = filepath.Join(d.state, "runner.key")
	d.agentKey = filepath.Join(home, "agent.key")
	d.smithKey = filepath.Join(admin, "smith.key")
	d.aliceKey = filepath.Join(admin, "alice.key")
	runner := newKey(d.runnerKey, d.service)
	agent := newKey(d.agentKey, d.agent)
	smith := newKey(d.smithKey, rootAcct)
	alice := newKey(d.aliceKey, rootAcct)

	d.trust = filepath.Join(d.etc, "trust.toml")
	principal := func(id, role string, k keys.Public) string {
		return "[[principal]]\nid = \"" + id + "\"\nroles = [\"" + role + "\"]\nkey = \"" + k.String() + "\"\n\n"
	}
	write(t, d.trust, principal("runner", "runner", runner)+principal("agent", "agent", agent)+
		principal("smith", "operator", smith)+principal("alice", "approver", alice), 0o644, rootAcct)
	write(t, filepath.Join(d.etc, "operations", "ops.toml"), `
[[operation]]
name = "read-runner-key"
description = "Looks harmless; tries to read the runner key (it must be denied)"
program = "cat"
args = ["`+d.runnerKey+`"]
targets = ["production"]
`, 0o644, rootAcct)
	d.config = filepath.Join(d.etc, "prod-write.toml")
	write(t, d.config, "registry = \"operations\"\ntrust = \"trust.toml\"\nstate = \""+d.state+"\"\nrunner_key = \""+d.runnerKey+"\"\nsecure_path = [\"/usr/bin\", \"/bin\"]\n", 0o644, rootAcct)
	return d
}

// as runs a command as acct with a clean environment.
func (d *deployment) as(t *testing.T, acct account, name string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = filepath.Join(d.root, "home", "agent")
	if acct.uid == 0 {
		cmd.Dir = d.root
	}
	cmd.Env = []string{"PATH=/usr/bin:/bin", "PROD_WRITE_CONFIG=" + d.config, "HOME=" + cmd.Dir}
	if acct.uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(acct.uid), Gid: uint32(acct.gid)}}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return out.String(), errb.String(), code
}

var fpRE = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

func TestAgentCannotCrossTheBoundary(t *testing.T) {
	d := deploy(t)
	agent := d.agent
	root := account{name: "root"}

	// The agent can plan.
	out, errOut, code := d.as(t, agent, d.bin, "plan", "read-runner-key", "--target", "production", "--key", d.agentKey)
	if code != 0 {
		t.Fatalf("plan as the agent: exit %d\n%s%s", code, out, errOut)
	}
	fp := fpRE.FindString(out)

	// It cannot read the runner key, write the policy, or write the store
	// or the journal directly.
	if _, e, code := d.as(t, agent, "/bin/cat", d.runnerKey); code == 0 || !strings.Contains(e, "Permission denied") {
		t.Errorf("the agent read the runner key (exit %d: %s)", code, e)
	}
	if _, e, code := d.as(t, agent, "/usr/bin/tee", "-a", d.trust); code == 0 {
		t.Errorf("the agent wrote the trust policy (%s)", e)
	}
	if _, e, code := d.as(t, agent, "/usr/bin/touch", filepath.Join(d.state, "store", "plans", "forged.json")); code == 0 {
		t.Errorf("the agent wrote into the store (%s)", e)
	}
	journal := filepath.Join(d.state, "journal", "receipts.jsonl")
	if _, e, code := d.as(t, agent, "/usr/bin/tee", "-a", journal); code == 0 {
		t.Errorf("the agent wrote into the journal (%s)", e)
	}
	// Nor can it make prod-write read the runner key for it, or judge by a
	// policy of its own.
	if _, e, code := d.as(t, agent, d.bin, "plan", "read-runner-key", "--target", "production", "--key", d.runnerKey); code == 0 || !strings.Contains(e, "permission denied") {
		t.Errorf("prod-write loaded the runner key as the agent's key (exit %d: %s)", code, e)
	}
	pub := filepath.Join(d.root, "agent-public")
	must(t, os.Mkdir(pub, 0o755))
	must(t, os.Chown(pub, agent.uid, agent.gid))
	mine := filepath.Join(pub, "mine.toml")
	write(t, mine, "trust = \""+d.trust+"\"\nstate = \""+d.state+"\"\nrunner_key = \""+d.runnerKey+"\"\nregistry = \""+filepath.Join(d.etc, "operations")+"\"\n", 0o644, agent)
	if _, e, code := d.as(t, agent, d.bin, "receipts", "checkpoint", "--config", mine); code != 78 || !strings.Contains(e, "cannot be trusted") {
		t.Errorf("prod-write accepted a configuration the agent wrote (exit %d: %s)", code, e)
	}
	// Forging a receipt: a line signed by the agent's own key, appended
	// through prod-write's journal, is impossible (it cannot write the
	// journal), and a forged copy fails replay.
	forged := filepath.Join(d.root, "home", "agent", "forged.jsonl")
	write(t, forged, `{"payloadType":"application/vnd.prod-write.receipt+json","payload":"e30=","signatures":[{"keyid":"x","sig":"eA=="}]}`+"\n", 0o644, agent)
	if _, _, code := d.as(t, agent, d.bin, "replay", forged); code == 0 {
		t.Errorf("replay accepted a forged receipt")
	}

	// Without approval, run is refused and nothing runs.
	if _, e, code := d.as(t, agent, d.bin, "run", fp, "--json"); code != 77 || !strings.Contains(e, `"code":"no_approval"`) {
		t.Fatalf("run without approval: exit %d: %s", code, e)
	}

	// Real approval, by other principals.
	if out, e, code := d.as(t, root, d.bin, "file", fp, "--key", d.smithKey, "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "low"); code != 0 {
		t.Fatalf("file: exit %d: %s%s", code, out, e)
	}
	if out, e, code := d.as(t, root, d.bin, "decide", fp, "approve", "--key", d.aliceKey); code != 0 {
		t.Fatalf("decide: exit %d: %s%s", code, out, e)
	}

	// Now run executes, as the agent: the program cannot read the key.
	out, e, code := d.as(t, agent, d.bin, "run", fp)
	if code != 1 || !strings.Contains(e, "Permission denied") {
		t.Fatalf("the executed program was not denied the runner key: exit %d\nstdout %q\nstderr %q", code, out, e)
	}
	if strings.Contains(out, "PRIVATE KEY") {
		t.Fatal("the executed program read the runner key")
	}
	// And the receipts of that run verify.
	out, e, code = d.as(t, root, d.bin, "replay", "--json")
	if code != 0 {
		t.Fatalf("replay: exit %d: %s%s", code, out, e)
	}
	var rep struct {
		Summary struct{ Runs, Failed int }
	}
	must(t, json.Unmarshal([]byte(out), &rep))
	if rep.Summary.Runs != 1 || rep.Summary.Failed != 0 {
		t.Fatalf("replay summary %+v", rep.Summary)
	}
}

// TestHandOffKeepsTheBoundary: the setuid prod-write hands a command whose
// configuration names S3 to the prod-write-net installed beside it, which
// runs with prod-write's privilege; a prod-write-net of the agent's own,
// beside a hard link to prod-write in the agent's directory (possible where
// fs.protected_hardlinks is off), is refused and never runs.
func TestHandOffKeepsTheBoundary(t *testing.T) {
	d := deploy(t)
	agent := d.agent
	s3 := filepath.Join(d.etc, "s3.toml")
	b, err := os.ReadFile(d.config)
	must(t, err)
	write(t, s3, string(b)+"\n[archive]\nbucket = \"receipts\"\nprefix = \"host-a\"\n", 0o644, account{name: "root"})

	// The installed pair: ops list needs no AWS call, so it succeeds only
	// through the hand-over.
	if out, e, code := d.as(t, agent, d.bin, "ops", "list", "--config", s3); code != 0 || !strings.Contains(out, "read-runner-key") {
		t.Fatalf("ops list through prod-write-net: exit %d\n%s%s", code, out, e)
	}

	// The agent's own pair.
	evil := filepath.Join(d.root, "agent-bin")
	must(t, os.Mkdir(evil, 0o755))
	must(t, os.Chown(evil, agent.uid, agent.gid))
	must(t, os.Link(d.bin, filepath.Join(evil, "prod-write")))
	marker := filepath.Join(evil, "ran")
	write(t, filepath.Join(evil, "prod-write-net"), "#!/bin/sh\nid > "+marker+"\n", 0o755, agent)
	out, e, code := d.as(t, agent, filepath.Join(evil, "prod-write"), "ops", "list", "--config", s3)
	if code == 0 || !strings.Contains(e, "prod-write-net") || !strings.Contains(e, "cannot be trusted") {
		t.Errorf("the hard-linked prod-write handed over to the agent's prod-write-net: exit %d\n%s%s", code, out, e)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the agent's prod-write-net ran")
	}
}
