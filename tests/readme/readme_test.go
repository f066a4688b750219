// Package readme runs the README's usage block as it stands, so that it
// stays true.
package readme

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// usageBlock is the ```sh block after "The story, in local mode" in the
// README.
func usageBlock(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "The story, in local mode")
	if i < 0 {
		t.Fatal(`the README has no "The story, in local mode" section`)
	}
	s = s[i:]
	start := strings.Index(s, "```sh\n")
	if start < 0 {
		t.Fatal("no ```sh block after it")
	}
	s = s[start+len("```sh\n"):]
	end := strings.Index(s, "```")
	if end < 0 {
		t.Fatal("the block does not end")
	}
	return s[:end]
}

func TestReadmeUsageRuns(t *testing.T) {
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+"/", "./cmd/prod-write", "./cmd/prod-write-cli", "./cmd/prod-write-net")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building: %v\n%s", err, out)
	}
	dir := t.TempDir()
	script := "set -euo pipefail\n" + usageBlock(t)
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + dir}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the README's usage block failed: %v\n%s", err, out)
	}
	for _, want := range []string{"smith vouches for this plan", "answer:      approve by alice", "0 failed, 0 incomplete"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("its output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "pw", "state", "journal", "receipts.jsonl")); err != nil {
		t.Errorf("no journal after the run: %v", err)
	}
}
