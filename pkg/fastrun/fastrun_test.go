package fastrun

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/service"
)

func TestParseRun(t *testing.T) {
	fp := "sha256:abc"
	for _, tc := range []struct {
		args []string
		ok   bool
		want Line
	}{
		{[]string{"run", fp}, true, Line{Fingerprint: fp}},
		{[]string{"run", fp, "--json"}, true, Line{Fingerprint: fp, JSON: true}},
		{[]string{"--json", "run", fp}, true, Line{Fingerprint: fp, JSON: true}},
		{[]string{"run", "--json=false", fp}, true, Line{Fingerprint: fp}},
		{[]string{"--config", "c.toml", "run", fp, "--key=k"}, true, Line{Fingerprint: fp, Config: "c.toml", Key: "k"}},
		{[]string{"run", fp, "--config=", "--key", "--json"}, true, Line{Fingerprint: fp, Key: "--json"}},
		{[]string{"run"}, false, Line{}},
		{[]string{"run", fp, "extra"}, false, Line{}},
		{[]string{"plan", "x"}, false, Line{}},
		{[]string{"help", "run"}, false, Line{}},
		{[]string{"run", fp, "-h"}, false, Line{}},
		{[]string{"run", fp, "--help"}, false, Line{}},
		{[]string{"run", "--", fp}, false, Line{}},
		{[]string{"run", fp, "--json=1"}, false, Line{}},
		{[]string{"run", fp, "--key"}, false, Line{}},
		{[]string{"run", fp, "--verbose"}, false, Line{}},
		{[]string{"-j", "run", fp}, false, Line{}},
	} {
		got, ok := ParseRun(tc.args)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("ParseRun(%q) = %+v, %v; want %+v, %v", tc.args, got, ok, tc.want, tc.ok)
		}
	}
}

// recorder is a runner service that records each call and answers with
// code, or, when hangUp is set, closes the connection without an answer.
type recorder struct {
	mu     sync.Mutex
	calls  []*service.Call
	code   int
	hangUp bool
}

func (r *recorder) Serve(ctx context.Context, c *service.Call) int {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
	fmt.Fprintf(c.Output(1), "ran %s\n", c.Request.Args)
	if r.hangUp {
		panic("hang up") // the server logs it and answers internal error
	}
	if c.Request.API != 0 {
		c.Reply(fmt.Appendf(nil, `{"result":{"outcome":"ran","exit_code":%d}}`, r.code))
	}
	return r.code
}

type world struct {
	dir, sock string
	env       Env
	out, errb *os.File
	answers   []string // the typed answers Env.Answer rendered
}

