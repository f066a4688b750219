package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/pkg/keys"
)

var (
	loadAgents  = flag.Int("load-agents", 200, "agents of the load row, all at once: half over the socket (a prod-write process per call), half over MCP HTTP")
	loadHostile = flag.Int("load-hostile", 200, "hostile clients of the load row on the MCP port: half slow (a header or a body a byte at a time, or idle), half junk bearer tokens in a loop")
)

// The goals of the load figure (docs/PERFORMANCE.md, "Load: 200 agents
// and 200 hostile clients").
const (
	loadWakeGoal = 100 * time.Millisecond // p99, from a gera go's answer to its waiter returning
	loadRSSGoal  = 200 << 20              // the service's peak resident memory, bytes
)

// benchLoad is the load figure: one runner service, and all at once
// -load-agents agents, half over its socket (each call a prod-write
// process, as an agent runs it) and half over MCP HTTP (the go-sdk's
// client, as a hosted agent's gateway), each with a principal and key of
// its own (over HTTP a token of its own); the socket's all run as the
// bench's account. Each plans a distinct invocation of true, waits on its
// decision (status --wait; wait_for_decision), and once every wait is held
// by the service the bench gives each plan a gera go through the socket,
// four at a time in a shuffled order; each agent then runs its plan. An
// agent answered busy (exit 75: nothing was done) tries again, backing
// off, and each busy answer counts as a failed call. Meanwhile
// -load-hostile clients hold the
// MCP port: half slow (a header or a body sent a byte at a time, or a
// connection held idle after one request), half sending junk bearer tokens
// as fast as they are answered. Each hosted client, agent or hostile, has
// a loopback address of its own (127.1.x.y, 127.2.x.y), as clients on a
// network do: the listener's cap per address is not what holds them.
//
// It reports each agent call kind's p50 and p99, the wake latency (a gera
// go's answer reaching the bench to its waiter returning), the service's
// peak memory (VmHWM) and descriptors and inotify instances (sampled), and
// the failures of each kind, against the goals: no agent call fails, p99
// wake under 100 ms, memory under 200 MB. A benchmark's figures, not a
// test: nothing here is timed against a limit but the goals it reports.
func benchLoad(dir string) result {
	nSocket := *loadAgents / 2
	nMCP := *loadAgents - nSocket
	lr := &loadRun{dir: dir, stats: newLoadStats()}
	setup(dir, `
[[operation]]
name = "noop"
description = "does nothing with a number"
mutating = true
program = "true"
args = ["{param.n}"]
cwd = "/"
targets = ["staging"]
run_as = "`+runAs()+`"
[operation.params.n]
pattern = "^[0-9]+$"
`)
	// A principal, role agent, for each agent: each has its own pool of
	// the service's slots and its own rate over HTTP, as agents of their
	// own do (one principal's 64 slots would answer its 65th waiter busy).
	mcpKeys := filepath.Join(dir, "mcpkeys")
	if err := os.Mkdir(mcpKeys, 0o700); err != nil {
		fail(err)
	}
	var trust, tokens strings.Builder
	agents := make([]*loadAgent, 0, nSocket+nMCP)
	for i := 0; i < nSocket+nMCP; i++ {
		a := &loadAgent{n: i, socket: i < nSocket}
		keyDir := filepath.Join(dir, "keys")
		if a.socket {
			a.id = fmt.Sprintf("load-socket-%03d", i)
		} else {
			a.id = fmt.Sprintf("load-mcp-%03d", i-nSocket)
			keyDir = mcpKeys
			a.token = "load-token-" + rand.Text()
			sum := sha256.Sum256([]byte(a.token))
			fmt.Fprintf(&tokens, "[[token]]\nsha256 = %q\nprincipal = %q\nscope = \"agent\"\nallow_run = true\n\n", hex.EncodeToString(sum[:]), a.id)
		}
		k, err := keys.Generate()
		if err != nil {
			fail(err)
		}
		if err := k.WriteNew(filepath.Join(keyDir, a.id+".key")); err != nil {
			fail(err)
		}
		fmt.Fprintf(&trust, "\n[[principal]]\nid = %q\nroles = [\"agent\"]\nkey = %q\n", a.id, k.Public().String())
		agents = append(agents, a)
	}
	appendFile(filepath.Join(dir, "trust.toml"), trust.String())
	if err := os.WriteFile(filepath.Join(dir, "tokens.toml"), []byte(tokens.String()), 0o600); err != nil {
		fail(err)
	}
	addr := freeLoopback()
	lr.url = "http://" + addr + "/mcp"
	env, stop := startLoadService(dir, addr,
		fmt.Sprintf("mcp_listen = %q", addr), `mcp_tokens = "tokens.toml"`, `mcp_keys = "mcpkeys"`, "mcp_allow_run = true")
	stopped := false
	defer func() {
		if !stopped {
			stop()
		}
	}()
	lr.env = env
	pid := servicePID
	cpu0 := processCPU(pid)
	self0, children0 := rusageCPU(syscall.RUSAGE_SELF), rusageCPU(syscall.RUSAGE_CHILDREN)

	sampler := sampleProc(pid)
	ctx, cancel := context.WithTimeout(context.Background(), 170*time.Second)
	defer cancel()
	hctx, hstop := context.WithCancel(ctx)
	hostile := startHostileProcess(hctx, addr, *loadHostile)
	time.Sleep(2 * time.Second) // the hostile clients in full swing first

	// Every agent at once. Each says, once, that the service holds its
	// wait (ready <- itself) or that it failed before (ready <- nil).
	t0 := time.Now()
	ready := make(chan *loadAgent, len(agents))
	var wg sync.WaitGroup
	for i, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if a.socket {
				lr.socketAgent(ctx, a, ready)
			} else {
				lr.mcpAgent(ctx, a, net.IPv4(127, 1, byte(i/250), byte(i%250+1)), ready)
			}
		}()
	}
	var waiting []*loadAgent
	heldBy := time.After(90 * time.Second)
