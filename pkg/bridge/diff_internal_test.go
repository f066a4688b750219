package bridge

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestUnifiedDiff(t *testing.T) {
	for _, tc := range []struct {
		name     string
		old, new string
		want     []string
		err      string
	}{
		{name: "same", old: "a\nb\n", new: "a\nb\n", want: nil},
		{name: "one line changed", old: "a\nb\nc\n", new: "a\nB\nc\n",
			want: []string{"@@ -1,3 +1,3 @@", " a", "-b", "+B", " c"}},
		{name: "context of three", old: "1\n2\n3\n4\n5\n6\n7\n8\n9\n", new: "1\n2\n3\n4\nfive\n6\n7\n8\n9\n",
			want: []string{"@@ -2,7 +2,7 @@", " 2", " 3", " 4", "-5", "+five", " 6", " 7", " 8"}},
		{name: "two hunks", old: "a\n1\n2\n3\n4\n5\n6\n7\nb\n", new: "A\n1\n2\n3\n4\n5\n6\n7\nB\n",
			want: []string{"@@ -1,4 +1,4 @@", "-a", "+A", " 1", " 2", " 3", "@@ -6,4 +6,4 @@", " 5", " 6", " 7", "-b", "+B"}},
		{name: "from empty", old: "", new: "x\ny\n", want: []string{"@@ -0,0 +1,2 @@", "+x", "+y"}},
		{name: "to empty", old: "x\n", new: "", want: []string{"@@ -1,1 +0,0 @@", "-x"}},
		{name: "no newline at end", old: "a\n", new: "a",
			want: []string{"@@ -1,1 +1,1 @@", "-a", "+a", `\ No newline at end of file`}},
		{name: "control runes escaped", old: "port = 1\n", new: "port = 2\u202e\x1b[2J\n",
			want: []string{"@@ -1,1 +1,1 @@", "-port = 1", "! non-ASCII on the next line: U+202E", `+port = 2\u202e\x1b[2J`}},
		{name: "invisible and look-alike runes marked", old: "auth_required = false\n", new: "auth\u3164_required = true\n\u0430uth = on\n",
			want: []string{"@@ -1,1 +1,2 @@", "-auth_required = false", "! non-ASCII on the next line: U+3164", `+auth\u3164_required = true`,
				"! non-ASCII on the next line: U+0430", "+\u0430uth = on"}},
		{name: "binary", old: "a\x00", new: "b", err: "current file is not text"},
		{name: "not utf-8", old: "a", new: "\xff", err: "new file is not text"},
		{name: "too large", old: "", new: strings.Repeat("x", DiffMaxInput+1), err: "larger than"},
		{name: "too many lines", old: "", new: strings.Repeat("\n", diffMaxInputLines+1), err: "more than"},
		{name: "too many edits", old: strings.Repeat("a\n", diffMaxEdits), new: strings.Repeat("b\n", diffMaxEdits), err: "lines changed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cut, err := UnifiedDiff([]byte(tc.old), []byte(tc.new))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || cut {
				t.Fatalf("err %v cut %v", err, cut)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestUnifiedDiffCut(t *testing.T) {
	var old, new strings.Builder
	for i := range 500 {
		old.WriteString("line\n")
		if i%2 == 0 {
			new.WriteString("changed\n")
		} else {
			new.WriteString("line\n")
		}
	}
	got, cut, err := UnifiedDiff([]byte(old.String()), []byte(new.String()))
	if err != nil || !cut {
		t.Fatalf("err %v cut %v", err, cut)
	}
	size := 0
	for _, l := range got {
		size += len(l) + 1
	}
	if len(got) > DiffMaxLines || size > DiffMaxBytes {
		t.Fatalf("%d lines, %d bytes", len(got), size)
	}
}

// lcs is the length of a longest common subsequence, by dynamic
// programming: the reference a shortest edit script is checked against.
func lcs(a, b []string) int {
	prev := make([]int, len(b)+1)
	for i := range a {
		cur := make([]int, len(b)+1)
		for j := range b {
			if a[i] == b[j] {
				cur[j+1] = prev[j] + 1
			} else {
				cur[j+1] = max(prev[j+1], cur[j])
			}
		}
		prev = cur
	}
	return prev[len(b)]
}

// checkScript checks that edits turn a into b and are a shortest script.
func checkScript(t interface{ Fatalf(string, ...any) }, a, b []string, edits []edit) {
	var gotA, gotB []string
	changes := 0
	for _, e := range edits {
		if e.op != '+' {
			gotA = append(gotA, e.line)
		}
		if e.op != '-' {
			gotB = append(gotB, e.line)
		}
		if e.op != ' ' {
			changes++
		}
	}
	if strings.Join(gotA, "\n") != strings.Join(a, "\n") || len(gotA) != len(a) {
		t.Fatalf("script does not start from a: %q vs %q", gotA, a)
	}
	if strings.Join(gotB, "\n") != strings.Join(b, "\n") || len(gotB) != len(b) {
		t.Fatalf("script does not end at b: %q vs %q", gotB, b)
	}
	if want := len(a) + len(b) - 2*lcs(a, b); changes != want {
		t.Fatalf("%d changes, the shortest script has %d", changes, want)
	}
}

// TestMyersShortest: the script turns a into b and is a shortest one,
// whatever the inputs (small alphabets make many matches).
func TestMyersShortest(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		line := rapid.SampledFrom([]string{"a", "b", "c", ""})
		a := rapid.SliceOfN(line, 0, 30).Draw(t, "a")
		b := rapid.SliceOfN(line, 0, 30).Draw(t, "b")
		edits, ok := myers(a, b, 100)
		if !ok {
			t.Fatalf("no script within 100 edits for %d+%d lines", len(a), len(b))
		}
		checkScript(t, a, b, edits)
	})
}

func FuzzUnifiedDiff(f *testing.F) {
	f.Add([]byte("a\nb\nc\n"), []byte("a\nB\nc\n"))
	f.Add([]byte(""), []byte("x"))
	f.Add([]byte("x\ny"), []byte("y\nx\n"))
	f.Add([]byte("1\n2\n3\n4\n5\n6\n7\n8\n"), []byte("0\n2\n3\n4\n5\n6\n7\n9\n"))
	f.Fuzz(func(t *testing.T, old, new []byte) {
		hunks, _, err := UnifiedDiff(old, new)
		if err != nil {
			return
		}
		size := 0
		for _, h := range hunks {
			size += len(h) + 1
			if strings.ContainsAny(h, "\n\r") {
				t.Fatalf("a hunk line holds a line end: %q", h)
			}
		}
		if len(hunks) > DiffMaxLines || size > DiffMaxBytes {
			t.Fatalf("%d lines, %d bytes past the caps", len(hunks), size)
		}
		if (len(hunks) == 0) != (string(old) == string(new)) {
			t.Fatalf("%d hunk lines for equal=%v", len(hunks), string(old) == string(new))
		}
		a, b := splitLines(old), splitLines(new)
		if len(a)+len(b) <= 200 {
			if edits, ok := myers(a, b, 400); ok {
				checkScript(t, a, b, edits)
			}
		}
	})
}
