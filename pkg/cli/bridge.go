package cli

import (
	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/localapi"
)

// BridgeServeOptions are bridge serve's inputs. It takes no flags: its
// configuration is prod-write.toml's [bridge] and its secrets come from the
// environment or files named there, never from the command line.
type BridgeServeOptions struct {
	F *Factory `json:"-"`
}

// NewCmdBridge builds `bridge` and `bridge serve`.
func NewCmdBridge(f *Factory, runF func(*BridgeServeOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bridge",
		Short: "The bridges: approve or deny filed plans on Slack and GitHub",
		Long: `bridge runs the service that lets approvers answer filed plans where they
work: Slack buttons and GitHub comments. See docs/BRIDGES.md.`,
		Example: "  PROD_WRITE_SLACK_SIGNING_SECRET=… PROD_WRITE_SLACK_BOT_TOKEN=xoxb-… prod-write bridge serve",
		Args:    cobra.NoArgs,
	}
	opts := &BridgeServeOptions{F: f}
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Serve Slack's interactions endpoint and poll GitHub for answers",
		Long: `serve runs the bridges as prod-write.toml's [bridge] configures it.

With slack_channel set it listens on bridge.listen for Slack's interaction
requests at /slack/interactions: it verifies Slack's request signature and
timestamp, maps the clicking Slack user to exactly one approver, refuses the
planner, the filer and unknown users with an ephemeral reply, and stores the
answer signed with the bridge key (bridge.key, a principal with role bridge).
With github_repo set it polls decision issues (or the pull request
github_pr) for "/approve FP" and "/deny FP" comments every github_poll, and
with github_webhook_secret_file set it also takes GitHub's issue_comment and
pull_request_review webhooks at /github/webhook on bridge.listen, verified
with that secret.

Secrets come from PROD_WRITE_SLACK_SIGNING_SECRET, PROD_WRITE_SLACK_BOT_TOKEN
and PROD_WRITE_GITHUB_TOKEN, or from the files slack_signing_secret_file,
slack_bot_token_file and github_token_file name; never from flags. It stops
cleanly on SIGINT or SIGTERM.`,
		Example: `  export PROD_WRITE_SLACK_SIGNING_SECRET=… PROD_WRITE_SLACK_BOT_TOKEN=xoxb-…
  prod-write bridge serve --config /etc/prod-write/prod-write.toml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return bridgeServeRun(opts)
		},
	}
	cmd.AddCommand(serve)
	return cmd
}

func bridgeServeRun(o *BridgeServeOptions) error {
	f := o.F
	if f.Net == nil {
		return f.HandOff("it serves the bridges")
	}
	return localapi.ServeBridges(&f.Env)
}