collect:
	for range agents {
		select {
		case a := <-ready:
			if a != nil {
				waiting = append(waiting, a)
			}
		case <-heldBy:
			break collect
		}
	}
	allHeld := time.Since(t0)
	// The approvals: a gera go each, through the socket, four at a time,
	// in a shuffled order.
	mrand.Shuffle(len(waiting), func(i, j int) { waiting[i], waiting[j] = waiting[j], waiting[i] })
	todo := make(chan *loadAgent)
	var gwg sync.WaitGroup
	for range 4 {
		gwg.Add(1)
		go func() {
			defer gwg.Done()
			for a := range todo {
				t := time.Now()
				if err := lr.geraGo(ctx, a); err != nil {
					lr.stats.fail("gera go (the bench's)", err)
					continue
				}
				lr.stats.add("gera go (the bench's)", time.Since(t))
			}
		}()
	}
	for _, a := range waiting {
		todo <- a
	}
	close(todo)
	gwg.Wait()
	wg.Wait()
	total := time.Since(t0)
	hstop()
	hostile.wait()
	hwm, err := procStatus(pid, "VmHWM")
	if err != nil {
		fail(err)
	}
	cpu := processCPU(pid) - cpu0
	hostileCPU := hostile.cpu()
	selfCPU, clientsCPU := rusageCPU(syscall.RUSAGE_SELF)-self0, rusageCPU(syscall.RUSAGE_CHILDREN)-children0-hostileCPU
	peak := sampler.stop()

	out := pw(dir, env, "replay")
	replayOK := bytes.Contains(out, []byte(" 0 failed, 0 incomplete"))
	stop()
	stopped = true

	// The figures.
	st := lr.stats
	var lines []string
	line := func(format string, args ...any) {
		l := fmt.Sprintf(format, args...)
		lines = append(lines, l)
		fmt.Printf("load: %s\n", l)
	}
	line("%d agents at once, %d over the socket (a prod-write process per call) and %d over MCP HTTP (go-sdk client), a principal each; %d hostile clients on the MCP port (%s); %d cores",
		len(agents), nSocket, nMCP, *loadHostile, hostile.mix(), runtime.NumCPU())
	line("all %d waits held by the service %v after the start; every agent done %v after it; CPU meanwhile: the service %v, the prod-write client processes %v, the bench's MCP agents %v; the hostile clients' own process %v over its whole run",
		len(waiting), allHeld.Round(time.Millisecond), total.Round(time.Millisecond), cpu.Round(10*time.Millisecond), clientsCPU.Round(10*time.Millisecond), selfCPU.Round(10*time.Millisecond), hostileCPU.Round(10*time.Millisecond))
	for _, k := range loadKinds {
		d := st.lat[k]
		if strings.HasSuffix(k, "(busy, retried)") || len(d) == 0 && st.errs[k] == 0 {
			continue
		}
		line("%-34s p50 %8v  p99 %8v  (%d calls, %d failed)", k, pct(d, 50), pct(d, 99), len(d)+st.errs[k]+st.errs[k+" (busy, retried)"], st.errs[k]+st.errs[k+" (busy, retried)"])
	}
	var wakeAll, wakeSock, wakeMCP []time.Duration
	negative := 0
	for _, a := range agents {
		g, w := a.approved.Load(), a.woke.Load()
		if g == 0 || w == 0 {
			continue
		}
		d := time.Duration(w - g)
		if d < 0 {
			negative++
		}
		wakeAll = append(wakeAll, d)
		if a.socket {
			wakeSock = append(wakeSock, d)
		} else {
			wakeMCP = append(wakeMCP, d)
		}
	}
	p99 := pct(wakeAll, 99)
	wakeMet := len(wakeAll) > 0 && p99 < loadWakeGoal
	line("wake, gera go answered → waiter returned: socket p50 %v p99 %v (%d); MCP p50 %v p99 %v (%d); all p50 %v p99 %v: goal p99 < %v: %s",
		pct(wakeSock, 50), pct(wakeSock, 99), len(wakeSock), pct(wakeMCP, 50), pct(wakeMCP, 99), len(wakeMCP),
		pct(wakeAll, 50), p99, loadWakeGoal, metWord(wakeMet))
	line("wake distribution: %s", buckets(wakeAll, 0, 10*time.Millisecond, 50*time.Millisecond, 100*time.Millisecond, 500*time.Millisecond, time.Second, 2*time.Second, 3*time.Second, 5*time.Second))
	if negative > 0 {
		line("(%d waiters returned before their gera go's answer reached it: the go is in the store before the service answers; counted as the negative times they are)", negative)
	}
	failed, busy := 0, 0
	for _, k := range loadKinds {
		if !strings.Contains(k, "(the bench's)") {
			failed += st.errs[k]
		}
		if strings.HasSuffix(k, "(busy, retried)") {
			busy += st.errs[k]
		}
	}
	failedMet := failed == 0 && len(waiting) == len(agents)
	line("agent calls failed: %d (of which answered busy, and retried: %d); waits held %d of %d: goal none failed: %s", failed, busy, len(waiting), len(agents), metWord(failedMet))
	for _, k := range loadKinds {
		if st.errs[k] > 0 {
			line("  %s failed %d×, first: %s", k, st.errs[k], st.errText[k])
		}
	}
	rssMet := hwm*1024 < loadRSSGoal
	line("service peak memory VmHWM %.1f MB (sampled VmRSS peak %.1f MB): goal < %d MB: %s; peak open descriptors %d (of them inotify instances %d; fs.inotify.max_user_instances %s), peak threads %d",
		float64(hwm)/1024, float64(peak.rss)/1024, loadRSSGoal>>20, metWord(rssMet), peak.fds, peak.inotify, sysctl("fs/inotify/max_user_instances"), peak.threads)
	for _, h := range hostile.report() {
		line("hostile %s", h)
	}
	if replayOK {
		line("replay of the journal afterwards: 0 failed, 0 incomplete")
	} else {
		line("replay of the journal afterwards did NOT pass:\n%s", out)
	}
	r := result{name: "load: p99 wake / 100 ms (200 agents, 200 hostile)", ratio: p99.Seconds() / loadWakeGoal.Seconds(),
		goal: "≤ 1, no call failed, < 200 MB", met: wakeMet && failedMet && rssMet && replayOK, extra: lines}
	return r
}

