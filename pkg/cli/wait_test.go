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
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/service"
)

// A wait says once that it waits: a client of the service asking again
// after the service's bounded wait ran out (Resumed) has said it already.
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
	for _, tc := range []struct {
		resumed bool
		want    int // "waiting" lines
	}{
		{false, 1},
		{true, 0},
	} {
		var stdout, stderr bytes.Buffer
		f := &Factory{
			IO:        &IOStreams{In: strings.NewReader(""), Out: &stdout, Err: &stderr},
			Now:       time.Now,
			LookupEnv: func(string) (string, bool) { return "", false },
			Getwd:     func() (string, error) { return h.dir, nil },
		}
		err := statusWaitRun(&StatusOptions{F: f, Fingerprint: fp, Wait: true, Timeout: "100ms", Resumed: tc.resumed}, operations.HashDigester{})
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != ExitTimeout {
			t.Fatalf("resumed %v: %v, want the wait's timeout; stderr %s", tc.resumed, err, &stderr)
		}
		if got := strings.Count(stderr.String(), "prod-write: waiting for a decision on req-"); got != tc.want {
			t.Errorf("resumed %v: %d waiting lines, want %d:\n%s", tc.resumed, got, tc.want, &stderr)
		}
	}
}

// statusHandler answers status calls as a service whose bounded waits run
// out a number of times before the decision lands, and records each
// call's arguments.
type statusHandler struct {
	mu      sync.Mutex
	args    []string
	timeout int // calls to answer as a wait that ran out
}

func (s *statusHandler) Serve(_ context.Context, c *service.Call) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.args = append(s.args, string(c.Request.Args))
	if len(s.args) <= s.timeout {
		return ExitTimeout
	}
	return 0
}

// The client of the service asks again when a bounded wait ran out, and
// marks the calls after the first as Resumed, so that the service does not
// say again that it waits.
func TestWaitClientAsksAgainResumed(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	l, err := service.Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	h := &statusHandler{timeout: 2}
	srv := &service.Server{Handler: h}
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
	// No stdin: a reader that is not a file is copied into a pipe by each
	// call, and the calls of one wait would share it.
	f.IO.In = nil
	if code := Run([]string{"status", "sha256:" + strings.Repeat("0", 64), "--wait"}, f); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.args) != 3 {
		t.Fatalf("%d calls, want 3: %q", len(h.args), h.args)
	}
	for i, a := range h.args {
		var o StatusOptions
		if err := json.Unmarshal([]byte(a), &o); err != nil {
			t.Fatal(err)
		}
		if want := i > 0; o.Resumed != want || !o.Wait {
			t.Errorf("call %d: %s, want wait and resumed %v", i, a, want)
		}
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
	var o StatusOptions
	json.Unmarshal(c.Request.Args, &o)
	if !o.Wait {
		// A typed status (pkg/api): the plan's request is pending.
		c.Reply([]byte(`{"result":{"fingerprint":"` + o.Fingerprint + `","request":{"state":"pending"}}}`))
		return 0
	}
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
	srv := &service.Server{Handler: h}
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
	b := newMCPBackend(f)
	if !b.remote {
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
	<-h.started
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
	old := watchFallback
	watchFallback = time.Hour
	t.Cleanup(func() { watchFallback = old })
	cfg, err := config.Load(filepath.Join(h.dir, "prod-write.toml"))
	if err != nil {
		t.Fatal(err)
	}
	st := &serviceState{cfg: cfg, log: log.New(io.Discard, "", 0)}
	if err := st.load(); err != nil {
		t.Fatal(err)
	}
	f := &Factory{
		IO: &IOStreams{Out: io.Discard, Err: io.Discard}, Now: time.Now,
		LookupEnv: func(string) (string, bool) { return "", false },
		Getwd:     func() (string, error) { return h.dir, nil },
		call:      &serviceCall{svc: st, files: map[string]*os.File{}, cwdPath: h.dir},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waiting := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		_, err := waitDecision(ctx, f, fp, time.Time{}, operations.HashDigester{}, func(*statusReport) {
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
	if err := st.load(); err != nil {
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
