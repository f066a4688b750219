// Command prod-write-bench measures the performance goals of docs/DESIGN.md §15, each
// as a ratio against its floor measured in the same run. `make bench` runs
// it; it is not part of prod-write itself.
package main

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	fnote "github.com/transparency-dev/formats/note"
	"golang.org/x/mod/sumdb/note"
)

var (
	bin            = flag.String("bin", "bin/prod-write", "the prod-write binary")
	floorBin       = flag.String("floor", "bin/floor", "the floor program for run")
	partsDir       = flag.String("parts", "bin/parts", "the programs of the run-parts row (testdata/bench/parts, built by scripts/bench.sh)")
	only           = flag.String("only", "", "run only this benchmark: plan, run, run-service, run-mcp, run-parts, parallel, parallel-service, replay, bridges, fleet, passkey, replay-passkey, replay-state, load")
	fileSize       = flag.Int64("file-size", 1<<30, "bytes of the file plan hashes")
	runs           = flag.Int("runs", 200, "sequential runs timed for the run overhead")
	nReceipts      = flag.Int("receipts", 1_000_000, "receipts replayed")
	baseline       = flag.String("baseline", "", "another prod-write binary to measure side by side in the replay rows and, as the client of the same service, the run-service row (before/after)")
	rounds         = flag.Int("rounds", 3, "interleaved rounds of the replay rows")
	witnessCadence = flag.Bool("witness-cadence", false, "in the service rows, configure a witness (that refuses connections) sent the head's checkpoint every turn: the service keeps the tree and signs its note (the append latency with the tree: docs/PERFORMANCE.md, \"The journal's tree\")")
	stateUnder     = flag.String("state-under", "", "comma-separated `SIZES` of journal the replay-state row's state stands on (default: a tenth of -receipts, and -receipts)")
	replayModes    = flag.String("replay-modes", "", "run only the replay row's modes matching this `REGEX` (replay --json, replay (table), receipts list --json…): at 10M receipts each takes minutes")
	spacing        = flag.Duration("spacing", time.Second, "time from one run to the next in the generated journals of the replay rows (ADR 0053: replay remembers a record for its life and a run id for a day; 1ms packs a million receipts into eight minutes, where nothing is forgotten)")
	stateNew       = flag.Int("state-new", 10_000, "receipts new since the replay state, in the replay-state row")
	// Each run of the passkey journal carries its own P-256 assertion,
	// made and checked at generation: fewer receipts keep that short.
	nPasskeyReceipts = flag.Int("passkey-receipts", 200_000, "receipts replayed in the replay-passkey row")
	setupOnly        = flag.String("setup", "", "only set up a service deployment in this new directory, with 32 approved plans, print how to use it, and exit (for profiling)")
)

func main() {
	if out := os.Getenv(measureEnv); out != "" {
		measureChild(out)
	}
	if spec := os.Getenv(hostileEnv); spec != "" {
		hostileChild(spec)
	}
	flag.Parse()
	var err error
	if *bin, err = filepath.Abs(*bin); err != nil {
		fail(err)
	}
	if *floorBin, err = filepath.Abs(*floorBin); err != nil {
		fail(err)
	}
	if *partsDir, err = filepath.Abs(*partsDir); err != nil {
		fail(err)
	}
	if *setupOnly != "" {
		setupService(*setupOnly)
		return
	}
	tmp, err := os.MkdirTemp("", "prod-write-bench-")
	if err != nil {
		fail(err)
	}
	benchTmp = tmp
	defer os.RemoveAll(tmp)
	fmt.Printf("prod-write bench: %d cores, GOMAXPROCS %d, %s\n\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	type bench struct {
		name string
		fn   func(dir string) result
	}
	var results []result
	for _, b := range []bench{{"plan", benchPlan}, {"run", benchRun}, {"run-service", benchRunService}, {"run-mcp", benchRunMCP}, {"run-parts", benchRunParts}, {"parallel", benchParallel}, {"parallel-service", benchParallelService}, {"replay", benchReplay}, {"bridges", benchBridges}, {"fleet", benchFleet}, {"passkey", benchPasskey}, {"replay-passkey", benchReplayPasskey}, {"replay-state", benchReplayState}, {"load", benchLoad}} {
		if *only != "" && *only != b.name {
			continue
		}
		dir := filepath.Join(tmp, b.name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fail(err)
		}
		r := b.fn(dir)
		results = append(results, r)
	}
	fmt.Println("\nsummary (one run, side by side):")
	failed := false
	for _, r := range results {
		mark := "ok"
		if !r.met {
			mark, failed = "BELOW GOAL", true
		}
		fmt.Printf("  %-44s %7.3f  goal %s  %s\n", r.name, r.ratio, r.goal, mark)
		for _, x := range r.extra {
			fmt.Printf("  %-44s %s\n", "", x)
		}
	}
	if failed {
		exit(1)
	}
}

