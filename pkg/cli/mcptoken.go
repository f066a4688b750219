package cli

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/admin"
)

// MCPTokenAddOptions are `mcp token add`'s inputs.
type MCPTokenAddOptions struct {
	F         *Factory `json:"-"`
	Tokens    string
	Principal string
	Scope     string
	AllowRun  bool
}

// MCPTokenListOptions are `mcp token list`'s inputs.
type MCPTokenListOptions struct {
	F      *Factory `json:"-"`
	Tokens string
}

// MCPTokenRevokeOptions are `mcp token revoke`'s inputs.
type MCPTokenRevokeOptions struct {
	F      *Factory `json:"-"`
	Tokens string
	ID     string
}

// handOffTokens is why `mcp token` runs in prod-write-net: the tokens
// file is read by the MCP server's own parser.
const handOffTokens = "it edits the MCP tokens file with the MCP server's parser"

// NewCmdMCPToken builds `mcp token`, whose subcommands are add, list and
// revoke.
func NewCmdMCPToken(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "token",
		Short: "Add, list and revoke the bearer tokens of MCP over HTTP",
		Long: `token manages the bearer tokens the runner service accepts on MCP over HTTP
([service] mcp_tokens, or --tokens FILE): the file holds each token's sha256,
principal and scope, never the token. The running service reads the file
again at the first request after it changes: a token added is served, and
one revoked refused, from then on, with no restart (docs/AGENTS.md).`,
		Example: `  prod-write mcp token add agent --scope agent --config /etc/prod-write/prod-write.toml
  prod-write mcp token list
  prod-write mcp token revoke 3f2a9c01b7de`,
	}
	cmd.AddCommand(NewCmdMCPTokenAdd(f, nil), NewCmdMCPTokenList(f, nil), NewCmdMCPTokenRevoke(f, nil))
	return cmd
}

// NewCmdMCPTokenAdd builds `mcp token add`.
func NewCmdMCPTokenAdd(f *Factory, runF func(*MCPTokenAddOptions) error) *cobra.Command {
	opts := &MCPTokenAddOptions{F: f}
	cmd := &cobra.Command{
		Use:   "add PRINCIPAL --scope read-only|agent [--allow-run]",
		Short: "Make a bearer token for a principal and add its hash to the tokens file",
		Long: `add makes a new random bearer token for PRINCIPAL, an agent of the trust
policy, prints it once on standard output, and appends only its sha256, with
the principal and scope, to the tokens file. Nothing else keeps the token:
store it where the agent host reads it (its secret store, an environment
variable), never in a file you commit.

--scope read-only lists and calls the tools that read; agent plans as well
(with the principal's key in [service] mcp_keys). --allow-run lets an agent
token call run too, where the service's mcp_allow_run allows it.

The file is written durably, keeping its mode, owner and group (a new one
is made with mode 0644: it holds hashes only); one that another account
may write, or in a directory another account may write, is refused. The
running service serves the token from its next request.`,
		Example: `  prod-write mcp token add agent --scope agent --config /etc/prod-write/prod-write.toml
  prod-write mcp token add gateway --scope read-only --tokens /etc/prod-write/mcp-tokens.toml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Principal = args[0]
			if runF != nil {
				return runF(opts)
			}
			return mcpTokenAddRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Scope, "scope", "", "what the token reaches: read-only or agent (required)")
	cmd.RegisterFlagCompletionFunc("scope", cobra.FixedCompletions([]string{admin.MCPScopeReadOnly, admin.MCPScopeAgent}, cobra.ShellCompDirectiveNoFileComp))
	cmd.Flags().BoolVar(&opts.AllowRun, "allow-run", false, "with --scope agent, the token may also call run")
	cmd.Flags().StringVar(&opts.Tokens, "tokens", "", "the tokens `FILE` (default: [service] mcp_tokens)")
	return cmd
}

// NewCmdMCPTokenList builds `mcp token list`.
func NewCmdMCPTokenList(f *Factory, runF func(*MCPTokenListOptions) error) *cobra.Command {
	opts := &MCPTokenListOptions{F: f}
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the entries of the tokens file",
		Long: `list shows each entry of the tokens file: its id (the first 12 hex digits of
the token's sha256, which revoke takes), principal, scope, whether it may
run, and where it is in the file. No token is ever shown: the file has
none.`,
		Example: `  prod-write mcp token list
  prod-write mcp token list --tokens /etc/prod-write/mcp-tokens.toml --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return mcpTokenListRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Tokens, "tokens", "", "the tokens `FILE` (default: [service] mcp_tokens)")
	return cmd
}

// NewCmdMCPTokenRevoke builds `mcp token revoke`.
func NewCmdMCPTokenRevoke(f *Factory, runF func(*MCPTokenRevokeOptions) error) *cobra.Command {
	opts := &MCPTokenRevokeOptions{F: f}
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: "Remove a token's entry from the tokens file",
		Long: `revoke removes the entry whose id begins with ID (at least 6 hex digits, as
list shows them; an id that begins more than one entry's is refused) and
the comment lines right above it. The running service refuses the token
from its next request and ends its sessions.`,
		Example: `  prod-write mcp token revoke 3f2a9c01b7de`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.ID = args[0]
			if runF != nil {
				return runF(opts)
			}
			return mcpTokenRevokeRun(opts)
		},
	}
	cmd.Flags().StringVar(&opts.Tokens, "tokens", "", "the tokens `FILE` (default: [service] mcp_tokens)")
	return cmd
}

