package bridge

import (
	"fmt"
	"strings"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/visible"
)

// The text a bridge shows comes partly from the agent (params, file paths,
// pass variables) and the operator (the record's fields). It is rendered as
// plain text only — Slack plain_text objects, GitHub code blocks, the
// page's textContent — through package visible, the one rule for every
// surface (docs/adr/0062-showing-agent-text.md): every code point that
// would not show as itself is escaped and every argv element is quoted on
// its own, so what the approver reads is what runs.

// VetoRule states the veto rule of docs/DESIGN.md §3 as every surface shows it (the
// GitHub issue, Slack's confirm dialog, decide --help).
const VetoRule = "A deny is a veto: it wins over every approval, and approvals given before the veto expires never count again; anyone holding the approver role may deny, the planner and the filer included. Nobody approves a plan they planned or a record they filed."

// Title is a one-line name of the decision.
func Title(v *View) string {
	return fmt.Sprintf("prod-write decision: %s on %s", visible.Text(v.Plan.Operation), visible.Word(v.Plan.Target))
}

// PlanLines describes the plan: everything its fingerprint binds that a
// human can judge.
func PlanLines(p *operations.Plan) []string {
	mut := "mutating"
	if !p.Mutating {
		mut = "not mutating"
	}
	lines := []string{
		"Fingerprint: " + p.Fingerprint,
		fmt.Sprintf("Operation:   %s (%s)", p.Operation, mut),
		"Target:      " + visible.Word(p.Target),
		"Argv:        " + visible.Argv(p.Argv),
		"Cwd:         " + visible.Word(p.Cwd),
		"Program:     " + p.ProgramSHA256,
	}
	if ip := p.Interpreter; ip != nil {
		lines = append(lines, fmt.Sprintf("Interpreter: %s (%s)", visible.Word(ip.Path), ip.SHA256))
	}
	for _, f := range p.Files {
		lines = append(lines, fmt.Sprintf("File:        %s = %s (%d bytes, %s)", visible.Text(f.Name), visible.Word(f.Path), f.Size, f.SHA256))
	}
	for _, e := range p.Env {
		switch e.Kind {
		case operations.EnvSecret:
			lines = append(lines, fmt.Sprintf("Env:         %s (secret: bound by name only)", e.Name))
		case operations.EnvUnset:
			lines = append(lines, fmt.Sprintf("Env:         %s (unset)", e.Name))
		default:
			lines = append(lines, fmt.Sprintf("Env:         %s=%s", e.Name, visible.Word(e.Value)))
		}
	}
	if pb := p.Precondition; pb != nil {
		// What the approval is given for includes the state the check saw
		// (docs/adr/0025-preconditions.md): run checks it again and refuses
		// if it changed.
		lines = append(lines, fmt.Sprintf("Precondition: %s printed %s when planned; run checks it again before anything is spent", visible.Word(pb.Check), pb.OutputSHA256))
		if out := p.PreconditionOutput; out != nil {
			shown := *out
			if len(shown) > maxPreconditionShown {
				shown = shown[:maxPreconditionShown] + "…"
			}
			lines = append(lines, "Check output: "+visible.Quote(shown))
		}
	}
	lines = append(lines, fmt.Sprintf("Planned by:  %s at %s", p.Planner, stamp(p.Created)))
	return lines
}

// maxPreconditionShown bounds how much of a check's output (kept in the
// plan only when the operation says show_output) a message shows.
const maxPreconditionShown = 500

// RecordLines describes the certainty record of v.
func RecordLines(v *View) []string {
	if v.Record == nil && v.RecordProblem != "" {
		return []string{fmt.Sprintf("Certainty record %s: unreadable, it does not count: %s", v.RecordID, v.RecordProblem)}
	}
	if v.Record == nil {
		return []string{fmt.Sprintf("Certainty record %s: not found or does not verify", v.RecordID)}
	}
	r := v.Record
	lines := []string{
		"Record:       " + v.RecordID,
		fmt.Sprintf("Filed by:     %s at %s", r.Filer, stamp(r.Issued)),
		"Expires:      " + stamp(r.Expires),
		"Certainty:    " + visible.Text(r.Certainty),
		"Summary:      " + visible.Text(r.Summary),
		"Effect:       " + visible.Text(r.Effect),
		"Blast radius: " + visible.Text(r.BlastRadius),
		"Rollback:     " + visible.Text(r.Rollback),
	}
	if v.RecordProblem != "" {
		lines = append(lines, "Does not count: "+v.RecordProblem)
	}
	return lines
}

