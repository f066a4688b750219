package localapi

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/servicecall"
	"github.com/prod-write/prod-write/pkg/tlogwitness"
	"github.com/prod-write/prod-write/receipts"
)

// WitnessLoop is serve's cadence: it sends the head's checkpoint to the
// witnesses once new receipts have waited service.witness_interval, or
// as soon as service.witness_every are new. It reads only the journal's
// new lines at each turn (the tree is kept), and rebuilds the tree from
// the start when the journal is shorter than it was. Witnesses that
// fail are logged and tried again at the next turn; no run waits on any
// of it.
func WitnessLoop(ctx context.Context, s *servicecall.State) {
	c := s.Cfg
	if len(c.Witnesses) == 0 {
		return
	}
	interval := c.Service.WitnessIntervalDuration()
	poll := interval
	if c.Service.WitnessEvery > 0 {
		poll = min(poll, time.Second)
	}
	j := &journalTail{path: c.JournalPath()}
	var sent uint64
	var waiting time.Time // when the oldest receipt not yet sent was seen
	retry := false
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := j.catchUp(); err != nil {
			s.Log.Printf("witnesses: reading the journal: %v", err)
			continue
		}
		size := j.tree.Size()
		if size < sent {
			sent = 0 // the journal was cut: the witnesses will say so
		}
		if size == sent && !retry {
			waiting = time.Time{}
			continue
		}
		if waiting.IsZero() {
			waiting = time.Now()
		}
		due := time.Since(waiting) >= interval || c.Service.WitnessEvery > 0 && size-sent >= uint64(c.Service.WitnessEvery)
		if !due {
			continue
		}
		lp := s.Current()
		if lp.RunnerErr != nil {
			s.Log.Printf("witnesses: no checkpoint signed: %v", lp.RunnerErr)
			continue
		}
		note, err := receipts.SignNoteCheckpoint(lp.RunnerKey, receipts.NoteOrigin(runner.JournalHost(c.Host)), j.tree, size)
		if err != nil {
			s.Log.Printf("witnesses: signing the checkpoint: %v", err)
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, 2*tlogwitness.DefaultTimeout)
		answers, err := SendToWitnesses(sctx, c, lp.Policy, j.tree, note)
		cancel()
		if err != nil {
			s.Log.Printf("witnesses: %v", err)
		}
		retry = false
		for _, a := range answers {
			if a.Error != "" {
				retry = true
				s.Log.Printf("witnesses: checkpoint of %d entries: %s (tried again in %s)", size, a.Error, interval)
			}
		}
		sent, waiting = size, time.Time{}
		if retry {
			waiting = time.Now()
		}
	}
}

// journalTail is the tree of a journal's complete lines, kept up to date
// by reading only what was appended since.
type journalTail struct {
	path string
	tree *receipts.Tree
	off  int64 // the offset after the last complete line read
	// last is where the last complete line read starts, and lastHash
	// its line hash: a journal whose line there changed is read again.
	last     int64
	lastHash string
}

// catchUp reads the lines appended since the last call; a journal
// shorter than what was read is read again from the start.
func (j *journalTail) catchUp() error {
	f, err := os.Open(j.path)
	if os.IsNotExist(err) {
		j.tree, j.off = &receipts.Tree{}, 0
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if j.tree == nil || fi.Size() < j.off || !j.lastLineSame(f) {
		j.tree, j.off, j.last, j.lastHash = &receipts.Tree{}, 0, 0, ""
	}
	if fi.Size() == j.off {
		return nil
	}
	base := j.off
	return receipts.Scan(io.NewSectionReader(f, base, fi.Size()-base), func(l receipts.Line) error {
		if l.Torn {
			return nil
		}
		h, n := receipts.LineHash(l.Bytes), int64(len(l.Bytes))
		if l.Long > 0 {
			h, n = l.Hash, l.Long
		}
		if err := j.tree.AppendLineHash(h); err != nil {
			return err
		}
		j.last, j.lastHash, j.off = base+l.Off, h, base+l.Off+n+1
		return nil
	})
}

// lastLineSame reports whether the journal still holds the last complete
// line read where it was read (a rewrite that keeps the length past it is
// then seen; one that keeps that line too is not, and replay against the
// witnessed note is what finds it).
func (j *journalTail) lastLineSame(f *os.File) bool {
	if j.lastHash == "" {
		return true
	}
	n := j.off - j.last // with its newline
	if n > receipts.MaxLine+1 {
		return true // a long line: not read again here
	}
	b := make([]byte, n)
	if _, err := f.ReadAt(b, j.last); err != nil || b[n-1] != '\n' {
		return false
	}
	return receipts.LineHash(b[:n-1]) == j.lastHash
}
