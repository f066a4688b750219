package receipts

import (
	"encoding/base64"
	"fmt"
	"io"
	"runtime"
	"sort"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/transparency-dev/merkle/compact"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/strictjson"
)

// Problem codes replay reports (docs/DESIGN.md §7). docs/REPLAY.md explains each.
const (
	BadSignature        = "bad_signature"
	UnknownSigner       = "unknown_signer"
	NotRunner           = "not_runner"
	Malformed           = "malformed"
	FingerprintMismatch = "fingerprint_mismatch"
	EvidenceReused      = "evidence_reused"
	ChainBroken         = "chain_broken"
	GateNotSatisfied    = "gate_not_satisfied"
	Incomplete          = "incomplete"
	OrphanOutcome       = "orphan_outcome"
	Truncated           = "truncated"
	// Strictness, time and identity along the journal (docs/REPLAY.md).
	Torn          = "torn"
	TimeBackwards = "time_backwards"
	WrongIntent   = "wrong_intent"
	RunIDReused   = "run_id_reused"
	WrongHost     = "wrong_host"
	// Judged by the protected history (Replayer.History,
	// docs/adr/0017-replay-history.md).
	UnknownPolicy     = "unknown_policy"
	UnknownDefinition = "unknown_definition"
	Revoked           = "revoked"
	// RevokedSince is a warning, not a failure (unless
	// Replayer.StrictRevocation): the receipt relied on a principal who
	// was in force at its time and no longer is.
	RevokedSince = "revoked_since"
	// history/versions.toml (docs/adr/0023-history-record.md): a receipt
	// naming a policy or definition after it was replaced (its interval
	// closed), or before it came into force.
	Superseded    = "superseded"
	NotYetInForce = "not_yet_in_force"
	// BreakGlassUnreviewed: a break-glass run no valid review reviews
	// (a failure only with Replayer.FailUnreviewedBreakGlass), or one the
	// gate let a breaker make while an earlier run in the journal was not
	// among the reviewed runs it saw (docs/adr/0028-break-glass.md).
	BreakGlassUnreviewed = "break_glass_unreviewed"
	// ReviewInvalid: a review receipt whose review is not a valid review
	// (by the gate's rule) of the break-glass run earlier in the journal
	// that it names.
	ReviewInvalid = "review_invalid"
	// SignCountBack: an intent spent a passkey approval whose sign count
	// is not above the one an earlier intent of the journal spent of the
	// same credential: a possible clone of the passkey, or a run whose
	// store did not keep the count (ADR 0043).
	SignCountBack = "sign_count_back"
)

// MaxClockSkew is how far a receipt's time may go back from the latest
// time before it in the journal. Receipts of one host are appended under a
// lock in order, so their times only go back when the clock is stepped.
const MaxClockSkew = 5 * time.Minute

// Problem is one reason a receipt does not verify.
type Problem struct {
	Code   string `json:"code"`
	Detail string `json:"detail"`
}

// Result is the verdict on one journal entry.
type Result struct {
	Line        int       `json:"line"`
	Seq         uint64    `json:"seq"`
	Kind        string    `json:"kind"`
	RunID       string    `json:"run_id,omitempty"`
	Time        time.Time `json:"time,omitzero"`
	Operation   string    `json:"operation,omitempty"`
	Fingerprint string    `json:"fingerprint,omitempty"`
	Runner      string    `json:"runner,omitempty"`
	ExitCode    *int      `json:"exit_code,omitempty"`
	OK          bool      `json:"ok"`
	Problems    []Problem `json:"problems"`
	// Warnings do not fail the entry: "revoked_since".
	Warnings []Problem `json:"warnings,omitempty"`
	// Audit holds what a proposed policy or registry would have refused
	// (Replayer.Audit): "would_refuse", never a failure.
	Audit []Problem `json:"audit,omitempty"`
	// BreakGlass marks a break-glass run (kind "break-glass", reported
	// after the journal's entries, one per run).
	BreakGlass *BreakGlassRun `json:"break_glass,omitempty"`
}

// BreakGlassRun is a break-glass run as replay reports it.
type BreakGlassRun struct {
	Breaker  string `json:"breaker"`
	Incident string `json:"incident"`
	Reason   string `json:"reason"`
	Record   string `json:"record"`
	Reviewed bool   `json:"reviewed"`
}

func (r *Result) add(code, format string, args ...any) {
	r.Problems = append(r.Problems, Problem{Code: code, Detail: fmt.Sprintf(format, args...)})
}

// Summary is what a replay found overall.
type Summary struct {
	Entries    int    `json:"entries"`
	Runs       int    `json:"runs"`
	Failed     int    `json:"failed"`
	Incomplete int    `json:"incomplete"`
	Head       string `json:"head"`
	OK         bool   `json:"ok"`
	// RevokedSince counts runs that relied on a principal revoked since.
	RevokedSince int `json:"revoked_since,omitempty"`
	// WouldRefuse counts runs the proposed policy or registry
	// (Replayer.Audit) would have refused.
	WouldRefuse int `json:"would_refuse,omitempty"`
	// BreakGlass counts break-glass runs; BreakGlassUnreviewed those no
	// valid review reviews.
	BreakGlass           int `json:"break_glass,omitempty"`
	BreakGlassUnreviewed int `json:"break_glass_unreviewed,omitempty"`
}