// loadKinds are the call kinds of the load row, in the order reported.
var loadKinds = []string{
	"socket plan", "socket plan (busy, retried)", "socket status --wait (until held)", "socket status --wait", "socket status --wait (busy, retried)", "socket run", "socket run (busy, retried)",
	"mcp connect", "mcp plan_noop", "mcp wait_for_decision (until held)", "mcp wait_for_decision", "mcp run",
	"gera go (the bench's)",
}

// loadAgent is one agent of the load row.
type loadAgent struct {
	id     string // its principal
	n      int    // its invocation's param
	socket bool
	token  string // over MCP HTTP
	fp     string
	// approved is when its gera go returned, woke when its wait did
	// (UnixNano, 0 until then).
	approved, woke atomic.Int64
}

type loadRun struct {
	dir, url string
	env      []string
	stats    *loadStats
}

type loadStats struct {
	mu      sync.Mutex
	lat     map[string][]time.Duration
	errs    map[string]int
	errText map[string]string
}

func newLoadStats() *loadStats {
	return &loadStats{lat: map[string][]time.Duration{}, errs: map[string]int{}, errText: map[string]string{}}
}

func (s *loadStats) add(kind string, d time.Duration) {
	s.mu.Lock()
	s.lat[kind] = append(s.lat[kind], d)
	s.mu.Unlock()
}

func (s *loadStats) fail(kind string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.errs[kind]++
	if _, ok := s.errText[kind]; !ok {
		t := strings.Join(strings.Fields(err.Error()), " ")
		if len(t) > 400 {
			t = t[:400] + "…"
		}
		s.errText[kind] = t
	}
}

