package doctor

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/receipts"
)

// TestHistoryFindings: doctor judges the trust policy and registry on disk,
// and what the runner service serves, by the history replay will judge
// their runs by. Each case is one state of the history; want is the
// finding (severity and check), or none.
func TestHistoryFindings(t *testing.T) {
	k, err := keys.Generate()
	must(t, err)
	now := time.Now()
	for _, tc := range []struct {
		name     string
		setup    func(t *testing.T, c *config.Config)
		served   bool
		sev, chk string
	}{
		{name: "no history", setup: func(*testing.T, *config.Config) {}, sev: Warning, chk: "history-absent"},
		{name: "recorded", setup: record(now), chk: ""},
		{name: "policy edited after the record", setup: func(t *testing.T, c *config.Config) {
			record(now)(t, c)
			appendFile(t, c.Trust, "\n# edited\n")
		}, sev: Warning, chk: "history-lacks-version"},
		{name: "operation added after the record", setup: func(t *testing.T, c *config.Config) {
			record(now)(t, c)
			must(t, os.WriteFile(filepath.Join(c.Registry, "more.toml"), []byte(strings.Replace(operation("/bin/true", ""), "noop", "more", 1)), 0o644))
		}, sev: Warning, chk: "history-lacks-version"},
		{name: "recorded, then superseded past its rollout", setup: func(t *testing.T, c *config.Config) {
			before, err := os.ReadFile(c.Trust)
			must(t, err)
			record(now.Add(-3*time.Hour))(t, c)
			appendFile(t, c.Trust, "\n# edited\n")
			record(now.Add(-2*time.Hour))(t, c)
			must(t, os.WriteFile(c.Trust, before, 0o644)) // the old one back on disk
		}, sev: Warning, chk: "history-lacks-version"},
		{name: "a broken history", setup: func(t *testing.T, c *config.Config) {
			must(t, os.MkdirAll(c.HistoryDir(), 0o755))
			must(t, os.WriteFile(filepath.Join(c.HistoryDir(), receipts.VersionsFile), []byte("bogus = 1\n"), 0o644))
		}, sev: Warning, chk: "history-unreadable"},
		{name: "no history, the policy tracked in git", setup: func(t *testing.T, c *config.Config) {
			gitCommit(t, c.Dir)
		}, sev: Info, chk: "history-git"},
		{name: "served, not recorded: said of what is on disk only", setup: func(*testing.T, *config.Config) {}, served: true, chk: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			c := &config.Config{Path: filepath.Join(dir, "prod-write.toml"), Dir: dir, Trust: filepath.Join(dir, "trust.toml"), Registry: filepath.Join(dir, "operations")}
			must(t, os.Mkdir(c.Registry, 0o755))
			must(t, os.WriteFile(c.Trust, []byte(principal("runner", "runner", k)), 0o644))
			must(t, os.WriteFile(filepath.Join(c.Registry, "noop.toml"), []byte(operation("/bin/true", "")), 0o644))
			tc.setup(t, c)
			p, err := os.ReadFile(c.Trust)
			must(t, err)
			reg, err := runner.LoadRegistry(c)
			must(t, err)
			policy, err := approval.ParsePolicy(c.Trust, p)
			must(t, err)
			digest := policy.Digest
			served := ""
			if tc.served {
				served = "the runner service"
			}
			fs := History(c, digest, reg.All(), served, now)
			if tc.chk == "" {
				if len(fs) != 0 {
					t.Fatalf("want no finding, got %+v", fs)
				}
				return
			}
			if len(fs) != 1 || fs[0].Check != tc.chk || fs[0].Severity != tc.sev {
				t.Fatalf("want one %s %s, got %+v", tc.sev, tc.chk, fs)
			}
			if tc.chk != "history-git" && tc.chk != "history-unreadable" && !strings.Contains(fs[0].Fix, "prod-write history record --config "+c.Path) {
				t.Fatalf("the fix does not name the command that records it: %q", fs[0].Fix)
			}
		})
	}
}

func record(at time.Time) func(*testing.T, *config.Config) {
	return func(t *testing.T, c *config.Config) {
		t.Helper()
		trust, err := os.ReadFile(c.Trust)
		must(t, err)
		reg, err := runner.LoadRegistry(c)
		must(t, err)
		_, err = receipts.RecordHistory(c.HistoryDir(), trust, reg.All(), at, time.Hour)
		must(t, err)
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteString(s)
	must(t, err)
	must(t, f.Close())
}

func gitCommit(t *testing.T, dir string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is missing (scripts/test-deps.sh installs it)")
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "policy"}} {
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}
