package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/receipts"
)

// NewCmdReceipts builds `receipts list|show|checkpoint`.
func NewCmdReceipts(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "receipts",
		Short: "Read the receipt journal, and ship it to the S3 archive",
		Example: `  prod-write receipts list
  prod-write receipts show 12
  prod-write receipts checkpoint > head.json
  prod-write receipts sync`,
	}
	var last int
	list := &cobra.Command{
		Use:   "list",
		Short: "List the journal's entries (unverified; use replay to verify)",
		Long: `list prints the journal's entries without verifying them: replay does that.
Break-glass runs are the exception: their intents are marked, and they are
listed after the table with whether they are reviewed, as replay of the
configured journal judges them (the same code), so list reads its lines
twice. With --last N, the runs of the N lines are judged by those lines.`,
		Example: "  prod-write receipts list --json\n  prod-write receipts list --last 20",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if last < 0 {
				return &localapi.UsageError{Msg: "--last must not be negative"}
			}
			return receiptsList(cmd.Context(), f, last)
		},
	}
	list.Flags().IntVar(&last, "last", 0, "only the last `N` entries, read from the journal's end (their line numbers are not counted: 0)")
	cmd.AddCommand(list)
	cmd.AddCommand(&cobra.Command{
		Use:   "show ID",
		Short: "Show the entries of one run (by run id) or one entry (by sequence number)",
		Long: `show prints the receipts of one run, given its run id or a prefix of at least
6 characters, or one entry, given its sequence number (an ID of digits only).
It reads the journal from its end and stops once nothing earlier can match,
so a recent receipt costs what it returns; a run id prefix shorter than the
whole id reads back to the start (several runs may share it).`,
		Example: "  prod-write receipts show 3f9a0c1e2b4d",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return receiptsShow(cmd.Context(), f, args[0])
		},
	})
	var out string
	var asNote, witness bool
	cp := &cobra.Command{
		Use:   "checkpoint",
		Short: "Sign the journal's head (count and hash) so that cutting receipts off is detectable",
		Long: `checkpoint prints a runner-signed head of the journal: how many entries it has
and the hash of the last. Keep it somewhere the journal's host cannot rewrite
(CI artifacts, another machine); replay --checkpoint then detects receipts cut
off after it.

With --note, a C2SP checkpoint note of the journal's Merkle tree instead,
with the cosignatures the witnesses returned for it; --witness sends it to
the witnesses first (the service sends on its own cadence too). A witness
that fails is a warning on stderr, not an error: its cosignature is then
missing from the note, and replay --witnesses says so.`,
		Example: "  prod-write receipts checkpoint --out /backup/head.json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return receiptsCheckpoint(cmd.Context(), f, out, asNote, witness)
		},
	}
	cp.Flags().StringVar(&out, "out", "", "write the checkpoint to `FILE` instead of stdout")
	cp.Flags().BoolVar(&asNote, "note", false, "write a C2SP checkpoint note of the journal's Merkle tree (origin, size, root) instead, signed by the runner key, with the witnesses' cosignatures kept of it")
	cp.Flags().BoolVar(&witness, "witness", false, "first send the note to the [[witness]]es of prod-write.toml (C2SP tlog-witness) and keep what they cosign; implies --note")
	cmd.AddCommand(cp)
	cmd.AddCommand(newCmdReceiptsProve(f))
	cmd.AddCommand(newCmdReceiptsConsistency(f))
	cmd.AddCommand(newCmdReceiptsSync(f, nil))
	cmd.AddCommand(newCmdReceiptsExport(f, nil))
	cmd.AddCommand(newCmdReceiptsVerifyExport(f, nil))
	return cmd
}

// receiptLine is one line of `receipts list --json`.
type receiptLine struct {
	FormatVersion int       `json:"format_version"`
	Line          int       `json:"line"`
	Seq           uint64    `json:"seq"`
	Kind          string    `json:"kind"`
	RunID         string    `json:"run_id"`
	Time          time.Time `json:"time"`
	Operation     string    `json:"operation"`
	Fingerprint   string    `json:"fingerprint"`
	Runner        string    `json:"runner"`
	// ExitCode is the program's exit status, on outcomes only.
	ExitCode *int `json:"exit_code,omitempty"`
	// BreakGlass marks a break-glass run's intent (ADR 0028).
	BreakGlass *receipts.BreakGlassRun `json:"break_glass,omitempty"`
	// Redacted says the break-glass run's reason and incident were
	// removed: the caller holds no key of the policy (ADR 0040).
	Redacted bool `json:"redacted,omitempty"`
}

