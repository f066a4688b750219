package approval

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// ClockSkew is how far in the future a record's issue time may lie.
const ClockSkew = 5 * time.Minute

// Input is everything the gate judges. It is pure data: the gate reads no
// clock, file or network, so run, status and replay reach the same verdict
// from the same input.
type Input struct {
	Plan     *Envelope
	Evidence []*Envelope
	// Unreadable names evidence the store holds for the plan but could
	// not read or decode (store.Problem): the gate refuses while there is
	// any, since it may be a veto.
	Unreadable []string
	Policy     *Policy
	Op         *operations.Operation
	Now        time.Time
	// Used counts how often each record (by ID) was already consumed.
	Used map[string]int
	// Precondition is what the caller saw when it ran the plan's
	// precondition check just now (run), or what an intent recorded that
	// run saw (replay). See docs/adr/0025-preconditions.md.
	Precondition *operations.PreconditionSeen
	// PreconditionUnchecked says the caller did not run the check (status,
	// the bridges): the gate judges everything else and marks the
	// decision. Run and replay never set it; without it, a plan that
	// binds a precondition and comes with no observation is refused.
	PreconditionUnchecked bool
	// BreakGlass is what is known of the earlier break-glass runs of the
	// principals who signed a break-glass record of this plan, and of the
	// reviews of them (docs/adr/0028-break-glass.md). Run
	// reads it from the store, replay from the journal.
	BreakGlass BreakGlassHistory
	// SignCounts is the highest sign count seen of each passkey credential
	// (base64url id) before this evaluation: run reads it from the store,
	// replay keeps it along the journal. A passkey decision must carry a
	// higher one (ADR 0043).
	SignCounts map[string]uint32
}

// Assessed is one piece of evidence as the gate saw it.
type Assessed struct {
	ID string `json:"id"`
	// Kind is what the record is, in the words people read (ADR
	// 0014): KindGera, KindRecord, KindAnswer or KindWithdrawal.
	Kind string `json:"kind"`
	// By is the principal who acts through the record (the approver a
	// bridge attests for; else the signer).
	By     string `json:"actor,omitempty"`
	Signer string `json:"signer,omitempty"`
	// Path is the approval path the record serves, as people name it
	// (operations.PathName).
	Path    string        `json:"path,omitempty"`
	Verdict string        `json:"verdict"` // go, no-go, approve, deny, record, withdraw
	Record  string        `json:"record,omitempty"`
	Issued  time.Time     `json:"issued"`
	Expires time.Time     `json:"expires,omitzero"`
	Uses    int           `json:"uses,omitempty"`
	Used    int           `json:"used"`
	Valid   bool          `json:"valid"`
	Problem *refusal.Code `json:"problem,omitempty"`
	// Cause is why evidence_unreadable evidence could not be verified
	// (signature_invalid, principal_unknown), for replay's report.
	Cause   refusal.Code `json:"cause,omitempty"`
	Why     string       `json:"why,omitempty"`
	Channel *Channel     `json:"channel,omitempty"`
	// Freeze is the freeze a freeze grant lets the plan through.
	Freeze string `json:"freeze,omitempty"`
	// Reason and Incident are a break-glass record's.
	Reason   string  `json:"reason,omitempty"`
	Incident string  `json:"incident,omitempty"`
	Signed   *Signed `json:"-"`
	// Passkey is what the gate verified of a passkey decision: its
	// credential, sign count and whether the user was verified.
	Passkey  *PasskeySeen `json:"passkey,omitempty"`
	relevant bool
	// authentic: signature, binding, role and separation of duties hold;
	// only time (issue, expiry) or use may still make it not count.
	authentic bool
}

// Authentic reports whether a's signature, binding, role and separation
// of duties hold, whatever its times: a veto that is authentic and not
// expired refuses even when it is not valid (issued in the future).
func (a *Assessed) Authentic() bool { return a.authentic }

// veto reports whether a is a veto: a Gera no-go or a Trinity deny.
func (a *Assessed) veto() bool { return a.Verdict == NoGo || a.Verdict == Deny }

