package runtest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// maxInitAllocs bounds what any of prod-write's own packages allocates
// while it initialises. Every start pays for package initialisation,
// an agent's run through the service included (docs/DESIGN.md §15): a regexp
// compiled into a package variable cost 659 allocations and 0.3 ms there.
// Compile on first use (sync.OnceValue) or check by hand instead.
const maxInitAllocs = 100

// TestPackageInitIsCheap reads the Go runtime's own account of each
// package's initialisation (GODEBUG=inittrace=1) for a real start of the
// binary. Allocation counts, not times: they do not move with the load of
// the machine.
func TestPackageInitIsCheap(t *testing.T) {
	cmd := exec.Command(prodWrite, "--version")
	cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("prod-write --version: %v\n%s", err, stderr.String())
	}
	seen := 0
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		// init github.com/prod-write/prod-write/pkg/cli @2.3 ms, 0.019 ms clock, 1576 bytes, 24 allocs
		f := strings.Fields(sc.Text())
		if len(f) < 11 || f[0] != "init" || f[len(f)-1] != "allocs" {
			continue
		}
		if !strings.HasPrefix(f[1], "github.com/prod-write/prod-write/") {
			continue
		}
		seen++
		n, err := strconv.Atoi(f[len(f)-2])
		if err != nil {
			t.Fatalf("unreadable inittrace line %q", sc.Text())
		}
		if n > maxInitAllocs {
			t.Errorf("package %s allocates %d times while it initialises (at most %d): make the work lazy", f[1], n, maxInitAllocs)
		}
	}
	if seen == 0 {
		t.Fatalf("no inittrace line for prod-write's packages:\n%s", stderr.String())
	}
}
