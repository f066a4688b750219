// Package cli wires prod-write's commands (docs/DESIGN.md §8). Each command has one
// constructor, NewCmdX(f, runF), whose RunE only copies flags into an
// options struct; the work is in a run function that tests can call with
// fakes. Errors are printed once, by [Main], and mapped to exit codes by
// [ExitCode].
package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/fastrun"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/version"
	"github.com/prod-write/prod-write/pkg/visible"
)

// IOStreams are a command's standard streams.
type IOStreams = localapi.Streams

// System returns the process's own streams.
func System() *IOStreams {
	return &IOStreams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, ErrTTY: term.IsTerminal(int(os.Stderr.Fd()))}
}

// Factory holds what commands depend on: the in-process API's Env, whose
// fields tests swap.
type Factory struct {
	localapi.Env
}

// NewFactory returns a factory for the real process.
func NewFactory() *Factory {
	return &Factory{Env: localapi.Env{IO: System(), Now: time.Now, LookupEnv: os.LookupEnv, Getwd: os.Getwd}}
}

// printJSON writes v as indented JSON.
func printJSON(w io.Writer, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	// The same value, with what would not show as itself written as
	// \u escapes (docs/adr/0062-showing-agent-text.md).
	_, err := w.Write(visible.JSON(buf.Bytes()))
	return err
}

// Main runs the command tree with os.Args and returns the exit status: it
// is prod-write-cli, to which `prod-write` (pkg/fastrun) hands every
// command line but a run through the runner service. aws and net, when not
// nil, link the distributed backends, the bridges and the MCP server in
// (prod-write-net).
func Main(aws AWS, net Net) int {
	f := NewFactory()
	f.AWS, f.Net = aws, net
	return Run(os.Args[1:], f)
}

// Run runs prod-write with args and returns the exit status.
func Run(args []string, f *Factory) int {
	f.Args = args
	root := NewCmdRoot(f)
	root.SetArgs(args)
	root.SetIn(f.IO.In)
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.Err)
	err := root.Execute()
	if err == nil {
		return ExitOK
	}
	var usage *localapi.UsageError
	if rest, ok := strings.CutPrefix(err.Error(), "unknown command "); ok && !errors.As(err, &usage) {
		// cobra's own error for an unknown top-level word, untyped, with
		// its suggestions on lines of their own: a usage error all the
		// same, said as a group's unknown word is.
		err = &localapi.UsageError{Msg: err.Error()}
		if q, qerr := strconv.QuotedPrefix(rest); qerr == nil {
			word, _ := strconv.Unquote(q)
			err = unknownCommand(root, word)
		}
	}
	if !f.JSON {
		// cobra found the error before it parsed --json (an unknown
		// command, a bad flag before it): reported as asked all the same.
		f.JSON = askedJSON(root, args)
	}
	printError(f, err)
	return ExitCode(err)
}

