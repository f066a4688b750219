package receipts

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/keys"
)

// An append that a full disk cuts short leaves no torn line: the journal
// is cut back to its last complete line, so replay does not fail until the
// next run repairs it. The disk is filled with a file-size limit
// on a child process (prlimit), the way ulimit -f would.
func TestFailedAppendLeavesNoTornLine(t *testing.T) {
	if path := os.Getenv("PW_JOURNAL_CHILD"); path != "" {
		f := jtFixed(t, path)
		_, err := f.journal().Append(jtEntry("big", 4000))
		if err == nil {
			t.Fatal("the append under a file-size limit succeeded")
		}
		return
	}
	prlimit, err := exec.LookPath("prlimit")
	if err != nil {
		t.Skip("SKIPPED: needs prlimit (util-linux) to limit the file size")
	}
	f := jtFixed(t, filepath.Join(t.TempDir(), "journal", "receipts.jsonl"))
	f.append(jtEntry("a", 0))
	f.append(jtEntry("b", 0))
	before, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	// Room for part of the next line, not all of it.
	limit := strconv.Itoa(len(before) + 1000)
	cmd := exec.Command(prlimit, "--fsize="+limit, os.Args[0], "-test.run=^TestFailedAppendLeavesNoTornLine$", "-test.count=1")
	cmd.Env = append(os.Environ(), "PW_JOURNAL_CHILD="+f.path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	after, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after, before) {
		t.Fatalf("after a failed append the journal is %d bytes (was %d); it ends %q", len(after), len(before), tail(after))
	}
	// And the next append continues the chain.
	f.append(jtEntry("c", 0))
	if _, sum := f.replay(); !sum.OK || sum.Entries != 3 {
		t.Fatalf("replay after the failed append: %+v", sum)
	}
}

// jtFixed is a fixture whose runner key is the same in every process.
func jtFixed(t *testing.T, path string) *jtFixture {
	t.Helper()
	k := keys.FromSeed(bytes.Repeat([]byte{7}, 32))
	return &jtFixture{t: t, key: k, policy: runnerPolicy(t, k), path: path}
}

func tail(b []byte) string {
	if len(b) > 60 {
		b = b[len(b)-60:]
	}
	return strings.ToValidUTF8(string(b), "?")
}
