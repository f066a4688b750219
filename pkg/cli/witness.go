package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/servicecall"
	"github.com/prod-write/prod-write/pkg/tlogwitness"
	"github.com/prod-write/prod-write/receipts"
)

// WitnessStore is where the witnesses' cosignatures are kept: the state
// directory, beside the journal.
func WitnessStore(c *config.Config) tlogwitness.Store {
	return tlogwitness.StoreIn(filepath.Dir(filepath.Dir(c.JournalPath())))
}

// witnessTargets are c's [[witness]]es with their keys from policy; a
// witness whose name no key of the policy has is an answer saying so,
// and is not sent to.
func witnessTargets(c *config.Config, policy *approval.Policy) ([]tlogwitness.Witness, []api.WitnessAnswer) {
	var ts []tlogwitness.Witness
	var missing []api.WitnessAnswer
	for _, w := range c.Witnesses {
		i := slices.IndexFunc(policy.Witnesses, func(pw *approval.Witness) bool { return pw.Name() == w.Name })
		if i < 0 {
			missing = append(missing, api.WitnessAnswer{Name: w.Name, Error: fmt.Sprintf("witness %s: no [[witness]] key of that name in the trust policy: not sent to", w.Name)})
			continue
		}
		ts = append(ts, tlogwitness.Witness{Name: w.Name, URL: w.URL, Verifier: policy.Witnesses[i].Verifier()})
	}
	return ts, missing
}

// witnessMu serialises the writers of the witnesses' store within one
// process (the service's cadence and its receipts-checkpoint calls).
var witnessMu sync.Mutex

// SendToWitnesses sends note, the checkpoint of the tree's whole size, to
// every witness of c (their requests at once, each bounded by the
// client's timeout), keeps what each answers in the store, and returns an
// answer per witness. A witness that fails is an answer with its error,
// never an error: the caller logs it, and it is tried again next time.
func SendToWitnesses(ctx context.Context, c *config.Config, policy *approval.Policy, tree *receipts.Tree, note []byte) ([]api.WitnessAnswer, error) {
	ts, answers := witnessTargets(c, policy)
	if len(ts) == 0 {
		return answers, nil
	}
	witnessMu.Lock()
	defer witnessMu.Unlock()
	store := WitnessStore(c)
	states, err := store.Load()
	if err != nil {
		return nil, fmt.Errorf("the witnesses' state: %w", err)
	}
	client := tlogwitness.NewClient(tlogwitness.DefaultTimeout)
	got := make([]tlogwitness.State, len(ts))
	errs := make([]error, len(ts))
	var wg sync.WaitGroup
	for i, w := range ts {
		wg.Go(func() {
			got[i], errs[i] = tlogwitness.Submit(ctx, client, w, states[w.Name], tree, tree.Size(), note)
		})
	}
	wg.Wait()
	for i, w := range ts {
		states[w.Name] = got[i]
		a := api.WitnessAnswer{Name: w.Name, Size: got[i].Size}
		if errs[i] != nil {
			a.Error = errs[i].Error()
		} else {
			a.Cosigned = true
		}
		answers = append(answers, a)
	}
	if err := store.Save(states); err != nil {
		return answers, fmt.Errorf("keeping the witnesses' cosignatures: %w", err)
	}
	return answers, nil
}

// cosignedNote is note with the cosignatures the store keeps on its
// checkpoint appended.
func cosignedNote(c *config.Config, note []byte) ([]byte, error) {
	states, err := WitnessStore(c).Load()
	if err != nil {
		return nil, fmt.Errorf("the witnesses' state: %w", err)
	}
	return tlogwitness.Cosigned(note, states), nil
}

// witnessLoop is serve's cadence: it sends the head's checkpoint to the
// witnesses once new receipts have waited service.witness_interval, or
// as soon as service.witness_every are new. It reads only the journal's
// new lines at each turn (the tree is kept), and rebuilds the tree from
// the start when the journal is shorter than it was. Witnesses that
// fail are logged and tried again at the next turn; no run waits on any
// of it.
func witnessLoop(ctx context.Context, s *servicecall.State) {
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
