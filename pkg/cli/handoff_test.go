package cli

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestHandOffToNetBinary: a build without the network backends (AWS, the
// bridges, MCP) hands exactly the commands that need them to prod-write-net
// beside it, with the same arguments, and says clearly when it cannot.
func TestHandOffToNetBinary(t *testing.T) {
	const dynamo = "dynamo"
	const s3 = "\n[archive]\nbucket = \"receipts\"\nprefix = \"host-a\"\n"
	const slack = "\n[bridge]\nslack_channel = \"C0DECISIONS\"\n"
	const github = "\n[bridge]\ngithub_repo = \"acme/decisions\"\n"
	fp := "sha256:" + strings.Repeat("0", 64)
	for _, tc := range []struct {
		name    string
		config  string // appended to the demo prod-write.toml, or "dynamo"
		args    []string
		self    string // the running binary's name
		sibling bool   // prod-write-net is installed beside it
		linked  bool   // this build has the network backends
		want    string // "exec", or a substring of the error
	}{
		{"embedded store", "", []string{"receipts", "list"}, "prod-write", true, false, "none"},
		{"dynamodb store", dynamo, []string{"receipts", "list"}, "prod-write", true, false, "exec"},
		{"s3 archive", s3, []string{"ops", "list", "--json"}, "prod-write", true, false, "exec"},
		{"replay of an archive", "", []string{"replay", "s3://receipts/host-a"}, "prod-write", true, false, "exec"},
		{"replay of a file", "", []string{"replay", "state/journal/receipts.jsonl"}, "prod-write", true, false, "none"},
		{"not installed", dynamo, []string{"receipts", "list"}, "prod-write", false, false, "needs prod-write-net (its store is DynamoDB), installed beside"},
		{"linked in", dynamo, []string{"ops", "list"}, "prod-write-net", false, true, "none"},
		{"no loop", dynamo, []string{"receipts", "list"}, "prod-write-net", true, false, "has no network backends"},
		{"mcp", "", []string{"mcp", "--allow-run"}, "prod-write", true, false, "exec"},
		{"mcp, not installed", "", []string{"mcp"}, "prod-write", false, false, "needs prod-write-net (it serves MCP)"},
		{"mcp token add", "", []string{"mcp", "token", "add", "agent", "--scope", "agent"}, "prod-write", true, false, "exec"},
		{"mcp token list, not installed", "", []string{"mcp", "token", "list"}, "prod-write", false, false, "needs prod-write-net (it edits the MCP tokens file"},
		{"bridge serve", slack, []string{"bridge", "serve"}, "prod-write", true, false, "exec"},
		{"file posting to Slack", slack, []string{"file", fp, "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high"}, "prod-write", true, false, "exec"},
		{"withdraw posting to GitHub", github, []string{"withdraw", fp}, "prod-write", true, false, "exec"},
		{"file, no bridge", "", []string{"file", fp, "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high"}, "prod-write", true, false, "none"},
		{"run with a bridge", slack, []string{"run", fp}, "prod-write", true, false, "none"},
		{"status with a bridge", github, []string{"status", fp}, "prod-write", true, false, "none"},
		{"mcp, no loop", "", []string{"mcp"}, "prod-write-net", true, false, "has no network backends"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRunHarness(t)
			cfg := filepath.Join(h.dir, "prod-write.toml")
			b, err := os.ReadFile(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if tc.config == dynamo {
				b = []byte(strings.Replace(string(b), `backend = "embedded"`, "backend = \"dynamodb\"\ntable = \"pw\"", 1))
			} else {
				b = append(b, tc.config...)
			}
			if err := os.WriteFile(cfg, b, 0o644); err != nil {
				t.Fatal(err)
			}
			bin := t.TempDir()
			if tc.sibling {
				if err := os.WriteFile(filepath.Join(bin, NetBinary), nil, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			var gotPath string
			var gotArgv []string
			errExec := errors.New("exec recorded")
			f, _, stderr := testFactory(t, h.dir)
			f.Executable = func() (string, error) { return filepath.Join(bin, tc.self), nil }
			f.Exec = func(path string, argv, env []string) error {
				gotPath, gotArgv = path, argv
				return errExec
			}
			if tc.linked {
				f.AWS, f.Net = fakeAWS{}, fakeNet{}
			}
			Run(tc.args, f)
			switch tc.want {
			case "none":
				if gotPath != "" {
					t.Fatalf("handed over to %s %q; want no hand-over", gotPath, gotArgv)
				}
			case "exec":
				want := append([]string{filepath.Join(bin, NetBinary)}, tc.args...)
				if gotPath != want[0] || !slices.Equal(gotArgv, want) {
					t.Fatalf("handed over to %s %q; want %q", gotPath, gotArgv, want)
				}
			default:
				if gotPath != "" {
					t.Fatalf("handed over to %s; want none", gotPath)
				}
				if !strings.Contains(stderr.String(), tc.want) {
					t.Fatalf("stderr %q; want %q", stderr, tc.want)
				}
			}
		})
	}
}

// fakeAWS stands for linked-in backends; the cases that use it never reach
// DynamoDB or S3.
type fakeAWS struct{ AWS }

// fakeNet stands for the linked-in bridges and MCP server, likewise.
type fakeNet struct{ Net }