// Decision is the gate's verdict.
type Decision struct {
	Plan    *operations.Plan `json:"-"`
	Planner string           `json:"planner"`
	// Path is "gera", "smith+trinity" (the stored spelling of
	// record+approvals, which receipts carry), or "none" for a
	// non-mutating operation. Empty when refused.
	Path string `json:"path,omitempty"`
	// Anchor is the record whose consumption spends this approval; empty
	// for a non-mutating operation.
	Anchor string `json:"anchor,omitempty"`
	// AnchorUses is how many times the anchor may be consumed.
	AnchorUses int `json:"anchor_uses,omitempty"`
	// Relied lists the evidence the approval rests on, anchor first.
	Relied   []*Signed   `json:"-"`
	Evidence []*Assessed `json:"evidence"`
	// Granted are the freeze grants that let the plan through the
	// freezes in force (not consumed; kept in the intent for replay).
	Granted []*Signed `json:"-"`
	// PreconditionUnchecked: the plan binds a precondition that this
	// evaluation did not re-check (Input.PreconditionUnchecked); run will.
	PreconditionUnchecked bool `json:"precondition_unchecked,omitempty"`
	// Breaker is who broke glass, on the break-glass path; BreakGlassLink
	// is the second anchor the run consumes (one run per breaker and
	// count of earlier runs) and BreakGlassReviews the reviews of the
	// breaker's earlier runs that let it break glass again, kept in the
	// intent for replay.
	Breaker           string    `json:"breaker,omitempty"`
	BreakGlassLink    string    `json:"-"`
	BreakGlassReviews []*Signed `json:"-"`
}

