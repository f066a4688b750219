package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/strictjson"
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
	// BreakGlass marks a break-glass run's intent (issue 22).
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
		doc = checkpointDoc{localapi.FormatVersion, r.Checkpoint, r.Envelope}
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

// checkpointDoc is `receipts checkpoint --json`: the signed envelope, and
// what its payload says (unverified here; replay verifies the envelope).
type checkpointDoc struct {
	FormatVersion int `json:"format_version"`
	receipts.Checkpoint
	Envelope *approval.Envelope `json:"envelope"`
}

// decodeCheckpoint reads what `receipts checkpoint` wrote, with or without
// --json: a DSSE envelope, or a document holding one in "envelope". Only
// the envelope is used: what the document says beside it is not signed.
func decodeCheckpoint(b []byte) (*approval.Envelope, error) {
	// Either form is read strictly (issue 19): exact keys, no duplicates,
	// nothing after the value. Only the envelope is trusted.
	var probe struct {
		FormatVersion *int `json:"format_version"`
	}
	if json.Unmarshal(b, &probe) == nil && probe.FormatVersion != nil {
		// The document --json writes, read by its own type.
		var doc checkpointDoc
		if err := strictjson.Unmarshal(b, &doc); err != nil {
			return nil, err
		}
		if doc.Envelope == nil {
			return nil, errors.New("a checkpoint document without its envelope")
		}
		return doc.Envelope, nil
	}
	var env approval.Envelope
	if err := strictjson.Unmarshal(b, &env); err != nil {
		return nil, err
	}
	return &env, nil
}

// ReplayOptions are replay's inputs.
type ReplayOptions struct {
	F          *Factory `json:"-"`
	Path       string
	Trust      string
	Checkpoint string
	// Witnesses is how many distinct witnesses of the trust policy must
	// cosign the Checkpoint note (issue 32, ADR 0044).
	Witnesses int
	// WitnessMaxAge counts only the cosignatures made within it of now.
	WitnessMaxAge time.Duration
	// HostCheckpoints are checkpoint notes of hosts of a fleet replay
	// (an archive of several hosts): each host's chain must reach its own.
	HostCheckpoints []string
	Host            string
	Registry        string
	History         string
	// StrictRevocation fails runs that relied on a principal revoked
	// since, instead of reporting them.
	StrictRevocation bool
	// VSA and VSAKey: write a SLSA verification summary of the verdict,
	// signed by VSAKey, to VSA (issue 20).
	VSA    string `json:"-"`
	VSAKey string `json:"-"`
	// Policy and PolicyRegistry are a proposed trust policy and registry
	// to audit the journal against, reporting without failing (issue 22).
	Policy         string
	PolicyRegistry string
	// FailUnreviewedBreakGlass fails break-glass runs no approver has
	// reviewed (issue 22); without it they are reported.
	FailUnreviewedBreakGlass bool
	// State and StateKey: resume from the replay state in State, sealed
	// by StateKey (a key CI holds), and write the state at the head
	// there when no entry fails (issue 32, ADR 0044).
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
			if runF != nil {
				return runF(opts)
			}
			if opts.Witnesses < 0 {
				return &localapi.UsageError{Msg: "--witnesses counts witnesses: 0 or more"}
			}
			if opts.WitnessMaxAge < 0 || (opts.WitnessMaxAge > 0 && opts.Witnesses == 0) {
				return &localapi.UsageError{Msg: "--witness-max-age bounds the age of the cosignatures --witnesses counts: a positive duration, with --witnesses"}
			}
			if len(opts.HostCheckpoints) > 0 && (!isArchiveURL(opts.Path) || opts.Checkpoint != "") {
				return &localapi.UsageError{Msg: "--host-checkpoint is one host's note in a replay of an S3 archive (s3://BUCKET/PREFIX), instead of --checkpoint"}
			}
			if opts.Witnesses > 0 && opts.Checkpoint == "" && len(opts.HostCheckpoints) == 0 {
				return &localapi.UsageError{Msg: "--witnesses counts the cosignatures of the --checkpoint note: give one"}
			}
			if (opts.VSA == "") != (opts.VSAKey == "") {
				return &localapi.UsageError{Msg: "--vsa and --vsa-key go together"}
			}
			if (opts.State == "") != (opts.StateKey == "") {
				return &localapi.UsageError{Msg: "--state and --state-key go together: a state is believed only as its key sealed it"}
			}
			if opts.State != "" && (opts.Policy != "" || opts.PolicyRegistry != "" || isArchiveURL(opts.Path)) {
				return &localapi.UsageError{Msg: "--state resumes one journal file's replay: not with --policy, --policy-registry or an S3 archive"}
			}
			// The service's replay takes no options: any of these is
			// read here, as the caller, never silently dropped.
			if opts.Path != "" || opts.Trust != "" || len(opts.HostCheckpoints) > 0 || opts.Checkpoint != "" || opts.VSA != "" || opts.State != "" || opts.Policy != "" || opts.PolicyRegistry != "" || opts.FailUnreviewedBreakGlass ||
				opts.Registry != "" || opts.History != "" || opts.Host != "" || opts.StrictRevocation {
				// Files the caller names are verified here, with the
				// caller's own rights: replay needs no privilege.
				return replayRun(opts)
			}
			if c, err := f.LoadConfig(); err == nil && c.Service.Socket != "" {
				return replayThroughService(cmd.Context(), f)
			}
			return replayRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Trust, "trust", "", "the trust policy to judge by (default: the configured one)")
	cmd.Flags().StringVar(&opts.Checkpoint, "checkpoint", "", "a `FILE` that receipts checkpoint wrote: a signed head the journal must still reach")
	cmd.Flags().IntVar(&opts.Witnesses, "witnesses", 0, "trust the --checkpoint note only when `K` distinct witnesses of the trust policy ([[witness]]) cosign it, besides the runner")
	cmd.Flags().StringArrayVar(&opts.HostCheckpoints, "host-checkpoint", nil, "with an S3 archive of several hosts: a checkpoint note (`FILE`) of one host, whose chain must reach it; repeat for each host (a note of a host the archive holds no chain of fails)")
	cmd.Flags().DurationVar(&opts.WitnessMaxAge, "witness-max-age", 0, "count only the cosignatures a witness made within `D` of now (their signed timestamps): an old quorum is no quorum")
	cmd.Flags().StringVar(&opts.Registry, "registry", "", "the protected registry directory to judge definitions by (default: the configured one)")
	cmd.Flags().StringVar(&opts.History, "history", "", "the history of past trust policies and definitions, by digest (default: history/ beside the trust policy)")
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

