package localapi

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
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/strictjson"
	"github.com/prod-write/prod-write/receipts"
)

// Replay is replay as req asks: the configured journal by the configured
// policy, registry and history when it names nothing, or the journal file
// or S3 archive, the checkpoints, the policy and the state it names. Each
// verdict goes to req.Each as it is reached; the result is the summary.
//
// In the runner service (a call of a client) a request that names anything
// is refused: the service replays its own journal, and never reads or
// writes a file a caller names with its own rights. The CLI replays such a
// request in the caller's process.
func (a API) Replay(_ context.Context, req api.ReplayRequest) (*api.ReplayResult, error) {
	f := a.Env
	if f.Call != nil && req.HasOptions() {
		return nil, &UsageError{Msg: "the runner service replays its own journal by its own policy, registry and history: a replay that names a file or an option is made in the caller's process"}
	}
	if err := checkReplay(req); err != nil {
		return nil, err
	}
	each := req.Each
	if each == nil {
		each = func(api.ReplayVerdict) {}
	}
	j, err := NewReplayJudge(f, ReplaySource{Path: req.Path, Trust: req.Trust, Host: req.Host, Registry: req.Registry, History: req.History, Rollout: req.Rollout,
		StrictRevocation: req.StrictRevocation, FailUnreviewedBreakGlass: req.FailUnreviewedBreakGlass})
	if err != nil {
		return nil, err
	}
	rp, policy := j.Replayer, j.Policy
	res := &api.ReplayResult{}
	if req.Policy != "" || req.PolicyRegistry != "" {
		if rp.Audit, err = loadAudit(req.Policy, req.PolicyRegistry); err != nil {
			return nil, err
		}
		res.Audit = true
	}
	if req.WitnessMaxAge > 0 {
		rp.WitnessedSince = f.Now().Add(-req.WitnessMaxAge)
	}
	if req.Witnesses > len(policy.Witnesses) {
		return nil, &UsageError{Msg: fmt.Sprintf("--witnesses %d: the trust policy %s names %d witnesses", req.Witnesses, j.Trust, len(policy.Witnesses))}
	}
	notes, err := hostNotes(req.HostCheckpoints, policy)
	if err != nil {
		return nil, err
	}
	if req.Checkpoint != "" {
		b, err := os.ReadFile(req.Checkpoint)
		if err != nil {
			return nil, err
		}
		if receipts.IsCheckpointNote(b) {
			// A checkpoint note (receipts checkpoint --note): the
			// journal's Merkle tree, judged by the replayer.
			rp.CheckpointNote = b
			rp.Witnesses = req.Witnesses
		} else if req.Witnesses > 0 {
			return nil, &UsageError{Msg: "--witnesses counts the cosignatures of a checkpoint note (receipts checkpoint --note); " + req.Checkpoint + " is a DSSE checkpoint"}
		} else {
			env, err := DecodeCheckpoint(bytes.TrimSuffix(b, []byte{'\n'}))
			if err != nil {
				return nil, &DataError{Err: fmt.Errorf("checkpoint %s: %w", req.Checkpoint, err)}
			}
			rp.Checkpoint = env
		}
	}
	// Replay allocates as it streams; collecting only when memory nears a
	// fixed bound keeps it well under 100 MB and spends less time in the
	// collector than the default pacing (docs/PERFORMANCE.md).
	// A replay state is held whole once restored (every record's uses
	// and run id, in maps several times its packed size): under a fixed
	// bound that live heap would leave the collector running all the
	// time, so the bound grows with the state file.
	limit := int64(64 << 20)
	if req.State != "" {
		if fi, err := os.Stat(req.State); err == nil {
			limit += 8 * fi.Size()
		}
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(limit))
	if IsArchiveURL(j.Path) {
		if req.VSA != "" {
			return nil, &UsageError{Msg: "--vsa attests a journal file's head; replay the archive's journal from a file"}
		}
		rp.Witnesses = req.Witnesses
		return res, replayArchive(f, rp, j.Path, notes, each, res)
	}
	in, note, err := OpenReplayJournal(j.Path, req.Path == "")
	if err != nil {
		return nil, err
	}
	defer in.Close()
	res.Note = note
	emit := func(r receipts.Result) { each(api.ReplayVerdict{Result: r}) }
	if req.State != "" {
		err = replayState(req, rp, j.Path, in, emit, res)
	} else {
		res.Summary, err = rp.Replay(in, emit)
		err = notReceipts(j.Path, err)
	}
	if err != nil {
		return nil, err
	}
	if req.VSA != "" {
		if res.VSAVerify, err = writeVSA(f, req, res.Summary, policy, j.Trust, j.Path, j.Host); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// checkReplay refuses a request whose options do not go together.
func checkReplay(req api.ReplayRequest) error {
	switch {
	case req.Witnesses < 0:
		return &UsageError{Msg: "--witnesses counts witnesses: 0 or more"}
	case req.WitnessMaxAge < 0 || (req.WitnessMaxAge > 0 && req.Witnesses == 0):
		return &UsageError{Msg: "--witness-max-age bounds the age of the cosignatures --witnesses counts: a positive duration, with --witnesses"}
	case len(req.HostCheckpoints) > 0 && (!IsArchiveURL(req.Path) || req.Checkpoint != ""):
		return &UsageError{Msg: "--host-checkpoint is one host's note in a replay of an S3 archive (s3://BUCKET/PREFIX), instead of --checkpoint"}
	case req.Witnesses > 0 && req.Checkpoint == "" && len(req.HostCheckpoints) == 0:
		return &UsageError{Msg: "--witnesses counts the cosignatures of the --checkpoint note: give one"}
	case (req.VSA == "") != (req.VSAKey == ""):
		return &UsageError{Msg: "--vsa and --vsa-key go together"}
	case (req.State == "") != (req.StateKey == ""):
		return &UsageError{Msg: "--state and --state-key go together: a state is believed only as its key sealed it"}
	case req.State != "" && (req.Policy != "" || req.PolicyRegistry != "" || IsArchiveURL(req.Path)):
		return &UsageError{Msg: "--state resumes one journal file's replay: not with --policy, --policy-registry or an S3 archive"}
	}
	return nil
}

// IsArchiveURL reports whether replay's input is the S3 archive.
func IsArchiveURL(path string) bool { return strings.HasPrefix(path, "s3://") }

// notReceipts makes a journal that is not receipts at all bad input.
func notReceipts(name string, err error) error {
	var nr *receipts.NotReceiptsError
	if errors.As(err, &nr) {
		return &DataError{Err: fmt.Errorf("%s: %w", name, err)}
	}
	return err
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
func replayArchive(f *Env, rp *receipts.Replayer, url string, notes map[string][]byte, each func(api.ReplayVerdict), res *api.ReplayResult) error {
	if f.AWS == nil {
		return fmt.Errorf("replay of %s needs the AWS backends (%s)", url, NetBinary)
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
		return &ExitError{Code: ExitIOErr, Msg: "replay: " + OneLine(err)}
	case len(chains) == 0:
		return &ExitError{Code: ExitIOErr, Msg: fmt.Sprintf("replay: %s holds no receipts: no object PREFIX/SEQ-HASH.json is under it (is the prefix mistyped?)", url)}
	case len(chains) > 1 && rp.Checkpoint != nil:
		return &UsageError{Msg: fmt.Sprintf("--checkpoint is one host's signed head, and %s holds %d hosts' receipts: replay that host's prefix with it", url, len(chains))}
	}
	fleet := &receipts.Fleet{}
	var hosts []api.HostSummary
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
		sum, err := rp.Replay(r, func(r receipts.Result) { each(api.ReplayVerdict{Host: host, Result: r}) })
		in.Close()
		if err := notReceipts(chain, err); err != nil {
			return err
		}
		hosts = append(hosts, api.HostSummary{Host: host, Summary: sum})
	}
	sum := hosts[0].Summary
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
		res.Hosts = hosts
	}
	for _, h := range slices.Sorted(maps.Keys(notes)) {
		each(api.ReplayVerdict{Host: "fleet", Result: receipts.Result{Kind: "checkpoint", Problems: []receipts.Problem{{Code: receipts.Truncated,
			Detail: fmt.Sprintf("host %q's checkpoint note counts its receipts, and %s holds no chain of host %q: its receipts are gone", h, url, h)}}}})
		sum.Failed++
		sum.OK = false
	}
	for _, r := range fleet.Reused() {
		each(api.ReplayVerdict{Host: "fleet", Result: receipts.Result{Kind: "fleet", Problems: []receipts.Problem{{Code: receipts.EvidenceReused, Detail: r.Detail()}}}, Spends: r.Spends})
		sum.Failed++
		sum.OK = false
	}
	res.Summary = sum
	return nil
}

// ioFailure makes a failure to read the archive an I/O error (exit 74),
// as a journal file that cannot be read is, rather than an internal one.
type ioFailure struct{ io.ReadCloser }

func (r ioFailure) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = &ExitError{Code: ExitIOErr, Msg: fmt.Sprintf("replay: %v", err)}
	}
	return n, err
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
			return nil, &UsageError{Msg: "--host-checkpoint " + p + ": not a checkpoint note (receipts checkpoint --note)"}
		}
		_, host, err := receipts.OpenRunnerNote(b, policy)
		if err != nil {
			return nil, &DataError{Err: fmt.Errorf("--host-checkpoint %s: %w", p, err)}
		}
		if _, dup := notes[host]; dup {
			return nil, &UsageError{Msg: fmt.Sprintf("--host-checkpoint: two notes of host %q", host)}
		}
		notes[host] = b
	}
	return notes, nil
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
		defs, err := ReadDefinitions(registry)
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

