package service

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// replyHandler answers a typed call with what it was handed: the
// descriptors' names and the bytes of each file:, or, for op "mute",
// when the request is "mute", no reply at all and exit 70.
type replyHandler struct{ calls atomic.Int64 }

func (h *replyHandler) Serve(ctx context.Context, c *Call) int {
	h.calls.Add(1)
	if string(c.Request.Args) == `"mute"` {
		return 70
	}
	got := map[string]any{"op": c.Request.Op, "api": c.Request.API, "args": string(c.Request.Args)}
	var names []string
	files := map[string]string{}
	for _, n := range c.Request.FDs {
		names = append(names, n)
		if strings.HasPrefix(n, "file:") || n == "key" {
			b, _ := io.ReadAll(c.Files[n])
			files[n] = string(b)
		}
	}
	got["fds"], got["files"] = names, files
	b, _ := json.Marshal(got)
	if err := c.Reply(b); err != nil {
		return 70
	}
	return 0
}

// The socket client hands over the caller's directory, key and named
// files as descriptors it opened, in a fixed order, and says which of the
// caller's inputs failed by type, before it connects: a key or file it
// cannot open is never replaced by anything, and nothing is sent.
func TestAPICall(t *testing.T) {
	h := &replyHandler{}
	sock := startServer(t, h, nil)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key, a, b := write("agent.key", "KEY"), write("a", "AAA"), write("b", "BBB")
	base := APICall{Socket: sock, Op: "plan", API: 3, Args: map[string]int{"n": 1}, Cwd: dir, Stdout: io.Discard, Stderr: io.Discard}

	t.Run("round trip", func(t *testing.T) {
		c := base
		c.Key = key
		c.Files = []HandOver{{Name: "file:b", Path: b}, {Name: "file:a", Path: a}}
		body, err := c.Do(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Op    string            `json:"op"`
			API   int               `json:"api"`
			Args  string            `json:"args"`
			FDs   []string          `json:"fds"`
			Files map[string]string `json:"files"`
		}
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if got.Op != "plan" || got.API != 3 || got.Args != `{"n":1}` {
			t.Errorf("request %+v", got)
		}
		if strings.Join(got.FDs, ",") != "cwd,key,file:a,file:b" {
			t.Errorf("descriptors %v; want cwd, key, then the files in name order", got.FDs)
		}
		if got.Files["key"] != "KEY" || got.Files["file:a"] != "AAA" || got.Files["file:b"] != "BBB" {
			t.Errorf("files %v", got.Files)
		}
	})

	before := h.calls.Load()
	for _, tc := range []struct {
		name  string
		tune  func(*APICall)
		check func(error) bool
	}{
		{"no service", func(c *APICall) { c.Socket = filepath.Join(dir, "none.sock") }, func(err error) bool {
			var e *UnreachableError
			return errors.As(err, &e) && strings.HasSuffix(e.Socket, "none.sock")
		}},
		{"a key that cannot be opened", func(c *APICall) { c.Key = filepath.Join(dir, "nokey") }, func(err error) bool {
			var e *OpenError
			return errors.As(err, &e) && e.Name == "key" && errors.Is(err, os.ErrNotExist)
		}},
		{"a file that cannot be opened", func(c *APICall) { c.Files = []HandOver{{Name: "file:x", Path: filepath.Join(dir, "nofile")}} }, func(err error) bool {
			var e *OpenError
			return errors.As(err, &e) && e.Name == "file:x"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.tune(&c)
			body, err := c.Do(context.Background())
			if err == nil || !tc.check(err) {
				t.Fatalf("got %q, %v", body, err)
			}
		})
	}
	if n := h.calls.Load() - before; n != 0 {
		t.Errorf("%d calls reached the service; a call whose inputs failed sends nothing", n)
	}

	t.Run("no typed reply", func(t *testing.T) {
		c := base
		c.Args = "mute"
		_, err := c.Do(context.Background())
		var e *UnansweredError
		if !errors.As(err, &e) || e.Code != 70 {
			t.Fatalf("got %v; want the call's exit status", err)
		}
	})
}

// A call answered busy took no slot of the service: the client asks
// again, with pauses, for up to BusyRetry, and only then is the busy
// answer the call's. Any other answer ends the call at once.
func TestAPICallAsksAgainWhenBusy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		busyFirst int // connections answered busy before one answered otherwise
		want      Code
		attempts  func(int) bool
	}{
		{"busy twice, then answered", 2, CodeBadRequest, func(n int) bool { return n == 3 }},
		{"busy throughout", 1 << 30, CodeBusy, func(n int) bool { return n > 1 }},
		{"answered at once", 0, CodeBadRequest, func(n int) bool { return n == 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			was := [3]time.Duration{BusyPause, BusyPauseMax, BusyRetry}
			BusyPause, BusyPauseMax, BusyRetry = time.Millisecond, 5*time.Millisecond, 300*time.Millisecond
			t.Cleanup(func() { BusyPause, BusyPauseMax, BusyRetry = was[0], was[1], was[2] })
			dir := t.TempDir()
			sock := filepath.Join(dir, "s.sock")
			ln, err := Listen(sock, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			var accepted atomic.Int64
			go func() {
				for {
					c, err := ln.AcceptUnix()
					if err != nil {
						return
					}
					if n := accepted.Add(1); int(n) <= tc.busyFirst {
						// Once the request is in, as a full pool answers
						// (an answer at accept may race the request in).
						NewConn(c).Recv()
						busy(c, "too many calls; try again")
						continue
					}
					conn := NewConn(c)
					conn.Recv()
					conn.SendWithin(time.Second, Failure{T: "failure", Code: CodeBadRequest, Error: "not this"})
					conn.Close()
				}
			}()
			_, err = APICall{Socket: sock, Op: "plan", API: 1, Cwd: dir, Stdout: io.Discard, Stderr: io.Discard}.Do(context.Background())
			var f *Error
			if !errors.As(err, &f) || f.Code != tc.want {
				t.Fatalf("Do: %v, want a %s failure", err, tc.want)
			}
			if n := int(accepted.Load()); !tc.attempts(n) {
				t.Errorf("%d connections", n)
			}
		})
	}
}