// benchTmp is the bench's temporary directory (journals of gigabytes):
// exit removes it, as os.Exit runs no deferred call.
var benchTmp string

// exit removes benchTmp and exits with code.
func exit(code int) {
	if benchTmp != "" {
		os.RemoveAll(benchTmp)
	}
	os.Exit(code)
}

type result struct {
	name  string
	ratio float64
	goal  string
	met   bool
	extra []string
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "prod-write-bench:", err)
	exit(2)
}

// pw runs prod-write in dir and returns its stdout.
func pw(dir string, env []string, args ...string) []byte {
	cmd := exec.Command(*bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		fail(fmt.Errorf("prod-write %v: %v\n%s%s", args, err, out.String(), errb.String()))
	}
	return out.Bytes()
}

var fpRE = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// setup makes a demo deployment in dir with one extra operation file.
func setup(dir, ops string) {
	pw(dir, nil, "init", "--demo", ".")
	if err := os.WriteFile(filepath.Join(dir, "operations", "bench.toml"), []byte(ops), 0o644); err != nil {
		fail(err)
	}
}

func benchPlan(dir string) result {
	setup(dir, `
[[operation]]
name = "hash-big"
program = "true"
targets = ["staging"]
[operation.files.big]
max_size = "4GiB"
`)
	big := filepath.Join(dir, "big.bin")
	f, err := os.Create(big)
	if err != nil {
		fail(err)
	}
	chunk := make([]byte, 1<<20)
	rand.Read(chunk)
	for n := int64(0); n < *fileSize; n += int64(len(chunk)) {
		f.Write(chunk)
	}
	f.Close()
	floor := func() time.Duration {
		t := time.Now()
		f, _ := os.Open(big)
		h := sha256.New()
		io.CopyBuffer(h, f, make([]byte, 1<<20))
		f.Close()
		return time.Since(t)
	}
	plan := func() time.Duration {
		t := time.Now()
		pw(dir, nil, "plan", "hash-big", "--target", "staging", "--file", "big="+big, "--dry-run")
		return time.Since(t)
	}
	floor() // warm the page cache
	var fl, pl []time.Duration
	for i := 0; i < 5; i++ {
		fl = append(fl, floor())
		pl = append(pl, plan())
	}
	fm, pm := median(fl), median(pl)
	gb := float64(*fileSize) / 1e9
	r := result{name: "plan throughput / crypto/sha256 streaming", ratio: fm.Seconds() / pm.Seconds(), goal: "≥ 0.9"}
	r.met = r.ratio >= 0.9
	r.extra = []string{fmt.Sprintf("sha256 %.2f GB/s, plan %.2f GB/s on %.2f GB (median of 5)", gb/fm.Seconds(), gb/pm.Seconds(), gb)}
	fmt.Printf("plan: %s\n", r.extra[0])
	return r
}

