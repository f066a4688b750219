package testservers

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// DynamoProxy is an HTTP proxy in front of a DynamoDB endpoint (dynalite)
// that counts the requests passing through it, by operation, and the
// conditional writes that failed, and can lose replies: a request it
// drops reaches the server and is carried out, and then the client's
// connection is reset instead of answered, as when a reply is lost on the
// network. The SDK then retries the same request.
type DynamoProxy struct {
	// URL is the proxy's endpoint, for a store's endpoint setting.
	URL string

	target string
	srv    *httptest.Server

	mu        sync.Mutex
	drop      func(op string, body []byte) bool
	returnOld bool
	requests  map[string]int
	failed    map[string]int
	dropped   int
}

// NewDynamoProxy starts a proxy in front of target (http://host:port).
// Close stops it.
func NewDynamoProxy(target string) *DynamoProxy {
	p := &DynamoProxy{target: strings.TrimSuffix(target, "/"), requests: map[string]int{}, failed: map[string]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serve))
	p.URL = p.srv.URL
	return p
}

// Close stops the proxy.
func (p *DynamoProxy) Close() { p.srv.Close() }

// Drop sets which replies are lost: f is asked for each request after the
// server answered it, with the operation (e.g. "UpdateItem") and the
// request's body; true loses the reply. nil loses none.
func (p *DynamoProxy) Drop(f func(op string, body []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.drop = f
}

// DropFirst returns a Drop function that loses the first reply to each
// distinct request of operation op: every such write is carried out, its
// reply lost, and only the SDK's retry of the same bytes is answered.
func DropFirst(op string) func(string, []byte) bool {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(o string, body []byte) bool {
		if o != op {
			return false
		}
		mu.Lock()
		defer mu.Unlock()
		if seen[string(body)] {
			return false
		}
		seen[string(body)] = true
		return true
	}
}

// ReturnOld makes the proxy add the item as it was to the reply of a
// conditional write that failed and asked for it
// (ReturnValuesOnConditionCheckFailure ALL_OLD), as DynamoDB does and
// dynalite 4.0.0 does not, read strongly consistent right after.
func (p *DynamoProxy) ReturnOld(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.returnOld = on
}

// Counts are what passed through a proxy.
type Counts struct {
	// Requests by operation, retries included.
	Requests map[string]int
	// Failed counts the conditional writes that failed, by operation.
	Failed map[string]int
	// Dropped is how many replies were lost.
	Dropped int
}

// Total is the number of requests of every operation.
func (c Counts) Total() int {
	n := 0
	for _, v := range c.Requests {
		n += v
	}
	return n
}

// FailedTotal is the number of failed conditional writes.
func (c Counts) FailedTotal() int {
	n := 0
	for _, v := range c.Failed {
		n += v
	}
	return n
}

// Counts returns what passed through so far and starts counting anew.
func (p *DynamoProxy) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	c := Counts{Requests: p.requests, Failed: p.failed, Dropped: p.dropped}
	p.requests, p.failed, p.dropped = map[string]int{}, map[string]int{}, 0
	return c
}

func (p *DynamoProxy) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	op := r.Header.Get("X-Amz-Target")
	if i := strings.LastIndexByte(op, '.'); i >= 0 {
		op = op[i+1:]
	}
	status, header, reply, err := p.forward(r, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	p.mu.Lock()
	p.requests[op]++
	ccf := status == http.StatusBadRequest && bytes.Contains(reply, []byte("ConditionalCheckFailedException"))
	if ccf {
		p.failed[op]++
	}
	drop, returnOld := p.drop != nil && p.drop(op, body), p.returnOld
	if drop {
		p.dropped++
	}
	p.mu.Unlock()
	if drop {
		// The server carried the request out; its reply is lost.
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0) // a reset, not an orderly close
			}
			conn.Close()
		}
		return
	}
	if ccf && returnOld {
		reply = p.withOld(r, body, reply)
	}
	for k, v := range header {
		if k != "Content-Length" && k != "X-Amz-Crc32" {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(status)
	w.Write(reply)
}

// forward sends the request to the target and reads the whole reply.
func (p *DynamoProxy) forward(r *http.Request, body []byte) (int, http.Header, []byte, error) {
	req, err := http.NewRequest(r.Method, p.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, reply, err
}

// withOld adds the item named by the failed request's key to its error
// reply, when the request asked for it.
func (p *DynamoProxy) withOld(r *http.Request, body, reply []byte) []byte {
	var in struct {
		TableName                           string
		Key                                 json.RawMessage
		ReturnValuesOnConditionCheckFailure string
	}
	if json.Unmarshal(body, &in) != nil || in.ReturnValuesOnConditionCheckFailure != "ALL_OLD" || in.Key == nil {
		return reply
	}
	get, _ := json.Marshal(map[string]any{"TableName": in.TableName, "Key": in.Key, "ConsistentRead": true})
	req := r.Clone(r.Context())
	req.Header = r.Header.Clone()
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.GetItem")
	status, _, got, err := p.forward(req, get)
	var item struct{ Item json.RawMessage }
	if err != nil || status != http.StatusOK || json.Unmarshal(got, &item) != nil || item.Item == nil {
		return reply
	}
	var e map[string]json.RawMessage
	if json.Unmarshal(reply, &e) != nil {
		return reply
	}
	e["Item"] = item.Item
	out, err := json.Marshal(e)
	if err != nil {
		return reply
	}
	return out
}
