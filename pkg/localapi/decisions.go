package localapi

import (
	"fmt"
	"os"
	"strings"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/decisionlog"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/receipts"
)

// decisionRecord is one run attempt's line in the decision log
// (docs/DECISIONS.md): written once, when the intent receipt of an allowed
// run is durable, or when run returns without one. It carries ids,
// principals and digests, never a parameter, an argv, an environment value
// or a file's content.
type decisionRecord struct {
	f      *Env
	ID     string
	asked  string
	pc     *runner.PlanContext
	intent *receipts.Intent
	done   bool
}

// StartDecision begins the record of a run of the plan asked for. It
// refuses a configuration whose decision log this process cannot write
// (standard output in local mode is the program's).
func (f *Env) StartDecision(asked string) (*decisionRecord, error) {
	d := &decisionRecord{f: f, ID: decisionlog.NewID(), asked: asked}
	if f.Call == nil {
		if c, err := f.LoadConfig(); err == nil && c.DecisionsPath() == "-" {
			return nil, &config.Error{Path: c.Path, Msg: `log.decisions = "-" is the standard output of prod-write serve; a local run's standard output is its program's: name a file`}
		}
	}
	return d, nil
}

// Loaded names the plan the attempt is about.
func (d *decisionRecord) Loaded(pc *runner.PlanContext) { d.pc = pc }

// Stamp gives the intent its decision id, and keeps it for the line.
func (d *decisionRecord) Stamp(in *receipts.Intent) *receipts.Intent {
	in.DecisionID = d.ID
	d.intent = in
	return in
}

// Ready says whether the log can take a line now, before the run spends
// anything (docs/adr/0037-a-decision-log-that-never-drops-a-line.md).
func (d *decisionRecord) Ready() error {
	sink, err := d.f.DecisionSink()
	if err == nil && sink != nil {
		err = sink.Check()
	}
	if err == nil {
		return nil
	}
	return d.failed(err, "nothing was spent and nothing ran")
}

// Allowed logs the decision of a run whose intent receipt is durable; an
// error stops the run before its program starts.
func (d *decisionRecord) Allowed(dec *approval.Decision, runID string, seq uint64) error {
	if d.off() {
		return nil
	}
	e := d.entry(decisionlog.Allowed)
	e.Path = operations.PathName(dec.Path)
	for _, s := range dec.Relied {
		e.Evidence = append(e.Evidence, s.ID)
		if s.Signer != nil {
			e.Signers = append(e.Signers, s.Signer.ID)
		}
	}
	if dec.Anchor != "" {
		e.Use, e.Uses = d.intent.Slot+1, dec.AnchorUses
	}
	e.RunID, e.Receipt = runID, seq
	if err := d.write(e); err != nil {
		return d.failed(err, "")
	}
	return nil
}

// Finish logs the decision of a run that returned err without an allowed
// line: a refusal, or a failure before the program started.
func (d *decisionRecord) Finish(err error) {
	if d.done || err == nil || d.off() {
		return
	}
	e := d.entry(decisionlog.Failed)
	if r, ok := refusal.As(err); ok {
		e.Decision, e.Code, e.Reason, e.Missing = decisionlog.Refused, string(r.Code), r.Reason, r.Missing
		if e.Operation == "" {
			e.Operation = r.Operation
		}
		if e.Fingerprint == "" {
			e.Fingerprint = r.Fingerprint
		}
	} else {
		e.Reason = err.Error()
	}
	// The attempt failed already: its own error stays the result (a
	// refusal stays a refusal), and the lost line is said.
	if werr := d.write(e); werr != nil {
		if d.f.Call != nil {
			d.f.Call.State.Log.Printf("warning: decision %s (%s) not logged: %v", e.DecisionID, e.Decision, werr)
			d.f.Warn("the service could not write decision %s to its decision log (its log says why)", e.DecisionID)
			return
		}
		d.f.Warn("decision %s not logged: %v", e.DecisionID, werr)
	}
}

