// Package decisionlog writes the gate's decision log: one JSON line per run
// attempt, allowed or refused, for SIEMs and log shippers
// (docs/DECISIONS.md, docs/adr/0026-decision-log.md).
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
// every write, and every rotation, happens under an exclusive flock(2) of
// PATH.lock, a file beside the log that is never rotated, so every writer
// waits its turn and then writes to the file at PATH as it is then. No
// writer ever finds the file rotated under it, so none retries and none
// gives up (docs/adr/0037-a-decision-log-that-never-drops-a-line.md).
// Each line is one write(2) to a descriptor opened with O_APPEND.
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

	"github.com/prod-write/prod-write/pkg/visible"
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
	// What would not show as itself in a SIEM is written as \u escapes,
	// the value the same (docs/adr/0062-showing-agent-text.md).
	return append(visible.JSON(b), '\n')
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
	// Write writes one line, or says why it could not.
	Write(line []byte) error
	// Check says whether a line could be written now, writing nothing.
	Check() error
}

var (
	_ Sink = (*File)(nil)
	_ Sink = (*Stream)(nil)
)

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

// Check returns nil: a stream cannot be tried without writing to it, so
// its failures are found by the write.
func (s *Stream) Check() error { return nil }

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

// Write appends line (which must end in a newline) to the log, rotating
// first if it would not fit. It waits for the log's lock as long as
// another writer holds it (a holder only rotates and writes one line), and
// it returns an error only when the line cannot be written at all.
func (l *File) Write(line []byte) error {
	if int64(len(line)) > l.MaxSize {
		return ErrTooLarge
	}
	return l.append(line)
}

// Check takes the log's lock and opens the log for appending, creating
// both if needed, as Write would, and writes nothing: a log that cannot be
// written is found before anything depends on its next line.
func (l *File) Check() error { return l.append(nil) }

// LockPath is the file whose flock every writer of the log at path holds
// while it rotates or writes.
func LockPath(path string) string { return path + ".lock" }

// append writes line (nothing when empty) under the lock of PATH.lock.
func (l *File) append(line []byte) error {
	mode := l.Mode
	if mode == 0 {
		mode = 0o640
	}
	// Opened for writing, although flock needs no more than reading: an
	// account that may only read the log (a log shipper) cannot then hold
	// the lock, which would stall every writer.
	lock, err := openRegular(LockPath(l.Path), os.O_RDWR, mode)
	if err != nil {
		return err
	}
	defer lock.Close() // closing releases the lock
	if err := flock(int(lock.Fd())); err != nil {
		return fmt.Errorf("locking %s: %w", lock.Name(), err)
	}
	fl, err := openRegular(l.Path, os.O_WRONLY|os.O_APPEND, mode)
	if err != nil || len(line) == 0 {
		if err == nil {
			err = fl.Close()
		}
		return err
	}
	fi, err := fl.Stat()
	if err != nil {
		fl.Close()
		return err
	}
	if fi.Size() > 0 && fi.Size()+int64(len(line)) > l.MaxSize {
		fl.Close()
		if err := l.rotate(); err != nil {
			return fmt.Errorf("rotating %s: %w", l.Path, err)
		}
		if fl, err = openRegular(l.Path, os.O_WRONLY|os.O_APPEND, mode); err != nil {
			return err
		}
	}
	n, err := fl.Write(line)
	if err == nil && n != len(line) {
		err = io.ErrShortWrite
	}
	if cerr := fl.Close(); err == nil {
		err = cerr
	}
	return err
}

// openRegular opens path with flag, creating it with mode if needed. It
// refuses a symlink (O_NOFOLLOW) and anything but a regular file; a FIFO
// planted there fails at once (O_NONBLOCK) instead of holding the writer.
func openRegular(path string, flag int, mode os.FileMode) (*os.File, error) {
	fl, err := os.OpenFile(path, flag|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, mode)
	if err != nil {
		return nil, err
	}
	fi, err := fl.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = fmt.Errorf("%s is not a regular file", path)
	}
	if err != nil {
		fl.Close()
		return nil, err
	}
	return fl, nil
}

// rotate shifts PATH.i to PATH.i+1 (the oldest is replaced) and PATH to
// PATH.1; the caller holds the log's lock.
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
