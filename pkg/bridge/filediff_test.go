package bridge_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
)

// Each defence of what a diff may show (ADR 0027) has a case that shows
// the secret's bytes if the defence is removed.
func TestDiffRules(t *testing.T) {
	const secret = "password = hunter2-do-not-show\n"
	for _, tc := range []struct {
		name string
		// setup changes the world before the view is built.
		setup   func(t *testing.T, w *bridgetest.World)
		want    []string // in the diff lines
		never   string   // never in them
		notShow string   // in NotShown
	}{
		{name: "shown", setup: func(*testing.T, *bridgetest.World) {},
			want: []string{"@@ -1,3 +1,3 @@", "-listen = 80", "+listen = 8080", " workers = 4"}},
		{name: "no roots declared", setup: func(_ *testing.T, w *bridgetest.World) { w.DiffRoots = []string{} },
			notShow: "bridge.diff_roots names no directory"},
		{name: "outside the roots", setup: func(_ *testing.T, w *bridgetest.World) {
			w.DiffRoots = []string{filepath.Join(w.Dir, "elsewhere")}
			must(t, os.Mkdir(w.DiffRoots[0], 0o755))
		}, notShow: "outside bridge.diff_roots"},
		{name: "a root's name is not a prefix", setup: func(_ *testing.T, w *bridgetest.World) {
			// DIR/et is not DIR/etc's parent.
			w.DiffRoots = []string{filepath.Join(w.Dir, "et")}
			must(t, os.Mkdir(w.DiffRoots[0], 0o755))
		}, notShow: "outside bridge.diff_roots"},
		{name: "link out of the roots", setup: func(t *testing.T, w *bridgetest.World) {
			out := filepath.Join(w.Dir, "secret.conf")
			must(t, os.WriteFile(out, []byte(secret), 0o644))
			must(t, os.Remove(w.Current))
			must(t, os.Symlink(out, w.Current))
		}, notShow: "outside bridge.diff_roots"},
		{name: "current file not readable by all", setup: func(t *testing.T, w *bridgetest.World) {
			must(t, os.WriteFile(w.Current, []byte(secret), 0o600))
			must(t, os.Chmod(w.Current, 0o640))
		}, notShow: "not readable by every account"},
		// What approvers see is the content kept with the plan, never the
		// path read again: whatever the agent does to the path after
		// planning, the planned bytes are shown.
		{name: "new file made unreadable after planning", setup: func(t *testing.T, w *bridgetest.World) {
			must(t, os.Chmod(w.NewFile, 0o600))
		}, want: []string{"+listen = 8080"}},
		{name: "new file changed after planning", setup: func(t *testing.T, w *bridgetest.World) {
			must(t, os.WriteFile(w.NewFile, []byte(strings.Replace(bridgetest.NewConfig, "8080", "SWAPPED", 1)), 0o644))
		}, want: []string{"+listen = 8080"}, never: "SWAPPED"},
		{name: "new file swapped for a secret of the same size", setup: func(t *testing.T, w *bridgetest.World) {
			must(t, os.WriteFile(w.NewFile, []byte(strings.Repeat("s", len(bridgetest.NewConfig))), 0o644))
		}, want: []string{"+listen = 8080"}},
		{name: "new file deleted after planning", setup: func(t *testing.T, w *bridgetest.World) {
			must(t, os.Remove(w.NewFile))
		}, want: []string{"+listen = 8080"}},
		{name: "new file a link to a secret after planning", setup: func(t *testing.T, w *bridgetest.World) {
			out := filepath.Join(w.Dir, "secret.conf")
			must(t, os.WriteFile(out, []byte(secret), 0o644))
			must(t, os.Remove(w.NewFile))
			must(t, os.Symlink(out, w.NewFile))
		}, want: []string{"+listen = 8080"}},
		{name: "file the operation marks secret", setup: func(t *testing.T, w *bridgetest.World) {
			op, _ := w.Registry.Get("push-config")
			fi := op.Files["config"]
			fi.Secret = true
			op.Files["config"] = fi
		}, notShow: "marks it secret", never: "8080"},
		{name: "content not kept", setup: func(t *testing.T, w *bridgetest.World) {
			must(t, os.RemoveAll(filepath.Join(w.Dir, "state", "store", "content")))
		}, notShow: "not kept with the plan"},
		// The store is not trusted: content kept under the plan's sum
		// that is not those bytes is not shown.
		{name: "kept content replaced in the store", setup: func(t *testing.T, w *bridgetest.World) {
			kept := filepath.Join(w.Dir, "state", "store", "content", strings.TrimPrefix(w.Plan.Files[0].SHA256, "sha256:"))
			must(t, os.Chmod(kept, 0o600))
			must(t, os.WriteFile(kept, []byte(strings.Repeat("s", len(bridgetest.NewConfig))), 0o600))
		}, notShow: "not what the plan binds"},
		{name: "file does not exist yet", setup: func(t *testing.T, w *bridgetest.World) {
			must(t, os.Remove(w.Current))
		}, want: []string{"(does not exist yet)", "@@ -0,0 +1,3 @@", "+listen = 8080"}},
		{name: "current file is a FIFO", setup: func(t *testing.T, w *bridgetest.World) {
			must(t, os.Remove(w.Current))
			must(t, mkfifo(w.Current))
		}, notShow: "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := bridgetest.NewWithFile(t, 1)
			tc.setup(t, w)
			v, err := bridge.Describe(w.Source(), w.FP, w.Record, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			if len(v.Diffs) != 1 {
				t.Fatalf("%d diffs", len(v.Diffs))
			}
			d := v.Diffs[0]
			text := strings.Join(bridge.DiffLines(d), "\n")
			if strings.Contains(text, "hunter2") || strings.Contains(text, "sssss") || tc.never != "" && strings.Contains(text, tc.never) {
				t.Fatalf("the diff shows the secret:\n%s", text)
			}
			if tc.notShow != "" {
				if !strings.Contains(d.NotShown, tc.notShow) || len(d.Hunks) != 0 {
					t.Fatalf("NotShown %q, hunks %q; want %q", d.NotShown, d.Hunks, tc.notShow)
				}
				return
			}
			if d.NotShown != "" {
				t.Fatalf("not shown: %s", d.NotShown)
			}
			for _, want := range tc.want {
				if !strings.Contains(text, want) {
					t.Errorf("the diff does not show %q:\n%s", want, text)
				}
			}
		})
	}
}

