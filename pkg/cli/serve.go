package cli

import (
	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/localapi"
)

// ServeOptions are serve's inputs.
type ServeOptions struct {
	F *Factory `json:"-"`
	// Ready, if set, is called once the socket listens (tests).
	Ready func() `json:"-"`
}

// NewCmdServe builds `serve`.
func NewCmdServe(f *Factory, runF func(*ServeOptions) error) *cobra.Command {
	opts := &ServeOptions{F: f}
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the runner service: the trust boundary between agents and production (docs/DESIGN.md §13)",
		Long: `serve is the runner service. It runs under a dedicated account, loads the
policy, registry, runner key and secrets it alone owns, keeps them warm, and
serves prod-write's commands on the Unix socket named by [service] socket in
prod-write.toml (or the socket systemd hands over). Clients are prod-write
commands whose configuration names that socket.

It takes nothing from a caller but what the protocol carries: the calling
account (SO_PEERCRED), the command's flags, and descriptors the client opened
(its stdio, working directory, key and files). Programs run as their
operation's run_as account, with an environment built from scratch and
secrets from the service's credentials directory.

SIGHUP reloads the trust policy, registry and runner key without dropping
calls in progress (a status --wait judges again at once, by the new policy).
It does not read prod-write.toml again: a change there (service.mcp_listen,
the socket, paths, backends) is logged as needing a restart.
SIGINT or SIGTERM stops accepting, on the socket and over MCP HTTP alike,
ends the waits in progress at once (a wait is only a question: a status
--wait client asks again, and says the service went away if none answers;
wait_for_decision answers pending) and waits for the other calls: a run is
never cut short, and its outcome receipt is written.`,
		Example: `  prod-write serve --config /etc/prod-write/prod-write.toml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return serveRun(opts)
		},
	}
}

func serveRun(o *ServeOptions) error {
	f := o.F
	if f.Net == nil {
		// The service also serves the bridges and MCP, and posts
		// decisions: it is prod-write-net (docs/adr/0011-runner-service.md).
		return f.HandOff("the runner service serves the bridges and MCP")
	}
	return localapi.Serve(&f.Env, o.Ready)
}
