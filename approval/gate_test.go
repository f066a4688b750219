package approval_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
)

const (
	gera  = operations.PathGera
	smith = operations.PathSmithTrinity
)

// world is what one gate case builds its evidence from.
type world struct {
	t        *testing.T
	fp, fp2  string // the plan's fingerprint and another plan's
	evidence []*approval.Envelope
	used     map[string]int
}

func (w *world) add(signer, payloadType string, v any) string {
	env := mustSign(w.t, signer, payloadType, v)
	w.evidence = append(w.evidence, env)
	return mustID(w.t, env)
}

func (w *world) addEnv(env *approval.Envelope) { w.evidence = append(w.evidence, env) }

// ago is the time d before the gate's clock.
func ago(d time.Duration) time.Time { return testNow.Add(-d) }

// deny adds a Trinity deny of the plan by by, of no record, issued and
// expiring at the times given.
func (w *world) deny(by string, issued, expires time.Time) {
	d := answer(w.fp, "", approval.Deny, by)
	d.Issued, d.Expires = issued, expires
	w.add(by, approval.TypeTrinity, d)
}

// noGo adds a Gera no-go of the plan, issued and expiring at the times
// given.
func (w *world) noGo(issued, expires time.Time) {
	ng := geraNoGo(w.fp, "gera")
	ng.Issued, ng.Expires = issued, expires
	w.add("gera", approval.TypeGera, ng)
}

// goIssued adds a single-use Gera go of the plan issued at issued,
// expiring a day after the gate's clock.
func (w *world) goIssued(issued time.Time) {
	g := geraGo(w.fp, "gera", 1)
	g.Issued, g.Expires = issued, testNow.Add(24*time.Hour)
	w.add("gera", approval.TypeGera, g)
}