// source is o's ReplaySource.
func (o *ReplayOptions) source() localapi.ReplaySource {
	return localapi.ReplaySource{Path: o.Path, Trust: o.Trust, Host: o.Host, Registry: o.Registry, History: o.History,
		StrictRevocation: o.StrictRevocation, FailUnreviewedBreakGlass: o.FailUnreviewedBreakGlass}
}

func replayRun(o *ReplayOptions) error {
	f := o.F
	j, err := localapi.NewReplayJudge(&f.Env, o.source())
	if err != nil {
		return err
	}
	rp, policy, trust, path, host := j.Replayer, j.Policy, j.Trust, j.Path, j.Host
	if o.Policy != "" || o.PolicyRegistry != "" {
		if rp.Audit, err = loadAudit(o.Policy, o.PolicyRegistry); err != nil {
			return err
		}
	}
	if o.WitnessMaxAge > 0 {
		rp.WitnessedSince = f.Now().Add(-o.WitnessMaxAge)
	}
	if o.Witnesses > len(policy.Witnesses) {
		return &localapi.UsageError{Msg: fmt.Sprintf("--witnesses %d: the trust policy %s names %d witnesses", o.Witnesses, trust, len(policy.Witnesses))}
	}
	notes, err := hostNotes(o.HostCheckpoints, policy)
	if err != nil {
		return err
	}
	if o.Checkpoint != "" {
		b, err := os.ReadFile(o.Checkpoint)
		if err != nil {
			return err
		}
		if receipts.IsCheckpointNote(b) {
			// A checkpoint note (receipts checkpoint --note): the
			// journal's Merkle tree, judged by the replayer.
			rp.CheckpointNote = b
			rp.Witnesses = o.Witnesses
		} else if o.Witnesses > 0 {
			return &localapi.UsageError{Msg: "--witnesses counts the cosignatures of a checkpoint note (receipts checkpoint --note); " + o.Checkpoint + " is a DSSE checkpoint"}
		} else {
			env, err := decodeCheckpoint(bytes.TrimSuffix(b, []byte{'\n'}))
			if err != nil {
				return &localapi.DataError{Err: fmt.Errorf("checkpoint %s: %w", o.Checkpoint, err)}
			}
			rp.Checkpoint = env
		}
	}
	// Replay allocates as it streams; collecting only when memory nears a
	// fixed bound keeps it well under 100 MB and spends less time in the
	// collector than the default pacing (docs/PERFORMANCE.md).
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(64 << 20))
	if isArchiveURL(path) {
		if o.VSA != "" {
			return &localapi.UsageError{Msg: "--vsa attests a journal file's head; replay the archive's journal from a file"}
		}
		rp.Witnesses = o.Witnesses
		return replayArchive(f, rp, path, notes)
	}
	in, note, err := localapi.OpenReplayJournal(path, o.Path == "")
	if err != nil {
		return err
	}
	defer in.Close()
	out := newReplayOutput(f, false)
	out.audit = rp.Audit != nil
	out.note = note
	var sum receipts.Summary
	if o.State != "" {
		sum, err = replayState(f, o, rp, out, path, in)
	} else {
		sum, err = out.replay(rp, "", path, in)
	}
	if err != nil {
		return err
	}
	if o.VSA != "" {
		if out.vsaVerify, err = writeVSA(f, o, sum, policy, trust, path, host); err != nil {
			return err
		}
		if !f.JSON {
			fmt.Fprintf(f.IO.Err, "prod-write: verify %s with: %s\n", o.VSA, out.vsaVerify)
		}
	}
	return out.end(sum, nil, nil)
}