// replayState is replay --state: resume from the state file when it
// verifies under the state key, replay what is new, and seal the state at
// the head there when no entry failed (docs/adr/0044-journal-merkle-log.md,
// "Incremental replay"). A state file that does not verify is refused,
// never believed; one judged by another policy, history or options is
// not reused: the journal is replayed in full.
func replayState(req api.ReplayRequest, rp *receipts.Replayer, path string, in io.Reader, emit func(receipts.Result), res *api.ReplayResult) error {
	k, err := keys.Load(req.StateKey)
	if err != nil {
		return err
	}
	var from *receipts.ReplayState
	b, err := os.ReadFile(req.State)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// The first run: a full replay, which writes the state.
	case err != nil:
		return err
	default:
		from, err = receipts.OpenReplayState(b, k.Public())
		switch {
		case errors.Is(err, receipts.ErrStateOutdated):
			// Signed by the state key, written by an earlier replayer:
			// replayed in full, and written again in this version.
			res.StateOutdated = true
		case err != nil:
			return &DataError{Err: fmt.Errorf("--state %s: %w (remove it to replay in full)", req.State, err)}
		case from.Judge != rp.JudgeDigest():
			res.StateRejudged = true
			from = nil
		}
	}
	sum, next, err := rp.ReplayFrom(in, from, emit)
	res.Summary = sum
	if err := notReceipts(path, err); err != nil {
		return err
	}
	if from != nil {
		res.StateResumed, res.StateFrom = true, from.Size
	}
	if next == nil {
		// A run that failed writes no state; the one it resumed from, if
		// any, still stands.
		return nil
	}
	sealed, err := receipts.SealReplayState(context.Background(), k, next)
	if err != nil {
		return err
	}
	return writeFileAtomic(req.State, sealed)
}

