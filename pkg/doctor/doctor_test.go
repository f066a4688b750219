package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
)

// agent is an unprivileged account that owns nothing in the deployment.
var agent = Account{Name: "agent", UID: 4242, GIDs: []int{4242}}

// deployment writes a correct deployment (everything owned by the test's
// user, which must be root, and writable only by it) and returns its
// configuration path.
func deployment(t *testing.T, state string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("doctor tests build root-owned deployments and run only as root (CI is root)")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "operations"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "keys"), 0o700))
	if state == "" {
		state = filepath.Join(dir, "state")
	}
	must(os.MkdirAll(state, 0o700))
	k, _ := keys.Generate()
	must(k.WriteNew(filepath.Join(dir, "keys", "runner.key")))
	must(os.WriteFile(filepath.Join(dir, "trust.toml"), []byte("[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = \""+k.Public().String()+"\"\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "operations", "ops.toml"), []byte("[[operation]]\nname = \"noop\"\nprogram = \"true\"\ntargets = [\"staging\"]\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "prod-write.toml"), []byte("runner_key = \"keys/runner.key\"\nstate = \""+state+"\"\n"), 0o644))
	return filepath.Join(dir, "prod-write.toml")
}

func check(t *testing.T, cfgPath string) []Finding {
	t.Helper()
	c, err := config.Load(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	return Check(c, agent)
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

func TestCorrectDeploymentIsClean(t *testing.T) {
	cfg := deployment(t, "")
	if w := weaknesses(check(t, cfg)); len(w) > 0 {
		t.Fatalf("a correct deployment has findings: %v", check(t, cfg))
	}
}

func TestEachWeaknessIsFound(t *testing.T) {
	tests := []struct {
		name   string
		weaken func(t *testing.T, dir string)
		want   string
	}{
		{"policy writable by others", func(t *testing.T, dir string) { os.Chmod(filepath.Join(dir, "trust.toml"), 0o666) }, "policy-writable"},
		{"policy owned by the agent", func(t *testing.T, dir string) { os.Chown(filepath.Join(dir, "trust.toml"), agent.UID, 0) }, "policy-writable"},
		{"policy replaceable through its directory", func(t *testing.T, dir string) { os.Chmod(dir, 0o777) }, "policy-writable"},
		{"registry file writable", func(t *testing.T, dir string) { os.Chmod(filepath.Join(dir, "operations", "ops.toml"), 0o666) }, "registry-writable"},
		{"registry directory writable", func(t *testing.T, dir string) { os.Chmod(filepath.Join(dir, "operations"), 0o777) }, "registry-writable"},
		{"config writable", func(t *testing.T, dir string) { os.Chmod(filepath.Join(dir, "prod-write.toml"), 0o666) }, "config-writable"},
		{"runner key readable by others", func(t *testing.T, dir string) { os.Chmod(filepath.Join(dir, "keys", "runner.key"), 0o644) }, "key-readable"},
		{"runner key missing", func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "keys", "runner.key")) }, "runner-key-missing"},
		{"no runner key configured", func(t *testing.T, dir string) {
			os.WriteFile(filepath.Join(dir, "prod-write.toml"), []byte("state = \"state\"\n"), 0o644)
		}, "runner-key-missing"},
		{"state writable by the agent", func(t *testing.T, dir string) { os.Chown(filepath.Join(dir, "state"), agent.UID, agent.GIDs[0]) }, "state-writable"},
		{"state world-writable", func(t *testing.T, dir string) { os.Chmod(filepath.Join(dir, "state"), 0o777) }, "state-writable"},
		{"principal without a key", func(t *testing.T, dir string) {
			f, _ := os.OpenFile(filepath.Join(dir, "trust.toml"), os.O_APPEND|os.O_WRONLY, 0)
			f.WriteString("\n[[principal]]\nid = \"ghost\"\nroles = [\"approver\"]\n")
			f.Close()
		}, "principal-without-key"},
		{"program in a directory the agent can write", func(t *testing.T, dir string) {
			bin := filepath.Join(dir, "bin")
			os.Mkdir(bin, 0o777)
			os.Chmod(bin, 0o777)
			data, _ := os.ReadFile("/bin/true")
			os.WriteFile(filepath.Join(bin, "deploy"), data, 0o755)
			os.WriteFile(filepath.Join(dir, "operations", "ops.toml"), []byte("[[operation]]\nname = \"noop\"\nprogram = \""+filepath.Join(bin, "deploy")+"\"\ntargets = [\"staging\"]\n"), 0o644)
		}, "program-writable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := deployment(t, "")
			tt.weaken(t, filepath.Dir(cfg))
			got := weaknesses(check(t, cfg))
			found := false
			for _, c := range got {
				if c == tt.want {
					found = true
				}
			}
			if !found {
				t.Fatalf("want a %s finding, got %v", tt.want, got)
			}
		})
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
	cfg := deployment(t, shm)
	got := strings.Join(weaknesses(check(t, cfg)), ",")
	if !strings.Contains(got, "state-not-durable") {
		t.Fatalf("want state-not-durable, got %s", got)
	}
}

func TestRootIsTold(t *testing.T) {
	cfg := deployment(t, "")
	c, _ := config.Load(cfg)
	fs := Check(c, Account{Name: "root", UID: 0, GIDs: []int{0}})
	if len(fs) == 0 || fs[len(fs)-1].Severity != Info {
		t.Fatalf("findings %v", fs)
	}
	var saw bool
	for _, f := range fs {
		saw = saw || f.Check == "checked-as-root"
	}
	if !saw {
		t.Fatal("doctor run as root must say that it checked as root")
	}
}

func TestBridgeSecretReadableIsFound(t *testing.T) {
	cfg := deployment(t, "")
	dir := filepath.Dir(cfg)
	secret := filepath.Join(dir, "slack-signing-secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _ := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("\n[bridge]\nslack_signing_secret_file = \"slack-signing-secret\"\n")
	f.Close()
	if got := strings.Join(weaknesses(check(t, cfg)), ","); !strings.Contains(got, "key-readable") {
		t.Fatalf("a world-readable Slack signing secret was not found: %s", got)
	}
	os.Chmod(secret, 0o600)
	if got := weaknesses(check(t, cfg)); len(got) != 0 {
		t.Fatalf("a private secret file is reported: %v", got)
	}
}