// receiptsShow is receipts show through the API this caller reaches,
// rendered here.
func receiptsShow(ctx context.Context, f *Factory, id string) error {
	a, err := f.api()
	if err != nil {
		return err
	}
	r, err := a.ReceiptsShow(ctx, api.ReceiptsShowRequest{ID: id})
	if err != nil {
		return err
	}
	return receiptsShowRender(f, r)
}

// receiptsCheckpoint is receipts checkpoint through the API this caller
// reaches, written here: to stdout, or to out as the caller.
func receiptsCheckpoint(ctx context.Context, f *Factory, out string, asNote, witness bool) error {
	a, err := f.api()
	if err != nil {
		return err
	}
	asNote = asNote || witness
	r, err := a.ReceiptsCheckpoint(ctx, api.ReceiptsCheckpointRequest{Note: asNote, Witness: witness})
	if err != nil {
		return err
	}
	for _, w := range r.Witnesses {
		if w.Error != "" {
			fmt.Fprintf(f.IO.Err, "prod-write: warning: %s\n", w.Error)
		} else {
			fmt.Fprintf(f.IO.Err, "prod-write: witness %s cosigned the checkpoint of %d entries\n", w.Name, w.Size)
		}
	}
	if asNote {
		// The note as signed: its own format, with or without --json.
		if out == "" {
			_, err = io.WriteString(f.IO.Out, r.Note)
			return err
		}
		return os.WriteFile(out, []byte(r.Note), 0o644)
	}
	var doc any = r.Envelope
	if f.JSON {
		// The checkpoint and what it says, as a document (docs/JSON.md);
		// replay --checkpoint takes this as well as the bare envelope.
		doc = localapi.CheckpointDoc{FormatVersion: localapi.FormatVersion, Checkpoint: r.Checkpoint, Envelope: r.Envelope}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if out == "" {
		_, err = f.IO.Out.Write(b)
		return err
	}
	return os.WriteFile(out, b, 0o644)
}

// ReplayOptions are replay's inputs.
type ReplayOptions struct {
	F          *Factory `json:"-"`
	Path       string
	Trust      string
	Checkpoint string
	// Witnesses is how many distinct witnesses of the trust policy must
	// cosign the Checkpoint note (ADR 0044).
	Witnesses int
	// WitnessMaxAge counts only the cosignatures made within it of now.
	WitnessMaxAge time.Duration
	// HostCheckpoints are checkpoint notes of hosts of a fleet replay
	// (an archive of several hosts): each host's chain must reach its own.
	HostCheckpoints []string
	Host            string
	Registry        string
	History         string
	// Rollout is how long a replaced version still counts after the
	// commit that replaced it, when the history is a git branch.
	Rollout time.Duration
	// StrictRevocation fails runs that relied on a principal revoked
	// since, instead of reporting them.
	StrictRevocation bool
	// VSA and VSAKey: write a SLSA verification summary of the verdict,
	// signed by VSAKey, to VSA (docs/FORMAT.md §5).
	VSA    string `json:"-"`
	VSAKey string `json:"-"`
	// Policy and PolicyRegistry are a proposed trust policy and registry
	// to audit the journal against, reporting without failing (ADR 0022).
	Policy         string
	PolicyRegistry string
	// FailUnreviewedBreakGlass fails break-glass runs no approver has
	// reviewed (ADR 0028); without it they are reported.
	FailUnreviewedBreakGlass bool
	// State and StateKey: resume from the replay state in State, sealed
	// by StateKey (a key CI holds), and write the state at the head
	// there when no entry fails (ADR 0044).
	State    string `json:"-"`
	StateKey string `json:"-"`
}

// NewCmdReplay builds `replay`.
func NewCmdReplay(f *Factory, runF func(*ReplayOptions) error) *cobra.Command {
	opts := &ReplayOptions{F: f}
	cmd := &cobra.Command{
		Use:   "replay [PATH | s3://BUCKET/PREFIX]",
		Short: "Verify every receipt offline; exit 0 only if all verify",
		Long: `replay verifies each receipt of a journal (default: the configured one) with
no network and no store: the runner's signature, the fingerprint recomputed
from the recorded inputs, every embedded record's signature and role, the
gate as it stood at the receipt's time, that no approval was spent twice, the
hash chain, and intents left without an outcome. In CI, pass --trust with the
policy of the protected default branch, never the one in the change.

Each receipt is judged by the version of the trust policy and operation
definition it names, which must have been in force at its time. When the
trust policy is tracked in a git work tree (a full-depth checkout of the
protected branch), that branch's first-parent history says when: each
version from the first commit that holds it until the commit that replaced
it plus --rollout. Elsewhere, history/ beside the trust policy (kept by
` + "`prod-write history record`" + `) says it (docs/REPLAY.md, "History"). The registry
is the one beside --trust when only --trust is named.

PATH may be s3://BUCKET/PREFIX: the S3 receipt archive, read in key order
(journal order) one object at a time; the only network replay uses. A
prefix holding several hosts' prefixes (s3://BUCKET/receipts, or the
bucket) is replayed as a fleet: each host's chain on its own, and every
approval's uses counted across all hosts (docs/DISTRIBUTED.md).

The configured journal, before any run has written it, is replayed as a
journal with no entry: "no receipts yet", which verifies (a checkpoint must
still be reached). A PATH that does not exist is an error.

Exit 0 when everything verifies, 1 when anything does not, 65 when the input
is not receipts at all, 74 when it cannot be read or an archive prefix holds
no receipts.`,
		Example: `  prod-write replay
  prod-write replay receipts.jsonl --trust /protected/trust.toml --checkpoint head.json --json
  prod-write replay s3://receipts-bucket/receipts/host-a --trust /protected/trust.toml
  prod-write replay s3://receipts-bucket/receipts --trust /protected/trust.toml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Path = args[0]
			}
			if opts.Rollout <= 0 {
				return &localapi.UsageError{Msg: "--rollout must be positive"}
			}
			if runF != nil {
				return runF(opts)
			}
			return replayRun(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.Trust, "trust", "", "the trust policy to judge by (default: the configured one)")
	cmd.Flags().StringVar(&opts.Checkpoint, "checkpoint", "", "a `FILE` that receipts checkpoint wrote: a signed head the journal must still reach")
	cmd.Flags().IntVar(&opts.Witnesses, "witnesses", 0, "trust the --checkpoint note only when `K` distinct witnesses of the trust policy ([[witness]]) cosign it, besides the runner")
	cmd.Flags().StringArrayVar(&opts.HostCheckpoints, "host-checkpoint", nil, "with an S3 archive of several hosts: a checkpoint note (`FILE`) of one host, whose chain must reach it; repeat for each host (a note of a host the archive holds no chain of fails)")
	cmd.Flags().DurationVar(&opts.WitnessMaxAge, "witness-max-age", 0, "count only the cosignatures a witness made within `D` of now (their signed timestamps): an old quorum is no quorum")
	cmd.Flags().StringVar(&opts.Registry, "registry", "", "the protected registry directory to judge definitions by (default: the configured one; with --trust, the one beside it)")
	cmd.Flags().StringVar(&opts.History, "history", "", "the history of past trust policies and definitions, by digest (default: history/ beside the trust policy when it has a versions.toml, else the git branch the trust policy is tracked on)")
	cmd.Flags().DurationVar(&opts.Rollout, "rollout", receipts.DefaultRollout, "with a git branch as the history: how long a replaced version still counts after the commit that replaced it (the time hosts take to load a change)")
	cmd.Flags().StringVar(&opts.Policy, "policy", "", "audit only: a proposed trust policy; report the runs it would have refused, without failing")
	cmd.Flags().StringVar(&opts.PolicyRegistry, "policy-registry", "", "audit only: a proposed registry directory; report the runs it would have refused, without failing")
	cmd.Flags().BoolVar(&opts.FailUnreviewedBreakGlass, "fail-unreviewed-break-glass", false, "fail break-glass runs that no approver other than the breaker has reviewed, instead of reporting them")
	cmd.Flags().BoolVar(&opts.StrictRevocation, "strict-revocation", false, "fail runs that relied on a principal revoked since, instead of reporting them")
	cmd.Flags().StringVar(&opts.VSA, "vsa", "", "also write a SLSA verification summary attestation of the verdict to `FILE`")
	cmd.Flags().StringVar(&opts.VSAKey, "vsa-key", "", "the key (PKCS#8 PEM, 0600) that signs the --vsa attestation: CI's, not a principal's")
	cmd.Flags().StringVar(&opts.State, "state", "", "resume from the replay state in `FILE`, verifying only the entries after it, and write the state at the head there when no entry fails")
	cmd.Flags().StringVar(&opts.StateKey, "state-key", "", "the key (PKCS#8 PEM, 0600) that seals the --state file: CI's, not a principal's")
	cmd.Flags().StringVar(&opts.Host, "host", "", "the host whose journal this is: every receipt and the checkpoint must name it (default: the configured host when replaying the configured journal)")
	cmd.AddCommand(NewCmdVerifyVSA(f, nil))
	return cmd
}

// rolloutSet is the --rollout to send: none when it is the default, so
// that a replay of the configured journal with no option is still the
// service's own.
func (o *ReplayOptions) rolloutSet() time.Duration {
	if o.Rollout == receipts.DefaultRollout {
		return 0
	}
	return o.Rollout
}

// request is o as the API's request.
func (o *ReplayOptions) request() api.ReplayRequest {
	return api.ReplayRequest{Path: o.Path, Trust: o.Trust, Registry: o.Registry, History: o.History, Host: o.Host,
		Rollout: o.rolloutSet(), Checkpoint: o.Checkpoint, Witnesses: o.Witnesses, WitnessMaxAge: o.WitnessMaxAge, HostCheckpoints: o.HostCheckpoints,
		StrictRevocation: o.StrictRevocation, FailUnreviewedBreakGlass: o.FailUnreviewedBreakGlass,
		Policy: o.Policy, PolicyRegistry: o.PolicyRegistry, State: o.State, StateKey: o.StateKey, VSA: o.VSA, VSAKey: o.VSAKey}
}

// replayRun is replay through the API: in this process when the request
// names anything (files the caller names are read with the caller's own
// rights: replay needs no privilege) or no service is configured, and
// otherwise the service's replay of its own journal. The verdicts are
// rendered as they come.
func replayRun(ctx context.Context, o *ReplayOptions) error {
	f := o.F
	req := o.request()
	var a api.API = localapi.API{Env: &f.Env}
	if !req.HasOptions() {
		if c, err := f.LoadConfig(); err == nil && c.Service.Socket != "" {
			a = localapi.ServiceClient{Env: &f.Env}
		}
	}
	if localapi.IsArchiveURL(req.Path) && f.AWS == nil {
		return f.HandOff("replay reads an S3 archive")
	}
	out := newReplayOutput(f, localapi.IsArchiveURL(req.Path))
	req.Each = out.emit
	r, err := a.Replay(ctx, req)
	if err != nil {
		if !out.first || out.rows > 0 || ExitCode(err) == ExitDataErr {
			// What was replayed before it stopped.
			if f.JSON {
				io.WriteString(out.w, "]}\n")
			}
			out.w.Flush()
		}
		return err
	}
	if r.StateOutdated {
		fmt.Fprintf(f.IO.Err, "prod-write: the replay state %s was written by an earlier version of replay: replaying in full\n", o.State)
	}
	if r.StateRejudged {
		fmt.Fprintf(f.IO.Err, "prod-write: the replay state %s was judged by another policy, history or options: replaying in full\n", o.State)
	}
	if r.StateResumed && !f.JSON {
		fmt.Fprintf(f.IO.Err, "prod-write: verified %d new entries on top of the %d the replay state %s stands on\n", r.Summary.Entries-int(r.StateFrom), r.StateFrom, o.State)
	}
	if r.VSAVerify != "" && !f.JSON {
		fmt.Fprintf(f.IO.Err, "prod-write: verify %s with: %s\n", o.VSA, r.VSAVerify)
	}
	return out.end(r)
}

// replayOutput prints replay's table or JSON as results stream in.
type replayOutput struct {
	f     *Factory
	w     *bufio.Writer
	tw    *tabwriter.Writer
	hosts bool // a HOST column
	first bool
	rows  int
}

// tableBlock is how many rows a table aligns at once: tabwriter holds
// every row until it is flushed, and a million receipts must not be held
// (docs/DESIGN.md §15). Columns are aligned within each block of rows.
const tableBlock = 1024

func newReplayOutput(f *Factory, hosts bool) *replayOutput {
	o := &replayOutput{f: f, w: bufio.NewWriterSize(f.IO.Out, 64<<10), hosts: hosts, first: true}
	if f.JSON {
		fmt.Fprintf(o.w, "{\"format_version\":%d,\"receipts\":[", localapi.FormatVersion)
		return o
	}
	o.tw = tabwriter.NewWriter(o.w, 0, 4, 2, ' ', 0)
	return o
}

// header starts the table, before its first row.
func (o *replayOutput) header() {
	if o.hosts {
		fmt.Fprint(o.tw, "HOST\t")
	}
	fmt.Fprintln(o.tw, "LINE\tSEQ\tKIND\tOPERATION\tRUNNER\tSTATUS")
}

func (o *replayOutput) emit(r api.ReplayVerdict) {
	if o.f.JSON {
		if !o.first {
			o.w.WriteByte(',')
		}
		o.first = false
		b, _ := json.Marshal(r)
		o.w.Write(b)
		return
	}
	if o.rows == 0 {
		o.header()
	}
	status := "ok"
	if !r.OK {
		codes := make([]string, len(r.Problems))
		for i, p := range r.Problems {
			codes[i] = p.Code
		}
		status = "FAIL " + strings.Join(codes, ",")
	}
	if r.OK && len(r.Warnings) > 0 {
		status = "ok, " + r.Warnings[0].Code
	}
	if len(r.Audit) > 0 {
		status += ", " + receipts.WouldRefuse
	}
	indent := "\t\t\t\t\t  "
	if o.hosts {
		fmt.Fprintf(o.tw, "%s\t", r.Host)
		indent = "\t" + indent
	}
	line, seq := strconv.Itoa(r.Line), strconv.FormatUint(r.Seq, 10)
	if r.Kind == "fleet" {
		line, seq = "-", "-"
	}
	fmt.Fprintf(o.tw, "%s\t%s\t%s\t%s\t%s\t%s\n", line, seq, r.Kind, r.Operation, r.Runner, status)
	for _, p := range r.Warnings {
		fmt.Fprintf(o.tw, "%s%s: %s\n", indent, p.Code, p.Detail)
	}
	for _, p := range r.Audit {
		fmt.Fprintf(o.tw, "%s%s: %s\n", indent, p.Code, p.Detail)
	}
	for _, p := range r.Problems {
		fmt.Fprintf(o.tw, "%s%s: %s\n", indent, p.Code, p.Detail)
	}
	if o.rows++; o.rows%tableBlock == 0 {
		o.tw.Flush()
	}
}

// end prints the summary: for a fleet, each host's and the fleet's. In
// text, the note of a journal with no entry is said instead of the table
// (the JSON document is the same, with no receipt).
func (o *replayOutput) end(r *api.ReplayResult) error {
	defer o.w.Flush()
	sum := r.Summary
	if o.f.JSON {
		var b []byte
		if len(r.Hosts) > 1 {
			b, _ = json.Marshal(struct {
				receipts.Summary
				Hosts []api.HostSummary `json:"hosts"`
			}{sum, r.Hosts})
		} else {
			b, _ = json.Marshal(sum)
		}
		fmt.Fprintf(o.w, "],\"summary\":%s", b)
		if r.VSAVerify != "" {
			v, _ := json.Marshal(r.VSAVerify)
			fmt.Fprintf(o.w, ",\"vsa_verify\":%s", v)
		}
		o.w.WriteString("}\n")
	} else {
		switch {
		case o.rows > 0:
			o.tw.Flush()
		case r.Note != "":
			fmt.Fprintln(o.w, r.Note)
		default:
			o.header()
			o.tw.Flush()
		}
		if len(r.Hosts) > 1 {
			for _, h := range r.Hosts {
				fmt.Fprintf(o.w, "%s: %d entries, %d runs: %d failed, %d incomplete\n", h.Host, h.Entries, h.Runs, h.Failed, h.Incomplete)
			}
			fmt.Fprintf(o.w, "fleet of %d hosts: ", len(r.Hosts))
		}
		fmt.Fprintf(o.w, "%d entries, %d runs: %d failed, %d incomplete\n", sum.Entries, sum.Runs, sum.Failed, sum.Incomplete)
		if sum.BreakGlass > 0 {
			fmt.Fprintf(o.w, "%d break-glass runs, %d unreviewed (--fail-unreviewed-break-glass fails them)\n", sum.BreakGlass, sum.BreakGlassUnreviewed)
		}
		if sum.RevokedSince > 0 {
			fmt.Fprintf(o.w, "%d runs relied on a principal revoked since (--strict-revocation fails them)\n", sum.RevokedSince)
		}
		if r.Audit {
			fmt.Fprintf(o.w, "audit: the proposed policy would have refused %d of %d runs (reported, not failed)\n", sum.WouldRefuse, sum.Runs)
		}
	}
	if !sum.OK {
		return &ExitError{Code: ExitInvalid, Msg: fmt.Sprintf("replay: %d entries do not verify and %d runs are incomplete", sum.Failed, sum.Incomplete)}
	}
	return nil
}