// approvedTrue plans n distinct /bin/true invocations and gives each a
// Gera go with uses; it returns their fingerprints.
func approvedTrue(dir string, n, uses int) []string {
	setup(dir, `
[[operation]]
name = "noop"
program = "/bin/true"
args = ["{param.n}"]
targets = ["staging"]
run_as = "`+runAs()+`"
[operation.params.n]
pattern = "[0-9]+"
`)
	var fps []string
	for i := 0; i < n; i++ {
		out := pw(dir, nil, "plan", "noop", "--target", "staging", "--param", fmt.Sprintf("n=%d", i), "--key", "keys/agent.key")
		fp := fpRE.FindString(string(out))
		pw(dir, nil, "gera", "go", fp, "--uses", fmt.Sprint(uses), "--ttl", "24h", "--key", "keys/gera.key")
		fps = append(fps, fp)
	}
	return fps
}

func timeCmd(dir, name string, args ...string) time.Duration {
	return timeCmdEnv(dir, nil, name, args...)
}

// runAs is the account the service runs the bench's programs as: nobody
// when the bench runs as root, else the bench's own account (with
// allow_shared_account, as a one-account machine must say).
func runAs() string {
	if os.Geteuid() == 0 {
		return "nobody"
	}
	u, err := user.Current()
	if err != nil {
		fail(err)
	}
	return u.Username
}

// startService turns dir's deployment into a runner service on a socket
// in dir, and returns the environment of its clients and a stop function.
func startService(dir string) ([]string, func()) {
	sock, client := configureService(dir)
	if os.Geteuid() == 0 {
		os.Chmod(dir, 0o755) // nobody enters it through the descriptor
	}
	cmd := exec.Command(*bin, "serve", "--config", filepath.Join(dir, "prod-write.toml"))
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	servicePID = cmd.Process.Pid
	for i := 0; i < 200; i++ {
		if fi, err := os.Stat(sock); err == nil && fi.Mode()&os.ModeSocket != 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return []string{"PROD_WRITE_CONFIG=" + client}, func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		servicePID = 0
	}
}

// setupService makes a deployment in dir for profiling by hand: 32 plans
// approved for 100000 uses each, and the service's configuration.
func setupService(dir string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fail(err)
	}
	var err error
	if dir, err = filepath.Abs(dir); err != nil {
		fail(err)
	}
	fps := approvedTrue(dir, 32, 100000)
	configureService(dir)
	os.WriteFile(filepath.Join(dir, "fps.txt"), []byte(strings.Join(fps, "\n")+"\n"), 0o644)
	fmt.Printf("serve:  %s serve --config %s/prod-write.toml\nclient: PROD_WRITE_CONFIG=%s/client.toml %s run FP   (FPs in %s/fps.txt)\n", *bin, dir, dir, *bin, dir)
}

// configureService adds a service socket in dir to dir's configuration,
// with the lines extra in its [service] table, and writes a client's
// configuration naming it, returning both paths.
func configureService(dir string, extra ...string) (sock, client string) {
	sock = filepath.Join(dir, "pw.sock")
	cfg, err := os.OpenFile(filepath.Join(dir, "prod-write.toml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		fail(err)
	}
	fmt.Fprintf(cfg, "\n[service]\nsocket = %q\nallow_shared_account = %v\n", sock, os.Geteuid() != 0)
	for _, l := range extra {
		fmt.Fprintln(cfg, l)
	}
	if *witnessCadence {
		// "With the tree" (docs/PERFORMANCE.md, "The journal's tree"): the
		// service keeps the journal's tree, signs the head's note at every
		// turn and sends it, to a witness that refuses the connection
		// (nothing waits on it).
		fmt.Fprintf(cfg, "witness_every = 1\nwitness_interval = \"1s\"\n\n[[witness]]\nname = \"bench.witness\"\nurl = \"http://127.0.0.1:1\"\n")
		_, vkey, err := note.GenerateKey(rand.Reader, "bench.witness")
		if err != nil {
			fail(err)
		}
		cosig, err := fnote.VKeyToCosignatureV1(vkey)
		if err != nil {
			fail(err)
		}
		appendFile(filepath.Join(dir, "trust.toml"), fmt.Sprintf("\n[[witness]]\nkey = %q\n", cosig))
	}
	cfg.Close()
	client = filepath.Join(dir, "client.toml")
	if err := os.WriteFile(client, fmt.Appendf(nil, "[service]\nsocket = %q\n", sock), 0o644); err != nil {
		fail(err)
	}
	return sock, client
}

// servicePID is the running service's process (prod-write serve execs
// prod-write-net in place, so the pid stays the same).
var servicePID int

// processCPU is the CPU time a process and the children it has waited for
// used so far, from /proc (zero when pid is 0).
func processCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		fail(err)
	}
	// Fields after the command name, which is in parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		var n int64
		fmt.Sscan(f[i], &n)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

