package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// decide's answer lives as long as the operation's approval ttl unless
// --ttl says otherwise, like file's record and gera's decision.
func TestDecideTTLDefaultsToTheOperations(t *testing.T) {
	h := newRunHarness(t)
	op := `
[[operation]]
name = "short"
description = "approvals live ten minutes"
program = "true"
targets = ["staging"]
[operation.approval]
paths = ["smith+trinity"]
ttl = "10m"
`
	if err := os.WriteFile(filepath.Join(h.dir, "operations", "short.toml"), []byte(op), 0o644); err != nil {
		t.Fatal(err)
	}
	fp := h.plan("short")
	if code, _, stderr := h.run("file", fp, "--key", h.key("smith"), "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high"); code != 0 {
		t.Fatal(stderr)
	}
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 10 * time.Minute},
		{[]string{"--ttl", "3m"}, 3 * time.Minute},
	} {
		code, stdout, stderr := h.run(append([]string{"decide", fp, "approve", "--key", h.key("alice"), "--json"}, tc.args...)...)
		if code != 0 {
			t.Fatalf("decide %v: %d %s", tc.args, code, stderr)
		}
		var out struct {
			Expires time.Time `json:"expires"`
		}
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatal(err)
		}
		if got := out.Expires.Sub(h.now.UTC()); got != tc.want {
			t.Errorf("decide %v: the answer lives %s, want %s", tc.args, got, tc.want)
		}
	}
}
