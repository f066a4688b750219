package receipts_test

import (
	"bytes"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/receipts"
)

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
		var want [][]byte
		receipts.Scan(bytes.NewReader(data), func(l receipts.Line) error {
			if !l.Torn {
				want = append(want, append([]byte{}, l.Bytes...))
			}
			return nil
		})
		slices.Reverse(want)
		var got [][]byte
		if err := receipts.ScanBack(bytes.NewReader(data), int64(len(data)), func(l []byte) bool {
			got = append(got, append([]byte{}, l...))
			return false
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d lines back, %d forward", len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("line %d from the end differs: %d bytes, want %d", i, len(got[i]), len(want[i]))
			}
		}
	})
}
