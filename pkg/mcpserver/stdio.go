package mcpserver

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// maxLineLength bounds one line of stdio input: a longer line is answered
// with an invalid-request error and skipped, as a malformed one is. It is
// the go-sdk's own bound (mcp.DefaultMaxLineLength, 16 MiB).
const maxLineLength = mcp.DefaultMaxLineLength

// StdioTransport is the transport `prod-write mcp` serves on:
// newline-delimited JSON-RPC read from in and written to out, by the
// go-sdk's [mcp.IOTransport], behind a line filter that gives the stream two
// properties the SDK's transport does not have (go-sdk v1.8.0; upstream
// issues modelcontextprotocol/go-sdk#1209 and #1061, both open):
//
//   - A malformed line does not end the session. The SDK reads stdin with
//     one streaming json.Decoder and ends the connection at the first line
//     it cannot decode (`{not json`, `{"jsonrpc":"2.0","method":1}`, `[]`,
//     `{"jsonrpc":"1.0",…}`), so `prod-write mcp` exited 70 on one bad
//     line. The filter reads line by line, hands the SDK only lines that
//     decode as one JSON-RPC 2.0 message, and answers any other line
//     itself, as JSON-RPC 2.0 says: -32700 (parse error) for a line that is
//     not JSON, -32600 (invalid request) for JSON that is not a JSON-RPC
//     2.0 message, both with id null. A batch (a JSON array) is answered
//     -32600 too: MCP dropped JSON-RPC batching in 2025-06-18, and the SDK
//     ends the session on one under that version.
//   - The end of in does not drop replies. At EOF the SDK's connection
//     cancels every request in flight and refuses every later write, so a
//     one-shot pipe (initialize, a tools/call, then EOF) got no reply at
//     all, even when its plan had been stored or its run completed. The
//     filter keeps the ids of the requests it passed on, sees each reply go
//     out, and reports EOF to the SDK only once every request read has been
//     answered. The session then ends as before, and `prod-write mcp`
//     exits 0.
//
// The filter relies on the SDK writing each message with one Write call,
// which [mcp.IOTransport] does.
func StdioTransport(in io.Reader, out io.Writer) mcp.Transport {
	f := &lineFilter{in: bufio.NewReader(in), out: out, max: maxLineLength, pending: map[jsonrpc.ID]bool{}}
	f.cond = sync.NewCond(&f.mu)
	// The filter bounds lines itself, so the SDK's bound is off: a line
	// the filter passed must never end the session.
	return &mcp.IOTransport{Reader: filterReader{f}, Writer: filterWriter{f}, MaxLineLength: -1}
}

// lineFilter is the state the two sides of [StdioTransport] share.
type lineFilter struct {
	in  *bufio.Reader
	max int

	// Read only by the SDK's one reading goroutine.
	next    []byte // what is left of the line being handed to the SDK
	readErr error  // how in ended

	// wmu serialises writes to out: the SDK's replies and the filter's own.
	wmu sync.Mutex
	out io.Writer

	mu      sync.Mutex
	cond    *sync.Cond
	pending map[jsonrpc.ID]bool // requests passed on and not yet answered
	closed  bool
}

type filterReader struct{ f *lineFilter }

func (r filterReader) Read(p []byte) (int, error) {
	f := r.f
	for len(f.next) == 0 {
		if f.readErr != nil {
			f.drain()
			return 0, f.readErr
		}
		line, tooLong, err := f.readLine()
		if err != nil {
			f.readErr = err
		}
		f.next = f.admit(line, tooLong)
	}
	n := copy(p, f.next)
	f.next = f.next[n:]
	return n, nil
}

// Close ends a drain in progress: the SDK closes its transport when the
// session ends for another reason (its context, a broken output).
func (r filterReader) Close() error {
	r.f.mu.Lock()
	r.f.closed = true
	r.f.mu.Unlock()
	r.f.cond.Broadcast()
	return nil
}

// drain waits until every request passed on has been answered, or the
// transport is closed.
func (f *lineFilter) drain() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.pending) > 0 && !f.closed {
		f.cond.Wait()
	}
}

