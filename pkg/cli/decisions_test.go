package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/decisionlog"
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
