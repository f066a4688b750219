package localapi

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/receipts"
)

// notifyBreakGlass tells every approver the break-glass skips, on every
// configured bridge, the moment the record is stored (the record can run
// at once). A bridge that cannot be reached does not undo the record (in
// an incident the chat may be what is down) but is never silent: a
// warning names it, run warns again when the ledger holds no post of it,
// and the run stays unreviewed until someone reviews it
// (docs/adr/0028-break-glass.md).
func notifyBreakGlass(f *Env, pc *planContext, id string, b *approval.BreakGlass) {
	var skipped []*approval.Principal
	var names []string
	for _, pr := range pc.Policy.Principals {
		if pr.ID == b.Breaker || !pr.InForce(f.Now()) {
			continue
		}
		if (pc.Op.Accepts(operations.PathSmithTrinity) && pr.Has(approval.RoleApprover)) || (pc.Op.Accepts(operations.PathGera) && pr.Has(approval.RoleGera)) {
			skipped = append(skipped, pr)
			names = append(names, pr.ID)
		}
	}
	if !slices.Contains([]bool{SlackEnabled(pc.Config.Bridge), GitHubEnabled(pc.Config.Bridge)}, true) {
		f.Warn("break-glass %.12s: no bridge is configured, so the skipped approvers (%s) were not notified", id, strings.Join(names, ", "))
		return
	}
	ps, secrets, errs := posters(f, pc.Config)
	for _, err := range errs {
		f.Warn("break-glass %.12s: approvers not notified: %s", id, bridge.Redact(err.Error(), secrets...))
	}
	text := fmt.Sprintf("Break-glass: %s on %s by %s without the usual approvals\nIncident: %s\nReason: %s\nRecord: %s (may run until %s)\nFingerprint: %s\nSkipped: %s\nOnce it has run, review it: prod-write break-glass review RUN (receipts list shows the run)",
		pc.Plan.Operation, pc.Plan.Target, b.Breaker, b.Incident, b.Reason, id, b.Expires.UTC().Format(time.RFC3339), pc.Plan.Fingerprint, strings.Join(names, ", "))
	ctx, cancel := context.WithTimeout(context.Background(), BridgeTimeout)
	defer cancel()
	posts, errs := bridge.Announce(ctx, bridge.LedgerOf(pc.Config), ps, pc.Plan.Fingerprint, id, f.Now().UTC(), bridge.Notice{Kind: "break-glass", Text: text, Mention: skipped})
	for _, err := range errs {
		f.Warn("break-glass %.12s: %s", id, bridge.Redact(err.Error(), secrets...))
	}
	for _, p := range posts {
		f.Notify(api.Notice{Kind: api.NoticeNotified, Text: fmt.Sprintf("break-glass notified on %s%s: %s", p.Kind, where(p), strings.Join(names, ", ")), Channel: p.Kind, URL: p.URL})
	}
}

// breakGlassReview signs o's review of a break-glass run as f's caller,
// stores it under the breaker and writes it to the journal. It stays here,
// not in pkg/runner, because it reads the journal and the runner identity
// through f (openJournal, runnerIdentity), as receipts and run do.
func breakGlassReview(f *Env, o api.BreakGlassReviewRequest) (*api.BreakGlassReviewResult, error) {
	c, err := f.Config()
	if err != nil {
		return nil, err
	}
	p, err := f.Policy(c)
	if err != nil {
		return nil, err
	}
	k, pr, err := f.Actor(p, approval.RoleApprover)
	if err != nil {
		return nil, err
	}
	in, runID, err := findBreakGlassRun(f, o.Run)
	if err != nil {
		return nil, err
	}
	var rec *approval.Signed
	for _, env := range in.Evidence {
		if s, err := p.Open(env); err == nil && s.ID == in.Anchor && s.Type == approval.TypeBreakGlass {
			rec = s
		}
	}
	if rec == nil {
		return nil, &DataError{Err: fmt.Errorf("run %s's intent does not carry its break-glass record", runID)}
	}
	var b approval.BreakGlass
	if err := rec.Decode(&b); err != nil {
		return nil, err
	}
	if b.Breaker == pr.ID {
		return nil, refusal.New(refusal.SelfApproval, "%s broke glass in run %s and cannot also review it", pr.ID, runID).For(in.Operation.Name, in.Fingerprint).Needs("a review by another approver")
	}
	now := f.Now().UTC()
	r := approval.BreakGlassReview{Record: rec.ID, Fingerprint: b.Fingerprint, Breaker: b.Breaker, Reviewer: pr.ID, Notes: o.Notes, Issued: now}
	env, err := approval.Sign(k, approval.TypeBreakGlassReview, r)
	if err != nil {
		return nil, err
	}
	id, err := approval.ID(env)
	if err != nil {
		return nil, err
	}
	// The review receipt needs the runner key: settled before anything is
	// stored.
	rk, rp, err := f.RunnerIdentity(c, p)
	if err != nil {
		return nil, err
	}
	st, err := f.Store(c)
	if err != nil {
		return nil, err
	}
	if err := store.PutBreakGlass(st, b.Breaker, id, env); err != nil {
		return nil, fmt.Errorf("storing review: %w", err)
	}
	// And in the journal, signed by the runner, so that replay of the
	// journal alone sees the run reviewed (ADR 0028): the reviewer's
	// signature is what replay verifies.
	j := &receipts.Journal{Path: c.JournalPath(), Key: rk, Runner: rp.ID, Host: runner.JournalHost(c.Host), Now: f.Now, Sync: f.JournalSync}
	if _, err := j.Append(&receipts.Receipt{Kind: receipts.KindReview, RunID: runID, Review: &receipts.Review{Review: env}}); err != nil {
		return nil, fmt.Errorf("review %s stored, but writing its review receipt: %w", id, err)
	}
	return &api.BreakGlassReviewResult{
		Written: api.Written{FormatVersion: FormatVersion, Kind: approval.KindBreakGlassReview, ID: id, Actor: pr.ID, Fingerprint: b.Fingerprint, Verdict: "review", Record: rec.ID, RunID: runID, Issued: now},
		Breaker: b.Breaker,
	}, nil
}

