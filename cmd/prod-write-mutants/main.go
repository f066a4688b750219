// Command prod-write-mutants checks that every security-critical defence is
// held by a test that fails without it: for each mutant of
// testdata/mutants/*.toml it turns one defence off in a scratch copy of the
// module, runs the tests that should catch it, and fails naming each
// mutant that survives. `make mutants` runs it.
//
// A mutant:
//
//	[[mutant]]
//	name = "gate: a planner may approve its own plan"
//	file = "approval/gate.go"
//	find = "if s.Signer.ID == planner {"   # must occur exactly once in file
//	replace = "if false {"
//	pkg = "./approval/"                     # the packages whose tests catch it
//	run = "TestGate"                        # optional: go test -run
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Mutant is one defence turned off.
type Mutant struct {
	Name    string `toml:"name"`
	File    string `toml:"file"`
	Find    string `toml:"find"`
	Replace string `toml:"replace"`
	Pkg     string `toml:"pkg"`
	Run     string `toml:"run"`
	// Env is extra environment for the tests, "NAME=value".
	Env []string `toml:"env"`

	source string
}

type file struct {
	Mutant []Mutant `toml:"mutant"`
}

func main() {
	dir := flag.String("dir", "testdata/mutants", "the directory of mutant lists")
	only := flag.String("only", "", "run only the mutants whose name matches this regexp")
	timeout := flag.Duration("timeout", 5*time.Minute, "the longest one mutant's tests may run")
	check := flag.Bool("check", false, "only check that every mutant applies (its find text occurs exactly once)")
	flag.Parse()
	mutants, err := load(*dir)
	if err != nil {
		fail(err)
	}
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			fail(err)
		}
		var kept []Mutant
		for _, m := range mutants {
			if re.MatchString(m.Name) {
				kept = append(kept, m)
			}
		}
		mutants = kept
	}
	root, err := os.Getwd()
	if err != nil {
		fail(err)
	}
	for _, m := range mutants {
		if _, err := apply(root, m, true); err != nil {
			fail(fmt.Errorf("%s: %s: %w", m.source, m.Name, err))
		}
	}
	if *check {
		fmt.Printf("mutants: %d apply\n", len(mutants))
		return
	}
	scratch, err := os.MkdirTemp("", "prod-write-mutants-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(scratch)
	if err := copyTree(root, scratch); err != nil {
		fail(err)
	}
	var survivors []string
	start := time.Now()
	for i, m := range mutants {
		t := time.Now()
		orig, err := apply(scratch, m, false)
		if err != nil {
			fail(err)
		}
		caught, out := runTests(scratch, m, *timeout)
		if err := os.WriteFile(filepath.Join(scratch, m.File), orig, 0o644); err != nil {
			fail(err)
		}
		verdict := "caught"
		if !caught {
			verdict = "SURVIVED"
			survivors = append(survivors, m.Name)
			fmt.Printf("%s\n", out)
		}
		fmt.Printf("mutant %2d/%d %-8s %s (%s)\n", i+1, len(mutants), verdict, m.Name, time.Since(t).Round(100*time.Millisecond))
	}
	fmt.Printf("\nmutants: %d caught, %d survived, in %s\n", len(mutants)-len(survivors), len(survivors), time.Since(start).Round(time.Second))
	if len(survivors) > 0 {
		for _, s := range survivors {
			fmt.Printf("  survived: %s\n", s)
		}
		os.Exit(1)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "prod-write-mutants:", err)
	os.Exit(2)
}

func load(dir string) ([]Mutant, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.toml"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no mutant lists in %s", dir)
	}
	var all []Mutant
	names := map[string]string{}
	for _, p := range paths {
		var f file
		md, err := toml.DecodeFile(p, &f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if und := md.Undecoded(); len(und) > 0 {
			return nil, fmt.Errorf("%s: unknown key %q", p, und[0].String())
		}
		for _, m := range f.Mutant {
			m.source = p
			switch {
			case m.Name == "", m.File == "", m.Find == "", m.Pkg == "":
				return nil, fmt.Errorf("%s: mutant %q needs name, file, find and pkg", p, m.Name)
			case m.Find == m.Replace:
				return nil, fmt.Errorf("%s: mutant %q changes nothing", p, m.Name)
			}
			if prev, dup := names[m.Name]; dup {
				return nil, fmt.Errorf("%s: mutant %q is also in %s", p, m.Name, prev)
			}
			names[m.Name] = p
			all = append(all, m)
		}
	}
	return all, nil
}

// apply writes m's change into root's copy of its file (unless dryRun)
// and returns the original bytes.
func apply(root string, m Mutant, dryRun bool) ([]byte, error) {
	path := filepath.Join(root, m.File)
	orig, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if n := bytes.Count(orig, []byte(m.Find)); n != 1 {
		return nil, fmt.Errorf("%s: find text occurs %d times, want exactly 1: %q", m.File, n, m.Find)
	}
	if dryRun {
		return orig, nil
	}
	mutated := bytes.Replace(orig, []byte(m.Find), []byte(m.Replace), 1)
	return orig, os.WriteFile(path, mutated, 0o644)
}

// runTests reports whether m's tests fail (the mutant is caught). A build
// failure does not count as caught: a mutant must compile to mean anything.
func runTests(root string, m Mutant, timeout time.Duration) (bool, string) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{"test", "-count=1", "-failfast"}
	if m.Run != "" {
		args = append(args, "-run", m.Run)
	}
	args = append(args, strings.Fields(m.Pkg)...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), m.Env...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return false, string(out)
	}
	if bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]")) {
		fmt.Printf("%s\n", out)
		fail(fmt.Errorf("mutant %q does not compile: fix its replace text", m.Name))
	}
	var ee *exec.ExitError
	return errors.As(err, &ee), string(out)
}

// copyTree copies the module's source (not .git, .cache or bin) to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			switch rel {
			case ".cache":
				// The test servers scripts/test-deps.sh installed.
				if err := os.Symlink(p, filepath.Join(dst, rel)); err != nil {
					return err
				}
				return filepath.SkipDir
			case ".git", "bin", "node_modules":
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, info.Mode().Perm())
	})
}
