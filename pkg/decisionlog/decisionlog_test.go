package decisionlog_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

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
		if e.Name() == filepath.Base(decisionlog.LockPath(path)) {
			continue
		}
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

// checkLines fails unless every line of the file is a whole decision, and
// returns how many there are.
func checkLines(t testing.TB, file string) int { return len(readLines(t, file)) }

// readLines returns the decisions of the file, failing unless every line
// is a whole one.
func readLines(t testing.TB, file string) []decisionlog.Entry {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > 0 && data[len(data)-1] != '\n' {
		t.Fatalf("%s does not end in a newline", file)
	}
	var out []decisionlog.Entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e decisionlog.Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.FormatVersion != decisionlog.FormatVersion || e.DecisionID == "" {
			t.Fatalf("%s: torn or foreign line %q: %v", file, sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
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
// and rotate at once; every line stays whole, no file is over the cap,
// and with room for all of them, every line is there exactly once
// (docs/adr/0037-a-decision-log-that-never-drops-a-line.md: a writer that
// found the file rotated under it 16 times dropped its line).
func TestConcurrentWritersNeverTear(t *testing.T) {
	const writers, each = 8, 200
	for _, tc := range []struct {
		name    string
		maxSize int64
		keep    int
	}{
		{"no rotation", 64 << 20, 1},
		// Room for every line: none may be lost.
		{"rotating", decisionlog.MinSize, keepAll(writers * each)},
		// The oldest files dropped, as in a flood.
		{"rotating away", decisionlog.MinSize, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "decisions.jsonl")
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- writeAttempts(&decisionlog.File{Path: path, MaxSize: tc.maxSize, Keep: tc.keep}, w*each, each)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			seen := checkLog(t, path, tc.maxSize, tc.keep)
			if tc.name != "rotating away" {
				checkAll(t, seen, writers*each)
			}
		})
	}
}

// TestWritersInProcesses: the same with separate processes (this test
// binary again), since locks between processes are what local runs rely
// on: every line is kept, whole, once, within the cap.
func TestWritersInProcesses(t *testing.T) {
	const procs, each = 4, 300
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	keep := keepAll(procs * each)
	var cmds []*exec.Cmd
	var outs []*bytes.Buffer
	for p := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWriterProcess$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("DECISIONLOG_WRITER=%s,%d,%d,%d", path, p*each, each, keep))
		out := &bytes.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Errorf("writer process %d: %v\n%s", i, err, outs[i])
		}
	}
	checkAll(t, checkLog(t, path, decisionlog.MinSize, keep), procs*each)
}

// TestWriterProcess is one writer of TestWritersInProcesses, run only
// under it: $DECISIONLOG_WRITER is PATH,FIRST,COUNT,KEEP.
func TestWriterProcess(t *testing.T) {
	spec := os.Getenv("DECISIONLOG_WRITER")
	if spec == "" {
		t.Skip("a helper of TestWritersInProcesses")
	}
	var path string
	var first, count, keep int
	parts := strings.Split(spec, ",")
	if len(parts) != 4 {
		t.Fatalf("DECISIONLOG_WRITER=%q", spec)
	}
	path = parts[0]
	for i, p := range []*int{&first, &count, &keep} {
		n, err := strconv.Atoi(parts[i+1])
		if err != nil {
			t.Fatal(err)
		}
		*p = n
	}
	if err := writeAttempts(&decisionlog.File{Path: path, MaxSize: decisionlog.MinSize, Keep: keep}, first, count); err != nil {
		t.Fatal(err)
	}
}

// writeAttempts writes the refusals of attempts first to first+count-1.
func writeAttempts(l *decisionlog.File, first, count int) error {
	for i := first; i < first+count; i++ {
		if err := l.Write(refusalLine(i, (i*31)%500)); err != nil {
			return err
		}
	}
	return nil
}

// keepAll is a Keep that rotates none of n lines of writeAttempts away
// with MaxSize MinSize: each rotated file holds more than MinSize-MaxLine
// bytes.
func keepAll(n int) int {
	var total int64
	for i := range n {
		total += int64(len(refusalLine(i, (i*31)%500)))
	}
	return int(total/(decisionlog.MinSize-decisionlog.MaxLine)) + 1
}

// checkLog checks the log's files (at most keep+1, none over maxSize,
// every line whole) and returns how often each attempt's line is in them.
func checkLog(t *testing.T, path string, maxSize int64, keep int) map[int]int {
	t.Helper()
	files := logFiles(t, path)
	if len(files) > keep+1 {
		t.Errorf("%d files, keep %d", len(files), keep)
	}
	seen := map[int]int{}
	for name, size := range files {
		if size > maxSize {
			t.Errorf("%s is %d bytes, over the cap %d", name, size, maxSize)
		}
		for _, e := range readLines(t, filepath.Join(filepath.Dir(path), name)) {
			var i int
			if _, err := fmt.Sscanf(e.Reason, "attempt %d ", &i); err != nil {
				t.Fatalf("%s: reason %q", name, e.Reason)
			}
			seen[i]++
		}
	}
	return seen
}

// checkAll fails unless attempts 0 to n-1 are each in the log once.
func checkAll(t *testing.T, seen map[int]int, n int) {
	t.Helper()
	lost := 0
	for i := range n {
		switch seen[i] {
		case 0:
			lost++
		case 1:
		default:
			t.Errorf("attempt %d logged %d times", i, seen[i])
		}
	}
	if lost > 0 || len(seen) != n {
		t.Errorf("%d of %d lines lost (%d distinct attempts logged)", lost, n, len(seen))
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

// TestNoFollow: a symlink planted at the log's path, or at its lock's, is
// not followed.
func TestNoFollow(t *testing.T) {
	for _, at := range []string{"log", "lock"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(dir, "elsewhere")
			if err := os.WriteFile(target, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "decisions.jsonl")
			link := path
			if at == "lock" {
				link = decisionlog.LockPath(path)
			}
			if err := os.Symlink(target, link); err != nil {
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
		})
	}
}

// TestFIFO: a FIFO planted at the log's path, or at its lock's, is an
// error at once, not a writer (and so a run) blocked until someone reads
// it.
func TestFIFO(t *testing.T) {
	for _, at := range []string{"log", "lock"} {
		t.Run(at, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "decisions.jsonl")
			fifo := path
			if at == "lock" {
				fifo = decisionlog.LockPath(path)
			}
			if err := syscall.Mkfifo(fifo, 0o600); err != nil {
				t.Fatal(err)
			}
			l := &decisionlog.File{Path: path, MaxSize: decisionlog.MinSize, Keep: 1}
			done := make(chan [2]error, 1)
			go func() { done <- [2]error{l.Write(refusalLine(0, 0)), l.Check()} }()
			select {
			case errs := <-done:
				if errs[0] == nil || errs[1] == nil {
					t.Fatalf("Write %v, Check %v: want errors", errs[0], errs[1])
				}
			case <-time.After(time.Minute):
				t.Fatal("blocked on a FIFO")
			}
		})
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