func timeCmdEnv(dir string, env []string, name string, args ...string) time.Duration {
	d, _ := timeCmdCPU(dir, env, name, args...)
	return d
}

func benchRun(dir string) result        { return runOverhead(dir, false) }
func benchRunService(dir string) result { return runOverhead(dir, true) }

// runOverhead times prod-write run of an approved /bin/true against the
// floor, interleaved so drift hits both alike; as a client of a running
// service when service is set (docs/DESIGN.md §15's figure).
func runOverhead(dir string, service bool) result {
	uses := *runs + 10
	if service && *baseline != "" {
		uses *= 2 // the baseline client spends them too
	}
	fp := approvedTrue(dir, 1, uses)[0]
	var env []string
	name, what := "run", "prod-write run"
	if service {
		var stop func()
		env, stop = startService(dir)
		defer stop()
		name, what = "run-service", "prod-write run as a client"
	}
	// own adds up a client's CPU alone, exactly (its rusage); the
	// service's is read in ticks of 10 ms, which a comparison of two
	// clients cannot split between them run by run.
	client := func(bin string, own *time.Duration) timed {
		return func() (time.Duration, time.Duration) {
			svc := processCPU(servicePID)
			d, c := timeCmdCPU(dir, env, bin, "run", fp)
			*own += c
			return d, c + processCPU(servicePID) - svc
		}
	}
	var thisCPU, otherCPU time.Duration
	floor, thisBin, otherBin := *floorBin, *bin, ""
	if service && *baseline != "" {
		// The floor and both clients are timed as fresh copies, each
		// written alike: how a binary's file was written weighs on its
		// start (the linker's output, a cp copy and a single write
		// differ by up to 0.7 ms a run here, in A/A rounds), and the
		// ratios are the copies' (docs/PERFORMANCE.md, "Comparing two clients").
		floor = freshCopy(dir, "floor", *floorBin)
		thisBin, otherBin = freshCopy(dir, "this", *bin), freshCopy(dir, "baseline", *baseline)
	}
	var other timed
	if otherBin != "" {
		other = client(otherBin, &otherCPU)
	}
	m := againstFloor(dir, floor, client(thisBin, &thisCPU), other)
	fl, rl, sl, floorCPU, runCPU, sudo := m.floor, m.run, m.sudo, m.floorCPU, m.runCPU, m.sudoFound
	fm, rm := median(fl), median(rl)
	goal := 1.2
	if service {
		goal = 1.5
	}
	r := result{name: name + " wall time / floor (approved /bin/true)", ratio: rm.Seconds() / fm.Seconds(), goal: fmt.Sprintf("≤ %.1f", goal)}
	r.met = r.ratio <= goal
	r.extra = []string{fmt.Sprintf("floor %v, %s %v (median of %d each)", fm.Round(time.Microsecond), what, rm.Round(time.Microsecond), *runs)}
	if service {
		// The service's CPU is read from /proc in ticks of 10 ms: over
		// the rounds together it is exact enough.
		cpuRatio := runCPU.Seconds() / floorCPU.Seconds()
		r.extra = append(r.extra, fmt.Sprintf("CPU per run (client and service) %v, the floor's %v: %.2f× (goal ≤ 1.3)",
			(runCPU/time.Duration(*runs)).Round(10*time.Microsecond), (floorCPU/time.Duration(*runs)).Round(10*time.Microsecond), cpuRatio))
		if cpuRatio > 1.3 {
			r.met = false
		}
		if sudo {
			sm := median(sl)
			sudoRatio := rm.Seconds() / sm.Seconds()
			r.extra = append(r.extra, fmt.Sprintf("sudo -n /bin/true %v: run through the service is %.2f× the peer (goal ≤ 1.0)", sm.Round(time.Microsecond), sudoRatio))
			if sudoRatio > 1.0 {
				r.met = false
			}
		} else {
			r.extra = append(r.extra, "no sudo that lets this account run /bin/true without a password: the peer row is not measured")
		}
		if other != nil {
			mid, lo, hi := pairedDifference(m.run, m.other)
			r.extra = append(r.extra, fmt.Sprintf("baseline client %s (the same service) %v: this build − baseline, median of the rounds' differences %+v (95%% interval %+v to %+v); the client's own CPU per run %+v",
				*baseline, median(m.other).Round(time.Microsecond), mid.Round(time.Microsecond), lo.Round(time.Microsecond), hi.Round(time.Microsecond), ((thisCPU-otherCPU)/time.Duration(*runs+5)).Round(10*time.Microsecond)))
		}
	}
	for _, x := range r.extra {
		fmt.Printf("%s: %s\n", name, x)
	}
	return r
}

