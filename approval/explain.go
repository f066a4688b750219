package approval

import (
	"encoding/base64"
	"fmt"
	"strings"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/strictjson"
)

// Explanation answers "why was this allowed?" (docs/JSON.md,
// `explanation`): the path the gate took, who it relied on and through
// which channel, the policy and registry it judged by, and the veto rules
// it checked, as one sentence a person can check against the records and as
// fields for tools.
type Explanation struct {
	Allowed  bool   `json:"allowed"`
	Sentence string `json:"sentence"`
	// Path is the approval path as people name it: "gera",
	// "record+approvals" or "none"; empty when refused.
	Path      string `json:"path"`
	Operation string `json:"operation"`
	// Relied is what the approval rests on, anchor first.
	Relied          []Reliance `json:"relied"`
	PolicyDigest    string     `json:"policy_digest"`
	OperationDigest string     `json:"operation_digest"`
	// Checked lists the veto rules the gate applied (docs/DESIGN.md §3 rule 3,
	// docs/adr/0012-veto-rules.md) and what each found.
	Checked []Check        `json:"checked"`
	Refusal *refusal.Error `json:"refusal,omitempty"`
}

// Reliance is one record an approval rests on.
type Reliance struct {
	ID   string `json:"id"`
	Kind string `json:"kind"` // gera, record, answer
	By   string `json:"by"`
	// Channel is where an answer was given: "slack", "github" or "cli"
	// (an answer a bridge did not attest was signed on the CLI).
	Channel string `json:"channel,omitempty"`
	// Use and Uses: this run spends use Use of Uses of the anchor (1-based;
	// Use is 0 before a run, when it is not known yet).
	Use  int `json:"use,omitempty"`
	Uses int `json:"uses,omitempty"`
}

// Check is one veto rule and what it found.
type Check struct {
	Rule   string `json:"rule"`
	Passed bool   `json:"passed"`
	Found  string `json:"found"`
}

// Veto rules, as Check.Rule names them.
const (
	RuleNoVetoInForce  = "no_veto_in_force"
	RuleVetoNeverLapse = "veto_never_lapses"
	RuleNotWithdrawn   = "not_withdrawn"
	RuleAllReadable    = "evidence_readable"
)

// ExplainInput is what an explanation is built from: a decision as the
// gate made it (status) or as an intent receipt records it.
type ExplainInput struct {
	Operation       string
	OperationDigest string
	PolicyDigest    string
	// Path is the stored spelling (operations.PathSmithTrinity and so on).
	Path   string
	Relied []string
	// Slot is the use of the anchor the run spent (0-based), or -1 before
	// a run.
	Slot       int
	AnchorUses int
	Evidence   []*Assessed
	// Unreadable counts evidence that could not be read.
	Unreadable int
	Refusal    *refusal.Error
	// At is when the decision was made; vetoes are in force before their
	// expiry.
	At time.Time
}

// ChannelName is where an answer was given, for [Reliance.Channel].
func ChannelName(c *Channel) string {
	if c == nil {
		return "cli"
	}
	return c.Kind
}

// AnswerChannel is where the answer a was given: "passkey" for a decision
// its approver's passkey signed, else the bridge's channel, or "cli" for
// an answer signed with the approver's own key.
func AnswerChannel(a *Assessed) string {
	if a.Passkey != nil {
		return ChannelPasskey
	}
	return ChannelName(a.Channel)
}

// ChannelPasskey names the channel of a passkey decision.
const ChannelPasskey = "passkey"

func channelWords(kind string) string {
	switch kind {
	case "slack":
		return "Slack"
	case "github":
		return "GitHub"
	case "cli":
		return "the CLI"
	case ChannelPasskey:
		return "passkey"
	}
	return kind
}