// readLine returns the next line of in, without what follows its newline.
// A line longer than f.max is read to its end and dropped (tooLong).
func (f *lineFilter) readLine() (line []byte, tooLong bool, err error) {
	for {
		frag, err := f.in.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(frag) > f.max+1 { // +1: the newline
				tooLong, line = true, nil
			} else {
				line = append(line, frag...)
			}
		}
		if err != bufio.ErrBufferFull {
			return line, tooLong, err
		}
	}
}

// admit returns what of line the SDK may read: the line when it is one
// JSON-RPC 2.0 message, and otherwise nothing, the line having been
// answered with an error.
func (f *lineFilter) admit(line []byte, tooLong bool) []byte {
	if tooLong {
		f.reject(jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: a message longer than %d bytes", f.max))
		return nil
	}
	msg := bytes.TrimSpace(line)
	if len(msg) == 0 {
		return nil
	}
	var v json.RawMessage
	if err := json.Unmarshal(msg, &v); err != nil {
		f.reject(jsonrpc.CodeParseError, "parse error: "+err.Error())
		return nil
	}
	if msg[0] == '[' {
		f.reject(jsonrpc.CodeInvalidRequest, "invalid request: JSON-RPC batches are not served; send one message a line")
		return nil
	}
	// The SDK's own decoder: what it accepts here, it accepts when it reads
	// the line.
	m, err := jsonrpc.DecodeMessage(msg)
	if err != nil {
		f.reject(jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error())
		return nil
	}
	if req, ok := m.(*jsonrpc.Request); ok && req.IsCall() {
		f.mu.Lock()
		dup := f.pending[req.ID]
		if !dup {
			f.pending[req.ID] = true
		}
		f.mu.Unlock()
		if dup {
			// The SDK would answer it with id null too, and its reply
			// could not be told from the first request's.
			f.reject(jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: id %v is already in use by a request in progress", req.ID.Raw()))
			return nil
		}
	}
	return append(msg, '\n')
}

// errorReply is a JSON-RPC 2.0 error response to a message whose id could
// not be read: its id is null, as the specification requires (the SDK's
// encoder would leave it out).
type errorReply struct {
	JSONRPC string         `json:"jsonrpc"`
	ID      *struct{}      `json:"id"`
	Error   *jsonrpc.Error `json:"error"`
}

// reject answers a line the SDK is not given.
func (f *lineFilter) reject(code int64, message string) {
	b, err := json.Marshal(errorReply{JSONRPC: "2.0", Error: &jsonrpc.Error{Code: code, Message: message}})
	if err != nil {
		return
	}
	f.wmu.Lock()
	defer f.wmu.Unlock()
	// A failed write is the SDK's to find: its next write fails the same way.
	_, _ = f.out.Write(append(b, '\n'))
}

type filterWriter struct{ f *lineFilter }

// Write writes one message of the SDK's and, once it is written (or has
// failed to be), counts each reply in it as an answer.
func (w filterWriter) Write(p []byte) (int, error) {
	f := w.f
	f.wmu.Lock()
	n, err := f.out.Write(p)
	f.wmu.Unlock()
	ids := replyIDs(bytes.TrimSpace(p))
	if len(ids) > 0 {
		f.mu.Lock()
		for _, id := range ids {
			delete(f.pending, id)
		}
		f.mu.Unlock()
		f.cond.Broadcast()
	}
	return n, err
}

func (filterWriter) Close() error { return nil }

// replyIDs returns the ids of the replies in one message the SDK writes.
func replyIDs(msg []byte) []jsonrpc.ID {
	var raws []json.RawMessage
	if len(msg) > 0 && msg[0] == '[' {
		if json.Unmarshal(msg, &raws) != nil {
			return nil
		}
	} else {
		raws = []json.RawMessage{msg}
	}
	var ids []jsonrpc.ID
	for _, raw := range raws {
		if m, err := jsonrpc.DecodeMessage(raw); err == nil {
			if r, ok := m.(*jsonrpc.Response); ok {
				ids = append(ids, r.ID)
			}
		}
	}
	return ids
}
