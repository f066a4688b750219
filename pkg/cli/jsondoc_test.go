package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/mcpserver"
	"github.com/prod-write/prod-write/pkg/passkeytest"
)

// docRow is one row of docs/JSON.md's documents table.
type docRow struct {
	name     string // "status", or "status evidence[]"
	stream   string // stdout or stderr
	fields   []string
	optional []string
	lists    []string
}

// readJSONDoc parses docs/JSON.md: the documents table, and the commands
// that print no JSON.
func readJSONDoc(t *testing.T) (rows []docRow, noJSON []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "JSON.md"))
	if err != nil {
		t.Fatal(err)
	}
	words := regexp.MustCompile("`([^`]+)`|(\\?)")
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			section = strings.TrimPrefix(line, "## ")
			continue
		}
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		switch section {
		case "Commands that print no JSON document":
			noJSON = append(noJSON, name)
		case "Documents":
			if len(cells) != 4 {
				t.Fatalf("docs/JSON.md: documents row %q has %d cells, want 4", line, len(cells))
			}
			r := docRow{name: name, stream: strings.TrimSpace(cells[1])}
			opt := false
			for _, m := range words.FindAllStringSubmatch(cells[2], -1) {
				switch {
				case m[2] == "?":
					opt = true
				case opt:
					r.optional = append(r.optional, m[1])
				default:
					r.fields = append(r.fields, m[1])
				}
			}
			for _, m := range words.FindAllStringSubmatch(cells[3], -1) {
				r.lists = append(r.lists, m[1])
			}
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 || len(noJSON) == 0 {
		t.Fatal("docs/JSON.md: no documents table or no-JSON table found")
	}
	return rows, noJSON
}

