package approval_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// The property: for any set of evidence, Evaluate lets the plan run exactly
// when a reference model of docs/DESIGN.md §3, written here from the spec and not
// from gate.go, says it may; and when it refuses, it says why with one of
// the spec's refusal codes (vetoed whenever the model sees a veto).

// propCast is the policy of the property test. Several principals hold
// more than one role, so that separation of duties is exercised on
// principals the role check alone would accept.
var propCast = []member{
	{ID: "agent", Roles: []string{"agent"}},
	{ID: "pat", Roles: []string{"agent", "approver", "operator", "gera"}, Slack: "UPAT", GitHub: "pat"},
	{ID: "olive", Roles: []string{"operator", "approver"}, Slack: "UOLIVE"},
	{ID: "smith", Roles: []string{"operator"}},
	{ID: "sam", Roles: []string{"operator", "gera"}},
	{ID: "alice", Roles: []string{"approver"}, Slack: "UALICE", GitHub: "alice"},
	{ID: "bob", Roles: []string{"approver"}, Slack: "UBOB", GitHub: "Bob"},
	{ID: "carol", Roles: []string{"approver"}},
	{ID: "gera", Roles: []string{"gera"}},
	{ID: "gerb", Roles: []string{"gera", "approver"}},
	{ID: "bridge", Roles: []string{"bridge"}},
	{ID: "runner", Roles: []string{"runner"}},
}

// Keys that no principal of the policy holds.
var strangers = []string{"mallory", "eve"}

var allSigners = func() []string {
	var out []string
	for _, m := range propCast {
		out = append(out, m.ID)
	}
	return append(out, strangers...)
}()

// genRec is one generated piece of evidence: what it claims and how it was
// signed, which is what the model judges.
type genRec struct {
	Kind      string // gera, smith, trinity
	Signer    string // whose key signed it
	Named     string // the principal the payload names as acting
	OtherFP   bool   // bound to another plan's fingerprint
	Issued    time.Duration
	Expires   time.Duration // relative to now
	Verdict   string        // gera: go, no-go or junk; trinity: approve, deny or junk
	Uses      int
	RecordRef int // trinity: index of the smith record answered; -1 none; -2 a stranger's id
	Channel   *approval.Channel
	Tamper    string // "", "sig" or "payload"
	Used      int

	env *approval.Envelope
	id  string
}

func (g *genRec) String() string {
	ch := ""
	if g.Channel != nil {
		ch = fmt.Sprintf(" via %s(%s%s)", g.Channel.Kind, g.Channel.SlackUser, g.Channel.GitHubLogin)
	}
	return fmt.Sprintf("%s %s by %s signed %s%s otherfp=%t issued=%s expires=%s uses=%d used=%d record=%d tamper=%q id=%.8s",
		g.Kind, g.Verdict, g.Named, g.Signer, ch, g.OtherFP, g.Issued, g.Expires, g.Uses, g.Used, g.RecordRef, g.Tamper, g.id)
}

var (
	issuedOffsets  = []time.Duration{-3 * time.Hour, -time.Hour, -time.Minute, 0, approval.ClockSkew - time.Second, approval.ClockSkew + time.Second}
	expiresOffsets = []time.Duration{-time.Hour, -time.Second, 0, time.Nanosecond, time.Second, time.Hour, 48 * time.Hour}
)

