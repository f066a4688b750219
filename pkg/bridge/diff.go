package bridge

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/prod-write/prod-write/pkg/visible"
)

// Limits of [UnifiedDiff]. A diff is shown to people in a Slack message or
// a GitHub issue: past these it says it was cut, never silently.
const (
	// DiffMaxInput is the largest file (either side) that is diffed.
	DiffMaxInput = 256 << 10
	// DiffMaxLines is how many lines of hunks are shown.
	DiffMaxLines = 120
	// DiffMaxBytes is how many bytes of hunks are shown.
	DiffMaxBytes = 6000
	// diffMaxEdits bounds the work: Myers' algorithm costs O((N+M)·D)
	// time and O(D²) memory for D edits, so past this many the diff is
	// not computed.
	diffMaxEdits = 1000
	// diffMaxInputLines bounds the lines of either side, with
	// diffMaxEdits the time a diff may take.
	diffMaxInputLines = 10000
	diffContext       = 3
)

// edit is one line of a diff: ' ' kept, '-' removed, '+' added.
type edit struct {
	op   byte
	line string
}

// UnifiedDiff is a unified diff (3 lines of context) of old into new,
// computed with Myers' algorithm on lines. It returns the hunks, without
// headers, and whether they were cut to [DiffMaxLines] or
// [DiffMaxBytes]. A side that is larger than [DiffMaxInput], is not UTF-8
// text or holds a NUL byte, or a diff of more than diffMaxEdits changed
// lines, is an error saying so: nothing partial is shown as whole.
// Every rune that would not show as itself is escaped (package visible),
// and a line holding anything but ASCII is preceded by a line naming its
// code points ([nonASCII]).
func UnifiedDiff(old, new []byte) (hunks []string, cut bool, err error) {
	for _, side := range []struct {
		name string
		b    []byte
	}{{"current file", old}, {"new file", new}} {
		switch {
		case len(side.b) > DiffMaxInput:
			return nil, false, fmt.Errorf("the %s is larger than %d bytes", side.name, DiffMaxInput)
		case bytes.IndexByte(side.b, 0) >= 0 || !utf8.Valid(side.b):
			return nil, false, fmt.Errorf("the %s is not text", side.name)
		}
	}
	a, b := splitLines(old), splitLines(new)
	if len(a) > diffMaxInputLines || len(b) > diffMaxInputLines {
		return nil, false, fmt.Errorf("a side has more than %d lines", diffMaxInputLines)
	}
	edits, ok := myers(a, b, diffMaxEdits)
	if !ok {
		return nil, false, fmt.Errorf("more than %d lines changed", diffMaxEdits)
	}
	h, cut := hunksOf(edits)
	return h, cut, nil
}

// splitLines splits s into lines, keeping no line ends; a last line without
// one is marked as such, as diff(1) does.
func splitLines(s []byte) []string {
	if len(s) == 0 {
		return nil
	}
	text := string(s)
	noEOL := !strings.HasSuffix(text, "\n")
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if noEOL {
		lines[len(lines)-1] += "\n\\ No newline at end of file"
	}
	return lines
}

// myers returns the edit script from a to b, or false when it needs more
// than max insertions and deletions. The common prefix and suffix are
// taken off first, which makes the usual small change cheap.
func myers(a, b []string, max int) ([]edit, bool) {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	out := make([]edit, 0, len(a)+len(b))
	for _, l := range a[:pre] {
		out = append(out, edit{' ', l})
	}
	mid, ok := myersCore(a[pre:len(a)-suf], b[pre:len(b)-suf], max)
	if !ok {
		return nil, false
	}
	out = append(out, mid...)
	for _, l := range a[len(a)-suf:] {
		out = append(out, edit{' ', l})
	}
	return out, true
}

// myersCore is the greedy forward algorithm of Myers (1986), keeping the
// furthest-reaching x of every diagonal k = x−y at each step d, then
// walking the trace back from the end.
func myersCore(a, b []string, max int) ([]edit, bool) {
	n, m := len(a), len(b)
	if n+m == 0 {
		return nil, true
	}
	if n+m > max && (n == 0 || m == 0) {
		// All added or all removed: no search needed, only the bound.
		return nil, false
	}
	off := n + m + 1
	v := make([]int, 2*off+1)
	var trace [][]int
	limit := min(n+m, max)
	for d := 0; d <= limit; d++ {
		trace = append(trace, append([]int(nil), v[off-d-1:off+d+2]...))
		for k := -d; k <= d; k += 2 {
			var x int
			if k == -d || (k != d && v[off+k-1] < v[off+k+1]) {
				x = v[off+k+1] // down: an insertion
			} else {
				x = v[off+k-1] + 1 // right: a deletion
			}
			y := x - k
			for x < n && y < m && a[x] == b[y] {
				x++
				y++
			}
			v[off+k] = x
			if x >= n && y >= m {
				return backtrack(a, b, trace, d), true
			}
		}
	}
	return nil, false
}

