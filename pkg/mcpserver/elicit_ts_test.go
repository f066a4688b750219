package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// A wait on a decision that needs a human, asked by the TypeScript SDK's
// Client over the service's MCP over HTTP, shows the approval page as a
// URL elicitation the SDK takes
// (docs/adr/0047-mcp-http-limits-tls-origin-body.md): one
// elicitation/create, mode url, its URL the plan's page, no form anywhere
// on the wire; once an approver decides, and not before, the SDK hears
// notifications/elicitation/complete for it, and the wait ends approved. A
// client that declares form mode only ({form: {}}, or {}, which the SDK and
// the specification read as form) is asked nothing: the wait reports
// progress and ends pending.
//
// TestWaitElicitsTheApprovalPage is the same over the go-sdk's client:
// this one is the shape another implementation checks (the SDK's
// ElicitRequestSchema, its modes from the declared capabilities).
func TestWaitElicitsTheApprovalPageTypeScriptSDK(t *testing.T) {
	node, modules := tsSDKOrSkip(t)
	d := newDeployment(t)
	if _, errb, code := d.cli(t, "", "keygen", "--out", filepath.Join(d.dir, "keys", "bridge.key")); code != 0 {
		t.Fatal(errb)
	}
	const origin = "https://approve.example.test"
	d.withApprovalPage(t, origin)
	endpoint, bearer := d.serveHTTP(t, "agent")

	for _, tt := range []struct {
		name, elicitation string // the client's elicitation capability
		service           string // plan_config-push's service: a plan of its own
	}{
		{"form and url", `{"form":{},"url":{}}`, "api"},
		{"url only", `{"url":{}}`, "web"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := startTSElicit(t, node, modules, endpoint, bearer, d.inlined(t, tt.service), tsElicitOptions{elicitation: tt.elicitation, wait: 60})
			fp := c.expect(t, "planned", 30*time.Second).Fingerprint
			d.file(t, fp)
			c.say(t, "go")

			asked := c.expect(t, "elicitation", 30*time.Second)
			var el elicitParams
			if err := json.Unmarshal(asked.Params, &el); err != nil {
				t.Fatalf("the elicitation's params %s: %v", asked.Params, err)
			}
			page := origin + "/approve/" + fp
			if el.Mode != "url" || el.URL != page || el.ElicitationID == "" || el.Message == "" || el.RequestedSchema != nil {
				t.Fatalf("the SDK was asked %s; want a URL elicitation of %s, with an id and a message, and no requestedSchema", asked.Params, page)
			}
			// Everything the client heard before the decision: no
			// completion, no end of the wait.
			c.say(t, "mark")
			c.expect(t, "mark", 30*time.Second)
			for _, ev := range c.seen {
				if ev.Event == "complete" || ev.Event == "waited" {
					t.Fatalf("before any decision the SDK heard:\n%s", c.summary())
				}
			}
			if _, errb, code := d.cli(t, "alice", "decide", fp, "approve"); code != 0 {
				t.Fatal(errb)
			}
			waited := c.expect(t, "waited", 2*time.Minute)
			if waited.Result["outcome"] != "approved" {
				t.Fatalf("wait_for_decision: %v", waited.Result)
			}
			if !c.heard("complete") {
				c.expect(t, "complete", 30*time.Second)
			}
			wire := c.close(t)

			var completed []string
			for _, ev := range c.seen {
				switch ev.Event {
				case "complete":
					completed = append(completed, ev.ElicitationID)
				case "elicitation":
					if string(ev.Params) != string(asked.Params) {
						t.Errorf("the SDK was asked again: %s", ev.Params)
					}
				}
			}
			if len(completed) != 1 || completed[0] != el.ElicitationID {
				t.Errorf("completions heard %q; want the elicitation %s completed once", completed, el.ElicitationID)
			}
			creates := noFormOnTheWire(t, wire)
			if len(creates) != 1 || creates[0].Mode != el.Mode || creates[0].URL != el.URL || creates[0].ElicitationID != el.ElicitationID {
				t.Errorf("elicitation/create on the wire: %+v; want the one the handler took, %+v", creates, el)
			}
		})
	}

	for _, tt := range []struct{ name, elicitation, service string }{
		{"form only", `{"form":{}}`, "db"},
		{"empty, read as form", `{}`, "cache"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := startTSElicit(t, node, modules, endpoint, bearer, d.inlined(t, tt.service), tsElicitOptions{elicitation: tt.elicitation, wait: 1})
			fp := c.expect(t, "planned", 30*time.Second).Fingerprint
			d.file(t, fp)
			c.say(t, "go")
			waited := c.expect(t, "waited", time.Minute)
			if waited.Result["outcome"] != "pending" {
				t.Fatalf("a form-only client's wait: %v", waited.Result)
			}
			wire := c.close(t)
			progress := 0
			for _, ev := range c.seen {
				switch ev.Event {
				case "elicitation", "complete":
					t.Errorf("a form-only client heard %s %s%s", ev.Event, ev.Params, ev.ElicitationID)
				case "progress":
					progress++
				}
			}
			if creates := noFormOnTheWire(t, wire); len(creates) != 0 {
				t.Errorf("a form-only client was sent elicitation/create: %+v", creates)
			}
			if progress == 0 {
				t.Errorf("a form-only client's wait reported no progress")
			}
		})
	}

	// An elicitation nobody answers (a link left unopened, a client gone)
	// holds nothing: the wait runs meanwhile, to its decision or its
	// bound, and then nothing of the call is left (serveHTTP's Close ends
	// at once). The elicitation is withdrawn as the wait ends, by the
	// go-sdk's notifications/cancelled, which is best effort: sent after
	// the call's result, it may find the call's stream closed.
	for _, tt := range []struct {
		name, service string
		decide        bool
	}{
		{"unanswered, decided", "queue", true},
		{"unanswered, timed out", "mail", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := tsElicitOptions{elicitation: `{"form":{},"url":{}}`, never: true, wait: 60}
			if !tt.decide {
				o.wait = 2
			}
			c := startTSElicit(t, node, modules, endpoint, bearer, d.inlined(t, tt.service), o)
			fp := c.expect(t, "planned", 30*time.Second).Fingerprint
			d.file(t, fp)
			c.say(t, "go")
			var el elicitParams
			if err := json.Unmarshal(c.expect(t, "elicitation", 30*time.Second).Params, &el); err != nil {
				t.Fatal(err)
			}
			if el.Mode != "url" || el.URL != origin+"/approve/"+fp {
				t.Fatalf("the SDK was asked %+v", el)
			}
			outcome := "pending"
			if tt.decide {
				c.say(t, "mark")
				c.expect(t, "mark", 30*time.Second)
				if c.heard("complete") || c.heard("waited") || c.heard("withdrawn") {
					t.Fatalf("before any decision the SDK heard:\n%s", c.summary())
				}
				if _, errb, code := d.cli(t, "alice", "decide", fp, "approve"); code != 0 {
					t.Fatal(errb)
				}
				outcome = "approved"
			}
			// Well within the wait's own bound when decided, and within
			// a few seconds of it when not.
			waited := c.expect(t, "waited", 30*time.Second)
			if waited.Result["outcome"] != outcome {
				t.Fatalf("wait_for_decision with the elicitation unanswered: %v, want %s", waited.Result, outcome)
			}
			if tt.decide && !c.heard("complete") {
				c.expect(t, "complete", 30*time.Second)
			}
			wire := c.close(t)
			var create, cancelled []string
			for _, m := range wire {
				switch m.Method {
				case "elicitation/create":
					create = append(create, fmt.Sprint(m.ID))
				case "notifications/cancelled":
					var p struct {
						RequestID any `json:"requestId"`
					}
					if err := json.Unmarshal(m.Params, &p); err != nil {
						t.Fatal(err)
					}
					cancelled = append(cancelled, fmt.Sprint(p.RequestID))
				case "notifications/elicitation/complete":
					if !tt.decide {
						t.Errorf("an undecided wait said the elicitation complete: %s", m.Params)
					}
				}
			}
			if len(create) != 1 || len(cancelled) > 1 || len(cancelled) == 1 && cancelled[0] != create[0] {
				t.Errorf("elicitation/create %q, notifications/cancelled for %q: want one elicitation, withdrawn if at all", create, cancelled)
			}
			t.Logf("the elicitation withdrawn where the client heard it: %v", c.heard("withdrawn"))
			noFormOnTheWire(t, wire)
		})
	}
}