// Evaluate is the gate of docs/DESIGN.md §3. It returns the decision and, when the
// plan may not run, a *refusal.Error. The decision is returned either way
// (nil only when the plan itself cannot be opened), so status can show
// every piece of evidence and why it does or does not count.
//
// It checks rules 1, 3, 4, 5 and 6; rule 2 (the fingerprint recomputed from
// reality) is the caller's, since it needs the file system, and rule 7
// (atomic consumption) is the store's.
func Evaluate(in Input) (*Decision, error) {
	plan, ps, err := in.Policy.DecodePlan(in.Plan)
	if err != nil {
		return nil, err
	}
	fp := plan.Fingerprint
	if !ps.Signer.InForce(in.Now) {
		return nil, refusal.New(refusal.PrincipalUnknown, "plan is signed by %s, whose key does not count at %s (trust.toml since/revoked_at)", ps.Signer.ID, in.Now.UTC().Format(time.RFC3339)).For(plan.Operation, fp)
	}
	refuse := func(code refusal.Code, format string, args ...any) *refusal.Error {
		return refusal.New(code, format, args...).For(plan.Operation, fp)
	}
	if in.Op == nil || in.Op.Name != plan.Operation {
		return nil, refuse(refusal.OperationAbsent, "operation %q is not in the registry", plan.Operation)
	}
	if plan.OperationDigest != in.Op.Digest {
		return nil, refuse(refusal.FingerprintMismatch, "operation %s changed since it was planned (digest %s, now %s)", plan.Operation, short(plan.OperationDigest), short(in.Op.Digest)).Needs("a new plan")
	}
	if plan.Mutating != in.Op.IsMutating() {
		return nil, refuse(refusal.FingerprintMismatch, "the plan's mutating flag does not match operation %s", plan.Operation)
	}
	d := &Decision{Plan: plan, Planner: plan.Planner}
	if len(in.Unreadable) > 0 {
		return d, refuse(refusal.EvidenceUnreadable, "evidence for this plan cannot be read: %s; it may be a veto, so nothing runs until it is repaired or removed", in.Unreadable[0]).Needs("readable evidence (prod-write status, prod-write doctor)")
	}
	records, filers := map[string]*Assessed{}, map[string]string{}
	for _, env := range in.Evidence {
		a := assess(in, plan, env)
		d.Evidence = append(d.Evidence, a)
		if a.Kind == KindRecord && a.Signed != nil {
			filers[a.ID] = a.By
			if a.Valid {
				records[a.ID] = a
			}
		}
	}
	// Evidence that cannot be decoded or verified may be a veto: refuse
	// rather than drop it (docs/DESIGN.md §3 rule 3).
	for _, a := range d.Evidence {
		if a.Problem != nil && *a.Problem == refusal.EvidenceUnreadable {
			return d, refuse(refusal.EvidenceUnreadable, "%s record %.12s… cannot be verified: %s; it may be a veto, so nothing runs until it is repaired or removed", a.Kind, a.ID, a.Why).Needs("readable evidence (prod-write status, prod-write doctor)")
		}
	}
	for _, a := range d.Evidence {
		if a.Kind != KindAnswer || !a.Valid || a.Record == "" {
			continue
		}
		// No principal approves the record it filed (docs/DESIGN.md §3 rule 6); a
		// deny is a veto, which the filer may cast.
		if filers[a.Record] == a.By && a.Verdict == Approve {
			c := refusal.SelfApproval
			a.Valid, a.Problem, a.Why = false, &c, fmt.Sprintf("%s filed the certainty record and cannot also answer it", a.By)
			continue
		}
		// An approval counts only for a valid record of this plan.
		if _, ok := records[a.Record]; !ok && a.Verdict == Approve {
			a.Valid, a.Why = false, "answers no valid certainty record of this plan"
		}
	}
	sort.SliceStable(d.Evidence, func(i, j int) bool { return d.Evidence[i].Issued.Before(d.Evidence[j].Issued) })

	for _, a := range d.Evidence {
		if a.Valid && a.Kind == KindWithdrawal {
			return d, refuse(refusal.Withdrawn, "%s withdrew this plan; a withdrawn plan never runs", a.By)
		}
	}
	if err := judgePrecondition(in, plan, d); err != nil {
		return d, err.For(plan.Operation, fp)
	}
	if !plan.Mutating {
		d.Path = "none"
		return d, nil
	}
	// A veto in force refuses. One that has expired does not lapse into a
	// yes: every go, record or approval issued before it expired never
	// counts again; only decisions made after it can open the gate.
	var lapsed *Assessed
	for _, a := range d.Evidence {
		if !a.authentic || !a.veto() {
			continue
		}
		if in.Now.Before(a.Expires) {
			return d, refuse(refusal.Vetoed, "%s answered %s: a veto wins over any approval", a.By, a.Verdict)
		}
		if lapsed == nil || a.Expires.After(lapsed.Expires) {
			lapsed = a
		}
	}
	if lapsed != nil {
		for _, a := range d.Evidence {
			if a.Valid && !a.veto() && a.Issued.Before(lapsed.Expires) {
				c := refusal.Vetoed
				a.Valid, a.Problem = false, &c
				a.Why = fmt.Sprintf("issued before %s's %s expired at %s: a veto never lapses into a yes", lapsed.By, lapsed.Verdict, lapsed.Expires.Format(time.RFC3339))
				delete(records, a.ID)
			}
		}
	}

	// A freeze wins over any approval: only a grant of this plan through
	// each freeze in force opens it (docs/adr/0021-freezes.md).
	if frozen := in.Policy.Frozen(plan.Operation, plan.Target, in.Now); len(frozen) > 0 {
		var held []*Freeze
		for _, fr := range frozen {
			g := grantFor(d.Evidence, fr.Name)
			if g == nil {
				held = append(held, fr)
			} else if !slices.Contains(d.Granted, g.Signed) {
				d.Granted = append(d.Granted, g.Signed)
			}
		}
		if len(held) > 0 {
			d.Granted = nil
			return d, refuse(refusal.Frozen, "%s", frozenReason(held[0], len(held)-1)).Needs("a freeze grant for " + joinNames(held) + " (prod-write freeze grant, role freeze)")
		}
	}

	var missing []string
	if in.Op.Accepts(operations.PathSmithTrinity) {
		best, bestCount := "", -1
		var bestApprovals []*Assessed
		for _, rec := range d.Evidence {
			if !rec.Valid || rec.Kind != KindRecord || rec.Used > 0 {
				continue
			}
			seen := map[string]bool{}
			var approvals []*Assessed
			for _, a := range d.Evidence {
				if a.Valid && a.Kind == KindAnswer && a.Verdict == Approve && a.Record == rec.ID && !seen[a.By] {
					seen[a.By] = true
					approvals = append(approvals, a)
				}
			}
			if len(approvals) > bestCount {
				best, bestCount, bestApprovals = rec.ID, len(approvals), approvals
			}
		}
		if bestCount >= in.Op.Approval.Approvers {
			d.Path, d.Anchor, d.AnchorUses = operations.PathSmithTrinity, best, 1
			d.Relied = append(d.Relied, records[best].Signed)
			for _, a := range bestApprovals[:in.Op.Approval.Approvers] {
				d.Relied = append(d.Relied, a.Signed)
			}
			return d, nil
		}
		if bestCount < 0 {
			missing = append(missing, "an operator's certainty record")
			bestCount = 0
		}
		missing = append(missing, fmt.Sprintf("%d of %d approvals", in.Op.Approval.Approvers-bestCount, in.Op.Approval.Approvers))
	}
	if in.Op.Accepts(operations.PathGera) {
		for _, a := range d.Evidence {
			if a.Valid && a.Verdict == Go && a.Used < a.Uses {
				d.Path, d.Anchor, d.AnchorUses = operations.PathGera, a.ID, a.Uses
				d.Relied = []*Signed{a.Signed}
				return d, nil
			}
		}
		missing = append(missing, "a gera go")
	}
	// The break-glass path, last: an escape when no usual path opens the
	// gate (docs/adr/0028-break-glass.md).
	if in.Op.Accepts(operations.PathBreakGlass) {
		bg, r := breakGlassRule(in, plan, d)
		if r != nil {
			return d, r.For(plan.Operation, fp)
		}
		if bg != nil {
			return d, nil
		}
	}

	// Not allowed: name the most telling reason among the evidence that
	// was relevant but did not count.
	code := refusal.NoApproval
	why := fmt.Sprintf("no valid approval for this plan (accepted paths: %s)", strings.Join(operations.PathNames(in.Op.Approval.Paths), ", "))
	for _, c := range []refusal.Code{refusal.Vetoed, refusal.SelfApproval, refusal.EvidenceConsumed, refusal.EvidenceExpired, refusal.SignatureInvalid, refusal.PrincipalUnknown, refusal.RoleMissing} {
		if a := firstProblem(d.Evidence, c); a != nil {
			code, why = c, fmt.Sprintf("%s %.12s… does not count: %s", evidenceName(a.Kind), a.ID, a.Why)
			break
		}
	}
	if code == refusal.NoApproval {
		for _, a := range d.Evidence {
			if a.Kind == KindAnswer && a.relevant && a.Problem != nil && *a.Problem == refusal.NoApproval && a.Verdict == Approve && in.Policy.PasskeyRequired(plan.Operation, plan.Target) {
				why = fmt.Sprintf("answer %.12s… does not count: %s", a.ID, a.Why)
				missing = append(missing, "an approval made with the approver's passkey")
				break
			}
		}
		for _, a := range d.Evidence {
			if a.Kind == KindBreakGlass && a.relevant && !a.Valid && a.Problem != nil {
				why = fmt.Sprintf("%s %.12s… does not count: %s", evidenceName(a.Kind), a.ID, a.Why)
				break
			}
		}
	}
	return d, refuse(code, "%s", why).Needs(missing...)
}

