package receipts_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/cli"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/receipts"
)

// protected is a protected branch's copy of the world's trust policy,
// registry and history, which `history record` keeps.
type protected struct {
	w                        *world
	trust, registry, history string
}

func (w *world) protectedCopy(t *testing.T) *protected {
	t.Helper()
	dir := t.TempDir()
	p := &protected{w: w, trust: filepath.Join(dir, "trust.toml"), registry: filepath.Join(dir, "operations"), history: filepath.Join(dir, "history")}
	copyFile(t, filepath.Join(w.dir, "trust.toml"), p.trust)
	os.MkdirAll(p.registry, 0o755)
	for _, n := range []string{"config.toml", "noop.toml"} {
		copyFile(t, filepath.Join(w.dir, "operations", n), filepath.Join(p.registry, n))
	}
	return p
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// record runs `prod-write history record` as if at time at.
func (p *protected) record(t *testing.T, at time.Time, rollout string) []receipts.Change {
	t.Helper()
	var out, errb bytes.Buffer
	f := &cli.Factory{Env: localapi.Env{
		IO:        &cli.IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb},
		Now:       func() time.Time { return at },
		LookupEnv: func(string) (string, bool) { return "", false },
		Getwd:     func() (string, error) { return p.w.dir, nil },
	}}
	args := []string{"history", "record", "--trust", p.trust, "--registry", p.registry, "--history", p.history, "--rollout", rollout, "--json"}
	if code := cli.Run(args, f); code != 0 {
		t.Fatalf("history record: exit %d\n%s%s", code, out.String(), errb.String())
	}
	var doc struct {
		Changes []receipts.Change `json:"changes"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Changes
}

func (p *protected) replay(lines []string, extra ...string) verdict {
	return p.w.replay(lines, append([]string{"--trust", p.trust, "--registry", p.registry, "--history", p.history}, extra...)...)
}

// times is the first and last receipt time of the world's journal.
func (w *world) times(t *testing.T) (first, last time.Time) {
	t.Helper()
	for i, l := range w.journal {
		_, r, err := receipts.Decode([]byte(l))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = r.Time
		}
		last = r.Time
	}
	return first, last
}

// TestHistoryRecordSupersedes: `history record` writes when each version
// came into force, and replay judges by it
// (docs/adr/0023-history-record.md): a receipt naming a trust policy or an
// operation definition after its replacement fails superseded, one naming
// it before it came into force not_yet_in_force, with the runner's own key.
func TestHistoryRecordSupersedes(t *testing.T) {
	w := newWorld(t)
	first, last := w.times(t)

	t.Run("in force: ok; recording again changes nothing", func(t *testing.T) {
		p := w.protectedCopy(t)
		if ch := p.record(t, first.Add(-time.Hour), "1h"); len(ch) != 4 {
			t.Fatalf("first record: %+v, want the policy and three operations recorded", ch)
		}
		before, _ := os.ReadFile(filepath.Join(p.history, receipts.VersionsFile))
		if ch := p.record(t, last.Add(time.Hour), "1h"); len(ch) != 0 {
			t.Fatalf("second record: %+v, want nothing", ch)
		}
		after, _ := os.ReadFile(filepath.Join(p.history, receipts.VersionsFile))
		if !bytes.Equal(before, after) {
			t.Fatalf("a record with nothing changed rewrote versions.toml:\n%s\n%s", before, after)
		}
		if v := p.replay(w.journal); v.code != 0 {
			t.Fatalf("exit %d, problems %v", v.code, v.codes)
		}
	})

	t.Run("policy replaced before the runs", func(t *testing.T) {
		p := w.protectedCopy(t)
		p.record(t, first.Add(-2*time.Hour), "1h")
		appendTo(t, p.trust, "\n# reviewed again\n")
		// Replaced before the runs: every intent names a version no
		// longer in force.
		p.record(t, first.Add(-time.Hour), "30m")
		v := p.replay(w.journal)
		if v.code != 1 || !contains(v.codes[1], receipts.Superseded) || !contains(v.codes[9], receipts.Superseded) {
			t.Fatalf("exit %d, problems %v; want superseded on every intent", v.code, v.codes)
		}
		if contains(v.codes[2], receipts.Superseded) {
			t.Fatalf("an outcome names no policy: %v", v.codes[2])
		}
	})

	t.Run("policy replaced after the runs, within the rollout", func(t *testing.T) {
		p := w.protectedCopy(t)
		p.record(t, first.Add(-2*time.Hour), "1h")
		appendTo(t, p.trust, "\n# reviewed again\n")
		p.record(t, first.Add(-time.Minute), "1h")
		if v := p.replay(w.journal); v.code != 0 {
			t.Fatalf("exit %d, problems %v; want ok: the old version counts for the rollout", v.code, v.codes)
		}
	})

	t.Run("first recorded after the runs", func(t *testing.T) {
		// The first record's versions were in force before the history
		// began: the runs made under them before it verify.
		p := w.protectedCopy(t)
		p.record(t, last.Add(time.Hour), "1h")
		if v := p.replay(w.journal); v.code != 0 {
			t.Fatalf("exit %d, problems %v; want ok", v.code, v.codes)
		}
	})

	t.Run("policy new after a record that followed the runs", func(t *testing.T) {
		// Another policy was in force when the history was last
		// recorded, after the runs: the runs' policy can have been
		// deployed only after that record.
		p := w.protectedCopy(t)
		ran := string(must(os.ReadFile(p.trust)))
		appendTo(t, p.trust, "\n# another policy\n")
		p.record(t, last.Add(time.Hour), "1h")
		os.WriteFile(p.trust, []byte(ran), 0o644)
		p.record(t, last.Add(2*time.Hour), "1h")
		v := p.replay(w.journal)
		if v.code != 1 || !contains(v.codes[1], receipts.NotYetInForce) {
			t.Fatalf("exit %d, problems %v; want not_yet_in_force on line 1", v.code, v.codes)
		}
	})

	t.Run("definition replaced before the runs", func(t *testing.T) {
		p := w.protectedCopy(t)
		p.record(t, first.Add(-2*time.Hour), "1h")
		noop := filepath.Join(p.registry, "noop.toml")
		b, _ := os.ReadFile(noop)
		os.WriteFile(noop, bytes.Replace(b, []byte("targets = "), []byte("timeout = \"9s\"\ntargets = "), 1), 0o644)
		p.record(t, first.Add(-time.Hour), "0s")
		v := p.replay(w.journal)
		// Lines 1, 3, 5 and 7 are noop's intents; 9 is config-push's.
		if v.code != 1 || !contains(v.codes[1], receipts.Superseded) || !contains(v.codes[7], receipts.Superseded) || contains(v.codes[9], receipts.Superseded) {
			t.Fatalf("exit %d, problems %v; want superseded on noop's intents only", v.code, v.codes)
		}
	})

	t.Run("a history version without an interval", func(t *testing.T) {
		p := w.protectedCopy(t)
		p.record(t, first.Add(-time.Hour), "1h")
		addHistory(t, p.history, []byte("# another policy\n"))
		var out, errb bytes.Buffer
		f := &cli.Factory{Env: localapi.Env{IO: &cli.IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb}, Now: time.Now,
			LookupEnv: func(string) (string, bool) { return "", false }, Getwd: func() (string, error) { return w.dir, nil }}}
		path := filepath.Join(t.TempDir(), "r.jsonl")
		os.WriteFile(path, []byte(strings.Join(w.journal, "\n")+"\n"), 0o644)
		code := cli.Run([]string{"replay", path, "--trust", p.trust, "--registry", p.registry, "--history", p.history}, f)
		if code == 0 || !strings.Contains(errb.String(), "no interval") {
			t.Fatalf("exit %d: %s; want replay to refuse to start", code, errb.String())
		}
	})
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, s...), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestHistoryRunnerKeyRotated: a runner key rotated after the runs leaves
// their receipts valid, judged by the policy they were signed under; the
// rotated-out key (stolen, say) signs nothing dated after the rotation.
func TestHistoryRunnerKeyRotated(t *testing.T) {
	w := newWorld(t)
	first, last := w.times(t)
	rotate := func(p *protected) {
		t.Helper()
		data, _ := os.ReadFile(p.trust)
		k, err := keys.Generate()
		if err != nil {
			t.Fatal(err)
		}
		edited := strings.Replace(string(data), w.runner.Public().String(), k.Public().String(), 1)
		if edited == string(data) {
			t.Fatal("the runner's key is not in trust.toml")
		}
		os.WriteFile(p.trust, []byte(edited), 0o644)
	}

	t.Run("rotated after the runs", func(t *testing.T) {
		p := w.protectedCopy(t)
		p.record(t, first.Add(-time.Hour), "1h")
		rotate(p)
		p.record(t, last.Add(time.Minute), "0s")
		if v := p.replay(w.journal); v.code != 0 {
			t.Fatalf("exit %d, problems %v; want the old receipts valid", v.code, v.codes)
		}
	})

	t.Run("rotated before the runs: the old key signs nothing", func(t *testing.T) {
		p := w.protectedCopy(t)
		p.record(t, first.Add(-2*time.Hour), "1h")
		rotate(p)
		p.record(t, first.Add(-time.Hour), "0s")
		v := p.replay(w.journal)
		if v.code != 1 || !contains(v.codes[1], receipts.Superseded) || !contains(v.codes[2], receipts.UnknownSigner) {
			t.Fatalf("exit %d, problems %v; want intents superseded and outcomes unknown_signer", v.code, v.codes)
		}
	})

	t.Run("runner revoked in the current policy", func(t *testing.T) {
		p := w.protectedCopy(t)
		p.record(t, first.Add(-time.Hour), "1h")
		data, _ := os.ReadFile(p.trust)
		edited := strings.Replace(string(data), `id = "runner"`, `id = "runner"`+"\nrevoked_at = "+first.Add(-time.Minute).UTC().Format(time.RFC3339), 1)
		os.WriteFile(p.trust, []byte(edited), 0o644)
		p.record(t, first.Add(-30*time.Minute), "24h")
		v := p.replay(w.journal)
		if v.code != 1 || !contains(v.codes[2], receipts.Revoked) {
			t.Fatalf("exit %d, problems %v; want revoked on every receipt", v.code, v.codes)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