// replayArchive replays the S3 archive at url: one host's prefix, or the
// parent of several, replayed as a fleet. Each host's chain is verified on
// its own, and every approval's uses are counted across all of them
// (docs/DISTRIBUTED.md, "Replaying the fleet"). A prefix that holds no
// receipt is an error, as a journal that does not exist is: a mistyped
// prefix must not pass as an empty, verified archive.
//
// notes are checkpoint notes by host (--host-checkpoint): each host's
// chain is judged against its own, as --checkpoint judges one journal,
// and a note of a host the archive holds no chain of fails the fleet: a
// host whose receipts are gone whole is not a fleet of one fewer.
func replayArchive(f *Factory, rp *receipts.Replayer, url string, notes map[string][]byte) error {
	if f.AWS == nil {
		return f.HandOff("replay reads an S3 archive")
	}
	c, err := f.Config()
	if err != nil {
		c = nil // replay of an archive needs no configuration
	}
	ctx := context.Background()
	chains, err := f.AWS.ArchiveChains(ctx, c, url)
	var ce *config.Error
	switch {
	case errors.As(err, &ce):
		return err
	case err != nil:
		return &ExitError{Code: ExitIOErr, Msg: "replay: " + localapi.OneLine(err)}
	case len(chains) == 0:
		return &ExitError{Code: ExitIOErr, Msg: fmt.Sprintf("replay: %s holds no receipts: no object PREFIX/SEQ-HASH.json is under it (is the prefix mistyped?)", url)}
	case len(chains) > 1 && rp.Checkpoint != nil:
		return &localapi.UsageError{Msg: fmt.Sprintf("--checkpoint is one host's signed head, and %s holds %d hosts' receipts: replay that host's prefix with it", url, len(chains))}
	}
	out := newReplayOutput(f, true)
	out.audit = rp.Audit != nil
	fleet := &receipts.Fleet{}
	var sums []hostSummary
	for _, chain := range chains {
		host := strings.TrimPrefix(chain, "s3://")
		if _, p, _ := strings.Cut(host, "/"); p != "" {
			host = p
		}
		in, err := f.AWS.OpenArchive(ctx, c, chain)
		if err != nil {
			return err
		}
		rp.Relied = fleet.Host(host)
		r := io.Reader(ioFailure{in})
		if len(notes) > 0 {
			// The chain's host is its first receipt's (its signature
			// and every later receipt's host are the replay's to judge).
			br := bufio.NewReaderSize(r, receipts.MaxLine+1)
			first, _ := br.ReadSlice('\n')
			first = bytes.Clone(first)
			r = io.MultiReader(bytes.NewReader(first), br)
			rp.CheckpointNote = nil
			if _, rec, err := receipts.Decode(bytes.TrimSuffix(first, []byte{'\n'})); err == nil {
				if n, ok := notes[rec.Host]; ok {
					rp.CheckpointNote = n
					delete(notes, rec.Host)
				}
			}
		}
		sum, err := out.replay(rp, host, chain, r)
		in.Close()
		if err != nil {
			return err
		}
		sums = append(sums, hostSummary{Host: host, Summary: sum})
	}
	for _, h := range slices.Sorted(maps.Keys(notes)) {
		out.emit(replayResult{Host: "fleet", Result: receipts.Result{Kind: "checkpoint", Problems: []receipts.Problem{{Code: receipts.Truncated,
			Detail: fmt.Sprintf("host %q's checkpoint note counts its receipts, and %s holds no chain of host %q: its receipts are gone", h, url, h)}}}})
		out.fleetFailed++
	}
	return out.end(sums[0].Summary, sums, fleet.Reused())
}