// Once the decision is closed the view shows no diff: the file may be
// replaced already, and a diff then shows something other than what was
// decided.
func TestNoDiffOnceClosed(t *testing.T) {
	w := bridgetest.NewWithFile(t, 1)
	w.Withdraw(t)
	v, err := bridge.Describe(w.Source(), w.FP, w.Record, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Diffs) != 0 {
		t.Fatalf("diffs of a withdrawn plan: %+v", v.Diffs)
	}
}

// UseLines say single use and the lifetime, bounded by the record's.
func TestUseLines(t *testing.T) {
	for _, n := range []int{1, 2} {
		w := bridgetest.New(t, n)
		v, err := bridge.Describe(w.Source(), w.FP, w.Record, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(bridge.UseLines(v), "\n")
		for _, want := range []string{"Single use:", "exactly one run", "counts for 1h from when it is given",
			"never after the certainty record expires at " + v.Record.Expires.UTC().Format("2006-01-02 15:04:05Z")} {
			if !strings.Contains(text, want) {
				t.Errorf("approvers=%d: %q not in\n%s", n, want, text)
			}
		}
		if n == 2 && !strings.Contains(text, "2 approvals from different approvers") {
			t.Errorf("approvers=2: %s", text)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func mkfifo(path string) error { return syscall.Mkfifo(path, 0o644) }
