package store_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/store"
	"github.com/prod-write/prod-write/pkg/store/storetest"
)

func openDir(t *testing.T) *store.Dir {
	t.Helper()
	d, err := store.OpenDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDirConformance runs the backend-independent suite on the embedded
// store.
func TestDirConformance(t *testing.T) {
	storetest.RunConformance(t, func(t *testing.T) store.Store { return openDir(t) })
}

func evidenceDir(d *store.Dir, fp string) string {
	return filepath.Join(d.Root, "evidence", strings.TrimPrefix(fp, "sha256:"))
}

// TestDirEvidenceProblems: what in evidence/HEX/ is not a record this store
// wrote is reported with its path and skipped, never returned; temporary
// files of a write in progress (or one a crash left) are neither.
func TestDirEvidenceProblems(t *testing.T) {
	d := openDir(t)
	fp := storetest.Fingerprint("p")
	good := storetest.Envelope(`{"good":true}`)
	if err := d.PutEvidence(fp, storetest.ID("good"), good); err != nil {
		t.Fatal(err)
	}
	dir := evidenceDir(d, fp)
	write := func(name, data string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	envJSON := `{"payloadType":"t","payload":"e30=","signatures":[{"keyid":"k","sig":"c2ln"}]}` + "\n"
	bad := map[string]bool{
		write(storetest.ID("corrupt")+".json", `{"payloadType":"t","payload":"e30=","signatu`):       true, // torn
		write(storetest.ID("empty")+".json", ``):                                                     true,
		write(storetest.ID("notdsse")+".json", `{"hello":"world"}`):                                  true, // unknown field
		write(storetest.ID("nosig")+".json", `{"payloadType":"t","payload":"e30=","signatures":[]}`): true,
		write(storetest.ID("array")+".json", `[1,2,3]`):                                              true,
		write("README.txt", envJSON):                                                                 true, // foreign: not ID.json
		write("notanid.json", envJSON):                                                               true, // foreign: name is no id
		write(strings.ToUpper(storetest.ID("upper"))+".json", envJSON):                               true,
	}
	sub := filepath.Join(dir, storetest.ID("dir")+".json")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	bad[sub] = true
	link := filepath.Join(dir, storetest.ID("link")+".json")
	if err := os.Symlink(filepath.Join(dir, storetest.ID("good")+".json"), link); err != nil {
		t.Fatal(err)
	}
	bad[link] = true
	// What a crashed durable write leaves: a hidden temporary file.
	write("."+storetest.ID("crashed")+".json.tmp-123456", envJSON)
	write("."+storetest.ID("crashed2")+".json.tmp-9", `{"torn`)

	recs, problems, err := d.Evidence(fp)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Payload != good.Payload {
		t.Fatalf("Evidence returned %d records, want only the good one", len(recs))
	}
	for _, p := range problems {
		if !bad[p.Path] {
			t.Errorf("unexpected problem %s", p)
		}
		if p.Err == "" {
			t.Errorf("problem %s says nothing", p.Path)
		}
		delete(bad, p.Path)
	}
	for path := range bad {
		t.Errorf("%s is not reported as a problem", path)
	}
}

// TestDirCrashedWriteLeavesNoRecord: a write that fails or crashes
// half-way leaves no record, nothing reported as a problem, and nothing
// that stops the same write from succeeding later. docs/DESIGN.md §10: every write
// of the embedded store is atomic.
func TestDirCrashedWriteLeavesNoRecord(t *testing.T) {
	d := openDir(t)
	fp, id := storetest.Fingerprint("torn"), storetest.ID("torn")
	env := storetest.Envelope(`{"torn":false}`)

	// A write that fails half-way: the temporary file cannot be written.
	orig := durable.CreateTemp
	t.Cleanup(func() { durable.CreateTemp = orig })
	durable.CreateTemp = func(dir, pattern string) (*os.File, error) {
		f, err := orig(dir, pattern)
		if err != nil {
			return nil, err
		}
		name := f.Name()
		f.Close()
		return os.Open(name) // read-only: every write fails
	}
	if err := d.PutEvidence(fp, id, env); err == nil {
		t.Fatal("PutEvidence succeeded through a failing write")
	}
	if err := d.PutPlan(fp, env); err == nil {
		t.Fatal("PutPlan succeeded through a failing write")
	}
	durable.CreateTemp = orig
	if _, err := d.GetPlan(fp); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after a failed PutPlan, GetPlan: %v, want ErrNotFound", err)
	}
	if recs, problems, err := d.Evidence(fp); err != nil || len(recs) != 0 || len(problems) != 0 {
		t.Fatalf("after a failed PutEvidence: %d records, problems %v, %v; want nothing", len(recs), problems, err)
	}

	// A write killed half-way leaves its temporary file behind.
	for _, dir := range []string{evidenceDir(d, fp), filepath.Join(d.Root, "plans")} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{
		filepath.Join(evidenceDir(d, fp), "."+id+".json.tmp-4242"),
		filepath.Join(d.Root, "plans", "."+strings.TrimPrefix(fp, "sha256:")+".json.tmp-4242"),
	} {
		if err := os.WriteFile(p, []byte(`{"payloadType":"app`), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.PutEvidence(fp, id, env); err != nil {
		t.Fatalf("PutEvidence after a crashed write: %v", err)
	}
	if err := d.PutPlan(fp, env); err != nil {
		t.Fatalf("PutPlan after a crashed write: %v", err)
	}
	recs, problems, err := d.Evidence(fp)
	if err != nil || len(recs) != 1 || len(problems) != 0 {
		t.Fatalf("after the retry: %d records, problems %v, %v; want the record alone", len(recs), problems, err)
	}
	if got, err := d.GetPlan(fp); err != nil || got.Payload != env.Payload {
		t.Fatalf("GetPlan after the retry: %v, %v", got, err)
	}
	plans, err := d.Plans()
	if err != nil || len(plans) != 1 || plans[0] != fp {
		t.Fatalf("Plans = %v, %v; want only %s (temporary files are no plans)", plans, err, fp)
	}
}

// The helper process of TestDirConsumeAcrossProcesses: it waits for its
// start signal on stdin, consumes once and reports on stdout.
func TestMain(m *testing.M) {
	if root := os.Getenv("STORETEST_CONSUME_ROOT"); root != "" {
		os.Exit(consumeHelper(root, os.Getenv("STORETEST_CONSUME_ID"), os.Getenv("STORETEST_CONSUME_USES")))
	}
	os.Exit(m.Run())
}

func consumeHelper(root, id, usesStr string) int {
	uses, err := strconv.Atoi(usesStr)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	d, err := store.OpenDir(root)
	if err != nil {
		fmt.Println("error", err)
		return 2
	}
	fmt.Println("ready")
	// The parent closes stdin to release every helper at once.
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil {
		fmt.Println("error", err)
		return 2
	}
	slot, err := d.Consume(id, uses, storetest.RunID(fmt.Sprint("pid-", os.Getpid())))
	switch {
	case err == nil:
		fmt.Println("slot", slot)
	case errors.Is(err, store.ErrConsumed):
		fmt.Println("consumed")
	default:
		fmt.Println("error", err)
		return 2
	}
	return 0
}

// TestDirConsumeAcrossProcesses: processes sharing one state directory
// (several runs on one host) spend a record exactly as often as it may be
// used. Each process is this test binary, re-executed as a helper.
func TestDirConsumeAcrossProcesses(t *testing.T) {
	for _, c := range []struct {
		uses, procs int
	}{{1, 8}, {3, 8}} {
		t.Run(fmt.Sprintf("uses=%d", c.uses), func(t *testing.T) {
			d := openDir(t)
			id := storetest.ID(fmt.Sprintf("procs-%d", c.uses))
			type proc struct {
				cmd   *exec.Cmd
				stdin interface{ Close() error }
				out   *bufio.Reader
			}
			var procs []proc
			for range c.procs {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), "STORETEST_CONSUME_ROOT="+d.Root, "STORETEST_CONSUME_ID="+id, "STORETEST_CONSUME_USES="+strconv.Itoa(c.uses))
				stdin, err := cmd.StdinPipe()
				if err != nil {
					t.Fatal(err)
				}
				stdout, err := cmd.StdoutPipe()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Stderr = os.Stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
				procs = append(procs, proc{cmd, stdin, bufio.NewReader(stdout)})
			}
			// Release them together, once every one is ready.
			for _, p := range procs {
				if line, err := p.out.ReadString('\n'); err != nil || line != "ready\n" {
					t.Fatalf("helper: %q, %v", line, err)
				}
			}
			for _, p := range procs {
				p.stdin.Close() // EOF wakes the helper's read
			}
			var slots []int
			consumed := 0
			deadline := time.Now().Add(time.Minute)
			for _, p := range procs {
				line, err := p.out.ReadString('\n')
				if err != nil || time.Now().After(deadline) {
					t.Fatalf("helper result: %q, %v", line, err)
				}
				switch f := strings.Fields(line); {
				case len(f) == 2 && f[0] == "slot":
					n, _ := strconv.Atoi(f[1])
					slots = append(slots, n)
				case len(f) == 1 && f[0] == "consumed":
					consumed++
				default:
					t.Fatalf("helper: %q", line)
				}
				if err := p.cmd.Wait(); err != nil {
					t.Fatalf("helper: %v", err)
				}
			}
			slices.Sort(slots)
			want := make([]int, c.uses)
			for i := range want {
				want[i] = i
			}
			if !slices.Equal(slots, want) || consumed != c.procs-c.uses {
				t.Fatalf("%d processes consuming a %d-use record: slots %v and %d ErrConsumed; want slots %v once each", c.procs, c.uses, slots, consumed, want)
			}
			if used, err := d.Used([]string{id}); err != nil || used[id] != c.uses {
				t.Fatalf("Used = %v, %v; want %d", used, err, c.uses)
			}
		})
	}
}

// TestDirReopen: consumption is an exclusive file per slot, so what a run
// spent is visible to every other process and survives a restart.
func TestDirReopen(t *testing.T) {
	d := openDir(t)
	id := storetest.ID("reopen")
	if _, err := d.Consume(id, 2, storetest.NewRun()); err != nil {
		t.Fatal(err)
	}
	again, err := store.OpenDir(d.Root)
	if err != nil {
		t.Fatal(err)
	}
	if used, _ := again.Used([]string{id}); used[id] != 1 {
		t.Fatalf("Used after reopening = %d, want 1", used[id])
	}
	if slot, err := again.Consume(id, 2, storetest.NewRun()); err != nil || slot != 1 {
		t.Fatalf("Consume after reopening = %d, %v; want slot 1", slot, err)
	}
	if _, err := again.Consume(id, 2, storetest.NewRun()); !errors.Is(err, store.ErrConsumed) {
		t.Fatalf("third Consume of 2 uses: %v", err)
	}
}

// TestCheckFingerprint: the one check every fingerprint passes before it
// becomes a path.
func TestCheckFingerprint(t *testing.T) {
	for _, fp := range storetest.BadFingerprints {
		var bad *store.BadFingerprintError
		if err := store.CheckFingerprint(fp); !errors.As(err, &bad) {
			t.Errorf("CheckFingerprint(%q) = %v, want *BadFingerprintError", fp, err)
		}
	}
	if err := store.CheckFingerprint("sha256:" + strings.Repeat("0f", 32)); err != nil {
		t.Errorf("CheckFingerprint of a good fingerprint: %v", err)
	}
}

// TestDirSpentCounts: the count of spent uses, found by a galloping search
// over the slot markers, is exact on each side of every power of two, and
// the next Consume takes the slot right after the spent ones.
func TestDirSpentCounts(t *testing.T) {
	for _, n := range []int{0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 100, 513} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			d := openDir(t)
			id := storetest.ID("spent")
			dir := filepath.Join(d.Root, "consumed")
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for slot := 0; slot < n; slot++ {
				if err := os.WriteFile(filepath.Join(dir, id+"."+strconv.Itoa(slot)), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			used, err := d.Used([]string{id})
			if err != nil || used[id] != n {
				t.Fatalf("Used = %v, %v; want %d", used, err, n)
			}
			slot, err := d.Consume(id, n+1, storetest.NewRun())
			if err != nil || slot != n {
				t.Fatalf("Consume(%d uses) = %d, %v; want slot %d", n+1, slot, err, n)
			}
			if _, err := d.Consume(id, n+1, storetest.NewRun()); !errors.Is(err, store.ErrConsumed) {
				t.Fatalf("Consume past %d uses: %v", n+1, err)
			}
		})
	}
}
