package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/plans"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/service"
	"github.com/prod-write/prod-write/pkg/servicecall"
)

// A wait says once that it waits, however often it judges again.
func TestWaitSaysOnceThatItWaits(t *testing.T) {
	h := newRunHarness(t)
	op := `
[[operation]]
name = "noop"
description = "does nothing"
program = "true"
targets = ["staging"]
[operation.approval]
paths = ["record+approvals"]
`
	if err := os.WriteFile(filepath.Join(h.dir, "operations", "noop.toml"), []byte(op), 0o644); err != nil {
		t.Fatal(err)
	}
	fp := h.plan("noop")
	if code, _, stderr := h.run("file", fp, "--key", h.key("smith"), "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high"); code != 0 {
		t.Fatal(stderr)
	}
	// Judged again at least every 10 ms, so a wait of 300 ms judges many
	// times.
	defer func(d time.Duration) { plans.WatchFallback = d }(plans.WatchFallback)
	plans.WatchFallback = 10 * time.Millisecond
	var stdout, stderr bytes.Buffer
	f := &Factory{Env: localapi.Env{
		IO:        &IOStreams{In: strings.NewReader(""), Out: &stdout, Err: &stderr},
		Now:       time.Now,
		LookupEnv: func(string) (string, bool) { return "", false },
		Getwd:     func() (string, error) { return h.dir, nil },
	}}
	judged := 0
	r, err := localapi.API{Env: &f.Env}.Wait(context.Background(), api.WaitRequest{Fingerprint: fp, Timeout: 300 * time.Millisecond, Progress: func(*api.StatusResult) { judged++ }})
	if err != nil || !r.Pending {
		t.Fatalf("wait: %+v, %v; want it still pending", r, err)
	}
	if judged < 2 {
		t.Fatalf("judged %d times while waiting, want several", judged)
	}
	err = statusWait(&StatusOptions{F: f, Fingerprint: fp, Wait: true, Timeout: "300ms"})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitTimeout {
		t.Fatalf("%v, want the wait's timeout; stderr %s", err, &stderr)
	}
	if got := strings.Count(stderr.String(), "prod-write: waiting for a decision on req-"); got != 1 {
		t.Errorf("%d waiting lines, want 1:\n%s", got, &stderr)
	}
}

// pendingStatus is the typed status of a plan whose request waits on a
// human; allowedStatus one whose gate opened.
func pendingStatus(fp string) string {
	return `{"fingerprint":"` + fp + `","refusal":{"code":"no_approval","reason":"r"},"request":{"id":"req-1","state":"pending","missing":["an approval"]}}`
}

func allowedStatus(fp string) string {
	return `{"fingerprint":"` + fp + `","allowed":true}`
}

// statusHandler answers a typed status with a pending plan, and typed
// waits as a service whose bounded waits run out a number of times before
// the decision lands; it records each wait's arguments.
type statusHandler struct {
	mu      sync.Mutex
	args    []string
	timeout int // waits to answer as pending
}

func (s *statusHandler) Serve(_ context.Context, c *service.Call) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r struct{ Fingerprint string }
	json.Unmarshal(c.Request.Args, &r)
	switch c.Request.Op {
	case "status":
		c.Reply([]byte(`{"result":` + pendingStatus(r.Fingerprint) + `}`))
	case "status-wait":
		c.Hold()
		s.args = append(s.args, string(c.Request.Args))
		if len(s.args) <= s.timeout {
			c.Reply([]byte(`{"result":{"status":` + pendingStatus(r.Fingerprint) + `,"pending":true}}`))
		} else {
			c.Reply([]byte(`{"result":{"status":` + allowedStatus(r.Fingerprint) + `,"pending":false}}`))
		}
	default:
		return ExitUsage
	}
	return 0
}

