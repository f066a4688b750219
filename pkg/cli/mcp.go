package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// MCPOptions are mcp's inputs.
type MCPOptions struct {
	F        *Factory `json:"-"`
	AllowRun bool
}

// NewCmdMCP builds `mcp`.
func NewCmdMCP(f *Factory, runF func(*MCPOptions) error) *cobra.Command {
	opts := &MCPOptions{F: f}
	cmd := &cobra.Command{
		Use:   "mcp [--allow-run]",
		Short: "Serve the agent's surface over MCP on stdin and stdout",
		Long: `mcp serves prod-write to an agent over the Model Context Protocol, on stdin and
stdout. Its tools derive from the registry: list_operations, one plan tool
per operation (plan_NAME, whose input schema is the operation's targets,
params and files), status, show_receipt and explain; with --allow-run, run, which
still passes the gate. It acts for the principal of --key (or
$PROD_WRITE_KEY): the plan tools need the agent role. Nothing that files,
approves or records a decision is ever served. See docs/AGENTS.md.

mcp token adds, lists and revokes the bearer tokens the runner service
accepts on MCP over HTTP.`,
		Example: `  PROD_WRITE_KEY=keys/agent.key prod-write mcp
  prod-write mcp --key keys/agent.key --config /etc/prod-write/prod-write.toml --allow-run`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return mcpRun(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.AllowRun, "allow-run", false, "also serve run (approved plans only: it passes the same gate)")
	cmd.AddCommand(NewCmdMCPToken(f))
	return cmd
}

func mcpRun(o *MCPOptions) error {
	f := o.F
	if f.Net == nil {
		return f.HandOff("it serves MCP")
	}
	b := localapi.NewMCPBackend(&f.Env)
	if f.KeyFile() == "" {
		fmt.Fprintf(f.IO.Err, "prod-write: warning: no key (--key or PROD_WRITE_KEY): serving read-only tools; plans cannot be made\n")
	} else if pr, err := b.Principal(); err == nil && pr != nil {
		var other []string
		for _, r := range pr.Roles {
			if r != approval.RoleAgent {
				other = append(other, r)
			}
		}
		if len(other) > 0 {
			// docs/DESIGN.md §13: whatever the agent can read, it can use elsewhere.
			fmt.Fprintf(f.IO.Err, "prod-write: warning: %s also holds %s; this server serves none of those roles, but whoever can read its key can act as %s on the CLI\n",
				pr.ID, strings.Join(other, ", "), pr.ID)
		}
	}
	// The MCP stream is f.IO's: nothing else may write to it, so the tools
	// run with streams of their own (see localapi.MCPBackend).
	err := f.Net.ServeMCP(context.Background(), b, o.AllowRun, f.IO.In, f.IO.Out)
	// A run in progress finishes, with its outcome receipt, before we exit.
	b.Drain()
	return err
}