// drawCommon draws who signs a piece of evidence, what it is bound to, when
// it was issued and expires, whether it was tampered with and how often it
// was used. Draws lean towards valid evidence, so that allowed plans and
// every way of falling short are both common.
func drawCommon(t *rapid.T, g *genRec, label string, likely []string) {
	g.Signer = rapid.SampledFrom(likely).Draw(t, label+".signer")
	if rapid.IntRange(0, 3).Draw(t, label+".anysigner") == 0 {
		g.Signer = rapid.SampledFrom(allSigners).Draw(t, label+".signer2")
	}
	g.Named = g.Signer
	if rapid.IntRange(0, 11).Draw(t, label+".misnamed") == 0 {
		g.Named = rapid.SampledFrom(allSigners).Draw(t, label+".named")
	}
	g.OtherFP = rapid.IntRange(0, 11).Draw(t, label+".otherfp") == 0
	g.Issued = -time.Minute
	if rapid.IntRange(0, 3).Draw(t, label+".oddissue") == 0 {
		g.Issued = rapid.SampledFrom(issuedOffsets).Draw(t, label+".issued")
	}
	g.Expires = time.Hour
	if rapid.IntRange(0, 3).Draw(t, label+".oddexpiry") == 0 {
		g.Expires = rapid.SampledFrom(expiresOffsets).Draw(t, label+".expires")
	}
	g.Tamper = rapid.SampledFrom([]string{"", "", "", "", "", "", "", "", "", "", "sig", "payload"}).Draw(t, label+".tamper")
	g.Used = rapid.SampledFrom([]int{0, 0, 0, 0, 0, 0, 1, 2, 3}).Draw(t, label+".used")
}

