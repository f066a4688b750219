package httplimit

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// serveBounded serves h with l on a local port and returns its address.
func serveBounded(t *testing.T, h http.Handler, l Limits, bound bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	if bound {
		ln = l.Bound(srv, ln)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// closedWithin reports whether the server closes c within d: a read that
// ends (EOF or reset) rather than timing out.
func closedWithin(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

// TestLimitsFreeTheServicesDescriptors: what an unauthenticated client of
// MCP over HTTP can hold is bounded. Attacker input: a connection, its
// headers, its body, its silence. It cannot keep a connection by stalling
// a body (read, or discarded after a refusal) past Limits.Body, nor by
// idling past Limits.Idle, nor open more than Limits.Conns at once. Each
// case fails with the bound removed.
func TestLimitsFreeTheServicesDescriptors(t *testing.T) {
	l := Limits{Header: 10 * time.Second, Body: 200 * time.Millisecond, Idle: 200 * time.Millisecond, Conns: 2}
	reads := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	})
	refuses := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})
	const bound = 10 * time.Second // generous: the limits above are what is tested
	stalled := "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789"

	for _, tc := range []struct {
		name string
		h    http.Handler
		send string
	}{
		{"a stalled body", reads, stalled},
		{"a refused request's stalled body", refuses, stalled},
		{"an idle kept-alive connection", reads, "GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, b := range []bool{true, false} {
				addr := serveBounded(t, tc.h, l, b)
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := io.WriteString(c, tc.send); err != nil {
					t.Fatal(err)
				}
				wait := bound
				if !b {
					wait = time.Second // without the limits: it stays open
				}
				if got := closedWithin(c, wait); got != b {
					t.Fatalf("bounded %v: closed %v", b, got)
				}
			}
		})
	}

	t.Run("a long answer after its body is not cut", func(t *testing.T) {
		slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			select {
			case <-time.After(3 * l.Body):
			case <-r.Context().Done():
				t.Error("the request's context ended: the lifted deadline cut the answer")
				return
			}
			w.Write([]byte("late"))
		})
		addr := serveBounded(t, slow, l, true)
		resp, err := http.Post("http://"+addr+"/mcp", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if string(b) != "late" {
			t.Fatalf("answer %q", b)
		}
	})

	t.Run("at most PerAddr connections from one address", func(t *testing.T) {
		addr := serveBounded(t, reads, Limits{Header: 10 * time.Second, Body: time.Second, Idle: 10 * time.Second, Conns: 10, PerAddr: 2}, true)
		dial := func() net.Conn {
			t.Helper()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		get := func(c net.Conn) error {
			if _, err := io.WriteString(c, "GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				return err
			}
			c.SetReadDeadline(time.Now().Add(bound))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				return err
			}
			resp.Body.Close()
			return nil
		}
		first, second := dial(), dial()
		if err := get(first); err != nil {
			t.Fatal(err)
		}
		if err := get(second); err != nil {
			t.Fatal(err)
		}
		third := dial()
		if !closedWithin(third, bound) {
			t.Fatal("a third connection from the same address was kept")
		}
		first.Close()
		// Its count is released once the server has seen it close: a
		// new one is then served (retried until the server has).
		deadline := time.Now().Add(bound)
		for {
			if err := get(dial()); err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no connection served after one of the two closed")
			}
			time.Sleep(10 * time.Millisecond) // polled, bounded by deadline
		}
	})

	t.Run("at most Conns connections", func(t *testing.T) {
		addr := serveBounded(t, reads, Limits{Header: 10 * time.Second, Body: time.Second, Idle: 10 * time.Second, Conns: 2}, true)
		var held []net.Conn
		for range 2 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			held = append(held, c)
		}
		third, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer third.Close()
		io.WriteString(third, "GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n")
		third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := bufio.NewReader(third).ReadByte(); err == nil {
			t.Fatal("a third connection was served while two were open")
		}
		held[0].Close()
		third.SetReadDeadline(time.Now().Add(bound))
		resp, err := http.ReadResponse(bufio.NewReader(third), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("once one closed: %v %v", resp, err)
		}
	})
}

// docs/DEPLOYMENT.md's "Listener limits" table says what each HTTP
// listener's limits are: it must say what this package sets.
func TestDeploymentDocumentsTheLimits(t *testing.T) {
	doc, err := os.ReadFile("../../docs/DEPLOYMENT.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(doc), "\n") {
		for _, name := range []string{"MCP over HTTP (", "the approval page (", "the bridges' endpoint ("} {
			if strings.HasPrefix(line, "| "+name) {
				rows[name] = line
			}
		}
	}
	secs := func(d time.Duration) string { return fmt.Sprintf("%d s", int(d.Seconds())) }
	for name, l := range map[string]Limits{"MCP over HTTP (": MCP, "the approval page (": Page, "the bridges' endpoint (": Bridges} {
		row, ok := rows[name]
		if !ok {
			t.Errorf("no row for %s", name)
			continue
		}
		cells := strings.Split(row, " | ")
		if len(cells) < 8 {
			t.Errorf("row %q: %d cells", row, len(cells))
			continue
		}
		answer := "no bound"
		if l.Write > 0 {
			answer = secs(l.Write)
		}
		want := []string{secs(l.Header), secs(l.Body), answer, secs(l.Idle), fmt.Sprint(l.Conns), fmt.Sprint(l.PerAddr)}
		for i, w := range want {
			if !strings.HasPrefix(strings.TrimSpace(cells[i+1]), w) {
				t.Errorf("%s: cell %d is %q, want it to begin %q", name, i+1, cells[i+1], w)
			}
		}
	}
}
