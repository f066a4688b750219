package deploy

// A real workflow on the three-account deployment: a PostgreSQL migration
// with Debian's psql (docs/adr/0060-programs-run-by-their-path.md), the
// password only in the service's credentials directory
// (docs/DEPLOYMENT.md), against a private cluster the test starts.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/prod-write/prod-write/pkg/testservers"
)

// psqlPath is Debian's psql: pg_wrapper, a Perl script that picks the
// real client by the name it was called by.
const psqlPath = "/usr/bin/psql"

// postgresBin returns the newest /usr/lib/postgresql/N/bin holding initdb,
// pg_ctl and pg_isready beside Debian's psql. Missing, the test is skipped,
// or fails under PROD_WRITE_REQUIRE_SERVERS=1 (scripts/test-deps.sh
// installs postgresql and postgresql-client as root).
func postgresBin(t *testing.T) string {
	t.Helper()
	missing := func(what string) {
		msg := fmt.Sprintf("%s is missing: scripts/test-deps.sh installs Debian's postgresql and postgresql-client as root", what)
		if os.Getenv(testservers.RequireEnv) == "1" {
			t.Fatalf("%s; %s=1, so this is a failure, not a skip", msg, testservers.RequireEnv)
		}
		t.Skipf("SKIPPED, NOT TESTED: %s; set %s=1 to fail instead", msg, testservers.RequireEnv)
	}
	if _, err := os.Stat(psqlPath); err != nil {
		missing(psqlPath)
	}
	if _, err := lookupAccount("postgres"); err != nil {
		missing("the postgres account (Debian's postgresql-common creates it)")
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	best, bestV := "", -1
	for _, dir := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
		if err != nil || v <= bestV {
			continue
		}
		ok := true
		for _, tool := range []string{"initdb", "pg_ctl", "pg_isready"} {
			if _, err := os.Stat(filepath.Join(dir, tool)); err != nil {
				ok = false
			}
		}
		if ok {
			best, bestV = dir, v
		}
	}
	if best == "" {
		missing("/usr/lib/postgresql/*/bin/initdb")
	}
	return best
}

// lookupAccount looks an account up as ensureUser does, without creating it.
func lookupAccount(name string) (account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return account{}, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return account{name: name, uid: uid, gid: gid}, nil
}

// cluster is a private PostgreSQL cluster run by Debian's postgres account,
// listening on a Unix socket only.
type cluster struct {
	data, sock string
	owner      account
	password   string // migrator's
}

