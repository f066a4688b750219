package bridge_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/bridge/bridgetest"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
)

func TestSecretNeverPrints(t *testing.T) {
	s := bridgetest.Secret("xoxb-very-secret")
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s %q %x", s, s, s, s, s, s), fmt.Sprintf("%v", struct{ S bridge.Secret }{s})} {
		if strings.Contains(out, "very-secret") || strings.Contains(out, "766572792d736563726574") {
			t.Errorf("printed %q", out)
		}
	}
	if got := bridge.Redact("POST failed: token xoxb-very-secret rejected", s); strings.Contains(got, "very-secret") {
		t.Errorf("Redact: %q", got)
	}
}

func TestLoadSecret(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	_, err := bridge.LoadSecret(lookup, bridge.EnvSlackBotToken, "bridge.slack_bot_token_file", "")
	var missing *bridge.MissingSecretError
	if !errors.As(err, &missing) || !strings.Contains(err.Error(), "PROD_WRITE_SLACK_BOT_TOKEN") {
		t.Fatalf("no secret: %v", err)
	}

	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("from-file-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := bridge.LoadSecret(lookup, bridge.EnvSlackBotToken, "k", file)
	if err != nil || s.Reveal() != "from-file-value" {
		t.Fatalf("from file: %q %v", s.Reveal(), err)
	}
	env[bridge.EnvSlackBotToken] = " from-env-value "
	if s, err := bridge.LoadSecret(lookup, bridge.EnvSlackBotToken, "k", file); err != nil || s.Reveal() != "from-env-value" {
		t.Fatalf("env wins: %q %v", s.Reveal(), err)
	}
	delete(env, bridge.EnvSlackBotToken)

	if err := os.Chmod(file, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err = bridge.LoadSecret(lookup, bridge.EnvSlackBotToken, "k", file)
	var insecure *keys.InsecureError
	if !errors.As(err, &insecure) || strings.Contains(err.Error(), "from-file-value") {
		t.Fatalf("group-readable file: %v", err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := bridge.LoadSecret(lookup, bridge.EnvSlackBotToken, "k", empty); err == nil {
		t.Fatal("empty file accepted")
	}
}

func TestLedger(t *testing.T) {
	l := &bridge.Ledger{Dir: filepath.Join(t.TempDir(), "posts")}
	fp1, fp2 := "sha256:"+strings.Repeat("a", 64), "sha256:"+strings.Repeat("b", 64)
	now := time.Now().UTC()
	posts := []bridge.Post{
		{Kind: "slack", Fingerprint: fp1, Record: strings.Repeat("1", 64), Posted: now, SlackChannel: "C1", SlackTS: "1.2"},
		{Kind: "github", Fingerprint: fp1, Record: strings.Repeat("1", 64), Posted: now.Add(time.Second), GitHubRepo: "o/r", GitHubIssue: 3},
		{Kind: "github", Fingerprint: fp2, Record: strings.Repeat("2", 64), Posted: now, GitHubRepo: "o/r", GitHubIssue: 4},
	}
	for _, p := range append(posts, posts[0]) { // adding one twice keeps one
		if err := l.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	got, err := l.Posts(fp1)
	if err != nil || len(got) != 2 || got[0].Kind != "slack" || got[1].GitHubIssue != 3 {
		t.Fatalf("Posts: %+v %v", got, err)
	}
	all, err := l.All()
	if err != nil || len(all) != 3 {
		t.Fatalf("All: %+v %v", all, err)
	}
	if _, err := l.Posts("sha256:../../etc"); err == nil {
		t.Fatal("a bad fingerprint reached the file system")
	}
	if err := l.Add(bridge.Post{Kind: "slack", Fingerprint: "../x"}); err == nil {
		t.Fatal("a bad fingerprint reached the file system")
	}
	if ps, err := (&bridge.Ledger{Dir: filepath.Join(t.TempDir(), "none")}).All(); err != nil || ps != nil {
		t.Fatalf("empty ledger: %v %v", ps, err)
	}
}

func TestAttestorNeedsTheBridgeRole(t *testing.T) {
	w := bridgetest.New(t, 1)
	if _, err := bridge.NewAttestor(w.Source(), bridgetest.Key("alice"), time.Now); !refusal.Is(err, refusal.RoleMissing) {
		t.Errorf("alice's key: %v", err)
	}
	k, _ := keys.Generate()
	if _, err := bridge.NewAttestor(w.Source(), k, time.Now); !refusal.Is(err, refusal.PrincipalUnknown) {
		t.Errorf("unknown key: %v", err)
	}
}

// The attestor refuses before signing what the gate would refuse after,
// and what it signs the gate accepts.
func TestAttestorAgreesWithTheGate(t *testing.T) {
	w := bridgetest.New(t, 1)
	a := w.Attestor(t)
	now := time.Now().Add(-time.Second)
	ghAs := func(login string, user, id int64) approval.Channel {
		return approval.Channel{Kind: "github", GitHubLogin: login, GitHubUserID: user, GitHubComment: id, GitHubRepo: "o/r"}
	}
	gh := func(login string, id int64) approval.Channel { return ghAs(login, bridgetest.GitHubUserID(login), id) }
	for _, tc := range []struct {
		req  bridge.Request
		code refusal.Code
	}{
		{bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: gh("nobody", 1), Issued: now}, refusal.PrincipalUnknown},
		{bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: gh("eve", 2), Issued: now}, refusal.RoleMissing},
		{bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: gh("agent-gh", 3), Issued: now}, refusal.SelfApproval},
		{bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: gh("smith-gh", 4), Issued: now}, refusal.SelfApproval},
		{bridge.Request{Fingerprint: w.FP, Record: strings.Repeat("0", 64), Verdict: "approve", Channel: gh("alice", 5), Issued: now}, refusal.NoApproval},
		{bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: gh("alice", 6), Issued: now.Add(time.Hour)}, refusal.EvidenceExpired},
		{bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: gh("alice", 7), Issued: now.Add(-2 * time.Hour)}, refusal.EvidenceExpired},
		{bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "maybe", Channel: gh("alice", 8), Issued: now}, refusal.SignatureInvalid},
		{bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: approval.Channel{Kind: "email"}, Issued: now}, refusal.PrincipalUnknown},
		// A GitHub account is its numeric id: a principal's login with
		// another id, a principal's id with another login, no id.
		{bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: ghAs("alice", 4242, 12), Issued: now}, refusal.PrincipalUnknown},
		{bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: ghAs("alice2", bridgetest.GitHubUserID("alice"), 13), Issued: now}, refusal.PrincipalUnknown},
		{bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: ghAs("bob", bridgetest.GitHubUserID("alice"), 14), Issued: now}, refusal.PrincipalUnknown},
		{bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: ghAs("alice", 0, 15), Issued: now}, refusal.PrincipalUnknown},
	} {
		if _, err := a.Answer(tc.req); !refusal.Is(err, tc.code) {
			t.Errorf("%+v: %v, want %s", tc.req.Channel, err, tc.code)
		}
	}
	if n := len(w.Answers(t)); n != 0 {
		t.Fatalf("%d answers stored by refused requests", n)
	}
	res, err := a.Answer(bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: gh("Alice", 9), Issued: now})
	if err != nil || res.Approver != "alice" || res.Duplicate || res.View.Gate != "open" {
		t.Fatalf("alice: %+v %v", res, err)
	}
	if err := w.Gate(t); err != nil {
		t.Fatalf("gate: %v", err)
	}
	// Alice approving the same record again, from another comment, adds
	// nothing.
	res2, err := a.Answer(bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: gh("alice", 10), Issued: now})
	if err != nil || !res2.Duplicate || res2.ID != res.ID {
		t.Fatalf("again: %+v %v", res2, err)
	}
	// A review and a comment with the same number are not the same
	// evidence: their ids are drawn from different sequences.
	review := gh("bob", 0)
	review.GitHubReview = 9
	res3, err := a.Answer(bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "deny", Channel: review, Issued: now})
	if err != nil || res3.Duplicate || res3.Approver != "bob" {
		t.Fatalf("bob's review 9 after alice's comment 9: %+v %v", res3, err)
	}
	w.Withdraw(t)
	if _, err := a.Answer(bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "deny", Channel: gh("bob", 11), Issued: now}); !refusal.Is(err, refusal.Withdrawn) {
		t.Fatalf("after withdraw: %v", err)
	}
}

