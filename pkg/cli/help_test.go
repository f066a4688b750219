package cli

import (
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Every command a user can run shows an example of real use in --help.
func TestEveryCommandHasAnExample(t *testing.T) {
	root := NewCmdRoot(NewFactory())
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%q has no example in its --help", c.CommandPath())
		} else if !strings.Contains(c.Example, "prod-write") {
			t.Errorf("%q's example does not show a prod-write invocation: %q", c.CommandPath(), c.Example)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// A flag's placeholder in --help is its type, or the word its usage puts in
// backticks: pflag takes the first backticked words of a usage string as
// the placeholder, so a command quoted that way showed as
// "--checkpoint receipts checkpoint". Only metavariables such as
// FILE, N or NAME=VALUE go in backticks.
func TestFlagPlaceholdersAreMetavariables(t *testing.T) {
	root := NewCmdRoot(NewFactory())
	metavar := regexp.MustCompile(`^[A-Z][A-Z0-9_]*(=[A-Z][A-Z0-9_]*)?$`)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(fl *pflag.Flag) {
			name, usage := pflag.UnquoteUsage(fl)
			if strings.Contains(fl.Usage, "`") && !metavar.MatchString(name) {
				t.Errorf("%s --%s shows the placeholder %q: backticks in %q mark a metavariable only", c.CommandPath(), fl.Name, name, fl.Usage)
			}
			if strings.Contains(usage, "`") {
				t.Errorf("%s --%s: more than one pair of backticks in %q (pflag unquotes only the first)", c.CommandPath(), fl.Name, fl.Usage)
			}
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}
