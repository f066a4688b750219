// Package receipts holds the journal of runs (docs/DESIGN.md §6) and its replay
// (docs/DESIGN.md §7). Every run leaves an intent receipt, fsynced before the program
// starts, and an outcome receipt after it exits. Receipts are DSSE
// envelopes signed by the runner key, one per line of an append-only,
// hash-chained journal.
package receipts

import (
	"bytes"
	"encoding/json"
	"sync"
	"time"

	"github.com/prod-write/prod-write/pkg/dsse"

	"github.com/prod-write/prod-write/operations"
)

// PayloadType names a receipt's DSSE payload.
const PayloadType = "application/vnd.prod-write.receipt+json"

// CheckpointType names a signed journal head.
const CheckpointType = "application/vnd.prod-write.checkpoint+json"

// Receipt kinds.
const (
	KindIntent  = "intent"
	KindOutcome = "outcome"
	KindRepair  = "repair"
	// KindReview carries a review of a break-glass run earlier in the
	// journal (docs/adr/0028-break-glass.md); RunID is that
	// run's. Absent from journals written before it.
	KindReview = "review"
)

// Receipt is the payload of one journal entry.
type Receipt struct {
	Kind string `json:"kind"`
	Seq  uint64 `json:"seq"`
	// Prev is the sha256 of the previous journal line ("" for the first).
	Prev   string    `json:"prev"`
	Time   time.Time `json:"time"`
	RunID  string    `json:"run_id,omitempty"`
	Runner string    `json:"runner"`
	Host   string    `json:"host,omitempty"`

	Intent  *Intent  `json:"intent,omitempty"`
	Outcome *Outcome `json:"outcome,omitempty"`
	Repair  *Repair  `json:"repair,omitempty"`
	Review  *Review  `json:"review,omitempty"`
}

// Review is a break-glass review as the journal keeps it: the reviewer's
// signed review envelope, which replay verifies (the runner's signature
// on the receipt says only that this host recorded it).
type Review struct {
	Review *dsse.Envelope `json:"review"`
}

// Intent is written and fsynced before the program starts. It carries all
// that replay needs to judge the run offline.
type Intent struct {
	Fingerprint string                `json:"fingerprint"`
	Operation   *operations.Operation `json:"operation_definition"`
	Plan        *dsse.Envelope        `json:"plan"`
	// Evidence is every record the gate saw: what it relied on, and any
	// veto or withdrawal, so replay can re-run the gate as it stood.
	Evidence     []*dsse.Envelope `json:"evidence"`
	Path         string           `json:"path"`
	Anchor       string           `json:"anchor,omitempty"`
	Slot         int              `json:"slot"`
	Relied       []string         `json:"relied"`
	PolicyDigest string           `json:"policy_digest"`
	// Signers are the public keys of every signer of the plan and the
	// evidence, so a verifier can tell which key was used.
	Signers map[string]string `json:"signers"`
	Invoker Invoker           `json:"invoker"`
	// DecisionID is the gate decision's id in the decision log
	// (docs/DECISIONS.md; absent in intents written before it).
	DecisionID string `json:"decision_id,omitempty"`
	// Precondition is what run saw when it ran the plan's precondition
	// check again before consuming (docs/adr/0025-preconditions.md): the
	// gate judged it, and replay gives it to the gate again. Absent for a
	// plan without one.
	Precondition *operations.PreconditionSeen `json:"precondition,omitempty"`
	// BreakGlass is, on the break-glass path, the breaker's earlier
	// break-glass runs the gate saw and the reviews that let it break glass
	// again (docs/adr/0028-break-glass.md): replay gives them
	// to the gate again, and checks them against the journal's own.
	BreakGlass *BreakGlassSeen `json:"break_glass,omitempty"`
}

// BreakGlassSeen is what the gate knew of a breaker's earlier runs.
type BreakGlassSeen struct {
	Breaker string           `json:"breaker"`
	Ran     []*dsse.Envelope `json:"ran"`
	Reviews []*dsse.Envelope `json:"reviews"`
}

// Invoker is who called run.
type Invoker struct {
	UID       int    `json:"uid"`
	Principal string `json:"principal,omitempty"`
}

// Stream is the size and digest of an output stream.
type Stream struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Outcome is written after the program exits.
type Outcome struct {
	Intent   string        `json:"intent"` // sha256 of the intent's journal line
	ExitCode int           `json:"exit_code"`
	Signal   string        `json:"signal,omitempty"`
	TimedOut bool          `json:"timed_out,omitempty"`
	Error    string        `json:"error,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	Stdout   Stream        `json:"stdout"`
	Stderr   Stream        `json:"stderr"`
	// Undelivered counts the bytes of output the caller was never given:
	// a client of the runner service that stopped reading (the stream's
	// size and digest still cover everything the program wrote).
	Undelivered int64 `json:"undelivered_bytes,omitempty"`
}

// Repair records that a torn tail was cut from the journal.
type Repair struct {
	Offset  int64  `json:"offset"`
	Dropped int64  `json:"dropped_bytes"`
	SHA256  string `json:"dropped_sha256"`
	SavedAs string `json:"saved_as,omitempty"`
}

// Checkpoint is a signed journal head: replay --checkpoint detects receipts
// cut off after it.
type Checkpoint struct {
	Count  uint64    `json:"count"`
	Head   string    `json:"head"`
	Time   time.Time `json:"time"`
	Runner string    `json:"runner"`
	// Host is the journal's host (absent in older checkpoints): replay
	// refuses a checkpoint of another host's journal.
	Host string `json:"host,omitempty"`
}

// definitions caches decoded operation definitions by their bytes.
var definitions = &definitionCache{}

type definitionCache struct {
	mu sync.Mutex
	m  map[string]*operations.Operation // keyed by the exact bytes
}

func (c *definitionCache) get(raw []byte) (*operations.Operation, error) {
	c.mu.Lock()
	op, ok := c.m[string(raw)]
	c.mu.Unlock()
	if ok {
		return op, nil
	}
	op = new(operations.Operation)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(op); err != nil {
		return nil, err
	}
	// Fix the digest now, from the definition itself: intents sharing it
	// are read by several goroutines at once and must not write to it.
	d, err := op.DefinitionDigest()
	if err != nil {
		return nil, err
	}
	op.Digest = d
	c.mu.Lock()
	if c.m == nil || len(c.m) >= 256 {
		c.m = map[string]*operations.Operation{}
	}
	c.m[string(raw)] = op
	c.mu.Unlock()
	return op, nil
}
