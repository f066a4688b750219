package mcpserver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpserver"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// fakeCalls is the runner service's count of calls (service.Server): it
// counts the calls joined and not done, and stop refuses calls from then
// on and ends the calls' context.
type fakeCalls struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	stopping bool
	inflight int
}

func newCalls() *fakeCalls {
	c := &fakeCalls{}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	return c
}

func (c *fakeCalls) Join() (context.Context, func(), bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopping {
		return nil, nil, false
	}
	c.inflight++
	var once sync.Once
	return c.ctx, func() {
		once.Do(func() {
			c.mu.Lock()
			c.inflight--
			c.mu.Unlock()
		})
	}, true
}

func (c *fakeCalls) OnStop(func()) {}

func (c *fakeCalls) stop() {
	c.mu.Lock()
	c.stopping = true
	c.mu.Unlock()
	c.cancel()
}

func (c *fakeCalls) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inflight
}

// awaitCount waits, at most 15 s (a generous bound), until n calls are
// in progress.
func (c *fakeCalls) awaitCount(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); c.count() != n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls in progress, want %d", c.count(), n)
		}
	}
}

// holdingBackend holds a run until released, and a wait until its
// context is done, when it ends pending (as cli's backend does), or the
// test is over.
type holdingBackend struct {
	*fakeBackend
	running chan struct{}
	release chan struct{}
	waiting chan struct{}
	once    sync.Once
}

func newHolding(t *testing.T) *holdingBackend {
	return &holdingBackend{fakeBackend: newFake(t, "agent", approval.RoleAgent),
		running: make(chan struct{}, 1), release: make(chan struct{}), waiting: make(chan struct{}, 1)}
}

// free releases the run; a test defers it, so that a session closed on a
// failure does not wait for a run held for ever.
func (b *holdingBackend) free() { b.once.Do(func() { close(b.release) }) }

func (b *holdingBackend) Run(fp string, _ map[string][]byte) (*mcpserver.RunResult, error) {
	b.running <- struct{}{}
	<-b.release // a run ignores the stop
	return &mcpserver.RunResult{Outcome: "ran", Fingerprint: fp}, nil
}

func (b *holdingBackend) Wait(ctx context.Context, fp string, _ time.Duration, _ func(string)) (any, *refusal.Error, bool, error) {
	b.waiting <- struct{}{}
	select {
	case <-ctx.Done():
		return map[string]any{"request": map[string]any{"state": "pending"}}, nil, true, nil
	case <-b.release: // the test is over
		return nil, nil, false, errors.New("released")
	}
}

var holdFP = map[string]any{"fingerprint": "sha256:" + strings.Repeat("2", 64)}

type callResult struct {
	res *mcp.CallToolResult
	err error
}

func callAsync(cs *mcp.ClientSession, tool string) <-chan callResult {
	out := make(chan callResult, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: holdFP})
		out <- callResult{res, err}
	}()
	return out
}

func text(r callResult) string {
	if r.err != nil {
		return "error: " + r.err.Error()
	}
	var b strings.Builder
	for _, c := range r.res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// Each call joins the service's calls (not the transport: the same over
// any): a stop ends a wait at once, pending, does not end a run, which
// still counts until its handler returns, and a call that comes once the
// service stops is refused before any handler runs.
func TestCallsStopEndsWaitsNotRuns(t *testing.T) {
	b := newHolding(t)
	calls := newCalls()
	srv, err := mcpserver.New(b, mcpserver.Options{AllowRun: true, Calls: calls})
	if err != nil {
		t.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil).Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	defer b.free()

	run := callAsync(cs, "run")
	<-b.running
	wait := callAsync(cs, "wait_for_decision")
	<-b.waiting
	calls.awaitCount(t, 2)
	calls.stop()
	select {
	case r := <-wait:
		if got := text(r); !strings.Contains(got, `"outcome":"pending"`) {
			t.Fatalf("the wait ended %s, want pending", got)
		}
	case <-time.After(15 * time.Second): // a generous bound: it ends at once
		t.Fatal("the wait goes on 15 s after the stop")
	}
	// The wait's handler has returned: the run alone is in progress.
	calls.awaitCount(t, 1)
	b.handled()
	late, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "status", Arguments: holdFP})
	if err == nil || !strings.Contains(err.Error(), "the runner service is stopping") {
		t.Fatalf("a call once the service stops: %v %v, want it refused", late, err)
	}
	if h := b.handled(); len(h) != 0 {
		t.Fatalf("a call refused once the service stops reached its handler: %v", h)
	}
	select {
	case r := <-run:
		t.Fatalf("the run ended (%s) at the stop", text(r))
	default:
	}
	b.free()
	if got := text(<-run); !strings.Contains(got, `"outcome":"ran"`) {
		t.Fatalf("the run ended %s, want ran", got)
	}
	calls.awaitCount(t, 0)
}

