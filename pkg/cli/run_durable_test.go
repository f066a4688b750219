package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// markOp is an operation whose one effect is a file: its existence is
// whether the program ran.
func markOp(t *testing.T, h *runHarness) string {
	t.Helper()
	marker := filepath.Join(h.dir, "ran")
	op := fmt.Sprintf(`
[[operation]]
name = "mark"
description = "leave a mark"
program = "touch"
args = [%q]
targets = ["staging"]
`, marker)
	if err := os.WriteFile(filepath.Join(h.dir, "operations", "mark.toml"), []byte(op), 0o644); err != nil {
		t.Fatal(err)
	}
	return marker
}

// The whole product's promise (docs/DESIGN.md §6): never an execution without a
// durable intent receipt. When the intent cannot be made durable, run
// fails saying nothing ran, and the program leaves no trace. The approval
// is spent all the same: consumption comes first and is never undone, so a
// failure here can only cost a fresh approval, never allow a second run.
func TestIntentNotDurableNothingRuns(t *testing.T) {
	h := newRunHarness(t)
	marker := markOp(t, h)
	fp := h.plan("mark")
	if code, _, stderr := h.run("gera", "go", fp, "--key", h.key("gera")); code != 0 {
		t.Fatal(stderr)
	}
	h.journalSync = func(*os.File) error { return errors.New("EIO: the disk is gone") }
	code, _, stderr := h.run("run", fp)
	if code == 0 || code == ExitRefused {
		t.Fatalf("run with a journal that cannot sync: exit %d, want a failure", code)
	}
	if !strings.Contains(stderr, "nothing ran") || !strings.Contains(stderr, "the disk is gone") {
		t.Errorf("stderr %q does not say nothing ran and why", stderr)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the program ran although its intent receipt never became durable (stat: %v)", err)
	}
	h.journalSync = nil
	code, _, stderr = h.run("run", fp, "--json")
	if code != ExitRefused || !strings.Contains(stderr, `"code":"evidence_consumed"`) {
		t.Errorf("after the failed run the approval should be spent: exit %d %s", code, stderr)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the program ran on a spent approval")
	}
}

// The intent's fsync returns before the program starts, and the outcome's
// after it ends: the program's mark is absent at the first sync and
// present at the second.
func TestIntentSyncedBeforeExec(t *testing.T) {
	h := newRunHarness(t)
	marker := markOp(t, h)
	fp := h.plan("mark")
	if code, _, stderr := h.run("gera", "go", fp, "--key", h.key("gera")); code != 0 {
		t.Fatal(stderr)
	}
	var seen []string
	h.journalSync = func(f *os.File) error {
		if _, err := os.Stat(marker); err == nil {
			seen = append(seen, "ran")
		} else {
			seen = append(seen, "not yet")
		}
		return f.Sync()
	}
	if code, _, stderr := h.run("run", fp); code != 0 {
		t.Fatalf("run: %d %s", code, stderr)
	}
	if want := []string{"not yet", "ran"}; !slices.Equal(seen, want) {
		t.Fatalf("at the journal's syncs the program had %q, want %q (intent synced before exec, outcome after)", seen, want)
	}
}
