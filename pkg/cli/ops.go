package cli

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/execute"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/visible"
)

// NewCmdOps builds `ops list` and `ops show`.
func NewCmdOps(f *Factory) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ops",
		Short: "Read the operation registry",
		Example: `  prod-write ops list
  prod-write ops show config-push --json`,
	}
	cmd.AddCommand(&cobra.Command{
		Use:     "list",
		Short:   "List the operations, with whether each is mutating",
		Example: "  prod-write ops list --json",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			// The API's result (in-process, or the service's),
			// rendered here.
			a, err := f.api()
			if err != nil {
				return err
			}
			r, err := a.Ops(cmd.Context())
			if err != nil {
				return err
			}
			return opsList(f, r.Operations)
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:     "show NAME",
		Short:   "Show one operation's definition",
		Example: "  prod-write ops show config-push",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a, err := f.api()
			if err != nil {
				return err
			}
			r, err := a.OpsShow(cmd.Context(), api.OpsShowRequest{Name: args[0]})
			if err != nil {
				return err
			}
			return opsShow(f, r.Operation)
		},
	})
	return cmd
}

func opsList(f *Factory, ops []*operations.Operation) error {
	if f.JSON {
		// Each definition as hashed (its digest checks): approval paths
		// in their stored spelling (ADR 0014).
		return printJSON(f.IO.Out, struct {
			FormatVersion int                     `json:"format_version"`
			Operations    []*operations.Operation `json:"operations"`
		}{localapi.FormatVersion, localapi.NonNil(ops)})
	}
	tw := tabwriter.NewWriter(f.IO.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tMUTATING\tTARGETS\tHERE\tDESCRIPTION")
	for _, op := range ops {
		here := "available"
		if op.Unavailable != "" {
			here = "unavailable (no " + op.Program + ")"
		}
		fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\n", op.Name, op.IsMutating(), strings.Join(op.Targets, ","), here, op.Description)
	}
	return tw.Flush()
}

func opsShow(f *Factory, op *operations.Operation) error {
	if f.JSON {
		return printJSON(f.IO.Out, struct {
			FormatVersion int `json:"format_version"`
			*operations.Operation
		}{localapi.FormatVersion, op})
	}
	w := f.IO.Out
	fmt.Fprintf(w, "name:        %s\n", op.Name)
	fmt.Fprintf(w, "description: %s\n", op.Description)
	fmt.Fprintf(w, "mutating:    %v\n", op.IsMutating())
	if op.Unavailable != "" {
		fmt.Fprintf(w, "program:     %s (unavailable: %s)\n", op.Program, op.Unavailable)
	} else {
		fmt.Fprintf(w, "program:     %s\n", op.ProgramPath)
		fmt.Fprintf(w, "runs:        %s\n", runsBy(op.ProgramPath))
	}
	fmt.Fprintf(w, "args:        %s\n", strings.Join(op.Args, " "))
	fmt.Fprintf(w, "targets:     %s\n", strings.Join(op.Targets, ", "))
	if op.Timeout != nil {
		fmt.Fprintf(w, "timeout:     %s\n", op.Timeout)
	}
	names := make([]string, 0, len(op.Params))
	for n := range op.Params {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := op.Params[n]
		var rules []string
		if p.Pattern != "" {
			rules = append(rules, "pattern "+p.Pattern)
		}
		if len(p.Enum) > 0 {
			rules = append(rules, "one of "+strings.Join(p.Enum, "|"))
		}
		if p.Min != nil {
			rules = append(rules, fmt.Sprintf("min %d", *p.Min))
		}
		if p.Max != nil {
			rules = append(rules, fmt.Sprintf("max %d", *p.Max))
		}
		fmt.Fprintf(w, "param:       %s (%s) %s\n", n, p.Type, strings.Join(rules, ", "))
	}
	for n, fl := range op.Files {
		fmt.Fprintf(w, "file:        %s (max %d bytes)\n", n, fl.MaxSize)
	}
	fmt.Fprintf(w, "approval:    paths %s, approvers %d, ttl %s\n", strings.Join(operations.PathNames(op.Approval.Paths), ", "), op.Approval.Approvers, op.ApprovalTTL())
	fmt.Fprintf(w, "digest:      %s\n", op.Digest)
	fmt.Fprintf(w, "source:      %s\n", op.Source)
	return nil
}

// runsBy says how a program will be executed on this host
// (docs/adr/0060-programs-run-by-their-path.md): by its path when only
// root can change it, else from a sealed snapshot, and why.
func runsBy(path string) string {
	mode, why := execute.Mode(path)
	why = visible.Line(why)
	if mode == "path" {
		return "by its path (" + why + ")"
	}
	return "from a sealed snapshot, as /proc/self/fd/3 (" + why + ")"
}