// Replayer verifies a journal offline against a trust policy.
type Replayer struct {
	Policy *approval.Policy
	// Checkpoint, when set, is a signed head the journal must still reach.
	Checkpoint *approval.Envelope
	// CheckpointNote, when set, is a C2SP checkpoint note of the
	// journal's Merkle tree (ADR 44) signed by a runner of the policy:
	// the journal must still hold that many entries, whose tree has that
	// root. Beside Checkpoint or instead of it.
	CheckpointNote []byte
	// Witnesses, when above 0, is how many distinct witnesses of the
	// policy must cosign CheckpointNote (c2sp.org/tlog-cosignature,
	// [VerifyCosignatures]) besides the runner's signature: a note short
	// of them fails bad_signature, and the journal is not judged against
	// it.
	Witnesses int
	// WitnessedSince, when set, counts only the cosignatures made at or
	// after it (replay --witness-max-age).
	WitnessedSince time.Time
	// Workers verifying signatures in parallel; 0 means GOMAXPROCS.
	Workers int
	// Host, when set, is the host whose journal this is: every receipt
	// and the checkpoint must name it. Unset, every receipt must name the
	// host the first one names.
	Host string
	// History, when set, is what each intent is judged by: the policy
	// version its policy_digest names (Policy is the current one, whose
	// since/revoked_at also apply), and only operation definitions the
	// protected registry holds or held. Nil keeps the older behaviour:
	// everything by Policy, the definition as carried.
	History *History
	// StrictRevocation fails, instead of warning about, a run that relied
	// on a principal revoked since.
	StrictRevocation bool
	// Audit, when set, is a proposed policy or registry each run is also
	// judged by, audit-only: what it would refuse is reported in
	// Result.Audit and Summary.WouldRefuse and fails nothing.
	Audit *Audit
	// Relied, when set, is called in journal order for every intent the
	// gate let through, with the records it relied on (its anchor first)
	// and the uses the anchor allows: [Fleet] counts them across hosts.
	Relied func(r Result, records []string, anchorUses int)
	// FailUnreviewedBreakGlass fails every break-glass run that no valid
	// review reviews; without it they are reported, not failed.
	FailUnreviewedBreakGlass bool
	// BreakGlassReviews, when set, returns reviews of a breaker's runs
	// kept outside the journal (the store's): reviews of a breaker's last
	// run reach the journal only with its next break-glass.
	BreakGlassReviews func(breaker string) []*approval.Envelope

	// breakGlassOnly verifies only the entries that bear on break-glass
	// runs (BreakGlassRuns).
	breakGlassOnly bool
	// resume, when set, is the state the replay goes on from
	// (ReplayFrom); keepTree builds the journal's Merkle root as the
	// entries stream past, for the state at the head.
	resume   *ReplayState
	keepTree bool
	// rememberAll keeps every record's uses and run id (tests hold the
	// verdicts of a replay that forgets to one that does not).
	rememberAll bool
}

// NotReceiptsError is input that cannot be read as receipts at all.
type NotReceiptsError struct{ Msg string }

func (e *NotReceiptsError) Error() string { return e.Msg }

// entry is one line after the parallel, order-free stage.
type entry struct {
	line      Line
	hash      string
	env       *approval.Envelope // nil when the line is not an envelope
	envErr    string             // why it is not
	receipt   *Receipt           // nil when the payload does not decode
	decodeErr error
	res       Result
	relied    []string
	reliedExp []int64 // when each expires, in Unix nanoseconds (state.used)
	slots     int     // uses of the anchor, for Gera decisions
	bg        *bgEntry
	// passkeys are the passkey sign counts the intent's gate spent.
	passkeys []approval.PasskeySeen
}

// bgEntry is a break-glass intent as the in-order stage needs it.
type bgEntry struct {
	line   int // the intent's
	report Result
	record *approval.Envelope
	id     string
	seen   map[string]bool // earlier runs the gate saw (reviewed)
	// carried are the reviews of earlier runs the gate relied on, each
	// with the record it reviews.
	carried []carriedReview
	// reviews are reviews of this run: carried by a later break-glass of
	// the breaker, or in a review receipt.
	reviews []*approval.Envelope
}

// carriedReview is a review a break-glass intent's gate relied on.
type carriedReview struct {
	record string
	env    *approval.Envelope
}

// Replay reads a journal from r, calling emit with the result for every
// entry in order, and then for every intent left without an outcome. It
// streams: signatures are checked in parallel batches, and memory holds
// one entry per open run, per record still alive and per run id of the
// last day (ADR 0053), not per entry of the journal.
func (rp *Replayer) Replay(r io.Reader, emit func(Result)) (Summary, error) {
	sum, _, err := rp.replay(r, emit)
	return sum, err
}