// An approver cannot pre-empt a click by storing, under their own key, an
// answer that carries the click's channel evidence: only a bridge-signed
// record stands for a click.
func TestLookAlikeAnswerDoesNotSwallowAClick(t *testing.T) {
	w := bridgetest.New(t, 1)
	now := time.Now().Add(-time.Second).UTC()
	ch := approval.Channel{Kind: "slack", SlackUser: "UALICE", SlackTeam: "T1", SlackActionTS: "1700000000.000001"}
	fake := approval.Answer{Fingerprint: w.FP, Record: w.Record, Answer: "deny", Approver: "bob", Channel: &ch, Issued: now, Expires: now.Add(time.Hour)}
	w.Put(t, bridgetest.Sign(t, "bob", approval.TypeTrinity, fake))
	res, err := w.Attestor(t).Answer(bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: ch, Issued: now})
	if err != nil || res.Duplicate {
		t.Fatalf("%+v %v", res, err)
	}
}

// The decision's description shows the precondition the approval is given
// for (docs/adr/0025-preconditions.md): the check and the digest of what it
// printed, and, only when the plan kept it (show_output), the output
// itself, quoted and cut.
func TestPlanLinesShowThePrecondition(t *testing.T) {
	p := &operations.Plan{}
	p.Operation, p.Target, p.Planner = "migrate", "production", "agent"
	if got := strings.Join(bridge.PlanLines(p), "\n"); strings.Contains(got, "Precondition") {
		t.Fatalf("a plan without a precondition shows one:\n%s", got)
	}
	p.Precondition = &operations.PreconditionBound{Check: "current-version", OutputSHA256: "sha256:" + strings.Repeat("ab", 32)}
	got := strings.Join(bridge.PlanLines(p), "\n")
	if !strings.Contains(got, "Precondition: current-version printed sha256:abab") || strings.Contains(got, "Check output") {
		t.Fatalf("precondition without output:\n%s", got)
	}
	out := "v41\n\x1b[2Jcleared" + strings.Repeat("x", 1000)
	p.PreconditionOutput = &out
	got = strings.Join(bridge.PlanLines(p), "\n")
	if !strings.Contains(got, `Check output: "v41\n\x1b[2Jcleared`) || strings.Contains(got, "\x1b") || strings.Count(got, "x") > 520 {
		t.Fatalf("precondition output not quoted and cut:\n%s", got)
	}
}

