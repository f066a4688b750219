package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prod-write/prod-write/operations"
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
