package receipts

import (
	"math"
	"time"

	"github.com/prod-write/prod-write/approval"
)

// What the in-order checker forgets (ADR 0053). It remembers a record's
// uses and a run's id only while an intent that could still pass may
// rely on that record or carry that id again. Every intent that passes
// is dated at or after the latest time before it less MaxClockSkew
// (time_backwards otherwise); the gate refuses a record at or after its
// expiry; and a dated run id is at most RunIDMaxAge older than its
// intent (malformed otherwise). So forgetting is decided by the entry and
// the latest time alone, never by when a sweep runs: a full replay and a
// resumed one forget alike, and no intent that passes sees anything
// forgotten. Memory then grows with the records and runs of the last day
// and the longest record's life, not with the journal.

// useCount is a record's uses spent so far, and when it expires.
type useCount struct {
	n   uint32
	exp int64 // Unix nanoseconds; neverExpires when unknown
}

// undatedRun is the time of an undated run id (runIDTime): never
// forgotten.
const undatedRun = math.MaxInt64

// neverExpires is the expiry of a record the gate gave none.
const neverExpires = math.MaxInt64

// minSweep is the fewest entries worth a sweep.
const minSweep = 1 << 12

// forgetRecord reports whether a record expiring at exp can no longer be
// relied on by an intent that passes: every such intent is dated at or
// after latest-MaxClockSkew, when the record has expired.
func (st *state) forgetRecord(exp int64) bool {
	return !st.rememberAll && exp != neverExpires && exp <= st.latest.Add(-MaxClockSkew).UnixNano()
}

// forgetRun reports whether a run id made at ms (Unix milliseconds) can
// no longer be carried by an intent that passes: such an intent is dated
// at or after latest-MaxClockSkew, and its id at most RunIDMaxAge (and
// the millisecond the id is rounded to) before it.
func (st *state) forgetRun(ms int64) bool {
	return !st.rememberAll && ms != undatedRun && time.UnixMilli(ms).Before(st.latest.Add(-MaxClockSkew-RunIDMaxAge-time.Millisecond))
}

// sweep deletes what is forgotten once used and runs have doubled since
// the last sweep, so that deleting costs a constant per entry added.
func (st *state) sweep() {
	if len(st.used)+len(st.runs) < st.sweepAt {
		return
	}
	for k, u := range st.used {
		if st.forgetRecord(u.exp) {
			delete(st.used, k)
		}
	}
	for k, ms := range st.runs {
		if st.forgetRun(ms) {
			delete(st.runs, k)
		}
	}
	st.sweepAt = max(2*(len(st.used)+len(st.runs)), minSweep)
}

// expiryOf is when the record id the gate relied on expires, in Unix
// nanoseconds.
func expiryOf(dec *approval.Decision, id string) int64 {
	for _, a := range dec.Evidence {
		if a.ID == id && !a.Expires.IsZero() {
			return a.Expires.UnixNano()
		}
	}
	return neverExpires
}