// A click or comment already recorded and read again (a restarted
// bridge, a redelivery) is the answer already stored, however old it is
// by now and whatever happened since; a click never recorded that is too
// old is refused, even when its approver's same verdict is on record.
func TestAnswerReadAgainIsAlreadyRecorded(t *testing.T) {
	review := approval.Channel{Kind: "github", GitHubLogin: "alice", GitHubUserID: bridgetest.GitHubUserID("alice"), GitHubReview: 7, GitHubRepo: "o/r"}
	comment := review
	comment.GitHubReview, comment.GitHubComment = 0, 7
	for _, tc := range []struct {
		name      string
		ch, other approval.Channel
	}{
		{"slack", approval.Channel{Kind: "slack", SlackUser: "UALICE", SlackTeam: "T1", SlackActionTS: "1700000000.000001"},
			approval.Channel{Kind: "slack", SlackUser: "UALICE", SlackTeam: "T1", SlackActionTS: "1700000000.000002"}},
		{"github comment", comment, review},
		{"github review", review, comment},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := bridgetest.New(t, 1)
			w.Record = w.FileFor(t, "smith", 3*time.Hour)
			now := time.Now()
			w.Now = func() time.Time { return now }
			a := w.Attestor(t)
			issued := now.Add(-time.Second).UTC()
			req := bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: "approve", Channel: tc.ch, Issued: issued}
			first, err := a.Answer(req)
			if err != nil || first.Duplicate {
				t.Fatalf("first: %+v %v", first, err)
			}
			// Another click of alice's, older than an answer lives while
			// her approval is still valid, is refused, not taken for it.
			old := req
			old.Channel, old.Issued = tc.other, issued.Add(-2*time.Hour)
			if _, err := a.Answer(old); !refusal.Is(err, refusal.EvidenceExpired) {
				t.Fatalf("a new click older than an answer lives: %v", err)
			}
			now = now.Add(approval.DefaultAnswerTTL + time.Minute)
			again, err := w.Attestor(t).Answer(req)
			if err != nil || !again.Duplicate || again.ID != first.ID || again.Approver != "alice" {
				t.Fatalf("read again past its lifetime: %+v %v", again, err)
			}
			old.Issued = issued
			if _, err := a.Answer(old); !refusal.Is(err, refusal.EvidenceExpired) {
				t.Fatalf("a new click past its lifetime: %v", err)
			}
			w.Withdraw(t)
			if again, err := a.Answer(req); err != nil || !again.Duplicate || again.ID != first.ID || !again.View.Withdrawn {
				t.Fatalf("read again after a withdrawal: %+v %v", again, err)
			}
			if n := len(w.Answers(t)); n != 1 {
				t.Fatalf("%d answers", n)
			}
		})
	}
}