// askedJSON reports whether args ask for --json, read as the command they
// name would read them, leniently: an unknown flag is skipped, and a
// flag's value is never taken for --json (file FP --summary --json).
func askedJSON(root *cobra.Command, args []string) bool {
	cmd, rest, _ := root.Find(args)
	if cmd == nil {
		cmd, rest = root, args
	}
	fs := pflag.NewFlagSet("", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	asked := fs.Bool("json", false, "")
	like := func(fl *pflag.Flag) {
		if fs.Lookup(fl.Name) == nil {
			fs.VarPF(anyValue{}, fl.Name, fl.Shorthand, "").NoOptDefVal = fl.NoOptDefVal
		}
	}
	cmd.Flags().VisitAll(like)
	cmd.InheritedFlags().VisitAll(like)
	if fs.Parse(rest) != nil {
		return false
	}
	return *asked
}

// anyValue is a flag value that takes anything and keeps nothing.
type anyValue struct{}

func (anyValue) String() string   { return "" }
func (anyValue) Set(string) error { return nil }
func (anyValue) Type() string     { return "string" }

func printError(f *Factory, err error) {
	w := f.IO.Err
	var exitErr *ExitError
	if errors.As(err, &exitErr) && exitErr.Msg == "" {
		return
	}
	if r, ok := refusal.As(err); ok {
		fastrun.PrintRefusal(w, f.JSON, r, ExitCode(err))
		return
	}
	var hint string
	var usage *localapi.UsageError
	var apiErr *api.Error
	switch {
	case errors.As(err, &apiErr) && apiErr.Hint != "":
		hint = apiErr.Hint
	case errors.As(err, &usage):
		hint = "see 'prod-write --help'"
	case errors.Is(err, keys.ErrNotAKey):
		hint = "a key is the file `prod-write keygen --out FILE` writes (PKCS#8 PEM, mode 0600); its public line goes in trust.toml"
	}
	fastrun.PrintFailure(w, f.JSON, fastrun.Failure{Code: localapi.ErrorCode(err), Exit: ExitCode(err), Message: err.Error(), Hint: hint})
}

// NewCmdRoot builds the command tree.
func NewCmdRoot(f *Factory) *cobra.Command {
	root := &cobra.Command{
		Use:   "prod-write",
		Short: "Approval-gated production writes",
		Long: `prod-write runs a named production write only when that exact invocation was
approved: by a standing Gera decision, or by an operator's certainty record
plus a human's approval. Every run leaves a signed, fsynced receipt that CI
replays.`,
		Example: `  prod-write init --demo ./pw && cd ./pw
  prod-write plan config-push --target staging --param service=api --file config=app.toml --key keys/agent.key`,
		Version:       version.Version,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.PersistentFlags().StringVar(&f.ConfigPath, "config", "", "configuration `FILE` (default: prod-write.toml here or in a parent, or $PROD_WRITE_CONFIG)")
	root.PersistentFlags().StringVar(&f.KeyPath, "key", "", "the acting principal's private key `FILE` (default $PROD_WRITE_KEY)")
	root.PersistentFlags().BoolVar(&f.JSON, "json", false, "machine-readable output")
	// --version honours --json like every command (docs/JSON.md), and
	// says which binary answered, as `version` does.
	root.SetVersionTemplate(versionTemplate(f.binary()))
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &localapi.UsageError{Msg: err.Error()} })

	root.AddCommand(
		NewCmdInit(f, nil),
		NewCmdKeygen(f, nil),
		NewCmdSetup(f, nil),
		NewCmdKey(f, nil),
		NewCmdOps(f),
		NewCmdPlan(f, nil),
		NewCmdStatus(f, nil),
		NewCmdFile(f, nil),
		NewCmdDecide(f, nil),
		NewCmdGera(f, nil),
		NewCmdWithdraw(f, nil),
		NewCmdFreeze(f, nil),
		NewCmdPasskey(f),
		NewCmdBreakGlass(f, nil, nil),
		NewCmdRun(f, nil),
		NewCmdReceipts(f),
		NewCmdStore(f, nil),
		NewCmdArchive(f, nil),
		NewCmdReplay(f, nil),
		NewCmdHistory(f, nil),
		NewCmdBridge(f, nil),
		NewCmdDoctor(f, nil),
		NewCmdMCP(f, nil),
		NewCmdServe(f, nil),
		NewCmdVersion(f, nil),
	)
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Example = "  source <(prod-write completion bash)\n  prod-write completion zsh > \"${fpath[1]}/_prod-write\""
			for _, sh := range c.Commands() {
				sh.Example = fmt.Sprintf("  prod-write completion %s > prod-write.%s", sh.Name(), sh.Name())
			}
		}
	}
	for _, c := range root.Commands() {
		if c.Args == nil {
			c.Args = cobra.NoArgs
		}
		wrapArgs(c)
	}
	unknownSubcommands(root)
	registerCompletions(f, root)
	return root
}

// unknownSubcommands makes a command group given a word that is none of its
// subcommands a usage error (exit 64) with cobra's suggestions, rather than
// its help and exit 0: a mistyped `receipts lst` in a CI step must fail.
func unknownSubcommands(c *cobra.Command) {
	for _, sub := range c.Commands() {
		unknownSubcommands(sub)
	}
	if !c.HasSubCommands() || c.Runnable() || c == c.Root() {
		return
	}
	c.Args = cobra.ArbitraryArgs
	c.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		return unknownCommand(cmd, args[0])
	}
}

func unknownCommand(cmd *cobra.Command, word string) error {
	msg := fmt.Sprintf("unknown command %q for %q", word, cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2
	}
	if s := cmd.SuggestionsFor(word); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return &localapi.UsageError{Msg: msg}
}

// wrapArgs makes argument-count errors usage errors (exit 64).
func wrapArgs(c *cobra.Command) {
	if c.Args != nil {
		check := c.Args
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return &localapi.UsageError{Msg: fmt.Sprintf("%s: %v", cmd.CommandPath(), err)}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}
