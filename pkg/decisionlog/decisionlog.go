// Package decisionlog writes the gate's decision log: one JSON line per run
// attempt, allowed or refused, for SIEMs and log shippers (issue 20,
// docs/DECISIONS.md, docs/adr/0026-decision-log.md).
//
// # Bounded
//
// A caller must not be able to fill the disk by asking again and again to
// run a refused plan. [File] rotates: before a line would take the file past
// MaxSize it is renamed PATH.1 (PATH.1 to PATH.2, … up to PATH.Keep, the
// oldest dropped), so the log never holds more than MaxSize×(Keep+1) bytes.
// Every line is at most [MaxLine] bytes ([Entry.Line] shortens what a
// caller's input can lengthen), and MaxSize is at least [MinSize].
//
// # Concurrent writers
//
// Local runs are separate processes, and the service runs calls at once:
// each line is one write(2) to a descriptor opened with O_APPEND, under an
// exclusive flock(2) of the file, after checking that the locked file is
// still the one at PATH (a writer that waited while another rotated opens
// the new file). Rotation happens only under that lock.
//
// # Not a receipt
//
// Lines are not fsynced and not signed: the receipt journal is the durable,
// signed record of what ran, and an allowed decision's intent receipt
// carries its decision_id. The log is the signal, refusals included.
package decisionlog

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// FormatVersion is the version of the line format; a field is only ever
// added under one version, never renamed or given another meaning.
const FormatVersion = 1

// Decisions.
const (
	// Allowed: the gate said yes, the approval is spent and the intent
	// receipt is durable; the program runs next.
	Allowed = "allowed"
	// Refused: the gate (or a check before it) said no; nothing ran and
	// nothing was spent.
	Refused = "refused"
	// Failed: an error that is not a refusal (configuration, store, I/O)
	// stopped the run before the program started.
	Failed = "failed"
)

// Invoker is who asked for the run.
type Invoker struct {
	// UID is the calling account: the process's own in local mode, the
	// kernel's SO_PEERCRED in the service, -1 for MCP over HTTP.
	UID int `json:"uid"`
	// Principal is the principal of the key the caller presented, if any.
	Principal string `json:"principal,omitempty"`
}

// Entry is one line of the decision log. The field names are stable and
// documented in docs/DECISIONS.md; a field that does not apply is omitted.
type Entry struct {
	FormatVersion  int      `json:"format_version"`
	Time           string   `json:"time"`
	DecisionID     string   `json:"decision_id"`
	Decision       string   `json:"decision"`
	Code           string   `json:"code,omitempty"`
	Reason         string   `json:"reason,omitempty"`
	Missing        []string `json:"missing,omitempty"`
	Surface        string   `json:"surface"`
	Host           string   `json:"host,omitempty"`
	Operation      string   `json:"operation,omitempty"`
	Target         string   `json:"target,omitempty"`
	Fingerprint    string   `json:"fingerprint,omitempty"`
	Planner        string   `json:"planner,omitempty"`
	Invoker        Invoker  `json:"invoker"`
	Path           string   `json:"path,omitempty"`
	Signers        []string `json:"signers,omitempty"`
	Evidence       []string `json:"evidence,omitempty"`
	Use            int      `json:"use,omitempty"`
	Uses           int      `json:"uses,omitempty"`
	PolicyDigest   string   `json:"policy_digest,omitempty"`
	RegistryDigest string   `json:"registry_digest,omitempty"`
	RunID          string   `json:"run_id,omitempty"`
	Receipt        uint64   `json:"receipt,omitempty"`
	// Truncated says that Reason or Missing were shortened to keep the
	// line within MaxLine.
	Truncated bool `json:"truncated,omitempty"`
}

// MaxLine is the longest line Entry.Line returns, newline included.
const MaxLine = 4 << 10

// MinSize is the smallest MaxSize a File accepts: a few lines.
const MinSize = 4 * MaxLine

// Bounds of what Entry.Line keeps of the fields a caller's input can
// lengthen.
const (
	maxReason  = 1024
	maxMissing = 8
	maxItem    = 200
	maxIDs     = 16
)

// Line encodes e as one JSON line of at most MaxLine bytes. Fields a
// caller can lengthen (the reason, what is missing, a fingerprint as typed)
// are shortened, and Truncated set, when needed.
func (e Entry) Line() []byte {
	e.FormatVersion = FormatVersion
	b := e.encode()
	if len(b) <= MaxLine {
		return b
	}
	e.Truncated = true
	e.Reason = clip(e.Reason, maxReason)
	// A copy: e's slices are the caller's (a refusal's own Missing, which
	// is printed to the user after the line is logged).
	e.Missing = slices.Clone(e.Missing[:min(len(e.Missing), maxMissing)])
	for i := range e.Missing {
		e.Missing[i] = clip(e.Missing[i], maxItem)
	}
	if len(e.Signers) > maxIDs {
		e.Signers = e.Signers[:maxIDs]
	}
	if len(e.Evidence) > maxIDs {
		e.Evidence = e.Evidence[:maxIDs]
	}
	for _, p := range []*string{&e.Fingerprint, &e.Operation, &e.Target, &e.Planner, &e.Invoker.Principal, &e.Host, &e.Path, &e.Code, &e.Surface} {
		*p = clip(*p, maxItem)
	}
	if b = e.encode(); len(b) <= MaxLine {
		return b
	}
	// Escapes can grow a string sixfold: drop what is left to drop.
	e.Reason, e.Missing = "", nil
	return e.encode()
}