// askedFingerprint reports whether what a caller typed has the shape of a
// fingerprint or a prefix of one, `^(sha256:)?[0-9a-f]{1,64}$`, checked
// by hand: a regexp compiled at package initialisation cost every start of
// prod-write 0.3 ms, agents' runs included (docs/PERFORMANCE.md).
func askedFingerprint(s string) bool {
	h := strings.TrimPrefix(s, "sha256:")
	if len(h) == 0 || len(h) > 64 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func (d *decisionRecord) entry(decision string) decisionlog.Entry {
	f := d.f
	e := decisionlog.Entry{
		Time:       f.Now().UTC().Format(decisionlog.TimeFormat),
		DecisionID: d.ID,
		Decision:   decision,
		Surface:    f.Surface(),
		Invoker:    decisionlog.Invoker{UID: -1},
	}
	if askedFingerprint(d.asked) {
		e.Fingerprint = d.asked
	}
	c, err := f.LoadConfig()
	if err == nil {
		e.Host = runner.JournalHost(c.Host)
	}
	pc := d.pc
	if pc == nil {
		// The plan could not be loaded: who asked is still worth
		// knowing (an agent probing fingerprints).
		e.Invoker.UID = callerUID(f)
		if err == nil {
			if p, err := f.Policy(c); err == nil {
				e.Invoker.Principal = Invoker(f, p).Principal
			}
		}
		return e
	}
	e.Operation, e.Target, e.Fingerprint, e.Planner = pc.Plan.Operation, pc.Plan.Target, pc.Plan.Fingerprint, pc.Plan.Planner
	e.PolicyDigest, e.RegistryDigest = pc.Policy.Digest, pc.Registry.Digest
	inv := d.intent
	if inv != nil {
		e.Invoker = decisionlog.Invoker{UID: inv.Invoker.UID, Principal: inv.Invoker.Principal}
	} else {
		i := Invoker(f, pc.Policy)
		e.Invoker = decisionlog.Invoker{UID: i.UID, Principal: i.Principal}
	}
	return e
}

// off reports that no decision log is configured, marking the record
// done: nothing is built for a log nobody keeps.
func (d *decisionRecord) off() bool {
	sink, err := d.f.DecisionSink()
	if err == nil && sink == nil {
		d.done = true
		return true
	}
	return false
}

// write hands the line to the log.
func (d *decisionRecord) write(e decisionlog.Entry) error {
	d.done = true
	sink, err := d.f.DecisionSink()
	if err == nil && sink != nil {
		err = sink.Write(e.Line())
	}
	return err
}

// failed is the error of a run stopped because its allowed line cannot be
// written (done says what was not done). Under the service the cause is
// in the service's log, and the caller is told only that it could not log
// (the cause names the service's files); the exit status is 74 either way.
func (d *decisionRecord) failed(err error, done string) error {
	msg := fmt.Sprintf("decision %s cannot be written to the decision log", d.ID)
	if done != "" {
		msg += ", so " + done
	}
	if d.f.Call != nil {
		d.f.Call.State.Log.Printf("decision %s (allowed) not logged, the run stopped: %v", d.ID, err)
		return &ExitError{Code: ExitIOErr, Msg: msg + " (the service's log says why)"}
	}
	return &ExitError{Code: ExitIOErr, Msg: msg + ": " + err.Error()}
}

// DecisionSink is where this process logs decisions: in the service, the
// service's own (a caller never names it); else the file the
// configuration names. Nil when off.
func (f *Env) DecisionSink() (decisionlog.Sink, error) {
	if f.Call != nil {
		return f.Call.State.Decisions, nil
	}
	c, err := f.LoadConfig()
	if err != nil {
		return nil, err
	}
	return DecisionSinkFor(c, nil)
}

// DecisionSinkFor is the sink c names; "-" is stdout, nil when this
// process has none.
func DecisionSinkFor(c *config.Config, stdout *decisionlog.Stream) (decisionlog.Sink, error) {
	switch p := c.DecisionsPath(); p {
	case "":
		return nil, nil
	case "-":
		if stdout == nil {
			return nil, &config.Error{Path: c.Path, Msg: `log.decisions = "-" is the standard output of prod-write serve`}
		}
		return stdout, nil
	default:
		return &decisionlog.File{Path: p, MaxSize: int64(c.Log.DecisionsMaxSize), Keep: *c.Log.DecisionsKeep}, nil
	}
}

// callerUID is the calling account: this process's in local mode, the
// kernel's SO_PEERCRED in the service, -1 for MCP over HTTP.
func callerUID(f *Env) int {
	switch {
	case f.Call == nil:
		return os.Getuid()
	case f.Call.Socket != nil:
		return int(f.Call.Socket.Peer.UID)
	}
	return -1
}

// Surface names where a run was asked for, for the decision log.
func (f *Env) Surface() string {
	switch {
	case f.Call != nil && f.Call.Socket == nil:
		return "mcp_http"
	case f.Call != nil:
		return "service"
	case f.ViaMCP:
		return "mcp"
	}
	return "cli"
}

var _ runner.DecisionLog = (*decisionRecord)(nil)
