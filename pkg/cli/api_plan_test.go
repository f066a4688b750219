package cli

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// secretMarker is in every content these tests supply inline: no error,
// and no file the service keeps, may hold it.
const secretMarker = "s3cr3t-inline-marker"

// filesUnder returns every regular file under dir with its bytes.
func filesUnder(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		out[p] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A hosted agent plans an operation with file parameters by supplying
// their content inline: hashed as a handed-over file (the fingerprint is
// the one the same bytes by path give), bound as supplied inline (no path
// of the service's disk), and kept with the plan in its store, under its
// sum, where nothing but the store's own account can read it
// (docs/adr/0063-file-content-kept-with-the-plan.md).
func TestMCPHTTPPlansFilesSuppliedInline(t *testing.T) {
	w := newAPIWorld(t)
	hosted, err := localapi.HostedMCPBackend(w.st, &w.base.Env, "agent")
	if err != nil {
		t.Fatal(err)
	}
	config := []byte("token = \"" + secretMarker + "\"\n")
	blob := []byte{0, 0xff, 1, 2, 3}
	state := filepath.Join(w.h.dir, "state")
	before := filesUnder(t, state)

	got, err := hosted.Plan(mcpapi.PlanRequest{Operation: "push", Target: "staging", Inline: map[string][]byte{"config": config, "blob": blob}})
	if err != nil {
		t.Fatal(err)
	}
	if !got.Stored || got.Planner != "agent" || len(got.Files) != 2 {
		t.Fatalf("plan: %+v", got)
	}
	for _, fl := range got.Files {
		content := map[string][]byte{"config": config, "blob": blob}[fl.Name]
		sum := sha256.Sum256(content)
		if fl.Path != "inline:"+fl.Name || fl.Size != int64(len(content)) || fl.SHA256 != "sha256:"+hex.EncodeToString(sum[:]) {
			t.Errorf("file %s bound as %+v", fl.Name, fl)
		}
	}
	var text bytes.Buffer
	printPlan(&text, got.Plan)
	if !strings.Contains(text.String(), "file:        config, supplied inline over MCP HTTP (") || strings.Contains(text.String(), "inline:config") {
		t.Errorf("an approver reads:\n%s", text.String())
	}

	// The same bytes by path, in-process: the same fingerprint.
	for name, b := range map[string][]byte{"config.toml": config, "blob.bin": blob} {
		if err := os.WriteFile(filepath.Join(w.h.dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	byPath, err := localapi.API{Env: &w.local.Env}.Plan(context.Background(), api.PlanRequest{Operation: "push", Target: "staging", DryRun: true,
		Files: map[string]string{"config": "config.toml", "blob": "blob.bin"}})
	if err != nil {
		t.Fatal(err)
	}
	if byPath.Fingerprint != got.Fingerprint {
		t.Errorf("by path %s, inline %s: one content, two fingerprints", byPath.Fingerprint, got.Fingerprint)
	}

	// The content is kept with the plan, under its sum, for the store's
	// account alone; nowhere else in the state.
	after := filesUnder(t, state)
	for _, fl := range got.Files {
		content := map[string][]byte{"config": config, "blob": blob}[fl.Name]
		kept := filepath.Join(state, "store", "content", strings.TrimPrefix(fl.SHA256, "sha256:"))
		if !bytes.Equal(after[kept], content) {
			t.Errorf("%s holds %q, want the content of file %s", kept, after[kept], fl.Name)
		}
		if fi, err := os.Stat(kept); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want mode 0600", kept, fi.Mode(), err)
		}
		delete(after, kept)
	}
	for p, b := range after {
		if bytes.Contains(b, []byte(secretMarker)) {
			t.Errorf("%s holds the content supplied inline", p)
		}
	}
	if len(after) <= len(before) {
		t.Errorf("the state holds %d files after the plan, %d before: where is the plan?", len(after), len(before))
	}

	// Judged again without the content (as status and a run that does not
	// supply it again are), the plan's files are the content kept: the
	// gate waits for an approval, not for content.
	if _, r, err := hosted.Status(got.Fingerprint); err != nil || r == nil || r.Code != "no_approval" {
		t.Errorf("status over HTTP without the content: %v %v", r, err)
	}
	// Run elsewhere (the CLI in-process), the plan's inline file is never
	// read as a path of this process's working directory.
	if err := os.WriteFile(filepath.Join(w.h.dir, "inline:config"), config, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := localapi.API{Env: &w.local.Env}.Status(context.Background(), api.StatusRequest{Fingerprint: got.Fingerprint})
	if err != nil || st.Allowed || st.Refusal == nil || !strings.Contains(st.Refusal.Reason, "supplied inline over MCP HTTP") {
		t.Errorf("status in-process of a plan with inline files: %+v %v", st, err)
	}
}

// What a hosted caller supplies inline is attacker input to a privileged
// process: each row is something it cannot make the service do, refused
// with a refusal that quotes none of the content, and nothing stored.
func TestMCPHTTPInlineFilesAttackerInput(t *testing.T) {
	w := newAPIWorld(t)
	hosted, err := localapi.HostedMCPBackend(w.st, &w.base.Env, "agent")
	if err != nil {
		t.Fatal(err)
	}
	small := []byte(secretMarker)
	big := bytes.Repeat([]byte(secretMarker), mcpapi.MaxInlineFile/len(secretMarker)+1)
	cases := []struct {
		name string
		req  mcpapi.PlanRequest
		want string
	}{
		{"a name that is not a declared file", mcpapi.PlanRequest{Operation: "push", Target: "staging",
			Inline: map[string][]byte{"config": small, "blob": small, "extra": small}}, `declares no file "extra"`},
		{"a name that walks into the state", mcpapi.PlanRequest{Operation: "push", Target: "staging",
			Inline: map[string][]byte{"config": small, "blob": small, "../state/plans/x": small}}, `declares no file "../state/plans/x"`},
		{"a file of an operation with none", mcpapi.PlanRequest{Operation: "noop", Target: "staging", Params: map[string]string{"name": "a"},
			Inline: map[string][]byte{"config": small}}, `declares no file "config"`},
		{"a path on the service's disk", mcpapi.PlanRequest{Operation: "push", Target: "staging",
			Files: map[string]string{"config": "/etc/passwd", "blob": filepath.Join(w.h.dir, "state")}}, "never a path"},
		// Over MCP HTTP's bound, though under the operation's max_size:
		// refused by the bound, before any of it is copied or hashed.
		{"one file over the bound", mcpapi.PlanRequest{Operation: "push", Target: "staging",
			Inline: map[string][]byte{"config": small, "blob": big}}, "over MCP HTTP's bound of 1048576"},
		{"a file over its max_size", mcpapi.PlanRequest{Operation: "push", Target: "staging",
			Inline: map[string][]byte{"config": bytes.Repeat(small, 64<<10/len(small)+1), "blob": small}}, "larger than its max_size"},
		{"a file missing", mcpapi.PlanRequest{Operation: "push", Target: "staging",
			Inline: map[string][]byte{"config": small}}, "file blob is required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := filesUnder(t, filepath.Join(w.h.dir, "state"))
			got, err := hosted.Plan(c.req)
			if err == nil {
				t.Fatalf("planned: %+v", got)
			}
			r, ok := refusal.As(err)
			if !ok || r.Code != refusal.ParamInvalid || !strings.Contains(err.Error(), c.want) {
				t.Errorf("refused with %v (%T), want param_invalid saying %q", err, err, c.want)
			}
			b, _ := json.Marshal(r)
			if strings.Contains(err.Error(), secretMarker) || bytes.Contains(b, []byte(secretMarker)) || strings.Contains(err.Error(), "root:") {
				t.Errorf("the refusal quotes what was supplied: %v", err)
			}
			if after := filesUnder(t, filepath.Join(w.h.dir, "state")); len(after) != len(before) {
				t.Errorf("the state changed: %d files, then %d", len(before), len(after))
			}
		})
	}

	// The total over the bound, each file under it:
	// localapi.TestInlineFilesBoundedInAll.

	// A run supplies only the plan's inline files: another name is
	// refused before the plan runs.
	fp := w.h.plan("noop", "--param", "name=alpha")
	if _, err := hosted.Run(fp, map[string][]byte{"config": small}); err == nil || !strings.Contains(err.Error(), `declares no file "config"`) {
		t.Errorf("run with a file the plan does not bind inline: %v", err)
	}
}

// A plan made with inline paths never binds a path a caller named, and a
// path a caller names is never an inline one.
func TestInlinePathsAreNoCallerPaths(t *testing.T) {
	w := newAPIWorld(t)
	// Over the socket or in-process, "inline:config" is a file of the
	// caller's working directory, bound by its absolute path.
	if err := os.WriteFile(filepath.Join(w.h.dir, "inline:config"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := localapi.API{Env: &w.local.Env}.Plan(context.Background(), api.PlanRequest{Operation: "push", Target: "staging", DryRun: true,
		Files: map[string]string{"config": "inline:config", "blob": "inline:config"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, fl := range r.Files {
		if _, inline := operations.InlineName(fl.Path); inline || !filepath.IsAbs(fl.Path) {
			t.Errorf("a caller's path bound as %q", fl.Path)
		}
	}
}
