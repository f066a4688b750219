package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rogpeppe/go-internal/testscript"
)

// cmdMCPHTTP is a real MCP client (the go-sdk's) of MCP over Streamable
// HTTP at $MCP_URL, presenting a bearer token:
//
//	mcphttp TOKEN list
//	mcphttp TOKEN call TOOL JSON-ARGS
//	! mcphttp TOKEN list      (the connection is refused)
func cmdMCPHTTP(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: mcphttp TOKEN list | call TOOL JSON-ARGS")
	}
	// A transport of its own: each mcphttp is a client of its own, which
	// reuses no connection another one left open.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: bearer{args[0], tr}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "testscript", Version: "v0"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: ts.Getenv("MCP_URL"), HTTPClient: hc}, nil)
	if neg {
		if err == nil {
			cs.Close()
			ts.Fatalf("mcphttp: connected")
		}
		fmt.Fprintf(ts.Stdout(), "%v\n", err)
		return
	}
	ts.Check(err)
	defer cs.Close()
	out, err := mcpAct(ctx, cs, args[1:])
	ts.Check(err)
	ts.Stdout().Write([]byte(out))
}

// mcpHTTPCallMain is the program mcphttp-call: cmdMCPHTTP as a process of
// its own, for a call that a script spawns and reaps (a call in progress
// when the service is stopped):
//
//	spawn NAME 'connected' mcphttp-call URL TOKEN list | call TOOL JSON-ARGS
//
// It says "connected" on stderr once its session is set up, and each
// progress notification as "progress: MESSAGE", then prints what mcphttp
// prints; exit 1 when the call could not be made or had no answer.
func mcpHTTPCallMain() int {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: mcphttp-call URL TOKEN list | call TOOL JSON-ARGS")
		return 2
	}
	url, token, rest := os.Args[1], os.Args[2], os.Args[3:]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := mcp.NewClient(&mcp.Implementation{Name: "testscript", Version: "v0"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			fmt.Fprintf(os.Stderr, "progress: %s\n", r.Params.Message)
		},
	})
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}, nil)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcphttp-call: %v\n", err)
		return 1
	}
	defer cs.Close()
	fmt.Fprintln(os.Stderr, "connected")
	out, err := mcpAct(ctx, cs, rest)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mcphttp-call: %v\n", err)
		return 1
	}
	fmt.Print(out)
	return 0
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// cmdFreeAddr sets VAR to a free loopback address.
func cmdFreeAddr(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: freeaddr VAR")
	}
	ts.Setenv(args[0], freeAddr(ts))
}

// mcpAct lists tools or calls one, and returns what it printed. A call
// asks for progress notifications.
func mcpAct(ctx context.Context, cs *mcp.ClientSession, rest []string) (string, error) {
	var out strings.Builder
	switch rest[0] {
	case "list":
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			return "", err
		}
		var names []string
		for _, t := range res.Tools {
			names = append(names, t.Name)
		}
		sort.Strings(names)
		out.WriteString(strings.Join(names, "\n") + "\n")
	case "call":
		if len(rest) != 3 {
			return "", errors.New("usage: … call TOOL JSON-ARGS")
		}
		var a map[string]any
		if err := json.Unmarshal([]byte(rest[2]), &a); err != nil {
			return "", err
		}
		p := &mcp.CallToolParams{Name: rest[1], Arguments: a}
		p.SetProgressToken("progress")
		res, err := cs.CallTool(ctx, p)
		if err != nil {
			fmt.Fprintf(&out, "protocol error: %v\n", err)
			break
		}
		fmt.Fprintf(&out, "isError=%v\n", res.IsError)
		for _, c := range res.Content {
			if t, ok := c.(*mcp.TextContent); ok {
				out.WriteString(t.Text + "\n")
			}
		}
	default:
		return "", fmt.Errorf("unknown action %q", rest[0])
	}
	return out.String(), nil
}

// cmdMCPCall is a real MCP client (the go-sdk's) of `prod-write mcp`,
// started as a subprocess with the script's environment and directory:
//
//	mcpcall [mcp flags…] -- list
//	mcpcall [mcp flags…] -- call TOOL JSON-ARGS
//
// list prints the tool names, one a line; call prints "isError=BOOL" and
// the result's text, or "protocol error: …" for a JSON-RPC error.
func cmdMCPCall(ts *testscript.TestScript, neg bool, args []string) {
	sep := -1
	for i, a := range args {
		if a == "--" {
			sep = i
			break
		}
	}
	if sep < 0 || sep+1 >= len(args) {
		ts.Fatalf("usage: mcpcall [mcp flags…] -- list | call TOOL JSON-ARGS")
	}
	path, err := exec.LookPath("prod-write")
	ts.Check(err)
	cmd := exec.Command(path, append([]string{"mcp"}, args[:sep]...)...)
	cmd.Dir = ts.MkAbs(".")
	for _, kv := range []string{"PATH", "HOME", "PROD_WRITE_CONFIG", "PROD_WRITE_KEY", "TMPDIR"} {
		cmd.Env = append(cmd.Env, kv+"="+ts.Getenv(kv))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "testscript", Version: "v0"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if neg {
		// "! mcpcall": the server must not come up.
		if err == nil {
			cs.Close()
			ts.Fatalf("mcpcall: the server started")
		}
		return
	}
	ts.Check(err)
	defer cs.Close()
	out, err := mcpAct(ctx, cs, args[sep+1:])
	ts.Check(err)
	ts.Stdout().Write([]byte(out))
}