// rawSession initializes a session over HTTP by hand and returns its id.
func rawSession(t *testing.T, url, bearer string) string {
	t.Helper()
	resp, body := post(t, url, initialize, "", "Bearer "+bearer)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: status %d, session %q: %s", resp.StatusCode, sid, body)
	}
	if resp, body := post(t, url, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, sid, "Bearer "+bearer); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("initialized: status %d: %s", resp.StatusCode, body)
	}
	return sid
}

// openStream opens the session's standalone stream (GET) and returns once
// its headers came: the handler is then holding it open.
func openStream(t *testing.T, url, bearer, sid string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: status %d", resp.StatusCode)
	}
	return resp
}

// Over HTTP the calls count, not the requests: a run counts once, a
// session's standalone stream not at all; and once the service stops,
// every request is refused, 503, while an unknown bearer still gets 401.
func TestHTTPStopCountsCallsAndRefusesRequests(t *testing.T) {
	b := newHolding(t)
	calls := newCalls()
	tokens := loadTokens(t, tokenEntry("run-token", "agent", agentRun))
	h := mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) { return b, nil }, mcpserver.Options{AllowRun: true, Calls: calls})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close) // after the stream is closed (openStream)

	openStream(t, srv.URL, "run-token", rawSession(t, srv.URL, "run-token"))
	calls.awaitCount(t, 0)
	cs := dialHTTP(t, h, "run-token")
	t.Cleanup(b.free) // before the sessions close (dialHTTP)
	run := callAsync(cs, "run")
	<-b.running
	calls.awaitCount(t, 1)

	calls.stop()
	for _, auth := range []string{"Bearer run-token", "Bearer wrong-token"} {
		resp, body := post(t, srv.URL, initialize, "", auth)
		want := http.StatusServiceUnavailable
		if auth == "Bearer wrong-token" {
			want = http.StatusUnauthorized
		}
		if resp.StatusCode != want {
			t.Errorf("%s once the service stops: status %d (%s), want %d", auth, resp.StatusCode, body, want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	req.Header.Set("Authorization", "Bearer run-token")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a GET once the service stops: %v %v, want 503", resp, err)
	} else {
		resp.Body.Close()
	}
	b.free()
	if got := text(<-run); !strings.Contains(got, `"outcome":"ran"`) {
		t.Fatalf("the run ended %s, want ran", got)
	}
	calls.awaitCount(t, 0)
}

// Drain waits for the requests in progress, so that the answer of a run
// that ends is written, and not for a session's standalone stream; Close
// then ends every session, and the stream held open with it.
func TestHTTPDrainWaitsForAnswersCloseEndsStreams(t *testing.T) {
	b := newHolding(t)
	tokens := loadTokens(t, tokenEntry("run-token", "agent", agentRun))
	h := mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) { return b, nil }, mcpserver.Options{AllowRun: true})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close) // after the stream is closed (openStream)
	stream := openStream(t, srv.URL, "run-token", rawSession(t, srv.URL, "run-token"))
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, stream.Body)
		ended <- err
	}()
	cs := dialHTTP(t, h, "run-token")
	t.Cleanup(b.free) // before the sessions close (dialHTTP)
	run := callAsync(cs, "run")
	<-b.running

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.Drain(short); err != context.DeadlineExceeded {
		t.Fatalf("Drain with a run's request in progress: %v, want it to wait out its context", err)
	}
	drained := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second) // a generous bound: at once
		defer cancel()
		drained <- h.Drain(ctx)
	}()
	b.free()
	if got := text(<-run); !strings.Contains(got, `"outcome":"ran"`) {
		t.Fatalf("the run's answer: %s, want ran", got)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain once the run's answer is written, with a standalone stream open: %v, want nil", err)
	}
	h.Close()
	select {
	case <-ended:
	case <-time.After(15 * time.Second): // a generous bound: at once
		t.Fatal("the standalone stream is still open 15 s after Close")
	}
}
