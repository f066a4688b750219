package archive

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/prod-write/prod-write/receipts"
)

// Entry names a journal line by what [receipts.Journal.Append] returned
// for it.
type Entry struct {
	Seq  uint64
	Hash string
}

// Ship archives the journal lines named by entries, just appended to the
// journal at path: it finds them by hash at the journal's end (other runs
// may have appended after them) and puts each.
func (a *Archive) Ship(ctx context.Context, path string, entries ...Entry) error {
	lines, err := findTail(path, entries)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if owner, ok := OwnerOf(lines[e.Hash]); ok {
			if err := a.Claim(ctx, owner); err != nil {
				return err
			}
			break
		}
	}
	for _, e := range entries {
		// The first failure stops it: the rest would most likely fail
		// alike, and Sync ships them all later anyway.
		if err := a.Put(ctx, e.Seq, lines[e.Hash]); err != nil {
			return err
		}
	}
	return nil
}

// findTail reads the journal at path backwards, in growing chunks, until
// it has found the lines with the entries' hashes: its cost is that of the
// tail, not of the journal.
func findTail(path string, entries []Entry) (map[string][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	found := map[string][]byte{}
	for chunk := int64(64 << 10); ; chunk *= 4 {
		chunk = min(chunk, size)
		buf := make([]byte, chunk)
		if _, err := f.ReadAt(buf, size-chunk); err != nil && err != io.EOF {
			return nil, fmt.Errorf("reading journal tail: %w", err)
		}
		lines := bytes.Split(buf, []byte{'\n'})
		if chunk < size {
			lines = lines[1:] // may be cut by the chunk boundary
		}
		for _, l := range lines {
			found[receipts.LineHash(l)] = l
		}
		missing := 0
		for _, e := range entries {
			if _, ok := found[e.Hash]; !ok {
				missing++
			}
		}
		if missing == 0 {
			return found, nil
		}
		if chunk == size {
			for _, e := range entries {
				if _, ok := found[e.Hash]; !ok {
					return nil, fmt.Errorf("journal %s has no line %d with hash %.12s…", path, e.Seq, e.Hash)
				}
			}
		}
	}
}

// SyncResult is what [Archive.Sync] did.
type SyncResult struct {
	Lines   int // complete journal lines read
	Shipped int // objects written now
	Present int // lines the archive held already, byte for byte
}

// syncWorkers is how many puts Sync keeps in flight.
const syncWorkers = 8

// held is an archive object as a listing shows it.
type held struct {
	key, hash, etag string
}

// Sync ships every complete line of journal that the archive is missing:
// it lists the archive once, then puts only what is missing, so a second
// Sync ships nothing. A last line without its newline (a write in progress,
// or a torn tail the next append cuts off) is not shipped.
//
// Before shipping it claims the prefix for the journal's owner ([Claim]):
// a prefix holding another host's chain is a [*ForeignError] and nothing
// is shipped. It compares bytes, not names: a line counts as present only
// when the one object for its sequence number has the line's hash in its
// name and the line's bytes (its ETag is their MD5, or it is read back).
// Anything else under the prefix is a [*TamperError] (an object for a
// sequence number the journal lacks, two objects for one, an object whose
// bytes are not the line's), and a line the archive holds with another
// hash is a [*ConflictError]; each is returned after the rest is shipped.
func (a *Archive) Sync(ctx context.Context, journal io.Reader) (SyncResult, error) {
	var res SyncResult
	var errs []error
	objs := map[uint64][]held{}
	err := a.each(ctx, func(o types.Object) error {
		key := aws.ToString(o.Key)
		seq, hash, ok := a.parseKey(key)
		switch {
		case ok:
			objs[seq] = append(objs[seq], held{key: key, hash: hash, etag: strings.Trim(aws.ToString(o.ETag), `"`)})
		case key != a.prefix+OwnerName:
			errs = append(errs, &TamperError{Key: key, Kind: "foreign", Msg: "an object shipping never writes is under the prefix"})
		}
		return nil
	})
	if err != nil {
		return res, err
	}

	type job struct {
		seq  uint64
		line []byte
	}
	jobs := make(chan job)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		shipped int
		present int
	)
	report := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range syncWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				err := a.Put(ctx, j.seq, j.line)
				if err != nil {
					report(err)
					continue
				}
				mu.Lock()
				shipped++
				mu.Unlock()
			}
		}()
	}
	// Lines wait here until the prefix is claimed for the journal's
	// owner, named by its first receipt.
	var pending []job
	claimed := false
	send := func(j job) bool {
		if !claimed {
			pending = append(pending, j)
			return true
		}
		mu.Lock()
		failed := len(errs) >= 10
		mu.Unlock()
		if failed {
			return false // enough to say what is wrong
		}
		jobs <- j
		return true
	}
	claim := func(owner Owner, ok bool) error {
		if claimed {
			return nil
		}
		if ok {
			if err := a.Claim(ctx, owner); err != nil {
				return err
			}
		}
		claimed = true
		for _, j := range pending {
			if !send(j) {
				break
			}
		}
		pending = nil
		return nil
	}
	br := bufio.NewReaderSize(journal, 256<<10)
	var fatal error