// findBreakGlassRun finds the intent of run (an id or a prefix of at least
// 6 digits) in the journal; it must be on the break-glass path.
func findBreakGlassRun(f *Env, run string) (*receipts.Intent, string, error) {
	if len(run) < 6 {
		return nil, "", &UsageError{Msg: "RUN is a run id or a prefix of at least 6 of its digits"}
	}
	fl, err := OpenJournal(f)
	if err != nil {
		return nil, "", err
	}
	defer fl.Close()
	var found *receipts.Receipt
	n := 0
	err = receipts.Scan(fl, func(l receipts.Line) error {
		_, r, err := receipts.Decode(l.Bytes)
		if err != nil || r.Kind != receipts.KindIntent || r.Intent == nil || !strings.HasPrefix(r.RunID, run) {
			return nil
		}
		if found == nil || found.RunID != r.RunID {
			n++
		}
		found = r
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	switch {
	case n == 0:
		return nil, "", &DataError{Err: fmt.Errorf("no run %q in the journal", run)}
	case n > 1:
		return nil, "", &UsageError{Msg: fmt.Sprintf("%q is the prefix of %d runs: give more digits", run, n)}
	case found.Intent.Path != operations.PathBreakGlass:
		return nil, "", &DataError{Err: fmt.Errorf("run %s is not a break-glass run (path %s)", found.RunID, operations.PathName(found.Intent.Path))}
	}
	return found.Intent, found.RunID, nil
}

// storeReviews gives replay the reviews kept in the configured store, when
// there is one here: a review of a breaker's last run reaches the journal
// only with its next break-glass. They are signed; replay verifies them.
func storeReviews(f *Env) func(string) []*approval.Envelope {
	return func(breaker string) []*approval.Envelope {
		c, err := f.Config()
		if err != nil {
			return nil
		}
		st, err := f.Store(c)
		if err != nil {
			return nil
		}
		envs, _, err := store.BreakGlass(st, breaker)
		if err != nil {
			return nil
		}
		var out []*approval.Envelope
		for _, env := range envs {
			if env.PayloadType == approval.TypeBreakGlassReview {
				out = append(out, env)
			}
		}
		return out
	}
}

// breakGlassRunsOf replays journal, the lines list will list, for its
// break-glass runs, by line; for a caller with no key of the policy
// without what the breaker wrote. Without a trust policy, registry or
// history to judge by, it finds none, and says why (the warning).
func breakGlassRunsOf(f *Env, journal io.Reader, redact bool) (map[int]*receipts.BreakGlassRun, string, error) {
	j, err := NewReplayJudge(f, ReplaySource{})
	if err != nil {
		return nil, fmt.Sprintf("break-glass runs are not marked: %v", err), nil
	}
	// As replay does (replayRun): collected only when memory nears a
	// fixed bound, which keeps the pass's run ids well under 100 MB.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(64 << 20))
	runs, err := j.Replayer.BreakGlassRuns(journal)
	if err != nil {
		return nil, "", fmt.Errorf("reading the journal for break-glass runs: %w", err)
	}
	if redact {
		for n, bg := range runs {
			runs[n] = &receipts.BreakGlassRun{Breaker: bg.Breaker, Record: bg.Record, Reviewed: bg.Reviewed}
		}
	}
	return runs, "", nil
}

// warnUnnotified is run's second voice: a break-glass run whose record no
// bridge post in the ledger announces is warned of (the run goes on).
func (f *Env) warnUnnotified(pc *runner.PlanContext, dec *approval.Decision, runID string) {
	posts, err := bridge.LedgerOf(pc.Config).Posts(pc.Plan.Fingerprint)
	if err == nil {
		for _, p := range posts {
			if p.Record == dec.Anchor {
				return
			}
		}
	}
	f.Warn("break-glass run %s by %s: no bridge post of it is recorded, so the approvers it skips may not know; it stays unreviewed until an approver reviews it", runID, dec.Breaker)
}