// newWorld makes a working directory with a client configuration naming
// sock, and an Env whose streams are files in it.
func newWorld(t *testing.T, config string) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{dir: dir, sock: filepath.Join(dir, "s.sock")}
	if config != "" {
		cfg := strings.ReplaceAll(config, "SOCK", w.sock)
		if err := os.WriteFile(filepath.Join(dir, "prod-write.toml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var err error
	if w.out, err = os.Create(filepath.Join(dir, "stdout")); err != nil {
		t.Fatal(err)
	}
	if w.errb, err = os.Create(filepath.Join(dir, "stderr")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.out.Close(); w.errb.Close() })
	w.env = Env{
		LookupEnv: func(string) (string, bool) { return "", false },
		Getwd:     func() (string, error) { return dir, nil },
		Stdout:    w.out,
		Stderr:    w.errb,
		// As pkg/cli's: the exit status the answer's result says.
		Answer: func(body []byte, asJSON, errTTY bool, stderr io.Writer) int {
			w.answers = append(w.answers, string(body))
			var a struct {
				Result struct {
					ExitCode int `json:"exit_code"`
				} `json:"result"`
			}
			if err := json.Unmarshal(body, &a); err != nil {
				return -1
			}
			return a.Result.ExitCode
		},
	}
	return w
}

func (w *world) serve(t *testing.T, h service.Handler) {
	t.Helper()
	l, err := service.Listen(w.sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &service.Server{Handler: h, Ops: []string{api.CallRun.Op}}
	done := make(chan struct{})
	go func() { srv.Serve(ctx, l); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (w *world) read(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(w.dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The call fastrun makes is the one the command tree's client makes: op
// run typed (api.Version), the request as {"fingerprint"}, --json, and the caller's streams,
// working directory and key as descriptors, in that order; its streams
// stay its own, and what the service sends for stdout reaches them.
func TestTryCallsTheService(t *testing.T) {
	w := newWorld(t, "[service]\nsocket = \"SOCK\"\n")
	key := filepath.Join(w.dir, "agent.key")
	os.WriteFile(key, []byte("not read here"), 0o600)
	rec := &recorder{code: 3}
	w.serve(t, rec)
	w.env.Args = []string{"run", "sha256:abc", "--json", "--key", key}
	code, ok := Try(w.env)
	if !ok || code != 3 {
		t.Fatalf("Try = %d, %v; want the service's 3, true", code, ok)
	}
	if len(rec.calls) != 1 {
		t.Fatalf("%d calls", len(rec.calls))
	}
	req := rec.calls[0].Request
	var args map[string]any
	if err := json.Unmarshal(req.Args, &args); err != nil || len(args) != 1 || args["fingerprint"] != "sha256:abc" {
		t.Fatalf("args %s", req.Args)
	}
	if req.Op != "run" || req.API != api.Version || !req.JSON || !slices.Equal(req.FDs, []string{"cwd", "key"}) {
		t.Fatalf("request %+v", req)
	}
	if len(w.answers) != 1 {
		t.Fatalf("the typed answer was rendered %d times: %q", len(w.answers), w.answers)
	}
	if got := w.read(t, "stdout"); got != "ran {\"fingerprint\":\"sha256:abc\"}\n" {
		t.Fatalf("the service's output did not reach the caller's stdout: %q", got)
	}
}

// Whatever fastrun cannot finish before sending is the command tree's, and
// fastrun says nothing: the tree then prints what it always printed.
func TestTryDeclines(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		args   []string
		serve  service.Handler
	}{
		{"another command", "[service]\nsocket = \"SOCK\"\n", []string{"status", "sha256:abc"}, &recorder{}},
		{"no configuration", "", []string{"run", "sha256:abc"}, nil},
		{"a broken configuration", "[service\n", []string{"run", "sha256:abc"}, nil},
		{"local mode", "registry = \"operations\"\n", []string{"run", "sha256:abc"}, nil},
		{"no service listening", "[service]\nsocket = \"SOCK\"\n", []string{"run", "sha256:abc"}, nil},
		{"a key that cannot be opened", "[service]\nsocket = \"SOCK\"\n", []string{"run", "sha256:abc", "--key", "/nonexistent/key"}, &recorder{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, tc.config)
			if tc.serve != nil {
				w.serve(t, tc.serve)
			}
			w.env.Args = tc.args
			if code, ok := Try(w.env); ok {
				t.Fatalf("Try took the line (exit %d)", code)
			}
			if r, ok := tc.serve.(*recorder); ok && len(r.calls) != 0 {
				t.Fatalf("the service got %d calls", len(r.calls))
			}
			if out, errs := w.read(t, "stdout"), w.read(t, "stderr"); out != "" || errs != "" {
				t.Fatalf("printed %q / %q", out, errs)
			}
		})
	}
}

// A service too busy to take the call answers before running anything:
// the line goes back to the command tree, which asks again.
func TestTryBusyIsDeclined(t *testing.T) {
	w := newWorld(t, "[service]\nsocket = \"SOCK\"\n")
	l, err := service.Listen(w.sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.AcceptUnix()
		if err != nil {
			return
		}
		conn := service.NewConn(c)
		conn.Recv()
		conn.Send(service.Failure{T: "failure", Code: service.CodeBusy, Error: "too many calls"})
		conn.Close()
	}()
	w.env.Args = []string{"run", "sha256:abc"}
	if code, ok := Try(w.env); ok {
		t.Fatalf("a busy answer was taken as the run's end (exit %d)", code)
	}
}

// Once the request is sent the run may have happened: a service that
// drops the call is reported, never asked again.
func TestTrySentIsNeverRepeated(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		w := newWorld(t, "[service]\nsocket = \"SOCK\"\n")
		l, err := service.Listen(w.sock, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan struct{}, 2)
		go func() {
			for {
				c, err := l.AcceptUnix()
				if err != nil {
					return
				}
				conn := service.NewConn(c)
				conn.Recv()
				got <- struct{}{}
				conn.Close()
			}
		}()
		w.env.Args = []string{"run", "sha256:abc"}
		if asJSON {
			w.env.Args = append(w.env.Args, "--json")
		}
		code, ok := Try(w.env)
		l.Close()
		if !ok || code != exitSoftware {
			t.Fatalf("json %v: Try = %d, %v; want %d, true", asJSON, code, ok, exitSoftware)
		}
		if len(got) != 1 {
			t.Fatalf("json %v: the service got %d requests", asJSON, len(got))
		}
		errs := w.read(t, "stderr")
		if asJSON {
			var m map[string]any
			if err := json.Unmarshal([]byte(errs), &m); err != nil || m["outcome"] != "error" || m["code"] != "internal" || m["exit_code"] != float64(exitSoftware) {
				t.Fatalf("stderr %q", errs)
			}
		} else if !strings.HasPrefix(errs, "prod-write: error: ") || strings.Count(errs, "\n") != 1 {
			t.Fatalf("stderr %q", errs)
		}
	}
}
