package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/receipts"
)

// replayState is replay --state: resume from the state file when it
// verifies under the state key, replay what is new, and seal the state at
// the head there when no entry failed (docs/adr/0044-journal-merkle-log.md,
// "Incremental replay"). A state file that does not verify is refused,
// never believed; one judged by another policy, history or options is
// not reused: the journal is replayed in full.
func replayState(f *Factory, o *ReplayOptions, rp *receipts.Replayer, out *replayOutput, path string, in io.Reader) (receipts.Summary, error) {
	k, err := keys.Load(o.StateKey)
	if err != nil {
		return receipts.Summary{}, err
	}
	var from *receipts.ReplayState
	b, err := os.ReadFile(o.State)
	switch {
	case errors.Is(err, os.ErrNotExist):
		// The first run: a full replay, which writes the state.
	case err != nil:
		return receipts.Summary{}, err
	default:
		if from, err = receipts.OpenReplayState(b, k.Public()); err != nil {
			return receipts.Summary{}, &localapi.DataError{Err: fmt.Errorf("--state %s: %w (remove it to replay in full)", o.State, err)}
		}
		if from.Judge != rp.JudgeDigest() {
			fmt.Fprintf(f.IO.Err, "prod-write: the replay state %s was judged by another policy, history or options: replaying in full\n", o.State)
			from = nil
		}
	}
	emit := func(r receipts.Result) { out.emit(replayResult{Result: r}) }
	sum, next, err := rp.ReplayFrom(in, from, emit)
	if err := out.replayed(path, sum, err); err != nil {
		return sum, err
	}
	if from != nil && !f.JSON {
		fmt.Fprintf(f.IO.Err, "prod-write: verified %d new entries on top of the %d the replay state %s stands on\n", sum.Entries-int(from.Size), from.Size, o.State)
	}
	if next == nil {
		// A run that failed writes no state; the one it resumed from, if
		// any, still stands.
		return sum, nil
	}
	sealed, err := receipts.SealReplayState(context.Background(), k, next)
	if err != nil {
		return sum, err
	}
	return sum, writeFileAtomic(o.State, sealed)
}

// writeFileAtomic replaces path with b: a temporary file beside it,
// renamed over it, so that a reader sees the old state or the new.
func writeFileAtomic(path string, b []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
