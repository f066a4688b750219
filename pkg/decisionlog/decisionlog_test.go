package decisionlog_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/pkg/decisionlog"
)

// refusalLine is a refused decision as run writes one, its reason padded
// to n bytes.
func refusalLine(i, n int) []byte {
	return decisionlog.Entry{
		Time: "2026-01-01T00:00:00Z", DecisionID: decisionlog.NewID(), Decision: decisionlog.Refused,
		Code: "vetoed", Reason: fmt.Sprintf("attempt %d %s", i, strings.Repeat("x", n)), Surface: "service",
		Fingerprint: "sha256:" + strings.Repeat("ab", 32), Invoker: decisionlog.Invoker{UID: 1000, Principal: "agent"},
	}.Line()
}

// logFiles returns the sizes of PATH and every PATH.N in dir.
func logFiles(t *testing.T, path string) map[string]int64 {
	t.Helper()
	entries, err := os.ReadDir(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, e := range entries {
		if e.Name() == filepath.Base(path) || strings.HasPrefix(e.Name(), filepath.Base(path)+".") {
			fi, err := e.Info()
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()] = fi.Size()
		}
	}
	return out
}

// checkLines fails unless every line of the file is a whole decision.
func checkLines(t testing.TB, file string) int {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("%s does not end in a newline", file)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e decisionlog.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.FormatVersion != decisionlog.FormatVersion || e.DecisionID == "" {
			t.Fatalf("%s: torn or foreign line %q: %v", file, sc.Text(), err)
		}
		n++
	}
	return n
}

// TestFloodStaysCapped: a caller asking again and again cannot make the
// log hold more than MaxSize×(Keep+1): the files rotate, the oldest go.
func TestFloodStaysCapped(t *testing.T) {
	for _, keep := range []int{0, 1, 3} {
		t.Run(fmt.Sprint("keep=", keep), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "decisions.jsonl")
			l := &decisionlog.File{Path: path, MaxSize: decisionlog.MinSize, Keep: keep}
			var last []byte
			for i := range 2000 {
				last = refusalLine(i, i%300)
				if err := l.Write(last); err != nil {
					t.Fatal(err)
				}
			}
			files := logFiles(t, path)
			if len(files) != keep+1 {
				t.Errorf("files %v, want %d", files, keep+1)
			}
			var total int64
			for name, size := range files {
				if size > l.MaxSize {
					t.Errorf("%s is %d bytes, over the cap %d", name, size, l.MaxSize)
				}
				total += size
				checkLines(t, filepath.Join(filepath.Dir(path), name))
			}
			if max := l.MaxSize * int64(keep+1); total > max {
				t.Errorf("%d bytes in all, over %d", total, max)
			}
			data, _ := os.ReadFile(path)
			if !bytes.HasSuffix(data, last) {
				t.Errorf("the newest line is not at the end of %s", path)
			}
		})
	}
}

// TestCapProperty: for any cap, number kept and sequence of line sizes,
// no file is over the cap, there are at most Keep+1 of them, and the
// newest line ends the current one.
func TestCapProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		path := filepath.Join(t.TempDir(), "decisions.jsonl")
		l := &decisionlog.File{
			Path:    path,
			MaxSize: rapid.Int64Range(decisionlog.MinSize, 3*decisionlog.MinSize).Draw(rt, "max"),
			Keep:    rapid.IntRange(0, 3).Draw(rt, "keep"),
		}
		var last []byte
		for i, n := range rapid.SliceOfN(rapid.IntRange(0, 3000), 1, 120).Draw(rt, "sizes") {
			last = refusalLine(i, n)
			if err := l.Write(last); err != nil {
				rt.Fatal(err)
			}
		}
		files := logFiles(t, path)
		if len(files) > l.Keep+1 {
			rt.Fatalf("%d files, keep %d", len(files), l.Keep)
		}
		for name, size := range files {
			if size > l.MaxSize {
				rt.Fatalf("%s: %d bytes over %d", name, size, l.MaxSize)
			}
		}
		data, _ := os.ReadFile(path)
		if !bytes.HasSuffix(data, last) {
			rt.Fatalf("newest line not last")
		}
	})
}

// TestConcurrentWritersNeverTear: writers with their own descriptors (as
// separate processes have: flock locks an open file description) append
// and rotate at once; every line stays whole, and with room for all, none
// is lost.
func TestConcurrentWritersNeverTear(t *testing.T) {
	for _, tc := range []struct {
		name    string
		maxSize int64
		keep    int
	}{
		{"no rotation", 64 << 20, 1},
		{"rotating", decisionlog.MinSize, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "decisions.jsonl")
			const writers, each = 8, 200
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					l := &decisionlog.File{Path: path, MaxSize: tc.maxSize, Keep: tc.keep}
					for i := range each {
						if err := l.Write(refusalLine(w*each+i, (w*31+i)%500)); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			n := 0
			for name, size := range logFiles(t, path) {
				if size > tc.maxSize {
					t.Errorf("%s is %d bytes, over the cap", name, size)
				}
				n += checkLines(t, filepath.Join(filepath.Dir(path), name))
			}
			if tc.name == "no rotation" && n != writers*each {
				t.Errorf("%d lines, want %d", n, writers*each)
			}
		})
	}
}