// interleaved is what againstFloor measured: each side's wall times, and
// the CPU of all the floor's runs and of all of run's; other's wall times,
// when there was one, in the same rounds.
type interleaved struct {
	floor, run, sudo, other []time.Duration
	floorCPU, runCPU        time.Duration
	sudoFound               bool
}

// timed is one side of a round: its wall time and its CPU.
type timed func() (time.Duration, time.Duration)

// againstFloor times run (which returns its wall time and its CPU) -runs
// times, each round also the floor program at floor running /bin/true, the
// peer of docs/DESIGN.md §15, sudo -n /bin/true by the same account, when sudo is
// here and lets this account, and other when it is not nil (-baseline):
// after five rounds of warming up, in an order shuffled each round, so
// that neither drift nor what ran just before favours one side.
func againstFloor(dir, floor string, run, other timed) interleaved {
	floorDir := filepath.Join(dir, "floor")
	os.MkdirAll(floorDir, 0o700)
	sudo, _ := exec.LookPath("sudo")
	if sudo != "" && exec.Command(sudo, "-n", "/bin/true").Run() != nil {
		sudo = ""
	}
	var m interleaved
	m.sudoFound = sudo != ""
	type side struct {
		time      timed
		wall, cpu time.Duration // the round's
	}
	sides := []*side{
		{time: func() (time.Duration, time.Duration) { return timeCmdCPU(dir, nil, floor, floorDir, "/bin/true") }},
		{time: run},
	}
	if sudo != "" {
		sides = append(sides, &side{time: func() (time.Duration, time.Duration) { return timeCmd(dir, sudo, "-n", "/bin/true"), 0 }})
	}
	if other != nil {
		sides = append(sides, &side{time: other})
	}
	shuffledRounds(len(sides), func(k int) { sides[k].wall, sides[k].cpu = sides[k].time() }, func() {
		m.floor, m.floorCPU = append(m.floor, sides[0].wall), m.floorCPU+sides[0].cpu
		m.run, m.runCPU = append(m.run, sides[1].wall), m.runCPU+sides[1].cpu
		next := 2
		if sudo != "" {
			m.sudo = append(m.sudo, sides[next].wall)
			next++
		}
		if other != nil {
			m.other = append(m.other, sides[next].wall)
		}
	})
	return m
}

