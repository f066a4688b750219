package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/localapi"
)

func testFactory(t *testing.T, dir string) (*Factory, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{}
	f := &Factory{Env: localapi.Env{
		IO:        &IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb},
		Now:       time.Now,
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
		Getwd:     func() (string, error) { return dir, nil },
	}}
	return f, &out, &errb
}

func TestPlanFlags(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		want     PlanOptions
		wantCode int
	}{
		{
			name: "params and files",
			args: []string{"plan", "config-push", "--target", "staging", "--param", "service=api", "--param", "x=a=b", "--file", "config=c.toml"},
			want: PlanOptions{Operation: "config-push", Target: "staging", Params: map[string]string{"service": "api", "x": "a=b"}, Files: map[string]string{"config": "c.toml"}},
		},
		{name: "no target", args: []string{"plan", "op"}, wantCode: ExitUsage},
		{name: "param without =", args: []string{"plan", "op", "--target", "t", "--param", "service"}, wantCode: ExitUsage},
		{name: "param twice", args: []string{"plan", "op", "--target", "t", "--param", "a=1", "--param", "a=2"}, wantCode: ExitUsage},
		{name: "no operation", args: []string{"plan", "--target", "t"}, wantCode: ExitUsage},
		{name: "unknown flag", args: []string{"plan", "op", "--target", "t", "--nope"}, wantCode: ExitUsage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _, _ := testFactory(t, t.TempDir())
			var got *PlanOptions
			root := NewCmdRoot(f)
			for _, c := range root.Commands() {
				if c.Name() == "plan" {
					root.RemoveCommand(c)
				}
			}
			plan := NewCmdPlan(f, func(o *PlanOptions) error { got = o; return nil })
			root.AddCommand(plan)
			wrapArgs(plan)
			root.SetArgs(tt.args)
			root.SetOut(f.IO.Out)
			root.SetErr(f.IO.Err)
			code := ExitCode(root.Execute())
			if code != tt.wantCode {
				t.Fatalf("exit code %d, want %d", code, tt.wantCode)
			}
			if tt.wantCode != 0 {
				return
			}
			if got.Operation != tt.want.Operation || got.Target != tt.want.Target ||
				!equalMaps(got.Params, tt.want.Params) || !equalMaps(got.Files, tt.want.Files) {
				t.Errorf("options = %+v, want %+v", *got, tt.want)
			}
		})
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestDecideAndGeraFlags(t *testing.T) {
	fp := "sha256:" + strings.Repeat("ab", 32)
	tests := []struct {
		args     []string
		wantCode int
	}{
		{[]string{"decide", fp, "approve"}, 0},
		{[]string{"decide", fp, "maybe"}, ExitUsage},
		{[]string{"decide", fp}, ExitUsage},
		{[]string{"gera", "go", fp, "--uses", "3"}, 0},
		{[]string{"gera", "yes", fp}, ExitUsage},
		{[]string{"gera", "go", fp, "--uses", "0"}, ExitUsage},
		{[]string{"file", fp, "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "sure"}, ExitUsage},
		{[]string{"file", fp, "--summary", "s", "--effect", "e", "--rollback", "r", "--certainty", "high"}, ExitUsage},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args[:min(3, len(tt.args))], " "), func(t *testing.T) {
			f, _, _ := testFactory(t, t.TempDir())
			ran := false
			root := NewCmdRoot(f)
			for _, c := range root.Commands() {
				switch c.Name() {
				case "decide", "gera", "file":
					root.RemoveCommand(c)
				}
			}
			root.AddCommand(NewCmdDecide(f, func(*DecideOptions) error { ran = true; return nil }),
				NewCmdGera(f, func(*GeraOptions) error { ran = true; return nil }),
				NewCmdFile(f, func(*FileOptions) error { ran = true; return nil }))
			wrapArgs(root)
			root.SetArgs(tt.args)
			root.SetOut(f.IO.Out)
			root.SetErr(f.IO.Err)
			code := ExitCode(root.Execute())
			if code != tt.wantCode {
				t.Fatalf("exit code %d, want %d", code, tt.wantCode)
			}
			if ran != (tt.wantCode == 0) {
				t.Errorf("run function called = %v", ran)
			}
		})
	}
}

// Progress appears on a terminal and never otherwise, so scripts and --json
// output stay clean.
func TestPlanProgressOnlyOnTerminal(t *testing.T) {
	dir := t.TempDir()
	f, _, _ := testFactory(t, dir)
	if code := Run([]string{"init", dir}, f); code != 0 {
		t.Fatalf("init: %d", code)
	}
	ops := `[[operation]]
name = "load"
program = "true"
targets = ["staging"]
[operation.files.data]
max_size = "1GiB"
`
	if err := os.WriteFile(filepath.Join(dir, "operations", "load.toml"), []byte(ops), 0o644); err != nil {
		t.Fatal(err)
	}
	data := filepath.Join(dir, "data.bin")
	if err := os.WriteFile(data, bytes.Repeat([]byte{7}, 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tty := range []bool{false, true} {
		for _, asJSON := range []bool{false, true} {
			f, out, errb := testFactory(t, dir)
			f.IO.ErrTTY = tty
			args := []string{"plan", "load", "--target", "staging", "--file", "data=" + data, "--dry-run"}
			if asJSON {
				args = append(args, "--json")
			}
			if code := Run(args, f); code != 0 {
				t.Fatalf("plan: exit %d: %s", code, errb)
			}
			shown := strings.Contains(errb.String(), "hashing data")
			if want := tty && !asJSON; shown != want {
				t.Errorf("tty=%v json=%v: progress shown = %v, want %v (stderr %q)", tty, asJSON, shown, want, errb)
			}
			if strings.Contains(out.String(), "hashing") {
				t.Errorf("progress reached stdout: %q", out)
			}
		}
	}
}
