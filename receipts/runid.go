package receipts

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"time"
)

// RunIDMaxAge is how long before its intent a dated run id may have been
// made (NewRunID). The runner makes the id before the gate and writes the
// intent after it, so the two are milliseconds apart; a day leaves room
// for any wait on a lock or a store, and the journal refuses an intent
// older than that rather than writing one replay fails (ADR 0053).
const RunIDMaxAge = 24 * time.Hour

// runIDLen is a dated run id's length: 6 bytes of Unix milliseconds and
// 10 random bytes, in hex. Run ids of any other form (the 24 hex digits
// of journals before ADR 0053, or a test's "run-1") are undated.
const runIDLen = 32

// NewRunID is a run id dated t: replay holds a dated id against its
// intent's time, so it remembers ids only as long as a later intent could
// carry one again (ADR 0053), and no longer than that.
func NewRunID(t time.Time) string {
	var b [16]byte
	ms := uint64(t.UnixMilli())
	binary.BigEndian.PutUint16(b[0:2], uint16(ms>>32))
	binary.BigEndian.PutUint32(b[2:6], uint32(ms))
	if _, err := rand.Read(b[6:]); err != nil {
		panic(err) // crypto/rand does not fail (Go 1.24)
	}
	return hex.EncodeToString(b[:])
}

// runIDTime is when a dated run id was made, in Unix milliseconds; ok is
// false for an undated one.
func runIDTime(id string) (ms int64, ok bool) {
	if len(id) != runIDLen {
		return 0, false
	}
	var b [16]byte
	if _, err := hex.Decode(b[:], []byte(id)); err != nil {
		return 0, false
	}
	for _, c := range id {
		if c >= 'A' && c <= 'F' {
			return 0, false // one spelling of each id
		}
	}
	return int64(binary.BigEndian.Uint16(b[0:2]))<<32 | int64(binary.BigEndian.Uint32(b[2:6])), true
}

// runIDProblem is why a dated run id does not belong to an intent made at
// at, or "".
func runIDProblem(id string, at time.Time) string {
	ms, ok := runIDTime(id)
	if !ok {
		return ""
	}
	made := time.UnixMilli(ms)
	switch {
	case made.After(at.Add(MaxClockSkew)):
		return "run id " + id + " is dated " + made.UTC().Format(time.RFC3339Nano) + ", after its intent's " + at.UTC().Format(time.RFC3339Nano)
	case at.Sub(made) > RunIDMaxAge+time.Millisecond:
		return "run id " + id + " is dated " + made.UTC().Format(time.RFC3339Nano) + ", more than " + RunIDMaxAge.String() + " before its intent's " + at.UTC().Format(time.RFC3339Nano)
	}
	return ""
}
