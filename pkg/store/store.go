// Package store holds where plans and evidence live and how evidence is
// consumed exactly once. The store is not trusted (docs/DESIGN.md §2): what it returns
// is judged by signatures. What it must get right is consumption: of any
// number of concurrent consumers of one record slot, exactly one succeeds.
package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/prod-write/prod-write/pkg/dsse"
)

// Store is what the gate's callers need from a backend. The embedded [Dir]
// and the DynamoDB backend implement it; one conformance suite tests both.
type Store interface {
	// PutPlan stores a signed plan under its fingerprint. Storing the same
	// fingerprint again with the same bytes is not an error; with other
	// bytes it is ErrExists.
	PutPlan(fp string, env *dsse.Envelope) error
	// GetPlan returns the plan stored for fp, or ErrNotFound.
	GetPlan(fp string) (*dsse.Envelope, error)
	// PutEvidence stores a record bound to fp under its id, never
	// overwriting: storing the same id twice is a no-op.
	PutEvidence(fp, id string, env *dsse.Envelope) error
	// Evidence returns the records stored for fp. A record that cannot be
	// read is reported in problems and skipped, never returned.
	Evidence(fp string) (records []*dsse.Envelope, problems []Problem, err error)
	// Consume spends one use of record id, which may be used uses times,
	// for the run named run, and writes run into what it writes. It returns
	// the slot it took, or an error matching ErrConsumed (made by
	// [Consumed]) when every use is spent by other runs. It is idempotent
	// per run: calling it again with the same run (a retry whose answer was
	// lost) returns the slot that run already holds and spends nothing
	// more, and never refuses it as consumed (docs/adr/0015-idempotent-consumption.md).
	Consume(id string, uses int, run string) (slot int, err error)
	// Used reports how many uses of each record are spent.
	Used(ids []string) (map[string]int, error)
	// AdvanceSignCount raises the stored sign count of passkey credential
	// cred to count for the run named run, by a conditional write: it
	// succeeds only when count is strictly greater than the stored count
	// (or none is stored), and otherwise returns an error matching
	// ErrSignCount (made by [SignCountBack]). Of two runs racing on one
	// credential the write serialises them. It is idempotent per run: a
	// retry by the run whose write already holds count succeeds
	// (docs/adr/0043-passkey-assertions-as-evidence.md).
	AdvanceSignCount(cred string, count uint32, run string) error
	// SignCounts returns the stored sign count of each credential that
	// has one.
	SignCounts(creds []string) (map[string]uint32, error)
	// PutContent keeps data, the bytes of a file a plan binds, under sum,
	// their "sha256:HEX", at most [MaxContent] bytes: data whose sum is
	// not sum is refused, and keeping the same content again is not an
	// error (docs/adr/0063-file-content-kept-with-the-plan.md).
	PutContent(sum string, data []byte) error
	// Content returns the bytes kept under sum, or ErrNotFound. The store
	// is not trusted: a caller checks their sum against the signed plan.
	Content(sum string) ([]byte, error)
}

// MaxContent bounds the file content a store keeps under one sum.
const MaxContent = 1 << 20

// CheckContent reports whether data may be kept under sum: at most
// [MaxContent] bytes whose sha256 is sum. Every backend checks it before
// it writes anything.
func CheckContent(sum string, data []byte) error {
	if err := CheckFingerprint(sum); err != nil {
		return fmt.Errorf("content sum: %w", err)
	}
	if len(data) > MaxContent {
		return fmt.Errorf("content %.19s…: %d bytes, over the %d a store keeps", sum, len(data), MaxContent)
	}
	if SumOf(data) != sum {
		return fmt.Errorf("content %.19s…: %w", sum, ErrContentSum)
	}
	return nil
}

// SumOf is data's sum as plans bind it: "sha256:" and 64 hex digits.
func SumOf(data []byte) string {
	h := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(h[:])
}

// ErrContentSum is content whose bytes are not the sum it is kept or
// asked for under.
var ErrContentSum = errors.New("the bytes are not those of this sum")

// Errors a Store returns; callers branch on them with errors.Is.
var (
	ErrNotFound  = errors.New("not found")
	ErrExists    = errors.New("already exists with other content")
	ErrConsumed  = errors.New("evidence already consumed")
	ErrSignCount = errors.New("passkey sign count did not move forward")
)

// SignCountBack is the error of an AdvanceSignCount refused because count
// is not above the stored one; every backend returns it.
func SignCountBack(cred string, count, stored uint32) error {
	return fmt.Errorf("passkey credential %.16s…: sign count %d is not above the stored %d, a possible clone: %w", cred, count, stored, ErrSignCount)
}

// CredKey is the name under which a backend keeps credential cred's sign
// count: the hex SHA-256 of the credential id, so any id makes a safe
// file name or key.
func CredKey(cred string) string {
	h := sha256.Sum256([]byte(cred))
	return hex.EncodeToString(h[:])
}

// Consumed is the error of a Consume that found every use of record id
// spent by other runs; every backend returns it, so the refusal reads the
// same whatever the store.
func Consumed(id string, uses int) error {
	return fmt.Errorf("record %.12s…: all %d uses spent by other runs: %w", id, uses, ErrConsumed)
}

// Problem is a stored item that could not be read as a record.
type Problem struct {
	Path string `json:"path"`
	Err  string `json:"error"`
}

func (p Problem) String() string { return fmt.Sprintf("%s: %s", p.Path, p.Err) }

// hex64 reports whether s is 64 lowercase hex digits (a loop, not a
// regexp, which would compile 64 states at every start of prod-write).
func hex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// CheckFingerprint reports whether fp has the form "sha256:" and 64
// lowercase hex digits. Everything that turns a fingerprint into a key or a
// path checks it first.
func CheckFingerprint(fp string) error {
	if h, ok := strings.CutPrefix(fp, "sha256:"); !ok || !hex64(h) {
		return &BadFingerprintError{FP: fp}
	}
	return nil
}

// BadFingerprintError is a fingerprint that is not of the form sha256:HEX.
type BadFingerprintError struct{ FP string }

func (e *BadFingerprintError) Error() string {
	return fmt.Sprintf("%q is not a fingerprint (want sha256: and 64 hex digits)", e.FP)
}

func hexOf(fp string) string { return strings.TrimPrefix(fp, "sha256:") }

// CheckRunID reports whether run names a run as consumption records it: 8
// to 64 lowercase hex digits (prod-write's run ids are 32, receipts.NewRunID;
// 24 before ADR 0053). Every backend checks it before it becomes part of a
// file name or an attribute name.
func CheckRunID(run string) error {
	if len(run) < 8 || len(run) > 64 {
		return fmt.Errorf("%q is not a run id (want 8 to 64 lowercase hex digits)", run)
	}
	for _, c := range []byte(run) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("%q is not a run id (want 8 to 64 lowercase hex digits)", run)
		}
	}
	return nil
}

// CheckID reports whether id is a record id: 64 lowercase hex digits (the
// hex sha256 of a record's DSSE pre-authentication encoding). Every backend
// checks it before an id becomes a key or a path.
func CheckID(id string) error {
	if !hex64(id) {
		return fmt.Errorf("%q is not a record id", id)
	}
	return nil
}
