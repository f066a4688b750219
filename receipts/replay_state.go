package receipts

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/strictjson"
)

// ReplayStateType is the DSSE payload type of a replay state file
// (`replay --state`, docs/adr/0044-journal-merkle-log.md).
const ReplayStateType = "application/vnd.prod-write.replay-state.v1+json"

// ReplayState is the in-order checker's state at a journal's head, after
// a replay in which no entry failed: what the next replay needs to verify
// only the entries after it and give the verdicts a full replay gives. It
// stands on the Merkle tree of the journal's first Size entries (Root):
// the next replay recomputes that root from the journal's first Size
// lines as they stream past, and fails the journal as it fails one
// against a kept checkpoint when they are not that tree. It is sealed
// with a key CI holds ([SealReplayState]) and read only through
// [OpenReplayState].
type ReplayState struct {
	Version int `json:"version"`
	// Judge is the digest of what judged the entries (JudgeDigest): a
	// state judged by another policy, history or options is not reused.
	Judge string `json:"judge"`
	Size  uint64 `json:"size"`
	Root  []byte `json:"root"`
	// Offset is where entry Size+1 starts in the journal, and Range the
	// compact range of the tree of Size entries (its hashes, left to
	// right): with both, a replay that also trusts a checkpoint note at
	// or past Size reads the journal from Offset only ("seek" in
	// docs/adr/0044-journal-merkle-log.md). Absent from a state written
	// before them: such a state is resumed by reading the prefix.
	Offset int64    `json:"offset,omitempty"`
	Range  [][]byte `json:"range,omitempty"`
	// The chain, clock and host at the head.
	PrevHash string    `json:"prev_hash"`
	PrevSeq  uint64    `json:"prev_seq"`
	Latest   time.Time `json:"latest"`
	Host     string    `json:"host"`
	HostSet  bool      `json:"host_set"`
	Decoded  int       `json:"decoded"`
	// Seed keys the 64-bit hashes of Used and Runs.
	Seed uint64 `json:"seed"`
	// Used is each record's uses spent, packed: 8 bytes of keyed hash, 4
	// of count and 8 of its expiry (Unix nanoseconds), little-endian,
	// sorted by hash. Runs is each run id's keyed hash and when it was
	// made (Unix milliseconds, or the largest int64 for an undated id), 8
	// bytes each, sorted by hash. Neither holds what the checker has
	// forgotten (ADR 0053).
	Used []byte `json:"used"`
	Runs []byte `json:"runs"`
	// Open are the intents without an outcome yet.
	Open []OpenRun `json:"open"`
	// SignCounts are the highest passkey sign counts spent.
	SignCounts []SpentSignCount `json:"sign_counts"`
	// BreakGlass are the break-glass runs so far, in journal order.
	BreakGlass []BreakGlassState `json:"break_glass"`
	// What the summary has counted so far.
	Entries      int `json:"entries"`
	RunCount     int `json:"run_count"`
	RevokedSince int `json:"revoked_since"`
}

// OpenRun is an intent with no outcome yet.
type OpenRun struct {
	RunID  string `json:"run_id"`
	Intent string `json:"intent"` // its line hash
	Result Result `json:"result"`
}

// SpentSignCount is the highest sign count spent of one passkey
// credential, and the line of the intent that spent it.
type SpentSignCount struct {
	Credential string `json:"credential"`
	Count      uint32 `json:"count"`
	Line       int    `json:"line"`
}

// BreakGlassState is a break-glass run as later entries need it: its
// report, the record it ran on and the reviews of it so far.
type BreakGlassState struct {
	Line    int                  `json:"line"`
	ID      string               `json:"id"`
	Report  Result               `json:"report"`
	Record  *approval.Envelope   `json:"record"`
	Reviews []*approval.Envelope `json:"reviews"`
}

// StateRefusedError is a replay state file that is not to be believed:
// not a sealed state, not sealed by the key given, or not one this
// replayer wrote. Only [OpenReplayState] returns it.
type StateRefusedError struct{ Reason string }

func (e *StateRefusedError) Error() string { return "replay state refused: " + e.Reason }

// StateVersion is the version of the states this replayer writes.
// Version 1 (before ADR 0053) kept every record's uses and every run id.
const StateVersion = 2

// ErrStateOutdated is a state, signed by the state key, that a replayer
// of an earlier StateVersion wrote. It is not reused: the journal is
// replayed in full, as for a state judged by another policy.
var ErrStateOutdated = errors.New("replay state of an earlier version")

func refuseState(format string, args ...any) error {
	return &StateRefusedError{Reason: fmt.Sprintf(format, args...)}
}