// backtrack rebuilds the script from the trace: trace[d] holds, for k in
// −d−1…d+1, the x reached on diagonal k before step d.
func backtrack(a, b []string, trace [][]int, dEnd int) []edit {
	x, y := len(a), len(b)
	var rev []edit
	for d := dEnd; d > 0; d-- {
		vd := trace[d]
		at := func(k int) int { return vd[k+d+1] }
		k := x - y
		var pk int
		if k == -d || (k != d && at(k-1) < at(k+1)) {
			pk = k + 1
		} else {
			pk = k - 1
		}
		px := at(pk)
		py := px - pk
		for x > px && y > py {
			x--
			y--
			rev = append(rev, edit{' ', a[x]})
		}
		if x == px {
			y--
			rev = append(rev, edit{'+', b[y]})
		} else {
			x--
			rev = append(rev, edit{'-', a[x]})
		}
	}
	for x > 0 && y > 0 {
		x--
		y--
		rev = append(rev, edit{' ', a[x]})
	}
	out := make([]edit, len(rev))
	for i, e := range rev {
		out[len(rev)-1-i] = e
	}
	return out
}

// hunksOf groups edits into hunks with diffContext lines of context.
func hunksOf(edits []edit) ([]string, bool) {
	var out []string
	size := 0
	add := func(s string) bool {
		if len(out) >= DiffMaxLines || size+len(s)+1 > DiffMaxBytes {
			return false
		}
		out = append(out, s)
		size += len(s) + 1
		return true
	}
	i := 0
	oldLine, newLine := 1, 1 // 1-based line numbers at edits[i]
	for i < len(edits) {
		// Find the next change.
		j := i
		for j < len(edits) && edits[j].op == ' ' {
			j++
		}
		if j == len(edits) {
			break
		}
		start := max(i, j-diffContext)
		oldLine += start - i // context only: both sides advance
		newLine += start - i
		// Extend the hunk while changes are closer than 2×context apart.
		end := j
		for end < len(edits) {
			if edits[end].op != ' ' {
				end++
				continue
			}
			run := end
			for run < len(edits) && edits[run].op == ' ' {
				run++
			}
			if run == len(edits) || run-end > 2*diffContext {
				end = min(end+diffContext, len(edits))
				break
			}
			end = run
		}
		nOld, nNew := 0, 0
		for _, e := range edits[start:end] {
			if e.op != '+' {
				nOld++
			}
			if e.op != '-' {
				nNew++
			}
		}
		// diff(1) numbers an empty side by the line before it.
		oStart, nStart := oldLine, newLine
		if nOld == 0 {
			oStart--
		}
		if nNew == 0 {
			nStart--
		}
		if !add(fmt.Sprintf("@@ -%d,%d +%d,%d @@", oStart, nOld, nStart, nNew)) {
			return out, true
		}
		for _, e := range edits[start:end] {
			if mark := nonASCII(e.line); mark != "" && !add(mark) {
				return out, true
			}
			for k, l := range strings.Split(visible.Text(e.line), "\n") {
				prefix := string(e.op)
				if k > 0 {
					prefix = "" // the "\ No newline at end of file" marker
				}
				if !add(prefix + l) {
					return out, true
				}
			}
		}
		oldLine += nOld
		newLine += nNew
		i = end
	}
	return out, false
}

// nonASCII is the line shown before a diff line that holds bytes outside
// ASCII, naming its code points, or "": a letter that looks like an ASCII
// one (Cyrillic а for a) shows as itself, so the approver is told where
// to look (docs/adr/0062-showing-agent-text.md). It starts with "!", which
// no line of a unified diff does.
func nonASCII(line string) string {
	const most = 8
	var seen []rune
	more := false
	for _, r := range line {
		if r < utf8.RuneSelf || slices.Contains(seen, r) {
			continue
		}
		if len(seen) == most {
			more = true
			break
		}
		seen = append(seen, r)
	}
	if len(seen) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("! non-ASCII on the next line:")
	for _, r := range seen {
		fmt.Fprintf(&b, " %U", r)
	}
	if more {
		b.WriteString(" …")
	}
	return b.String()
}