// writeFileAtomic replaces path with b: a temporary file beside it,
// renamed over it, so that a reader sees the old state or the new.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// VSAStatement is replay's verdict on a journal head as a SLSA VSA
// (docs/REPLAY.md): what was verified (the head line's sha256 and the
// number of entries), against which policy, and the result.
// receipts.VSA.Verify checks each of these fields.
func VSAStatement(sum receipts.Summary, policy *approval.Policy, trustPath, resource, host string, verified string) *receipts.Statement {
	result := "PASSED"
	levels := []string{"PRODWRITE_REPLAY_V1"}
	if !sum.OK {
		result, levels = "FAILED", []string{"FAILED"}
	}
	type digest = map[string]string
	p := receipts.VSAPredicate{
		TimeVerified: verified,
		ResourceURI:  resource,
		Policy: receipts.VSAPolicy{URI: "file://" + trustPath,
			Digest: digest{"sha256": strings.TrimPrefix(policy.Digest, "sha256:")}},
		VerificationResult: result,
		VerifiedLevels:     levels,
		SlsaVersion:        "1.0",
		DependencyLevels:   map[string]uint64{},
	}
	p.Verifier.ID = receipts.VSAVerifierID
	return &receipts.Statement{
		Type: receipts.StatementV1,
		Subject: []receipts.Subject{{
			Name:   "prod-write-journal:" + host,
			Digest: digest{"sha256": sum.Head},
		}},
		PredicateType: receipts.VSAPredicateV1,
		Predicate:     p,
	}
}

// writeVSA signs replay's verdict with the key given to CI and writes it
// to req.VSA as a DSSE envelope. It returns the command that verifies it.
func writeVSA(f *Env, req api.ReplayRequest, sum receipts.Summary, policy *approval.Policy, trust, path, host string) (string, error) {
	k, err := keys.Load(req.VSAKey)
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	trustAbs, _ := filepath.Abs(trust)
	resource := "file://" + abs + "#entries=" + strconv.Itoa(sum.Entries)
	st := VSAStatement(sum, policy, trustAbs, resource, host, f.Now().UTC().Format("2006-01-02T15:04:05Z"))
	env, err := receipts.SignStatement(context.Background(), k, st)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(env)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(req.VSA, append(b, '\n'), 0o644); err != nil {
		return "", err
	}
	return VerifyVSACommand(req.VSA, path, k.Public()), nil
}

// VerifyVSACommand is the command that verifies the VSA replay wrote to
// vsa, about the journal at path, under ci's public key: what replay
// prints, so that nobody has to guess the subject.
func VerifyVSACommand(vsa, path string, ci keys.Public) string {
	return strings.Join([]string{"prod-write", "replay", "verify-vsa", ShellQuote(vsa), "--journal", ShellQuote(path), "--pub", ShellQuote(ci.String())}, " ")
}

// ShellQuote quotes s for a POSIX shell when it needs it.
func ShellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=@%+,-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// CheckpointDoc is `receipts checkpoint --json`: the signed envelope, and
// what its payload says (unverified; replay verifies the envelope).
type CheckpointDoc struct {
	FormatVersion int `json:"format_version"`
	receipts.Checkpoint
	Envelope *approval.Envelope `json:"envelope"`
}

// DecodeCheckpoint reads what `receipts checkpoint` wrote, with or without
// --json: a DSSE envelope, or a document holding one in "envelope". Only
// the envelope is used: what the document says beside it is not signed.
func DecodeCheckpoint(b []byte) (*approval.Envelope, error) {
	// Either form is read strictly: exact keys, no duplicates,
	// nothing after the value. Only the envelope is trusted.
	var probe struct {
		FormatVersion *int `json:"format_version"`
	}
	if json.Unmarshal(b, &probe) == nil && probe.FormatVersion != nil {
		// The document --json writes, read by its own type.
		var doc CheckpointDoc
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