// judgePrecondition is the precondition rule
// (docs/adr/0025-preconditions.md): a plan of an operation with a
// precondition binds the check and its output, and opens the gate only when
// the check, run again now, ran the same check plan and printed the same
// bytes with exit status 0. It comes before vetoes, freezes and approvals,
// since a stale plan should be re-planned whatever its approvals (a changed
// world is not made right by approving it again).
func judgePrecondition(in Input, plan *operations.Plan, d *Decision) *refusal.Error {
	want := plan.Precondition
	if in.Op.Precondition == nil {
		if want != nil {
			return refusal.New(refusal.FingerprintMismatch, "the plan binds a precondition that operation %s does not declare", plan.Operation)
		}
		return nil
	}
	if want == nil || want.Check != in.Op.Precondition.Check {
		return refusal.New(refusal.PreconditionChanged, "operation %s needs precondition %s, which the plan does not bind", plan.Operation, in.Op.Precondition.Check).Needs("a new plan")
	}
	if in.PreconditionUnchecked {
		d.PreconditionUnchecked = true
		return nil
	}
	seen := in.Precondition
	switch {
	case seen == nil:
		return refusal.New(refusal.PreconditionChanged, "precondition %s was not run again before this run", want.Check).Needs("the precondition re-checked by run")
	case seen.CheckFingerprint != want.CheckFingerprint:
		return refusal.New(refusal.PreconditionChanged, "the check that ran (%s) is not the precondition the plan binds (%s)", short(seen.CheckFingerprint), short(want.CheckFingerprint)).Needs("a new plan")
	case seen.CheckPlan == nil:
		return refusal.New(refusal.PreconditionChanged, "what run saw of precondition %s does not carry the check's own plan, so whether it is this plan's check cannot be judged", want.Check).Needs("the precondition re-checked by run")
	}
	// Which check the plan binds is a rule over signed records, not
	// something run observes: judged here, on the check's own plan, so
	// replay judges it too (docs/adr/0032-the-gate-judges-the-precondition-check.md).
	check, _, err := in.Policy.DecodePlan(seen.CheckPlan)
	if err != nil {
		return refusal.New(refusal.PreconditionChanged, "the plan of precondition %s does not verify: %v", want.Check, err).Needs("a new plan")
	}
	if check.Fingerprint != want.CheckFingerprint {
		return refusal.New(refusal.PreconditionChanged, "the check plan run saw (%s) is not the one the plan binds (%s)", short(check.Fingerprint), short(want.CheckFingerprint)).Needs("a new plan")
	}
	if err := IsPreconditionCheck(in.Op, plan, check); err != nil {
		return refusal.New(refusal.PreconditionChanged, "%v", err).Needs("a new plan")
	}
	switch {
	case seen.ExitCode != 0:
		return refusal.New(refusal.PreconditionChanged, "precondition %s exited %d now; it succeeded when planned", want.Check, seen.ExitCode).Needs("a new plan of what is there now")
	case seen.OutputSHA256 != want.OutputSHA256:
		return refusal.New(refusal.PreconditionChanged, "precondition %s prints something else now (%s, planned %s): the world changed since the plan was approved", want.Check, short(seen.OutputSHA256), short(want.OutputSHA256)).Needs("a new plan of what is there now")
	}
	return nil
}

