package cli

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// The runner service replays its own journal by its own policy and
// nothing else: a caller who names a file (a journal to read, a state or a
// VSA to write, a policy) is refused before anything is read or written,
// so the service's rights never read or write a path of the caller's
// choosing. The same request in the caller's own process is a replay.
//
// Caller input: every path and option of api.ReplayRequest. What the
// caller cannot make the service do: read a file it names, or create or
// replace one (the VSA and the state are written where it says).
func TestServiceReplaysOnlyItsOwnJournal(t *testing.T) {
	w := newAPIWorld(t)
	h := w.h
	fp := h.plan("noop", "--param", "name=one")
	if code, _, stderr := h.run("gera", "go", fp, "--key", h.key("gera")); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := h.run("run", fp); code != 0 {
		t.Fatal(stderr)
	}
	cfg, err := w.local.Config()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	vsa, state := filepath.Join(out, "vsa.json"), filepath.Join(out, "state.json")
	ctx := context.Background()
	for name, req := range map[string]api.ReplayRequest{
		"a VSA written":         {VSA: vsa, VSAKey: h.key("agent")},
		"a state written":       {State: state, StateKey: h.key("agent")},
		"a journal named":       {Path: cfg.JournalPath()},
		"a policy named":        {Trust: filepath.Join(h.dir, "trust.toml")},
		"a proposal audited":    {Policy: filepath.Join(h.dir, "trust.toml")},
		"a checkpoint read":     {Checkpoint: "/etc/shadow"},
		"only a strict verdict": {StrictRevocation: true},
	} {
		t.Run(name, func(t *testing.T) {
			if !req.HasOptions() {
				t.Fatal("the request names nothing")
			}
			var heard int
			req.Each = func(api.ReplayVerdict) { heard++ }
			_, err := localapi.ServiceClient{Env: &w.client.Env}.Replay(ctx, req)
			var ue *localapi.UsageError
			if ExitCode(err) != ExitUsage && !errors.As(err, &ue) {
				t.Fatalf("the service replayed a request naming options: %v (exit %d)", err, ExitCode(err))
			}
			if heard != 0 {
				t.Errorf("%d verdicts before the refusal", heard)
			}
			for _, p := range []string{vsa, state} {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s: %v: the service wrote a file the caller named", p, err)
				}
			}
		})
	}
	// With no option it is the service's replay; with them, the caller's.
	if r, err := (localapi.ServiceClient{Env: &w.client.Env}).Replay(ctx, api.ReplayRequest{}); err != nil || !r.Summary.OK || r.Summary.Runs != 1 {
		t.Fatalf("the service's own replay: %+v, %v", r, err)
	}
	r, err := localapi.API{Env: &w.local.Env}.Replay(ctx, api.ReplayRequest{VSA: vsa, VSAKey: h.key("agent")})
	if err != nil || !r.Summary.OK || r.VSAVerify == "" {
		t.Fatalf("in process: %+v, %v", r, err)
	}
	if _, err := os.Stat(vsa); err != nil {
		t.Fatalf("in process, the VSA was not written: %v", err)
	}
}
