package receipts_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/cli"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/receipts"
)

// newReviewWorld makes a journal where the agent (break-glass and
// approver) broke glass on a plan and ran it, a Gera go ran another, and
// alice reviewed the break-glass run: intent, outcome, intent, outcome,
// review (docs/adr/0028-break-glass.md).
func newReviewWorld(t *testing.T) (*world, string) {
	w := &world{t: t, dir: t.TempDir()}
	w.pw("init", "--demo", w.dir)
	edit := func(path, old, new string) {
		b, err := os.ReadFile(path)
		if err != nil || !bytes.Contains(b, []byte(old)) {
			t.Fatalf("%s: %v, or no %q", path, err, old)
		}
		if err := os.WriteFile(path, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit(filepath.Join(w.dir, "operations", "config.toml"), `paths = ["gera", "record+approvals"]`, `paths = ["gera", "record+approvals", "break-glass"]`)
	edit(filepath.Join(w.dir, "trust.toml"), `roles = ["agent"]`, `roles = ["agent", "break-glass", "approver"]`)
	if err := os.WriteFile(filepath.Join(w.dir, "app.toml"), []byte("port = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	key := func(id string) string { return filepath.Join(w.dir, "keys", id+".key") }
	plan := func(svc string) string {
		return fpRE.FindString(w.pw("plan", "config-push", "--target", "staging", "--param", "service="+svc, "--file", "config=app.toml", "--key", key("agent")))
	}
	a := plan("api")
	w.pw("break-glass", a, "--reason", "api down", "--incident", "INC-1", "--key", key("agent"))
	w.pw("run", a)
	b := plan("web")
	w.pw("gera", "go", b, "--key", key("gera"))
	w.pw("run", b)
	data, err := os.ReadFile(filepath.Join(w.dir, "state", "journal", "receipts.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	_, in, err := receipts.Decode([]byte(strings.SplitN(string(data), "\n", 2)[0]))
	if err != nil {
		t.Fatal(err)
	}
	w.pw("break-glass", "review", in.RunID, "--key", key("alice"))
	if data, err = os.ReadFile(filepath.Join(w.dir, "state", "journal", "receipts.jsonl")); err != nil {
		t.Fatal(err)
	}
	w.journal = strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(w.journal) != 5 {
		t.Fatalf("journal has %d lines, want 5", len(w.journal))
	}
	if w.runner, err = keys.Load(key("runner")); err != nil {
		t.Fatal(err)
	}
	return w, in.RunID
}

// replayAlone replays lines as a CI would, from a directory with no
// configuration (so no store): the journal is all replay has.
func (w *world) replayAlone(lines []string) (int, []receipts.Result) {
	w.t.Helper()
	ci := w.t.TempDir()
	path := filepath.Join(ci, "receipts.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		w.t.Fatal(err)
	}
	var out, errb bytes.Buffer
	f := &cli.Factory{Env: localapi.Env{
		IO:        &cli.IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb},
		Now:       time.Now,
		LookupEnv: func(string) (string, bool) { return "", false },
		Getwd:     func() (string, error) { return ci, nil },
	}}
	code := cli.Run([]string{"replay", path, "--json", "--fail-unreviewed-break-glass",
		"--trust", filepath.Join(w.dir, "trust.toml"), "--registry", filepath.Join(w.dir, "operations")}, f)
	var rep struct {
		Receipts []receipts.Result `json:"receipts"`
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		w.t.Fatalf("replay output is not JSON: %v\n%s\n%s", err, out.String(), errb.String())
	}
	return code, rep.Receipts
}

// TestReviewReceipt: a review receipt makes the break-glass run reviewed
// for a replay of the journal alone, only when the reviewer's envelope is
// a valid review of a break-glass run earlier in the journal, the one the
// receipt names; each tampered one fails replay with review_invalid (or
// the signature's code) and leaves the run unreviewed.
func TestReviewReceipt(t *testing.T) {
	w, run := newReviewWorld(t)
	policy, err := approval.LoadPolicy(filepath.Join(w.dir, "trust.toml"))
	if err != nil {
		t.Fatal(err)
	}
	key := func(id string) *keys.Private {
		k, err := keys.Load(filepath.Join(w.dir, "keys", id+".key"))
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	_, orig, err := receipts.Decode([]byte(w.journal[4]))
	if err != nil || orig.Kind != receipts.KindReview || orig.RunID != run {
		t.Fatalf("line 5 is not the review of %s: %v %+v", run, err, orig)
	}
	_, other, _ := receipts.Decode([]byte(w.journal[2]))
	var rev approval.BreakGlassReview
	raw, _ := base64.StdEncoding.DecodeString(orig.Review.Review.Payload)
	if err := json.Unmarshal(raw, &rev); err != nil {
		t.Fatal(err)
	}
	// resign replaces the review receipt: fn edits the review (signed by
	// signer) and the receipt; the receipt is signed by rk.
	resign := func(signer, rk *keys.Private, fn func(*approval.BreakGlassReview, *receipts.Receipt)) []string {
		r2, rc := rev, *orig
		fn(&r2, &rc)
		env, err := approval.Sign(signer, approval.TypeBreakGlassReview, r2)
		if err != nil {
			t.Fatal(err)
		}
		rc.Review = &receipts.Review{Review: env}
		return append(append([]string(nil), w.journal[:4]...), w.sign(&rc, rk))
	}
	same := func(*approval.BreakGlassReview, *receipts.Receipt) {}
	for _, tc := range []struct {
		name  string
		lines []string
		code  string // on the review receipt; "" for none
	}{
		{"untouched", w.journal, ""},
		{"re-signed as is", resign(key("alice"), w.runner, same), ""},
		{"no review receipt", w.journal[:4], ""},
		{"signed by the breaker", resign(key("agent"), w.runner, func(r *approval.BreakGlassReview, _ *receipts.Receipt) { r.Reviewer = "agent" }), receipts.ReviewInvalid},
		{"signed by a non-approver", resign(key("gera"), w.runner, func(r *approval.BreakGlassReview, _ *receipts.Receipt) { r.Reviewer = "gera" }), receipts.ReviewInvalid},
		{"reviewer not the signer", resign(key("alice"), w.runner, func(r *approval.BreakGlassReview, _ *receipts.Receipt) { r.Reviewer = "bob" }), receipts.ReviewInvalid},
		{"receipt names another run", resign(key("alice"), w.runner, func(_ *approval.BreakGlassReview, rc *receipts.Receipt) { rc.RunID = other.RunID }), receipts.ReviewInvalid},
		{"review of a record not in the journal", resign(key("alice"), w.runner, func(r *approval.BreakGlassReview, _ *receipts.Receipt) { r.Record = strings.Repeat("ab", 32) }), receipts.ReviewInvalid},
		{"review of another plan", resign(key("alice"), w.runner, func(r *approval.BreakGlassReview, _ *receipts.Receipt) { r.Fingerprint = other.Intent.Fingerprint }), receipts.ReviewInvalid},
		{"issued before the record", resign(key("alice"), w.runner, func(r *approval.BreakGlassReview, _ *receipts.Receipt) { r.Issued = r.Issued.Add(-time.Hour) }), receipts.ReviewInvalid},
		{"issued after the receipt", resign(key("alice"), w.runner, func(r *approval.BreakGlassReview, _ *receipts.Receipt) { r.Issued = r.Issued.Add(time.Hour) }), receipts.ReviewInvalid},
		{"receipt not signed by the runner", resign(key("alice"), key("alice"), same), receipts.NotRunner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, res := w.replayAlone(tc.lines)
			var reviewed *bool
			var got []string
			for _, r := range res {
				if r.BreakGlass != nil {
					reviewed = &r.BreakGlass.Reviewed
				}
				if r.Kind == receipts.KindReview {
					for _, p := range r.Problems {
						got = append(got, p.Code)
					}
				}
			}
			if reviewed == nil {
				t.Fatalf("no break-glass run reported: %+v", res)
			}
			// receipts list's pass (BreakGlassRuns, which verifies
			// only what bears on break-glass) says the same.
			runs, err := (&receipts.Replayer{Policy: policy}).BreakGlassRuns(strings.NewReader(strings.Join(tc.lines, "\n") + "\n"))
			if err != nil || len(runs) != 1 || runs[1] == nil || runs[1].Reviewed != *reviewed {
				t.Fatalf("BreakGlassRuns gives %v, %v; want line 1 reviewed %v, as replay says", runs, err, *reviewed)
			}
			valid := tc.code == "" && len(tc.lines) == 5
			if *reviewed != valid || (code == 0) != valid {
				t.Fatalf("reviewed %v, exit %d; want reviewed %v (problems on the review: %v)", *reviewed, code, valid, got)
			}
			if tc.code != "" && !contains(got, tc.code) {
				t.Fatalf("the review receipt has problems %v, want %s", got, tc.code)
			}
			if tc.code == "" && len(got) > 0 {
				t.Fatalf("the review receipt has problems %v, want none", got)
			}
		})
	}
}

// TestReviewReceiptStrict: a review receipt is decoded strictly, like
// every receipt (pkg/strictjson): an unknown or duplicated key fails it.
func TestReviewReceiptStrict(t *testing.T) {
	w, _ := newReviewWorld(t)
	payload := payloadOf(t, w.journal[4])
	for _, tc := range []struct{ name, old, new string }{
		{"unknown key", `"review":{`, `"review":{"extra":1,`},
		{"duplicate key", `"review":{`, `"review":{"review":null,`},
		{"wrong case", `"review":{"review"`, `"Review":{"review"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Contains(payload, []byte(tc.old)) {
				t.Fatalf("payload has no %s: %s", tc.old, payload)
			}
			lines := append(append([]string(nil), w.journal[:4]...), w.signBytes(bytes.Replace(payload, []byte(tc.old), []byte(tc.new), 1)))
			code, res := w.replayAlone(lines)
			if code == 0 {
				t.Fatal("replay passed")
			}
			for _, r := range res {
				if r.Line == 5 && len(r.Problems) > 0 && r.Problems[0].Code == receipts.Malformed {
					return
				}
			}
			t.Fatalf("line 5 is not malformed: %+v", res)
		})
	}
}