// pwCall runs prod-write as a client of the service and returns its
// stdout, or an error with its exit and what it said.
func (lr *loadRun) pwCall(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, *bin, args...)
	cmd.Dir = lr.dir
	cmd.Env = append(os.Environ(), lr.env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, &callError{err: err, text: fmt.Sprintf("prod-write %s: %v: %s%s", args[0], err, errb.String(), out.String())}
	}
	return out.Bytes(), nil
}

// callError is a prod-write client's failure: its exit and what it said.
type callError struct {
	err  error
	text string
}

func (e *callError) Error() string { return e.text }
func (e *callError) Unwrap() error { return e.err }

// busyExit is prod-write's exit when the service answered busy: nothing
// was done, try again.
const busyExit = 75

// isBusy says whether err is a client's busy exit.
func isBusy(err error) bool {
	var x *exec.ExitError
	return errors.As(err, &x) && x.ExitCode() == busyExit
}

// retryBusy calls call until it is not answered busy, as an agent does
// with exit 75 (nothing was done: try again), backing off from 100 ms
// doubling to 2 s, each wait drawn from its half to its whole; each busy
// answer is counted as a failed call of kind.
func (lr *loadRun) retryBusy(ctx context.Context, kind string, call func() error) error {
	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 2*time.Second) {
		err := call()
		if !isBusy(err) || ctx.Err() != nil {
			return err
		}
		lr.stats.fail(kind+" (busy, retried)", err)
		time.Sleep(backoff/2 + mrand.N(backoff/2))
	}
}

// geraGo gives a's plan a gera go through the socket, and notes in
// a.approved when its answer reached the approver: when the client wrote
// it (its process exits after, later still on a busy machine).
func (lr *loadRun) geraGo(ctx context.Context, a *loadAgent) error {
	cmd := exec.CommandContext(ctx, *bin, "gera", "go", a.fp, "--uses", "1", "--key", "keys/gera.key")
	cmd.Dir = lr.dir
	cmd.Env = append(os.Environ(), lr.env...)
	var errb bytes.Buffer
	out := &watchFor{needle: []byte("gera go for "), fn: func() { a.approved.Store(time.Now().UnixNano()) }}
	cmd.Stdout, cmd.Stderr = out, &errb
	if err := cmd.Run(); err != nil {
		a.approved.Store(0)
		return fmt.Errorf("prod-write gera go: %v: %s%s", err, errb.Bytes(), out.buf.Bytes())
	}
	if a.approved.Load() == 0 {
		return fmt.Errorf("prod-write gera go said nothing of its go: %s", out.buf.Bytes())
	}
	return nil
}

// socketAgent plans, waits and runs as processes through the socket.
func (lr *loadRun) socketAgent(ctx context.Context, a *loadAgent, ready chan<- *loadAgent) {
	key := "keys/" + a.id + ".key"
	var once sync.Once
	say := func(x *loadAgent) { once.Do(func() { ready <- x }) }
	defer say(nil)
	t := time.Now()
	var out []byte
	err := lr.retryBusy(ctx, "socket plan", func() (err error) {
		out, err = lr.pwCall(ctx, "plan", "noop", "--target", "staging", "--param", fmt.Sprintf("n=%d", a.n), "--key", key)
		return err
	})
	if err == nil && fpRE.Find(out) == nil {
		err = fmt.Errorf("plan printed no fingerprint: %s", out)
	}
	if err != nil {
		lr.stats.fail("socket plan", err)
		return
	}
	lr.stats.add("socket plan", time.Since(t))
	a.fp = fpRE.FindString(string(out))

	var stdout bytes.Buffer
	var stderr *watchFor
	t = time.Now()
	err = lr.retryBusy(ctx, "socket status --wait", func() error {
		cmd := exec.CommandContext(ctx, *bin, "status", a.fp, "--wait", "--timeout", "150s", "--key", key)
		cmd.Dir = lr.dir
		cmd.Env = append(os.Environ(), lr.env...)
		stdout.Reset()
		// The client says on stderr, once, that the service holds its wait.
		stderr = &watchFor{needle: []byte("waiting for a decision on "), fn: func() {
			lr.stats.add("socket status --wait (until held)", time.Since(t))
			say(a)
		}}
		cmd.Stdout, cmd.Stderr = &stdout, stderr
		err := cmd.Run()
		a.woke.Store(time.Now().UnixNano())
		if err != nil {
			return &callError{err: err, text: fmt.Sprintf("prod-write status --wait: %v: %s%s", err, stderr.buf.Bytes(), stdout.Bytes())}
		}
		return nil
	})
	if err == nil && !bytes.Contains(stdout.Bytes(), []byte("gate:        open")) {
		err = fmt.Errorf("the wait returned with the gate not open: %s", stdout.Bytes())
	}
	if err != nil {
		lr.stats.fail("socket status --wait", err)
		return
	}
	lr.stats.add("socket status --wait", time.Since(t))

	t = time.Now()
	if err := lr.retryBusy(ctx, "socket run", func() error { _, err := lr.pwCall(ctx, "run", a.fp, "--key", key); return err }); err != nil {
		lr.stats.fail("socket run", err)
		return
	}
	lr.stats.add("socket run", time.Since(t))
}

// watchFor is a writer that calls fn once what was written holds needle.
type watchFor struct {
	needle []byte
	fn     func()
	buf    bytes.Buffer
	done   bool
}

func (w *watchFor) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if !w.done && bytes.Contains(w.buf.Bytes(), w.needle) {
		w.done = true
		w.fn()
	}
	return len(p), nil
}

// mcpAgent plans, waits and runs over MCP HTTP, one session, from local.
func (lr *loadRun) mcpAgent(ctx context.Context, a *loadAgent, local net.IP, ready chan<- *loadAgent) {
	var once sync.Once
	say := func(x *loadAgent) { once.Do(func() { ready <- x }) }
	defer say(nil)
	tr := &http.Transport{
		DialContext:         (&net.Dialer{LocalAddr: &net.TCPAddr{IP: local}, Timeout: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
	}
	defer tr.CloseIdleConnections()
	var waitStart atomic.Int64
	cl := mcp.NewClient(&mcp.Implementation{Name: "prod-write-bench-load", Version: "0"}, &mcp.ClientOptions{
		// wait_for_decision's progress says the service holds the wait.
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
			once.Do(func() {
				lr.stats.add("mcp wait_for_decision (until held)", time.Duration(time.Now().UnixNano()-waitStart.Load()))
				ready <- a
			})
		},
	})
	t := time.Now()
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: lr.url, HTTPClient: &http.Client{Transport: bearerAuth{a.token, tr}}}, nil)
	if err != nil {
		lr.stats.fail("mcp connect", err)
		return
	}
	defer cs.Close()
	lr.stats.add("mcp connect", time.Since(t))

	call := func(kind, tool string, args map[string]any, progress bool, want string) (map[string]any, bool) {
		p := &mcp.CallToolParams{Name: tool, Arguments: args}
		if progress {
			p.SetProgressToken("wait-" + a.id)
		}
		t := time.Now()
		waitStart.Store(t.UnixNano())
		res, err := cs.CallTool(ctx, p)
		if progress {
			a.woke.Store(time.Now().UnixNano())
		}
		if err != nil {
			lr.stats.fail(kind, err)
			return nil, false
		}
		el := time.Since(t)
		b, _ := json.Marshal(res.StructuredContent)
		var sc map[string]any
		json.Unmarshal(b, &sc)
		if res.IsError || (want != "" && sc["outcome"] != want) {
			var text strings.Builder
			for _, c := range res.Content {
				if tc, ok := c.(*mcp.TextContent); ok {
					text.WriteString(tc.Text)
				}
			}
			lr.stats.fail(kind, fmt.Errorf("isError=%v outcome %v: %s", res.IsError, sc["outcome"], text.String()))
			return nil, false
		}
		lr.stats.add(kind, el)
		return sc, true
	}
	sc, ok := call("mcp plan_noop", "plan_noop", map[string]any{"target": "staging", "params": map[string]any{"n": strconv.Itoa(a.n)}}, false, "")
	if !ok {
		return
	}
	b, _ := json.Marshal(sc)
	if a.fp = fpRE.FindString(string(b)); a.fp == "" {
		lr.stats.fail("mcp plan_noop", fmt.Errorf("no fingerprint in %s", b))
		return
	}
	if _, ok := call("mcp wait_for_decision", "wait_for_decision", map[string]any{"fingerprint": a.fp, "timeout_seconds": 150}, true, "approved"); !ok {
		return
	}
	call("mcp run", "run", map[string]any{"fingerprint": a.fp}, false, "ran")
}

type bearerAuth struct {
	token string
	next  http.RoundTripper
}

func (b bearerAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// startLoadService is startService with the lines extra in [service], the
// service's log in dir/serve.log, and its MCP port at addr accepting.
func startLoadService(dir, addr string, extra ...string) ([]string, func()) {
	sock, client := configureService(dir, extra...)
	if os.Geteuid() == 0 {
		os.Chmod(dir, 0o755)
	}
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		fail(err)
	}
	cmd := exec.Command(*bin, "serve", "--config", filepath.Join(dir, "prod-write.toml"))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		fail(err)
	}
	servicePID = cmd.Process.Pid
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		logf.Close()
		servicePID = 0
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		fi, err := os.Stat(sock)
		c, derr := net.DialTimeout("tcp", addr, time.Second)
		if derr == nil {
			c.Close()
		}
		if err == nil && fi.Mode()&os.ModeSocket != 0 && derr == nil {
			break
		}
		if time.Now().After(deadline) {
			stop()
			log, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
			fail(fmt.Errorf("the service did not listen on %s and %s within 10 s:\n%s", sock, addr, log))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return []string{"PROD_WRITE_CONFIG=" + client}, stop
}

// freeLoopback is a free port on 127.0.0.1.
func freeLoopback() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// pct is the p-th percentile of d (nearest rank), 0 when d is empty.
func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p+99)/100 - 1
	return s[max(0, min(i, len(s)-1))].Round(100 * time.Microsecond)
}

// buckets counts d between each edge and the next: "<0 2, 0–10ms 40, …".
func buckets(d []time.Duration, edges ...time.Duration) string {
	n := make([]int, len(edges)+1)
	for _, x := range d {
		i := 0
		for i < len(edges) && x >= edges[i] {
			i++
		}
		n[i]++
	}
	var parts []string
	for i, c := range n {
		if c == 0 {
			continue
		}
		switch {
		case i == 0:
			parts = append(parts, fmt.Sprintf("<%v: %d", edges[0], c))
		case i == len(edges):
			parts = append(parts, fmt.Sprintf("≥%v: %d", edges[i-1], c))
		default:
			parts = append(parts, fmt.Sprintf("%v–%v: %d", edges[i-1], edges[i], c))
		}
	}
	return strings.Join(parts, ", ")
}

func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT MET"
}

