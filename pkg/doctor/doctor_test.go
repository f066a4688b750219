package doctor

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/receipts"
)

// The accounts of a service deployment (docs/DEPLOYMENT.md). agent is an
// unprivileged account that owns nothing of the deployment but its own
// key; svcUID owns the state; deployerUID is the run_as account.
var agent = Account{Name: "agent", UID: 4242, GIDs: []int{4242}}

const (
	svcUID      = 4300
	deployerUID = 4400
)

// dep is a deployment built for one test, correct until a test weakens it.
type dep struct {
	dir, cfg, state, home, bin string
	accounts                   map[string]runAsAccount
}

// deployment writes a correct service deployment into a temporary
// directory: the policy root-owned, the state and credentials owned by the
// service account, the keys private, a run_as account with a home of its
// own. Files need real owners, so it runs only as root (CI is root).
func deployment(t *testing.T, state string) *dep {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("doctor tests build deployments with real owners and run only as root (CI is root)")
	}
	dir := t.TempDir()
	// Every directory down to dir lets others through, as /etc does, so
	// that only the deployment's own modes decide what the agent reaches.
	must(t, os.Chmod(filepath.Dir(dir), 0o755))
	must(t, os.Chmod(dir, 0o755))
	d := &dep{dir: dir, cfg: filepath.Join(dir, "prod-write.toml"), state: state, home: filepath.Join(dir, "home", "deployer"), bin: filepath.Join(dir, "bin")}
	if d.state == "" {
		d.state = filepath.Join(dir, "state")
	}
	for _, sub := range []string{"operations", "run", "bin", "home"} {
		must(t, os.Mkdir(filepath.Join(dir, sub), 0o755))
	}
	must(t, os.Mkdir(filepath.Join(dir, "keys"), 0o700))

	// The service's state and credentials.
	for _, p := range []string{d.state, filepath.Join(d.state, "store"), filepath.Join(d.state, "journal"), filepath.Join(dir, "credentials")} {
		must(t, os.MkdirAll(p, 0o700))
		must(t, os.Chmod(p, 0o700))
		must(t, os.Chown(p, svcUID, svcUID))
	}
	for _, p := range []string{filepath.Join(d.state, "journal", "receipts.jsonl"), filepath.Join(dir, "credentials", "DEPLOY_TOKEN")} {
		must(t, os.WriteFile(p, []byte("x"), 0o600))
		must(t, os.Chown(p, svcUID, svcUID))
	}

	// Keys: the runner's and an approver's, private; the agent's own,
	// readable by the agent; a stray key nobody trusts, readable by all.
	runner := newKey(t, filepath.Join(dir, "keys", "runner.key"))
	alice := newKey(t, filepath.Join(dir, "keys", "alice.key"))
	must(t, os.Mkdir(filepath.Join(dir, "agent"), 0o755))
	own := newKey(t, filepath.Join(dir, "agent", "agent.key"))
	must(t, os.Chown(filepath.Join(dir, "agent", "agent.key"), agent.UID, agent.UID))
	newKey(t, filepath.Join(dir, "agent", "stray.key"))
	must(t, os.Chmod(filepath.Join(dir, "agent", "stray.key"), 0o644))
	trust := principal("runner", "runner", runner) + principal("alice", "approver", alice) + principal("agent", "agent", own)
	must(t, os.WriteFile(filepath.Join(dir, "trust.toml"), []byte(trust), 0o644))

	must(t, os.WriteFile(filepath.Join(dir, "operations", "ops.toml"), []byte(operation("true", `run_as = "deployer"`)), 0o644))

	// The run_as account's home, its own.
	must(t, os.Mkdir(d.home, 0o755))
	must(t, os.Mkdir(filepath.Join(d.home, ".ssh"), 0o700))
	must(t, os.WriteFile(filepath.Join(d.home, ".profile"), []byte("umask 022\n"), 0o644))
	for _, p := range []string{d.home, filepath.Join(d.home, ".ssh"), filepath.Join(d.home, ".profile")} {
		must(t, os.Chown(p, deployerUID, deployerUID))
	}
	d.accounts = map[string]runAsAccount{
		"deployer":  {uid: deployerUID, home: d.home},
		"prodwrite": {uid: svcUID, home: "/nonexistent"},
		"root":      {uid: 0, home: "/root"},
	}
	prevLookup, prevBinaries := lookupRunAs, binaries
	lookupRunAs = func(name string) (runAsAccount, error) {
		if u, ok := d.accounts[name]; ok {
			return u, nil
		}
		return runAsAccount{}, errors.New("unknown user " + name)
	}
	// prod-write's binaries, as installed beside each other.
	for _, b := range []string{"prod-write", "prod-write-net"} {
		must(t, os.WriteFile(filepath.Join(d.bin, b), []byte("#!/bin/true\n"), 0o755))
	}
	binaries = func() []string {
		return []string{filepath.Join(d.bin, "prod-write"), filepath.Join(d.bin, "prod-write-net")}
	}
	// The units, installed as packaging/README.md says.
	units := filepath.Join(dir, "systemd")
	must(t, os.Mkdir(units, 0o755))
	for _, u := range []string{"prod-write.service", "prod-write.socket"} {
		must(t, os.WriteFile(filepath.Join(units, u), []byte("[Unit]\n"), 0o644))
	}
	prevUnits := unitFiles
	unitFiles = func() []string {
		return []string{filepath.Join(units, "prod-write.service"), filepath.Join(units, "prod-write.socket"), filepath.Join(units, "prod-write.service.d")}
	}
	t.Cleanup(func() { lookupRunAs, binaries, unitFiles = prevLookup, prevBinaries, prevUnits })

	d.config(t, "", "")
	return d
}