// Explain builds the explanation of in. It reads nothing but in.
func Explain(in ExplainInput) *Explanation {
	e := &Explanation{Allowed: in.Refusal == nil, Operation: in.Operation, PolicyDigest: in.PolicyDigest, OperationDigest: in.OperationDigest,
		Relied: []Reliance{}, Checked: []Check{}, Refusal: in.Refusal}
	if e.Allowed {
		e.Path = operations.PathName(in.Path)
	}
	byID := map[string]*Assessed{}
	for _, a := range in.Evidence {
		if a != nil && a.ID != "" {
			byID[a.ID] = a
		}
	}
	for i, id := range in.Relied {
		r := Reliance{ID: id}
		if a, ok := byID[id]; ok {
			r.Kind, r.By = a.Kind, a.By
			if a.Kind == KindAnswer {
				r.Channel = AnswerChannel(a)
			}
		}
		if i == 0 {
			r.Uses = max(in.AnchorUses, 1)
			if in.Slot >= 0 {
				r.Use = in.Slot + 1
			} else if a, ok := byID[id]; ok {
				r.Use = a.Used + 1
			}
		}
		e.Relied = append(e.Relied, r)
	}
	e.Checked = vetoChecks(in)

	var b strings.Builder
	if !e.Allowed {
		fmt.Fprintf(&b, "Not allowed (%s): %s", in.Refusal.Code, in.Refusal.Reason)
		if len(in.Refusal.Missing) > 0 {
			fmt.Fprintf(&b, "; missing: %s", strings.Join(in.Refusal.Missing, ", "))
		}
	} else {
		switch in.Path {
		case operations.PathGera:
			fmt.Fprintf(&b, "Allowed by path gera: %s", relianceWords(e.Relied))
		case operations.PathSmithTrinity:
			fmt.Fprintf(&b, "Allowed by path record+approvals: %s", relianceWords(e.Relied))
		case operations.PathBreakGlass:
			fmt.Fprintf(&b, "Allowed by break-glass, without the usual approvals: %s", relianceWords(e.Relied))
		default:
			fmt.Fprintf(&b, "Allowed without approval: operation %s is not mutating", in.Operation)
		}
	}
	fmt.Fprintf(&b, "; policy %s, registry %s (operation %s)", orUnknown(in.PolicyDigest), orUnknown(in.OperationDigest), in.Operation)
	var checks []string
	for _, c := range e.Checked {
		checks = append(checks, c.Found)
	}
	fmt.Fprintf(&b, "; veto rules checked: %s.", strings.Join(checks, ", "))
	e.Sentence = b.String()
	return e
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// relianceWords: "Gera go 1a2b3c4d5e6f by gera, use 2 of 3" or
// "certainty record 1a2b3c4d5e6f by smith + approvals by alice via Slack,
// bob via GitHub".
func relianceWords(rs []Reliance) string {
	var parts, approvals []string
	for _, r := range rs {
		id := r.ID
		if len(id) > 12 {
			id = id[:12]
		}
		switch r.Kind {
		case KindGera:
			parts = append(parts, fmt.Sprintf("Gera go %s by %s, use %s of %d", id, r.By, useWord(r.Use), r.Uses))
		case KindRecord:
			parts = append(parts, fmt.Sprintf("certainty record %s by %s", id, r.By))
		case KindAnswer:
			approvals = append(approvals, fmt.Sprintf("%s via %s", r.By, channelWords(r.Channel)))
		case KindBreakGlass:
			parts = append(parts, fmt.Sprintf("break-glass record %s by %s (to be reviewed)", id, r.By))
		default:
			parts = append(parts, fmt.Sprintf("record %s", id))
		}
	}
	if len(approvals) > 0 {
		parts = append(parts, "approvals by "+strings.Join(approvals, ", "))
	}
	return strings.Join(parts, " + ")
}

func useWord(n int) string {
	if n == 0 {
		return "next"
	}
	return fmt.Sprint(n)
}

// vetoChecks reports the veto rules of docs/DESIGN.md §3 rule 3 against the evidence
// the decision saw (an intent keeps every veto and withdrawal the gate saw).
func vetoChecks(in ExplainInput) []Check {
	var inForce, expired []*Assessed
	var withdrawn *Assessed
	for _, a := range in.Evidence {
		if a == nil {
			continue
		}
		switch {
		case a.Verdict == NoGo || a.Verdict == Deny:
			if in.At.Before(a.Expires) {
				inForce = append(inForce, a)
			} else {
				expired = append(expired, a)
			}
		case a.Kind == KindWithdrawal:
			withdrawn = a
		}
	}
	var out []Check
	if len(inForce) == 0 {
		out = append(out, Check{RuleNoVetoInForce, true, fmt.Sprintf("no veto in force (%d seen)", len(inForce)+len(expired))})
	} else {
		out = append(out, Check{RuleNoVetoInForce, false, fmt.Sprintf("%s by %s in force", inForce[0].Verdict, inForce[0].By)})
	}
	if len(expired) == 0 {
		out = append(out, Check{RuleVetoNeverLapse, true, "no expired veto to lapse"})
	} else {
		latest := expired[0]
		for _, a := range expired {
			if a.Expires.After(latest.Expires) {
				latest = a
			}
		}
		found := fmt.Sprintf("only decisions issued after %s's %s expired at %s count", latest.By, latest.Verdict, latest.Expires.UTC().Format(time.RFC3339))
		out = append(out, Check{RuleVetoNeverLapse, true, found})
	}
	if withdrawn == nil {
		out = append(out, Check{RuleNotWithdrawn, true, "not withdrawn"})
	} else {
		out = append(out, Check{RuleNotWithdrawn, false, "withdrawn by " + withdrawn.By})
	}
	readable := in.Unreadable == 0
	for _, a := range in.Evidence {
		if a != nil && a.Problem != nil && *a.Problem == refusal.EvidenceUnreadable {
			readable = false
		}
	}
	if readable {
		out = append(out, Check{RuleAllReadable, true, "all evidence readable"})
	} else {
		out = append(out, Check{RuleAllReadable, false, "unreadable evidence (it may be a veto)"})
	}
	return out
}

// Describe reads what a record says, without verifying its signature: for
// explaining a receipt, whose evidence replay verifies. It decodes as the
// gate does ([Signed.Decode]: pkg/strictjson), so a payload the gate
// refuses as unreadable is never described as saying something. It
// returns nil for an envelope it cannot decode.
func Describe(env *Envelope) *Assessed {
	id, err := ID(env)
	if err != nil {
		return nil
	}
	body, err := decodePayload(env)
	if err != nil {
		return nil
	}
	a := &Assessed{ID: id, Kind: kindOf(env.PayloadType)}
	read := func(v any) bool { return strictjson.Unmarshal(body, v) == nil }
	switch env.PayloadType {
	case TypeGera:
		var g GeraDecision
		if !read(&g) {
			return nil
		}
		a.By, a.Verdict, a.Uses, a.Issued, a.Expires = g.Decider, g.Decision, g.Uses, g.Issued, g.Expires
	case TypeSmith:
		var c CertaintyRecord
		if !read(&c) {
			return nil
		}
		a.By, a.Verdict, a.Uses, a.Issued, a.Expires = c.Filer, "record", 1, c.Issued, c.Expires
	case TypeTrinity:
		var t Answer
		if !read(&t) {
			return nil
		}
		a.By, a.Verdict, a.Record, a.Channel, a.Issued, a.Expires = t.Approver, t.Answer, t.Record, t.Channel, t.Issued, t.Expires
	case TypePasskey:
		var d PasskeyDecision
		if !read(&d) {
			return nil
		}
		a.By, a.Verdict, a.Record, a.Issued, a.Expires = d.Approver, d.Decision, d.Record, d.Issued, d.Expires
		// Named, not verified: the gate verifies the assertion.
		a.Passkey = &PasskeySeen{Credential: base64.RawURLEncoding.EncodeToString(d.Assertion.CredentialID)}
	case TypeWithdraw:
		var w Withdrawal
		if !read(&w) {
			return nil
		}
		a.By, a.Verdict, a.Issued = w.Planner, "withdraw", w.Issued
	case TypeBreakGlass:
		var g BreakGlass
		if !read(&g) {
			return nil
		}
		a.By, a.Verdict, a.Uses, a.Issued, a.Expires = g.Breaker, "break-glass", 1, g.Issued, g.Expires
	case TypeFreezeGrant:
		var g FreezeGrant
		if !read(&g) {
			return nil
		}
		a.By, a.Verdict, a.Issued, a.Expires = g.Granter, "grant", g.Issued, g.Expires
	default:
		return nil
	}
	return a
}

// ExplainDecision explains a decision the gate just made (status, before a
// run): d may be nil when the plan itself could not be judged.
func ExplainDecision(d *Decision, op *operations.Operation, policyDigest string, unreadable int, r *refusal.Error, at time.Time) *Explanation {
	in := ExplainInput{PolicyDigest: policyDigest, Slot: -1, Unreadable: unreadable, Refusal: r, At: at}
	if op != nil {
		in.Operation, in.OperationDigest = op.Name, op.Digest
	}
	if d != nil {
		in.Evidence = d.Evidence
		in.AnchorUses = d.AnchorUses
		if r == nil {
			in.Path = d.Path
			for _, s := range d.Relied {
				in.Relied = append(in.Relied, s.ID)
			}
		}
	}
	return Explain(in)
}