// The client of the service asks again when a bounded wait ran out, each
// time for at most the service's bound, and says once that it waits.
func TestWaitClientAsksAgain(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	l, err := service.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	h := &statusHandler{timeout: 2}
	srv := &service.Server{Handler: h, Ops: api.Ops()}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	defer func() { cancel(); <-done }()
	cfg := filepath.Join(dir, "client.toml")
	if err := os.WriteFile(cfg, []byte("[service]\nsocket = \""+sock+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _, stderr := testFactory(t, dir)
	f.LookupEnv = func(k string) (string, bool) { return cfg, k == "PROD_WRITE_CONFIG" }
	f.IO.In = nil
	if code := Run([]string{"status", "sha256:" + strings.Repeat("0", 64), "--wait", "--json"}, f); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.args) != 3 {
		t.Fatalf("%d waits, want 3: %q", len(h.args), h.args)
	}
	for i, a := range h.args {
		var r api.WaitRequest
		if err := json.Unmarshal([]byte(a), &r); err != nil {
			t.Fatal(err)
		}
		if r.Timeout != localapi.ServiceWaitMax {
			t.Errorf("wait %d: %s, want one of the service's bound, %v", i, a, localapi.ServiceWaitMax)
		}
	}
	if got := strings.Count(stderr.String(), "prod-write: waiting for a decision on req-1"); got != 1 {
		t.Errorf("%d waiting lines, want 1:\n%s", got, stderr)
	}
}

// waitingHandler is a service whose status --wait calls wait until their
// client goes (or a long while), and whose plain status calls answer a
// report at once.
type waitingHandler struct {
	started chan struct{}
	ended   chan string
}

func (h *waitingHandler) Serve(_ context.Context, c *service.Call) int {
	var r struct{ Fingerprint string }
	json.Unmarshal(c.Request.Args, &r)
	if c.Request.Op != "status-wait" {
		// A typed status (pkg/api): the plan's request is pending.
		c.Reply([]byte(`{"result":` + pendingStatus(r.Fingerprint) + `}`))
		return 0
	}
	c.Hold()
	h.started <- struct{}{}
	select {
	case <-c.Gone():
		h.ended <- "the client went"
	case <-time.After(20 * time.Second): // a generous bound: it ends at once
		h.ended <- "still waiting after 20 s"
	}
	return ExitTimeout
}

// An MCP request to wait, through the service, that is cancelled ends its
// call in the service at once (the client closes the connection, and the
// service sees it go), not when the slice it asked for runs out; the tool
// ends pending, with the plan's status.
func TestMCPRemoteWaitCancelledEndsItsCall(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	l, err := service.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	h := &waitingHandler{started: make(chan struct{}, 1), ended: make(chan string, 1)}
	srv := &service.Server{Handler: h, Ops: api.Ops()}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	defer func() { stop(); <-done }()
	cfg := filepath.Join(dir, "client.toml")
	if err := os.WriteFile(cfg, []byte("[service]\nsocket = \""+sock+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, _, _ := testFactory(t, dir)
	f.LookupEnv = func(k string) (string, bool) { return cfg, k == "PROD_WRITE_CONFIG" }
	b := localapi.NewMCPBackend(&f.Env)
	if !b.Remote() {
		t.Fatal("the backend is not the service's client")
	}
	type result struct {
		report  any
		pending bool
		err     error
	}
	got := make(chan result, 1)
	req, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		report, _, pending, err := b.Wait(req, "sha256:"+strings.Repeat("0", 64), time.Hour, func(string) {})
		got <- result{report, pending, err}
	}()
	select {
	case <-h.started:
	case r := <-got:
		t.Fatalf("Wait ended before it waited in the service: %+v (%v)", r, r.err)
	}
	cancel()
	if e := <-h.ended; e != "the client went" {
		t.Fatalf("the service's call: %s, want it to see its client go", e)
	}
	r := <-got
	if r.err != nil || !r.pending {
		t.Fatalf("Wait: pending %v, %v; want pending", r.pending, r.err)
	}
	if b, _ := json.Marshal(r.report); !strings.Contains(string(b), `"pending"`) {
		t.Fatalf("Wait's report %s, want the plan's status", b)
	}
}

// A wait in the runner service goes on through a reload (SIGHUP) and
// judges again at once, by the policy and registry loaded: here the
// operation is gone from the new registry, and the wait ends with that
// refusal. Nothing changes in the store and the fallback wake is an hour
// away: only the reload wakes it.
func TestServiceWaitJudgesAgainOnReload(t *testing.T) {
	h := newRunHarness(t)
	opPath := filepath.Join(h.dir, "operations", "noop.toml")
	op := `
[[operation]]
name = "noop"
description = "does nothing"
program = "true"
targets = ["staging"]
run_as = "nobody"
cwd = "/"
[operation.approval]
paths = ["record+approvals"]
`
	if err := os.WriteFile(opPath, []byte(op), 0o644); err != nil {
		t.Fatal(err)
	}
	fp := h.plan("noop")
	if code, _, stderr := h.run("file", fp, "--key", h.key("smith"), "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high"); code != 0 {
		t.Fatal(stderr)
	}
	old := plans.WatchFallback
	plans.WatchFallback = time.Hour
	t.Cleanup(func() { plans.WatchFallback = old })
	cfg, err := config.Load(filepath.Join(h.dir, "prod-write.toml"))
	if err != nil {
		t.Fatal(err)
	}
	st := &servicecall.State{Cfg: cfg, Log: log.New(io.Discard, "", 0)}
	if err := st.Load(); err != nil {
		t.Fatal(err)
	}
	f := &Factory{Env: localapi.Env{
		IO: &IOStreams{Out: io.Discard, Err: io.Discard}, Now: time.Now,
		LookupEnv: func(string) (string, bool) { return "", false },
		Getwd:     func() (string, error) { return h.dir, nil },
		Call:      &servicecall.Call{State: st, Files: map[string]*os.File{}, CwdPath: h.dir},
	}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		_, err := plans.Wait(ctx, f.Plans(), fp, time.Time{}, operations.HashDigester{}, func(*plans.Report) {
			select {
			case waiting <- struct{}{}:
			default:
			}
		})
		done <- err
	}()
	<-waiting
	if err := os.Remove(opPath); err != nil {
		t.Fatal(err)
	}
	if err := st.Load(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !refusal.Is(err, refusal.OperationAbsent) {
			t.Fatalf("the wait ended with %v, want operation_absent", err)
		}
	case <-time.After(15 * time.Second): // a generous bound: it ends at once
		t.Fatal("the wait did not judge again when the service reloaded")
	}
}
