package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/cli"
	"github.com/prod-write/prod-write/pkg/config"
)

// rootSections adds to prod-write(1), as cobra generated it, the sections
// a command tree cannot tell: EXIT STATUS (from cli.ExitStatuses, the
// table beside the exit codes), ENVIRONMENT and FILES (the defaults from
// pkg/config itself), and a SEE ALSO link to prod-write.toml(5).
func rootSections(page []byte) ([]byte, error) {
	extra, err := extraSections()
	if err != nil {
		return nil, err
	}
	const seeAlso = ".SH SEE ALSO\n"
	i := bytes.Index(page, []byte(seeAlso))
	if i < 0 {
		return nil, fmt.Errorf("prod-write(1) has no %q section to put EXIT STATUS before", strings.TrimSpace(seeAlso))
	}
	var b bytes.Buffer
	b.Write(page[:i])
	b.WriteString(extra)
	b.WriteString(seeAlso)
	rest := page[i+len(seeAlso):]
	end := bytes.IndexByte(rest, '\n')
	if end < 0 {
		end = len(rest)
	}
	b.Write(bytes.TrimRight(rest[:end], " ,"))
	b.WriteString(", \\fBprod-write.toml(5)\\fP")
	b.Write(rest[end:])
	return b.Bytes(), nil
}

// envVars are the variables prod-write and prod-write-net read themselves
// (a test holds the list to the PROD_WRITE_ names in pkg/cli and
// pkg/config).
var envVars = []struct{ name, text string }{
	{"PROD_WRITE_CONFIG", "The configuration file, when --config is not given (see FILES)."},
	{"PROD_WRITE_KEY", "The acting principal's key file, when --key is not given."},
	{bridge.EnvSlackSigningSecret, "bridge serve: the Slack app's signing secret, unless slack_signing_secret_file is set."},
	{bridge.EnvSlackBotToken, "bridge serve: the Slack bot token, unless slack_bot_token_file is set."},
	{bridge.EnvGitHubToken, "bridge serve: the GitHub token, unless github_token_file is set."},
	{"CREDENTIALS_DIRECTORY", "serve: the directory operations' secrets are read from when [service] credentials is not set (systemd's LoadCredential= sets it)."},
}

func extraSections() (string, error) {
	var b strings.Builder
	b.WriteString(".SH EXIT STATUS\n")
	b.WriteString("run exits with the program's own status when it ran; otherwise, and for every other command:\n")
	for _, s := range cli.ExitStatuses {
		code := fmt.Sprint(s.Code)
		if s.Plus != "" {
			code += "+" + s.Plus
		}
		fmt.Fprintf(&b, ".TP\n\\fB%s\\fR\n%s\n", code, escapeLine(roffEscape(s.Meaning)))
	}

	b.WriteString(".SH ENVIRONMENT\n")
	for _, v := range envVars {
		fmt.Fprintf(&b, ".TP\n\\fB%s\\fR\n%s\n", roffEscape(v.name), escapeLine(roffEscape(v.text)))
	}
	b.WriteString(".PP\nAn operation sees only the variables its definition passes (env.pass, bound into the plan's fingerprint by value) and its secrets (env.secret); prod\\-write\\-net reads the AWS SDK's usual variables (AWS_REGION, AWS_PROFILE, ...) for DynamoDB and S3.\n")

	// The defaults, as pkg/config resolves them for an empty file in DIR.
	const dir = "/DIR"
	c, err := config.Parse(filepath.Join(dir, config.FileName), nil)
	if err != nil {
		return "", fmt.Errorf("the defaults of an empty %s: %w", config.FileName, err)
	}
	rel := func(p string) (string, error) {
		r, err := filepath.Rel(dir, p)
		if err != nil {
			return "", fmt.Errorf("default path %s: %w", p, err)
		}
		return "\\fIDIR\\fR/" + roffEscape(r), nil
	}
	files := []struct{ path, text string }{
		{c.Registry, "The operation registry, one TOML file per operation (key registry)."},
		{c.Trust, "The trust policy: the principals, who may act in which roles, with which keys (key trust)."},
		{c.State, "The state directory (key state), private to the account that runs operations (the service's, in service mode)."},
		{c.StoreDir(), "The embedded store (store.backend = \"embedded\"): plans, evidence, and its consumption exactly once."},
		{c.JournalPath(), "The receipt journal, which replay verifies."},
		{filepath.Join(c.State, "bridge"), "The Slack and GitHub bridges' events and posts."},
	}
	b.WriteString(".SH FILES\n")
	fmt.Fprintf(&b, ".TP\n\\fB%s\\fR\nThe configuration, prod\\-write.toml(5): \\-\\-config, else $PROD_WRITE_CONFIG, else %s in the working directory or the nearest parent that has one. \\fIDIR\\fR is its directory, against which its relative paths resolve; the defaults are:\n", roffEscape(config.FileName), roffEscape(config.FileName))
	for _, f := range files {
		p, err := rel(f.path)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, ".TP\n%s\n%s\n", p, escapeLine(roffEscape(f.text)))
	}
	return b.String(), nil
}