// shuffledRounds makes five rounds of warming up and then -runs rounds,
// each calling run for every one of n sides in an order shuffled afresh,
// so that neither drift nor what ran just before favours one side; after
// each counted round it calls counted.
func shuffledRounds(n int, run func(side int), counted func()) {
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	for i := 0; i < 5+*runs; i++ {
		mrand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		for _, k := range order {
			run(k)
		}
		if i >= 5 {
			counted()
		}
	}
}

// freshCopy copies the binary at path into a new directory name under dir,
// in one write, and returns the copy's path.
func freshCopy(dir, name, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		fail(err)
	}
	to := filepath.Join(dir, "clients", name, filepath.Base(path))
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		fail(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		fail(err)
	}
	return to
}

// pairedDifference is the median of a[i]-b[i] over rounds measured side by
// side, with a 95% bootstrap interval of that median: a change to the run
// client is smaller than the spread of one side's times on a busy or
// paravirtualised machine, and pairing each round removes what the round
// shared.
func pairedDifference(a, b []time.Duration) (mid, lo, hi time.Duration) {
	d := make([]time.Duration, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	r := mrand.New(mrand.NewPCG(1, 2)) // the same interval for the same data
	meds := make([]time.Duration, 2000)
	s := make([]time.Duration, len(d))
	for j := range meds {
		for i := range s {
			s[i] = d[r.IntN(len(d))]
		}
		meds[j] = median(s)
	}
	slices.Sort(meds)
	return median(d), meds[len(meds)*25/1000], meds[len(meds)*975/1000]
}

// timeCmdCPU is timeCmdEnv that also returns the CPU the command used.
func timeCmdCPU(dir string, env []string, name string, args ...string) (time.Duration, time.Duration) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	t := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		fail(fmt.Errorf("%s %v: %v\n%s", name, args, err, out))
	}
	return time.Since(t), cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
}

func benchParallel(dir string) result        { return parallelRuns(dir, false) }
func benchParallelService(dir string) result { return parallelRuns(dir, true) }

// parallelRuns compares 32 distinct approved runs made all at once with
// the same 32 one at a time (group commit: docs/DESIGN.md §15); through a running
// service when service is set.
func parallelRuns(dir string, service bool) result {
	const n, rounds = 32, 3
	fps := approvedTrue(dir, n, 2*rounds)
	var env []string
	name := "parallel"
	if service {
		var stop func()
		env, stop = startService(dir)
		defer stop()
		name = "parallel-service"
	}
	var seq, par []time.Duration
	var cpu time.Duration    // CPU of the one-at-a-time runs: clients, service, programs
	var parCPU time.Duration // the same, of the runs made all at once
	var parClients time.Duration
	for round := 0; round < rounds; round++ {
		t := time.Now()
		svc := processCPU(servicePID)
		for _, fp := range fps {
			cmd := exec.Command(*bin, "run", fp)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				fail(fmt.Errorf("run %s: %v\n%s", fp, err, out))
			}
			cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		}
		seq = append(seq, time.Since(t))
		cpu += processCPU(servicePID) - svc
		t = time.Now()
		svc = processCPU(servicePID)
		var wg sync.WaitGroup
		var failures atomic.Int32
		var clientCPU atomic.Int64
		for _, fp := range fps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := exec.Command(*bin, "run", fp)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), env...)
				if err := cmd.Run(); err != nil {
					failures.Add(1)
				}
				clientCPU.Add(int64(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()))
			}()
		}
		wg.Wait()
		par = append(par, time.Since(t))
		parCPU += time.Duration(clientCPU.Load()) + processCPU(servicePID) - svc
		parClients += time.Duration(clientCPU.Load())
		if failures.Load() > 0 {
			fail(fmt.Errorf("%d parallel runs failed", failures.Load()))
		}
	}
	sm, pm := median(seq), median(par)
	speedup := sm.Seconds() / pm.Seconds()
	r := result{name: name + ": 32 runs' throughput / the CPU bound", goal: "≥ 0.9"}
	r.extra = []string{fmt.Sprintf("one at a time %v, parallel %v for 32 runs (median of %d rounds): %.2f× one at a time", sm.Round(time.Millisecond), pm.Round(time.Millisecond), rounds, speedup)}
	// Whatever is batched, n runs at once cannot finish faster than the
	// CPU they use spread over every core: the ratio is bounded by
	// cores × (wall per run one at a time) / (CPU per run made at once).
	perRun := cpu / time.Duration(n*rounds)
	parPerRun := parCPU / time.Duration(n*rounds)
	wallPerRun := sm / n
	ceiling := float64(runtime.NumCPU()) * wallPerRun.Seconds() / parPerRun.Seconds()
	r.ratio = speedup / ceiling
	r.met = r.ratio >= 0.9
	r.extra = append(r.extra, fmt.Sprintf("CPU per run %v one at a time, %v all at once (of which the client processes %v); wall per run one at a time %v: on %d cores no batching of this CPU can exceed %.2f×",
		perRun.Round(10*time.Microsecond), parPerRun.Round(10*time.Microsecond), (parClients/time.Duration(n*rounds)).Round(10*time.Microsecond), wallPerRun.Round(10*time.Microsecond), runtime.NumCPU(), ceiling))
	fmt.Printf("%s: %s\n%s: %s\n", name, r.extra[0], name, r.extra[1])
	out := pw(dir, env, "replay")
	if !bytes.Contains(out, []byte(" 0 failed, 0 incomplete")) {
		fail(fmt.Errorf("replay after the parallel runs did not pass:\n%s", out))
	}
	return r
}

// verifyRate measures ed25519 verifications per second across all cores.
func verifyRate() float64 {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	msg := make([]byte, 512)
	sig := ed25519.Sign(priv, msg)
	return rateAcrossCores(func() { ed25519.Verify(pub, msg, sig) })
}

// rateAcrossCores measures how many calls of fn per second all cores make
// together, one goroutine per core for a second.
func rateAcrossCores(fn func()) float64 {
	var total atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(time.Second)
	t := time.Now()
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := int64(0)
			for time.Now().Before(deadline) {
				for i := 0; i < 100; i++ {
					fn()
				}
				n += 100
			}
			total.Add(n)
		}()
	}
	wg.Wait()
	return float64(total.Load()) / time.Since(t).Seconds()
}

func benchReplay(dir string) result {
	journal := filepath.Join(dir, "state", "journal", "receipts.jsonl")
	if err := os.MkdirAll(filepath.Dir(journal), 0o700); err != nil {
		fail(err)
	}
	trust, sigsPerReceipt, err := generateJournal(dir, journal, *nReceipts)
	if err != nil {
		fail(err)
	}
	writeReplayConfig(dir)
	// Every mode docs/DESIGN.md §15 bounds: replay and receipts list, table and
	// JSON; and the reads that must cost what they return.
	type replayMode struct {
		name string
		args []string
		rate bool // a throughput goal against the ed25519 floor
	}
	modes := []replayMode{
		{"replay --json", []string{"replay", journal, "--trust", trust, "--json"}, true},
		{"replay (table)", []string{"replay", journal, "--trust", trust}, true},
		{"receipts list --json", []string{"receipts", "list", "--json"}, false},
		{"receipts list (table)", []string{"receipts", "list"}, false},
		{"receipts show LAST", []string{"receipts", "show", fmt.Sprint(*nReceipts)}, false},
		{"receipts list --last 10", []string{"receipts", "list", "--last", "10"}, false},
	}
	if *replayModes != "" {
		re, err := regexp.Compile(*replayModes)
		if err != nil {
			fail(fmt.Errorf("-replay-modes: %w", err))
		}
		modes = slices.DeleteFunc(modes, func(m replayMode) bool { return !re.MatchString(m.name) })
	}
	bins := []string{*bin}
	if *baseline != "" {
		bins = append(bins, *baseline)
	}
	type round struct {
		rate, got float64
		el        time.Duration
		rss       int64
	}
	// Rounds interleave the floor and every mode of every binary, so a
	// shared CPU's drift hits all alike; each figure is the median round's.
	got := map[string][]round{}
	for i := 0; i < *rounds; i++ {
		for _, m := range modes {
			for _, b := range bins {
				rate := 0.0
				if m.rate {
					rate = verifyRate()
				}
				el, rss, err := timeReplay(dir, b, m.args)
				if err != nil {
					if b == *bin {
						fail(fmt.Errorf("%s on the generated journal failed: %w", m.name, err))
					}
					fmt.Printf("        %s (%s): %v\n", m.name, b, err)
					continue
				}
				got[m.name+"|"+b] = append(got[m.name+"|"+b], round{rate: rate, got: float64(*nReceipts) / el.Seconds(), el: el, rss: rss})
			}
		}
	}
	r := result{name: "replay receipts/s / ed25519 limit", goal: "≥ 0.8, < 100 MB", met: true, ratio: 10}
	for _, m := range modes {
		for _, b := range bins {
			rs := got[m.name+"|"+b]
			if len(rs) == 0 {
				continue
			}
			sort.Slice(rs, func(i, j int) bool {
				if m.rate {
					return rs[i].got/rs[i].rate < rs[j].got/rs[j].rate
				}
				return rs[i].el < rs[j].el
			})
			med := rs[len(rs)/2]
			var peak int64
			for _, x := range rs {
				peak = max(peak, x.rss)
			}
			who := ""
			if b != *bin {
				who = " [baseline]"
			}
			line := fmt.Sprintf("%s%s: %d receipts, %v, peak memory %.1f MB", m.name, who, *nReceipts, med.el.Round(time.Millisecond), float64(peak)/1024)
			if m.rate {
				limit := med.rate / sigsPerReceipt
				ratio := med.got / limit
				line += fmt.Sprintf("; %.0f/s, ed25519 %.0f verifies/s ÷ %.2f signatures per receipt = %.0f/s: %.2f×", med.got, med.rate, sigsPerReceipt, limit, ratio)
				if b == *bin {
					r.ratio = min(r.ratio, ratio)
					r.met = r.met && ratio >= 0.8
				}
			}
			if b == *bin && !strings.HasPrefix(m.name, "receipts show") && !strings.Contains(m.name, "--last") {
				r.met = r.met && peak < 100*1024
			}
			r.extra = append(r.extra, line)
			fmt.Printf("replay: %s\n", line)
		}
	}
	return r
}

// writeReplayConfig writes dir's configuration, so that receipts list finds
// the generated journal and replay the registry.
func writeReplayConfig(dir string) {
	if err := os.WriteFile(filepath.Join(dir, "prod-write.toml"), []byte("registry = \"operations\"\ntrust = \"trust.toml\"\nstate = \"state\"\n[store]\nbackend = \"embedded\"\n"), 0o644); err != nil {
		fail(err)
	}
}

// timeReplay runs prod-write binary b with args in dir's configuration and
// returns its wall time and peak memory (KiB), or its error and stderr.
func timeReplay(dir, b string, args []string) (time.Duration, int64, error) {
	cmd := exec.Command(b, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PROD_WRITE_CONFIG="+filepath.Join(dir, "prod-write.toml"))
	cmd.Stdout = io.Discard
	var errb bytes.Buffer
	cmd.Stderr = &errb
	el, rss, err := measured(cmd)
	if err != nil {
		return 0, 0, fmt.Errorf("%w\n%s", err, errb.String())
	}
	return el, rss, nil
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