// hostNotes reads replay --host-checkpoint's notes, by the host each
// names (its origin), each signed by a runner of the policy.
func hostNotes(paths []string, policy *approval.Policy) (map[string][]byte, error) {
	notes := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		if !receipts.IsCheckpointNote(b) {
			return nil, &localapi.UsageError{Msg: "--host-checkpoint " + p + ": not a checkpoint note (receipts checkpoint --note)"}
		}
		_, host, err := receipts.OpenRunnerNote(b, policy)
		if err != nil {
			return nil, &localapi.DataError{Err: fmt.Errorf("--host-checkpoint %s: %w", p, err)}
		}
		if _, dup := notes[host]; dup {
			return nil, &localapi.UsageError{Msg: fmt.Sprintf("--host-checkpoint: two notes of host %q", host)}
		}
		notes[host] = b
	}
	return notes, nil
}

// replayResult is one line of replay's --json output: a receipt's verdict
// and, from an archive, the host whose chain holds it; or a record spent
// across hosts, with every spend.
type replayResult struct {
	Host string `json:"host,omitempty"`
	receipts.Result
	Spends []receipts.Spend `json:"spends,omitempty"`
}

// hostSummary is one host's part of a fleet replay.
type hostSummary struct {
	Host string `json:"host"`
	receipts.Summary
}

// replayOutput prints replay's table or JSON as results stream in.
type replayOutput struct {
	f     *Factory
	w     *bufio.Writer
	tw    *tabwriter.Writer
	hosts bool // a HOST column
	first bool
	audit bool // replay --policy: say what the proposal would refuse
	rows  int
	// note, for a journal with no entry, is said instead of the table
	// (in text; the JSON document is the same, with no receipt).
	note string
	// fleetFailed counts the fleet's own failures besides its hosts'
	// (a host checkpoint note no chain answers).
	fleetFailed int
	// vsaVerify is the command that verifies the VSA replay --vsa wrote:
	// the document's vsa_verify (in text it goes to stderr).
	vsaVerify string
}

// tableBlock is how many rows a table aligns at once: tabwriter holds
// every row until it is flushed, and a million receipts must not be held
// (SPEC §15). Columns are aligned within each block of rows.
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

