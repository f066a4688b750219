package tlogwitness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// Witness is one witness the service sends checkpoints to: its name and
// cosignature/v1 verifier from the trust policy ([[witness]] there), its
// URL prefix from prod-write.toml.
type Witness struct {
	Name     string
	URL      string
	Verifier note.Verifier
}

// Prover gives consistency proofs of the log's tree (*receipts.Tree).
type Prover interface {
	ConsistencyProof(size1, size2 uint64) ([][]byte, error)
}

// State is what the service knows of one witness.
type State struct {
	// Size is the size of the log the witness last said it holds: of
	// the checkpoint it cosigned, or its size in a 409.
	Size uint64 `json:"size"`
	// Cosigned is the checkpoint note it last cosigned, as sent, and
	// Cosignature its cosignature line on it, verified.
	Cosigned    string `json:"cosigned,omitempty"`
	Cosignature string `json:"cosignature,omitempty"`
	// Tried is when it was last sent a checkpoint, and Error why that
	// failed ("" when it cosigned).
	Tried time.Time `json:"tried,omitzero"`
	Error string    `json:"error,omitempty"`
	// Ahead is set when that failure was [ErrAhead]: the witness holds a
	// larger tree of this log than the journal.
	Ahead bool `json:"ahead,omitempty"`
}

// IsAhead says whether st's last failure was [ErrAhead]: Ahead, or, in a
// state written before Ahead was, its error's text.
func (st State) IsAhead() bool {
	return st.Ahead || strings.Contains(st.Error, ErrAhead.Error())
}

// ErrAhead says a witness holds the log at a larger size than the
// checkpoint sent: the journal was cut or rewritten under the tree the
// witness saw, or another log was sent under this origin. Nothing more is
// sent to it; its answer is kept in State.Size for the operator.
var ErrAhead = errors.New("the witness holds a larger tree of this log than the journal: receipts were cut off or rewritten since it cosigned")

// maxConflicts is how many 409s one Submit follows.
const maxConflicts = 3

// Submit sends checkpoint, the note of the tree's first size leaves, to
// w by add-checkpoint, from the size st says w holds; on a 409 it sends
// it again from the witness's size (at most maxConflicts times). It
// returns st brought up to date, and keeps a cosignature only when it
// verifies with w's key over checkpoint.
func Submit(ctx context.Context, c *Client, w Witness, st State, tree Prover, size uint64, checkpoint []byte) (State, error) {
	st.Tried = time.Now().UTC()
	fail := func(err error) (State, error) {
		err = fmt.Errorf("witness %s: %w", w.Name, err)
		st.Error, st.Ahead = err.Error(), errors.Is(err, ErrAhead)
		return st, err
	}
	old := st.Size
	for range maxConflicts {
		if old > size {
			return fail(fmt.Errorf("%w (it holds %d entries, the checkpoint %d)", ErrAhead, old, size))
		}
		var proof [][]byte
		if old > 0 && old < size {
			var err error
			if proof, err = tree.ConsistencyProof(old, size); err != nil {
				return fail(err)
			}
		}
		answer, err := c.AddCheckpoint(ctx, w.URL, old, proof, checkpoint)
		var ce *ConflictError
		if errors.As(err, &ce) {
			if ce.Size == old {
				return fail(fmt.Errorf("it answered 409 with the size it was sent (%d)", old))
			}
			old, st.Size = ce.Size, ce.Size
			continue
		}
		if err != nil {
			return fail(err)
		}
		line, err := VerifyCosignature(w, checkpoint, answer)
		if err != nil {
			return fail(err)
		}
		st.Size, st.Cosigned, st.Cosignature, st.Error, st.Ahead = size, string(checkpoint), line, "", false
		return st, nil
	}
	return fail(fmt.Errorf("it answered 409 %d times", maxConflicts))
}

// VerifyCosignature checks a witness's add-checkpoint answer: signature
// lines, one of them by w's key verifying over checkpoint
// (golang.org/x/mod/sumdb/note with w's cosignature/v1 verifier). It
// returns that line alone; the answer's other lines are dropped.
func VerifyCosignature(w Witness, checkpoint, answer []byte) (string, error) {
	if len(answer) == 0 || !bytes.HasSuffix(answer, []byte("\n")) {
		return "", errors.New("its answer is not signature lines")
	}
	for _, l := range strings.SplitAfter(strings.TrimSuffix(string(answer), "\n"), "\n") {
		if !strings.HasPrefix(l, "— ") {
			return "", fmt.Errorf("its answer has a line that is no signature: %q", short([]byte(l)))
		}
	}
	n, err := note.Open(append(append([]byte(nil), checkpoint...), answer...), note.VerifierList(w.Verifier))
	if err != nil {
		return "", fmt.Errorf("its answer holds no valid cosignature by its key %s over this checkpoint: %w", w.Verifier.Name(), err)
	}
	for _, s := range n.Sigs {
		if s.Name == w.Verifier.Name() && s.Hash == w.Verifier.KeyHash() {
			return "— " + s.Name + " " + s.Base64 + "\n", nil
		}
	}
	return "", errors.New("its answer holds no cosignature by its key")
}

// Cosigned is note with the cosignatures states keep on the same
// checkpoint body appended, by witness name; note itself when none.
func Cosigned(checkpoint []byte, states map[string]State) []byte {
	body, _, _ := bytes.Cut(checkpoint, []byte("\n\n"))
	out := append([]byte(nil), checkpoint...)
	names := make([]string, 0, len(states))
	for name := range states {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		st := states[name]
		b, _, _ := strings.Cut(st.Cosigned, "\n\n")
		if st.Cosignature != "" && b == string(body) && !bytes.Contains(out, []byte(st.Cosignature)) {
			out = append(out, st.Cosignature...)
		}
	}
	return out
}

// Store keeps the witnesses' State in one JSON file in the state
// directory, beside the journal.
type Store struct{ Path string }

// StoreIn is the store of the state directory dir.
func StoreIn(dir string) Store { return Store{Path: filepath.Join(dir, "witnesses.json")} }

// Load reads the states; a store not yet written holds none.
func (s Store) Load() (map[string]State, error) {
	b, err := os.ReadFile(s.Path)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]State{}, nil
	}
	if err != nil {
		return nil, err
	}
	m := map[string]State{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", s.Path, err)
	}
	return m, nil
}

// Save writes the states atomically: a new file, synced, renamed over
// the old. Two writers lose at most an update, which the next submission
// recovers (the witness answers 409 with its size).
func (s Store) Save(m map[string]State) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(s.Path), ".witnesses-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), s.Path)
}