func mcpTokenAddRun(o *MCPTokenAddOptions) error {
	f := o.F
	if f.Net == nil {
		return f.HandOff(handOffTokens)
	}
	r, err := admin.MCPTokenAdd(&f.Env, admin.MCPTokenAddRequest{Tokens: o.Tokens, Principal: o.Principal, Scope: o.Scope, AllowRun: o.AllowRun})
	if err != nil {
		return err
	}
	if f.JSON {
		return printJSON(f.IO.Out, r)
	}
	// The token alone on stdout, once; what is no secret on stderr.
	fmt.Fprintln(f.IO.Out, r.Token)
	fmt.Fprintf(f.IO.Err, "added token %s for %s, scope %s, at %s: it is shown only now, and the service serves it from its next request\n", r.ID, r.Principal, scopeText(r.Scope, r.AllowRun), r.Source)
	return nil
}

func mcpTokenListRun(o *MCPTokenListOptions) error {
	f := o.F
	if f.Net == nil {
		return f.HandOff(handOffTokens)
	}
	r, err := admin.MCPTokenList(&f.Env, o.Tokens)
	if err != nil {
		return err
	}
	if f.JSON {
		return printJSON(f.IO.Out, r)
	}
	if len(r.Tokens) == 0 {
		fmt.Fprintf(f.IO.Out, "%s: no tokens\n", r.File)
		return nil
	}
	tw := tabwriter.NewWriter(f.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPRINCIPAL\tSCOPE\tENTRY")
	for _, e := range r.Tokens {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.ID, e.Principal, scopeText(e.Scope, e.AllowRun), e.Source)
	}
	return tw.Flush()
}

func mcpTokenRevokeRun(o *MCPTokenRevokeOptions) error {
	f := o.F
	if f.Net == nil {
		return f.HandOff(handOffTokens)
	}
	r, err := admin.MCPTokenRevoke(&f.Env, o.Tokens, o.ID)
	if err != nil {
		return err
	}
	if f.JSON {
		return printJSON(f.IO.Out, r)
	}
	fmt.Fprintf(f.IO.Out, "revoked token %s of %s, scope %s, which was at %s: the service refuses it from its next request\n", r.ID, r.Principal, scopeText(r.Scope, r.AllowRun), r.Source)
	return nil
}

// scopeText is an entry's scope as the list shows it.
func scopeText(scope string, allowRun bool) string {
	if allowRun {
		return scope + ", run"
	}
	return scope
}
