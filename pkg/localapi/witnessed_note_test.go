package localapi

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/tlogwitness"
)

// export --witnessed proves against the checkpoint the most witnesses
// last cosigned, the largest tree on a tie, with every cosignature kept
// of that checkpoint; and against none when no witness cosigned.
func TestWitnessedNote(t *testing.T) {
	note := func(size int) string {
		return fmt.Sprintf("prod-write/receipts/h\n%d\nROOT%d=\n\n— runner SIG%d\n", size, size, size)
	}
	st := func(size int, name string) tlogwitness.State {
		return tlogwitness.State{Size: uint64(size), Cosigned: note(size), Cosignature: "— " + name + " COSIG" + fmt.Sprint(size) + "\n"}
	}
	for _, tc := range []struct {
		name   string
		states map[string]tlogwitness.State
		want   string // the note's size, and the witnesses whose lines it carries
	}{
		{"none", map[string]tlogwitness.State{"a": {Size: 4, Error: "down"}}, ""},
		{"one", map[string]tlogwitness.State{"a": st(4, "a")}, "4 a"},
		{"the most cosigned, not the largest", map[string]tlogwitness.State{"a": st(4, "a"), "b": st(4, "b"), "c": st(9, "c")}, "4 a b"},
		{"the largest of a tie", map[string]tlogwitness.State{"a": st(4, "a"), "b": st(9, "b"), "c": st(9, "c"), "d": st(4, "d")}, "9 b c"},
		{"a witness that failed since keeps its cosignature", map[string]tlogwitness.State{"a": st(9, "a"), "b": {Size: 9, Cosigned: note(9), Cosignature: "— b COSIG9\n", Error: "timeout"}}, "9 a b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := WitnessedNote(tc.states)
			if tc.want == "" {
				if got != nil {
					t.Fatalf("%q, want none", got)
				}
				return
			}
			f := strings.Fields(tc.want)
			var size int
			fmt.Sscan(f[0], &size)
			want := note(size)
			for _, w := range f[1:] {
				want += "— " + w + " COSIG" + f[0] + "\n"
			}
			if string(got) != want {
				t.Fatalf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}
