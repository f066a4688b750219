package receipts_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/cli"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/receipts"
)

// world is a deployment whose journal was made by real runs.
type world struct {
	t       *testing.T
	dir     string
	journal []string // the untouched journal's lines
	runner  *keys.Private
	agent   *keys.Private
}

var fpRE = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

func (w *world) pw(args ...string) string {
	w.t.Helper()
	var out, errb bytes.Buffer
	f := &cli.Factory{Env: localapi.Env{
		IO:  &cli.IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb},
		Now: time.Now,
		LookupEnv: func(k string) (string, bool) {
			if k == "DEPLOY_TOKEN" {
				return "t0ken", true
			}
			return "", false
		},
		Getwd: func() (string, error) { return w.dir, nil },
	}}
	if code := cli.Run(args, f); code != 0 {
		w.t.Fatalf("prod-write %v: exit %d\n%s%s", args, code, out.String(), errb.String())
	}
	return out.String()
}

// newWorld makes four runs: one approved by Smith and Alice, one by a Gera
// go, two by one Gera go with two uses, and one with a file parameter.
func newWorld(t *testing.T) *world {
	w := &world{t: t, dir: t.TempDir()}
	w.pw("init", "--demo", w.dir)
	ops := "[[operation]]\nname = \"noop\"\nprogram = \"/bin/true\"\nargs = [\"{param.n}\"]\ntargets = [\"staging\"]\n[operation.params.n]\npattern = \"[0-9]+\"\n"
	if err := os.WriteFile(filepath.Join(w.dir, "operations", "noop.toml"), []byte(ops), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.dir, "app.toml"), []byte("port = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	key := func(id string) string { return filepath.Join(w.dir, "keys", id+".key") }
	plan := func(args ...string) string {
		return fpRE.FindString(w.pw(append(append([]string{"plan"}, args...), "--key", key("agent"))...))
	}
	a := plan("noop", "--target", "staging", "--param", "n=1")
	w.pw("file", a, "--key", key("smith"), "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high")
	w.pw("decide", a, "approve", "--key", key("alice"))
	w.pw("run", a)
	b := plan("noop", "--target", "staging", "--param", "n=2")
	w.pw("gera", "go", b, "--key", key("gera"))
	w.pw("run", b)
	c := plan("noop", "--target", "staging", "--param", "n=3")
	w.pw("gera", "go", c, "--uses", "2", "--key", key("gera"))
	w.pw("run", c)
	w.pw("run", c)
	d := plan("config-push", "--target", "staging", "--param", "service=api", "--file", "config=app.toml")
	w.pw("gera", "go", d, "--key", key("gera"))
	w.pw("run", d)

	data, err := os.ReadFile(filepath.Join(w.dir, "state", "journal", "receipts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	w.journal = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(w.journal) != 10 {
		t.Fatalf("journal has %d lines, want 10", len(w.journal))
	}
	if w.runner, err = keys.Load(key("runner")); err != nil {
		t.Fatal(err)
	}
	if w.agent, err = keys.Load(key("agent")); err != nil {
		t.Fatal(err)
	}
	return w
}

type verdict struct {
	code     int
	codes    map[int][]string // line → problem codes
	warnings map[int][]string // line → warning codes
	all      []string
}

// replay runs `prod-write replay` on lines and collects the problem codes.
func (w *world) replay(lines []string, extra ...string) verdict {
	w.t.Helper()
	path := filepath.Join(w.t.TempDir(), "receipts.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		w.t.Fatal(err)
	}
	var out, errb bytes.Buffer
	f := &cli.Factory{Env: localapi.Env{
		IO:        &cli.IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb},
		Now:       time.Now,
		LookupEnv: func(string) (string, bool) { return "", false },
		Getwd:     func() (string, error) { return w.dir, nil },
	}}
	v := verdict{code: cli.Run(append([]string{"replay", path, "--json"}, extra...), f), codes: map[int][]string{}, warnings: map[int][]string{}}
	var rep struct {
		Receipts []receipts.Result `json:"receipts"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		w.t.Fatalf("replay output is not JSON: %v\n%s\n%s", err, out.String(), errb.String())
	}
	for _, r := range rep.Receipts {
		for _, p := range r.Problems {
			v.codes[r.Line] = append(v.codes[r.Line], p.Code)
			v.all = append(v.all, p.Code)
		}
		for _, p := range r.Warnings {
			v.warnings[r.Line] = append(v.warnings[r.Line], p.Code)
		}
	}
	return v
}

func (v verdict) has(code string) bool {
	for _, c := range v.all {
		if c == code {
			return true
		}
	}
	return false
}

// edit decodes line i's receipt, lets fn change it, and signs it again
// with k. When rechain is set, every later line is re-signed with the
// runner key and relinked (outcomes naming their intent's new hash, times
// not going back from the edited one), so that only the edit itself is
// wrong.
func (w *world) edit(lines []string, i int, k *keys.Private, rechain bool, fn func(r *receipts.Receipt)) []string {
	w.t.Helper()
	out := append([]string(nil), lines...)
	_, r, err := receipts.Decode([]byte(out[i]))
	if err != nil {
		w.t.Fatal(err)
	}
	fn(r)
	out[i] = w.sign(r, k)
	if rechain {
		renamed := map[string]string{receipts.LineHash([]byte(lines[i])): receipts.LineHash([]byte(out[i]))}
		latest := r.Time
		for j := i + 1; j < len(out); j++ {
			_, next, err := receipts.Decode([]byte(out[j]))
			if err != nil {
				w.t.Fatal(err)
			}
			next.Prev = receipts.LineHash([]byte(out[j-1]))
			if next.Outcome != nil {
				if h, ok := renamed[next.Outcome.Intent]; ok {
					next.Outcome.Intent = h
				}
			}
			if next.Time.Before(latest) {
				next.Time = latest
			}
			latest = next.Time
			out[j] = w.sign(next, w.runner)
			renamed[receipts.LineHash([]byte(lines[j]))] = receipts.LineHash([]byte(out[j]))
		}
	}
	return out
}

func (w *world) sign(r *receipts.Receipt, k *keys.Private) string {
	env, err := approval.Sign(k, receipts.PayloadType, r)
	if err != nil {
		w.t.Fatal(err)
	}
	b, _ := json.Marshal(env)
	return string(b)
}

func TestTamperSuite(t *testing.T) {
	w := newWorld(t)

	t.Run("untouched journal passes", func(t *testing.T) {
		if v := w.replay(w.journal); v.code != 0 || len(v.all) != 0 {
			t.Fatalf("exit %d, problems %v", v.code, v.codes)
		}
	})

	t.Run("one byte flipped", func(t *testing.T) {
		lines := append([]string(nil), w.journal...)
		l := []byte(lines[2])
		at := bytes.Index(l, []byte(`"payload":"`)) + len(`"payload":"`) + 40
		if l[at] == 'A' {
			l[at] = 'B'
		} else {
			l[at] = 'A'
		}
		lines[2] = string(l)
		v := w.replay(lines)
		if v.code != 1 || !contains(v.codes[3], receipts.BadSignature) {
			t.Fatalf("exit %d, problems %v; want bad_signature on line 3", v.code, v.codes)
		}
	})

	t.Run("middle receipt deleted", func(t *testing.T) {
		lines := append(append([]string(nil), w.journal[:4]...), w.journal[5:]...)
		v := w.replay(lines)
		if v.code != 1 || !contains(v.codes[5], receipts.ChainBroken) {
			t.Fatalf("exit %d, problems %v; want chain_broken on line 5", v.code, v.codes)
		}
	})

	t.Run("receipt signed by an unknown key inserted", func(t *testing.T) {
		stranger, _ := keys.Generate()
		_, r, _ := receipts.Decode([]byte(w.journal[3]))
		forged := w.sign(r, stranger)
		lines := append(append(append([]string(nil), w.journal[:4]...), forged), w.journal[4:]...)
		v := w.replay(lines)
		if v.code != 1 || !contains(v.codes[5], receipts.UnknownSigner) {
			t.Fatalf("exit %d, problems %v; want unknown_signer on line 5", v.code, v.codes)
		}
	})

	t.Run("receipt signed by the agent's key inserted", func(t *testing.T) {
		lines := w.edit(w.journal, 9, w.agent, false, func(r *receipts.Receipt) {})
		v := w.replay(lines)
		if v.code != 1 || !contains(v.codes[10], receipts.NotRunner) {
			t.Fatalf("exit %d, problems %v; want not_runner on line 10", v.code, v.codes)
		}
	})

	t.Run("two receipts reordered", func(t *testing.T) {
		lines := append([]string(nil), w.journal...)
		lines[4], lines[5] = lines[5], lines[4]
		v := w.replay(lines)
		if v.code != 1 || !v.has(receipts.ChainBroken) {
			t.Fatalf("exit %d, problems %v; want chain_broken", v.code, v.codes)
		}
	})

	t.Run("tail truncated, caught by a checkpoint", func(t *testing.T) {
		cp := filepath.Join(t.TempDir(), "head.json")
		w.pw("receipts", "checkpoint", "--out", cp)
		cut := w.journal[:8] // a whole run cut off: the chain alone cannot tell
		if v := w.replay(cut); v.code != 0 {
			t.Fatalf("without a checkpoint a clean cut should verify: %v", v.codes)
		}
		v := w.replay(cut, "--checkpoint", cp)
		if v.code != 1 || !v.has(receipts.Truncated) {
			t.Fatalf("exit %d, problems %v; want truncated", v.code, v.codes)
		}
		if v := w.replay(w.journal, "--checkpoint", cp); v.code != 0 {
			t.Fatalf("the whole journal against its checkpoint: %v", v.codes)
		}
	})

	t.Run("one approval reused in two receipts", func(t *testing.T) {
		// A runner that misbehaves appends a second run of run B's
		// single-use Gera go, correctly chained and signed.
		_, intent, _ := receipts.Decode([]byte(w.journal[2]))
		_, outcome, _ := receipts.Decode([]byte(w.journal[3]))
		intent.RunID, outcome.RunID = "replayed", "replayed"
		intent.Seq, intent.Prev = 11, receipts.LineHash([]byte(w.journal[9]))
		li := w.sign(intent, w.runner)
		outcome.Seq, outcome.Prev = 12, receipts.LineHash([]byte(li))
		outcome.Outcome.Intent = receipts.LineHash([]byte(li))
		lines := append(append([]string(nil), w.journal...), li, w.sign(outcome, w.runner))
		v := w.replay(lines)
		if v.code != 1 || !contains(v.codes[11], receipts.EvidenceReused) || v.has(receipts.ChainBroken) {
			t.Fatalf("exit %d, problems %v; want evidence_reused on line 11 and an intact chain", v.code, v.codes)
		}
		// A Gera go with two uses may back two runs (run C), not three.
		_, intentC, _ := receipts.Decode([]byte(w.journal[4]))
		intentC.RunID, intentC.Seq, intentC.Prev = "third", 11, receipts.LineHash([]byte(w.journal[9]))
		lines = append(append([]string(nil), w.journal...), w.sign(intentC, w.runner))
		v = w.replay(lines)
		if !contains(v.codes[11], receipts.EvidenceReused) {
			t.Fatalf("problems %v; want evidence_reused for a third use of a two-use go", v.codes)
		}
	})

	// Receipts are judged by the policy version they name,
	// kept in the history by digest, and by the current policy's
	// since/revoked_at.
	t.Run("signer dropped from the trust policy", func(t *testing.T) {
		data, _ := os.ReadFile(filepath.Join(w.dir, "trust.toml"))
		blocks := strings.Split(string(data), "[[principal]]")
		var kept []string
		for _, b := range blocks {
			if !strings.Contains(b, `id = "alice"`) {
				kept = append(kept, b)
			}
		}
		dir := t.TempDir()
		trust := filepath.Join(dir, "trust.toml")
		if err := os.WriteFile(trust, []byte(strings.Join(kept, "[[principal]]")), 0o644); err != nil {
			t.Fatal(err)
		}
		// Without the old version in the history, the receipts name a
		// policy replay does not know.
		v := w.replay(w.journal, "--trust", trust)
		if v.code != 1 || !contains(v.codes[1], receipts.UnknownPolicy) {
			t.Fatalf("exit %d, problems %v; want unknown_policy on line 1", v.code, v.codes)
		}
		// With it, alice's approval was valid then: revoked since.
		addHistory(t, filepath.Join(dir, "history"), data)
		v = w.replay(w.journal, "--trust", trust)
		if v.code != 0 || len(v.all) != 0 || !contains(v.warnings[1], receipts.RevokedSince) {
			t.Fatalf("exit %d, problems %v, warnings %v; want run A ok with revoked_since", v.code, v.codes, v.warnings)
		}
		v = w.replay(w.journal, "--trust", trust, "--strict-revocation")
		if v.code != 1 || !contains(v.codes[1], receipts.RevokedSince) {
			t.Fatalf("--strict-revocation: exit %d, problems %v", v.code, v.codes)
		}
	})

	t.Run("approver revoked before the run, or trusted only after it", func(t *testing.T) {
		data, _ := os.ReadFile(filepath.Join(w.dir, "trust.toml"))
		for _, tc := range []struct {
			name, field, at string
			code            string
		}{
			{"revoked since", "revoked_at", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), ""},
			{"revoked before", "revoked_at", "2001-01-01T00:00:00Z", receipts.Revoked},
			{"added later", "since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339), receipts.Revoked},
		} {
			t.Run(tc.name, func(t *testing.T) {
				edited := strings.Replace(string(data), `id = "alice"`, `id = "alice"`+"\n"+tc.field+" = "+tc.at, 1)
				dir := t.TempDir()
				trust := filepath.Join(dir, "trust.toml")
				if err := os.WriteFile(trust, []byte(edited), 0o644); err != nil {
					t.Fatal(err)
				}
				addHistory(t, filepath.Join(dir, "history"), data)
				v := w.replay(w.journal, "--trust", trust)
				if tc.code == "" {
					if v.code != 0 || !contains(v.warnings[1], receipts.RevokedSince) {
						t.Fatalf("exit %d, problems %v, warnings %v; want ok with revoked_since on line 1", v.code, v.codes, v.warnings)
					}
					return
				}
				if v.code != 1 || !contains(v.codes[1], tc.code) {
					t.Fatalf("exit %d, problems %v; want %s on line 1", v.code, v.codes, tc.code)
				}
			})
		}
	})

	t.Run("policy digest zeroed", func(t *testing.T) {
		lines := w.edit(w.journal, 0, w.runner, true, func(r *receipts.Receipt) {
			r.Intent.PolicyDigest = "sha256:" + strings.Repeat("0", 64)
		})
		v := w.replay(lines)
		if v.code != 1 || !contains(v.codes[1], receipts.UnknownPolicy) {
			t.Fatalf("exit %d, problems %v; want unknown_policy on line 1", v.code, v.codes)
		}
	})

	// With the runner's and the agent's keys: config-push re-declared
	// mutating = false in the receipt, planned again, no evidence.
	t.Run("definition re-declared in the receipt", func(t *testing.T) {
		lines := w.edit(w.journal, 8, w.runner, true, func(r *receipts.Receipt) {
			op := *r.Intent.Operation
			f := false
			op.Mutating = &f
			d, err := op.DefinitionDigest()
			if err != nil {
				t.Fatal(err)
			}
			op.Digest = d
			payload, _ := base64.StdEncoding.DecodeString(r.Intent.Plan.Payload)
			var plan operations.Plan
			if err := json.Unmarshal(payload, &plan); err != nil {
				t.Fatal(err)
			}
			plan.OperationDigest, plan.Mutating = d, false
			plan.Fingerprint = operations.Fingerprint(&plan.Bound)
			env, err := approval.Sign(w.agent, approval.TypePlan, plan)
			if err != nil {
				t.Fatal(err)
			}
			r.Intent.Operation, r.Intent.Plan, r.Intent.Evidence = &op, env, nil
			r.Intent.Fingerprint, r.Intent.Path, r.Intent.Anchor, r.Intent.Relied, r.Intent.Slot = plan.Fingerprint, "none", "", nil, 0
		})
		v := w.replay(lines)
		if v.code != 1 || !contains(v.codes[9], receipts.UnknownDefinition) {
			t.Fatalf("exit %d, problems %v; want unknown_definition on line 9", v.code, v.codes)
		}
	})

	t.Run("recorded file digest changed", func(t *testing.T) {
		lines := w.edit(w.journal, 8, w.runner, true, func(r *receipts.Receipt) {
			payload, _ := base64.StdEncoding.DecodeString(r.Intent.Plan.Payload)
			var plan map[string]any
			json.Unmarshal(payload, &plan)
			files := plan["files"].([]any)
			files[0].(map[string]any)["sha256"] = "sha256:" + strings.Repeat("0", 64)
			b, _ := json.Marshal(plan)
			r.Intent.Plan.Payload = base64.StdEncoding.EncodeToString(b)
		})
		v := w.replay(lines)
		if v.code != 1 || !contains(v.codes[9], receipts.FingerprintMismatch) || v.has(receipts.ChainBroken) {
			t.Fatalf("exit %d, problems %v; want fingerprint_mismatch on line 9 only", v.code, v.codes)
		}
	})

	t.Run("receipt for a withdrawn plan", func(t *testing.T) {
		lines := w.edit(w.journal, 2, w.runner, true, func(r *receipts.Receipt) {
			payload, _ := base64.StdEncoding.DecodeString(r.Intent.Plan.Payload)
			var plan struct {
				Fingerprint string `json:"fingerprint"`
			}
			json.Unmarshal(payload, &plan)
			env, err := approval.Sign(w.agent, approval.TypeWithdraw, approval.Withdrawal{Fingerprint: plan.Fingerprint, Planner: "agent", Issued: r.Time.Add(-time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			r.Intent.Evidence = append(r.Intent.Evidence, env)
		})
		v := w.replay(lines)
		if v.code != 1 || !contains(v.codes[3], receipts.GateNotSatisfied) || v.has(receipts.ChainBroken) {
			t.Fatalf("exit %d, problems %v; want gate_not_satisfied on line 3", v.code, v.codes)
		}
	})

	t.Run("not receipts at all", func(t *testing.T) {
		v := verdict{}
		path := filepath.Join(t.TempDir(), "x")
		os.WriteFile(path, []byte("hello\nworld\n"), 0o644)
		var out, errb bytes.Buffer
		f := &cli.Factory{Env: localapi.Env{IO: &cli.IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb}, Now: time.Now,
			LookupEnv: func(string) (string, bool) { return "", false }, Getwd: func() (string, error) { return w.dir, nil }}}
		v.code = cli.Run([]string{"replay", path}, f)
		if v.code != 65 {
			t.Fatalf("exit %d, want 65: %s", v.code, errb.String())
		}
	})
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// addHistory keeps a trust policy's bytes in a history directory, named
// by their digest.
func addHistory(t *testing.T, dir string, trust []byte) {
	t.Helper()
	sum := sha256.Sum256(trust)
	if err := os.MkdirAll(filepath.Join(dir, "trust"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "trust", "sha256-"+hex.EncodeToString(sum[:])+".toml"), trust, 0o644); err != nil {
		t.Fatal(err)
	}
}