func (o *replayOutput) emit(r replayResult) {
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

// replay replays one journal, read from in, naming it name in errors.
func (o *replayOutput) replay(rp *receipts.Replayer, host, name string, in io.Reader) (receipts.Summary, error) {
	sum, err := rp.Replay(in, func(r receipts.Result) { o.emit(replayResult{Host: host, Result: r}) })
	return sum, o.replayed(name, sum, err)
}

// replayed ends the output of a journal that is not receipts at all,
// which is bad input.
func (o *replayOutput) replayed(name string, sum receipts.Summary, err error) error {
	var notReceipts *receipts.NotReceiptsError
	if errors.As(err, &notReceipts) {
		if o.f.JSON {
			io.WriteString(o.w, "]}\n")
		}
		o.w.Flush()
		return &localapi.DataError{Err: fmt.Errorf("%s: %w", name, err)}
	}
	return err
}

// end prints what is left and the summary: for a fleet (hosts given),
// every record spent across hosts beyond what it allows, each host's
// summary and the fleet's.
func (o *replayOutput) end(sum receipts.Summary, hosts []hostSummary, reused []receipts.Reuse) error {
	defer o.w.Flush()
	if len(hosts) > 1 {
		sum = receipts.Summary{OK: true}
		for _, h := range hosts {
			sum.Entries += h.Entries
			sum.Runs += h.Runs
			sum.Failed += h.Failed
			sum.Incomplete += h.Incomplete
			sum.RevokedSince += h.RevokedSince
			sum.WouldRefuse += h.WouldRefuse
			sum.BreakGlass += h.BreakGlass
			sum.BreakGlassUnreviewed += h.BreakGlassUnreviewed
			sum.OK = sum.OK && h.OK
		}
	}
	if o.fleetFailed > 0 {
		sum.Failed += o.fleetFailed
		sum.OK = false
	}
	for _, r := range reused {
		res := replayResult{Host: "fleet", Result: receipts.Result{Kind: "fleet", Problems: []receipts.Problem{{Code: receipts.EvidenceReused, Detail: r.Detail()}}}, Spends: r.Spends}
		o.emit(res)
		sum.Failed++
		sum.OK = false
	}
	if o.f.JSON {
		var b []byte
		if len(hosts) > 1 {
			b, _ = json.Marshal(struct {
				receipts.Summary
				Hosts []hostSummary `json:"hosts"`
			}{sum, hosts})
		} else {
			b, _ = json.Marshal(sum)
		}
		fmt.Fprintf(o.w, "],\"summary\":%s", b)
		if o.vsaVerify != "" {
			v, _ := json.Marshal(o.vsaVerify)
			fmt.Fprintf(o.w, ",\"vsa_verify\":%s", v)
		}
		o.w.WriteString("}\n")
	} else {
		switch {
		case o.rows > 0:
			o.tw.Flush()
		case o.note != "":
			fmt.Fprintln(o.w, o.note)
		default:
			o.header()
			o.tw.Flush()
		}
		if len(hosts) > 1 {
			for _, h := range hosts {
				fmt.Fprintf(o.w, "%s: %d entries, %d runs: %d failed, %d incomplete\n", h.Host, h.Entries, h.Runs, h.Failed, h.Incomplete)
			}
			fmt.Fprintf(o.w, "fleet of %d hosts: ", len(hosts))
		}
		fmt.Fprintf(o.w, "%d entries, %d runs: %d failed, %d incomplete\n", sum.Entries, sum.Runs, sum.Failed, sum.Incomplete)
		if sum.BreakGlass > 0 {
			fmt.Fprintf(o.w, "%d break-glass runs, %d unreviewed (--fail-unreviewed-break-glass fails them)\n", sum.BreakGlass, sum.BreakGlassUnreviewed)
		}
		if sum.RevokedSince > 0 {
			fmt.Fprintf(o.w, "%d runs relied on a principal revoked since (--strict-revocation fails them)\n", sum.RevokedSince)
		}
		if o.audit {
			fmt.Fprintf(o.w, "audit: the proposed policy would have refused %d of %d runs (reported, not failed)\n", sum.WouldRefuse, sum.Runs)
		}
	}
	if !sum.OK {
		return &ExitError{Code: ExitInvalid, Msg: fmt.Sprintf("replay: %d entries do not verify and %d runs are incomplete", sum.Failed, sum.Incomplete)}
	}
	return nil
}

// loadAudit reads a proposed trust policy and registry for replay --policy
// (either may be empty: then each run's own is kept).
func loadAudit(policy, registry string) (*receipts.Audit, error) {
	a := &receipts.Audit{}
	if policy != "" {
		p, err := approval.LoadPolicy(policy)
		if err != nil {
			return nil, fmt.Errorf("the proposed policy: %w", err)
		}
		a.Policy = p
	}
	if registry != "" {
		defs, err := localapi.ReadDefinitions(registry)
		if err != nil {
			return nil, fmt.Errorf("the proposed registry: %w", err)
		}
		a.Ops = map[string]*operations.Operation{}
		for _, op := range defs {
			a.Ops[op.Name] = op
		}
	}
	return a, nil
}
