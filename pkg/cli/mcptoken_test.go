package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// The flags of mcp token add, list and revoke, read into their options.
func TestMCPTokenFlags(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		want     any
		wantCode int
	}{
		{name: "add", args: []string{"mcp", "token", "add", "agent", "--scope", "agent", "--allow-run", "--tokens", "t.toml"},
			want: MCPTokenAddOptions{Principal: "agent", Scope: "agent", AllowRun: true, Tokens: "t.toml"}},
		{name: "add read-only", args: []string{"mcp", "token", "add", "gw", "--scope", "read-only"},
			want: MCPTokenAddOptions{Principal: "gw", Scope: "read-only"}},
		{name: "add without principal", args: []string{"mcp", "token", "add", "--scope", "agent"}, wantCode: ExitUsage},
		{name: "add two principals", args: []string{"mcp", "token", "add", "a", "b", "--scope", "agent"}, wantCode: ExitUsage},
		{name: "list", args: []string{"mcp", "token", "list", "--tokens", "t.toml"}, want: MCPTokenListOptions{Tokens: "t.toml"}},
		{name: "list with an argument", args: []string{"mcp", "token", "list", "x"}, wantCode: ExitUsage},
		{name: "revoke", args: []string{"mcp", "token", "revoke", "3f2a9c01b7de"}, want: MCPTokenRevokeOptions{ID: "3f2a9c01b7de"}},
		{name: "revoke without id", args: []string{"mcp", "token", "revoke"}, wantCode: ExitUsage},
		{name: "unknown subcommand", args: []string{"mcp", "token", "rotate"}, wantCode: ExitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _, _ := testFactory(t, t.TempDir())
			var got any
			root := NewCmdRoot(f)
			mcp, _, err := root.Find([]string{"mcp"})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range mcp.Commands() {
				if c.Name() == "token" {
					mcp.RemoveCommand(c)
				}
			}
			token := &cobra.Command{Use: "token"}
			token.AddCommand(
				NewCmdMCPTokenAdd(f, func(o *MCPTokenAddOptions) error { o.F = nil; got = *o; return nil }),
				NewCmdMCPTokenList(f, func(o *MCPTokenListOptions) error { o.F = nil; got = *o; return nil }),
				NewCmdMCPTokenRevoke(f, func(o *MCPTokenRevokeOptions) error { o.F = nil; got = *o; return nil }),
			)
			mcp.AddCommand(token)
			wrapArgs(token)
			unknownSubcommands(root)
			root.SetArgs(tc.args)
			root.SetOut(f.IO.Out)
			root.SetErr(f.IO.Err)
			code := ExitCode(root.Execute())
			if code != tc.wantCode {
				t.Fatalf("exit code %d, want %d", code, tc.wantCode)
			}
			if tc.wantCode == 0 && got != tc.want {
				t.Errorf("options %+v, want %+v", got, tc.want)
			}
		})
	}
}

// add prints the token once, alone, on stdout, and writes only its hash;
// it refuses a principal the policy lacks or that is no agent, and a
// missing or unknown scope, and then writes nothing. list shows the
// entry, revoke removes it.
func TestMCPTokenRun(t *testing.T) {
	h := newRunHarness(t)
	tokens := filepath.Join(h.dir, "mcp-tokens.toml")
	run := func(args ...string) (int, string, string) {
		t.Helper()
		f, out, errb := testFactory(t, h.dir)
		f.Net = tokensNet{}
		code := Run(args, f)
		return code, out.String(), errb.String()
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"unknown principal", []string{"nobody", "--scope", "agent"}, ExitRefused, "principal_unknown"},
		{"not an agent", []string{"alice", "--scope", "agent"}, ExitRefused, "does not hold the agent role"},
		{"no scope", []string{"agent"}, ExitUsage, "--scope is required"},
		{"unknown scope", []string{"agent", "--scope", "admin"}, ExitUsage, `--scope "admin"`},
		{"read-only that runs", []string{"agent", "--scope", "read-only", "--allow-run"}, ExitUsage, "--allow-run needs --scope agent"},
	} {
		code, out, errs := run(append([]string{"mcp", "token", "add", "--tokens", tokens}, tc.args...)...)
		if code != tc.code || !strings.Contains(errs, tc.err) || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want %d and %q", tc.name, code, out, errs, tc.code, tc.err)
		}
		if _, err := os.Stat(tokens); err == nil {
			t.Fatalf("%s: the tokens file was written", tc.name)
		}
	}
	// Without --tokens and without [service] mcp_tokens: no file to edit.
	if code, _, errs := run("mcp", "token", "add", "agent", "--scope", "agent"); code != ExitConfig || !strings.Contains(errs, "mcp_tokens") {
		t.Errorf("no tokens file configured: exit %d, %q", code, errs)
	}

	code, out, errs := run("mcp", "token", "add", "agent", "--scope", "agent", "--tokens", tokens)
	if code != 0 {
		t.Fatalf("add: exit %d: %s", code, errs)
	}
	token := strings.TrimSuffix(out, "\n")
	if !strings.HasPrefix(token, mcpserver.TokenPrefix) || strings.Contains(token, "\n") {
		t.Fatalf("stdout %q: want the token alone", out)
	}
	id := mcpserver.HashToken(token)[:mcpserver.IDLen]
	if strings.Contains(errs, token) || !strings.Contains(errs, "added token "+id+" for agent, scope agent") {
		t.Errorf("stderr %q: want the id and no token", errs)
	}
	data, err := os.ReadFile(tokens)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), token) || !strings.Contains(string(data), mcpserver.HashToken(token)) {
		t.Errorf("the tokens file:\n%s", data)
	}

	code, out, _ = run("mcp", "token", "list", "--tokens", tokens)
	if code != 0 || !strings.Contains(out, id+"  agent      agent  "+tokens+":1") || strings.Contains(out, token) {
		t.Errorf("list: exit %d:\n%s", code, out)
	}
	if code, _, errs = run("mcp", "token", "revoke", "abcdef", "--tokens", tokens); code != ExitDataErr || !strings.Contains(errs, "no token entry has id abcdef") {
		t.Errorf("revoke of no entry: exit %d, %q", code, errs)
	}
	code, out, _ = run("mcp", "token", "revoke", id, "--tokens", tokens)
	if code != 0 || !strings.Contains(out, "revoked token "+id+" of agent") {
		t.Errorf("revoke: exit %d: %q", code, out)
	}
	if code, out, _ = run("mcp", "token", "list", "--tokens", tokens); code != 0 || out != tokens+": no tokens\n" {
		t.Errorf("list after revoke: exit %d: %q", code, out)
	}
}

// --scope completes to the two scopes a token entry takes.
func TestMCPTokenAddCompletesScope(t *testing.T) {
	f, out, _ := testFactory(t, t.TempDir())
	if code := Run([]string{"__complete", "mcp", "token", "add", "agent", "--scope", ""}, f); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if got := strings.Fields(out.String()); len(got) < 2 || got[0] != "read-only" || got[1] != "agent" {
		t.Errorf("completions %q, want read-only and agent", out.String())
	}
}