// startCluster makes and starts a cluster under d.root/pg: initdb and
// pg_ctl as postgres, never root. The socket directory is postgres's and
// pwtest-deploy's group's, 0710: the run_as account may reach the socket,
// the agent may not. Superuser postgres connects by peer; migrator, owner
// of database app, by scram-sha-256 with a password made here.
func (d *deployment) startCluster(t *testing.T, bin string) *cluster {
	t.Helper()
	pgAcct, err := lookupAccount("postgres")
	must(t, err)
	var rnd [24]byte
	_, err = rand.Read(rnd[:])
	must(t, err)
	c := &cluster{owner: pgAcct, password: "pgpw-" + hex.EncodeToString(rnd[:])}
	root := filepath.Join(d.root, "pg")
	must(t, os.Mkdir(root, 0o755))
	c.data = filepath.Join(root, "data")
	must(t, os.Mkdir(c.data, 0o700))
	must(t, os.Chown(c.data, pgAcct.uid, pgAcct.gid))
	c.sock = filepath.Join(root, "sock")
	must(t, os.Mkdir(c.sock, 0o710))
	must(t, os.Chmod(c.sock, 0o710))
	must(t, os.Chown(c.sock, pgAcct.uid, d.deploy.gid))
	logFile := filepath.Join(root, "postgres.log")
	must(t, os.WriteFile(logFile, nil, 0o600))
	must(t, os.Chown(logFile, pgAcct.uid, pgAcct.gid))

	env := []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	pg := func(name string, args ...string) result {
		return d.exec(t, pgAcct, root, env, filepath.Join(bin, name), args...)
	}
	began := time.Now()
	if r := pg("initdb", "-D", c.data, "-U", "postgres", "-E", "UTF8", "--locale=C", "--no-sync", "--auth-local=peer", "--auth-host=reject"); r.code != 0 {
		t.Fatalf("initdb as postgres: %s", r)
	}
	t.Logf("initdb took %s", time.Since(began).Round(time.Millisecond))
	must(t, os.WriteFile(filepath.Join(c.data, "pg_hba.conf"), []byte(
		"local all postgres peer\nlocal app migrator scram-sha-256\n"), 0o600))
	conf, err := os.OpenFile(filepath.Join(c.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	must(t, err)
	_, err = fmt.Fprintf(conf, "\nlisten_addresses = ''\nunix_socket_directories = '%s'\nunix_socket_permissions = 0777\npassword_encryption = 'scram-sha-256'\nfsync = off\nshared_buffers = 16MB\n", c.sock)
	must(t, err)
	must(t, conf.Close())

	if r := pg("pg_ctl", "start", "-W", "-D", c.data, "-l", logFile); r.code != 0 {
		t.Fatalf("pg_ctl start as postgres: %s", r)
	}
	t.Cleanup(func() {
		if r := pg("pg_ctl", "stop", "-D", c.data, "-m", "immediate"); r.code != 0 {
			t.Logf("pg_ctl stop: %s", r)
		}
	})
	ready := waitFor(30*time.Second, func() bool {
		return pg("pg_isready", "-h", c.sock, "-U", "postgres", "-d", "postgres").code == 0
	})
	if !ready {
		log, _ := os.ReadFile(logFile)
		t.Fatalf("the cluster did not accept connections on %s within 30s:\n%s", c.sock, log)
	}
	t.Logf("cluster up %s after initdb began", time.Since(began).Round(time.Millisecond))

	// The password travels on psql's standard input, not its argv.
	sql := fmt.Sprintf("CREATE ROLE migrator LOGIN PASSWORD '%s';\nCREATE DATABASE app OWNER migrator;\n", c.password)
	cmd := command(pgAcct, root, env, psqlPath, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", c.sock, "-U", "postgres", "-d", "postgres")
	cmd.Stdin = strings.NewReader(sql)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("creating migrator and app: %v\n%s", err, out)
	}
	return c
}

// query runs sql in database app as the superuser postgres, by peer
// through the socket, and returns what psql printed (unaligned, tuples only).
func (d *deployment) query(t *testing.T, c *cluster, sql string) string {
	t.Helper()
	r := d.exec(t, c.owner, "/", []string{"PATH=/usr/bin:/bin"}, psqlPath, "-X", "-At", "-v", "ON_ERROR_STOP=1", "-h", c.sock, "-U", "postgres", "-d", "app", "-c", sql)
	if r.code != 0 {
		t.Fatalf("psql as postgres: %s", r)
	}
	return strings.TrimSpace(r.out)
}

// addOperations installs a registry file beside ops.toml and reloads the
// service with SIGHUP, as docs/DEPLOYMENT.md does, waiting for its word.
func (d *deployment) addOperations(t *testing.T, name, toml string) {
	t.Helper()
	p := filepath.Join(d.etc, "operations", name)
	must(t, os.WriteFile(p, []byte(toml), 0o644))
	must(t, os.Chmod(p, 0o644))
	const ok, failed = "reloaded the trust policy and registry", "reload failed"
	n, f := strings.Count(d.serveLog.String(), ok), strings.Count(d.serveLog.String(), failed)
	must(t, d.served.Process.Signal(syscall.SIGHUP))
	if !waitFor(10*time.Second, func() bool {
		log := d.serveLog.String()
		return strings.Count(log, ok) > n || strings.Count(log, failed) > f
	}) || strings.Count(d.serveLog.String(), failed) > f {
		t.Fatalf("the service did not reload %s:\n%s", name, d.serveLog)
	}
}

// bearer presents an MCP over HTTP bearer token on every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// psqlOpsTOML is the migration operation: Debian's psql by name, the host
// a parameter, the password a secret of the service.
const psqlOpsTOML = `
[[operation]]
name = "migrate"
description = "Apply a reviewed SQL migration to the app database"
program = "psql"
args = ["-X", "-w", "-h", "{param.host}", "-U", "migrator", "-d", "app", "-v", "ON_ERROR_STOP=1", "-f", "{file.migration}"]
targets = ["production"]
run_as = "` + deployUser + `"
cwd = "/"
timeout = "30s"
[operation.params.host]
pattern = "^/[A-Za-z0-9/._-]{1,200}$"
[operation.files.migration]
max_size = "64KiB"
[operation.env]
secret = ["PGPASSWORD"]
`

// TestPsqlMigrationThroughTheService: the agent plans a migration, smith
// files and alice approves it, the agent runs it through the service, and
// Debian's psql applies it as pwtest-deploy with a password the agent
// never sees. Defences proved: the program runs by its path (without
// it pg_wrapper, called /proc/self/fd/3, finds no client and exits 1);
// the secret comes from the credentials directory (without it psql has no
// password and fails); the file's bytes are bound (a migration changed
// after approval is refused, and the refusal spends nothing).
func TestPsqlMigrationThroughTheService(t *testing.T) {
	start := time.Now()
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: the three-account runner-service test runs only as root (CI runs as root); run `sudo go test ./tests/deploy` to prove the trust boundary")
	}
	bin := postgresBin(t)
	d := deploy(t)
	top := t // a subtest restarts the service for the later ones
	t.Logf("deployment up in %s", time.Since(start).Round(time.Millisecond))
	c := d.startCluster(t, bin)
	d.addOperations(t, "postgres.toml", psqlOpsTOML)
	pw := filepath.Join(d.creds, "PGPASSWORD")
	must(t, os.WriteFile(pw, []byte(c.password), 0o600))
	must(t, os.Chown(pw, d.svc.uid, d.svc.gid))

	// The agent's migrations, private to it: they reach the service as
	// descriptors its client opened.
	writeSQL := func(name, sql string) string {
		p := filepath.Join(d.agentWork, name)
		must(t, os.WriteFile(p, []byte(sql), 0o600))
		must(t, os.Chmod(p, 0o600))
		must(t, os.Chown(p, d.agent.uid, d.agent.gid))
		return p
	}
	status := func(fp string) bool {
		r := d.asAgent(t, "status", fp, "--json")
		var st struct {
			Allowed bool `json:"allowed"`
		}
		return r.code == 0 && json.Unmarshal([]byte(r.out), &st) == nil && st.Allowed
	}
	tableOwner := func(name string) string {
		return d.query(t, c, "SELECT coalesce((SELECT tableowner FROM pg_tables WHERE schemaname = 'public' AND tablename = '"+name+"'), 'absent')")
	}
	var planned []string // every plan's fingerprint

	t.Run("ops_show_says_by_its_path", func(t *testing.T) {
		r := d.asAgent(t, "ops", "show", "migrate")
		if r.code != 0 || !strings.Contains(r.out, "runs:        by its path") || !strings.Contains(r.out, psqlPath) {
			t.Errorf("ops show migrate: want %s run by its path: %s", psqlPath, r)
		}
	})

	// The socket directory is out of the agent's reach (postgres's,
	// group pwtest-deploy, 0710): without the service, the agent cannot
	// even connect. Were it reachable, the agent would need only the
	// password to do the production write itself.
	t.Run("agent_connects_itself", func(t *testing.T) {
		r := d.exec(t, d.agent, d.agentWork, d.agentEnv(), psqlPath, "-X", "-w", "-h", c.sock, "-U", "migrator", "-d", "app", "-c", "SELECT 1")
		if r.code == 0 || !strings.Contains(r.err, "Permission denied") {
			t.Errorf("psql as the agent through %s: want a connection refused for permission: %s", c.sock, r)
		}
	})

	t.Run("migration_planned_approved_and_run", func(t *testing.T) {
		sql := writeSQL("001_widgets.sql", "CREATE TABLE widgets (id bigint PRIMARY KEY, name text NOT NULL);\n")
		p := d.plan(t, d.agentWork, "migrate", "--param", "host="+c.sock, "--file", "migration="+sql)
		planned = append(planned, p.Fingerprint)
		wantRefused(t, "run before approval", d.asAgent(t, "run", p.Fingerprint, "--json"), "no_approval")
		d.approve(t, p.Fingerprint)
		before := len(d.journalLines(t))
		if r := d.asAgent(t, "run", p.Fingerprint); r.code != 0 {
			t.Fatalf("approved migration: %s\nthe service's log:\n%s", r, d.serveLog)
		}
		if n := len(d.journalLines(t)); n != before+2 {
			t.Errorf("the journal grew by %d lines, want 2 (intent and outcome)", n-before)
		}
		// Made by migrator: psql logged in with the service's password.
		if owner := tableOwner("widgets"); owner != "migrator" {
			t.Errorf("table widgets after the run: owner %q, want migrator", owner)
		}
		_, outcomes := d.runsOf(t, p.Fingerprint)
		if len(outcomes) != 1 {
			t.Errorf("%d outcomes, want 1", len(outcomes))
		}
		for _, o := range outcomes {
			if o.Outcome.ExitCode != 0 {
				t.Errorf("outcome: %+v", o.Outcome)
			}
		}
	})

	t.Run("migration_changed_after_approval", func(t *testing.T) {
		const approved = "CREATE TABLE gadgets (id bigint PRIMARY KEY);\n"
		sql := writeSQL("002_gadgets.sql", approved)
		p := d.plan(t, d.agentWork, "migrate", "--param", "host="+c.sock, "--file", "migration="+sql)
		planned = append(planned, p.Fingerprint)
		d.approve(t, p.Fingerprint)
		// What the agent runs instead of what was approved.
		writeSQL("002_gadgets.sql", "DROP TABLE widgets;\n")
		before := len(d.journalLines(t))
		wantRefused(t, "run of a migration changed after approval", d.asAgent(t, "run", p.Fingerprint, "--json"), "fingerprint_mismatch")
		if n := len(d.journalLines(t)); n != before {
			t.Errorf("the refused run wrote %d receipts", n-before)
		}
		if in, _ := d.runsOf(t, p.Fingerprint); len(in) != 0 {
			t.Errorf("the refused plan has %d intents", len(in))
		}
		if owner := tableOwner("widgets"); owner != "migrator" {
			t.Errorf("after the refused run, table widgets: %q", owner)
		}
		if owner := tableOwner("gadgets"); owner != "absent" {
			t.Errorf("after the refused run, table gadgets: %q", owner)
		}
		// Nothing spent: status, against the changed file, names the
		// mismatch and finds the record and approval valid and unused;
		// the approved bytes, put back, pass the gate and run.
		r := d.asAgent(t, "status", p.Fingerprint, "--json")
		var st struct {
			Allowed  bool `json:"allowed"`
			Evidence []struct {
				Kind  string `json:"kind"`
				Used  int    `json:"used"`
				Valid bool   `json:"valid"`
			} `json:"evidence"`
		}
		if err := json.Unmarshal([]byte(r.out), &st); err != nil || r.code != 77 || st.Allowed || !strings.Contains(r.out, "fingerprint_mismatch") {
			t.Errorf("status against the changed migration: want exit 77 naming fingerprint_mismatch (%v): %s", err, r)
		}
		if len(st.Evidence) != 2 {
			t.Errorf("status against the changed migration shows %d pieces of evidence, want the record and the approval: %s", len(st.Evidence), r)
		}
		for _, e := range st.Evidence {
			if !e.Valid || e.Used != 0 {
				t.Errorf("after the refused run, the %s is valid %v, used %d: want valid and unused", e.Kind, e.Valid, e.Used)
			}
		}
		writeSQL("002_gadgets.sql", approved)
		if !status(p.Fingerprint) {
			t.Fatalf("after the refused run, status says the approval no longer counts")
		}
		if r := d.asAgent(t, "run", p.Fingerprint); r.code != 0 {
			t.Fatalf("the approved migration, put back: %s", r)
		}
		if owner := tableOwner("gadgets"); owner != "migrator" {
			t.Errorf("table gadgets after the approved run: %q", owner)
		}
		if status(p.Fingerprint) {
			t.Errorf("the single approval still counts after its run")
		}
	})

	// A hosted agent, over MCP over Streamable HTTP, shares no file
	// system with the service: it supplies the migration's content inline
	// at plan, and the content is kept with the plan in the service's
	// store (docs/adr/0063-file-content-kept-with-the-plan.md). Defences
	// proved: the approver is shown the SQL it approves (without it,
	// status as alice lacks the +CREATE TABLE line); the run takes the
	// kept content (without it, a run that sends only the fingerprint has
	// no file and is refused, and hosted_things is never made); the
	// password stays the service's (it is in no result the agent got).
	t.Run("hosted_agent_over_mcp_http", func(t *testing.T) {
		// MCP over HTTP on a free loopback port, with the agent's key in
		// mcp_keys (the service's, 0700, key 0600) for it to sign the
		// hosted agent's plans, and a tokens file in root's etc.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		addr := l.Addr().String()
		must(t, l.Close())
		keys := filepath.Join(d.root, "mcpkeys")
		must(t, os.Mkdir(keys, 0o700))
		must(t, os.Chmod(keys, 0o700))
		must(t, os.Chown(keys, d.svc.uid, d.svc.gid))
		key, err := os.ReadFile(d.agentKey)
		must(t, err)
		hostedKey := filepath.Join(keys, "agent.key")
		must(t, os.WriteFile(hostedKey, key, 0o600))
		must(t, os.Chmod(hostedKey, 0o600))
		must(t, os.Chown(hostedKey, d.svc.uid, d.svc.gid))
		tokens := filepath.Join(d.etc, "mcp-tokens.toml")
		conf, err := os.OpenFile(d.config, os.O_APPEND|os.O_WRONLY, 0)
		must(t, err)
		// [service] is the last table of prod-write.toml: these join it.
		_, err = fmt.Fprintf(conf, "mcp_listen = %q\nmcp_tokens = %q\nmcp_keys = %q\nmcp_allow_run = true\nmcp_rate = 1000\nmcp_burst = 1000\n", addr, tokens, keys)
		must(t, err)
		must(t, conf.Close())

		// The token is printed once, on stdout, and kept only here: a
		// failure below shows what add said on stderr, never its stdout.
		r := d.asRoot(t, "mcp", "token", "add", "agent", "--scope", "agent", "--allow-run")
		token := strings.TrimSpace(r.out)
		if r.code != 0 || token == "" || strings.ContainsAny(token, " \n") {
			t.Fatalf("mcp token add as root: exit %d, %d bytes on stdout, stderr:\n%s", r.code, len(r.out), r.err)
		}
		if b, err := os.ReadFile(tokens); err != nil || bytes.Contains(b, []byte(token)) {
			t.Fatalf("the tokens file %s holds the token itself, or is not there (%v)", tokens, err)
		}
		d.restart(t, top)
		if !waitFor(10*time.Second, func() bool {
			c, err := net.Dial("tcp", addr)
			if err == nil {
				c.Close()
			}
			return err == nil
		}) {
			t.Fatalf("the restarted service does not listen on %s:\n%s", addr, d.serveLog)
		}

		// The hosted agent: the go-sdk's MCP client, with its bearer token.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		tr := http.DefaultTransport.(*http.Transport).Clone()
		defer tr.CloseIdleConnections()
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "deploy-test", Version: "v0"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: &http.Client{Transport: bearer{token, tr}}}, nil)
		if err != nil {
			t.Fatalf("connecting to MCP over HTTP at %s: %v\n%s", addr, err, d.serveLog)
		}
		defer cs.Close()
		var got strings.Builder // every text the agent got
		call := func(tool string, args map[string]any) (*mcp.CallToolResult, string) {
			t.Helper()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
			var b strings.Builder
			if err != nil {
				fmt.Fprintf(&b, "protocol error: %v\n", err)
			} else {
				for _, c := range res.Content {
					if tc, ok := c.(*mcp.TextContent); ok {
						b.WriteString(tc.Text + "\n")
					}
				}
				if res.StructuredContent != nil {
					sc, err := json.Marshal(res.StructuredContent)
					must(t, err)
					b.Write(append(sc, '\n'))
				}
			}
			got.WriteString(b.String())
			d.outputs.Write([]byte(b.String()))
			if err != nil || res.IsError {
				t.Fatalf("%s over MCP HTTP: %s", tool, b.String())
			}
			return res, b.String()
		}
		structured := func(res *mcp.CallToolResult, v any) {
			t.Helper()
			sc, err := json.Marshal(res.StructuredContent)
			must(t, err)
			if err := json.Unmarshal(sc, v); err != nil {
				t.Fatalf("structured content %s: %v", sc, err)
			}
		}

		const sql = "CREATE TABLE hosted_things (id bigint PRIMARY KEY);\n"
		res, text := call("plan_migrate", map[string]any{
			"target": "production",
			"params": map[string]any{"host": c.sock},
			"files":  map[string]any{"migration": map[string]any{"content": sql}},
		})
		var p struct {
			Fingerprint string `json:"fingerprint"`
		}
		structured(res, &p)
		if !fpRE.MatchString(p.Fingerprint) {
			t.Fatalf("plan_migrate gave no fingerprint: %s", text)
		}
		fp := p.Fingerprint
		planned = append(planned, fp)

		// Alice reads the SQL she approves, kept with the plan.
		d.approve(t, fp)
		r = d.asRoot(t, "status", fp, "--key", d.aliceKey)
		if !strings.Contains(r.out, "+CREATE TABLE hosted_things") || !strings.Contains(r.out, "gate:        open") {
			t.Errorf("status as alice: want the kept migration's +CREATE TABLE hosted_things line and an open gate: %s", r)
		}

		// The run sends the fingerprint alone: the content is the kept one.
		if owner := tableOwner("hosted_things"); owner != "absent" {
			t.Fatalf("table hosted_things before the hosted run: %q", owner)
		}
		before := len(d.journalLines(t))
		res, text = call("run", map[string]any{"fingerprint": fp})
		var ran struct {
			Outcome  string `json:"outcome"`
			ExitCode int    `json:"exit_code"`
		}
		structured(res, &ran)
		if ran.Outcome != "ran" || ran.ExitCode != 0 {
			t.Errorf("run over MCP HTTP with the fingerprint alone: want outcome ran, exit 0: %s", text)
		}
		if n := len(d.journalLines(t)); n != before+2 {
			t.Errorf("the journal grew by %d lines, want 2 (intent and outcome)", n-before)
		}
		if owner := tableOwner("hosted_things"); owner != "migrator" {
			t.Errorf("table hosted_things after the hosted run: owner %q, want migrator", owner)
		}
		if holdsSecret([]byte(got.String()), c.password) {
			t.Error("the hosted agent got the password in an MCP result")
		}
	})

	t.Run("replay", d.replayOK)

	// The password is in the credentials directory and the program's
	// environment, nowhere else of prod-write's: not in what the agent
	// has or is shown (its environment, its plans and their evidence as
	// status shows them, the receipts, every client's output), nor in the
	// service's log, store and journal.
	t.Run("password_nowhere", func(t *testing.T) {
		places := map[string][]byte{
			"the agent's environment": []byte(strings.Join(d.agentEnv(), "\n")),
			"the service's log":       []byte(d.serveLog.String()),
		}
		for _, fp := range planned {
			r := d.asAgent(t, "status", fp, "--json")
			if !strings.Contains(r.out, `"plan"`) {
				t.Errorf("status %s --json as the agent shows no plan: %s", fp, r)
			}
			places["status "+fp] = []byte(r.out + r.err)
		}
		if len(planned) != 3 {
			t.Errorf("%d plans to search, want 3", len(planned))
		}
		r := d.asRoot(t, "receipts", "list", "--json")
		if r.code != 0 {
			t.Errorf("receipts list: %s", r)
		}
		places["receipts list"] = []byte(r.out + r.err)
		places["the clients' output"] = []byte(d.outputs.String())
		for p, b := range readTree(t, d.state) {
			places[p] = b
		}
		places["the journal"] = bytes.Join(d.journalLines(t), []byte("\n"))
		names := make([]string, 0, len(places))
		for p, b := range places {
			if holdsSecret(b, c.password) {
				names = append(names, p)
			}
		}
		slices.Sort(names)
		if len(names) > 0 {
			t.Errorf("the password is in %s", strings.Join(names, ", "))
		}
		if len(readTree(t, d.state)) == 0 || len(d.journalLines(t)) == 0 {
			t.Error("nothing was searched: the state directory or the journal is empty")
		}
	})
	t.Logf("the whole test took %s", time.Since(start).Round(time.Millisecond))
}