// config writes prod-write.toml with extra lines in [service] and after it.
func (d *dep) config(t *testing.T, service, rest string) {
	t.Helper()
	data := "runner_key = \"keys/runner.key\"\nstate = \"" + d.state + "\"\n\n[service]\nsocket = \"run/prod-write.sock\"\ncredentials = \"credentials\"\n" + service + "\n" + rest
	must(t, os.WriteFile(d.cfg, []byte(data), 0o644))
}

func operation(program, extra string) string {
	return "[[operation]]\nname = \"noop\"\nprogram = \"" + program + "\"\ntargets = [\"staging\"]\n" + extra + "\n"
}

func principal(id, roles string, k *keys.Private) string {
	return "[[principal]]\nid = \"" + id + "\"\nroles = [\"" + roles + "\"]\nkey = \"" + k.Public().String() + "\"\n\n"
}

func newKey(t *testing.T, path string) *keys.Private {
	t.Helper()
	k, err := keys.Generate()
	must(t, err)
	must(t, k.WriteNew(path))
	return k
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (d *dep) check(t *testing.T, a Account) []Finding {
	t.Helper()
	c, err := config.Load(d.cfg)
	if err != nil {
		t.Fatal(err)
	}
	d.recordHistory(t, c)
	return CheckAs(c, a)
}

// recordHistory keeps the history a correct deployment has
// (docs/DEPLOYMENT.md): what is on disk, recorded. The history's own
// findings have their tests (history_test.go), which build it themselves.
func (d *dep) recordHistory(t *testing.T, c *config.Config) {
	t.Helper()
	trust, err := os.ReadFile(c.Trust)
	if err != nil {
		return // a test of a missing policy
	}
	reg, err := runner.LoadRegistry(c)
	if err != nil {
		return // a test of a broken registry
	}
	if _, err := receipts.RecordHistory(c.HistoryDir(), trust, reg.All(), time.Now(), time.Hour); err != nil {
		t.Fatal(err)
	}
}

func weaknesses(fs []Finding) []string {
	var out []string
	for _, f := range fs {
		if f.Severity != Info {
			out = append(out, f.Check)
		}
	}
	return out
}

func find(fs []Finding, check string) (Finding, bool) {
	for _, f := range fs {
		if f.Check == check {
			return f, true
		}
	}
	return Finding{}, false
}

func TestCorrectDeploymentIsClean(t *testing.T) {
	d := deployment(t, "")
	if fs := d.check(t, agent); len(weaknesses(fs)) > 0 {
		t.Fatalf("a correct deployment has findings: %+v", fs)
	}
}

// A [bridge] table whose bridges are off (no slack_channel, no
// github_repo) names files nothing reads: their absence is no finding
// (DEPLOYMENT's "only with bridges" snippet, pasted, was once a
// critical).
func TestBridgeFilesOfABridgeThatIsOff(t *testing.T) {
	d := deployment(t, "")
	d.config(t, "", "[bridge]\nkey = \"keys/bridge.key\"\nslack_signing_secret_file = \"bridge/slack-signing-secret\"\n")
	if fs := d.check(t, agent); len(weaknesses(fs)) > 0 {
		t.Fatalf("bridges off, their files absent: want no findings, got %v", weaknesses(fs))
	}
}

// Each case weakens a correct deployment in one way; doctor must name it,
// with the check's severity. Each case fails if its check is removed.
func TestEachWeaknessIsFound(t *testing.T) {
	chmod := func(t *testing.T, p string, m os.FileMode) { must(t, os.Chmod(p, m)) }
	chown := func(t *testing.T, p string, uid int) { must(t, os.Chown(p, uid, uid)) }
	write := func(t *testing.T, p, data string) { must(t, os.WriteFile(p, []byte(data), 0o644)) }
	tests := []struct {
		name     string
		weaken   func(t *testing.T, d *dep)
		want     string
		severity string
		says     string // in the message, when set
	}{
		// It can write what decides.
		{"policy writable by others", func(t *testing.T, d *dep) { chmod(t, filepath.Join(d.dir, "trust.toml"), 0o666) }, "policy-writable", Critical, ""},
		{"policy owned by the agent", func(t *testing.T, d *dep) { chown(t, filepath.Join(d.dir, "trust.toml"), agent.UID) }, "policy-writable", Critical, ""},
		{"policy replaceable through its directory", func(t *testing.T, d *dep) { chmod(t, d.dir, 0o777) }, "policy-writable", Critical, ""},
		{"registry file writable", func(t *testing.T, d *dep) { chmod(t, filepath.Join(d.dir, "operations", "ops.toml"), 0o666) }, "registry-writable", Critical, "operation file"},
		{"registry directory writable", func(t *testing.T, d *dep) { chmod(t, filepath.Join(d.dir, "operations"), 0o777) }, "registry-writable", Critical, "registry directory"},
		{"config writable", func(t *testing.T, d *dep) { chmod(t, d.cfg, 0o666) }, "config-writable", Critical, ""},
		{"a secret an operation needs is not in the credentials", func(t *testing.T, d *dep) {
			write(t, filepath.Join(d.dir, "operations", "ops.toml"), operation("/bin/true", "run_as = \"deployer\"\n[operation.env]\nsecret = [\"DB_PASSWORD\"]"))
		}, "secret-missing", Warning, "needs the secret DB_PASSWORD"},
		{"history writable", func(t *testing.T, d *dep) {
			c, err := config.Load(d.cfg)
			must(t, err)
			d.recordHistory(t, c)
			chmod(t, filepath.Join(d.dir, "history", "versions.toml"), 0o666)
		}, "history-writable", Critical, "history replay judges runs by"},
		{"history directory owned by the agent", func(t *testing.T, d *dep) {
			c, err := config.Load(d.cfg)
			must(t, err)
			d.recordHistory(t, c)
			chown(t, filepath.Join(d.dir, "history"), agent.UID)
		}, "history-writable", Critical, ""},
		{"MCP token file writable", func(t *testing.T, d *dep) {
			p := filepath.Join(d.dir, "mcp-tokens.toml")
			write(t, p, "")
			chown(t, p, agent.UID)
			d.config(t, "mcp_tokens = \"mcp-tokens.toml\"\n", "")
		}, "mcp-tokens-writable", Critical, ""},
		{"program in a directory the agent can write", func(t *testing.T, d *dep) {
			bin := filepath.Join(d.dir, "progs")
			must(t, os.Mkdir(bin, 0o755))
			chmod(t, bin, 0o777)
			data, err := os.ReadFile("/bin/true")
			must(t, err)
			must(t, os.WriteFile(filepath.Join(bin, "deploy"), data, 0o755))
			write(t, filepath.Join(d.dir, "operations", "ops.toml"), operation(filepath.Join(bin, "deploy"), `run_as = "deployer"`))
		}, "program-writable", Critical, ""},
		{"prod-write binary writable", func(t *testing.T, d *dep) { chmod(t, filepath.Join(d.bin, "prod-write-net"), 0o777) }, "binary-writable", Critical, ""},
		{"service unit writable", func(t *testing.T, d *dep) { chmod(t, filepath.Join(d.dir, "systemd", "prod-write.service"), 0o666) }, "unit-writable", Critical, "systemd unit"},
		{"drop-in directory owned by the agent", func(t *testing.T, d *dep) {
			p := filepath.Join(d.dir, "systemd", "prod-write.service.d")
			must(t, os.Mkdir(p, 0o755))
			chown(t, p, agent.UID)
		}, "unit-writable", Critical, "systemd unit"},
		{"state writable by the agent", func(t *testing.T, d *dep) { chown(t, d.state, agent.UID) }, "state-writable", Critical, ""},
		{"state world-writable", func(t *testing.T, d *dep) { chmod(t, d.state, 0o777) }, "state-writable", Critical, ""},
		{"journal writable", func(t *testing.T, d *dep) {
			chmod(t, d.state, 0o711)
			chmod(t, filepath.Join(d.state, "journal", "receipts.jsonl"), 0o666)
		}, "state-writable", Critical, ""},
		{"credentials directory writable", func(t *testing.T, d *dep) { chmod(t, filepath.Join(d.dir, "credentials"), 0o777) }, "credentials-writable", Critical, ""},
		{"socket directory writable", func(t *testing.T, d *dep) { chmod(t, filepath.Join(d.dir, "run"), 0o777) }, "socket-replaceable", Critical, ""},
		{"socket owned by the agent", func(t *testing.T, d *dep) {
			p := filepath.Join(d.dir, "run", "prod-write.sock")
			write(t, p, "")
			chown(t, p, agent.UID)
		}, "socket-replaceable", Critical, ""},

		// It can read keys, secrets, state.
		{"runner key readable by the agent", func(t *testing.T, d *dep) {
			chmod(t, filepath.Join(d.dir, "keys"), 0o755)
			chmod(t, filepath.Join(d.dir, "keys", "runner.key"), 0o644)
		}, "key-readable", Critical, "principal runner (roles runner)"},
		{"runner key readable through a group", func(t *testing.T, d *dep) {
			must(t, os.Chown(filepath.Join(d.dir, "keys"), 0, agent.GIDs[0]))
			chmod(t, filepath.Join(d.dir, "keys"), 0o750)
			must(t, os.Chown(filepath.Join(d.dir, "keys", "runner.key"), 0, agent.GIDs[0]))
			chmod(t, filepath.Join(d.dir, "keys", "runner.key"), 0o640)
		}, "key-readable", Critical, "runner key"},
		{"runner key owned by the agent", func(t *testing.T, d *dep) {
			chmod(t, filepath.Join(d.dir, "keys"), 0o755)
			chown(t, filepath.Join(d.dir, "keys", "runner.key"), agent.UID)
		}, "key-readable", Critical, ""},
		{"runner key mode lets others read it", func(t *testing.T, d *dep) { chmod(t, filepath.Join(d.dir, "keys", "runner.key"), 0o644) }, "key-mode", Critical, ""},
		{"runner key mode lets its group read it", func(t *testing.T, d *dep) { chmod(t, filepath.Join(d.dir, "keys", "runner.key"), 0o640) }, "key-mode", Warning, ""},
		{"runner key missing", func(t *testing.T, d *dep) { must(t, os.Remove(filepath.Join(d.dir, "keys", "runner.key"))) }, "runner-key-missing", Critical, ""},
		{"no runner key configured", func(t *testing.T, d *dep) {
			write(t, d.cfg, "state = \""+d.state+"\"\n[service]\nsocket = \"run/prod-write.sock\"\n")
		}, "runner-key-missing", Critical, ""},
		{"approver key readable by the agent", func(t *testing.T, d *dep) {
			chmod(t, filepath.Join(d.dir, "keys"), 0o755)
			chmod(t, filepath.Join(d.dir, "keys", "alice.key"), 0o644)
		}, "principal-key-readable", Critical, "principal alice (roles approver)"},
		{"a demo cast's key deep in the configuration's tree", func(t *testing.T, d *dep) {
			deep := filepath.Join(d.dir, "demo", "keys")
			must(t, os.MkdirAll(deep, 0o755))
			must(t, os.Rename(filepath.Join(d.dir, "keys", "alice.key"), filepath.Join(deep, "alice.key")))
			chmod(t, filepath.Join(deep, "alice.key"), 0o644)
		}, "principal-key-readable", Critical, "alice"},
		{"approver key held by the agent", func(t *testing.T, d *dep) {
			p := filepath.Join(d.dir, "agent", "alice.key")
			must(t, os.Rename(filepath.Join(d.dir, "keys", "alice.key"), p))
			chown(t, p, agent.UID)
		}, "principal-key-held", Warning, "alice"},
		{"bridge key readable", func(t *testing.T, d *dep) {
			p := filepath.Join(d.dir, "agent", "bridge.key")
			newKey(t, p)
			chmod(t, p, 0o604)
			d.config(t, "", "[bridge]\nkey = \"agent/bridge.key\"\n")
		}, "key-readable", Critical, "bridge key"},
		{"bridge secret readable", func(t *testing.T, d *dep) {
			write(t, filepath.Join(d.dir, "slack-signing-secret"), "s3cret")
			d.config(t, "", "[bridge]\nslack_signing_secret_file = \"slack-signing-secret\"\n")
		}, "secret-readable", Critical, "Slack signing secret"},
		{"production secret readable", func(t *testing.T, d *dep) {
			chmod(t, filepath.Join(d.dir, "credentials"), 0o755)
			chmod(t, filepath.Join(d.dir, "credentials", "DEPLOY_TOKEN"), 0o644)
		}, "secret-readable", Critical, "DEPLOY_TOKEN"},
		{"production secret readable, beside the configuration", func(t *testing.T, d *dep) {
			// Without [service] credentials the service takes its secrets
			// from systemd, loaded from the directory beside the
			// configuration (docs/DEPLOYMENT.md).
			must(t, os.WriteFile(d.cfg, []byte("runner_key = \"keys/runner.key\"\nstate = \""+d.state+"\"\n[service]\nsocket = \"run/prod-write.sock\"\n"), 0o644))
			chmod(t, filepath.Join(d.dir, "credentials"), 0o755)
			chmod(t, filepath.Join(d.dir, "credentials", "DEPLOY_TOKEN"), 0o644)
		}, "secret-readable", Critical, "DEPLOY_TOKEN"},
		{"approver key readable beside a runner key outside the configuration's tree", func(t *testing.T, d *dep) {
			out := t.TempDir()
			chmod(t, out, 0o755)
			for _, k := range []string{"runner.key", "alice.key"} {
				must(t, os.Rename(filepath.Join(d.dir, "keys", k), filepath.Join(out, k)))
			}
			chmod(t, filepath.Join(out, "alice.key"), 0o644)
			write(t, d.cfg, "runner_key = \""+filepath.Join(out, "runner.key")+"\"\nstate = \""+d.state+"\"\n[service]\nsocket = \"run/prod-write.sock\"\ncredentials = \"credentials\"\n")
		}, "principal-key-readable", Critical, "alice"},
		{"state readable", func(t *testing.T, d *dep) { chmod(t, d.state, 0o755) }, "state-readable", Critical, ""},
		{"journal readable through a traversable state", func(t *testing.T, d *dep) {
			chmod(t, d.state, 0o711)
			chmod(t, filepath.Join(d.state, "journal"), 0o711)
			chmod(t, filepath.Join(d.state, "journal", "receipts.jsonl"), 0o644)
		}, "state-readable", Critical, "receipts.jsonl"},

		// It can become, or act as, a run_as account; the registry lets
		// a program run as the service or root.
		{"agent has the run_as account's uid", func(t *testing.T, d *dep) {
			d.accounts["deployer"] = runAsAccount{uid: agent.UID, home: d.home}
		}, "run-as-reachable", Critical, "deployer"},
		{"agent owns the state: it is the service", func(t *testing.T, d *dep) { chown(t, d.state, agent.UID) }, "service-reachable", Critical, ""},
		{"run_as home writable", func(t *testing.T, d *dep) { chmod(t, d.home, 0o777) }, "run-as-home-writable", Critical, "deployer"},
		{"a file in the run_as home writable", func(t *testing.T, d *dep) { chmod(t, filepath.Join(d.home, ".profile"), 0o666) }, "run-as-home-writable", Critical, ".profile"},
		{"a directory in the run_as home owned by the agent", func(t *testing.T, d *dep) { chown(t, filepath.Join(d.home, ".ssh"), agent.UID) }, "run-as-home-writable", Critical, ".ssh"},
		{"mutating operation without run_as", func(t *testing.T, d *dep) {
			write(t, filepath.Join(d.dir, "operations", "ops.toml"), operation("true", ""))
		}, "run-as-missing", Critical, "noop"},
		{"run_as is the service account", func(t *testing.T, d *dep) {
			write(t, filepath.Join(d.dir, "operations", "ops.toml"), operation("true", `run_as = "prodwrite"`))
		}, "run-as-service", Critical, "prodwrite"},
		{"run_as root without allow_root", func(t *testing.T, d *dep) {
			write(t, filepath.Join(d.dir, "operations", "ops.toml"), operation("true", `run_as = "root"`))
		}, "run-as-root", Critical, "allow_root"},
		{"run_as names no account", func(t *testing.T, d *dep) {
			write(t, filepath.Join(d.dir, "operations", "ops.toml"), operation("true", `run_as = "ghost"`))
		}, "run-as-unknown", Warning, "ghost"},

		{"shared accounts allowed", func(t *testing.T, d *dep) { d.config(t, "allow_shared_account = true\n", "") }, "shared-account", Warning, "no separation"},

		// The deployment itself.
		{"setuid prod-write", func(t *testing.T, d *dep) { chmod(t, filepath.Join(d.bin, "prod-write"), os.ModeSetuid|0o755) }, "setuid-binary", Critical, ""},
		{"setgid prod-write-net", func(t *testing.T, d *dep) { chmod(t, filepath.Join(d.bin, "prod-write-net"), os.ModeSetgid|0o755) }, "setuid-binary", Critical, ""},
		{"no service: local mode", func(t *testing.T, d *dep) {
			write(t, d.cfg, "runner_key = \"keys/runner.key\"\nstate = \""+d.state+"\"\n")
		}, "boundary", Warning, "no trust boundary"},
		{"bridge key missing", func(t *testing.T, d *dep) {
			d.config(t, "", "[bridge]\nkey = \"keys/bridge.key\"\nslack_channel = \"#prod\"\n")
		}, "bridge-key-missing", Critical, ""},
		{"bridge secret missing", func(t *testing.T, d *dep) {
			d.config(t, "", "[bridge]\ngithub_repo = \"acme/deploys\"\ngithub_token_file = \"github-token\"\n")
		}, "bridge-secret-missing", Critical, "GitHub token"},
		{"secret of a bridge that is off, readable", func(t *testing.T, d *dep) {
			write(t, filepath.Join(d.dir, "github-token"), "t")
			d.config(t, "", "[bridge]\ngithub_token_file = \"github-token\"\n")
		}, "key-mode", Critical, "GitHub token"},
		{"bridge secret mode", func(t *testing.T, d *dep) {
			must(t, os.WriteFile(filepath.Join(d.dir, "keys", "github-token"), []byte("t"), 0o640))
			d.config(t, "", "[bridge]\ngithub_token_file = \"keys/github-token\"\n")
		}, "key-mode", Warning, "GitHub token"},
		{"MCP TLS key mode", func(t *testing.T, d *dep) {
			must(t, os.WriteFile(filepath.Join(d.dir, "keys", "mcp-tls.key"), []byte("k"), 0o640))
			d.config(t, "mcp_listen = \"127.0.0.1:8443\"\nmcp_tokens = \"tokens.toml\"\nmcp_tls_cert = \"cert.pem\"\nmcp_tls_key = \"keys/mcp-tls.key\"\n", "")
		}, "key-mode", Warning, "MCP TLS key"},
		{"MCP TLS key missing", func(t *testing.T, d *dep) {
			d.config(t, "mcp_listen = \"127.0.0.1:8443\"\nmcp_tokens = \"tokens.toml\"\nmcp_tls_cert = \"cert.pem\"\nmcp_tls_key = \"keys/mcp-tls.key\"\n", "")
		}, "mcp-tls-key-missing", Critical, "MCP TLS key"},
		{"MCP introspection secret readable by others", func(t *testing.T, d *dep) {
			must(t, os.WriteFile(filepath.Join(d.dir, "keys", "introspect.secret"), []byte("s"), 0o644))
			write(t, filepath.Join(d.dir, "tokens.toml"), introspectionTokens("keys/introspect.secret"))
			d.config(t, "mcp_listen = \"127.0.0.1:8443\"\nmcp_tokens = \"tokens.toml\"\n", "")
		}, "key-mode", Critical, "MCP introspection client secret"},
		{"MCP introspection secret missing", func(t *testing.T, d *dep) {
			write(t, filepath.Join(d.dir, "tokens.toml"), introspectionTokens(filepath.Join(d.dir, "keys", "none.secret")))
			d.config(t, "mcp_listen = \"127.0.0.1:8443\"\nmcp_tokens = \"tokens.toml\"\n", "")
		}, "mcp-introspection-secret-missing", Critical, "none.secret"},
		{"trust policy missing", func(t *testing.T, d *dep) { must(t, os.Remove(filepath.Join(d.dir, "trust.toml"))) }, "policy-unreadable", Critical, ""},
		{"trust policy does not load", func(t *testing.T, d *dep) {
			write(t, filepath.Join(d.dir, "trust.toml"), "[[principal]]\nid = \"x\"\nroles = [\"king\"]\nkey = \"ed25519:AAAA\"\n")
		}, "policy-invalid", Critical, ""},
		{"principal without a key", func(t *testing.T, d *dep) {
			f, err := os.OpenFile(filepath.Join(d.dir, "trust.toml"), os.O_APPEND|os.O_WRONLY, 0)
			must(t, err)
			f.WriteString("\n[[principal]]\nid = \"ghost\"\nroles = [\"approver\"]\n")
			f.Close()
		}, "principal-without-key", Critical, ""},
		{"registry does not load", func(t *testing.T, d *dep) {
			write(t, filepath.Join(d.dir, "operations", "ops.toml"), "[[operation]]\nname = \"noop\"\n")
		}, "registry-invalid", Critical, ""},
		{"a registry file not read", func(t *testing.T, d *dep) {
			write(t, filepath.Join(d.dir, "operations", "k8s.TOML"), "[[operation]]\nname = \"noop\"\n")
		}, "registry-file-ignored", Warning, "k8s.TOML is not read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := deployment(t, "")
			tt.weaken(t, d)
			fs := d.check(t, agent)
			f, ok := find(fs, tt.want)
			if !ok {
				t.Fatalf("want a %s finding, got %v", tt.want, weaknesses(fs))
			}
			if f.Severity != tt.severity {
				t.Errorf("%s is %s, want %s", tt.want, f.Severity, tt.severity)
			}
			if !strings.Contains(f.Message, tt.says) {
				t.Errorf("%s says %q, want it to mention %q", tt.want, f.Message, tt.says)
			}
			if f.Fix == "" {
				t.Errorf("%s names no fix", tt.want)
			}
		})
	}
}