// serveHTTP serves the deployment's MCP over HTTP as the service does
// (the handler mounted at /mcp), with one agent-scope token for who's
// principal acting under who's key; it returns the endpoint and the
// bearer.
func (d *deployment) serveHTTP(t *testing.T, who string) (endpoint, bearer string) {
	t.Helper()
	bearer = "ts-elicit-" + who + "-token"
	f, _, _ := d.factory(d.key(who))
	b := &inlineToPaths{Backend: localapi.NewMCPBackend(&f.Env), dir: t.TempDir()}
	h := mcpserver.NewHTTPHandler(loadTokens(t, tokenEntry(bearer, who, agent)), func(mcpserver.Token) (mcpserver.Backend, error) {
		return b, nil
	}, mcpserver.Options{})
	mux := http.NewServeMux()
	h.Mount(mux, "/mcp")
	srv := httptest.NewServer(mux)
	t.Cleanup(func() {
		// Every call has ended: Close, which waits for a session's
		// calls, must end at once (a handler still blocked on a client
		// that went away would hold it for ever).
		closed := make(chan struct{})
		go func() {
			h.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Error("HTTPHandler.Close has not ended 10 s after the last client went: a call is still held")
		}
		srv.Close()
	})
	return srv.URL + "/mcp", bearer
}