lines:
	for no := uint64(1); ; no++ {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			break // a last line without newline is not complete
		}
		if err != nil {
			fatal = fmt.Errorf("reading journal: %w", err)
			break
		}
		line = line[:len(line)-1]
		res.Lines++
		seq := seqOf(line, no)
		if !claimed {
			if owner, ok := OwnerOf(line); ok {
				if fatal = claim(owner, true); fatal != nil {
					break
				}
			}
		}
		hash := receipts.LineHash(line)
		there := objs[seq]
		delete(objs, seq)
		switch {
		case len(there) > 1:
			keys := make([]string, len(there))
			for i, h := range there {
				keys[i] = h.key
			}
			report(&TamperError{Key: there[0].key, Kind: "duplicate", Msg: fmt.Sprintf("%d objects hold entry %d (%s): another journal shipped to this prefix, or one was added", len(there), seq, strings.Join(keys, ", "))})
		case len(there) == 1 && there[0].hash != hash:
			report(&ConflictError{Key: there[0].key, Line: seq,
				Msg: fmt.Sprintf("the archive holds another line %d (hash %.12s…, the journal's is %.12s…): does another journal ship to this prefix?", seq, there[0].hash, hash)})
		case len(there) == 1:
			if err := a.sameBytes(ctx, there[0], line); err != nil {
				report(err)
				continue
			}
			present++
		default:
			if !send(job{seq, line}) {
				break lines
			}
		}
	}
	if fatal == nil {
		// A journal with no receipt at all names no owner to claim for.
		fatal = claim(Owner{}, false)
	}
	close(jobs)
	wg.Wait()
	res.Shipped, res.Present = shipped, present
	if fatal != nil {
		return res, fatal
	}
	// What is left is in the archive and not in the journal.
	seqs := make([]uint64, 0, len(objs))
	for seq := range objs {
		seqs = append(seqs, seq)
	}
	slices.Sort(seqs)
	for _, seq := range seqs {
		for _, h := range objs[seq] {
			errs = append(errs, &TamperError{Key: h.key, Kind: "foreign", Msg: fmt.Sprintf("the journal has no entry %d with these bytes: another journal shipped it, or it was added", seq)})
		}
	}
	return res, errors.Join(errs...)
}

// sameBytes checks that the object h holds line: by its ETag, the MD5 of
// its bytes for an object put whole without KMS encryption, or else by
// reading it back. A name is no proof: an unversioned, unlocked bucket
// lets anyone with PutObject replace the bytes under it.
func (a *Archive) sameBytes(ctx context.Context, h held, line []byte) error {
	sum := md5.Sum(line)
	if h.etag == hex.EncodeToString(sum[:]) {
		return nil
	}
	got, found, err := a.read(ctx, h.key, int64(len(line))+1)
	if err != nil {
		return err
	}
	if !found || !bytes.Equal(got, line) {
		return &TamperError{Key: h.key, Kind: "overwritten", Msg: "its bytes are not the journal line its name names"}
	}
	return nil
}

// seqOf is the sequence number a journal line carries, or its line number
// when it cannot be read (replay reports such lines; the archive keeps
// them in place).
func seqOf(line []byte, no uint64) uint64 {
	if _, r, err := receipts.Decode(line); err == nil && r.Seq > 0 {
		return r.Seq
	}
	return no
}

// Reader returns the archive as one journal: its receipt objects in key
// (journal) order, each followed by a newline, ready for
// [receipts.Replayer]. It holds one listing page and one object body at a
// time, so its memory does not grow with the archive.
func (a *Archive) Reader(ctx context.Context) io.ReadCloser {
	return &reader{ctx: ctx, a: a, pages: a.pages()}
}

type reader struct {
	ctx     context.Context
	a       *Archive
	pages   *s3.ListObjectsV2Paginator
	keys    []string
	body    io.ReadCloser
	newline bool // a newline is owed after the object just read
	err     error
}

func (r *reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for r.err == nil {
		if r.body != nil {
			n, err := r.body.Read(p)
			if err == io.EOF {
				r.body.Close()
				r.body, r.newline = nil, true
				err = nil
			}
			if err != nil {
				r.err = r.a.fail("GetObject", "", err)
			}
			if n > 0 {
				return n, nil
			}
			continue
		}
		if r.newline {
			r.newline = false
			p[0] = '\n'
			return 1, nil
		}
		if len(r.keys) > 0 {
			key := r.keys[0]
			r.keys = r.keys[1:]
			out, err := r.a.client.GetObject(r.ctx, &s3.GetObjectInput{Bucket: aws.String(r.a.bucket), Key: aws.String(key)})
			if err != nil {
				r.err = r.a.fail("GetObject", key, err)
				break
			}
			r.body = out.Body
			continue
		}
		if !r.pages.HasMorePages() {
			r.err = io.EOF
			break
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.a.timeout)
		page, err := r.pages.NextPage(ctx)
		cancel()
		if err != nil {
			r.err = r.a.fail("ListObjectsV2", r.a.prefix, err)
			break
		}
		for _, o := range page.Contents {
			if _, _, ok := r.a.parseKey(aws.ToString(o.Key)); ok {
				r.keys = append(r.keys, aws.ToString(o.Key))
			}
		}
	}
	return 0, r.err
}

func (r *reader) Close() error {
	if r.body != nil {
		r.body.Close()
		r.body = nil
	}
	if r.err == nil {
		r.err = errors.New("archive reader closed")
	}
	return nil
}