// TestEvaluate checks each rule of docs/DESIGN.md §3 that Evaluate owns, one case a
// defence: each case fails if the defence it names is removed.
func TestEvaluate(t *testing.T) {
	policy := mustPolicy(t, demoCast)
	type tc struct {
		name      string
		approvers int
		paths     []string
		planner   string
		build     func(w *world)
		want      refusal.Code // "" when the plan may run
		wantPath  string
	}
	both := []string{gera, smith}
	cases := []tc{
		{name: "nothing", build: func(w *world) {}, want: refusal.NoApproval},
		{name: "smith and trinity", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			w.add("alice", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "alice"))
		}, wantPath: smith},
		{name: "gera go", build: func(w *world) {
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 1))
		}, wantPath: gera},
		{name: "record without approval", build: func(w *world) {
			w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
		}, want: refusal.NoApproval},
		{name: "approval without record", build: func(w *world) {
			w.add("alice", approval.TypeTrinity, answer(w.fp, "0000000000000000000000000000000000000000000000000000000000000000", approval.Approve, "alice"))
		}, want: refusal.NoApproval},

		// Rule 3: vetoes win over any approval.
		{name: "gera no-go wins over smith+trinity and gera go", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			w.add("alice", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "alice"))
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 5))
			w.add("gera", approval.TypeGera, geraNoGo(w.fp, "gera"))
		}, want: refusal.Vetoed},
		{name: "trinity deny wins over approvals and gera go", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			w.add("alice", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "alice"))
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 5))
			w.add("bob", approval.TypeTrinity, answer(w.fp, r, approval.Deny, "bob"))
		}, want: refusal.Vetoed},
		{name: "trinity deny of no record still vetoes", build: func(w *world) {
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 1))
			w.add("bob", approval.TypeTrinity, answer(w.fp, "", approval.Deny, "bob"))
		}, want: refusal.Vetoed},
		{name: "veto for another fingerprint does not veto", build: func(w *world) {
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 1))
			w.add("gera", approval.TypeGera, geraNoGo(w.fp2, "gera"))
			w.add("bob", approval.TypeTrinity, answer(w.fp2, "", approval.Deny, "bob"))
		}, wantPath: gera},
		{name: "a go issued after a no-go expired counts", build: func(w *world) {
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 1))
			ng := geraNoGo(w.fp, "gera")
			ng.Issued, ng.Expires = testNow.Add(-2*time.Hour), testNow.Add(-time.Hour)
			w.add("gera", approval.TypeGera, ng)
		}, wantPath: gera},
		// A veto never lapses into a yes (docs/DESIGN.md §3 rule 3): a go (24h) at
		// 10:00, a deny at 10:01 expiring at 11:01; at 11:01:30 the go
		// still does not count.
		{name: "a go issued before a deny expired never counts", build: func(w *world) {
			g := geraGo(w.fp, "gera", 1)
			g.Issued, g.Expires = testNow.Add(-61*time.Minute-30*time.Second), testNow.Add(23*time.Hour)
			w.add("gera", approval.TypeGera, g)
			d := answer(w.fp, "", approval.Deny, "bob")
			d.Issued, d.Expires = testNow.Add(-60*time.Minute-30*time.Second), testNow.Add(-30*time.Second)
			w.add("bob", approval.TypeTrinity, d)
		}, want: refusal.Vetoed},
		{name: "a record and approval issued before a no-go expired never count", build: func(w *world) {
			rec := smithRecord(w.fp, "smith")
			rec.Issued = testNow.Add(-2 * time.Hour)
			r := w.add("smith", approval.TypeSmith, rec)
			a := answer(w.fp, r, approval.Approve, "alice")
			a.Issued = testNow.Add(-2 * time.Hour)
			w.add("alice", approval.TypeTrinity, a)
			ng := geraNoGo(w.fp, "gera")
			ng.Issued, ng.Expires = testNow.Add(-90*time.Minute), testNow.Add(-time.Minute)
			w.add("gera", approval.TypeGera, ng)
		}, want: refusal.Vetoed},
		{name: "a record and approval made after the veto expired count", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			w.add("alice", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "alice"))
			d := answer(w.fp, "", approval.Deny, "bob")
			d.Issued, d.Expires = testNow.Add(-2*time.Hour), testNow.Add(-2*time.Minute)
			w.add("bob", approval.TypeTrinity, d)
		}, wantPath: smith},
		// Issued while the veto stood, between its issue and its expiry:
		// no more a yes once it lapses than one issued before it.
		{name: "a go issued while a deny stood never counts after it lapses", build: func(w *world) {
			w.deny("bob", ago(2*time.Hour), ago(time.Hour))
			w.goIssued(ago(90 * time.Minute))
		}, want: refusal.Vetoed},
		{name: "a record and approval made while a no-go stood never count after it lapses", build: func(w *world) {
			w.noGo(ago(2*time.Hour), ago(time.Hour))
			rec := smithRecord(w.fp, "smith")
			rec.Issued = ago(90 * time.Minute)
			r := w.add("smith", approval.TypeSmith, rec)
			a := answer(w.fp, r, approval.Approve, "alice")
			a.Issued = ago(80 * time.Minute)
			w.add("alice", approval.TypeTrinity, a)
		}, want: refusal.Vetoed},
		// Of two lapsed vetoes the one that stood longest decides, whichever
		// was issued first: a go issued after one expired but while the
		// other stood never counts.
		{name: "a go issued between two vetoes' expiries never counts (the first issued expired first)", build: func(w *world) {
			w.deny("bob", ago(3*time.Hour), ago(2*time.Hour))
			w.noGo(ago(150*time.Minute), ago(time.Hour))
			w.goIssued(ago(90 * time.Minute))
		}, want: refusal.Vetoed},
		{name: "a go issued between two vetoes' expiries never counts (the last issued expired first)", build: func(w *world) {
			w.deny("bob", ago(3*time.Hour), ago(time.Hour))
			w.noGo(ago(150*time.Minute), ago(2*time.Hour))
			w.goIssued(ago(90 * time.Minute))
		}, want: refusal.Vetoed},
		// Only a veto that counted can lapse: a deny by a principal without
		// the approver role never stood, so it voids nothing.
		{name: "a lapsed deny by someone without the approver role voids nothing", build: func(w *world) {
			w.deny("gera", ago(2*time.Hour), ago(time.Hour))
			w.goIssued(ago(90 * time.Minute))
		}, wantPath: gera},
		// Evidence that cannot be verified may be a veto: refuse, never
		// drop it.
		{name: "forged veto refuses as unreadable", build: func(w *world) {
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 1))
			w.addEnv(flipSignature(w.t, mustSign(w.t, "bob", approval.TypeTrinity, answer(w.fp, "", approval.Deny, "bob")), 9))
		}, want: refusal.EvidenceUnreadable},
		// Anyone holding the role may veto, the planner and the filer
		// included: a veto only reduces what may run.
		{name: "the filer may deny its own record", build: func(w *world) {
			r := w.add("olive", approval.TypeSmith, smithRecord(w.fp, "olive"))
			w.add("alice", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "alice"))
			w.add("olive", approval.TypeTrinity, answer(w.fp, r, approval.Deny, "olive"))
		}, want: refusal.Vetoed},
		{name: "the planner may deny its own plan", planner: "pat", build: func(w *world) {
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 1))
			w.add("pat", approval.TypeTrinity, answer(w.fp, "", approval.Deny, "pat"))
		}, want: refusal.Vetoed},
		{name: "the planner's gera no-go vetoes", planner: "pat", build: func(w *world) {
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 1))
			w.add("pat", approval.TypeGera, geraNoGo(w.fp, "pat"))
		}, want: refusal.Vetoed},

		// Rule 4: distinct approvers, per record, per path.
		{name: "one approver twice is one approval", approvers: 2, build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			a1 := answer(w.fp, r, approval.Approve, "alice")
			a2 := a1
			a2.Issued = a1.Issued.Add(time.Second)
			w.add("alice", approval.TypeTrinity, a1)
			w.add("alice", approval.TypeTrinity, a2)
		}, want: refusal.NoApproval},
		{name: "one approver through the CLI and a bridge is one approval", approvers: 2, build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			w.add("alice", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "alice"))
			a := answer(w.fp, r, approval.Approve, "alice")
			a.Channel = &approval.Channel{Kind: "slack", SlackUser: "UALICE", SlackTeam: "T1", SlackActionTS: "1.2"}
			w.add("bridge", approval.TypeTrinity, a)
		}, want: refusal.NoApproval},
		{name: "two distinct approvers", approvers: 2, build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			w.add("alice", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "alice"))
			w.add("bob", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "bob"))
		}, wantPath: smith},
		{name: "approvals of two records do not add up", approvers: 2, build: func(w *world) {
			r1 := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			rec2 := smithRecord(w.fp, "smith")
			rec2.Summary = "another record"
			r2 := w.add("smith", approval.TypeSmith, rec2)
			w.add("alice", approval.TypeTrinity, answer(w.fp, r1, approval.Approve, "alice"))
			w.add("bob", approval.TypeTrinity, answer(w.fp, r2, approval.Approve, "bob"))
		}, want: refusal.NoApproval},
		{name: "approval of a record of another plan", build: func(w *world) {
			w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			other := w.add("smith", approval.TypeSmith, smithRecord(w.fp2, "smith"))
			w.add("alice", approval.TypeTrinity, answer(w.fp, other, approval.Approve, "alice"))
		}, want: refusal.NoApproval},
		{name: "approval bound to another fingerprint", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			w.add("alice", approval.TypeTrinity, answer(w.fp2, r, approval.Approve, "alice"))
		}, want: refusal.NoApproval},
		{name: "record and approval of another fingerprint", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp2, "smith"))
			w.add("alice", approval.TypeTrinity, answer(w.fp2, r, approval.Approve, "alice"))
			w.add("gera", approval.TypeGera, geraGo(w.fp2, "gera", 1))
		}, want: refusal.NoApproval},
		{name: "only gera accepted", paths: []string{gera}, build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			w.add("alice", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "alice"))
		}, want: refusal.NoApproval},
		{name: "only smith+trinity accepted", paths: []string{smith}, build: func(w *world) {
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 1))
		}, want: refusal.NoApproval},

		// Rule 5: signature, role, binding, expiry, consumption.
		{name: "flipped signature", build: func(w *world) {
			w.addEnv(flipSignature(w.t, mustSign(w.t, "gera", approval.TypeGera, geraGo(w.fp, "gera", 1)), 77))
		}, want: refusal.EvidenceUnreadable},
		{name: "flipped payload", build: func(w *world) {
			w.addEnv(flipPayload(w.t, mustSign(w.t, "gera", approval.TypeGera, geraGo(w.fp, "gera", 1)), 30))
		}, want: refusal.EvidenceUnreadable},
		{name: "two signatures", build: func(w *world) {
			env := mustSign(w.t, "gera", approval.TypeGera, geraGo(w.fp, "gera", 1))
			env.Signatures = append(env.Signatures, env.Signatures[0])
			w.addEnv(env)
		}, want: refusal.EvidenceUnreadable},
		{name: "record names someone else than its signer", build: func(w *world) {
			w.add("pat", approval.TypeGera, geraGo(w.fp, "gera", 1))
		}, want: refusal.SignatureInvalid},
		{name: "unknown key", build: func(w *world) {
			w.add("mallory", approval.TypeGera, geraGo(w.fp, "mallory", 1))
		}, want: refusal.EvidenceUnreadable},
		{name: "approver signs a gera go", build: func(w *world) {
			w.add("alice", approval.TypeGera, geraGo(w.fp, "alice", 1))
		}, want: refusal.RoleMissing},
		{name: "approver files a record", build: func(w *world) {
			r := w.add("alice", approval.TypeSmith, smithRecord(w.fp, "alice"))
			w.add("bob", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "bob"))
		}, want: refusal.RoleMissing},
		{name: "operator approves", build: func(w *world) {
			r := w.add("olive", approval.TypeSmith, smithRecord(w.fp, "olive"))
			w.add("smith", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "smith"))
		}, want: refusal.RoleMissing},
		{name: "gera role does not veto as trinity", build: func(w *world) {
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 1))
			w.add("gera", approval.TypeTrinity, answer(w.fp, "", approval.Deny, "gera"))
		}, wantPath: gera},
		{name: "expired approval", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			a := answer(w.fp, r, approval.Approve, "alice")
			a.Expires = testNow
			w.add("alice", approval.TypeTrinity, a)
		}, want: refusal.EvidenceExpired},
		{name: "expired record", build: func(w *world) {
			rec := smithRecord(w.fp, "smith")
			rec.Expires = testNow.Add(-time.Second)
			r := w.add("smith", approval.TypeSmith, rec)
			w.add("alice", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "alice"))
		}, want: refusal.EvidenceExpired},
		{name: "expired gera go", build: func(w *world) {
			g := geraGo(w.fp, "gera", 1)
			g.Expires = testNow.Add(-time.Nanosecond)
			w.add("gera", approval.TypeGera, g)
		}, want: refusal.EvidenceExpired},
		{name: "issued beyond the clock skew", build: func(w *world) {
			g := geraGo(w.fp, "gera", 1)
			g.Issued, g.Expires = testNow.Add(approval.ClockSkew+time.Second), testNow.Add(2*time.Hour)
			w.add("gera", approval.TypeGera, g)
		}, want: refusal.EvidenceExpired},
		{name: "issued within the clock skew", build: func(w *world) {
			g := geraGo(w.fp, "gera", 1)
			g.Issued = testNow.Add(approval.ClockSkew - time.Second)
			w.add("gera", approval.TypeGera, g)
		}, wantPath: gera},
		{name: "consumed record", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			w.add("alice", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "alice"))
			w.used[r] = 1
		}, want: refusal.EvidenceConsumed},
		{name: "consumed gera go", build: func(w *world) {
			id := w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 3))
			w.used[id] = 3
		}, want: refusal.EvidenceConsumed},
		{name: "gera go with uses left", build: func(w *world) {
			id := w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 3))
			w.used[id] = 2
		}, wantPath: gera},
		{name: "gera go with no uses", build: func(w *world) {
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 0))
		}, want: refusal.SignatureInvalid},

		// Rule 6: separation of duties.
		{name: "approver is the planner", planner: "pat", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			w.add("pat", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "pat"))
		}, want: refusal.SelfApproval},
		{name: "approver is the filer", build: func(w *world) {
			r := w.add("olive", approval.TypeSmith, smithRecord(w.fp, "olive"))
			w.add("olive", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "olive"))
		}, want: refusal.SelfApproval},
		{name: "filer is the planner", planner: "pat", build: func(w *world) {
			r := w.add("pat", approval.TypeSmith, smithRecord(w.fp, "pat"))
			w.add("alice", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "alice"))
		}, want: refusal.SelfApproval},
		{name: "gera decider is the planner", planner: "pat", build: func(w *world) {
			w.add("pat", approval.TypeGera, geraGo(w.fp, "pat", 1))
		}, want: refusal.SelfApproval},
		{name: "filer's approval among enough others still leaves one short", approvers: 2, build: func(w *world) {
			r := w.add("olive", approval.TypeSmith, smithRecord(w.fp, "olive"))
			w.add("olive", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "olive"))
			w.add("alice", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "alice"))
		}, want: refusal.SelfApproval},

		// Bridges attest an approver's answer.
		{name: "slack answer through the bridge", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			a := answer(w.fp, r, approval.Approve, "alice")
			a.Channel = &approval.Channel{Kind: "slack", SlackUser: "UALICE", SlackTeam: "T1", SlackActionTS: "1.2"}
			w.add("bridge", approval.TypeTrinity, a)
		}, wantPath: smith},
		{name: "github login is case-insensitive", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			a := answer(w.fp, r, approval.Approve, "bob")
			a.Channel = &approval.Channel{Kind: "github", GitHubLogin: "BOB", GitHubUserID: gitHubID("Bob"), GitHubComment: 7}
			w.add("bridge", approval.TypeTrinity, a)
		}, wantPath: smith},
		// A login is matched by its numeric id: the same login on another
		// account (renamed away and registered again) is not bob.
		{name: "github login on another account", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			a := answer(w.fp, r, approval.Approve, "bob")
			a.Channel = &approval.Channel{Kind: "github", GitHubLogin: "Bob", GitHubUserID: gitHubID("Bob") + 1, GitHubComment: 8}
			w.add("bridge", approval.TypeTrinity, a)
		}, want: refusal.PrincipalUnknown},
		{name: "channel identity of someone else", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			a := answer(w.fp, r, approval.Approve, "alice")
			a.Channel = &approval.Channel{Kind: "slack", SlackUser: "UBOB"}
			w.add("bridge", approval.TypeTrinity, a)
		}, want: refusal.PrincipalUnknown},
		{name: "channel answer signed without the bridge role", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			a := answer(w.fp, r, approval.Approve, "alice")
			a.Channel = &approval.Channel{Kind: "slack", SlackUser: "UALICE"}
			w.add("alice", approval.TypeTrinity, a)
		}, want: refusal.RoleMissing},
		{name: "bridge answer without a channel", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			w.add("bridge", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "bridge"))
		}, want: refusal.RoleMissing},
		{name: "planner's slack identity through the bridge", planner: "pat", build: func(w *world) {
			r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
			a := answer(w.fp, r, approval.Approve, "alice")
			a.Channel = &approval.Channel{Kind: "slack", SlackUser: "UALICE"}
			w.add("bridge", approval.TypeTrinity, a)
			b := answer(w.fp, r, approval.Approve, "pat")
			b.Channel = &approval.Channel{Kind: "slack", SlackUser: "UPAT"}
			w.add("bridge", approval.TypeTrinity, b)
		}, approvers: 2, want: refusal.SelfApproval},

		// Withdrawal is terminal and only the planner's.
		{name: "withdrawn", build: func(w *world) {
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 1))
			w.add("agent", approval.TypeWithdraw, approval.Withdrawal{Fingerprint: w.fp, Planner: "agent", Issued: testNow})
		}, want: refusal.Withdrawn},
		{name: "withdrawal by someone else", build: func(w *world) {
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 1))
			w.add("pat", approval.TypeWithdraw, approval.Withdrawal{Fingerprint: w.fp, Planner: "pat", Issued: testNow})
		}, wantPath: gera},
		{name: "withdrawal of another plan", build: func(w *world) {
			w.add("gera", approval.TypeGera, geraGo(w.fp, "gera", 1))
			w.add("agent", approval.TypeWithdraw, approval.Withdrawal{Fingerprint: w.fp2, Planner: "agent", Issued: testNow})
		}, wantPath: gera},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.approvers == 0 {
				c.approvers = 1
			}
			if c.paths == nil {
				c.paths = both
			}
			if c.planner == "" {
				c.planner = "agent"
			}
			op := mustOp(t, c.approvers, c.paths, true)
			plan, penv := planFor(t, op, c.planner, "")
			other, _ := planFor(t, op, c.planner, "-other")
			w := &world{t: t, fp: plan.Fingerprint, fp2: other.Fingerprint, used: map[string]int{}}
			c.build(w)
			d, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: w.evidence, Policy: policy, Op: op, Now: testNow, Used: w.used})
			if d == nil {
				t.Fatalf("Evaluate returned no decision (err %v)", err)
			}
			if c.want == "" {
				if err != nil {
					t.Fatalf("refused, want allowed: %v", err)
				}
				if d.Path != c.wantPath {
					t.Fatalf("path %q, want %q", d.Path, c.wantPath)
				}
				checkRelied(t, policy, d, c.approvers)
				return
			}
			r, ok := refusal.As(err)
			if !ok {
				t.Fatalf("got %v (decision path %q), want refusal %s", err, d.Path, c.want)
			}
			if r.Code != c.want {
				t.Fatalf("code %s (%s), want %s", r.Code, r.Reason, c.want)
			}
			if r.Fingerprint != plan.Fingerprint || r.Operation != op.Name {
				t.Errorf("refusal names %q %q, want %q %q", r.Operation, r.Fingerprint, op.Name, plan.Fingerprint)
			}
			if d.Anchor != "" || d.Path != "" {
				t.Errorf("refused decision has anchor %q path %q", d.Anchor, d.Path)
			}
		})
	}
}

