package localapi

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/strictjson"
	"github.com/prod-write/prod-write/receipts"
)

// OpenJournal opens the configured journal. One that does not exist is
// bad input to a command that looks for a receipt in it (a
// [*noJournalError]); list and replay say there is none yet instead.
func OpenJournal(f *Env) (*os.File, error) {
	c, err := f.Config()
	if err != nil {
		return nil, err
	}
	fl, err := os.Open(c.JournalPath())
	if errors.Is(err, os.ErrNotExist) {
		return nil, &DataError{Err: &noJournalError{path: c.JournalPath()}}
	}
	return fl, err
}

// noJournalError is a configured journal that does not exist: no run has
// written a receipt here yet.
type noJournalError struct{ path string }

func (e *noJournalError) Error() string { return noReceipts(e.path, true) }

// noReceipts is how list and replay report a journal with no entry: an
// empty or absent journal is one nothing has run against yet, which is no
// error.
func noReceipts(journal string, absent bool) string {
	if absent {
		return fmt.Sprintf("no receipts yet: %s does not exist", journal)
	}
	return fmt.Sprintf("no receipts yet: %s is empty", journal)
}

// reviewedPlan is the fingerprint a break-glass review says it reviews
// the run of, read without verifying it (as list reads every receipt), or
// "" when env does not read as a review.
func reviewedPlan(env *approval.Envelope) string {
	if env == nil || env.PayloadType != approval.TypeBreakGlassReview {
		return ""
	}
	b, err := base64.StdEncoding.Strict().DecodeString(env.Payload)
	if err != nil {
		return ""
	}
	var rev approval.BreakGlassReview
	if strictjson.Unmarshal(b, &rev) != nil {
		return ""
	}
	return rev.Fingerprint
}

// signingJournal is what a command the runner key signs reads (checkpoint,
// export): the configuration and policy, the runner's key and principal,
// and the journal, which the caller closes.
type signingJournal struct {
	cfg     *config.Config
	policy  *approval.Policy
	key     *keys.Private
	runner  *approval.Principal
	journal *os.File
}

func openSigningJournal(f *Env) (*signingJournal, error) {
	c, err := f.Config()
	if err != nil {
		return nil, err
	}
	p, err := f.Policy(c)
	if err != nil {
		return nil, err
	}
	k, pr, err := f.RunnerIdentity(c, p)
	if err != nil {
		return nil, err
	}
	fl, err := OpenJournal(f)
	if err != nil {
		return nil, err
	}
	return &signingJournal{cfg: c, policy: p, key: k, runner: pr, journal: fl}, nil
}

