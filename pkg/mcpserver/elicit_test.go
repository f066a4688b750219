package mcpserver_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// withApprovalPage makes the deployment serve an approval page at origin
// ([bridge] page_listen, trust.toml's [passkey] origin).
func (d *deployment) withApprovalPage(t *testing.T, origin string) {
	t.Helper()
	for _, f := range []struct{ name, text string }{
		{"trust.toml", "\n[passkey]\norigin = \"" + origin + "\"\n"},
		{"prod-write.toml", "\n[bridge]\nkey = \"keys/bridge.key\"\npage_listen = \"127.0.0.1:1\"\n"},
	} {
		fl, err := os.OpenFile(filepath.Join(d.dir, f.name), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fl.WriteString(f.text); err != nil {
			t.Fatal(err)
		}
		if err := fl.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// elicitations is a client's record of the URL elicitations it was sent
// and the completions it heard.
type elicitations struct {
	mu       sync.Mutex
	asked    []*mcp.ElicitParams
	complete []string
	heard    chan struct{}
}

// connectEliciting is connect with a client that takes elicitation, in
// URL mode when url is set (else form only).
func (d *deployment) connectEliciting(t *testing.T, who string, url bool, version string) (*mcp.ClientSession, *elicitations) {
	t.Helper()
	f, _, _ := d.factory(d.key(who))
	srv, err := mcpserver.New(localapi.NewMCPBackend(&f.Env), mcpserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := &elicitations{heard: make(chan struct{}, 8)}
	caps := &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}}
	if url {
		caps.URL = &mcp.URLElicitationCapabilities{}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{Elicitation: caps},
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			e.mu.Lock()
			e.asked = append(e.asked, req.Params)
			e.mu.Unlock()
			e.heard <- struct{}{}
			return &mcp.ElicitResult{Action: "accept"}, nil
		},
		ElicitationCompleteHandler: func(_ context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
			e.mu.Lock()
			e.complete = append(e.complete, req.Params.ElicitationID)
			e.mu.Unlock()
			e.heard <- struct{}{}
		},
	})
	cs, err := client.Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
	})
	return cs, e
}

// A wait on a decision that needs a human shows the agent's user the
// approval page, as a URL elicitation
// (docs/adr/0047-mcp-http-limits-tls-origin-body.md), and says when it is
// decided; never a form, which the agent's own client could answer. A
// client without URL mode, or a deployment without a page, is asked
// nothing.
//
// On 2026-07-28 it is a multi-round-trip input request in the tool's
// result (SEP-2322); before that, the go-sdk sends the client an
// elicitation/create itself: both are tried.
func TestWaitElicitsTheApprovalPage(t *testing.T) {
	for _, version := range []string{"", "2025-11-25"} {
		t.Run("protocol "+version, func(t *testing.T) { testWaitElicits(t, version) })
	}
}

func testWaitElicits(t *testing.T, version string) {
	d := newDeployment(t)
	if _, errb, code := d.cli(t, "", "keygen", "--out", filepath.Join(d.dir, "keys", "bridge.key")); code != 0 {
		t.Fatal(errb)
	}
	d.withApprovalPage(t, "https://approve.example.test")
	cs, e := d.connectEliciting(t, "agent", true, version)
	if version != "" && cs.InitializeResult().ProtocolVersion != version {
		t.Fatalf("negotiated %s, want %s", cs.InitializeResult().ProtocolVersion, version)
	}
	fp := planOverMCP(t, cs, d.planArgs())
	if _, errb, code := d.cli(t, "smith", "file", fp, "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high"); code != 0 {
		t.Fatal(errb)
	}
	waited := make(chan map[string]any, 1)
	go func() {
		_, out := call(t, cs, "wait_for_decision", map[string]any{"fingerprint": fp, "timeout_seconds": 60})
		waited <- out
	}()
	select {
	case <-e.heard:
	case <-time.After(5 * time.Second):
		out, _, _ := d.cli(t, "", "status", fp, "--json")
		t.Fatalf("no elicitation; status says %s", out)
	}
	e.mu.Lock()
	asked := e.asked
	e.mu.Unlock()
	if len(asked) != 1 || asked[0].Mode != "url" || asked[0].URL != "https://approve.example.test/approve/"+fp || asked[0].ElicitationID == "" || asked[0].RequestedSchema != nil {
		t.Fatalf("elicited %+v; want one URL elicitation of the plan's page", asked)
	}
	if _, errb, code := d.cli(t, "alice", "decide", fp, "approve"); code != 0 {
		t.Fatal(errb)
	}
	select {
	case out := <-waited:
		if out["outcome"] != "approved" {
			t.Fatalf("wait: %v", out)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the wait did not end once approved")
	}
	select {
	case <-e.heard:
	case <-time.After(30 * time.Second):
	}
	e.mu.Lock()
	complete := e.complete
	e.mu.Unlock()
	if len(complete) != 1 || complete[0] != asked[0].ElicitationID {
		t.Fatalf("completions %v; want the elicitation %s completed", complete, asked[0].ElicitationID)
	}

	// Form only: nothing asked, the wait as before.
	cs2, e2 := d.connectEliciting(t, "agent", false, version)
	fp2 := planOverMCP(t, cs2, d.planArgs2(t))
	if _, errb, code := d.cli(t, "smith", "file", fp2, "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high"); code != 0 {
		t.Fatal(errb)
	}
	if _, out := call(t, cs2, "wait_for_decision", map[string]any{"fingerprint": fp2, "timeout_seconds": 1}); out["outcome"] != "pending" {
		t.Fatalf("form-only wait: %v", out)
	}
	if len(e2.asked) != 0 {
		t.Fatalf("a form-only client was asked %+v", e2.asked)
	}
}

// planArgs2 is planArgs for another service: another plan.
func (d *deployment) planArgs2(t *testing.T) map[string]any {
	t.Helper()
	a := d.planArgs()
	a["params"] = map[string]any{"service": "web"}
	return a
}
