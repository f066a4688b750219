package receipts

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/strictjson"
)

// Journal is an append-only file of signed receipts, one DSSE envelope (as
// JSON) per line, each naming the hash of the line before it.
//
// Appends from any number of processes are serialised by flock(2) on the
// journal file; the fsync that makes an entry durable happens after the
// lock is released, so concurrent runs overlap their fsyncs instead of
// queueing behind one another (docs/adr/0004-journal.md).
type Journal struct {
	Path   string
	Key    *keys.Private
	Runner string
	Host   string
	Now    func() time.Time

	// Sync and SyncDir make an append durable: nil means durable.Sync
	// and durable.SyncDir, the fsyncs every durable write goes through
	// (docs/adr/0003-durable-writes.md). Tests swap them, here or there,
	// to fail or to record the order of events (an append whose sync
	// fails returns its error; nothing may execute before the intent's
	// sync returns).
	Sync    func(*os.File) error
	SyncDir func(dir string) error
}

// LineHash is the chain hash of one journal line (without its newline).
func LineHash(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:])
}

// Appended is where an entry landed.
type Appended struct {
	Seq  uint64
	Hash string
}

// Append signs r and appends it as the next entry, filling in Seq, Prev,
// Time, Runner and Host. When it returns without error the entry is on
// stable storage. A torn tail left by an earlier crash is cut off first
// (and kept beside the journal), and the cut is recorded as a repair entry.
func (j *Journal) Append(r *Receipt) (Appended, error) {
	if err := durable.MkdirAll(filepath.Dir(j.Path), 0o700); err != nil {
		return Appended{}, err
	}
	f, err := os.OpenFile(j.Path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return Appended{}, fmt.Errorf("opening journal: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return Appended{}, fmt.Errorf("locking journal: %w", err)
	}
	locked := true
	defer func() {
		if locked {
			unix.Flock(int(f.Fd()), unix.LOCK_UN)
		}
	}()

	tail, err := readTail(f)
	if err != nil {
		return Appended{}, err
	}
	if tail.torn != nil {
		if err := j.repair(f, &tail); err != nil {
			return Appended{}, err
		}
	}
	if tail.end == 0 && tail.torn == nil {
		// The first entry: make the journal's directory entry durable
		// before anyone, this process or another, can rely on an entry in
		// it (they all wait for the lock).
		if err := j.syncDir(filepath.Dir(j.Path)); err != nil {
			return Appended{}, fmt.Errorf("syncing the journal's directory: %w", err)
		}
	}
	r.Seq, r.Prev = tail.seq+1, tail.hash
	line, err := j.sign(r)
	if err != nil {
		return Appended{}, err
	}
	if len(line) > MaxLine {
		return Appended{}, fmt.Errorf("receipt is %d bytes; a journal line is at most %d (receipts.MaxLine)", len(line), MaxLine)
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		// A full disk or a file-size limit can take part of the line: cut
		// back to the last complete line, under the lock, so a live
		// process never leaves a torn line behind (only a crash can).
		if terr := f.Truncate(tail.end); terr != nil {
			return Appended{}, fmt.Errorf("appending to journal: %w (and cutting the partial line back failed: %v)", err, terr)
		}
		return Appended{}, fmt.Errorf("appending to journal: %w", err)
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	locked = false
	if err := j.sync(f); err != nil {
		return Appended{}, fmt.Errorf("syncing journal: %w", err)
	}
	return Appended{Seq: r.Seq, Hash: LineHash(line)}, nil
}

func (j *Journal) sync(f *os.File) error {
	if j.Sync != nil {
		return j.Sync(f)
	}
	return durable.Sync(f)
}

func (j *Journal) syncDir(dir string) error {
	if j.SyncDir != nil {
		return j.SyncDir(dir)
	}
	return durable.SyncDir(dir)
}

// ErrRunIDDate refuses an intent whose dated run id (NewRunID) was made
// more than RunIDMaxAge before it, or after it: replay would fail it.
var ErrRunIDDate = errors.New("run id not of this intent's time")

func (j *Journal) now() time.Time {
	if j.Now != nil {
		return j.Now()
	}
	return time.Now()
}

func (j *Journal) sign(r *Receipt) ([]byte, error) {
	if r.Time.IsZero() {
		r.Time = j.now().UTC()
	}
	if r.Kind == KindIntent {
		// Never an intent replay would fail for its run id's date.
		if why := runIDProblem(r.RunID, r.Time); why != "" {
			return nil, fmt.Errorf("%w: %s", ErrRunIDDate, why)
		}
	}
	r.Runner, r.Host = j.Runner, j.Host
	env, err := approval.Sign(j.Key, PayloadType, r)
	if err != nil {
		return nil, fmt.Errorf("signing receipt: %w", err)
	}
	return json.Marshal(env)
}

// repair cuts the torn tail, keeps its bytes in a file beside the journal,
// and appends a repair entry, all while the lock is held.
func (j *Journal) repair(f *os.File, t *tailInfo) error {
	saved := fmt.Sprintf("%s.torn-%d-%d", j.Path, t.end, time.Now().UnixNano())
	if err := durable.CreateExclusive(saved, t.torn, 0o600, true); err != nil {
		return fmt.Errorf("keeping torn journal tail: %w", err)
	}
	if err := f.Truncate(t.end); err != nil {
		return fmt.Errorf("cutting torn journal tail: %w", err)
	}
	rep := &Receipt{Kind: KindRepair, Seq: t.seq + 1, Prev: t.hash, Repair: &Repair{
		Offset: t.end, Dropped: int64(len(t.torn)), SHA256: "sha256:" + LineHash(t.torn), SavedAs: filepath.Base(saved),
	}}
	line, err := j.sign(rep)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("recording journal repair: %w", err)
	}
	if err := j.sync(f); err != nil {
		return err
	}
	t.seq, t.hash, t.torn = rep.Seq, LineHash(line), nil
	return nil
}

type tailInfo struct {
	seq  uint64
	hash string
	end  int64  // offset just past the last complete line
	torn []byte // bytes after the last newline, if any
}

// readTail finds the last complete line of f: its hash, and the sequence
// number it implies. It walks back from the end (scanBack, as ScanBack
// does), so its cost does not grow with the journal; the first chunk is
// small, as most receipts are.
func readTail(f *os.File) (tailInfo, error) {
	fi, err := f.Stat()
	if err != nil {
		return tailInfo{}, err
	}
	size := fi.Size()
	var t tailInfo
	// The sequence is one past the last entry that decodes, plus the
	// lines after it that do not (replay reports those, and counts a line
	// longer than MaxLine among them).
	var after uint64
	found := false
	t.end, err = scanBack(f, size, 8<<10, func(l Line) bool {
		if after == 0 {
			t.hash = l.Hash
			if l.Long == 0 {
				t.hash = LineHash(l.Bytes)
			}
		}
		if seq, ok := seqOf(l.Bytes); ok { // a long line has no Bytes
			t.seq, found = seq+after, true
			return true
		}
		after++
		return false
	})
	if err != nil {
		return tailInfo{}, fmt.Errorf("reading journal tail: %w", err)
	}
	if !found {
		t.seq = after
	}
	if n := size - t.end; n > 0 {
		t.torn = make([]byte, n)
		if _, err := f.ReadAt(t.torn, t.end); err != nil && err != io.EOF {
			return tailInfo{}, fmt.Errorf("reading journal tail: %w", err)
		}
	}
	return t, nil
}

// seqOf reads the sequence number of a journal line without verifying it.
func seqOf(line []byte) (uint64, bool) {
	env, err := parseEnvelope(line)
	if err != nil {
		return 0, false
	}
	payload, err := base64.StdEncoding.DecodeString(env.Payload)
	if err != nil {
		return 0, false
	}
	var r struct {
		Seq uint64 `json:"seq"`
	}
	if json.Unmarshal(payload, &r) != nil || r.Seq == 0 {
		return 0, false
	}
	return r.Seq, true
}

// MaxLine is the longest journal line replay reads, in bytes (without its
// newline). A longer line is reported as malformed without being held in
// memory (its hash is computed as it streams past), so a 300 MB line costs
// MaxLine, not 600 MB. Append refuses to write one. Receipts are a few KB;
// the largest intents (many evidence records) stay far below it.
const MaxLine = 8 << 20

// Line is one journal line as read, before any verification.
type Line struct {
	No int
	// Off is the offset of the line's first byte in the journal.
	Off   int64
	Bytes []byte // nil when the line is longer than MaxLine
	// Torn is set on a final line that does not end in a newline: the
	// write of a run that crashed, not a complete entry.
	Torn bool
	// Long is the length of a line longer than MaxLine, and Hash its
	// LineHash; both are zero otherwise.
	Long int64
	Hash string
}

// Scan calls fn for each line of r in order, streaming: memory does not
// grow with the journal, and one line costs at most MaxLine. A final line
// without a newline is passed with Torn set (replay reports it as torn).
// Bytes is only valid during the call.
func Scan(r io.Reader, fn func(Line) error) error { return scanFrom(r, 1, 0, fn) }

// scanFrom is Scan of a journal read from the start of line first, at
// offset off: the lines are numbered and placed from there.
func scanFrom(r io.Reader, first int, off int64, fn func(Line) error) error {
	br := bufio.NewReaderSize(r, 256<<10)
	var buf []byte
	for no := first; ; no++ {
		buf = buf[:0]
		var h hash.Hash
		var long int64
		var err error
		newline := false
		for {
			var chunk []byte
			chunk, err = br.ReadSlice('\n')
			if n := len(chunk); n > 0 && chunk[n-1] == '\n' {
				chunk, newline = chunk[:n-1], true
			}
			if h == nil && len(buf)+len(chunk) > MaxLine {
				h = sha256.New()
				h.Write(buf)
				long = int64(len(buf))
				buf = buf[:0]
			}
			if h != nil {
				h.Write(chunk)
				long += int64(len(chunk))
			} else {
				if need := len(buf) + len(chunk); need > cap(buf) {
					// Doubling, but never past MaxLine: a line costs
					// at most about twice MaxLine in all.
					grown := make([]byte, len(buf), min(max(2*cap(buf), need), MaxLine))
					copy(grown, buf)
					buf = grown
				}
				buf = append(buf, chunk...)
			}
			if err != bufio.ErrBufferFull {
				break
			}
		}
		if len(buf) > 0 || long > 0 || newline {
			l := Line{No: no, Off: off, Bytes: buf, Torn: !newline}
			n := int64(len(buf))
			if h != nil {
				l.Bytes, l.Long, l.Hash = nil, long, hex.EncodeToString(h.Sum(nil))
				n = long
			}
			if off += n; newline {
				off++
			}
			if ferr := fn(l); ferr != nil {
				return ferr
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Decode opens a journal line without verifying its signature.
func Decode(line []byte) (*approval.Envelope, *Receipt, error) {
	env, err := parseEnvelope(line)
	if err != nil {
		return nil, nil, fmt.Errorf("not a receipt envelope: %w", err)
	}
	if env.PayloadType != PayloadType {
		return nil, nil, fmt.Errorf("payload type %q is not a receipt", env.PayloadType)
	}
	r, err := decodeReceipt(env.Payload)
	if err != nil {
		return nil, nil, err
	}
	return env, r, nil
}

// DecodeLine is Decode of a line as Scan or ScanBack gives it: a line
// longer than MaxLine is no receipt, as replay says.
func DecodeLine(l Line) (*approval.Envelope, *Receipt, error) {
	if l.Long > 0 {
		return nil, nil, errors.New(tooLong(l.Long))
	}
	return Decode(l.Bytes)
}

// tooLong says why a line of n bytes is not read.
func tooLong(n int64) string {
	return fmt.Sprintf("it is %d bytes long; a journal line is at most %d (receipts.MaxLine)", n, MaxLine)
}

// decodeReceipt decodes a receipt payload strictly. The operation
// definition an intent carries is decoded once per distinct definition and
// shared: replay meets the same few definitions in every receipt.
func decodeReceipt(b64 string) (*Receipt, error) {
	payload, err := base64.StdEncoding.Strict().DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("receipt payload: %w", err)
	}
	// Shadow types: the shallower field wins, so the definition arrives
	// raw while everything else decodes (strictly) as usual.
	type plainReceipt Receipt
	type plainIntent Intent
	var w struct {
		plainReceipt
		Intent *struct {
			plainIntent
			Operation json.RawMessage `json:"operation_definition"`
		} `json:"intent,omitempty"`
	}
	// Strictly: exact-case keys, no duplicates, nothing after the value
	// (pkg/strictjson), checked against Receipt itself, definition
	// included; then decoded.
	if err := strictjson.Check(payload, (*Receipt)(nil)); err != nil {
		return nil, fmt.Errorf("receipt payload: %w", err)
	}
	// w reads exactly the keys Receipt does (its shadow fields are
	// Receipt's own, by the same names).
	if err := strictjson.DecodeChecked(payload, (*Receipt)(nil), &w); err != nil {
		return nil, fmt.Errorf("receipt payload: %w", err)
	}
	r := Receipt(w.plainReceipt)
	if w.Intent != nil {
		in := Intent(w.Intent.plainIntent)
		if raw := w.Intent.Operation; len(raw) > 0 && string(raw) != "null" {
			if in.Operation, err = definitions.get(raw); err != nil {
				return nil, fmt.Errorf("receipt payload: operation definition: %w", err)
			}
		}
		r.Intent = &in
	}
	return &r, nil
}

// ScanBack calls fn for each complete line of the journal r (size bytes
// long) from the last to the first, reading backwards in chunks, until fn
// returns true: what it costs is the lines read, not the journal's size
// (receipts show, receipts list --last). Each line is as Scan gives it,
// with its offset in Off and No left 0 (counting would read the journal
// from its start): a line longer than MaxLine comes without its bytes,
// with its length in Long and its LineHash in Hash (read forwards again,
// never held). A final line without its newline (torn) is skipped. Bytes
// is only valid during the call.
func ScanBack(r io.ReaderAt, size int64, fn func(Line) (stop bool)) error {
	_, err := scanBack(r, size, 64<<10, fn)
	return err
}

// scanBack is ScanBack's walk, from a first chunk of chunk bytes (each
// next one twice as large, up to 4 MiB). It returns the offset just past
// the last complete line: where a torn final line starts, or size.
func scanBack(r io.ReaderAt, size, chunk int64, fn func(Line) bool) (int64, error) {
	// buf holds the bytes [at, at+len(buf)) not yet passed to fn. Once the
	// last newline is found (end >= 0) and unless long, they end where
	// the current line does: at lineEnd, its newline's offset.
	var buf []byte
	at, end, lineEnd := size, int64(-1), int64(0)
	long := false // the current line is already longer than MaxLine
	for {
		i := bytes.LastIndexByte(buf, '\n')
		if i < 0 && at > 0 {
			// Read the chunk before. What cannot be passed is not kept:
			// a torn tail, and a line past MaxLine (its hash is read
			// again, forwards, once its start is found).
			switch {
			case end < 0 || long:
				buf = buf[:0]
			case len(buf) > MaxLine:
				buf, long = buf[:0], true
			}
			n := min(chunk, at)
			b := make([]byte, n, n+int64(len(buf)))
			if _, err := r.ReadAt(b, at-n); err != nil && err != io.EOF {
				return 0, fmt.Errorf("reading journal: %w", err)
			}
			at -= n
			buf = append(b, buf...)
			chunk = min(chunk*2, 4<<20)
			continue
		}
		if end < 0 {
			if i < 0 {
				return 0, nil // no newline: empty, or one torn line
			}
			end, lineEnd, buf = at+int64(i)+1, at+int64(i), buf[:i]
			continue
		}
		// The line is [start, lineEnd): after the newline at i, or from
		// the journal's start when there is none before it (at is 0).
		start := at + int64(i) + 1
		l := Line{Off: start}
		if n := lineEnd - start; long || n > MaxLine {
			h := sha256.New()
			if _, err := io.Copy(h, io.NewSectionReader(r, start, n)); err != nil {
				return 0, fmt.Errorf("reading journal: %w", err)
			}
			l.Long, l.Hash = n, hex.EncodeToString(h.Sum(nil))
		} else {
			l.Bytes = buf[i+1:]
		}
		if fn(l) || i < 0 {
			return end, nil
		}
		long, lineEnd, buf = false, at+int64(i), buf[:i]
	}
}