func (a API) ReceiptsCheckpoint(ctx context.Context, req api.ReceiptsCheckpointRequest) (*api.ReceiptsCheckpointResult, error) {
	req.Note = req.Note || req.Witness
	f := a.Env
	sj, err := openSigningJournal(f)
	if err != nil {
		return nil, err
	}
	defer sj.journal.Close()
	c, k, pr, fl := sj.cfg, sj.key, sj.runner, sj.journal
	cp := receipts.Checkpoint{Time: f.Now().UTC(), Runner: pr.ID, Host: runner.JournalHost(c.Host)}
	tree := &receipts.Tree{}
	err = receipts.Scan(fl, func(l receipts.Line) error {
		if l.Torn {
			// Cut off by the next append: a head naming it could never
			// verify again.
			return nil
		}
		cp.Count++
		cp.Head = receipts.LineHash(l.Bytes)
		if l.Long > 0 {
			cp.Head = l.Hash
		}
		if req.Note {
			return tree.AppendLineHash(cp.Head)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	env, err := approval.Sign(k, receipts.CheckpointType, cp)
	if err != nil {
		return nil, err
	}
	r := &api.ReceiptsCheckpointResult{Checkpoint: cp, Envelope: env}
	if req.Note {
		note, err := receipts.SignNoteCheckpoint(k, receipts.NoteOrigin(cp.Host), tree, tree.Size())
		if err != nil {
			return nil, err
		}
		if req.Witness {
			if len(c.Witnesses) == 0 {
				return nil, &config.Error{Path: c.Path, Msg: "receipts checkpoint --witness: no [[witness]] to send to"}
			}
			if r.Witnesses, err = SendToWitnesses(ctx, c, sj.policy, tree, note); err != nil {
				return nil, err
			}
		}
		// The cosignatures kept of this very checkpoint (ed25519 is
		// deterministic: the same tree signs the same note).
		if note, err = cosignedNote(c, note); err != nil {
			return nil, err
		}
		r.Note = string(note)
	}
	return r, nil
}

// ReplaySource is what a replay judges by, as its options name it; each
// empty one is the configuration's.
type ReplaySource struct {
	Path, Trust, Host, Registry, History       string
	StrictRevocation, FailUnreviewedBreakGlass bool
	// Rollout is the branch history's allowance (0: the default).
	Rollout time.Duration
}

// ReplayJudge is what replay judges a journal by: the options, and the
// configuration for what they leave out.
type ReplayJudge struct {
	Replayer          *receipts.Replayer
	Policy            *approval.Policy
	Trust, Path, Host string
}

// NewReplayJudge resolves o into the Replayer replay runs. receipts list
// builds its own with no options, so that it says of break-glass runs what
// `prod-write replay` of the configured journal says.
func NewReplayJudge(f *Env, o ReplaySource) (*ReplayJudge, error) {
	trust, path, host, registry := o.Trust, o.Path, o.Host, o.Registry
	beside := o.Trust != "" && registry == ""
	if beside {
		// The registry beside the trust policy named: a checkout of the
		// protected branch needs no configuration of its own.
		registry = RegistryBeside(trust)
	}
	if trust == "" || path == "" || registry == "" {
		c, err := f.Config()
		if err != nil {
			return nil, err
		}
		if trust == "" {
			trust = c.Trust
		}
		if registry == "" {
			registry = c.Registry
		}
		if path == "" {
			path = c.JournalPath()
			if host == "" {
				host = runner.JournalHost(c.Host) // this host's own journal
			}
		}
	}
	policy, err := approval.LoadPolicy(trust)
	if err != nil {
		return nil, err
	}
	defs, err := readRegistry(registry, trust, beside && registry != "")
	if err != nil {
		return nil, err
	}
	hist, err := LoadReplayHistory(trust, registry, o.History, o.Rollout, policy, defs)
	if err != nil {
		return nil, err
	}
	rp := &receipts.Replayer{Policy: policy, Host: host, History: hist, StrictRevocation: o.StrictRevocation, FailUnreviewedBreakGlass: o.FailUnreviewedBreakGlass}
	rp.BreakGlassReviews = storeReviews(f)
	return &ReplayJudge{Replayer: rp, Policy: policy, Trust: trust, Path: path, Host: host}, nil
}

// OpenReplayJournal opens the journal at path for replay, and says when it
// has no entry. The configured journal (configured true) that does not
// exist is one no run has written yet: replayed as empty, which verifies
// unless a checkpoint counts entries it lacks. A path named on the command
// line that does not exist stays an error: it is more likely mistyped.
func OpenReplayJournal(path string, configured bool) (io.ReadCloser, string, error) {
	in, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) && configured {
		return io.NopCloser(strings.NewReader("")), noReceipts(path, true), nil
	}
	if err != nil {
		return nil, "", err
	}
	if fi, err := in.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
		return in, noReceipts(path, false), nil
	}
	return in, "", nil
}

// ReadDefinitions reads the operation definitions of a registry directory
// as the protected branch declares them, without resolving programs (CI
// need not have them).
func ReadDefinitions(dir string) ([]*operations.Operation, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the registry: %w", err)
	}
	var out []*operations.Operation
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".toml") {
			continue
		}
		file := filepath.Join(dir, e.Name())
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("reading the registry: %w", err)
		}
		ops, err := operations.Parse(file, data)
		if err != nil {
			return nil, err
		}
		out = append(out, ops...)
	}
	return out, nil
}

func (a ServiceClient) ReceiptsCheckpoint(ctx context.Context, req api.ReceiptsCheckpointRequest) (*api.ReceiptsCheckpointResult, error) {
	var r api.ReceiptsCheckpointResult
	if err := callInto(ctx, a, api.CallCheckpoint, req, nil, &r); err != nil {
		return nil, err
	}
	if r.Envelope == nil || (req.Note && r.Note == "") {
		return nil, errors.New("the runner service answered a checkpoint with no envelope or no note")
	}
	return &r, nil
}