func (rp *Replayer) replay(r io.Reader, emit func(Result)) (Summary, *state, error) {
	rp.Policy.CacheVerifications()
	if rp.History != nil {
		for _, p := range rp.History.Policies {
			if p != rp.Policy {
				p.CacheVerifications()
			}
		}
	}
	workers := rp.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	st := &state{bgRuns: map[string][]*bgEntry{}, bgByRecord: map[string][]*bgEntry{}, policy: rp.Policy, used: map[uint64]useCount{}, open: map[string]*Result{}, openHash: map[string]string{}, runs: map[uint64]int64{}, seed: newSeed(), hasher: xxhash.New(), host: rp.Host, hostSet: rp.Host != "", rememberAll: rp.rememberAll}
	var sum Summary
	var pre *prefix
	if rp.keepTree || rp.resume != nil {
		st.tree = newTree()
	}
	if rp.resume != nil {
		st.restore(rp.resume, &sum)
		pre = &prefix{size: rp.resume.Size}
	}
	firstLine, firstOff := 1, int64(0)
	var cp *Checkpoint
	var cpProblem *Result
	if rp.Checkpoint != nil {
		var res Result
		cp = rp.openCheckpoint(&res)
		if cp == nil {
			cpProblem = &res
		} else {
			st.cpCount = cp.Count
		}
	}
	var note *noteCheck
	if rp.CheckpointNote != nil {
		var res Result
		if note = rp.openNoteCheckpoint(&res); note == nil {
			cpProblem = &res
		} else {
			st.note = note
		}
	}
	// A resumed replay that trusts a checkpoint note at or past the state
	// need not read the state's entries again: the state says where they
	// end and holds the compact range of their tree, and that range,
	// extended by the entries read, must reach the note's root. That is
	// the consistency of the note's tree with the state's, checked with
	// the new entries as the proof: a journal whose first entries were
	// rewritten fails against any note of its own tree. A note inside the
	// prefix names a tree the range cannot reach, and a DSSE checkpoint a
	// line of the prefix: then the prefix is read and hashed as before.
	s := rp.resume
	if rs, ok := r.(io.ReadSeeker); ok && s != nil && s.Size > 0 && s.Offset > 0 && len(s.Range) > 0 && rp.Checkpoint == nil && note != nil && note.cp.Size >= s.Size {
		// The first Size entries are the state's: not read again. The
		// note's tree and the state's go on from the same range.
		past, err := seekPast(rs, s)
		if err != nil {
			return sum, st, err
		}
		if past {
			pre.count, pre.end = pre.size, rp.resume.Offset
			// Two ranges, each with its own hashes: a range appends
			// into its slice of them.
			if st.tree, err = rf.NewRange(0, rp.resume.Size, cloneHashes(rp.resume.Range)); err != nil {
				return sum, st, fmt.Errorf("replay state: its range: %w", err)
			}
			st.prefixRoot = rp.resume.Root
			if note.rng, err = rf.NewRange(0, rp.resume.Size, cloneHashes(rp.resume.Range)); err != nil {
				return sum, st, fmt.Errorf("replay state: its range: %w", err)
			}
			note.count = rp.resume.Size
			firstLine, firstOff = int(rp.resume.Size)+1, rp.resume.Offset
			r = rs
		}
	}
	// Three stages overlap: reading the next batch, verifying this one on
	// every core, and checking the previous one in order.
	const batchSize = 512
	const batchBytes = 2 * MaxLine
	read := make(chan []*entry, 1)
	verified := make(chan []*entry, 1)
	var scanErr error
	go func() {
		defer close(read)
		batch := make([]*entry, 0, batchSize)
		size := 0
		scanErr = scanFrom(r, firstLine, firstOff, func(l Line) error {
			if pre != nil && pre.count < pre.size {
				// Verified by the replay that wrote the state: only
				// hashed into the tree it stands on, before any batch
				// reaches the in-order stage.
				pre.count++
				h := l.Hash
				if l.Long == 0 {
					h = LineHash(l.Bytes)
				}
				pre.torn = pre.torn || l.Torn
				pre.end = endOf(l)
				st.prefixLine(pre.count, h)
				if pre.count == pre.size {
					st.prefixRoot, _ = st.tree.GetRootHash(nil)
				}
				return nil
			}
			b := make([]byte, len(l.Bytes))
			copy(b, l.Bytes)
			l.Bytes = b
			batch = append(batch, &entry{line: l})
			// A batch holds at most batchSize lines and about
			// batchBytes: long lines cannot pile up in memory.
			if size += len(b); len(batch) == batchSize || size >= batchBytes {
				read <- batch
				batch = make([]*entry, 0, batchSize)
				size = 0
			}
			return nil
		})
		if len(batch) > 0 {
			read <- batch
		}
	}()
	go func() {
		defer close(verified)
		for batch := range read {
			verifyParallel(rp, batch, workers)
			verified <- batch
		}
	}()
	for batch := range verified {
		for _, e := range batch {
			st.check(e)
			st.end = endOf(e.line)
			if rp.Relied != nil && len(e.relied) > 0 {
				rp.Relied(e.res, e.relied, e.slots)
			}
			sum.Entries++
			if e.receipt != nil && e.receipt.Kind == KindIntent {
				sum.Runs++
			}
			e.res.OK = len(e.res.Problems) == 0
			if !e.res.OK {
				sum.Failed++
			}
			if len(e.res.Warnings) > 0 {
				sum.RevokedSince++
			}
			if len(e.res.Audit) > 0 {
				sum.WouldRefuse++
			}
			emit(e.res)
		}
	}
	if scanErr != nil {
		return sum, st, scanErr
	}
	if pre != nil {
		st.end = max(st.end, pre.end)
		sum.Entries += int(pre.count)
		if res := st.prefixEnd(pre, rp.resume); res != nil {
			sum.Failed++
			emit(*res)
		}
	}
	if sum.Entries > 0 && st.decoded == 0 {
		return sum, st, &NotReceiptsError{Msg: "no line of the input is a receipt"}
	}
	left := make([]*Result, 0, len(st.open))
	for _, res := range st.open {
		left = append(left, res)
	}
	sort.Slice(left, func(i, j int) bool { return left[i].Line < left[j].Line })
	for _, res := range left {
		inc := *res
		inc.Problems, inc.OK = nil, false
		inc.add(Incomplete, "intent %d has no outcome: the run may have crashed after it started", res.Seq)
		emit(inc)
		sum.Incomplete++
	}
	rp.reportBreakGlass(st, &sum, emit)
	if cpProblem == nil && cp != nil {
		res := Result{Kind: "checkpoint", Problems: []Problem{}}
		switch {
		case uint64(sum.Entries) < cp.Count:
			res.add(Truncated, "the checkpoint of %s counts %d entries; the journal has %d: receipts were cut off", cp.Time.Format(time.RFC3339), cp.Count, sum.Entries)
		case cp.Count > 0 && st.cpHash != cp.Head:
			res.add(ChainBroken, "entry %d is not the one the checkpoint names", cp.Count)
		}
		if cp.Host != "" && st.hostSet && cp.Host != st.host {
			res.add(WrongHost, "the checkpoint is host %q's; this journal is host %q's", cp.Host, st.host)
		}
		if len(res.Problems) > 0 {
			cpProblem = &res
		}
	}
	if cpProblem == nil && note != nil {
		res := Result{Kind: "checkpoint", Problems: []Problem{}}
		note.end(&res, st)
		if len(res.Problems) > 0 {
			cpProblem = &res
		}
	}
	if cpProblem != nil {
		cpProblem.Kind = "checkpoint"
		sum.Failed++
		emit(*cpProblem)
	}
	sum.Head = st.prevHash
	sum.OK = sum.Failed == 0 && sum.Incomplete == 0
	return sum, st, nil
}

