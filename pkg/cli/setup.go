package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/admin"
)

// SetupServiceOptions are `setup service`'s inputs: the request its flags
// fill in.
type SetupServiceOptions struct {
	F *Factory `json:"-"`
	admin.SetupServiceRequest
}

// NewCmdSetup builds `setup`, whose one subcommand is `service`.
func NewCmdSetup(f *Factory, runF func(*SetupServiceOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "setup",
		Short:   "Set up a host: the runner service's layout",
		Example: `  prod-write setup service --user prod-write --agent agent`,
	}
	opts := &SetupServiceOptions{F: f}
	svc := &cobra.Command{
		Use:   "service",
		Short: "Write the runner service's documented layout (run as root)",
		Long: `setup service writes, as docs/DEPLOYMENT.md lays it out: root's policy
(prod-write.toml, trust.toml, an empty operations/ registry) in --etc; the
service account's credentials directory there; its state directory, with
a new runner key (and, with any bridge secret, a bridge key and the
secrets) in --state; and the agent's client configuration, naming only the
socket, in the agent's home. trust.toml holds the runner (and bridge)
principals and commented places for the agent and the humans, whose keys
each makes for itself.

It never overwrites: if any file it would write exists, it writes nothing
and says which (there is no --force: move the old file away). It follows no
symbolic link in a directory another account may write, creates every file
exclusively, and sets each owner and mode itself. A bridge secret comes
only from the file (or standard input, "-") named, and never empty.

The accounts (--user, --socket-group, --agent) must exist: setup creates
none. --root writes everything below a prefix (a scratch root, an image
being built); the accounts are still this host's.`,
		Example: `  prod-write setup service
  prod-write setup service --agent agent --slack-signing-secret /root/slack-signing-secret --slack-bot-token -`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return setupServiceRun(opts)
		},
	}
	fl := svc.Flags()
	fl.StringVar(&opts.Root, "root", "/", "write every path below this `DIR`")
	fl.StringVar(&opts.Etc, "etc", "/etc/prod-write", "the policy's `DIR` (root's)")
	fl.StringVar(&opts.State, "state", "/var/lib/prod-write", "the service's state `DIR`")
	fl.StringVar(&opts.Socket, "socket", "/run/prod-write/prod-write.sock", "the service's socket `PATH` (not created)")
	fl.StringVar(&opts.User, "user", "prod-write", "the service `ACCOUNT`")
	fl.StringVar(&opts.SocketGroup, "socket-group", "prod-write-callers", "the callers' `GROUP` (\"\": the service's own)")
	fl.StringVar(&opts.Agent, "agent", "agent", "the agent's `ACCOUNT`, whose client configuration is written (\"\": none)")
	fl.StringVar(&opts.AgentHome, "agent-home", "", "the agent's home `DIR`, which must exist (default: the account's)")
	fl.StringVar(&opts.SlackSigningSecret, "slack-signing-secret", "", "the Slack bridge's signing secret, from `FILE` (\"-\": stdin)")
	fl.StringVar(&opts.SlackBotToken, "slack-bot-token", "", "the Slack bridge's bot token, from `FILE` (\"-\": stdin)")
	fl.StringVar(&opts.GitHubToken, "github-token", "", "the GitHub bridge's token, from `FILE` (\"-\": stdin)")
	fl.StringVar(&opts.GitHubWebhookSecret, "github-webhook-secret", "", "the GitHub bridge's webhook secret, from `FILE` (\"-\": stdin)")
	cmd.AddCommand(svc)
	return cmd
}

func setupServiceRun(o *SetupServiceOptions) error {
	req := o.SetupServiceRequest
	req.Stdin = o.F.IO.In
	r, err := admin.SetupService(req)
	if err != nil {
		return err
	}
	out := o.F.IO.Out
	if o.F.JSON {
		return printJSON(out, r)
	}
	if r.Root != "/" {
		fmt.Fprintf(out, "wrote, below %s:\n", r.Root)
	} else {
		fmt.Fprintln(out, "wrote:")
	}
	for _, w := range r.Written {
		fmt.Fprintf(out, "  %-60s %s %s\n", w.Path, w.Owner, w.Mode)
	}
	fmt.Fprintf(out, "runner key: %s\n", r.RunnerKey)
	if r.BridgeKey != "" {
		fmt.Fprintf(out, "bridge key: %s\n", r.BridgeKey)
	}
	fmt.Fprintln(out, "next:")
	for i, n := range r.NextSteps {
		fmt.Fprintf(out, "  %d. %s\n", i+1, n)
	}
	return nil
}