// TestLineBounded: whatever a caller puts in the fields it can lengthen,
// a line is one line of valid JSON of at most MaxLine bytes, and says when
// it was shortened.
func TestLineBounded(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		e := decisionlog.Entry{
			DecisionID:  decisionlog.NewID(),
			Decision:    decisionlog.Refused,
			Code:        rapid.String().Draw(t, "code"),
			Reason:      rapid.StringN(0, 20000, -1).Draw(t, "reason"),
			Missing:     rapid.SliceOfN(rapid.StringN(0, 2000, -1), 0, 40).Draw(t, "missing"),
			Fingerprint: rapid.StringN(0, 3000, -1).Draw(t, "fingerprint"),
			Operation:   rapid.StringN(0, 500, -1).Draw(t, "operation"),
			Signers:     rapid.SliceOfN(rapid.StringN(0, 100, -1), 0, 40).Draw(t, "signers"),
		}
		checkLine(t, e)
	})
}

func checkLine(t interface{ Fatalf(string, ...any) }, e decisionlog.Entry) {
	line := e.Line()
	if len(line) > decisionlog.MaxLine {
		t.Fatalf("line of %d bytes, over %d", len(line), decisionlog.MaxLine)
	}
	if bytes.IndexByte(line, '\n') != len(line)-1 {
		t.Fatalf("not exactly one line: %q", line)
	}
	var got decisionlog.Entry
	if err := json.Unmarshal(line, &got); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if got.FormatVersion != decisionlog.FormatVersion || got.DecisionID != e.DecisionID {
		t.Fatalf("format_version %d, decision_id %q", got.FormatVersion, got.DecisionID)
	}
	if !got.Truncated && (got.Reason != viaJSON(e.Reason) || len(got.Missing) != len(e.Missing)) {
		t.Fatalf("reason or missing changed without truncated")
	}
}

// viaJSON is s as any JSON encoding carries it: invalid UTF-8 becomes
// U+FFFD, which is not a change the log makes.
func viaJSON(s string) string {
	b, _ := json.Marshal(s)
	var out string
	json.Unmarshal(b, &out)
	return out
}

// FuzzLine: the same bound for any bytes in the reason and what is missing.
func FuzzLine(f *testing.F) {
	f.Add("no valid approval", "a gera go")
	f.Add(strings.Repeat("\x00\u2028\"", 3000), strings.Repeat("é", 900))
	f.Fuzz(func(t *testing.T, reason, missing string) {
		checkLine(t, decisionlog.Entry{DecisionID: "d", Decision: decisionlog.Refused, Reason: reason, Missing: []string{missing, missing, reason}, Fingerprint: missing})
	})
}

// TestNoFollow: a symlink planted at the log's path is not followed.
func TestNoFollow(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "decisions.jsonl")
	if err := os.Symlink(target, path); err != nil {
		t.Fatal(err)
	}
	l := &decisionlog.File{Path: path, MaxSize: decisionlog.MinSize, Keep: 1}
	if err := l.Write(refusalLine(0, 0)); err == nil {
		t.Fatal("wrote through a symlink")
	}
	if err := l.Check(); err == nil {
		t.Fatal("Check accepted a symlink")
	}
	if data, _ := os.ReadFile(target); len(data) != 0 {
		t.Fatalf("the symlink's target was written: %q", data)
	}
}

// TestTooLarge: a line longer than the cap is refused, not written past it.
func TestTooLarge(t *testing.T) {
	l := &decisionlog.File{Path: filepath.Join(t.TempDir(), "d.jsonl"), MaxSize: 100, Keep: 1}
	if err := l.Write(refusalLine(0, 200)); !errors.Is(err, decisionlog.ErrTooLarge) {
		t.Fatalf("error %v, want ErrTooLarge", err)
	}
}

// TestIDs: ids are version-4 UUIDs, distinct.
func TestIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		id := decisionlog.NewID()
		if len(id) != 36 || id[14] != '4' || !strings.ContainsRune("89ab", rune(id[19])) || seen[id] {
			t.Fatalf("id %q (seen %v)", id, seen[id])
		}
		seen[id] = true
	}
}

// TestStream: lines written to a stream are whole.
func TestStream(t *testing.T) {
	var buf bytes.Buffer
	s := &decisionlog.Stream{W: &buf}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); s.Write(refusalLine(i, i*10)) }()
	}
	wg.Wait()
	f := filepath.Join(t.TempDir(), "out")
	os.WriteFile(f, buf.Bytes(), 0o600)
	if n := checkLines(t, f); n != 50 {
		t.Fatalf("%d lines", n)
	}
}
