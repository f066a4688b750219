package cli

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/spf13/cobra"
	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/pkg/fastrun"
	"github.com/prod-write/prod-write/pkg/localapi"
)

// cobraRun parses args with the real command tree and returns what `run`
// would get, or ok false when the tree would not call run's RunE with them.
func cobraRun(args []string) (fastrun.Line, bool) {
	f := &Factory{Env: localapi.Env{IO: &IOStreams{Out: io.Discard, Err: io.Discard}}}
	root := NewCmdRoot(f)
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	var got fastrun.Line
	called := false
	for _, c := range root.Commands() {
		if c.Name() == "run" {
			c.RunE = func(cmd *cobra.Command, a []string) error {
				called = true
				got.Fingerprint = a[0]
				return nil
			}
		}
	}
	root.SetArgs(args)
	if err := root.Execute(); err != nil || !called {
		return fastrun.Line{}, false
	}
	got.JSON, got.Config, got.Key = f.JSON, f.ConfigPath, f.KeyPath
	return got, true
}

// Every command line fastrun takes is one the command tree reads the same
// way: the same fingerprint, --json, --config and --key. (fastrun may leave
// lines to the tree; it may never read one differently.)
func TestFastrunParsesAsCobra(t *testing.T) {
	tokens := []string{"run", "status", "help", "sha256:ab", "x", "--json", "--json=false", "--json=true", "--json=1",
		"--config", "--config=c.toml", "c.toml", "--key", "--key=k", "k", "-h", "--help", "--", "-", "--jso", "--config=", "-j"}
	rapid.Check(t, func(t *rapid.T) {
		// Mostly lines near the shape fastrun takes: run FP with flags and
		// their values inserted anywhere, and now and then any token.
		args := []string{"run", rapid.SampledFrom([]string{"sha256:ab", "x", "--json"}).Draw(t, "fp")}
		for i, n := 0, rapid.IntRange(0, 5).Draw(t, "n"); i < n; i++ {
			at := rapid.IntRange(0, len(args)).Draw(t, "at")
			tok := rapid.SampledFrom(tokens).Draw(t, "token")
			args = append(args[:at], append([]string{tok}, args[at:]...)...)
		}
		fl, ok := fastrun.ParseRun(args)
		if !ok {
			return
		}
		cl, cok := cobraRun(args)
		if !cok {
			t.Fatalf("fastrun takes %q, the command tree does not run it", args)
		}
		if fl != cl {
			t.Fatalf("%q: fastrun reads %+v, the command tree %+v", args, fl, cl)
		}
	})
	// And the lines it must take, so the property is not vacuous.
	for _, args := range [][]string{{"run", "sha256:ab"}, {"--json", "run", "sha256:ab", "--config", "c.toml"}, {"run", "--key=k", "sha256:ab", "--json=false"}} {
		fl, ok := fastrun.ParseRun(args)
		cl, cok := cobraRun(args)
		if !ok || !cok || fl != cl {
			t.Fatalf("%q: fastrun %+v %v, tree %+v %v", args, fl, ok, cl, cok)
		}
	}
}

// An error after the request was sent prints as the command tree prints
// an internal error, in both forms.
func TestFastrunErrorAsTree(t *testing.T) {
	err := errors.New("reading the runner service's reply: EOF")
	for _, asJSON := range []bool{false, true} {
		var tree, fast bytes.Buffer
		printError(&Factory{Env: localapi.Env{IO: &IOStreams{Err: &tree}, JSON: asJSON}}, err)
		fastrun.PrintError(&fast, asJSON, err)
		if tree.String() != fast.String() {
			t.Errorf("json %v: the tree prints %q, fastrun %q", asJSON, tree.String(), fast.String())
		}
	}
}