// procStatus reads a kB field of /proc/PID/status.
func procStatus(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// rusageCPU is the user and system time of who (RUSAGE_SELF, or the
// children waited for: RUSAGE_CHILDREN).
func rusageCPU(who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sysctl is the value of /proc/sys/NAME, or "?".
func sysctl(name string) string {
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

// procPeak is the largest of each figure sampled of a process.
type procPeak struct {
	rss, fds, threads, inotify int64
	done                       chan struct{}
	wg                         sync.WaitGroup
}

// sampleProc samples pid's resident memory (kB), open descriptors and
// threads every 20 ms until stop, and its inotify instances every 100 ms.
func sampleProc(pid int) *procPeak {
	p := &procPeak{done: make(chan struct{})}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			if v, err := procStatus(pid, "VmRSS"); err == nil {
				p.rss = max(p.rss, v)
			}
			if v, err := procStatus(pid, "Threads"); err == nil {
				p.threads = max(p.threads, v)
			}
			if f, err := os.Open(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
				names, _ := f.Readdirnames(-1)
				f.Close()
				p.fds = max(p.fds, int64(len(names)))
				if n%5 == 0 {
					in := int64(0)
					for _, fd := range names {
						if l, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd)); l == "anon_inode:inotify" {
							in++
						}
					}
					p.inotify = max(p.inotify, in)
				}
			}
			select {
			case <-p.done:
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *procPeak) stop() *procPeak {
	close(p.done)
	p.wg.Wait()
	return p
}

// hostileEnv, set to "ADDR N", makes the bench a process of hostile
// clients only (hostileChild): the attackers are not in the agents'
// process, whose goroutines they would otherwise starve of its share of
// the cores, so the wake the bench measures is the service's.
const hostileEnv = "PROD_WRITE_BENCH_HOSTILE"

// hostileProcess is the hostile clients, run in a process of their own.
type hostileProcess struct {
	cmd   *exec.Cmd
	stdin io.Closer
	out   bytes.Buffer
	got   struct {
		Mix    string   `json:"mix"`
		Report []string `json:"report"`
	}
}

// startHostileProcess starts n hostile clients on addr in a child
// process; ending ctx (or wait) stops them.
func startHostileProcess(ctx context.Context, addr string, n int) *hostileProcess {
	self, err := os.Executable()
	if err != nil {
		fail(err)
	}
	h := &hostileProcess{cmd: exec.Command(self)}
	h.cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d", hostileEnv, addr, n))
	h.cmd.Stdout, h.cmd.Stderr = &h.out, os.Stderr
	stdin, err := h.cmd.StdinPipe()
	if err != nil {
		fail(err)
	}
	h.stdin = stdin
	if err := h.cmd.Start(); err != nil {
		fail(err)
	}
	context.AfterFunc(ctx, func() { stdin.Close() })
	return h
}

// wait stops the clients and reads their report.
func (h *hostileProcess) wait() {
	h.stdin.Close()
	if err := h.cmd.Wait(); err != nil {
		fail(fmt.Errorf("the hostile clients' process: %w", err))
	}
	if err := json.Unmarshal(h.out.Bytes(), &h.got); err != nil {
		fail(fmt.Errorf("the hostile clients' report %q: %w", h.out.String(), err))
	}
}

func (h *hostileProcess) mix() string { return h.got.Mix }

// cpu is the CPU time the hostile clients' process spent, once it ended.
func (h *hostileProcess) cpu() time.Duration {
	return h.cmd.ProcessState.UserTime() + h.cmd.ProcessState.SystemTime()
}

func (h *hostileProcess) report() []string { return h.got.Report }

// hostileChild is the process of hostile clients: they run until its
// stdin closes, then it prints their report as JSON and exits.
func hostileChild(spec string) {
	var addr string
	var n int
	if _, err := fmt.Sscanf(spec, "%s %d", &addr, &n); err != nil {
		fail(fmt.Errorf("%s=%q: %w", hostileEnv, spec, err))
	}
	ctx, stop := context.WithCancel(context.Background())
	h := startHostile(ctx, addr, n)
	io.Copy(io.Discard, os.Stdin)
	stop()
	h.wait()
	b, err := json.Marshal(map[string]any{"mix": h.mix(), "report": h.report()})
	if err != nil {
		fail(err)
	}
	os.Stdout.Write(b)
	os.Exit(0)
}

// The hostile clients' kinds.
const (
	slowHeader = iota // a request header sent a byte at a time, never ended
	slowBody          // a request whose body comes a byte at a time
	idleAfter         // one request (a junk token), then the connection held idle
	junkToken         // requests with junk bearer tokens, as fast as answered
	hostileKinds
)

var hostileNames = [hostileKinds]string{"slow header", "slow body", "idle after a request", "junk token"}

type hostileKind struct {
	clients   int
	conns     atomic.Int64 // connections made
	dialErrs  atomic.Int64
	requests  atomic.Int64
	errs      atomic.Int64
	mu        sync.Mutex
	holds     []time.Duration // how long the service let a slow connection stand
	open      []time.Duration // how long those still open at the end had stood
	statuses  map[int]int
	firstErr  string
	startedAt time.Time
	endedAt   time.Time
}

type hostileSet struct {
	kinds [hostileKinds]*hostileKind
	wg    sync.WaitGroup
}

// startHostile starts n hostile clients on addr until ctx ends: half junk
// tokens, the other half the three slow kinds in turn.
func startHostile(ctx context.Context, addr string, n int) *hostileSet {
	h := &hostileSet{}
	for k := range h.kinds {
		h.kinds[k] = &hostileKind{statuses: map[int]int{}, startedAt: time.Now()}
	}
	for i := 0; i < n; i++ {
		k := junkToken
		if i%2 == 0 {
			k = (i / 2) % 3
		}
		hk := h.kinds[k]
		hk.clients++
		local := net.IPv4(127, 2, byte(i/250), byte(i%250+1))
		h.wg.Add(1)
		go func() {
			defer h.wg.Done()
			if k == junkToken {
				junkClient(ctx, addr, local, hk)
			} else {
				slowClient(ctx, addr, local, k, hk)
			}
		}()
	}
	return h
}

func (h *hostileSet) wait() {
	h.wg.Wait()
	for _, k := range h.kinds {
		k.endedAt = time.Now()
	}
}

func (h *hostileSet) mix() string {
	var parts []string
	for k, hk := range h.kinds {
		parts = append(parts, fmt.Sprintf("%d %s", hk.clients, hostileNames[k]))
	}
	return strings.Join(parts, ", ")
}

func (h *hostileSet) report() []string {
	var out []string
	for k, hk := range h.kinds {
		if hk.clients == 0 {
			continue
		}
		hk.mu.Lock()
		s := fmt.Sprintf("%s (%d clients): %d connections", hostileNames[k], hk.clients, hk.conns.Load())
		if len(hk.holds) > 0 {
			s += fmt.Sprintf(", each closed by the service after p50 %v, max %v", pct(hk.holds, 50).Round(10*time.Millisecond), pct(hk.holds, 100).Round(10*time.Millisecond))
		}
		if len(hk.open) > 0 {
			s += fmt.Sprintf(", %d still open at the end (after p50 %v, max %v)", len(hk.open), pct(hk.open, 50).Round(10*time.Millisecond), pct(hk.open, 100).Round(10*time.Millisecond))
		}
		if r := hk.requests.Load(); r > 0 {
			s += fmt.Sprintf(", %d requests (%.0f/s)", r, float64(r)/hk.endedAt.Sub(hk.startedAt).Seconds())
		}
		if len(hk.statuses) > 0 {
			codes := slices.Sorted(func(yield func(int) bool) {
				for c := range hk.statuses {
					if !yield(c) {
						return
					}
				}
			})
			var cs []string
			for _, c := range codes {
				cs = append(cs, fmt.Sprintf("%d×%d", c, hk.statuses[c]))
			}
			s += ", answered " + strings.Join(cs, " ")
		}
		if e := hk.errs.Load() + hk.dialErrs.Load(); e > 0 {
			s += fmt.Sprintf(", %d errors (first: %s)", e, hk.firstErr)
		}
		hk.mu.Unlock()
		out = append(out, s)
	}
	return out
}

func (hk *hostileKind) noteErr(err error) {
	hk.errs.Add(1)
	hk.mu.Lock()
	if hk.firstErr == "" {
		hk.firstErr = err.Error()
	}
	hk.mu.Unlock()
}

// junkRequest is an MCP initialize, as a client sends it first.
const junkRequest = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"hostile","version":"0"}}}`

// junkClient sends initialize with a new junk bearer token each time, on
// a kept-alive connection, as fast as it is answered.
func junkClient(ctx context.Context, addr string, local net.IP, hk *hostileKind) {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, network, a string) (net.Conn, error) {
			c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: local}, Timeout: 10 * time.Second}).DialContext(ctx, network, a)
			if err == nil {
				hk.conns.Add(1)
			}
			return c, err
		},
		MaxIdleConnsPerHost: 1,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	for n := 0; ctx.Err() == nil; n++ {
		req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/mcp", strings.NewReader(junkRequest))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer junk-"+rand.Text())
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				hk.noteErr(err)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		hk.requests.Add(1)
		hk.mu.Lock()
		hk.statuses[resp.StatusCode]++
		hk.mu.Unlock()
	}
}

// slowClient holds connections the slow way of kind k, one after another:
// each until the service closes it.
func slowClient(ctx context.Context, addr string, local net.IP, k int, hk *hostileKind) {
	// Spread the first connections over a second.
	select {
	case <-time.After(time.Duration(mrand.IntN(1000)) * time.Millisecond):
	case <-ctx.Done():
		return
	}
	for ctx.Err() == nil {
		c, err := (&net.Dialer{LocalAddr: &net.TCPAddr{IP: local}, Timeout: 10 * time.Second}).DialContext(ctx, "tcp", addr)
		if err != nil {
			if ctx.Err() == nil {
				hk.dialErrs.Add(1)
				hk.mu.Lock()
				if hk.firstErr == "" {
					hk.firstErr = err.Error()
				}
				hk.mu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
			continue
		}
		hk.conns.Add(1)
		t := time.Now()
		closed := make(chan struct{})
		var answer bytes.Buffer
		go func() {
			io.Copy(&answer, c) // the service's answer, if any, until it closes
			close(closed)
		}()
		var head, trickle string
		switch k {
		case slowHeader:
			trickle = "POST /mcp HTTP/1.1\r\nHost: " + addr + "\r\nX-Slow: " + strings.Repeat("a", 1<<16)
		case slowBody:
			head = "POST /mcp HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer junk-" + rand.Text() +
				"\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 65536\r\n\r\n"
			trickle = junkRequest + strings.Repeat(" ", 65536-len(junkRequest))
		case idleAfter:
			head = fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer junk-%s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s",
				addr, rand.Text(), len(junkRequest), junkRequest)
		}
		if head != "" {
			c.Write([]byte(head))
		}
		tick := time.NewTicker(250 * time.Millisecond)
		i := 0
	hold:
		for {
			select {
			case <-ctx.Done():
				tick.Stop()
				hk.mu.Lock()
				hk.open = append(hk.open, time.Since(t))
				hk.mu.Unlock()
				c.Close()
				<-closed
				return
			case <-closed:
				break hold
			case <-tick.C:
				if i < len(trickle) {
					if _, err := c.Write([]byte{trickle[i]}); err != nil {
						break hold
					}
					i++
				}
			}
		}
		tick.Stop()
		held := time.Since(t)
		c.Close()
		<-closed
		hk.mu.Lock()
		hk.holds = append(hk.holds, held)
		if code := statusOf(answer.Bytes()); code != 0 {
			hk.statuses[code]++
			hk.requests.Add(1)
		}
		hk.mu.Unlock()
	}
}

// statusOf is the status code of the first HTTP response in b, or 0.
func statusOf(b []byte) int {
	line, _, _ := bytes.Cut(b, []byte("\r\n"))
	f := strings.Fields(string(line))
	if len(f) < 2 || !strings.HasPrefix(f[0], "HTTP/") {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}
