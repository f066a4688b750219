package receipts

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/pkg/keys"
)

// naiveTail is readTail's meaning, computed from the whole file at once.
func naiveTail(data []byte) tailInfo {
	var t tailInfo
	body := data
	if nl := bytes.LastIndexByte(data, '\n'); nl != len(data)-1 {
		t.torn = append([]byte(nil), data[nl+1:]...)
		body = data[:nl+1]
	}
	t.end = int64(len(body))
	if len(body) == 0 {
		return t
	}
	lines := bytes.Split(body[:len(body)-1], []byte{'\n'})
	t.hash = LineHash(lines[len(lines)-1])
	for i := len(lines) - 1; i >= 0; i-- {
		if seq, ok := seqOf(lines[i]); ok && len(lines[i]) <= MaxLine {
			t.seq = seq + uint64(len(lines)-1-i)
			return t
		}
	}
	t.seq = uint64(len(lines))
	return t
}

// TestReadTailMatchesWholeFile: reading backwards in chunks finds what
// reading the whole journal finds, for receipts, lines that are not
// receipts and torn tails of any length, across the chunk boundaries.
func TestReadTailMatchesWholeFile(t *testing.T) {
	key := keys.FromSeed(bytes.Repeat([]byte{3}, 32))
	sizes := []int{0, 100, 8<<10 - 600, 8 << 10, 8<<10 + 300, 33 << 10, 140 << 10}
	rapid.Check(t, func(rt *rapid.T) {
		path := filepath.Join(t.TempDir(), "receipts.jsonl")
		j := &Journal{Path: path, Key: key, Runner: "runner"}
		for i, n := 0, rapid.IntRange(0, 6).Draw(rt, "lines"); i < n; i++ {
			pad := rapid.SampledFrom(sizes).Draw(rt, "pad")
			if rapid.Bool().Draw(rt, "receipt") {
				if _, err := j.Append(&Receipt{Kind: KindRepair, Repair: &Repair{SavedAs: strings.Repeat("p", pad)}}); err != nil {
					rt.Fatal(err)
				}
				continue
			}
			appendRaw(rt, path, append(bytes.Repeat([]byte("g"), pad+1), '\n'))
		}
		if rapid.Bool().Draw(rt, "torn") {
			appendRaw(rt, path, bytes.Repeat([]byte("{"), rapid.SampledFrom(sizes).Draw(rt, "torn size")+1))
		}
		data, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			return
		}
		if err != nil {
			rt.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			rt.Fatal(err)
		}
		defer f.Close()
		got, err := readTail(f)
		if err != nil {
			rt.Fatal(err)
		}
		want := naiveTail(data)
		if got.seq != want.seq || got.hash != want.hash || got.end != want.end || !bytes.Equal(got.torn, want.torn) {
			rt.Fatalf("readTail: seq %d hash %.12s end %d torn %d bytes; the whole file says seq %d hash %.12s end %d torn %d bytes",
				got.seq, got.hash, got.end, len(got.torn), want.seq, want.hash, want.end, len(want.torn))
		}
	})
}

func appendRaw(t *rapid.T, path string, b []byte) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
}