// checkRelied checks what an allowed decision rests on: the anchor first,
// then, on the smith+trinity path, exactly `approvers` approvals of the
// anchor from distinct approvers.
func checkRelied(t *testing.T, p *approval.Policy, d *approval.Decision, approvers int) {
	t.Helper()
	if len(d.Relied) == 0 || d.Relied[0].ID != d.Anchor {
		t.Fatalf("relied evidence does not start with the anchor %s", d.Anchor)
	}
	if d.Path == gera {
		if len(d.Relied) != 1 || d.AnchorUses < 1 {
			t.Fatalf("gera path relies on %d records, anchor uses %d", len(d.Relied), d.AnchorUses)
		}
		return
	}
	if d.AnchorUses != 1 {
		t.Errorf("a certainty record anchors %d uses, want 1", d.AnchorUses)
	}
	if len(d.Relied) != 1+approvers {
		t.Fatalf("relies on %d records, want the record and %d approvals", len(d.Relied), approvers)
	}
	var by []string
	for _, s := range d.Relied[1:] {
		var a approval.Answer
		if err := s.Decode(&a); err != nil {
			t.Fatal(err)
		}
		if a.Record != d.Anchor || a.Answer != approval.Approve {
			t.Errorf("relied answer %s answers %s, want an approval of %s", s.ID, a.Record, d.Anchor)
		}
		if slices.Contains(by, a.Approver) {
			t.Errorf("approver %s counted twice", a.Approver)
		}
		by = append(by, a.Approver)
	}
}

