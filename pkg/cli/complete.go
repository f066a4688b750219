package cli

import (
	"context"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// Shell completion of what the registry and the store hold: operation
// names, an operation's targets, parameter and file names, and the
// fingerprints of stored plans. In local mode they are read here; a client
// of a runner service (whose state it cannot read) asks the service:
// `ops list --json` for the registry and the plans-complete call for the
// fingerprints (docs/adr/0024-completion-through-the-service.md).
// Completion never hands the service a key, and any failure completes
// nothing.

// completeRegistry loads the registry for a completion, or nil.
func completeRegistry(f *Factory) *operations.Registry {
	c, err := f.LoadConfig()
	if err != nil {
		return nil
	}
	if c.Service.Socket != "" {
		// The API's registry, as the service sends it (each definition
		// checked against its digest).
		r, err := localapi.ServiceClient{Env: f.Keyless()}.Ops(context.Background())
		if err != nil {
			return nil
		}
		reg, err := localapi.RegistryOf(r.Operations)
		if err != nil {
			return nil
		}
		return reg
	}
	reg, err := f.Registry(c)
	if err != nil {
		return nil
	}
	return reg
}

func completeOperations(f *Factory) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		if reg := completeRegistry(f); reg != nil {
			for _, op := range reg.All() {
				if strings.HasPrefix(op.Name, toComplete) {
					out = append(out, cobra.CompletionWithDesc(op.Name, op.Description))
				}
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeOperationKeys completes what the operation named by the first
// argument declares: "targets", "params" (NAME=) or "files" (NAME=, then
// a path).
func completeOperationKeys(f *Factory, what string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		reg := completeRegistry(f)
		if reg == nil || len(args) == 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		op, ok := reg.Get(args[0])
		if !ok {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		switch what {
		case "targets":
			names = op.Targets
		case "params":
			for n := range op.Params {
				names = append(names, n+"=")
			}
		case "files":
			if strings.Contains(toComplete, "=") {
				return nil, cobra.ShellCompDirectiveDefault // a path
			}
			for n := range op.Files {
				names = append(names, n+"=")
			}
		}
		sort.Strings(names)
		var out []cobra.Completion
		for _, n := range names {
			if strings.HasPrefix(n, toComplete) {
				out = append(out, n)
			}
		}
		dir := cobra.ShellCompDirectiveNoFileComp
		if what != "targets" {
			dir |= cobra.ShellCompDirectiveNoSpace
		}
		return out, dir
	}
}

// completeArgs completes each argument from its list of words, "FP"
// standing for the fingerprints of the stored plans.
func completeArgs(f *Factory, words ...[]string) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= len(words) {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if w := words[len(args)]; len(w) != 1 || w[0] != "FP" {
			var out []cobra.Completion
			for _, x := range w {
				if strings.HasPrefix(x, toComplete) {
					out = append(out, x)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		}
		c, err := f.LoadConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var a api.API = localapi.API{Env: &f.Env}
		if c.Service.Socket != "" {
			a = localapi.ServiceClient{Env: f.Keyless()}
		}
		r, err := a.PlansComplete(cmd.Context(), api.PlansCompleteRequest{Prefix: toComplete})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var fps []cobra.Completion
		for _, fp := range r.Fingerprints {
			if strings.HasPrefix(fp, toComplete) || strings.HasPrefix(strings.TrimPrefix(fp, "sha256:"), toComplete) {
				fps = append(fps, fp)
			}
		}
		return fps, cobra.ShellCompDirectiveNoFileComp
	}
}

var fpWords = []string{"FP"}

// registerCompletions wires the completions into the command tree.
func registerCompletions(f *Factory, root *cobra.Command) {
	for _, c := range root.Commands() {
		switch c.Name() {
		case "plan":
			c.ValidArgsFunction = completeOperations(f)
			c.RegisterFlagCompletionFunc("target", completeOperationKeys(f, "targets"))
			c.RegisterFlagCompletionFunc("param", completeOperationKeys(f, "params"))
			c.RegisterFlagCompletionFunc("file", completeOperationKeys(f, "files"))
		case "status", "run", "file", "withdraw":
			c.ValidArgsFunction = completeArgs(f, fpWords)
		case "decide":
			c.ValidArgsFunction = completeArgs(f, fpWords, []string{"approve", "deny"})
		case "gera":
			c.ValidArgsFunction = completeArgs(f, []string{"go", "no-go"}, fpWords)
		case "ops":
			for _, sub := range c.Commands() {
				if sub.Name() == "show" {
					sub.ValidArgsFunction = completeOperations(f)
				}
			}
		}
	}
}
