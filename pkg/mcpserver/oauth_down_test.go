package mcpserver_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// downIssuer is an authorization server that accepts connections and
// never answers, until it gives up: then it closes each connection it
// holds or accepts.
type downIssuer struct {
	ln       net.Listener
	mu       sync.Mutex
	conns    []net.Conn
	gaveUp   bool
	accepted atomic.Int32
	first    chan struct{}
}

func newDownIssuer(t *testing.T) *downIssuer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &downIssuer{ln: ln, first: make(chan struct{})}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.mu.Lock()
			if d.gaveUp {
				c.Close()
			} else {
				d.conns = append(d.conns, c)
			}
			d.mu.Unlock()
			if d.accepted.Add(1) == 1 {
				close(d.first)
			}
		}
	}()
	t.Cleanup(func() { ln.Close(); d.giveUp() })
	return d
}

func (d *downIssuer) url() string { return "http://" + d.ln.Addr().String() }

// giveUp ends every connection it holds, and each it accepts from now on.
func (d *downIssuer) giveUp() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.gaveUp = true
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = nil
}

// TestOAuthAnIssuerThatIsDownDelaysNoOther: a token naming an issuer that
// accepts connections and never answers holds the discovery of that
// issuer only. Attacker input: unauthenticated requests whose junk JWTs
// name the issuer that is down. A valid token of the healthy issuer is
// served while they still wait, and once that discovery has failed, it is
// remembered: the next junk token is refused without asking the issuer
// again.
func TestOAuthAnIssuerThatIsDownDelaysNoOther(t *testing.T) {
	is := newIssuer(t)
	down := newDownIssuer(t)
	tokens := loadTokens(t, fmt.Sprintf(`[oauth]
resource = %q
issuers = [%q, %q]

[[oauth.principal]]
issuer = %q
subject = "agent-1"
principal = "agent"
scope = "agent"
`, resource, is.srv.URL, down.url(), is.srv.URL))
	built := 0
	srv := oauthServer(t, tokens, newFake(t, "agent", approval.RoleAgent), &built)
	good := mint(t, is.key, "k1", is.good("agent-1", mcpserver.OAuthScopeAgent))
	// The healthy issuer discovered before the attack.
	if resp, _ := post(t, srv.URL+"/mcp", initialize, "", "Bearer "+good); resp.StatusCode != http.StatusOK {
		t.Fatalf("the good token before: %d", resp.StatusCode)
	}

	junk := unsigned(tokenClaims{Issuer: down.url(), Subject: "x", Audience: []string{resource}, Expiry: time.Now().Add(time.Hour).Unix()})
	send := func() (int, error) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(initialize))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+junk)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	var pending sync.WaitGroup
	var finished atomic.Int32
	for range 4 {
		pending.Go(func() {
			send()
			finished.Add(1)
		})
	}
	select {
	case <-down.first:
	case <-time.After(30 * time.Second):
		t.Fatal("the issuer that is down was never asked")
	}
	// Another token of the healthy issuer (not one verified before),
	// while the discovery of the other hangs.
	again := is.good("agent-1", mcpserver.OAuthScopeAgent)
	again.NotBef--
	if resp, _ := post(t, srv.URL+"/mcp", initialize, "", "Bearer "+mint(t, is.key, "k1", again)); resp.StatusCode != http.StatusOK {
		t.Fatalf("the good token during the attack: %d", resp.StatusCode)
	}
	if n := finished.Load(); n != 0 {
		t.Fatalf("%d junk requests ended before the good token was served: it waited for their discovery", n)
	}
	// The issuer that is down gives up; what it costs is remembered.
	down.giveUp()
	pending.Wait()
	asked := down.accepted.Load()
	code, err := send()
	if err != nil || code != http.StatusUnauthorized {
		t.Fatalf("a junk token after the failed discovery: %d %v, want 401", code, err)
	}
	if got := down.accepted.Load(); got != asked {
		t.Fatalf("the failed discovery was tried again at once: %d connections, was %d", got, asked)
	}
}

// TestOAuthIssuersDiscoveredAtStart: Discover asks each configured issuer
// for its configuration before any token names it, so no token waits on
// a discovery; without it, nothing is asked until a token comes.
func TestOAuthIssuersDiscoveredAtStart(t *testing.T) {
	is := newIssuer(t)
	tokens := oauthTokens(t, is)
	h := mcpserver.NewHTTPHandler(tokens, func(mcpserver.Token) (mcpserver.Backend, error) {
		return newFake(t, "agent", approval.RoleAgent), nil
	}, mcpserver.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.Discover(ctx)
	deadline := time.Now().Add(30 * time.Second)
	for is.hits.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the issuer was never asked for its configuration")
		}
		time.Sleep(10 * time.Millisecond) // polled, bounded by deadline
	}
}