// TestEvaluateNonMutating: a read-only operation needs no approval, and
// the mutating flag, never the name, decides.
func TestEvaluateNonMutating(t *testing.T) {
	policy := mustPolicy(t, demoCast)
	op := mustOp(t, 1, []string{gera, smith}, false)
	_, penv := planFor(t, op, "agent", "")
	d, err := approval.Evaluate(approval.Input{Plan: penv, Policy: policy, Op: op, Now: testNow})
	if err != nil || d.Path != "none" || d.Anchor != "" {
		t.Fatalf("got %v, path %q anchor %q; want allowed with path none", err, d.Path, d.Anchor)
	}
	// A plan made while the operation was read-only does not run once it
	// is mutating: the flag is part of the operation's digest.
	mut := mustOp(t, 1, []string{gera, smith}, true)
	if _, err := approval.Evaluate(approval.Input{Plan: penv, Policy: policy, Op: mut, Now: testNow}); !refusal.Is(err, refusal.FingerprintMismatch) {
		t.Fatalf("got %v, want fingerprint_mismatch", err)
	}
}

// TestEvaluatePlan: the plan itself must verify, come from an agent that
// names itself, and be of the operation given.
func TestEvaluatePlan(t *testing.T) {
	policy := mustPolicy(t, demoCast)
	op := mustOp(t, 1, []string{gera}, true)
	plan, penv := planFor(t, op, "agent", "")
	ev := []*approval.Envelope{mustSign(t, "gera", approval.TypeGera, geraGo(plan.Fingerprint, "gera", 1))}
	for _, c := range []struct {
		name string
		env  *approval.Envelope
		op   *operations.Operation
		want refusal.Code
	}{
		{"flipped plan payload", flipPayload(t, penv, 40), op, refusal.SignatureInvalid},
		{"flipped plan signature", flipSignature(t, penv, 3), op, refusal.SignatureInvalid},
		{"plan signed by a non-agent", mustSign(t, "smith", approval.TypePlan, withPlanner(plan, "smith")), op, refusal.RoleMissing},
		{"plan naming another planner", mustSign(t, "pat", approval.TypePlan, plan), op, refusal.SignatureInvalid},
		{"plan by an unknown key", mustSign(t, "mallory", approval.TypePlan, withPlanner(plan, "mallory")), op, refusal.PrincipalUnknown},
		{"plan whose fingerprint lies", mustSign(t, "agent", approval.TypePlan, withFingerprint(plan, "sha256:"+zeros64)), op, refusal.FingerprintMismatch},
		{"evidence posing as a plan", ev[0], op, refusal.SignatureInvalid},
		{"no operation", penv, nil, refusal.OperationAbsent},
		{"operation changed", penv, mustOp(t, 2, []string{gera}, true), refusal.FingerprintMismatch},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := approval.Evaluate(approval.Input{Plan: c.env, Evidence: ev, Policy: policy, Op: c.op, Now: testNow})
			if !refusal.Is(err, c.want) {
				t.Fatalf("got %v, want %s", err, c.want)
			}
		})
	}
	if _, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: ev, Policy: policy, Op: op, Now: testNow}); err != nil {
		t.Fatalf("control: %v", err)
	}
}