// UseLines say what an approval given on the decision allows: how many
// runs and for how long (the record+approvals path, the only one the
// bridges ask for).
func UseLines(v *View) []string {
	need := "1 approval lets"
	if v.Approvers > 1 {
		need = fmt.Sprintf("%d approvals from different approvers let", v.Approvers)
	}
	lines := []string{
		"Single use: " + need + " exactly one run of this invocation (this fingerprint) happen; that run spends the certainty record, and nothing runs again on it.",
		"Lifetime: an approval given here counts for " + Duration(approval.DefaultAnswerTTL) + " from when it is given",
	}
	if v.Record != nil {
		lines[1] += ", and never after the certainty record expires at " + stamp(v.Record.Expires)
	}
	lines[1] += "."
	return lines
}

// PageLines point approvers at the decision on the approval page, where
// they sign their answer with their own passkey; none when no page is
// served or the decision is closed.
func PageLines(v *View) []string {
	if v.PageURL == "" || v.Closed() {
		return nil
	}
	return []string{"Approve or deny with your passkey: " + v.PageURL}
}

// DiffLines show what a file parameter holds: its content as the plan
// binds it, as a unified diff against the file it replaces when the
// operation names one, or why it is not shown (see [DiffRules]).
func DiffLines(d FileDiff) []string {
	planned := "+++ " + visible.Text(d.File) + " (planned, as the fingerprint binds it)"
	if d.Against == "" {
		lines := []string{fmt.Sprintf("File %s holds:", visible.Text(d.File))}
		switch {
		case d.NotShown != "":
			return append(lines, "Not shown: "+visible.Text(d.NotShown))
		case len(d.Hunks) == 0:
			return append(lines, "(nothing: the file is empty)")
		}
		lines = append(lines, "--- (nothing)", planned)
		return cutLines(lines, d)
	}
	cur := visible.Word(d.Against)
	if d.Created {
		cur += " (does not exist yet)"
	}
	lines := []string{fmt.Sprintf("File %s replaces %s", visible.Text(d.File), cur)}
	switch {
	case d.NotShown != "":
		return append(lines, "No diff shown: "+visible.Text(d.NotShown))
	case len(d.Hunks) == 0:
		return append(lines, "No change: the new file is the same as the current one.")
	}
	lines = append(lines, "--- "+cur+" (current)", planned)
	return cutLines(lines, d)
}

// cutLines appends d's hunks to lines, and says where they were cut.
func cutLines(lines []string, d FileDiff) []string {
	lines = append(lines, d.Hunks...)
	if d.Cut {
		lines = append(lines, fmt.Sprintf("… (diff cut at %d lines or %d bytes: see the file itself)", DiffMaxLines, DiffMaxBytes))
	}
	return lines
}

// StatusLines describe the answers so far and what the gate says now.
func StatusLines(v *View) []string {
	var lines []string
	for _, a := range v.Answers {
		if a.Unreadable {
			lines = append(lines, fmt.Sprintf("Unreadable answer %.12s… — does not count: %s", a.ID, a.Why))
			continue
		}
		via := "CLI"
		if a.Passkey {
			via = "passkey"
		} else if a.Channel != nil {
			switch a.Channel.Kind {
			case KindSlack:
				via = "Slack " + a.Channel.SlackUser
			case KindGitHub:
				via = fmt.Sprintf("GitHub @%s, comment %d", a.Channel.GitHubLogin, a.Channel.GitHubComment)
				if a.Channel.GitHubReview != 0 {
					via = fmt.Sprintf("GitHub @%s, review %d", a.Channel.GitHubLogin, a.Channel.GitHubReview)
				}
			}
		}
		l := fmt.Sprintf("%s by %s (%s) at %s", a.Verdict, a.By, via, stamp(a.Issued))
		if a.Record != "" && a.Record != v.RecordID {
			l += fmt.Sprintf(", answering another record %.12s…", a.Record)
		}
		if !a.Valid {
			l += " — does not count: " + a.Why
		}
		lines = append(lines, l)
	}
	switch {
	case v.Withdrawn:
		lines = append(lines, "Withdrawn by the planner: this plan can never run.")
	case v.Vetoed:
		lines = append(lines, "Vetoed: "+v.GateWhy)
	case v.Gate == "open":
		lines = append(lines, "Gate: open — `prod-write run "+v.Plan.Fingerprint+"` may run it.")
	default:
		l := "Gate: closed (" + v.Gate + ")"
		if len(v.Missing) > 0 {
			l += "; missing: " + strings.Join(v.Missing, "; ")
		}
		lines = append(lines, l)
	}
	return lines
}

// Duration is d for people: "1h", "1h30m", "45s".
func Duration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }
