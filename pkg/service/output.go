package service

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// WriteTimeout bounds one send of the service to a client: a command's
// result, a question, the exit status. A client that reads nothing for
// that long has its call's sends fail from then on, and the call ends
// (docs/adr/0036-the-service-never-waits-on-a-caller.md).
var WriteTimeout = 10 * time.Second

// ErrStalled is the error of a send to a client that had stopped reading:
// one send timed out, and the call sends it nothing more.
var ErrStalled = errors.New("runner service: the client stopped reading")

// Output returns a writer of text for the client's stdout (fd 1) or stderr
// (fd 2), carried over the call's own socket: the service never writes
// onto a descriptor a caller handed over. Each write is sent within
// [WriteTimeout]; once one has timed out, every later write of the call
// fails at once with [ErrStalled], so a client that stops reading costs
// the service one timeout, not one per line.
func (c *Call) Output(fd int) io.Writer { return &callWriter{c: c, fd: fd} }

type callWriter struct {
	c  *Call
	fd int
}

func (w *callWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		chunk := p[:min(len(p), MaxOutput)]
		if err := w.c.send(Output{T: "out", FD: w.fd, Data: chunk}); err != nil {
			return n, err
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// send sends one message within WriteTimeout, or fails at once once the
// client has stalled a send.
func (c *Call) send(v any) error {
	c.sendMu.Lock()
	defer c.sendMu.Unlock()
	if c.stalled {
		return ErrStalled
	}
	if err := c.conn.SendWithin(WriteTimeout, v); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			c.stalled = true
			return fmt.Errorf("%w: nothing read for %s", ErrStalled, WriteTimeout)
		}
		return err
	}
	return nil
}

// RelayBuffer bounds the program output a relay holds for a client that
// reads slower than the program writes; past it, output is dropped (and
// still hashed: the receipt covers all of it).
var RelayBuffer = 1 << 20

// RelayTimeout is how long a relay waits on one send before it stops
// delivering: the client has stopped reading.
var RelayTimeout = 2 * time.Second

// Relay carries a program's output to the client (docs/DESIGN.md §13). Its writers
// never block: what the client has not taken yet waits in a buffer of at
// most [RelayBuffer] bytes, sent by a goroutine of the relay's own, and
// output that finds the buffer full, or a client that stopped reading, is
// dropped. The program is never made to wait on the client, and its
// outcome receipt is written whatever the client does; [Relay.Finish] says
// whether the client got less than all of it.
type Relay struct {
	c *Call

	mu      sync.Mutex
	queue   []Output
	queued  int   // bytes in queue
	dropped int64 // bytes never delivered
	closed  bool
	// finished is set by Finish: later writes (what the command says
	// after the program) go as the call's own output.
	finished bool
	cut      bool // Finish gave up waiting: send nothing more
	wake     chan struct{}
	done     chan struct{} // closed when the sender has returned
}

// Relay starts relaying program output to the client.
func (c *Call) Relay() *Relay {
	r := &Relay{c: c, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go r.send()
	return r
}

// Writer returns the relay's writer for fd 1 or 2. Until Finish its writes
// always succeed at once; after it, they are the call's [Call.Output].
func (r *Relay) Writer(fd int) io.Writer { return relayWriter{r, fd} }

type relayWriter struct {
	r  *Relay
	fd int
}

func (w relayWriter) Write(p []byte) (int, error) {
	w.r.mu.Lock()
	finished := w.r.finished
	w.r.mu.Unlock()
	if finished {
		return w.r.c.Output(w.fd).Write(p)
	}
	w.r.put(w.fd, p)
	return len(p), nil
}

func (r *Relay) put(fd int, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	// Once anything is dropped, nothing more is delivered: the client sees
	// a cut, never output with holes in it.
	if r.closed || r.dropped > 0 || r.queued+len(p) > RelayBuffer {
		r.dropped += int64(len(p))
		return
	}
	for len(p) > 0 {
		chunk := p[:min(len(p), MaxOutput)]
		r.queue = append(r.queue, Output{T: "out", FD: fd, Data: append([]byte(nil), chunk...)})
		r.queued += len(chunk)
		p = p[len(chunk):]
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// send delivers the queue until the relay is finished and empty, or the
// client stops reading.
func (r *Relay) send() {
	defer close(r.done)
	for {
		r.mu.Lock()
		if len(r.queue) == 0 {
			closed := r.closed
			r.mu.Unlock()
			if closed {
				return
			}
			<-r.wake
			continue
		}
		if r.cut {
			r.mu.Unlock()
			return
		}
		m := r.queue[0]
		r.mu.Unlock()
		err := r.c.conn.SendWithin(RelayTimeout, m)
		r.mu.Lock()
		r.queue = r.queue[1:]
		r.queued -= len(m.Data)
		if err != nil {
			// Stopped reading, or gone: the rest is dropped.
			r.dropped += int64(len(m.Data) + r.queued)
			r.queue, r.queued = nil, 0
			r.closed = true
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
	}
}

// Finish ends the relay: nothing written after it is delivered. It waits
// at most grace for the client to take what is still buffered, and returns
// the number of bytes the client was never given (0: it got everything).
func (r *Relay) Finish(grace time.Duration) int64 {
	r.mu.Lock()
	if r.finished {
		r.mu.Unlock()
		<-r.done
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.dropped
	}
	r.closed, r.finished = true, true
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-r.done:
	case <-t.C:
		// Cut the send in progress short, and drop the rest: the sender
		// sends nothing more, and its send in progress fails on the
		// deadline now past (at worst, one that began just now lasts
		// RelayTimeout).
		r.mu.Lock()
		r.cut = true
		r.mu.Unlock()
		r.c.conn.c.SetWriteDeadline(time.Now())
		<-r.done
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropped += int64(r.queued)
	r.queue, r.queued = nil, 0
	return r.dropped
}

// Reply sends the call's typed result (pkg/api), in parts, each within
// WriteTimeout.
// Hold tells the client that the service holds its call ([Held]).
func (c *Call) Hold() error { return c.send(Held{T: "held"}) }

func (c *Call) Reply(body []byte) error {
	for {
		part := body[:min(len(body), MaxOutput)]
		body = body[len(part):]
		if err := c.send(Reply{T: "reply", Data: part, More: len(body) > 0}); err != nil {
			return err
		}
		if len(body) == 0 {
			return nil
		}
	}
}