// verifyParallel does everything that needs no order: decoding, the
// runner's signature, and for intents the plan, evidence and gate. Each
// worker takes a contiguous part of the batch, decodes it, verifies all of
// its signatures in one ed25519 batch, then checks each entry (whose
// signatures are by then remembered as verified).
func verifyParallel(rp *Replayer, batch []*entry, workers int) {
	// Smaller parts than one per worker, taken from a queue, so that no
	// core waits long for another at the end of a batch.
	parts := make(chan []*entry, 4*workers)
	chunk := max(1, (len(batch)+4*workers-1)/(4*workers))
	for lo := 0; lo < len(batch); lo += chunk {
		parts <- batch[lo:min(lo+chunk, len(batch))]
	}
	close(parts)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var envs []*approval.Envelope
			for part := range parts {
				envs = envs[:0]
				for _, e := range part {
					e.decode()
					if rp.breakGlassOnly && !e.bearsOnBreakGlass() {
						continue
					}
					envs = e.envelopes(envs)
				}
				rp.Policy.VerifyBatch(envs)
				for _, e := range part {
					if !rp.breakGlassOnly || e.bearsOnBreakGlass() {
						rp.verifyOne(e)
					}
				}
			}
		}()
	}
	wg.Wait()
}

// decode parses the line, without judging it.
func (e *entry) decode() {
	e.res = Result{Line: e.line.No, Problems: []Problem{}}
	if e.line.Long > 0 {
		e.hash = e.line.Hash
		e.envErr = tooLong(e.line.Long)
		return
	}
	e.hash = LineHash(e.line.Bytes)
	env, err := parseEnvelope(e.line.Bytes)
	if err != nil {
		e.envErr = err.Error()
		return
	}
	if env.PayloadType == "" || env.Payload == "" || len(env.Signatures) == 0 {
		e.envErr = "payloadType, payload or signatures missing"
		return
	}
	e.env = env
	if env.PayloadType == PayloadType {
		e.receipt, e.decodeErr = decodeReceipt(env.Payload)
	}
}

// bearsOnBreakGlass says whether e can bear on whether a break-glass run
// is reviewed (Replayer.BreakGlassRuns): a review receipt, or an intent
// carrying a break-glass record, without which the gate takes no
// break-glass path.
func (e *entry) bearsOnBreakGlass() bool {
	r := e.receipt
	if r == nil {
		return false
	}
	if r.Kind == KindReview {
		return true
	}
	if r.Intent != nil {
		for _, env := range r.Intent.Evidence {
			if env != nil && env.PayloadType == approval.TypeBreakGlass {
				return true
			}
		}
	}
	return false
}

