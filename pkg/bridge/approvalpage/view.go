package approvalpage

import (
	"encoding/json"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/visible"
)

// viewJSON is a bridge.View as the page shows it: what the Slack and
// GitHub messages show, from the same view, in fields the page lays out.
type viewJSON struct {
	Fingerprint string `json:"fingerprint"`
	Operation   string `json:"operation"`
	Target      string `json:"target"`
	Mutating    bool   `json:"mutating"`
	// Argv is each element as a visible.Word, quoted on its own when it
	// holds more than safe characters; the page boxes each, so argument
	// boundaries show (docs/adr/0062-showing-agent-text.md).
	Argv []string `json:"argv"`
	// Cwd, like the files' paths, is a visible.Word.
	Cwd     string      `json:"cwd"`
	Env     []envJSON   `json:"env"`
	Files   []fileJSON  `json:"files"`
	Diffs   []diffJSON  `json:"diffs"`
	Planner string      `json:"planner"`
	Created time.Time   `json:"created"`
	Record  *recordJSON `json:"record"`
	// RecordProblem says why the record does not count, or "".
	RecordProblem string       `json:"record_problem,omitempty"`
	Uses          []string     `json:"uses"`
	Answers       []answerJSON `json:"answers"`
	Gate          string       `json:"gate"`
	GateWhy       string       `json:"gate_why,omitempty"`
	Missing       []string     `json:"missing,omitempty"`
	Closed        bool         `json:"closed"`
	Approvers     int          `json:"approvers"`
	VetoRule      string       `json:"veto_rule"`
}

type envJSON struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
}

type fileJSON struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

type diffJSON struct {
	File  string   `json:"file"`
	Lines []string `json:"lines"`
}

type recordJSON struct {
	ID          string    `json:"id"`
	Filer       string    `json:"filer"`
	Issued      time.Time `json:"issued"`
	Expires     time.Time `json:"expires"`
	Certainty   string    `json:"certainty"`
	Summary     string    `json:"summary"`
	Effect      string    `json:"effect"`
	BlastRadius string    `json:"blast_radius"`
	Rollback    string    `json:"rollback"`
}

type answerJSON struct {
	By      string    `json:"by"`
	Verdict string    `json:"verdict"`
	Issued  time.Time `json:"issued"`
	Via     string    `json:"via"`
	Valid   bool      `json:"valid"`
	Why     string    `json:"why,omitempty"`
}

// Shown is the decision as the page's script receives it from
// /api/decision/FP: every string in it is set as an element's text
// (assets/app.js), so what it holds is what the approver reads.
func Shown(j *bridge.Judgement, v *bridge.View) ([]byte, error) {
	return json.Marshal(viewOf(j, v))
}

func viewOf(j *bridge.Judgement, v *bridge.View) *viewJSON {
	p := v.Plan
	out := &viewJSON{Fingerprint: p.Fingerprint, Operation: p.Operation, Target: visible.Word(p.Target), Mutating: p.Mutating,
		Argv: make([]string, len(p.Argv)), Cwd: visible.Word(p.Cwd), Planner: p.Planner, Created: p.Created,
		RecordProblem: v.RecordProblem, Uses: bridge.UseLines(v), Gate: v.Gate, GateWhy: v.GateWhy, Missing: v.Missing,
		Closed: v.Closed(), Approvers: v.Approvers, VetoRule: bridge.VetoRule,
		Env: []envJSON{}, Files: []fileJSON{}, Diffs: []diffJSON{}, Answers: []answerJSON{}}
	for i, a := range p.Argv {
		out.Argv[i] = visible.Word(a)
	}
	for _, e := range p.Env {
		// Names only: a value is the plan's, and a secret is bound by
		// name alone.
		out.Env = append(out.Env, envJSON{Name: e.Name, Kind: e.Kind})
	}
	for _, f := range p.Files {
		out.Files = append(out.Files, fileJSON{Name: visible.Text(f.Name), Path: visible.Word(f.Path), Size: f.Size, SHA256: f.SHA256})
	}
	for _, d := range v.Diffs {
		out.Diffs = append(out.Diffs, diffJSON{File: visible.Text(d.File), Lines: bridge.DiffLines(d)})
	}
	if r := v.Record; r != nil {
		out.Record = &recordJSON{ID: v.RecordID, Filer: r.Filer, Issued: r.Issued, Expires: r.Expires, Certainty: visible.Text(r.Certainty),
			Summary: visible.Text(r.Summary), Effect: visible.Text(r.Effect), BlastRadius: visible.Text(r.BlastRadius), Rollback: visible.Text(r.Rollback)}
	}
	passkey := map[string]*approval.PasskeySeen{}
	if j.Decision != nil {
		for _, a := range j.Decision.Evidence {
			if a.Passkey != nil {
				passkey[a.ID] = a.Passkey
			}
		}
	}
	for _, a := range v.Answers {
		via := "key"
		switch {
		case passkey[a.ID] != nil:
			via = "passkey"
			if passkey[a.ID].UserVerified {
				via = "passkey, user verified"
			}
		case a.Channel != nil:
			via = a.Channel.Kind
		}
		out.Answers = append(out.Answers, answerJSON{By: a.By, Verdict: a.Verdict, Issued: a.Issued, Via: via, Valid: a.Valid, Why: a.Why})
	}
	return out
}