// Without a service there is nothing to reach: local mode reports the
// missing boundary once, not every file the invoking account owns.
func TestLocalModeIsOneWarning(t *testing.T) {
	d := deployment(t, "")
	d.accounts = nil
	must(t, os.WriteFile(d.cfg, []byte("runner_key = \"keys/runner.key\"\nstate = \""+d.state+"\"\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(d.dir, "operations", "ops.toml"), []byte(operation("true", "")), 0o644))
	must(t, os.Chmod(d.state, 0o777))
	if got := weaknesses(d.check(t, agent)); !slices.Equal(got, []string{"boundary"}) {
		t.Fatalf("local mode: want only the boundary warning, got %v", got)
	}
}

func TestRunAsRootAllowedIsANote(t *testing.T) {
	d := deployment(t, "")
	must(t, os.WriteFile(filepath.Join(d.dir, "operations", "ops.toml"), []byte(operation("true", `run_as = "root"`)), 0o644))
	d.config(t, "allow_root = true\n", "")
	fs := d.check(t, agent)
	if f, ok := find(fs, "run-as-root"); !ok || f.Severity != Info {
		t.Fatalf("run_as root with allow_root: want an info note, got %+v", fs)
	}
	if w := weaknesses(fs); len(w) > 0 {
		t.Fatalf("run_as root with allow_root: %v", w)
	}
}

// A run_as home too large to walk is said to be checked in part, and what
// was walked still counts.
func TestRunAsHomeWalkIsBounded(t *testing.T) {
	d := deployment(t, "")
	defer func(n int) { walkLimit = n }(walkLimit)
	walkLimit = 1
	fs := d.check(t, agent)
	if _, ok := find(fs, "run-as-home-partial"); !ok {
		t.Fatalf("want run-as-home-partial, got %+v", fs)
	}
}

// Doctor cannot see systemd's credentials: it says so when an operation
// needs a secret and no credentials directory is there to check.
func TestCredentialsFromSystemdAreNoted(t *testing.T) {
	d := deployment(t, "")
	must(t, os.RemoveAll(filepath.Join(d.dir, "credentials")))
	must(t, os.WriteFile(d.cfg, []byte("runner_key = \"keys/runner.key\"\nstate = \""+d.state+"\"\n[service]\nsocket = \"run/prod-write.sock\"\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(d.dir, "operations", "ops.toml"), []byte(operation("true", "run_as = \"deployer\"\n[operation.env]\nsecret = [\"DEPLOY_TOKEN\"]")), 0o644))
	fs := d.check(t, agent)
	if f, ok := find(fs, "credentials"); !ok || f.Severity != Info {
		t.Fatalf("want a credentials note, got %+v", fs)
	}
	if w := weaknesses(fs); len(w) > 0 {
		t.Fatalf("%v", w)
	}
}

// An unpinned policy gets the digests to pin, trust first (pin.txtar reads
// it from there).
func TestPinsAreOffered(t *testing.T) {
	d := deployment(t, "")
	f, ok := find(d.check(t, agent), "pins")
	if !ok || f.Severity != Info || strings.Count(f.Message, "sha256:") != 2 || !strings.Contains(f.Message, "trust = \"sha256:") {
		t.Fatalf("want the digests to pin, got %+v", f)
	}
}

func TestStateOnTmpfsIsFound(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "prod-write-doctor-")
	if err != nil {
		t.Skip("no /dev/shm tmpfs here")
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	if typ, err := statfsType(shm); err != nil || typ != tmpfsMagic {
		t.Skip("/dev/shm is not tmpfs here")
	}
	d := deployment(t, shm)
	fs := d.check(t, agent)
	if f, ok := find(fs, "state-not-durable"); !ok || f.Severity != Warning {
		t.Fatalf("want a state-not-durable warning, got %v", weaknesses(fs))
	}
}

// Root run without --as is the administrator: told, not faulted. Root named
// with --as is an agent running as root: the worst reach there is.
func TestRoot(t *testing.T) {
	d := deployment(t, "")
	c, err := config.Load(d.cfg)
	must(t, err)
	root := Account{Name: "root", UID: 0, GIDs: []int{0}}
	d.recordHistory(t, c)

	fs := Check(c, root)
	if _, ok := find(fs, "checked-as-root"); !ok {
		t.Fatal("doctor run as root must say that it checked as root")
	}
	if w := weaknesses(fs); len(w) > 0 {
		t.Fatalf("root checking a correct deployment: %v", w)
	}

	fs = CheckAs(c, root)
	if f, ok := find(fs, "run-as-reachable"); !ok || f.Severity != Critical {
		t.Fatalf("--as root: want a critical run-as-reachable, got %+v", fs)
	}
}

// publicKeyOf reads a key whatever its mode, as pkg/keys parses it, and a
// file that is not a key is no key.
func TestPublicKeyOf(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "k.key")
	k := newKey(t, p)
	must(t, os.Chmod(p, 0o644))
	pub, err := publicKeyOf(p)
	if err != nil {
		t.Fatal(err)
	}
	if pub.String() != k.Public().String() {
		t.Fatalf("public key %s, want %s", pub, k.Public())
	}
	must(t, os.WriteFile(filepath.Join(dir, "ssh.key"), []byte("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n"), 0o600))
	if _, err := publicKeyOf(filepath.Join(dir, "ssh.key")); err == nil {
		t.Fatal("an OpenSSH key parsed as an ed25519 PKCS#8 key")
	}
}

func TestReadableNeedsEveryDirectory(t *testing.T) {
	d := deployment(t, "")
	p := filepath.Join(d.dir, "keys", "runner.key")
	must(t, os.Chmod(p, 0o644))
	if agent.readable(p) {
		t.Fatal("a file in a 0700 directory of another account is not readable")
	}
	must(t, os.Chmod(filepath.Join(d.dir, "keys"), 0o711))
	if !agent.readable(p) {
		t.Fatal("a 0644 file behind a searchable directory is readable")
	}
	var st syscall.Stat_t
	must(t, syscall.Stat(p, &st))
	if st.Uid == uint32(agent.UID) {
		t.Fatal("test setup: the key must not be the agent's")
	}
}

// An env.pass whose name looks like a credential is flagged: its value is
// bound into plans and shown to every principal who reads one (ADR 0036);
// a name that does not look like one is not.
func TestEnvPassCredentialIsFlagged(t *testing.T) {
	for _, tc := range []struct {
		names string
		want  bool
	}{
		{`"PGPASSWORD"`, true}, {`"github_token"`, true}, {`"APP_SECRET_X"`, true},
		{`"AWS_SECRET_ACCESS_KEY"`, true}, {`"API_KEY"`, true}, {`"DB_CREDENTIALS"`, true},
		{`"AWS_REGION", "LANG"`, false},
	} {
		d := deployment(t, "")
		must(t, os.WriteFile(filepath.Join(d.dir, "operations", "ops.toml"), []byte(operation("true", `run_as = "deployer"`+"\n[operation.env]\npass = ["+tc.names+"]")), 0o644))
		f, ok := find(d.check(t, agent), "env-pass-credential")
		if ok != tc.want {
			t.Errorf("env.pass = [%s]: flagged %v, want %v (%+v)", tc.names, ok, tc.want, f)
		}
		if ok && f.Severity != Warning {
			t.Errorf("env.pass = [%s]: severity %s, want a warning", tc.names, f.Severity)
		}
	}
}

// introspectionTokens is an MCP tokens file with one introspection
// endpoint whose client secret is in secretFile.
func introspectionTokens(secretFile string) string {
	return `[oauth]
resource = "https://mcp.example/mcp"
issuers = ["https://idp.example"]

[[oauth.introspection]]
endpoint = "https://idp.example/introspect"
client_id = "prod-write"
client_secret_file = "` + secretFile + `"
`
}
