package receipts

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/dsse"
)

// in-toto attestations of runs (docs/FORMAT.md §4,
// docs/adr/0019-in-toto-export.md): the journal stays in its own format,
// and `receipts export --in-toto` restates each run as an in-toto
// Statement v1 in a DSSE envelope, signed by the runner key, for tools that
// know in-toto and not prod-write.
const (
	// InTotoPayloadType is the DSSE payload type of an in-toto statement.
	InTotoPayloadType = "application/vnd.in-toto+json"
	// StatementV1 is the in-toto Statement's _type.
	StatementV1 = "https://in-toto.io/Statement/v1"
	// RunPredicateV1 is the predicateType of a run; a change to the
	// predicate's meaning is a new version.
	RunPredicateV1 = "https://github.com/prod-write/prod-write/attestation/run/v1"
)

// Statement is an in-toto Statement v1.
type Statement struct {
	Type          string    `json:"_type"`
	Subject       []Subject `json:"subject"`
	PredicateType string    `json:"predicateType"`
	Predicate     any       `json:"predicate"`
}

// Subject is one artifact a statement is about: its name and sha256 (hex,
// without a prefix, as in-toto's DigestSet spells it).
type Subject struct {
	Name   string            `json:"name"`
	Digest map[string]string `json:"digest"`
}

// RunPredicate is what a run's statement says (RunPredicateV1).
type RunPredicate struct {
	RunID           string      `json:"run_id"`
	Host            string      `json:"host"`
	Runner          string      `json:"runner"`
	Operation       string      `json:"operation"`
	OperationDigest string      `json:"operation_digest"`
	Fingerprint     string      `json:"fingerprint"`
	Target          string      `json:"target"`
	Argv            []string    `json:"argv"`
	Cwd             string      `json:"cwd"`
	PolicyDigest    string      `json:"policy_digest"`
	Decision        RunDecision `json:"decision"`
	Intent          ReceiptRef  `json:"intent"`
	Outcome         *RunOutcome `json:"outcome"`
	Explanation     string      `json:"explanation"`
}

// RunDecision is the gate's decision as the intent records it.
type RunDecision struct {
	// Path is "gera", "record+approvals" or "none".
	Path    string `json:"path"`
	Planner string `json:"planner"`
	Anchor  string `json:"anchor"`
	// Use of Uses: the use of the anchor the run spent (1-based); both 0
	// for a run that needed no approval.
	Use  int `json:"use"`
	Uses int `json:"uses"`
	// Evidence is the id of every record the intent carries: what the gate
	// relied on and every veto or withdrawal it saw.
	Evidence  []string   `json:"evidence"`
	Approvers []Approver `json:"approvers"`
	// DecisionID is the id of the gate decision in the decision log
	// (empty for receipts written before it existed).
	DecisionID string `json:"decision_id"`
}

// Approver is one principal whose record the run relied on.
type Approver struct {
	Principal string `json:"principal"`
	Kind      string `json:"kind"`    // gera, record, answer
	Channel   string `json:"channel"` // slack, github, cli; "" for a Gera go or a record
	Record    string `json:"record"`
}

// ReceiptRef names a journal entry: its sequence number, the sha256 of its
// line and its time.
type ReceiptRef struct {
	Seq    uint64    `json:"seq"`
	SHA256 string    `json:"sha256"`
	Time   time.Time `json:"time"`
}

// RunOutcome is the outcome receipt's account of the run.
type RunOutcome struct {
	ReceiptRef
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal"`
	TimedOut   bool   `json:"timed_out"`
	Error      string `json:"error"`
	DurationNS int64  `json:"duration_ns"`
	Stdout     Stream `json:"stdout"`
	Stderr     Stream `json:"stderr"`
}

// UnverifiedError is returned by [ExportInToto] for a journal line that is
// not signed by a runner of the policy: export attests only what a runner
// signed.
type UnverifiedError struct {
	Line int
	Err  error
}

func (e *UnverifiedError) Error() string {
	return fmt.Sprintf("journal line %d: %v (run replay)", e.Line, e.Err)
}

func (e *UnverifiedError) Unwrap() error { return e.Err }