const zeros64 = "0000000000000000000000000000000000000000000000000000000000000000"

func withPlanner(p *operations.Plan, id string) *operations.Plan {
	q := *p
	q.Planner = id
	return &q
}

func withFingerprint(p *operations.Plan, fp string) *operations.Plan {
	q := *p
	q.Fingerprint = fp
	return &q
}

// TestEvaluateIsPure: the same input gives the same verdict, whatever the
// order of the evidence.
func TestEvaluateOrder(t *testing.T) {
	policy := mustPolicy(t, demoCast)
	op := mustOp(t, 2, []string{gera, smith}, true)
	plan, penv := planFor(t, op, "agent", "")
	w := &world{t: t, fp: plan.Fingerprint, used: map[string]int{}}
	r := w.add("smith", approval.TypeSmith, smithRecord(w.fp, "smith"))
	w.add("alice", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "alice"))
	w.add("bob", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "bob"))
	w.add("olive", approval.TypeTrinity, answer(w.fp, r, approval.Approve, "olive"))
	n := len(w.evidence)
	for i := range n {
		ev := append(append([]*approval.Envelope{}, w.evidence[i:]...), w.evidence[:i]...)
		slices.Reverse(ev[1:])
		d, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: ev, Policy: policy, Op: op, Now: testNow})
		if err != nil || d.Anchor != r {
			t.Fatalf("rotation %d: %v, anchor %q", i, err, d.Anchor)
		}
		checkRelied(t, policy, d, 2)
	}
}