// envelopes appends the signed records of e: the receipt, and for an
// intent its plan and evidence.
func (e *entry) envelopes(dst []*approval.Envelope) []*approval.Envelope {
	if e.env == nil {
		return dst
	}
	dst = append(dst, e.env)
	if e.receipt != nil && e.receipt.Intent != nil {
		dst = append(dst, e.receipt.Intent.Plan)
		dst = append(dst, e.receipt.Intent.Evidence...)
	}
	if e.receipt != nil && e.receipt.Review != nil && e.receipt.Review.Review != nil {
		dst = append(dst, e.receipt.Review.Review)
	}
	return dst
}

func (rp *Replayer) verifyOne(e *entry) {
	if e.line.Torn {
		// Whatever it holds, a line without its newline was never
		// completely written: the next append cuts it (Journal.Append).
		e.res.add(Torn, "line %d does not end in a newline: a write cut short by a crash, which the next run cuts off", e.line.No)
	}
	if e.env == nil {
		e.res.add(Malformed, "line %d is not a DSSE envelope: %s", e.line.No, e.envErr)
		return
	}
	env := *e.env
	// The signature first: a flipped byte is a bad signature, whatever it
	// does to the payload.
	signer := ""
	if s, err := rp.openReceipt(&env, e.receipt); err != nil {
		code := BadSignature
		if refusal.Is(err, refusal.PrincipalUnknown) {
			code = UnknownSigner
		}
		e.res.add(code, "receipt: %v", err)
	} else if !s.Signer.Has(approval.RoleRunner) {
		e.res.add(NotRunner, "receipt is signed by %s, who does not hold the runner role", s.Signer.ID)
	} else {
		signer = s.Signer.ID
		if e.receipt != nil && rp.History != nil {
			// The runner too is judged by the current policy's
			// since/revoked_at: a stolen runner key is revoked there.
			if cur, ok := rp.Policy.ByID(signer); ok && !cur.InForce(e.receipt.Time) {
				e.res.add(Revoked, "receipt is signed by %s, whose key the protected trust policy does not count at %s (since %s, revoked_at %s)", signer, e.receipt.Time.UTC().Format(time.RFC3339), stamp(cur.Since), stamp(cur.RevokedAt))
			}
		}
	}
	if env.PayloadType != PayloadType {
		e.res.add(Malformed, "payload type %q is not a receipt", env.PayloadType)
		return
	}
	r := e.receipt
	if e.decodeErr != nil {
		e.res.add(Malformed, "line %d: %v", e.line.No, e.decodeErr)
		return
	}
	if signer != "" && signer != r.Runner {
		e.res.add(BadSignature, "receipt names runner %q but is signed by %s", r.Runner, signer)
	}
	e.res.Seq, e.res.Kind, e.res.RunID, e.res.Time, e.res.Runner = r.Seq, r.Kind, r.RunID, r.Time, r.Runner
	switch r.Kind {
	case KindIntent:
		if r.Intent == nil {
			e.res.add(Malformed, "intent without its body")
			return
		}
		rp.verifyIntent(e, r.Intent)
	case KindOutcome:
		if r.Outcome == nil {
			e.res.add(Malformed, "outcome without its body")
			return
		}
		code := r.Outcome.ExitCode
		e.res.ExitCode = &code
	case KindRepair:
	case KindReview:
		if r.Review == nil || r.Review.Review == nil {
			e.res.add(Malformed, "review without its body")
			return
		}
		if r.RunID == "" {
			e.res.add(Malformed, "review without the run id it reviews")
		}
	default:
		e.res.add(Malformed, "unknown receipt kind %q", r.Kind)
	}
}

