package receipts_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/dsse"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/receipts"
)

// FuzzOpenReplayState: the state file is input whoever writes CI's cache
// chooses. OpenReplayState never panics on it, refuses what the state key
// did not seal, and a state it does accept (here: any payload the key is
// made to seal, so that the decoder and its checks are what is fuzzed)
// restores and replays without panicking, whatever it says.
func FuzzOpenReplayState(f *testing.F) {
	runner := keys.FromSeed(bytes.Repeat([]byte{5}, 32))
	policy, err := approval.ParsePolicy("trust.toml", fmt.Appendf(nil, "[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = %q\n", runner.Public().String()))
	if err != nil {
		f.Fatal(err)
	}
	j := &receipts.Journal{Path: filepath.Join(f.TempDir(), "receipts.jsonl"), Key: runner, Runner: "runner", Host: "db1"}
	for i := range 4 {
		if _, err := j.Append(&receipts.Receipt{Kind: receipts.KindRepair, RunID: fmt.Sprint(i), Repair: &receipts.Repair{Dropped: int64(i)}}); err != nil {
			f.Fatal(err)
		}
	}
	journal, err := os.ReadFile(j.Path)
	if err != nil {
		f.Fatal(err)
	}
	rp := &receipts.Replayer{Policy: policy}
	_, _, s := replayAll(f, rp, bytes.Join(bytes.SplitAfter(journal, []byte("\n"))[:2], nil), nil)
	if s == nil {
		f.Fatal("no state")
	}
	good, err := receipts.SealReplayState(context.Background(), stateKey, s)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, false)
	f.Add(good, true)
	f.Add([]byte(`{"version":1}`), true)
	f.Add([]byte(`{}`), false)
	f.Fuzz(func(t *testing.T, b []byte, sealIt bool) {
		file := b
		if sealIt {
			// b as the payload the state key seals.
			env, err := dsse.Sign(context.Background(), stateKey, receipts.ReplayStateType, b)
			if err != nil {
				t.Fatal(err)
			}
			if file, err = jsonMarshal(env); err != nil {
				t.Fatal(err)
			}
		}
		s, err := receipts.OpenReplayState(file, stateKey.Public())
		var ref *receipts.StateRefusedError
		if errors.Is(err, receipts.ErrStateOutdated) && !sealIt && !bytes.Equal(file, good) {
			t.Fatal("a state the state key did not seal read as outdated")
		}
		if errors.Is(err, receipts.ErrStateOutdated) {
			return // signed, and replayed in full
		}
		if err != nil {
			if !errors.As(err, &ref) {
				t.Fatalf("not a StateRefusedError: %v", err)
			}
			return
		}
		if !sealIt && !bytes.Equal(file, good) && !bytes.Equal(bytes.TrimSuffix(file, []byte("\n")), bytes.TrimSuffix(good, []byte("\n"))) {
			// Accepted without the key sealing it here: only the seed
			// the key sealed, or bytes decoding to the same envelope.
			if _, err := receipts.OpenReplayState(file, keys.FromSeed(bytes.Repeat([]byte{6}, 32)).Public()); err == nil {
				t.Fatal("a state verified under two keys")
			}
		}
		s.Judge = rp.JudgeDigest()
		_, _, _ = rp.ReplayFrom(bytes.NewReader(journal), s, func(receipts.Result) {})
	})
}