// TestEvaluatePlanVersion: a signed plan of a version this build does not
// know is refused like any record that does not decode, with a typed
// refusal (docs/DESIGN.md §3: every refusal is typed), not an untyped error that the
// CLI reports as an internal failure.
func TestEvaluatePlanVersion(t *testing.T) {
	policy := mustPolicy(t, demoCast)
	op := mustOp(t, 1, []string{gera}, true)
	plan, _ := planFor(t, op, "agent", "")
	future := *plan
	future.Version = operations.PlanVersion + 1
	env := mustSign(t, "agent", approval.TypePlan, &future)
	_, err := approval.Evaluate(approval.Input{Plan: env, Policy: policy, Op: op, Now: testNow})
	if err == nil {
		t.Fatal("a plan of an unknown version passed the gate")
	}
	if _, ok := refusal.As(err); !ok {
		t.Fatalf("a plan of another version gives the untyped error %q; want a *refusal.Error", err)
	}
}

// A record the store could not read or decode (a store.Problem) may be a
// veto: the gate refuses while there is any, whatever else is there.
func TestEvaluateRefusesUnreadableEvidence(t *testing.T) {
	policy := mustPolicy(t, demoCast)
	op := mustOp(t, 1, []string{gera, smith}, true)
	plan, penv := planFor(t, op, "agent", "")
	go1 := mustSign(t, "gera", approval.TypeGera, geraGo(plan.Fingerprint, "gera", 1))
	in := approval.Input{Plan: penv, Evidence: []*approval.Envelope{go1}, Policy: policy, Op: op, Now: testNow}
	if _, err := approval.Evaluate(in); err != nil {
		t.Fatalf("with a valid go and nothing unreadable: %v", err)
	}
	in.Unreadable = []string{"state/store/evidence/ab/cd.json: unexpected end of JSON input"}
	_, err := approval.Evaluate(in)
	r, ok := refusal.As(err)
	if !ok || r.Code != refusal.EvidenceUnreadable || !strings.Contains(r.Reason, "cd.json") {
		t.Fatalf("with an unreadable record: %v, want evidence_unreadable naming it", err)
	}
}

// The filer's deny is a veto it may cast: it is shown as counting, not as
// a refused self-approval (status prints this).
func TestFilerDenyIsShownAsCounting(t *testing.T) {
	policy := mustPolicy(t, demoCast)
	op := mustOp(t, 1, []string{gera, smith}, true)
	plan, penv := planFor(t, op, "agent", "")
	w := &world{t: t, fp: plan.Fingerprint, used: map[string]int{}}
	r := w.add("olive", approval.TypeSmith, smithRecord(w.fp, "olive"))
	w.add("olive", approval.TypeTrinity, answer(w.fp, r, approval.Deny, "olive"))
	d, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: w.evidence, Policy: policy, Op: op, Now: testNow, Used: w.used})
	if rr, ok := refusal.As(err); !ok || rr.Code != refusal.Vetoed {
		t.Fatalf("got %v, want vetoed", err)
	}
	for _, a := range d.Evidence {
		if a.Verdict == approval.Deny && (!a.Valid || a.Problem != nil) {
			t.Fatalf("the filer's deny is shown as not counting: %s", a.Why)
		}
	}
}