func (rp *Replayer) verifyIntent(e *entry, in *Intent) {
	res := &e.res
	res.Fingerprint = in.Fingerprint
	if in.Operation == nil {
		res.add(Malformed, "intent does not carry the operation definition")
		return
	}
	// The definition is judged by what it is, not by the digest it claims:
	// decoding set its digest from its content (Intent.UnmarshalJSON), and
	// the gate checks that the plan binds exactly this one.
	digest := in.Operation.Digest
	// Named on every row, a failed one too: what the receipt says it ran
	// (the gate's plan replaces it when the gate passes).
	res.Operation = in.Operation.Name
	policy := rp.Policy
	if h := rp.History; h != nil {
		// Judged by the protected history, never by what the receipt
		// carries: its definition must be one the registry holds or
		// held, and its policy a version of the protected one.
		at := e.receipt.Time
		if !h.Definitions[digest] {
			res.add(UnknownDefinition, "the operation definition it carries (%.19s…) is not one the protected registry holds or held in %s%s", digest, h.Where, h.unknown(digest))
		} else if code := inForce(h.DefinitionTimes[digest], at); code != "" {
			res.add(code, "the operation definition it carries (%.19s…) was not in force at %s (%s)", digest, at.UTC().Format(time.RFC3339), h.Where)
		}
		if policy = h.Policies[in.PolicyDigest]; policy == nil {
			res.add(UnknownPolicy, "policy_digest %q is no version of the protected trust policy in %s%s", in.PolicyDigest, h.Where, h.unknown(in.PolicyDigest))
			return
		}
		if code := inForce(h.PolicyTimes[in.PolicyDigest], at); code != "" {
			res.add(code, "policy_digest %.19s… names a trust policy not in force at %s (%s)", in.PolicyDigest, at.UTC().Format(time.RFC3339), h.Where)
		}
	}
	// Signatures, roles and the gate, as they stood at the receipt's time.
	// The gate also recomputes the plan's fingerprint from its recorded
	// inputs.
	dec, gateErr := approval.Evaluate(gateInput(in, policy, in.Operation, e.receipt.Time))
	if gateErr == nil && rp.History != nil {
		rp.judgeRevocation(res, dec, e.receipt.Time)
	}
	if gateErr == nil {
		res.Operation = dec.Plan.Operation
		if dec.Plan.Fingerprint != in.Fingerprint {
			res.add(FingerprintMismatch, "the receipt names %s but its plan is %s", in.Fingerprint, dec.Plan.Fingerprint)
		}
		if dec.Path != in.Path || dec.Anchor != in.Anchor {
			res.add(GateNotSatisfied, "the receipt says path %q anchor %.12s, the gate gives path %q anchor %.12s", in.Path, in.Anchor, dec.Path, dec.Anchor)
		}
		for _, s := range dec.Relied {
			e.relied = append(e.relied, s.ID)
			e.reliedExp = append(e.reliedExp, expiryOf(dec, s.ID))
		}
		e.slots = dec.AnchorUses
		e.passkeys = dec.PasskeysSpent()
		if dec.Path == operations.PathBreakGlass {
			rp.breakGlassEntry(e, in, dec)
		}
		if rp.Audit != nil {
			rp.Audit.judge(res, in, dec.Plan, policy, e.receipt.Time)
		}
		return
	}
	// Refused: look at the plan without trusting it, so that a bad
	// signature and a bad fingerprint are both reported.
	plan, err := rawPlan(in.Plan)
	if err != nil {
		res.add(Malformed, "plan: %v", err)
		return
	}
	res.Operation = plan.Operation
	if got := operations.Fingerprint(&plan.Bound); got != plan.Fingerprint || plan.Fingerprint != in.Fingerprint {
		res.add(FingerprintMismatch, "the recorded inputs give %s; the plan claims %s and the receipt %s", got, plan.Fingerprint, in.Fingerprint)
	}
	if digest != plan.OperationDigest {
		res.add(FingerprintMismatch, "the recorded operation definition does not have the digest the plan binds")
	}
	r, _ := refusal.As(gateErr)
	if r != nil && r.Code == refusal.EvidenceUnreadable && dec != nil {
		// Embedded evidence that does not verify: say why, as replay
		// always has.
		for _, a := range dec.Evidence {
			if a.Problem != nil && *a.Problem == refusal.EvidenceUnreadable && a.Cause != "" {
				r = refusal.New(a.Cause, "%s record %.12s…: %s", a.Kind, a.ID, a.Why)
				break
			}
		}
	}
	switch {
	case r == nil:
		res.add(GateNotSatisfied, "%v", gateErr)
	case r.Code == refusal.SignatureInvalid:
		res.add(BadSignature, "%s", r.Reason)
	case r.Code == refusal.PrincipalUnknown:
		res.add(UnknownSigner, "%s", r.Reason)
	case r.Code == refusal.FingerprintMismatch && len(res.Problems) > 0:
	default:
		res.add(GateNotSatisfied, "%s: %s", r.Code, r.Reason)
	}
}

// gateInput is what the gate is given for the run of in, judged by policy
// and op at its time: everything the intent recorded of what run gave the
// gate (the evidence, the precondition seen, the break-glass history). Uses
// are not among them: replay counts them along the journal. Replay's own
// judgement and the audit of a proposed policy (Audit.judge) both ask the
// gate with it, so that an unchanged proposal refuses nothing replay lets
// through.
func gateInput(in *Intent, policy *approval.Policy, op *operations.Operation, at time.Time) approval.Input {
	var hist approval.BreakGlassHistory
	if in.BreakGlass != nil {
		hist = approval.BreakGlassHistory{Ran: in.BreakGlass.Ran, Reviews: in.BreakGlass.Reviews}
	}
	return approval.Input{
		Plan: in.Plan, Evidence: in.Evidence, Policy: policy, Op: op, Now: at,
		Precondition: in.Precondition, BreakGlass: hist,
	}
}

// openReceipt verifies a receipt's signature: by the current policy, or,
// for a runner key rotated since, by the version the receipt was signed
// under: the one an intent names, or for another receipt one that
// history/versions.toml says was in force at its time. A key the history
// does not place at the receipt's time stays unknown_signer.
func (rp *Replayer) openReceipt(env *approval.Envelope, r *Receipt) (*approval.Signed, error) {
	s, err := rp.Policy.Open(env)
	if err == nil || rp.History == nil || r == nil || !refusal.Is(err, refusal.PrincipalUnknown) {
		return s, err
	}
	var then []*approval.Policy
	if r.Intent != nil {
		if p := rp.History.Policies[r.Intent.PolicyDigest]; p != nil {
			then = append(then, p)
		}
	} else {
		then = rp.History.SigningPolicies(r.Time)
	}
	for _, p := range then {
		if p == rp.Policy {
			continue
		}
		if s2, err2 := p.Open(env); err2 == nil {
			return s2, nil
		} else if !refusal.Is(err2, refusal.PrincipalUnknown) {
			return nil, err2
		}
	}
	return s, err
}