// TestJSONDocumentsAsDocumented runs every command with --json in a demo
// deployment and checks each document it prints against docs/JSON.md:
// valid JSON, format_version, every documented field and no undocumented
// one, and [] (never null) for every documented list. It also checks that
// every command of the tree is in one of the doc's two tables, so neither
// can drift from the code.
func TestJSONDocumentsAsDocumented(t *testing.T) {
	rows, noJSON := readJSONDoc(t)
	// A command is documented by its own row ("ops list"); a row for the
	// elements of a list ("ops list operations[]") documents no command.
	documented := map[string]bool{}
	for _, r := range rows {
		if !strings.HasSuffix(r.name, "[]") {
			documented[r.name] = true
		}
	}

	// Every command is in one of the tables.
	root := NewCmdRoot(&Factory{Env: localapi.Env{IO: &IOStreams{}}})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			name := strings.TrimPrefix(sub.CommandPath(), "prod-write ")
			top := strings.Fields(name)[0]
			if slices.Contains(noJSON, top) || slices.Contains(noJSON, name) {
				continue
			}
			if sub.Runnable() && !sub.HasSubCommands() && !documented[name] {
				t.Errorf("command %q is in neither table of docs/JSON.md", name)
			}
			walk(sub)
		}
	}
	walk(root)

	dir := t.TempDir()
	env := map[string]string{"DEPLOY_TOKEN": "s3cret"}
	got := map[string][]map[string]any{}
	key := func(who string) string { return filepath.Join(dir, "keys", who+".key") }
	// The network backends of the commands that run in prod-write-net
	// (mcp token), when set.
	var netBackends localapi.Net
	// run runs args with --json, records the documents under doc (stdout:
	// every JSON value; stderr: the last line) and returns the exit code.
	run := func(doc, stream string, args ...string) (int, []map[string]any) {
		t.Helper()
		var out, errb bytes.Buffer
		f := &Factory{Env: localapi.Env{
			IO:        &IOStreams{In: strings.NewReader(""), Out: &out, Err: &errb},
			Now:       time.Now,
			LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
			Getwd:     func() (string, error) { return dir, nil },
			Net:       netBackends,
		}}
		code := Run(append(args, "--json"), f)
		src := out.Bytes()
		if stream == "stderr" {
			lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
			src = []byte(lines[len(lines)-1])
		}
		var docs []map[string]any
		dec := json.NewDecoder(bytes.NewReader(src))
		for {
			var v map[string]any
			err := dec.Decode(&v)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%v (%s): not JSON: %v\nstdout:\n%s\nstderr:\n%s", args, stream, err, out.String(), errb.String())
			}
			docs = append(docs, v)
		}
		if len(docs) == 0 {
			t.Fatalf("%v: no JSON document on %s (exit %d)\nstdout:\n%s\nstderr:\n%s", args, stream, code, out.String(), errb.String())
		}
		got[doc] = append(got[doc], docs...)
		return code, docs
	}
	mustExit := func(want, code int, what string) {
		t.Helper()
		if code != want {
			t.Fatalf("%s: exit %d, want %d", what, code, want)
		}
	}
	fpOf := func(docs []map[string]any) string { return docs[0]["fingerprint"].(string) }

	code, _ := run("init", "stdout", "init", "--demo", dir)
	mustExit(0, code, "init")
	if err := os.WriteFile(filepath.Join(dir, "app.toml"), []byte("[server]\nport = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, docs := run("keygen", "stdout", "keygen", "--out", filepath.Join(dir, "extra.key"))
	mustExit(0, code, "keygen")
	code, _ = run("key public", "stdout", "key", "public", "--pem", filepath.Join(dir, "extra.key"))
	mustExit(0, code, "key public")
	// setup service, below a scratch root: it chowns the policy to root
	// and the state to the service account, so only root runs it (CI).
	if os.Geteuid() == 0 {
		code, _ = run("setup service", "stdout", "setup", "service", "--root", t.TempDir(), "--user", "nobody", "--socket-group", "", "--agent", "")
		mustExit(0, code, "setup service")
	}
	// The extra key grants through freezes and breaks glass.
	opsFile := filepath.Join(dir, "operations", "config.toml")
	ops, err := os.ReadFile(opsFile)
	if err != nil {
		t.Fatal(err)
	}
	ops = bytes.Replace(ops, []byte(`paths = ["gera", "record+approvals"]`), []byte(`paths = ["gera", "record+approvals", "break-glass"]`), 1)
	if err := os.WriteFile(opsFile, ops, 0o644); err != nil {
		t.Fatal(err)
	}
	tf, err := os.OpenFile(filepath.Join(dir, "trust.toml"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(tf, "\n[[principal]]\nid = \"cab\"\nroles = [\"freeze\", \"break-glass\"]\nkey = %q\n\n[[freeze]]\nname = \"past\"\nstart = \"2001-01-01\"\nend = \"2001-01-02\"\ntime_zone = \"UTC\"\n"+
		"\n[passkey]\norigin = \"https://approve.example.test\"\n", docs[0]["public_key"])
	if err := tf.Close(); err != nil {
		t.Fatal(err)
	}
	code, _ = run("freeze list", "stdout", "freeze", "list")
	mustExit(0, code, "freeze list")
	// Passkey enrolment by a one-time code, a software authenticator
	// answering the options.
	code, docs = run("passkey code", "stdout", "passkey", "code", "alice")
	mustExit(0, code, "passkey code")
	codeFile := filepath.Join(dir, "enrol-code.txt")
	if err := os.WriteFile(codeFile, []byte(docs[0]["code"].(string)), 0o600); err != nil {
		t.Fatal(err)
	}
	code, docs = run("passkey enroll begin", "stdout", "passkey", "enroll", "begin", "--code-file", codeFile)
	mustExit(0, code, "passkey enroll begin")
	auth, err := passkeytest.New()
	if err != nil {
		t.Fatal(err)
	}
	opts, err := json.Marshal(docs[0]["options"])
	if err != nil {
		t.Fatal(err)
	}
	resp, err := auth.Register(opts, passkeytest.Registration{Origin: "https://approve.example.test"})
	if err != nil {
		t.Fatal(err)
	}
	respFile := filepath.Join(dir, "registration.json")
	if err := os.WriteFile(respFile, resp, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _ = run("passkey enroll finish", "stdout", "passkey", "enroll", "finish", respFile)
	mustExit(0, code, "passkey enroll finish")
	// On the approval page: a configuration beside the demo's that serves
	// it (bridge serve's page_listen).
	base, err := os.ReadFile(filepath.Join(dir, "prod-write.toml"))
	if err != nil {
		t.Fatal(err)
	}
	pageCfg := filepath.Join(dir, "page.toml")
	if err := os.WriteFile(pageCfg, append(base, "\n[bridge]\nkey = \"keys/agent.key\"\npage_listen = \"127.0.0.1:0\"\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _ = run("passkey enroll", "stdout", "passkey", "enroll", "--key", filepath.Join(dir, "keys", "bob.key"), "--config", pageCfg)
	mustExit(0, code, "passkey enroll")
	code, _ = run("--version", "stdout", "--version")
	mustExit(0, code, "--version")
	code, _ = run("version", "stdout", "version")
	mustExit(0, code, "version")
	code, _ = run("ops list", "stdout", "ops", "list")
	mustExit(0, code, "ops list")
	code, _ = run("ops show", "stdout", "ops", "show", "config-push")
	mustExit(0, code, "ops show")
	code, _ = run("plan", "stdout", "plan", "list-configs", "--target", "staging", "--dry-run")
	mustExit(0, code, "plan --dry-run")
	planArgs := func(target, service string) []string {
		return []string{"plan", "config-push", "--target", target, "--param", "service=" + service, "--file", "config=" + filepath.Join(dir, "app.toml"), "--key", key("agent")}
	}
	code, docs = run("plan", "stdout", planArgs("staging", "api")...)
	mustExit(0, code, "plan")
	fp := fpOf(docs)
	code, _ = run("status", "stdout", "status", fp)
	mustExit(ExitRefused, code, "status before approval")
	code, _ = run("refusal", "stderr", "status", fp)
	mustExit(ExitRefused, code, "status before approval")
	code, _ = run("file", "stdout", "file", fp, "--key", key("smith"), "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high")
	mustExit(0, code, "file")
	code, _ = run("decide", "stdout", "decide", fp, "approve", "--key", key("alice"))
	mustExit(0, code, "decide")
	code, _ = run("status", "stdout", "status", fp)
	mustExit(0, code, "status after approval")
	code, _ = run("run", "stderr", "run", fp)
	mustExit(0, code, "run")

	_, docs = run("plan", "stdout", planArgs("production", "api")...)
	code, _ = run("gera", "stdout", "gera", "go", fpOf(docs), "--key", key("gera"))
	mustExit(0, code, "gera go")
	code, _ = run("freeze grant", "stdout", "freeze", "grant", fpOf(docs), "--freeze", "past", "--reason", "r", "--key", filepath.Join(dir, "extra.key"))
	mustExit(0, code, "freeze grant")
	_, docs = run("plan", "stdout", planArgs("staging", "web")...)
	code, _ = run("withdraw", "stdout", "withdraw", fpOf(docs), "--key", key("agent"))
	mustExit(0, code, "withdraw")

	_, docs = run("plan", "stdout", planArgs("staging", "db")...)
	code, _ = run("break-glass", "stdout", "break-glass", fpOf(docs), "--reason", "r", "--incident", "INC-1", "--key", filepath.Join(dir, "extra.key"))
	mustExit(0, code, "break-glass")
	code, _ = run("run", "stderr", "run", fpOf(docs))
	mustExit(0, code, "run (break-glass)")

	code, docs = run("receipts list", "stdout", "receipts", "list")
	mustExit(0, code, "receipts list")
	for _, d := range docs {
		if d["break_glass"] != nil {
			code, _ = run("break-glass review", "stdout", "break-glass", "review", d["run_id"].(string), "--key", key("alice"))
			mustExit(0, code, "break-glass review")
		}
	}
	// A review's row carries the operation and fingerprint of the run it
	// reviews, as an outcome's does.
	code, docs = run("receipts list", "stdout", "receipts", "list")
	mustExit(0, code, "receipts list after the review")
	reviews := 0
	for _, d := range docs {
		if d["kind"] == "review" {
			reviews++
			if d["operation"] != "config-push" || !strings.HasPrefix(d["fingerprint"].(string), "sha256:") {
				t.Errorf("receipts list: a review row has operation %q and fingerprint %q, want its run's", d["operation"], d["fingerprint"])
			}
		}
	}
	if reviews != 1 {
		t.Errorf("receipts list shows %d reviews, want 1", reviews)
	}
	code, docs = run("receipts show", "stdout", "receipts", "show", "1")
	mustExit(0, code, "receipts show")
	if id, _ := docs[0]["run_id"].(string); id != "" {
		code, _ = run("receipts show", "stdout", "receipts", "show", id)
		mustExit(0, code, "receipts show RUN")
	}
	code, _ = run("receipts prove", "stdout", "receipts", "prove", "1")
	mustExit(0, code, "receipts prove")
	// Two checkpoint notes (their own format, not JSON), of the first
	// entry's tree and of the head's.
	oldNote, newNote := filepath.Join(dir, "old.note"), filepath.Join(dir, "new.note")
	for _, n := range []struct {
		file string
		size uint64 // 0: all
	}{{oldNote, 1}, {newNote, 0}} {
		f := &Factory{Env: localapi.Env{IO: &IOStreams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard}, Now: time.Now,
			LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }, Getwd: func() (string, error) { return dir, nil }}}
		r, err := localapi.API{Env: &f.Env}.ReceiptsProve(context.Background(), api.ReceiptsProveRequest{Seq: 1, Size: n.size})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(n.file, []byte(r.Checkpoint), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, docs = run("receipts consistency", "stdout", "receipts", "consistency", oldNote, newNote)
	mustExit(0, code, "receipts consistency")
	proofDoc, err := json.Marshal(docs[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "proof.json"), proofDoc, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _ = run("receipts consistency --verify", "stdout", "receipts", "consistency", oldNote, newNote, "--verify", filepath.Join(dir, "proof.json"))
	mustExit(0, code, "receipts consistency --verify")
	code, _ = run("receipts checkpoint", "stdout", "receipts", "checkpoint")
	mustExit(0, code, "receipts checkpoint")
	code, _ = run("replay", "stdout", "replay")
	mustExit(0, code, "replay")
	// replay --vsa names the command that verifies it (vsa_verify); a
	// temporary directory's path needs no quoting.
	code, docs = run("replay", "stdout", "replay", filepath.Join(dir, "state", "journal", "receipts.jsonl"),
		"--vsa", filepath.Join(dir, "vsa.json"), "--vsa-key", filepath.Join(dir, "extra.key"))
	mustExit(0, code, "replay --vsa")
	verify, _ := docs[0]["vsa_verify"].(string)
	if words := strings.Fields(verify); len(words) < 2 || words[0] != "prod-write" {
		t.Fatalf("replay --vsa: vsa_verify %q", verify)
	} else {
		code, _ = run("replay verify-vsa", "stdout", words[1:]...)
		mustExit(0, code, "replay verify-vsa")
	}
	export := filepath.Join(dir, "runs.intoto.jsonl")
	if c := Run([]string{"receipts", "export", "--in-toto", "--out", export}, &Factory{Env: localapi.Env{IO: &IOStreams{In: strings.NewReader(""), Out: io.Discard, Err: io.Discard},
		Now: time.Now, LookupEnv: func(string) (string, bool) { return "", false }, Getwd: func() (string, error) { return dir, nil }}}); c != 0 {
		t.Fatalf("receipts export: exit %d", c)
	}
	runnerKey, err := keys.Load(key("runner"))
	if err != nil {
		t.Fatal(err)
	}
	code, _ = run("receipts verify-export", "stdout", "receipts", "verify-export", export, "--pub", runnerKey.Public().String())
	mustExit(0, code, "receipts verify-export")
	code, _ = run("history record", "stdout", "history", "record")
	mustExit(0, code, "history record")
	// The MCP tokens file, edited by the MCP server's parser.
	netBackends = tokensNet{}
	tokensFile := filepath.Join(dir, "mcp-tokens.toml")
	code, docs = run("mcp token add", "stdout", "mcp", "token", "add", "agent", "--scope", "agent", "--allow-run", "--tokens", tokensFile)
	mustExit(0, code, "mcp token add")
	code, _ = run("mcp token list", "stdout", "mcp", "token", "list", "--tokens", tokensFile)
	mustExit(0, code, "mcp token list")
	code, _ = run("mcp token revoke", "stdout", "mcp", "token", "revoke", docs[0]["id"].(string), "--tokens", tokensFile)
	mustExit(0, code, "mcp token revoke")
	netBackends = nil
	code, _ = run("store init", "stdout", "store", "init")
	mustExit(0, code, "store init")
	run("doctor", "stdout", "doctor") // exit 1 when it finds a weakness, which a demo has
	code, _ = run("error", "stderr", "receipts", "show", "999")
	mustExit(ExitDataErr, code, "receipts show of no receipt")

	for name := range got {
		if !documented[name] {
			t.Errorf("%q printed JSON that docs/JSON.md does not document", name)
		}
	}
	for _, r := range rows {
		docs := got[r.name]
		if strings.Contains(r.name, " ") && strings.HasSuffix(r.name, "[]") {
			// "status evidence[]", "ops list operations[]": the elements
			// of a list of a document.
			parts := strings.Fields(strings.TrimSuffix(r.name, "[]"))
			parent, field := strings.Join(parts[:len(parts)-1], " "), parts[len(parts)-1]
			docs = nil
			for _, d := range got[parent] {
				list, _ := d[field].([]any)
				for _, e := range list {
					if m, ok := e.(map[string]any); ok {
						docs = append(docs, m)
					}
				}
			}
		}
		object := false
		if len(docs) == 0 && strings.Contains(r.name, " ") && !strings.HasSuffix(r.name, "[]") {
			// "status request": an object field of a document.
			parts := strings.Fields(r.name)
			parent, field := strings.Join(parts[:len(parts)-1], " "), parts[len(parts)-1]
			for _, d := range got[parent] {
				if m, ok := d[field].(map[string]any); ok {
					docs, object = append(docs, m), true
				}
			}
		}
		if len(docs) == 0 {
			if r.name == "receipts sync" || r.name == "archive init" {
				continue // needs an S3 archive (docs/JSON.md says so)
			}
			if strings.HasPrefix(r.name, "setup service") && os.Geteuid() != 0 {
				continue // runs only as root, above
			}
			t.Errorf("docs/JSON.md documents %q, which the test did not see printed", r.name)
			continue
		}
		for i, d := range docs {
			where := fmt.Sprintf("%s #%d", r.name, i)
			if !strings.HasSuffix(r.name, "[]") && !object {
				if v, ok := d["format_version"].(float64); !ok || int(v) != localapi.FormatVersion {
					t.Errorf("%s: format_version = %v, want %d", where, d["format_version"], localapi.FormatVersion)
				}
			}
			for _, fd := range r.fields {
				if _, ok := d[fd]; !ok {
					t.Errorf("%s: documented field %q is missing: %v", where, fd, docKeys(d))
				}
			}
			for k := range d {
				if !slices.Contains(r.fields, k) && !slices.Contains(r.optional, k) {
					t.Errorf("%s: field %q is not in docs/JSON.md", where, k)
				}
			}
			for _, l := range r.lists {
				v, present := d[l]
				if _, isList := v.([]any); present && !isList {
					t.Errorf("%s: %q is documented as a list but is %v", where, l, v)
				}
			}
		}
	}
}

func docKeys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// tokensNet is prod-write-net's backends as far as `mcp token` needs
// them: the MCP server's tokens file editor (pkg/netbackend, which links
// this package, cannot be imported here).
type tokensNet struct{ localapi.Net }

func (tokensNet) MCPTokens() mcpapi.TokensFile { return mcpserver.TokensEditor{} }