// inlineToPaths plans files supplied inline, as MCP over HTTP supplies
// them, from copies of their content on disk: the service's own backend
// for a hosted caller (pkg/cli's hostedBackend) does as much, but needs a
// running service; the deployment's local backend names files by path.
// The fingerprint binds the same bytes either way.
type inlineToPaths struct {
	mcpserver.Backend
	dir string
	n   atomic.Int64
}

func (b *inlineToPaths) Plan(req mcpserver.PlanRequest) (*api.PlanResult, error) {
	if len(req.Inline) > 0 {
		dir := filepath.Join(b.dir, strconv.FormatInt(b.n.Add(1), 10))
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
		req.Files = map[string]string{}
		for name, content := range req.Inline {
			path := filepath.Join(dir, name)
			if err := os.WriteFile(path, content, 0o644); err != nil {
				return nil, err
			}
			req.Files[name] = path
		}
		req.Inline = nil
	}
	return b.Backend.Plan(req)
}

// inlined is planArgs for service, with each file supplied inline, as
// MCP over HTTP takes files (docs/adr/0039-inline-files-over-mcp-http.md).
func (d *deployment) inlined(t *testing.T, service string) map[string]any {
	t.Helper()
	args := d.planArgs()
	args["params"] = map[string]any{"service": service}
	files := map[string]any{}
	for name, path := range args["files"].(map[string]any) {
		b, err := os.ReadFile(filepath.Join(d.dir, path.(string)))
		if err != nil {
			t.Fatal(err)
		}
		files[name] = map[string]any{"content": string(b)}
	}
	args["files"] = files
	return args
}

// file files the plan fp as smith, so that it waits for an approver.
func (d *deployment) file(t *testing.T, fp string) {
	t.Helper()
	if _, errb, code := d.cli(t, "smith", "file", fp, "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high"); code != 0 {
		t.Fatal(errb)
	}
}

// elicitParams are an elicitation/create's params as sent; RequestedSchema
// is whatever the server put there, if anything.
type elicitParams struct {
	Mode            string `json:"mode"`
	URL             string `json:"url"`
	Message         string `json:"message"`
	ElicitationID   string `json:"elicitationId"`
	RequestedSchema any    `json:"requestedSchema"`
}

// noFormOnTheWire returns the elicitation/create requests among the
// messages the server sent, failing the test for any that is not URL
// mode: a form (mode "form", or no mode, which a client must read as
// form) or a requestedSchema.
func noFormOnTheWire(t *testing.T, wire []tsWireMessage) []elicitParams {
	t.Helper()
	var creates []elicitParams
	for _, m := range wire {
		if m.Method != "elicitation/create" {
			continue
		}
		var p elicitParams
		if err := json.Unmarshal(m.Params, &p); err != nil {
			t.Fatalf("elicitation/create params %s: %v", m.Params, err)
		}
		if p.Mode != "url" || p.RequestedSchema != nil {
			t.Errorf("the server sent a form elicitation: %s", m.Params)
		}
		creates = append(creates, p)
	}
	return creates
}

// tsEvent is one line of ts_elicit_client.mjs's stdout.
type tsEvent struct {
	Event           string          `json:"event"`
	SDKVersion      string          `json:"sdkVersion"`
	ProtocolVersion string          `json:"protocolVersion"`
	Capabilities    json.RawMessage `json:"capabilities"`
	Fingerprint     string          `json:"fingerprint"`
	Params          json.RawMessage `json:"params"`
	ElicitationID   string          `json:"elicitationId"`
	Progress        float64         `json:"progress"`
	Message         string          `json:"message"`
	Result          map[string]any  `json:"result"`
	Messages        []tsWireMessage `json:"messages"`
	Error           string          `json:"error"`
}