// judgeRevocation judges the principals a run relied on (its planner and
// the signers of the evidence it rests on) by the current protected
// policy: one not in force at the receipt's time there (revoked before it,
// or trusted only after it) fails the run; one in force then but revoked
// since, or gone from the policy, is "revoked since".
func (rp *Replayer) judgeRevocation(res *Result, dec *approval.Decision, at time.Time) {
	ids := []string{dec.Planner}
	for _, s := range dec.Relied {
		ids = append(ids, s.Signer.ID)
	}
	for _, id := range ids {
		cur, ok := rp.Policy.ByID(id)
		switch {
		case ok && !cur.InForce(at):
			res.add(Revoked, "the run relied on %s, whose key the protected trust policy does not count at %s (since %s, revoked_at %s)", id, at.UTC().Format(time.RFC3339), stamp(cur.Since), stamp(cur.RevokedAt))
		case !ok || !cur.RevokedAt.IsZero():
			p := Problem{Code: RevokedSince, Detail: fmt.Sprintf("the run relied on %s, valid then, revoked since", id)}
			if rp.StrictRevocation {
				res.Problems = append(res.Problems, p)
			} else {
				res.Warnings = append(res.Warnings, p)
			}
		}
	}
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// rawPlan decodes a plan envelope's payload without verifying it, so that
// a bad signature and a bad fingerprint are both reported.
func rawPlan(env *approval.Envelope) (*operations.Plan, error) {
	if env == nil {
		return nil, fmt.Errorf("missing")
	}
	var p operations.Plan
	b, err := base64.StdEncoding.Strict().DecodeString(env.Payload)
	if err != nil {
		return nil, err
	}
	if err := strictjson.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// state is what the in-order stage remembers.
type state struct {
	end      int64 // where the line after the last one checked starts (ReplayState.Offset)
	prevHash string
	prevSeq  uint64
	decoded  int
	// used counts the runs that relied on each record, keyed like runs
	// by a 64-bit keyed hash of its id (8 bytes, not the id's 64): at 1M
	// receipts the ids alone would be over 50 MB. A collision (about
	// n²/2⁶⁵: 3·10⁻⁸ at a million records, and the seed is random, so
	// no one can aim for one) could only add a false evidence_reused,
	// never hide a reuse. A record is forgotten once it has expired for
	// every intent that could still pass (forgetRecord).
	used     map[uint64]useCount
	open     map[string]*Result
	openHash map[string]string // run id → its intent's line hash
	// runs holds a 64-bit keyed hash of every run id seen, so that a
	// second intent cannot reuse one (8 bytes a run, not the id), with
	// when a dated id was made (Unix ms; undatedRun for an undated one),
	// so that it is forgotten once no intent that could still pass may
	// carry it (forgetRun).
	runs   map[uint64]int64
	seed   uint64
	hasher *xxhash.Digest
	// sweepAt is the size of used and runs at which the forgotten are
	// next deleted (sweep).
	sweepAt     int
	rememberAll bool // Replayer.rememberAll
	// tree, when kept, is the Merkle tree of the entries so far
	// (ReplayFrom), as a compact range.
	tree       *compact.Range
	prefixRoot []byte    // its root once a resumed replay's prefix is read
	latest     time.Time // the latest receipt time so far
	host       string    // the journal's host
	hostSet    bool
	entries    uint64
	cpCount    uint64 // the checkpoint's count, if any
	cpHash     string // the hash of that entry, once reached
	note       *noteCheck
	// signCounts is the highest sign count spent so far of each passkey
	// credential, and the line of the intent that spent it.
	signCounts map[string]spentCount
	// bgRuns are the break-glass runs so far, by breaker, in order.
	bgRuns  map[string][]*bgEntry
	bgOrder []*bgEntry
	// bgByRecord finds the break-glass runs of a record by its id (more
	// than one only when it was reused), for the reviews that name it.
	bgByRecord map[string][]*bgEntry
	// policy judges review receipts (Replayer.Policy).
	policy *approval.Policy
}

func (st *state) check(e *entry) {
	defer func() { st.prevHash = e.hash }()
	st.entries++
	if st.entries == st.cpCount {
		st.cpHash = e.hash
	}
	if st.note != nil {
		st.note.add(st.entries, e.hash)
	}
	if st.tree != nil {
		_ = st.tree.Append(leafOf(e.hash), nil) // appends to a range from 0 never fail
	}
	r := e.receipt
	if r == nil {
		st.prevSeq++
		return
	}
	st.decoded++
	if r.Prev != st.prevHash || r.Seq != st.prevSeq+1 {
		e.res.add(ChainBroken, "entry %d follows %.12s… (seq %d), but the line before is %.12s… (seq %d): entries were deleted, inserted, reordered or edited", r.Seq, r.Prev, r.Seq-1, st.prevHash, st.prevSeq)
	}
	st.prevSeq = r.Seq
	if r.Time.Before(st.latest.Add(-MaxClockSkew)) {
		e.res.add(TimeBackwards, "entry %d is dated %s, more than %s before an earlier entry's %s", r.Seq, r.Time.Format(time.RFC3339Nano), MaxClockSkew, st.latest.Format(time.RFC3339Nano))
	}
	if r.Time.After(st.latest) {
		st.latest = r.Time
	}
	if !st.hostSet {
		st.host, st.hostSet = r.Host, true
	} else if r.Host != st.host {
		e.res.add(WrongHost, "entry %d names host %q, but this journal is host %q's", r.Seq, r.Host, st.host)
	}
	switch r.Kind {
	case KindIntent:
		if r.RunID == "" {
			e.res.add(Malformed, "intent without a run id")
		}
		if why := runIDProblem(r.RunID, r.Time); why != "" {
			e.res.add(Malformed, "%s", why)
		}
		k := st.key(r.RunID)
		_, isOpen := st.open[r.RunID]
		if made, dup := st.runs[k]; isOpen || dup && !st.forgetRun(made) {
			e.res.add(RunIDReused, "run id %s was already used by an earlier intent in this journal", r.RunID)
			if isOpen {
				// The earlier run had no outcome: report it, not
				// hide it behind this one.
				break
			}
		}
		made, dated := runIDTime(r.RunID)
		if !dated {
			made = undatedRun
		}
		st.runs[k] = made
		open := e.res
		open.Problems = nil
		st.open[r.RunID] = &open
		st.openHash[r.RunID] = e.hash
		if e.bg != nil {
			st.checkBreakGlass(e)
		}
		st.checkSignCounts(e)
		for i, id := range e.relied {
			allowed := allowedUses(i, e.slots)
			k := st.key(id)
			u, ok := st.used[k]
			if !ok || st.forgetRecord(u.exp) {
				u = useCount{exp: e.reliedExp[i]}
			}
			u.n++
			st.used[k] = u
			if int(u.n) > allowed {
				e.res.add(EvidenceReused, "record %.12s… was relied on by %d runs; it allows %d", id, u.n, allowed)
			}
		}
		st.sweep()
	case KindReview:
		if r.Review != nil && r.Review.Review != nil && len(e.res.Problems) == 0 {
			st.checkReview(e)
		}
	case KindOutcome:
		if _, ok := st.open[r.RunID]; !ok {
			e.res.add(OrphanOutcome, "outcome for run %s, whose intent is not in the journal before it", r.RunID)
		} else {
			if in := st.open[r.RunID]; in != nil {
				e.res.Operation, e.res.Fingerprint = in.Operation, in.Fingerprint
			}
			if r.Outcome != nil && r.Outcome.Intent != st.openHash[r.RunID] {
				e.res.add(WrongIntent, "outcome for run %s names intent %.12s…, but that run's intent is %.12s…", r.RunID, r.Outcome.Intent, st.openHash[r.RunID])
			}
			delete(st.open, r.RunID)
			delete(st.openHash, r.RunID)
		}
	}
}

// spentCount is a sign count an intent spent.
type spentCount struct {
	count uint32
	line  int
}

// checkSignCounts checks, in journal order, that each passkey credential's
// sign count spent by intent e is above the highest an earlier intent
// spent: run advances the store's count under a lock held until the
// intent is appended, so the journal's order is the advances' order. An
// authenticator without a counter says 0 every time (WebAuthn §6.1.1),
// which the gate accepts while nothing above 0 was seen; so does this.
func (st *state) checkSignCounts(e *entry) {
	for _, p := range e.passkeys {
		prev, seen := st.signCounts[p.Credential]
		if seen && (p.SignCount != 0 || prev.count != 0) && p.SignCount <= prev.count {
			e.res.add(SignCountBack, "passkey credential %s: sign count %d is not above %d, spent by the intent on line %d: a possible clone of the passkey", p.Credential, p.SignCount, prev.count, prev.line)
			continue
		}
		if !seen || p.SignCount > prev.count {
			if st.signCounts == nil {
				st.signCounts = map[string]spentCount{}
			}
			st.signCounts[p.Credential] = spentCount{count: p.SignCount, line: e.line.No}
		}
	}
}

// openCheckpoint verifies the checkpoint's signature and decodes it,
// adding a problem to res when it cannot be trusted.
func (rp *Replayer) openCheckpoint(res *Result) *Checkpoint {
	s, err := rp.Policy.Open(rp.Checkpoint)
	if err != nil {
		res.add(BadSignature, "checkpoint: %v", err)
		return nil
	}
	if !s.Signer.Has(approval.RoleRunner) || s.Type != CheckpointType {
		res.add(NotRunner, "checkpoint is not a runner's signed head")
		return nil
	}
	var cp Checkpoint
	if err := s.Decode(&cp); err != nil {
		res.add(Malformed, "checkpoint: %v", err)
		return nil
	}
	return &cp
}