// TestEvaluateMatchesModel draws a planner, an operation's approval rule
// and evidence, and compares Evaluate with the model.
func TestEvaluateMatchesModel(t *testing.T) {
	policy := mustPolicy(t, propCast)
	// How the drawn cases split, to see that every outcome is exercised.
	outcomes := map[string]int{}
	defer func() { t.Logf("outcomes: %v", outcomes) }()
	rapid.Check(t, func(t *rapid.T) {
		approvers := rapid.IntRange(1, 3).Draw(t, "approvers")
		paths := rapid.SampledFrom([][]string{{gera}, {smith}, {gera, smith}, {smith, gera}}).Draw(t, "paths")
		planner := rapid.SampledFrom([]string{"agent", "pat"}).Draw(t, "planner")
		op := mustOp(t, approvers, paths, true)
		plan, penv := planFor(t, op, planner, "")
		other, _ := planFor(t, op, planner, "-other")

		var recs []*genRec
		// Certainty records first, so answers can name them.
		for i := range rapid.IntRange(0, 2).Draw(t, "records") {
			g := &genRec{Kind: "smith", Verdict: "record", RecordRef: -1}
			label := fmt.Sprintf("smith%d", i)
			drawCommon(t, g, label, []string{"smith", "olive", "sam"})
			// A record always names its signer as filer here: one filed
			// under another name is refused on its own (TestEvaluate), and
			// whether its named or its signing principal then "filed" it
			// is beyond the spec.
			g.Named = g.Signer
			recs = append(recs, g)
		}
		nSmith := len(recs)
		// Often, a certainty record with about as many approvals as the
		// operation needs, so that cases near the threshold are common.
		if nSmith > 0 && rapid.Bool().Draw(t, "nearthreshold") {
			k := approvers + rapid.IntRange(-1, 0).Draw(t, "nearthreshold.k")
			who := rapid.Permutation([]string{"alice", "bob", "carol", "gerb", "olive", "pat"}).Draw(t, "nearthreshold.who")
			for i := range k {
				recs = append(recs, &genRec{Kind: "trinity", Verdict: approval.Approve, Signer: who[i], Named: who[i],
					Issued: -time.Minute, Expires: time.Hour, RecordRef: 0})
			}
		}
		for i := range rapid.IntRange(0, 10).Draw(t, "answers") {
			label := fmt.Sprintf("ev%d", i)
			g := &genRec{RecordRef: -1}
			switch rapid.IntRange(0, 4).Draw(t, label+".kind") {
			case 0:
				g.Kind = "gera"
				drawCommon(t, g, label, []string{"gera", "gerb", "sam"})
				g.Verdict = rapid.SampledFrom([]string{approval.Go, approval.Go, approval.Go, approval.Go, approval.NoGo, "maybe"}).Draw(t, label+".decision")
				g.Uses = rapid.IntRange(0, 3).Draw(t, label+".uses")
				if g.Verdict == approval.NoGo {
					g.Uses = 0 // as the CLI writes it: a veto is not spent
				}
			default:
				g.Kind = "trinity"
				drawCommon(t, g, label, []string{"alice", "bob", "carol", "olive", "gerb", "pat"})
				g.Verdict = rapid.SampledFrom([]string{approval.Approve, approval.Approve, approval.Approve, approval.Approve, approval.Approve, approval.Approve, approval.Deny, "maybe"}).Draw(t, label+".answer")
				if nSmith > 0 && rapid.IntRange(0, 9).Draw(t, label+".norecord") > 0 {
					g.RecordRef = rapid.IntRange(0, nSmith-1).Draw(t, label+".record")
				} else if rapid.Bool().Draw(t, label+".strangerecord") {
					g.RecordRef = -2
				}
				if rapid.IntRange(0, 3).Draw(t, label+".bridged") == 0 {
					// Attested by a bridge: the signer is (usually) the
					// bridge, the named approver is whoever the channel
					// identity is claimed to be.
					g.Signer = rapid.SampledFrom([]string{"bridge", "bridge", "bridge", "alice", "mallory"}).Draw(t, label+".bridge")
					g.Named = rapid.SampledFrom(allSigners).Draw(t, label+".approver")
					who := rapid.SampledFrom(allSigners).Draw(t, label+".channelwho")
					if rapid.Bool().Draw(t, label+".channelmatches") {
						who = g.Named
					}
					g.Channel = channelOf(t, who, label)
				}
			}
			recs = append(recs, g)
		}
		// Duplicates: the same envelope stored twice.
		for i := range rapid.IntRange(0, 2).Draw(t, "dups") {
			if len(recs) == 0 {
				break
			}
			recs = append(recs, recs[rapid.IntRange(0, len(recs)-1).Draw(t, fmt.Sprintf("dup%d", i))])
		}

		used := map[string]int{}
		smithIDs := make([]string, nSmith)
		for i, g := range recs {
			if g.env != nil {
				continue // a duplicate
			}
			fp := plan.Fingerprint
			if g.OtherFP {
				fp = other.Fingerprint
			}
			issued, expires := testNow.Add(g.Issued), testNow.Add(g.Expires)
			var v any
			switch g.Kind {
			case "gera":
				v = approval.GeraDecision{Fingerprint: fp, Decision: g.Verdict, Uses: g.Uses, Decider: g.Named, Issued: issued, Expires: expires}
			case "smith":
				v = approval.CertaintyRecord{Fingerprint: fp, Summary: fmt.Sprintf("record %d", i), Effect: "e", BlastRadius: "b", Rollback: "r",
					Certainty: "high", Filer: g.Named, Issued: issued, Expires: expires}
			case "trinity":
				ref := ""
				switch {
				case g.RecordRef >= 0:
					ref = smithIDs[g.RecordRef]
				case g.RecordRef == -2:
					ref = strings.Repeat("5a", 32)
				}
				v = approval.Answer{Fingerprint: fp, Record: ref, Answer: g.Verdict, Approver: g.Named, Channel: g.Channel,
					Reason: fmt.Sprintf("answer %d", i), Issued: issued, Expires: expires}
			}
			typ := map[string]string{"gera": approval.TypeGera, "smith": approval.TypeSmith, "trinity": approval.TypeTrinity}[g.Kind]
			env := mustSign(t, g.Signer, typ, v)
			if g.Kind == "smith" {
				smithIDs[i] = mustID(t, env) // answers name the record as signed
			}
			switch g.Tamper {
			case "sig":
				env = flipSignature(t, env, rapid.IntRange(0, 511).Draw(t, fmt.Sprintf("ev%d.sigbit", i)))
			case "payload":
				env = flipPayload(t, env, rapid.IntRange(0, 1<<20).Draw(t, fmt.Sprintf("ev%d.payloadbyte", i)))
			}
			g.env, g.id = env, mustID(t, env)
			// Two draws may make the very same record (same payload and
			// signer): consumption counts per record, so they share it.
			if n, seen := used[g.id]; seen {
				g.Used = n
			}
			used[g.id] = g.Used
		}
		order := rapid.Permutation(indices(len(recs))).Draw(t, "order")
		var evidence []*approval.Envelope
		for _, i := range order {
			evidence = append(evidence, recs[i].env)
		}
		for _, g := range recs {
			t.Logf("evidence: %s", g)
		}

		m := model{planner: planner, fp: plan.Fingerprint, recs: recs, approvers: approvers, paths: paths}
		want := m.verdict()
		d, err := approval.Evaluate(approval.Input{Plan: penv, Evidence: evidence, Policy: policy, Op: op, Now: testNow, Used: used})
		if d == nil {
			t.Fatalf("no decision: %v", err)
		}
		if want.allowed {
			if err != nil {
				t.Fatalf("model allows (%s), Evaluate refuses: %v", want.why, err)
			}
			m.checkDecision(t, d)
			outcomes[fmt.Sprintf("allowed %s approvers=%d", d.Path, approvers)]++
			return
		}
		if err == nil {
			t.Fatalf("model refuses (%s), Evaluate allows by path %s, anchor %.8s", want.why, d.Path, d.Anchor)
		}
		r, ok := refusal.As(err)
		if !ok {
			t.Fatalf("refused with %T %v, want a *refusal.Error", err, err)
		}
		if want.unreadable && r.Code != refusal.EvidenceUnreadable {
			t.Fatalf("model sees unverifiable evidence (%s), Evaluate says %s: %s", want.why, r.Code, r.Reason)
		}
		if want.vetoed && r.Code != refusal.Vetoed {
			t.Fatalf("model sees a veto (%s), Evaluate says %s: %s", want.why, r.Code, r.Reason)
		}
		if !want.vetoed && !want.unreadable && !slices.Contains(gateCodes, r.Code) {
			t.Fatalf("refusal code %q is not one the gate gives for missing or invalid evidence", r.Code)
		}
		if r.Fingerprint != plan.Fingerprint || r.Operation != op.Name || r.Reason == "" {
			t.Fatalf("refusal does not say what was refused: %+v", r)
		}
		outcomes[string(r.Code)]++
	})
}