// tsWireMessage is a request or notification the server sent the client,
// as it arrived.
type tsWireMessage struct {
	ID     any             `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// tsElicitClient is a running ts_elicit_client.mjs: its events as they
// come, the test's words to it on stdin.
type tsElicitClient struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan tsEvent
	seen   []tsEvent // every event taken, in order
	stderr *syncBuffer
	done   chan error
}

// tsElicitOptions are how ts_elicit_client.mjs acts.
type tsElicitOptions struct {
	elicitation string // the elicitation capability it declares, JSON
	never       bool   // its handler never answers an elicitation
	wait        int    // wait_for_decision's timeout_seconds
}

// startTSElicit starts ts_elicit_client.mjs to plan config-push with plan
// and wait as o says; it returns once the client has connected with the
// SDK version tsSDKVersion.
func startTSElicit(t *testing.T, node, modules, endpoint, bearer string, plan map[string]any, o tsElicitOptions) *tsElicitClient {
	t.Helper()
	args, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	answer := "accept"
	if o.never {
		answer = "never"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	cmd := exec.CommandContext(ctx, node, filepath.Join("testdata", "ts_elicit_client.mjs"))
	cmd.Env = append(os.Environ(),
		"NODE_MODULES="+modules,
		"MCP_URL="+endpoint,
		"BEARER="+bearer,
		"PLAN_ARGS="+string(args),
		"WAIT_SECONDS="+strconv.Itoa(o.wait),
		"ELICITATION="+o.elicitation,
		"ANSWER="+answer,
		"NO_PROXY=*", "no_proxy=*",
	)
	c := &tsElicitClient{cmd: cmd, events: make(chan tsEvent, 64), stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = c.stderr
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var ev tsEvent
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				ev = tsEvent{Event: "garbage", Error: sc.Text()}
			}
			c.events <- ev
		}
		close(c.events)
		c.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		c.stdin.Close()
		cancel()
		for range c.events {
		}
	})
	connected := c.expect(t, "connected", 30*time.Second)
	t.Logf("@modelcontextprotocol/sdk %s negotiated %s, declaring elicitation %s", connected.SDKVersion, connected.ProtocolVersion, connected.Capabilities)
	if connected.SDKVersion != tsSDKVersion {
		t.Fatalf("@modelcontextprotocol/sdk %s ran, want %s", connected.SDKVersion, tsSDKVersion)
	}
	return c
}

// close tells the client to close and waits for its end, returning every
// message the server sent it; it logs what the client heard.
func (c *tsElicitClient) close(t *testing.T) []tsWireMessage {
	t.Helper()
	c.say(t, "close")
	wire := c.expect(t, "wire", 30*time.Second).Messages
	c.exited(t)
	c.log(t)
	return wire
}

// expect takes events until one named name, failing the test on the
// client's error, its end, or within passing first.
func (c *tsElicitClient) expect(t *testing.T, name string, within time.Duration) tsEvent {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				t.Fatalf("the TypeScript client ended before %s; stderr:\n%s", name, c.stderr.String())
			}
			c.seen = append(c.seen, ev)
			switch ev.Event {
			case name:
				return ev
			case "error", "garbage":
				t.Fatalf("the TypeScript client, waiting for %s: %s: %s\nstderr:\n%s", name, ev.Event, ev.Error, c.stderr.String())
			}
		case <-deadline.C:
			t.Fatalf("no %s from the TypeScript client in %s; it said:\n%s\nstderr:\n%s", name, within, c.summary(), c.stderr.String())
		}
	}
}

// heard says whether an event named name was taken already.
func (c *tsElicitClient) heard(name string) bool {
	for _, ev := range c.seen {
		if ev.Event == name {
			return true
		}
	}
	return false
}

// log logs what the client said and what it wrote on stderr.
func (c *tsElicitClient) log(t *testing.T) {
	t.Helper()
	t.Logf("the TypeScript client heard:\n%s\nstderr: %q", c.summary(), c.stderr.String())
}

// summary is what the client said, one event a line, the wire (which
// noFormOnTheWire checks) only counted.
func (c *tsElicitClient) summary() string {
	var lines []string
	for _, ev := range c.seen {
		switch ev.Event {
		case "elicitation":
			lines = append(lines, "elicitation "+string(ev.Params))
		case "complete":
			lines = append(lines, "complete "+ev.ElicitationID)
		case "progress":
			lines = append(lines, fmt.Sprintf("progress %v: %s", ev.Progress, ev.Message))
		case "waited":
			lines = append(lines, fmt.Sprintf("waited: outcome %v", ev.Result["outcome"]))
		case "wire":
			lines = append(lines, fmt.Sprintf("wire: %d messages", len(ev.Messages)))
		default:
			lines = append(lines, ev.Event)
		}
	}
	return strings.Join(lines, "\n")
}

// say writes one word to the client's stdin.
func (c *tsElicitClient) say(t *testing.T, word string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, word+"\n"); err != nil {
		t.Fatalf("telling the TypeScript client %s: %v", word, err)
	}
}

// exited waits for the client's exit, which must be 0, once it said all.
func (c *tsElicitClient) exited(t *testing.T) {
	t.Helper()
	for ev := range c.events {
		c.seen = append(c.seen, ev)
		if ev.Event == "error" || ev.Event == "garbage" {
			t.Errorf("the TypeScript client: %s: %s", ev.Event, ev.Error)
		}
	}
	if err := <-c.done; err != nil {
		t.Fatalf("the TypeScript client: %v\nstderr:\n%s", err, c.stderr.String())
	}
}