// Admit stores only the answer the checks would have the bridge sign:
// whoever holds a bridge key (a bridge that is a client of the runner
// service, or anyone who took its key) still cannot store an answer the
// gate would refuse, one for an approver the channel evidence does not
// name, or one that lives longer than an answer does. Each case fails
// with its check removed (testdata/mutants/bridge.toml).
func TestAdmitStoresOnlyWhatTheChecksWouldSign(t *testing.T) {
	w := bridgetest.New(t, 1)
	now := w.Now().UTC()
	issued := now.Add(-time.Second)
	slack := func(user, ts string) approval.Channel {
		return approval.Channel{Kind: "slack", SlackUser: user, SlackTeam: "T1", SlackActionTS: ts}
	}
	req := func(user, ts, verdict string) bridge.Request {
		return bridge.Request{Fingerprint: w.FP, Record: w.Record, Verdict: verdict, Channel: slack(user, ts), Issued: issued}
	}
	answer := func(r bridge.Request, approver string) approval.Answer {
		ch := r.Channel
		return approval.Answer{Fingerprint: r.Fingerprint, Record: r.Record, Answer: r.Verdict, Reason: r.Reason,
			Approver: approver, Channel: &ch, Issued: r.Issued, Expires: r.Issued.Add(approval.DefaultAnswerTTL)}
	}
	edit := func(a approval.Answer, f func(*approval.Answer)) approval.Answer { f(&a); return a }
	for _, tc := range []struct {
		name   string
		req    bridge.Request
		signer string
		signed approval.Answer
		code   refusal.Code
	}{
		{name: "signed by an approver, not a bridge", req: req("UALICE", "1.1", "approve"), signer: "alice",
			signed: answer(req("UALICE", "1.1", "approve"), "alice"), code: refusal.RoleMissing},
		{name: "another approver than the evidence names", req: req("UALICE", "1.2", "approve"), signer: "bridge",
			signed: answer(req("UALICE", "1.2", "approve"), "bob"), code: refusal.SignatureInvalid},
		{name: "living longer than an answer does", req: req("UALICE", "1.3", "approve"), signer: "bridge",
			signed: edit(answer(req("UALICE", "1.3", "approve"), "alice"), func(a *approval.Answer) { a.Expires = a.Expires.Add(24 * time.Hour) }),
			code:   refusal.SignatureInvalid},
		{name: "another verdict than the request's", req: req("UALICE", "1.4", "deny"), signer: "bridge",
			signed: answer(req("UALICE", "1.4", "approve"), "alice"), code: refusal.SignatureInvalid},
		{name: "another click than the request's", req: req("UALICE", "1.5", "approve"), signer: "bridge",
			signed: answer(req("UALICE", "9.9", "approve"), "alice"), code: refusal.SignatureInvalid},
		{name: "the filer approving their own record", req: req("USMITH", "1.6", "approve"), signer: "bridge",
			signed: answer(req("USMITH", "1.6", "approve"), "smith"), code: refusal.SelfApproval},
		{name: "a Slack user of no principal", req: req("UNOBODY", "1.7", "approve"), signer: "bridge",
			signed: answer(req("UNOBODY", "1.7", "approve"), "alice"), code: refusal.PrincipalUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := bridgetest.Sign(t, tc.signer, approval.TypeTrinity, tc.signed)
			if _, err := w.Source().Admit(tc.req, env, now); !refusal.Is(err, tc.code) {
				t.Fatalf("%v, want %s", err, tc.code)
			}
			if n := len(w.Answers(t)); n != 0 {
				t.Fatalf("%d answers stored", n)
			}
		})
	}
	// A plan's envelope is no answer, whoever signed it.
	if _, err := w.Source().Admit(req("UALICE", "1.8", "approve"), bridgetest.Sign(t, "bridge", approval.TypePlan, map[string]string{"fingerprint": w.FP}), now); !refusal.Is(err, refusal.SignatureInvalid) {
		t.Fatalf("a plan envelope: %v", err)
	}
	// The answer the checks make is stored, counts at the gate, and read
	// again is the same answer.
	ok := req("UALICE", "2.1", "approve")
	env := bridgetest.Sign(t, "bridge", approval.TypeTrinity, answer(ok, "alice"))
	res, err := w.Source().Admit(ok, env, now)
	if err != nil || res.Approver != "alice" || res.Duplicate {
		t.Fatalf("the answer the checks make: %+v %v", res, err)
	}
	if err := w.Gate(t); err != nil {
		t.Fatalf("gate: %v", err)
	}
	again, err := w.Source().Admit(ok, env, now)
	if err != nil || !again.Duplicate || again.ID != res.ID {
		t.Fatalf("again: %+v %v", again, err)
	}
}

// A passkey decision shows on Slack and GitHub as what it is, never as an
// answer given on the CLI; one that does not verify (here: the policy has
// no [passkey] table) shows that it does not count.
func TestPasskeyDecisionShownAsPasskey(t *testing.T) {
	w := bridgetest.New(t, 1)
	now := w.Now().UTC()
	d := approval.PasskeyDecision{Fingerprint: w.FP, Record: w.Record, Decision: approval.Approve, Approver: "alice",
		Nonce: []byte("n"), Issued: now.Add(-time.Second), Expires: now.Add(time.Hour)}
	w.Put(t, bridgetest.Sign(t, "alice", approval.TypePasskey, d))
	v, err := bridge.Describe(w.Source(), w.FP, w.Record, now)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Join(bridge.StatusLines(v), "\n")
	if !strings.Contains(lines, "approve by alice (passkey) at ") || !strings.Contains(lines, "does not count") || strings.Contains(lines, "(CLI)") {
		t.Fatalf("status lines:\n%s", lines)
	}
}