func (e *Entry) encode() []byte {
	b, err := json.Marshal(e)
	if err != nil {
		// Only strings, ints and slices of them: cannot happen.
		panic(err)
	}
	return append(b, '\n')
}

// clip cuts s to at most n bytes, on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

// Sink is where lines go.
type Sink interface {
	Write(line []byte) error
}

// Stream writes lines to a stream (the service's standard output, for a
// log shipper that reads it), one write each, serialized.
type Stream struct {
	mu sync.Mutex
	W  io.Writer
}

func (s *Stream) Write(line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := s.W.Write(line)
	if err == nil && n != len(line) {
		err = io.ErrShortWrite
	}
	return err
}

// File is a size-capped, rotated log file (see the package doc).
type File struct {
	Path    string
	MaxSize int64
	// Keep is how many rotated files are kept (PATH.1 … PATH.Keep); 0
	// starts the log afresh when it is full.
	Keep int
	// Mode is the mode a new file is created with (less the umask);
	// 0640 when zero.
	Mode os.FileMode
}

// ErrTooLarge is returned for a line longer than the file's MaxSize.
var ErrTooLarge = errors.New("decision log line longer than the log's max size")

// maxAttempts bounds how often Write follows a file rotated away under it.
const maxAttempts = 16

// Write appends line (which must end in a newline) to the log, rotating
// first if it would not fit.
func (l *File) Write(line []byte) error {
	if int64(len(line)) > l.MaxSize {
		return ErrTooLarge
	}
	mode := l.Mode
	if mode == 0 {
		mode = 0o640
	}
	for range maxAttempts {
		done, err := l.try(line, mode)
		if err != nil || done {
			return err
		}
	}
	return fmt.Errorf("decision log %s: rotated under this writer %d times in a row", l.Path, maxAttempts)
}

// try makes one attempt: done is false when the file was rotated (by this
// writer or another) and the write must be tried again on the new one.
func (l *File) try(line []byte, mode os.FileMode) (done bool, err error) {
	fl, err := os.OpenFile(l.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return false, err
	}
	defer fl.Close() // closing releases the lock
	fd := int(fl.Fd())
	if err := flock(fd); err != nil {
		return false, fmt.Errorf("locking %s: %w", l.Path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false, fmt.Errorf("%s is not a regular file", l.Path)
	}
	var now unix.Stat_t
	if err := unix.Lstat(l.Path, &now); err != nil || now.Dev != st.Dev || now.Ino != st.Ino {
		// Rotated (or removed) while this writer waited for the lock.
		return false, nil
	}
	if st.Size > 0 && st.Size+int64(len(line)) > l.MaxSize {
		if err := l.rotate(); err != nil {
			return false, fmt.Errorf("rotating %s: %w", l.Path, err)
		}
		return false, nil
	}
	n, err := fl.Write(line)
	if err == nil && n != len(line) {
		err = io.ErrShortWrite
	}
	return err == nil, err
}

// Check opens the log for appending, creating it if needed, as Write
// would: a log that cannot be written is found before the first decision.
func (l *File) Check() error {
	mode := l.Mode
	if mode == 0 {
		mode = 0o640
	}
	fl, err := os.OpenFile(l.Path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	defer fl.Close()
	fi, err := fl.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", l.Path)
	}
	return nil
}

// rotate shifts PATH.i to PATH.i+1 (the oldest is replaced) and PATH to
// PATH.1; the caller holds the lock of the file at PATH.
func (l *File) rotate() error {
	if l.Keep <= 0 {
		return os.Remove(l.Path)
	}
	for i := l.Keep - 1; i >= 1; i-- {
		err := os.Rename(l.rotated(i), l.rotated(i+1))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return os.Rename(l.Path, l.rotated(1))
}

func (l *File) rotated(i int) string { return l.Path + "." + strconv.Itoa(i) }

func flock(fd int) error {
	for {
		err := unix.Flock(fd, unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// TimeFormat is the format of Entry.Time: RFC 3339, UTC, nanoseconds.
const TimeFormat = time.RFC3339Nano

// NewID returns a new decision id: a random UUID (version 4), the shape
// OPA's decision logs use and SIEMs index.
func NewID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
