package receipts

import (
	"bytes"
	"encoding/hex"
	"errors"

	"github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/rfc6962"
)

// noteCheck is replay's check of a checkpoint note: the root of the
// first Size entries, built as they stream past in a compact range
// (O(log n) hashes held, never the tree).
type noteCheck struct {
	cp    *log.Checkpoint
	host  string
	rng   *compact.Range
	err   string // a line whose hash does not read, once seen
	count uint64
}

// IsCheckpointNote reports whether b reads as a signed note rather than
// a JSON checkpoint.
func IsCheckpointNote(b []byte) bool {
	return bytes.HasPrefix(b, []byte(NoteOrigin("")))
}

// openNoteCheckpoint verifies the note with the key of a runner of the
// policy, for the origin its first line names, adding a problem to res
// when it cannot be trusted.
func (rp *Replayer) openNoteCheckpoint(res *Result) *noteCheck {
	cp, host, err := OpenRunnerNote(rp.CheckpointNote, rp.Policy)
	var ne *NoteError
	switch {
	case errors.As(err, &ne) && ne.BadOrigin:
		res.add(Malformed, "%v", err)
		return nil
	case err != nil:
		res.add(BadSignature, "%v", err)
		return nil
	}
	if _, err := VerifyCosignatures(rp.CheckpointNote, rp.Policy, rp.Witnesses, rp.WitnessedSince); err != nil {
		res.add(BadSignature, "%v", err)
		return nil
	}
	return &noteCheck{cp: cp, host: host, rng: rf.NewEmptyRange(0)}
}

// add takes entry n (from 1), whose line hash is hexHash.
func (c *noteCheck) add(n uint64, hexHash string) {
	if n > c.cp.Size || c.err != "" {
		return
	}
	b, err := hex.DecodeString(hexHash)
	if err != nil || len(b) != 32 {
		c.err = "a line's hash does not read"
		return
	}
	if err := c.rng.Append(rfc6962.DefaultHasher.HashLeaf(b), nil); err != nil {
		c.err = err.Error()
		return
	}
	c.count = n
}

// end judges the journal against the note once every entry is read.
func (c *noteCheck) end(res *Result, st *state) {
	switch {
	case c.err != "":
		res.add(Malformed, "checkpoint note: %s", c.err)
	case c.count < c.cp.Size:
		res.add(Truncated, "the checkpoint note counts %d entries; the journal has %d: receipts were cut off", c.cp.Size, c.count)
	default:
		root := rfc6962.DefaultHasher.EmptyRoot()
		if c.cp.Size > 0 {
			var err error
			if root, err = c.rng.GetRootHash(nil); err != nil {
				res.add(Malformed, "checkpoint note: %v", err)
				return
			}
		}
		if !bytes.Equal(root, c.cp.Hash) {
			res.add(ChainBroken, "the journal's first %d entries are not the tree the checkpoint note signs: receipts were rewritten", c.cp.Size)
		}
	}
	if st.hostSet && c.host != st.host {
		res.add(WrongHost, "the checkpoint note is host %q's; this journal is host %q's", c.host, st.host)
	}
}