// grantFor returns a valid freeze grant of the plan through freeze name.
func grantFor(ev []*Assessed, name string) *Assessed {
	for _, a := range ev {
		if a.Valid && a.Kind == KindFreezeGrant && a.Freeze == name {
			return a
		}
	}
	return nil
}

func firstProblem(ev []*Assessed, c refusal.Code) *Assessed {
	for _, a := range ev {
		if a.Problem != nil && *a.Problem == c && a.relevant {
			return a
		}
	}
	return nil
}

func short(digest string) string {
	if len(digest) > 19 {
		return digest[:19] + "…"
	}
	return digest
}

// assess judges one piece of evidence on its own: signature, kind, binding
// to this plan, the signer's role, separation of duties, expiry, use.
func assess(in Input, plan *operations.Plan, env *Envelope) *Assessed {
	a := &Assessed{relevant: true}
	fail := func(code refusal.Code, format string, args ...any) *Assessed {
		c := code
		a.Problem, a.Why, a.Valid = &c, fmt.Sprintf(format, args...), false
		return a
	}
	s, err := in.Policy.Open(env)
	if err != nil {
		if id, e := ID(env); e == nil {
			a.ID = id
		}
		r, _ := refusal.As(err)
		a.Kind = kindOf(env.PayloadType)
		// Not verifiable (a bad signature, a key of no principal, a
		// malformed envelope): whatever it says, it could be a veto.
		a.Cause = r.Code
		return fail(refusal.EvidenceUnreadable, "%s: %s", r.Code, r.Reason)
	}
	a.ID, a.Signed, a.Signer = s.ID, s, s.Signer.ID
	a.Kind = kindOf(s.Type)
	if !s.Signer.InForce(in.Now) {
		return fail(refusal.PrincipalUnknown, "%s %.12s… is signed by %s, whose key does not count at %s (trust.toml since/revoked_at)", evidenceName(a.Kind), a.ID, s.Signer.ID, in.Now.UTC().Format(time.RFC3339))
	}
	actor := s.Signer
	var fingerprint string
	var issued, expires time.Time
	var role string

	switch s.Type {
	case TypeGera:
		var g GeraDecision
		if err := s.Decode(&g); err != nil {
			return fail(refusal.EvidenceUnreadable, "%v", err)
		}
		fingerprint, issued, expires, role = g.Fingerprint, g.Issued, g.Expires, RoleGera
		a.By, a.Verdict, a.Path, a.Uses = g.Decider, g.Decision, operations.PathGera, g.Uses
		if g.Decision != Go && g.Decision != NoGo {
			return fail(refusal.SignatureInvalid, "gera decision %q is neither go nor no-go", g.Decision)
		}
		if g.Decision == Go && g.Uses < 1 {
			return fail(refusal.SignatureInvalid, "gera go with %d uses", g.Uses)
		}
	case TypeSmith:
		var c CertaintyRecord
		if err := s.Decode(&c); err != nil {
			return fail(refusal.EvidenceUnreadable, "%v", err)
		}
		fingerprint, issued, expires, role = c.Fingerprint, c.Issued, c.Expires, RoleOperator
		a.By, a.Verdict, a.Path, a.Uses = c.Filer, "record", operations.PathRecordApprovals, 1
	case TypeTrinity:
		var t Answer
		if err := s.Decode(&t); err != nil {
			return fail(refusal.EvidenceUnreadable, "%v", err)
		}
		fingerprint, issued, expires, role = t.Fingerprint, t.Issued, t.Expires, RoleApprover
		a.By, a.Verdict, a.Path, a.Record, a.Channel = t.Approver, t.Answer, operations.PathRecordApprovals, t.Record, t.Channel
		if t.Answer != Approve && t.Answer != Deny {
			return fail(refusal.SignatureInvalid, "answer %q is neither approve nor deny", t.Answer)
		}
		if t.Answer == Approve && t.Record == "" {
			return fail(refusal.NoApproval, "an approval must answer a certainty record")
		}
		// Where the policy asks for passkeys, an approval by any other
		// channel counts for nothing; a deny still vetoes (ADR 0043).
		if t.Answer == Approve && in.Policy.PasskeyRequired(plan.Operation, plan.Target) {
			return fail(refusal.NoApproval, "an approval of %s on %s counts only when made with the approver's passkey (trust.toml [passkey]): approve with your passkey", plan.Operation, plan.Target)
		}
		if t.Channel != nil {
			// A bridge attests an approver's answer it authenticated.
			if !s.Signer.Has(RoleBridge) {
				return fail(refusal.RoleMissing, "%s signed a channel answer without the bridge role", s.Signer.ID)
			}
			pr, ok := in.Policy.ByID(t.Approver)
			if !ok {
				return fail(refusal.PrincipalUnknown, "bridge names approver %q, who is not in the trust policy", t.Approver)
			}
			var mapped *Principal
			switch t.Channel.Kind {
			case "slack":
				mapped, ok = in.Policy.BySlack(t.Channel.SlackUser)
			case "github":
				// By the numeric user id, and only when the login agrees
				// (a renamed or re-registered login is never the principal).
				var r *refusal.Error
				mapped, r = in.Policy.ByGitHubAccount(t.Channel.GitHubLogin, t.Channel.GitHubUserID)
				ok = r == nil && mapped != nil
			default:
				ok = false
			}
			if !ok || mapped != pr {
				return fail(refusal.PrincipalUnknown, "channel identity does not map to %s", t.Approver)
			}
			actor = pr
		}
	case TypePasskey:
		var pd PasskeyDecision
		if err := s.Decode(&pd); err != nil {
			return fail(refusal.EvidenceUnreadable, "%v", err)
		}
		fingerprint, issued, expires, role = pd.Fingerprint, pd.Issued, pd.Expires, RoleApprover
		a.By, a.Verdict, a.Path, a.Record = pd.Approver, pd.Decision, operations.PathRecordApprovals, pd.Record
		if pd.Decision != Approve && pd.Decision != Deny {
			return fail(refusal.SignatureInvalid, "passkey decision %q is neither approve nor deny", pd.Decision)
		}
		if pd.Decision == Approve && pd.Record == "" {
			return fail(refusal.NoApproval, "an approval must answer a certainty record")
		}
		if pd.Fingerprint != plan.Fingerprint {
			break // not this plan's: judged irrelevant below
		}
		// The envelope is the storing service's (a bridge) or the
		// approver's own; the assertion is what makes it the approver's.
		if s.Signer.ID != pd.Approver && !s.Signer.Has(RoleBridge) {
			return fail(refusal.RoleMissing, "%s stored a passkey decision of %s without the bridge role", s.Signer.ID, pd.Approver)
		}
		if in.Policy.Passkey == nil {
			return fail(refusal.SignatureInvalid, "the trust policy has no [passkey] table, so no passkey decision verifies")
		}
		cred, seen, f := in.Policy.verifyPasskey(&pd, in.SignCounts)
		if f != nil {
			return fail(f.code, "%s", f.why)
		}
		a.Passkey, actor = seen, cred.principal
	case TypeFreezeGrant:
		var g FreezeGrant
		if err := s.Decode(&g); err != nil {
			return fail(refusal.EvidenceUnreadable, "%v", err)
		}
		fingerprint, issued, expires, role = g.Fingerprint, g.Issued, g.Expires, RoleFreeze
		a.By, a.Verdict, a.Freeze = g.Granter, "grant", g.Freeze
	case TypeBreakGlass:
		var problem string
		fingerprint, issued, expires, problem = assessBreakGlass(in, s, a)
		role = RoleBreakGlass
		if fingerprint == plan.Fingerprint && problem != "" {
			return fail(refusal.NoApproval, "%s", problem)
		}
	case TypeBreakGlassReview:
		// A review of an earlier break-glass run: not evidence for this
		// plan's gate (it reaches the gate through Input.BreakGlass).
		a.relevant, a.Verdict, a.Why = false, "review", "a review of a break-glass run, not an approval"
		return a
	case TypeWithdraw:
		var w Withdrawal
		if err := s.Decode(&w); err != nil {
			return fail(refusal.EvidenceUnreadable, "%v", err)
		}
		fingerprint, issued, role = w.Fingerprint, w.Issued, ""
		a.By, a.Verdict = w.Planner, "withdraw"
	default:
		return fail(refusal.SignatureInvalid, "unknown record type %q", s.Type)
	}
	a.Issued, a.Expires = issued, expires

	if fingerprint != plan.Fingerprint {
		a.relevant = false
		return fail(refusal.NoApproval, "bound to another fingerprint")
	}
	if a.By != actor.ID {
		return fail(refusal.SignatureInvalid, "record names %q but was signed for %s", a.By, actor.ID)
	}
	if s.Type == TypeWithdraw {
		// The one self-targeted action: only the planner, only its own plan.
		if actor.ID != plan.Planner {
			return fail(refusal.RoleMissing, "only the planner may withdraw a plan")
		}
		a.Valid = true
		return a
	}
	if !actor.Has(role) {
		return fail(refusal.RoleMissing, "%s lacks the %s role", actor.ID, role)
	}
	// The planner vouches for, approves or decides nothing of its own
	// plan; it may veto it, which only reduces what may run.
	// Break-glass is the one exception: letting a plan run on one's own
	// word is what it is, and its controls are the notification of the
	// skipped approvers and the review by another (ADR 0028).
	if actor.ID == plan.Planner && !a.veto() && s.Type != TypeBreakGlass {
		return fail(refusal.SelfApproval, "%s planned this and cannot also vouch for, approve or decide it", actor.ID)
	}
	a.authentic = true
	if issued.After(in.Now.Add(ClockSkew)) {
		return fail(refusal.EvidenceExpired, "issued in the future (%s)", issued.Format(time.RFC3339))
	}
	if !in.Now.Before(expires) {
		return fail(refusal.EvidenceExpired, "expired at %s", expires.Format(time.RFC3339))
	}
	a.Used = in.Used[a.ID]
	if a.Uses > 0 && a.Used >= a.Uses {
		return fail(refusal.EvidenceConsumed, "already consumed %d of %d uses", a.Used, a.Uses)
	}
	a.Valid = true
	return a
}

// Kinds of evidence as people read them (status, --json, messages). The
// payload types they come from keep their original names (TypeSmith,
// TypeTrinity): those are inside signed envelopes (ADR 0014).
const (
	KindGera       = "gera"
	KindRecord     = "record"
	KindAnswer     = "answer"
	KindWithdrawal = "withdrawal"
)

// evidenceName is how messages name a piece of evidence of kind (the
// words of ADR 0014): never "record record".
func evidenceName(kind string) string {
	switch kind {
	case KindRecord:
		return "certainty record"
	case KindGera:
		return "Gera decision"
	case KindAnswer, KindWithdrawal:
		return kind
	}
	return kind + " record"
}

func kindOf(payloadType string) string {
	switch payloadType {
	case TypeGera:
		return "gera"
	case TypeSmith:
		return KindRecord
	case TypeTrinity, TypePasskey:
		return KindAnswer
	case TypeWithdraw:
		return KindWithdrawal
	case TypePlan:
		return "plan"
	case TypeFreezeGrant:
		return KindFreezeGrant
	case TypeBreakGlass:
		return KindBreakGlass
	case TypeBreakGlassReview:
		return KindBreakGlassReview
	}
	return "unknown"
}
