package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
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
