package service

import (
	"bytes"
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// relayCall starts a server whose handler relays n bytes of "program
// output" and reports what Finish said, and returns a connected client
// that has sent its request and reads nothing yet.
func relayCall(t *testing.T, n int, grace time.Duration) (*net.UnixConn, <-chan int64, <-chan time.Duration) {
	t.Helper()
	undelivered := make(chan int64, 1)
	wrote := make(chan time.Duration, 1)
	h := HandlerFunc(func(ctx context.Context, c *Call) int {
		r := c.Relay()
		w := r.Writer(1)
		start := time.Now()
		chunk := bytes.Repeat([]byte("x"), 4096)
		held := 0
		for left := n; left > 0; left -= len(chunk) {
			w.Write(chunk[:min(left, len(chunk))])
			r.mu.Lock()
			held = max(held, r.queued)
			r.mu.Unlock()
		}
		if held > RelayBuffer {
			t.Errorf("the relay held %d bytes for its client, over its bound of %d", held, RelayBuffer)
		}
		wrote <- time.Since(start)
		undelivered <- r.Finish(grace)
		return 0
	})
	sock := startServer(t, h, nil)
	c := rawSend(t, sock, []byte(`{"v":2,"op":"run"}`))
	t.Cleanup(func() { c.Close() })
	return c, undelivered, wrote
}

// A client that never reads cannot hold a program: the relay's writes
// return at once whatever the client does, Finish gives up after its
// grace, and it counts what the client was never given.
func TestRelayNeverWaitsOnAClientThatDoesNotRead(t *testing.T) {
	old := RelayTimeout
	RelayTimeout = time.Hour // only Finish's grace can end the wait
	t.Cleanup(func() { RelayTimeout = old })
	const n = 8 << 20 // far past the socket's buffer and the relay's
	c, undelivered, wrote := relayCall(t, n, 200*time.Millisecond)
	<-wrote
	var got int64
	select {
	case got = <-undelivered:
	case <-time.After(30 * time.Second): // a generous bound: it is 200 ms
		c.Close() // lets the relay's send fail, so that the server stops
		t.Fatal("Finish waited for a client that reads nothing")
	}
	if got <= 0 || got > n {
		t.Fatalf("Finish says %d bytes undelivered of %d, want some and at most all", got, n)
	}
}

// A client that reads gets every byte, in order, and Finish says so: a
// burst no larger than the relay's buffer is never cut.
func TestRelayDeliversToAClientThatReads(t *testing.T) {
	n := RelayBuffer
	c, undelivered, _ := relayCall(t, n, 10*time.Second)
	var got int
	for {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		b, _, err := NewConn(c).Recv()
		if err != nil {
			t.Fatal(err)
		}
		kind, _, _, o, err := decodeReply(b)
		if err != nil {
			t.Fatal(err)
		}
		if kind != "out" {
			break
		}
		if !bytes.Equal(o.Data, bytes.Repeat([]byte("x"), len(o.Data))) {
			t.Fatal("relayed output changed")
		}
		got += len(o.Data)
	}
	if u := <-undelivered; u != 0 || got != n {
		t.Fatalf("client read %d of %d bytes, Finish says %d undelivered", got, n, u)
	}
}

// A command's result to a client that stopped reading fails after one
// WriteTimeout, and every later write of the call fails at once: the
// call ends, and its slot comes back.
func TestOutputToAStalledClientFailsOnce(t *testing.T) {
	old := WriteTimeout
	WriteTimeout = 200 * time.Millisecond
	t.Cleanup(func() { WriteTimeout = old })
	errs := make(chan error, 2)
	h := HandlerFunc(func(ctx context.Context, c *Call) int {
		w := c.Output(1)
		chunk := bytes.Repeat([]byte("y"), MaxOutput)
		var err error
		for err == nil {
			_, err = w.Write(chunk)
		}
		errs <- err
		start := time.Now()
		_, err = w.Write(chunk)
		if d := time.Since(start); d > WriteTimeout/2 {
			err = errors.New("a later write waited again")
		}
		errs <- err
		return 0
	})
	sock := startServer(t, h, nil)
	c := rawSend(t, sock, []byte(`{"v":2,"op":"status"}`))
	defer c.Close()
	if err := <-errs; !errors.Is(err, ErrStalled) {
		t.Fatalf("first failed write: %v, want ErrStalled", err)
	}
	if err := <-errs; !errors.Is(err, ErrStalled) {
		t.Fatalf("later write: %v, want ErrStalled at once", err)
	}
}

// A connection refused at once (busy) whose request is already queued
// reads the busy answer, not a reset: what it sent is drained first.
func TestBusyIsReadNotAReset(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := Listen(sock, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := rawSend(t, sock, []byte(`{"v":2,"op":"status"}`))
	defer c.Close()
	sc, err := l.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	busy(sc, "too many calls")
	if got := readFailure(t, c); got != CodeBusy {
		t.Fatalf("got %s, want busy", got)
	}
}