// gateCodes are the codes of docs/DESIGN.md §3 that explain why evidence was missing
// or did not count.
var gateCodes = []refusal.Code{refusal.NoApproval, refusal.SelfApproval, refusal.EvidenceExpired,
	refusal.EvidenceConsumed, refusal.SignatureInvalid, refusal.PrincipalUnknown, refusal.RoleMissing,
	refusal.Vetoed} // vetoed: approvals issued before a veto that has since expired

func indices(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func channelOf(t *rapid.T, who, label string) *approval.Channel {
	m, _ := castMember(who)
	if rapid.Bool().Draw(t, label+".slack") {
		user := m.Slack
		if user == "" {
			user = "U" + strings.ToUpper(who)
		}
		return &approval.Channel{Kind: "slack", SlackUser: user, SlackTeam: "T1", SlackActionTS: "1700000000.1"}
	}
	login := m.GitHub
	if login == "" {
		login = who
	}
	if rapid.Bool().Draw(t, label+".upper") {
		login = strings.ToUpper(login)
	}
	// The account's numeric id: the login's own, none, or another
	// account's (a renamed or re-registered login).
	id := rapid.SampledFrom([]int64{gitHubID(login), gitHubID(login), gitHubID(login), 0, gitHubID(login) + 1}).Draw(t, label+".id")
	return &approval.Channel{Kind: "github", GitHubLogin: login, GitHubUserID: id, GitHubComment: 42, GitHubRepo: "o/r"}
}

func castMember(id string) (member, bool) {
	for _, m := range propCast {
		if m.ID == id {
			return m, true
		}
	}
	return member{}, false
}

func hasRole(id, role string) bool {
	m, ok := castMember(id)
	return ok && slices.Contains(m.Roles, role)
}

// model is docs/DESIGN.md §3, rules 3 to 6, over generated evidence.
type model struct {
	planner   string
	fp        string
	recs      []*genRec
	approvers int
	paths     []string
	// vetoUntil is the latest expiry of the vetoes that have expired:
	// evidence issued before it never counts (rule 3). Zero when none.
	vetoUntil *time.Duration
}

type verdict struct {
	allowed, vetoed, unreadable bool
	why                         string
}

// isVeto reports whether g is a Gera no-go or a Trinity deny.
func isVeto(g *genRec) bool {
	return g.Kind == "gera" && g.Verdict == approval.NoGo || g.Kind == "trinity" && g.Verdict == approval.Deny
}

// authenticVeto is a veto whose signature, binding and role hold: anyone
// holding the role may veto, the planner and the filer included (rule 3).
func (m *model) authenticVeto(g *genRec) bool {
	if !isVeto(g) {
		return false
	}
	who := m.actor(g)
	if who == "" || g.OtherFP {
		return false
	}
	role := map[string]string{"gera": "gera", "trinity": "approver"}[g.Kind]
	return hasRole(who, role)
}

// actor is the principal a piece of evidence acts for, or "" when it acts
// for nobody: a bad signature, an unknown key, a record naming someone
// other than who signed it, or a channel identity that does not map to the
// approver named.
func (m *model) actor(g *genRec) string {
	if g.Tamper != "" {
		return ""
	}
	if _, known := castMember(g.Signer); !known {
		return ""
	}
	if g.Channel != nil {
		// §2, §5: a bridge attests an approver's answer that it
		// authenticated; §3 rule 6: a channel identity is one principal.
		if !hasRole(g.Signer, "bridge") {
			return ""
		}
		if _, known := castMember(g.Named); !known {
			return ""
		}
		var mapped string
		for _, c := range propCast {
			switch g.Channel.Kind {
			case "slack":
				if c.Slack != "" && c.Slack == g.Channel.SlackUser {
					mapped = c.ID
				}
			case "github":
				// By the numeric id, with the login agreeing (rule 6).
				if c.GitHub != "" && strings.EqualFold(c.GitHub, g.Channel.GitHubLogin) && g.Channel.GitHubUserID == gitHubID(c.GitHub) {
					mapped = c.ID
				}
			}
		}
		if mapped != g.Named {
			return ""
		}
		return g.Named
	}
	if g.Named != g.Signer {
		return ""
	}
	return g.Signer
}

// filer is who filed the record an answer names, when that record's
// signature verifies.
func (m *model) filer(g *genRec) string {
	if g.RecordRef < 0 {
		return ""
	}
	rec := m.recs[g.RecordRef]
	if rec.Tamper != "" {
		return ""
	}
	if _, known := castMember(rec.Signer); !known {
		return ""
	}
	return rec.Signer
}

// valid is rule 5 and rule 6 for one piece of evidence.
func (m *model) valid(g *genRec) bool {
	who := m.actor(g)
	if who == "" || g.OtherFP {
		return false
	}
	role := map[string]string{"gera": "gera", "smith": "operator", "trinity": "approver"}[g.Kind]
	if !hasRole(who, role) {
		return false
	}
	if isVeto(g) {
		// A veto stands until it expires, whoever cast it.
		return g.Expires > 0
	}
	// Rule 6: nobody decides, vouches for or answers a plan they planned.
	if who == m.planner {
		return false
	}
	// Expiry, with issue times no later than the documented clock skew.
	if g.Expires <= 0 || g.Issued > approval.ClockSkew {
		return false
	}
	// Rule 3: issued before a veto expired, it never counts again.
	if m.vetoUntil != nil && g.Issued < *m.vetoUntil {
		return false
	}
	switch g.Kind {
	case "gera":
		switch g.Verdict {
		case approval.Go:
			return g.Uses >= 1 && g.Used < g.Uses
		case approval.NoGo:
			return true // a veto is never spent
		}
		return false
	case "smith":
		return g.Used < 1 // single-use
	case "trinity":
		if g.Verdict != approval.Approve && g.Verdict != approval.Deny {
			return false
		}
		if g.Verdict == approval.Approve && g.RecordRef == -1 {
			return false // an approval answers a certainty record
		}
		// Rule 6: nobody approves a record they filed.
		return g.Verdict == approval.Deny || who != m.filer(g)
	}
	return false
}

func (m *model) verdict() verdict {
	// Evidence that cannot be verified may be a veto: nothing runs.
	for _, g := range m.recs {
		if _, known := castMember(g.Signer); g.Tamper != "" || !known {
			return verdict{unreadable: true, why: "unverifiable: " + g.String()}
		}
	}
	for _, g := range m.recs {
		if m.authenticVeto(g) && g.Expires > 0 {
			return verdict{vetoed: true, why: "veto: " + g.String()}
		}
	}
	for _, g := range m.recs {
		if m.authenticVeto(g) && (m.vetoUntil == nil || g.Expires > *m.vetoUntil) {
			e := g.Expires
			m.vetoUntil = &e
		}
	}
	if slices.Contains(m.paths, gera) {
		for _, g := range m.recs {
			if g.Kind == "gera" && g.Verdict == approval.Go && m.valid(g) {
				return verdict{allowed: true, why: "gera go " + g.String()}
			}
		}
	}
	if slices.Contains(m.paths, smith) {
		for i, r := range m.recs {
			if r.Kind != "smith" || !m.valid(r) {
				continue
			}
			if n := len(m.approversOf(i)); n >= m.approvers {
				return verdict{allowed: true, why: fmt.Sprintf("record %s with %d approvers", r, n)}
			}
		}
	}
	return verdict{why: "no valid approval"}
}

// approversOf returns the distinct principals with a valid approval of
// record i.
func (m *model) approversOf(i int) []string {
	var out []string
	for _, g := range m.recs {
		if g.Kind == "trinity" && g.Verdict == approval.Approve && g.RecordRef == i && m.valid(g) && !slices.Contains(out, m.actor(g)) {
			out = append(out, m.actor(g))
		}
	}
	return out
}

// checkDecision checks that an allowed decision rests on what the model
// accepts: an accepted path; a valid anchor; on smith+trinity, exactly the
// required number of valid approvals of the anchor from distinct approvers.
func (m *model) checkDecision(t *rapid.T, d *approval.Decision) {
	if !slices.Contains(m.paths, d.Path) {
		t.Fatalf("allowed by path %q, which the operation does not accept (%v)", d.Path, m.paths)
	}
	var anchor *genRec
	for _, g := range m.recs {
		if g.id == d.Anchor && m.valid(g) {
			anchor = g
		}
	}
	if anchor == nil {
		t.Fatalf("anchor %.8s is no valid evidence of the model", d.Anchor)
	}
	switch d.Path {
	case gera:
		if anchor.Kind != "gera" || anchor.Verdict != approval.Go || d.AnchorUses != anchor.Uses {
			t.Fatalf("gera path anchored on %s with %d uses", anchor, d.AnchorUses)
		}
	case smith:
		if anchor.Kind != "smith" || d.AnchorUses != 1 {
			t.Fatalf("smith path anchored on %s with %d uses", anchor, d.AnchorUses)
		}
		if len(d.Relied) != 1+m.approvers {
			t.Fatalf("relies on %d records, want 1+%d", len(d.Relied), m.approvers)
		}
		var seen []string
		for _, s := range d.Relied[1:] {
			var g *genRec
			for _, x := range m.recs {
				if x.id == s.ID {
					g = x
				}
			}
			if g == nil || g.Kind != "trinity" || g.Verdict != approval.Approve || !m.valid(g) || g.RecordRef < 0 || m.recs[g.RecordRef] != anchor {
				t.Fatalf("relies on %v, not a valid approval of the anchor", g)
			}
			if slices.Contains(seen, m.actor(g)) {
				t.Fatalf("approver %s relied on twice", m.actor(g))
			}
			seen = append(seen, m.actor(g))
		}
	}
}
