package receipts_test

import (
	"bytes"
	"runtime"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/receipts"
)

// scanBackAgrees checks that ScanBack gives the complete lines of data
// that Scan gives, in reverse, each with the same offset, bytes, and for
// a line longer than MaxLine the same length and hash without its bytes.
func scanBackAgrees(t interface {
	Fatal(...any)
	Fatalf(string, ...any)
}, data []byte) {
	var want []receipts.Line
	if err := receipts.Scan(bytes.NewReader(data), func(l receipts.Line) error {
		if !l.Torn {
			if l.Long == 0 {
				l.Bytes = append([]byte{}, l.Bytes...)
			}
			l.No = 0
			want = append(want, l)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Reverse(want)
	var got []receipts.Line
	if err := receipts.ScanBack(bytes.NewReader(data), int64(len(data)), func(l receipts.Line) bool {
		if l.Long == 0 {
			l.Bytes = append([]byte{}, l.Bytes...)
		}
		got = append(got, l)
		return false
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d lines back, %d forward", len(got), len(want))
	}
	for i, g := range got {
		w := want[i]
		if g.Off != w.Off || !bytes.Equal(g.Bytes, w.Bytes) || (g.Long > 0 && g.Bytes != nil) || g.Long != w.Long || g.Hash != w.Hash || g.No != 0 || g.Torn {
			t.Fatalf("line %d from the end: offset %d, %d bytes, long %d, hash %.12s; forward: offset %d, %d bytes, long %d, hash %.12s",
				i, g.Off, len(g.Bytes), g.Long, g.Hash, w.Off, len(w.Bytes), w.Long, w.Hash)
		}
	}
}

// TestScanBackIsScanReversed: reading a journal from its end gives the
// complete lines Scan gives, in reverse, whatever their lengths and
// however the chunks fall; a torn final line is left out.
func TestScanBackIsScanReversed(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		lines := rapid.SliceOf(rapid.SliceOfN(rapid.ByteRange('a', 'z'), 0, 200_000)).Draw(t, "lines")
		torn := rapid.SliceOfN(rapid.ByteRange('a', 'z'), 0, 100).Draw(t, "torn")
		var data []byte
		for _, l := range lines {
			data = append(append(data, l...), '\n')
		}
		data = append(data, torn...)
		scanBackAgrees(t, data)
	})
}

// TestScanBackLongLines: a line longer than MaxLine comes from ScanBack
// as from Scan, without its bytes but with its length and hash, wherever
// it is and however long: just over MaxLine, within a chunk of it (which
// ScanBack once passed with its bytes) and far over it (which it once
// passed as nil, read by receipts list --last as an empty line). A line
// of exactly MaxLine bytes is an ordinary line.
func TestScanBackLongLines(t *testing.T) {
	const m = receipts.MaxLine
	line := func(n int) []byte { return bytes.Repeat([]byte{'x'}, n) }
	for _, tc := range []struct {
		name  string
		lines [][]byte
		torn  []byte
	}{
		{"exactly MaxLine", [][]byte{line(3), line(m), line(5)}, nil},
		{"MaxLine+1 last", [][]byte{line(3), line(m + 1)}, nil},
		{"MaxLine+1 first", [][]byte{line(m + 1), line(7)}, nil},
		{"within a chunk past MaxLine", [][]byte{line(10), line(m + 600_000), line(10)}, line(4)},
		{"twice MaxLine", [][]byte{line(10), line(2*m + 3), line(0), line(10)}, nil},
		{"only a long line", [][]byte{line(2*m + 1)}, nil},
		{"a long torn tail", [][]byte{line(1), line(2)}, line(m + 10)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var data []byte
			for _, l := range tc.lines {
				data = append(append(data, l...), '\n')
			}
			scanBackAgrees(t, append(data, tc.torn...))
		})
	}
}

// TestScanBackLongLineMemory: a line longer than MaxLine is not held while
// ScanBack walks back over it to find its start: what it allocates grows
// by one chunk a chunk read, not by the line read so far (which, for a
// 64 MiB line, would be over 500 MB).
func TestScanBackLongLineMemory(t *testing.T) {
	data := append(append([]byte("a\n"), bytes.Repeat([]byte{'x'}, 8*receipts.MaxLine)...), '\n')
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	var long int64
	if err := receipts.ScanBack(bytes.NewReader(data), int64(len(data)), func(l receipts.Line) bool {
		long = max(long, l.Long)
		return false
	}); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if long != 8*receipts.MaxLine {
		t.Fatalf("the long line came as %d bytes long", long)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 16*receipts.MaxLine {
		t.Errorf("ScanBack allocated %d MiB for a %d MiB line", got>>20, 8*receipts.MaxLine>>20)
	}
}
