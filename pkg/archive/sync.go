package archive

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

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
	Present int // lines the archive held already
}

// syncWorkers is how many puts Sync keeps in flight.
const syncWorkers = 8

// Sync ships every complete line of journal that the archive is missing:
// it lists the archive once, then puts only what is missing, so a second
// Sync ships nothing. A last line without its newline (a write in progress,
// or a torn tail the next append cuts off) is not shipped.
//
// A line whose sequence number the archive holds with another hash is not
// shipped: it is a [*ConflictError], returned after the rest is shipped.
// It means another journal ships to the same prefix, or a line changed.
func (a *Archive) Sync(ctx context.Context, journal io.Reader) (SyncResult, error) {
	var res SyncResult
	held := map[uint64]string{}
	err := a.List(ctx, func(o Object) error {
		if _, dup := held[o.Seq]; !dup {
			held[o.Seq] = o.Hash
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
		errs    []error
		shipped int
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range syncWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				err := a.Put(ctx, j.seq, j.line)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					shipped++
				}
				mu.Unlock()
			}
		}()
	}
	br := bufio.NewReaderSize(journal, 256<<10)
	var readErr error
	for no := uint64(1); ; no++ {
		line, err := br.ReadBytes('\n')
		if err == io.EOF {
			break // a last line without newline is not complete
		}
		if err != nil {
			readErr = fmt.Errorf("reading journal: %w", err)
			break
		}
		line = line[:len(line)-1]
		res.Lines++
		seq := seqOf(line, no)
		hash := receipts.LineHash(line)
		switch h, ok := held[seq]; {
		case ok && h == hash:
			res.Present++
			continue
		case ok:
			mu.Lock()
			errs = append(errs, &ConflictError{Key: a.key(seq, h), Line: seq,
				Msg: fmt.Sprintf("the archive holds another line %d (hash %.12s…, the journal's is %.12s…): does another journal ship to this prefix?", seq, h, hash)})
			mu.Unlock()
			continue
		}
		mu.Lock()
		failed := len(errs) >= 10
		mu.Unlock()
		if failed {
			break // enough to say what is wrong
		}
		jobs <- job{seq, line}
	}
	close(jobs)
	wg.Wait()
	res.Shipped = shipped
	if readErr != nil {
		errs = append(errs, readErr)
	}
	return res, errors.Join(errs...)
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