// RunStatement restates an intent (and its outcome, nil when the journal has
// none) as an in-toto statement. intentHash is the sha256 of the intent's
// line.
func RunStatement(intent *Receipt, intentHash string, outcome *Receipt, outcomeHash string) (*Statement, error) {
	in := intent.Intent
	if in == nil || in.Operation == nil {
		return nil, errors.New("not an intent receipt")
	}
	plan, err := rawPlan(in.Plan)
	if err != nil {
		return nil, fmt.Errorf("the intent's plan: %w", err)
	}
	p := &RunPredicate{
		RunID: intent.RunID, Host: intent.Host, Runner: intent.Runner,
		Operation: in.Operation.Name, OperationDigest: in.Operation.Digest, Fingerprint: in.Fingerprint,
		Target: plan.Target, Argv: nonNilStrings(plan.Argv), Cwd: plan.Cwd, PolicyDigest: in.PolicyDigest,
		Intent: ReceiptRef{Seq: intent.Seq, SHA256: intentHash, Time: intent.Time},
	}
	p.Decision = RunDecision{Path: operations.PathName(in.Path), Planner: plan.Planner, Anchor: in.Anchor,
		Evidence: []string{}, Approvers: []Approver{}, DecisionID: in.DecisionID}
	relied := map[string]bool{}
	for _, id := range in.Relied {
		relied[id] = true
	}
	described := map[string]*approval.Assessed{}
	for _, env := range in.Evidence {
		a := approval.Describe(env)
		if a == nil {
			return nil, errors.New("the intent carries evidence that cannot be read")
		}
		p.Decision.Evidence = append(p.Decision.Evidence, a.ID)
		described[a.ID] = a
	}
	for _, id := range in.Relied {
		a, ok := described[id]
		if !ok {
			return nil, fmt.Errorf("the intent relies on record %.12s… it does not carry", id)
		}
		ap := Approver{Principal: a.By, Kind: a.Kind, Record: a.ID}
		if a.Kind == approval.KindAnswer {
			ap.Channel = approval.AnswerChannel(a)
		}
		p.Decision.Approvers = append(p.Decision.Approvers, ap)
	}
	if in.Anchor != "" {
		p.Decision.Use = in.Slot + 1
		if a, ok := described[in.Anchor]; ok {
			p.Decision.Uses = max(a.Uses, 1)
		}
	}
	if outcome != nil && outcome.Outcome != nil {
		o := outcome.Outcome
		p.Outcome = &RunOutcome{ReceiptRef: ReceiptRef{Seq: outcome.Seq, SHA256: outcomeHash, Time: outcome.Time},
			ExitCode: o.ExitCode, Signal: o.Signal, TimedOut: o.TimedOut, Error: o.Error, DurationNS: int64(o.Duration), Stdout: o.Stdout, Stderr: o.Stderr}
	}
	if why := Explain(intent); why != nil {
		p.Explanation = why.Sentence
	}
	st := &Statement{Type: StatementV1, PredicateType: RunPredicateV1, Predicate: p}
	program := ""
	if len(plan.Argv) > 0 {
		program = plan.Argv[0]
	}
	st.Subject = append(st.Subject, Subject{Name: program, Digest: map[string]string{"sha256": hexOf(plan.ProgramSHA256)}})
	for _, fl := range plan.Files {
		st.Subject = append(st.Subject, Subject{Name: "file." + fl.Name, Digest: map[string]string{"sha256": hexOf(fl.SHA256)}})
	}
	return st, nil
}

func nonNilStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func hexOf(digest string) string { return strings.TrimPrefix(digest, "sha256:") }

// SignStatement encodes st (Go's encoding/json: struct fields in order, no
// HTML escaping, no trailing newline) and signs it as a DSSE envelope of
// [InTotoPayloadType].
func SignStatement(ctx context.Context, s dsse.Signer, st *Statement) (*dsse.Envelope, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(st); err != nil {
		return nil, err
	}
	return dsse.Sign(ctx, s, InTotoPayloadType, []byte(strings.TrimSuffix(b.String(), "\n")))
}

// ExportInToto reads the journal r and writes to w, one per line, the
// signed in-toto statement of each run, in the order runs end (a run
// without an outcome receipt last, with "outcome": null). Every entry must
// verify as signed by a principal with the runner role in p; any that
// does not stops the export with an [*UnverifiedError], since signing it
// again would vouch for what no runner signed. It returns how many
// statements it wrote.
func ExportInToto(ctx context.Context, r io.Reader, p *approval.Policy, s dsse.Signer, w io.Writer) (int, error) {
	return exportRuns(ctx, r, p, s, func(env *dsse.Envelope, _ *RunPredicate) error {
		b, err := json.Marshal(env)
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	})
}

// exportRuns is [ExportInToto] handing each signed statement, with its
// predicate, to emit.
// errSkip, from exportRuns's emit, leaves the run out of the count.
var errSkip = errors.New("run left out")

func exportRuns(ctx context.Context, r io.Reader, p *approval.Policy, s dsse.Signer, emit func(*dsse.Envelope, *RunPredicate) error) (int, error) {
	type pending struct {
		r    *Receipt
		hash string
	}
	open := map[string]pending{}
	n := 0
	each := func(in pending, out *Receipt, outHash string) error {
		st, err := RunStatement(in.r, in.hash, out, outHash)
		if err != nil {
			return fmt.Errorf("receipt %d: %w", in.r.Seq, err)
		}
		env, err := SignStatement(ctx, s, st)
		if err != nil {
			return err
		}
		if err := emit(env, st.Predicate.(*RunPredicate)); !errors.Is(err, errSkip) {
			if err != nil {
				return err
			}
			n++
		}
		return nil
	}
	err := Scan(r, func(l Line) error {
		if l.Torn {
			return nil // a crashed write, not an entry (replay reports it)
		}
		if l.Bytes == nil {
			return &UnverifiedError{Line: l.No, Err: errors.New("longer than a receipt may be")}
		}
		env, rec, err := Decode(l.Bytes)
		if err != nil {
			return &UnverifiedError{Line: l.No, Err: err}
		}
		signed, err := p.Open(env)
		if err != nil {
			return &UnverifiedError{Line: l.No, Err: err}
		}
		if !signed.Signer.Has(approval.RoleRunner) || signed.Signer.ID != rec.Runner {
			return &UnverifiedError{Line: l.No, Err: fmt.Errorf("signed by %s, not by its runner %s", signed.Signer.ID, rec.Runner)}
		}
		hash := LineHash(l.Bytes)
		switch rec.Kind {
		case KindIntent:
			open[hash] = pending{rec, hash}
		case KindOutcome:
			if rec.Outcome == nil {
				return nil
			}
			in, ok := open[rec.Outcome.Intent]
			if !ok {
				return nil // its intent is not in this journal (replay reports it)
			}
			delete(open, rec.Outcome.Intent)
			return each(in, rec, hash)
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	rest := slices.SortedFunc(maps.Values(open), func(a, b pending) int { return cmp.Compare(a.r.Seq, b.r.Seq) })
	for _, in := range rest {
		if err := each(in, nil, ""); err != nil {
			return n, err
		}
	}
	return n, nil
}
