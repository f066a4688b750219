package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/decisionlog"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/servicecall"
	"github.com/prod-write/prod-write/receipts"
)

// TestDecisionLogFloodOfRefusals: an agent retries a vetoed plan hundreds
// of times through run (with a secret set that it never sees): every
// attempt is a vetoed refusal with its own id, the log stays within
// max_size × (keep+1), and no secret value is in any of its files.
func TestDecisionLogFloodOfRefusals(t *testing.T) {
	h := newRunHarness(t)
	if err := os.WriteFile(filepath.Join(h.dir, "operations", "test.toml"), []byte(inProcessOps), 0o644); err != nil {
		t.Fatal(err)
	}
	appendConfig(t, h.dir, "\n[log]\ndecisions = \"decisions.jsonl\"\ndecisions_max_size = \"16KiB\"\ndecisions_keep = 2\n")
	const secret = "tok-flood-2718281828"
	h.env["TOKEN"] = secret
	fp := h.plan("print-env")
	for _, args := range [][]string{{"gera", "go", fp, "--uses", "1000", "--key", h.key("gera")}, {"decide", fp, "deny", "--key", h.key("bob")}} {
		if code, _, stderr := h.run(args...); code != 0 {
			t.Fatal(stderr)
		}
	}
	const attempts = 300
	for range attempts {
		if code, _, stderr := h.run("run", fp, "--key", h.key("agent")); code != ExitRefused || !strings.Contains(stderr, "vetoed") {
			t.Fatalf("run: %d %s", code, stderr)
		}
	}
	path := filepath.Join(h.dir, "decisions.jsonl")
	ids := map[string]bool{}
	var total int64
	files := 0
	for _, name := range []string{path, path + ".1", path + ".2", path + ".3"} {
		data, err := os.ReadFile(name)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		files++
		total += int64(len(data))
		if len(data) > 16<<10 {
			t.Errorf("%s: %d bytes, over the 16KiB cap", name, len(data))
		}
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("%s holds the secret's value", name)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			var e decisionlog.Entry
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if e.Decision != decisionlog.Refused || e.Code != "vetoed" || e.Fingerprint != fp || e.Invoker.Principal != "agent" || e.Surface != "cli" {
				t.Errorf("line %+v", e)
			}
			if ids[e.DecisionID] {
				t.Errorf("decision id %s twice", e.DecisionID)
			}
			ids[e.DecisionID] = true
		}
	}
	if files != 3 || total > 3*16<<10 {
		t.Errorf("%d files, %d bytes: want 3 files within %d bytes", files, total, 3*16<<10)
	}
	// The newest attempts are kept: enough lines to show the retries.
	if len(ids) < 40 {
		t.Errorf("only %d attempts kept", len(ids))
	}
}

func appendConfig(t *testing.T, dir, text string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "prod-write.toml"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(text); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// sink is a decision log that takes no line: checkErr is what Check says,
// writeErr what Write says.
type sink struct{ checkErr, writeErr error }

func (s *sink) Write([]byte) error { return s.writeErr }
func (s *sink) Check() error       { return s.checkErr }

// TestUnloggedAllowedDecisionStopsTheRun: under the service, a log that
// cannot take an allowed run's line stops the run, before anything is
// spent (Ready) or before the program starts (Allowed), with exit 74; the
// cause (it names the service's files) is in the service's log, not told
// to the caller (docs/adr/0037-a-decision-log-that-never-drops-a-line.md).
func TestUnloggedAllowedDecisionStopsTheRun(t *testing.T) {
	cause := errors.New("write /var/log/prod-write/decisions.jsonl: no space left on device")
	for _, tc := range []struct {
		name string
		sink *sink
	}{
		{"ready", &sink{checkErr: cause, writeErr: cause}},
		{"allowed", &sink{writeErr: cause}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var svcLog, stderr bytes.Buffer
			f := &Factory{Env: localapi.Env{Now: time.Now, IO: &IOStreams{Err: &stderr}, Call: &servicecall.Call{State: &servicecall.State{Cfg: &config.Config{}, Decisions: tc.sink, Log: log.New(&svcLog, "", 0)}}}}
			d, err := f.StartDecision("sha256:ab")
			if err != nil {
				t.Fatal(err)
			}
			d.Loaded(&runner.PlanContext{Plan: &operations.Plan{Fingerprint: "sha256:ab"}, Policy: &approval.Policy{}, Registry: &operations.Registry{}})
			d.Stamp(&receipts.Intent{})
			err = d.Ready()
			if tc.name == "allowed" {
				if err != nil {
					t.Fatalf("Ready: %v", err)
				}
				err = d.Allowed(&approval.Decision{}, "run-1", 1)
			}
			if err == nil {
				t.Fatal("no error: the run would go on without its line")
			}
			if code := ExitCode(err); code != ExitIOErr {
				t.Errorf("exit %d, want %d", code, ExitIOErr)
			}
			if strings.Contains(err.Error(), "/var/log") || strings.Contains(stderr.String(), "/var/log") {
				t.Errorf("the caller is told the service's files: %q, %q", err, stderr.String())
			}
			if !strings.Contains(svcLog.String(), cause.Error()) || !strings.Contains(svcLog.String(), d.ID) {
				t.Errorf("the service's log does not say why: %q", svcLog.String())
			}
		})
	}
}