// SealReplayState signs s with k (a key CI holds, never a principal's)
// as a DSSE envelope of [ReplayStateType].
func SealReplayState(ctx context.Context, k *keys.Private, s *ReplayState) ([]byte, error) {
	body, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	env, err := dsse.Sign(ctx, k, ReplayStateType, body)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(env)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// OpenReplayState reads a state file strictly and believes it only when
// it is one DSSE envelope of [ReplayStateType] whose one signature pub
// makes over its pre-authentication encoding, and whose state is well
// formed. Anything else is a [*StateRefusedError].
func OpenReplayState(b []byte, pub keys.Public) (*ReplayState, error) {
	b, _ = bytes.CutSuffix(b, []byte("\n"))
	var env dsse.Envelope
	if err := strictjson.Unmarshal(b, &env); err != nil {
		return nil, refuseState("not a DSSE envelope: %v", err)
	}
	if env.PayloadType != ReplayStateType {
		return nil, refuseState("payload type %q is not a replay state's", env.PayloadType)
	}
	if len(env.Signatures) != 1 {
		return nil, refuseState("%d signatures, want 1", len(env.Signatures))
	}
	body, err := base64.StdEncoding.Strict().DecodeString(env.Payload)
	if err != nil {
		return nil, refuseState("payload: %v", err)
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(env.Signatures[0].Sig)
	if err != nil || !keys.Verify(pub, dsse.PAE(env.PayloadType, body), sig) {
		return nil, refuseState("not signed by the state key: it was edited, or sealed with another key")
	}
	var s ReplayState
	if err := strictjson.Unmarshal(body, &s); err != nil {
		return nil, refuseState("the state does not decode: %v", err)
	}
	if s.Version >= 1 && s.Version < StateVersion {
		return nil, ErrStateOutdated
	}
	if err := s.check(); err != nil {
		return nil, err
	}
	return &s, nil
}

// check refuses a state that no replay wrote, though signed: it must
// restore without failing.
func (s *ReplayState) check() error {
	switch {
	case s.Version != StateVersion:
		return refuseState("version %d, want %d", s.Version, StateVersion)
	case s.Judge == "":
		return refuseState("no judge digest")
	case len(s.Root) != 32:
		return refuseState("a root of %d bytes", len(s.Root))
	case len(s.Used)%usedLen != 0 || len(s.Runs)%runLen != 0:
		return refuseState("packed hashes of a length that does not divide")
	case s.Size == 0 || s.Entries < 0 || uint64(s.Entries) != s.Size || s.Decoded < 0 || s.Decoded > s.Entries || s.RunCount < 0 || s.RevokedSince < 0:
		return refuseState("counts that do not add up")
	}
	for _, o := range s.Open {
		if o.RunID == "" || len(o.Intent) != 64 {
			return refuseState("an open run without its run id or intent hash")
		}
	}
	for _, bg := range s.BreakGlass {
		if bg.Report.BreakGlass == nil || bg.Record == nil || bg.ID == "" || slices.Contains(bg.Reviews, nil) {
			return refuseState("a break-glass run without its report, record or id")
		}
	}
	return nil
}

// JudgeDigest is the digest of everything that judges an entry beyond the
// journal itself: the policy, every version of the history with when it
// was in force, the definitions, the host, and the options. A state is
// reused only by a replayer of the same digest.
func (rp *Replayer) JudgeDigest() string {
	j := struct {
		Policy                   string
		Policies                 []string
		PolicyTimes              map[string][]Version
		Definitions              []string
		DefinitionTimes          map[string][]Version
		Host                     string
		StrictRevocation, FailBG bool
		History                  bool
	}{Policy: rp.Policy.Digest, Host: rp.Host, StrictRevocation: rp.StrictRevocation, FailBG: rp.FailUnreviewedBreakGlass}
	if h := rp.History; h != nil {
		j.History = true
		for d := range h.Policies {
			j.Policies = append(j.Policies, d)
		}
		for d := range h.Definitions {
			j.Definitions = append(j.Definitions, d)
		}
		sort.Strings(j.Policies)
		sort.Strings(j.Definitions)
		j.PolicyTimes, j.DefinitionTimes = h.PolicyTimes, h.DefinitionTimes
	}
	b, _ := json.Marshal(j) // maps marshal in key order
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ReplayFrom replays the journal r as Replay does, resuming from s when it
// is not nil: the first s.Size entries are not verified again but must be
// the tree s stands on, and the checker goes on from s. It returns the
// state at the head, or nil when an entry failed: a state from a run that
// failed is never written. A state judged by another replayer
// (JudgeDigest) is an error; the caller replays in full instead.
func (rp *Replayer) ReplayFrom(r io.Reader, s *ReplayState, emit func(Result)) (Summary, *ReplayState, error) {
	if s != nil && s.Judge != rp.JudgeDigest() {
		return Summary{}, nil, refuseState("it was judged by another policy, history or options")
	}
	if rp.Audit != nil || rp.Relied != nil {
		return Summary{}, nil, fmt.Errorf("replay state: not with an audit or a fleet")
	}
	light := *rp
	light.resume, light.keepTree = s, true
	sum, st, err := light.replay(r, emit)
	if err != nil || sum.Failed > 0 {
		return sum, nil, err
	}
	out, err := st.save(&light, sum)
	return sum, out, err
}

// seekPast positions rs at s.Offset, past the first s.Size entries, when
// the journal still ends a line there; otherwise (it was cut short of the
// state, or rewritten so that no line ends there) at the start, so that
// the prefix is read and judged as without a seek, and says which.
func seekPast(rs io.ReadSeeker, s *ReplayState) (bool, error) {
	size, err := rs.Seek(0, io.SeekEnd)
	if err != nil {
		return false, err
	}
	var b [1]byte
	if size >= s.Offset {
		if _, err := rs.Seek(s.Offset-1, io.SeekStart); err != nil {
			return false, err
		}
		if _, err := io.ReadFull(rs, b[:]); err != nil {
			return false, err
		}
	}
	if b[0] == '\n' {
		return true, nil
	}
	_, err = rs.Seek(0, io.SeekStart)
	return false, err
}

// cloneHashes is a deep copy of a compact range's hashes.
func cloneHashes(hs [][]byte) [][]byte {
	out := make([][]byte, len(hs))
	for i, h := range hs {
		out[i] = bytes.Clone(h)
	}
	return out
}

// endOf is where the line after l starts.
func endOf(l Line) int64 {
	n := int64(len(l.Bytes))
	if l.Long > 0 {
		n = l.Long
	}
	if !l.Torn {
		n++
	}
	return l.Off + n
}

// newSeed is a random key for the checker's 64-bit hashes.
func newSeed() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// key is id's 64-bit keyed hash (state.used, state.runs).
func (st *state) key(id string) uint64 {
	st.hasher.ResetWithSeed(st.seed)
	st.hasher.WriteString(id)
	return st.hasher.Sum64()
}

// restore sets st, and what the summary has counted, from s.
func (st *state) restore(s *ReplayState, sum *Summary) {
	st.prevHash, st.prevSeq, st.latest, st.decoded, st.seed = s.PrevHash, s.PrevSeq, s.Latest, s.Decoded, s.Seed
	if !st.hostSet {
		st.host, st.hostSet = s.Host, s.HostSet
	}
	st.entries = s.Size
	// Sized once: a million entries grown one doubling at a time cost
	// as much again in rehashing.
	st.used = make(map[uint64]useCount, len(s.Used)/usedLen+len(st.used))
	st.runs = make(map[uint64]int64, len(s.Runs)/runLen+len(st.runs))
	for b := s.Used; len(b) > 0; b = b[usedLen:] {
		st.used[binary.LittleEndian.Uint64(b)] = useCount{n: binary.LittleEndian.Uint32(b[8:]), exp: int64(binary.LittleEndian.Uint64(b[12:]))}
	}
	for b := s.Runs; len(b) > 0; b = b[runLen:] {
		st.runs[binary.LittleEndian.Uint64(b)] = int64(binary.LittleEndian.Uint64(b[8:]))
	}
	st.sweepAt = max(2*(len(st.used)+len(st.runs)), minSweep)
	for _, o := range s.Open {
		res := o.Result
		st.open[o.RunID] = &res
		st.openHash[o.RunID] = o.Intent
	}
	for _, c := range s.SignCounts {
		if st.signCounts == nil {
			st.signCounts = map[string]spentCount{}
		}
		st.signCounts[c.Credential] = spentCount{count: c.Count, line: c.Line}
	}
	for _, b := range s.BreakGlass {
		bg := &bgEntry{line: b.Line, id: b.ID, report: b.Report, record: b.Record, reviews: b.Reviews}
		who := bg.report.BreakGlass.Breaker
		st.bgRuns[who] = append(st.bgRuns[who], bg)
		st.bgOrder = append(st.bgOrder, bg)
		st.bgByRecord[bg.id] = append(st.bgByRecord[bg.id], bg)
	}
	sum.Runs, sum.RevokedSince = s.RunCount, s.RevokedSince
}

// save is st at the head as a state.
func (st *state) save(rp *Replayer, sum Summary) (*ReplayState, error) {
	root, err := st.tree.GetRootHash(nil)
	if err != nil {
		return nil, err
	}
	if st.entries == 0 {
		return nil, nil // nothing to stand on
	}
	s := &ReplayState{Version: StateVersion, Judge: rp.JudgeDigest(), Size: st.entries, Root: root, Offset: st.end, Range: cloneHashes(st.tree.Hashes()), PrevHash: st.prevHash, PrevSeq: st.prevSeq,
		Latest: st.latest, Host: st.host, HostSet: st.hostSet, Decoded: st.decoded, Seed: st.seed,
		Open: []OpenRun{}, SignCounts: []SpentSignCount{}, BreakGlass: []BreakGlassState{},
		Entries: sum.Entries, RunCount: sum.Runs, RevokedSince: sum.RevokedSince}
	used := make([]uint64, 0, len(st.used))
	for k, u := range st.used {
		if !st.forgetRecord(u.exp) {
			used = append(used, k)
		}
	}
	slices.Sort(used)
	s.Used = make([]byte, 0, usedLen*len(used))
	for _, k := range used {
		u := st.used[k]
		s.Used = binary.LittleEndian.AppendUint64(s.Used, k)
		s.Used = binary.LittleEndian.AppendUint32(s.Used, u.n)
		s.Used = binary.LittleEndian.AppendUint64(s.Used, uint64(u.exp))
	}
	runs := make([]uint64, 0, len(st.runs))
	for k, ms := range st.runs {
		if !st.forgetRun(ms) {
			runs = append(runs, k)
		}
	}
	slices.Sort(runs)
	s.Runs = make([]byte, 0, runLen*len(runs))
	for _, k := range runs {
		s.Runs = binary.LittleEndian.AppendUint64(s.Runs, k)
		s.Runs = binary.LittleEndian.AppendUint64(s.Runs, uint64(st.runs[k]))
	}
	for id, res := range st.open {
		s.Open = append(s.Open, OpenRun{RunID: id, Intent: st.openHash[id], Result: *res})
	}
	sort.Slice(s.Open, func(i, j int) bool { return s.Open[i].Result.Line < s.Open[j].Result.Line })
	for c, n := range st.signCounts {
		s.SignCounts = append(s.SignCounts, SpentSignCount{Credential: c, Count: n.count, Line: n.line})
	}
	sort.Slice(s.SignCounts, func(i, j int) bool { return s.SignCounts[i].Credential < s.SignCounts[j].Credential })
	for _, bg := range st.bgOrder {
		report := bg.report
		run := *report.BreakGlass
		run.Reviewed = false // judged again at each replay's end
		report.BreakGlass = &run
		s.BreakGlass = append(s.BreakGlass, BreakGlassState{Line: bg.line, ID: bg.id, Report: report, Record: bg.record, Reviews: nonNilEnvs(bg.reviews)})
	}
	return s, nil
}

func nonNilEnvs(s []*approval.Envelope) []*approval.Envelope {
	if s == nil {
		return []*approval.Envelope{}
	}
	return s
}

// prefix is what a resumed replay does with the first Size lines: hash
// them into the tree the state stands on, without verifying them again.
type prefix struct {
	size  uint64
	count uint64
	torn  bool
	end   int64 // where the line after the last one read starts
}

func leafOf(hexHash string) []byte {
	b, err := hex.DecodeString(hexHash)
	if err != nil || len(b) != 32 {
		b = make([]byte, 32) // LineHash is always 32 bytes of hex
	}
	return rfc6962.DefaultHasher.HashLeaf(b)
}

// newTree is an empty compact range over the journal's leaves.
func newTree() *compact.Range { return rf.NewEmptyRange(0) }

// prefixLine takes line n of the prefix a resumed replay does not verify
// again: into the tree, and into the checkpoints it is replayed against.
func (st *state) prefixLine(n uint64, hexHash string) {
	if n == st.cpCount {
		st.cpHash = hexHash
	}
	if st.note != nil {
		st.note.add(n, hexHash)
	}
	_ = st.tree.Append(leafOf(hexHash), nil)
}

// prefixEnd judges the journal's first lines against the state: they
// must be the tree it stands on, as against a kept checkpoint (ADR 0044).
func (st *state) prefixEnd(pre *prefix, s *ReplayState) *Result {
	res := &Result{Kind: "checkpoint", Problems: []Problem{}}
	switch {
	case pre.count < pre.size:
		res.add(Truncated, "the replay state stands on %d entries; the journal has %d: receipts were cut off", pre.size, pre.count)
	case pre.torn:
		res.add(Torn, "entry %d, the last the replay state stands on, does not end in a newline", pre.size)
	default:
		// The root of the first Size leaves, taken as the last of them
		// streamed past.
		if !bytes.Equal(st.prefixRoot, s.Root) {
			res.add(ChainBroken, "the journal's first %d entries are not the tree the replay state stands on: receipts were rewritten", pre.size)
		}
	}
	if len(res.Problems) == 0 {
		return nil
	}
	return res
}

// The lengths of one packed entry of ReplayState.Used and .Runs.
const (
	usedLen = 8 + 4 + 8
	runLen  = 8 + 8
)
