package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/service"
)

// apiWorld is one deployment reached two ways: in-process, and through a
// runner service (this process's serviceHandler on a real socket), with
// the same clock.
type apiWorld struct {
	h       *runHarness
	st      *serviceState // the service's, which MCP over HTTP's backend shares
	base    *Factory      // the service's own Factory
	local   *Factory
	client  *Factory // a client of the service, with the agent's key
	keyless *Factory // a client of the service, with no key
}

func newAPIWorld(t *testing.T) *apiWorld {
	h := newRunHarness(t)
	op := "[[operation]]\nname = \"noop\"\ndescription = \"does nothing\"\nprogram = \"true\"\ntargets = [\"staging\"]\n[operation.params.name]\npattern = \"^[a-z]+$\"\n[operation.approval]\npaths = [\"record+approvals\"]\n" +
		// An operation with file parameters, the largest allowed more than
		// MCP over HTTP's bound.
		"[[operation]]\nname = \"push\"\ndescription = \"pushes files\"\nprogram = \"true\"\ntargets = [\"staging\"]\n" +
		"[operation.files.config]\nmax_size = \"64KiB\"\n[operation.files.blob]\nmax_size = \"8MiB\"\n"
	if err := os.WriteFile(filepath.Join(h.dir, "operations", "noop.toml"), []byte(op), 0o644); err != nil {
		t.Fatal(err)
	}
	factory := func(env map[string]string) *Factory {
		return &Factory{
			IO: &IOStreams{Out: io.Discard, Err: io.Discard}, Now: func() time.Time { return h.now },
			LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
			Getwd:     func() (string, error) { return h.dir, nil },
		}
	}
	w := &apiWorld{h: h, local: factory(map[string]string{"PROD_WRITE_CONFIG": filepath.Join(h.dir, "prod-write.toml"), "PROD_WRITE_KEY": h.key("agent")})}

	// Beside the client's configuration, in a directory every account may
	// enter: the keyless caller is another account (t.TempDir's parent is
	// root's own).
	pub, err := os.MkdirTemp("", "prod-write-api-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(pub) })
	if err := os.Chmod(pub, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(pub, "s.sock")
	l, err := service.Listen(sock, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(filepath.Join(h.dir, "prod-write.toml"))
	if err != nil {
		t.Fatal(err)
	}
	// MCP over HTTP acts for agent with the key the service holds for it,
	// in the directory the service gives hosted callers.
	mcpKeys := filepath.Join(h.dir, "mcpkeys")
	if err := os.Mkdir(mcpKeys, 0o700); err != nil {
		t.Fatal(err)
	}
	if k, err := os.ReadFile(h.key("agent")); err != nil || os.WriteFile(filepath.Join(mcpKeys, "agent.key"), k, 0o600) != nil {
		t.Fatal("copying agent's key for MCP over HTTP", err)
	}
	cfg.Service.MCPKeys, cfg.Service.MCPCwd = mcpKeys, h.dir
	st := &serviceState{cfg: cfg, log: log.New(io.Discard, "", 0), uid: ^uint32(0)}
	if err := st.load(); err != nil {
		t.Fatal(err)
	}
	w.st, w.base = st, factory(nil)
	srv := &service.Server{Handler: &serviceHandler{st: st, base: w.base}, Classify: st.pools}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
	client := filepath.Join(pub, "client.toml")
	if err := os.WriteFile(client, []byte("[service]\nsocket = \""+sock+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.client = factory(map[string]string{"PROD_WRITE_CONFIG": client, "PROD_WRITE_KEY": h.key("agent")})
	w.keyless = factory(map[string]string{"PROD_WRITE_CONFIG": client})
	w.keyless.Getwd = func() (string, error) { return "/", nil }
	return w
}

// asJSON is v as the socket carries it, decoded back into a generic
// value: two results are equal field by field when these are.
func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// The same calls through the in-process API, the socket client and the MCP
// backend (in-process and through the service) give the same typed
// results, field by field: one API beneath every front end (issue 28).
func TestAPIAnswersAlikeEverywhere(t *testing.T) {
	w := newAPIWorld(t)
	fp := w.h.plan("noop", "--param", "name=alpha")
	if code, _, stderr := w.h.run("file", fp, "--key", w.h.key("smith"), "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high"); code != 0 {
		t.Fatal(stderr)
	}
	ctx := context.Background()
	implementations := []struct {
		name string
		api  api.API
	}{
		{"in-process", localAPI{f: w.local}},
		{"socket", serviceAPI{f: w.client}},
	}
	calls := []struct {
		name string
		call func(api.API) (any, error)
	}{
		{"ops", func(a api.API) (any, error) { return a.Ops(ctx) }},
		{"whoami", func(a api.API) (any, error) { return a.Whoami(ctx) }},
		{"status", func(a api.API) (any, error) { return a.Status(ctx, api.StatusRequest{Fingerprint: fp}) }},
		{"status of no plan", func(a api.API) (any, error) {
			return a.Status(ctx, api.StatusRequest{Fingerprint: "sha256:" + fp[len(fp)-64:len(fp)-1] + "0"})
		}},
		{"plan", func(a api.API) (any, error) {
			return a.Plan(ctx, api.PlanRequest{Operation: "noop", Target: "staging", Params: map[string]string{"name": "alpha"}})
		}},
		{"plan with a file", func(a api.API) (any, error) {
			return a.Plan(ctx, api.PlanRequest{Operation: "push", Target: "staging", Files: map[string]string{"config": filepath.Join(w.h.dir, "config.toml"), "blob": filepath.Join(w.h.dir, "blob.bin")}, DryRun: true})
		}},
		{"plan refused", func(a api.API) (any, error) {
			return a.Plan(ctx, api.PlanRequest{Operation: "noop", Target: "staging", Params: map[string]string{"name": "NOT VALID"}})
		}},
	}
	if err := os.WriteFile(filepath.Join(w.h.dir, "config.toml"), []byte("a = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.h.dir, "blob.bin"), []byte{0, 1, 2}, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			var want any
			var wantErr string
			for i, im := range implementations {
				got, err := c.call(im.api)
				errText := ""
				if err != nil {
					// The exit status it maps to, too: the caller exits
					// with it.
					errText = fmt.Sprintf("%v (exit %d)", err, ExitCode(err))
					got = nil
				}
				if i == 0 {
					want, wantErr = asJSON(t, got), errText
					if !strings.HasSuffix(c.name, "of no plan") && !strings.HasSuffix(c.name, "refused") && err != nil {
						t.Fatalf("%s: %v", im.name, err)
					}
					continue
				}
				if g := asJSON(t, got); !reflect.DeepEqual(g, want) || errText != wantErr {
					t.Errorf("%s answers\n%v (%q)\nwhere %s answers\n%v (%q)", im.name, g, errText, implementations[0].name, want, wantErr)
				}
			}
		})
	}
	// The MCP tools return the API's results: in-process, through the
	// service, and over HTTP (the service's hosted backend, as
	// mcpserver's HTTP handler calls it), field by field.
	hosted, err := w.st.mcpBackend(w.base, "agent")
	if err != nil {
		t.Fatal(err)
	}
	backends := []struct {
		name string
		b    mcpapi.Backend
	}{
		{"MCP in-process", newMCPBackend(w.local)},
		{"MCP through the service", newMCPBackend(w.client)},
		{"MCP over HTTP", hosted},
	}
	local := localAPI{f: w.local}
	wantOps, err := local.Ops(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus, err := local.Status(ctx, api.StatusRequest{Fingerprint: fp})
	if err != nil {
		t.Fatal(err)
	}
	wantPlan, err := local.Plan(ctx, api.PlanRequest{Operation: "noop", Target: "staging", Params: map[string]string{"name": "alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			reg, err := be.b.Registry()
			if err != nil {
				t.Fatal(err)
			}
			if g, w := asJSON(t, reg.All()), asJSON(t, wantOps.Operations); !reflect.DeepEqual(g, w) {
				t.Errorf("registry %v, want %v", g, w)
			}
			report, _, err := be.b.Status(fp)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := asJSON(t, report), asJSON(t, wantStatus); !reflect.DeepEqual(g, w) {
				t.Errorf("status %v, want %v", g, w)
			}
			p, err := be.b.Plan(mcpapi.PlanRequest{Operation: "noop", Target: "staging", Params: map[string]string{"name": "alpha"}})
			if err != nil {
				t.Fatal(err)
			}
			if g, w := asJSON(t, p), asJSON(t, wantPlan); !reflect.DeepEqual(g, w) {
				t.Errorf("plan %v, want %v", g, w)
			}
		})
	}
}

// A caller with no key of the policy reads a status through the service
// redacted: no argv, params, paths or environment values, its operation,
// fingerprint and gate still there.
func TestAPIStatusRedactedForAKeylessCaller(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to call as a second account")
	}
	w := newAPIWorld(t)
	fp := w.h.plan("noop", "--param", "name=secretive")
	type answer struct {
		r   *api.StatusResult
		err error
	}
	got := make(chan answer, 1)
	go func() {
		// nobody (65534), on this thread alone: SO_PEERCRED records the
		// connecting thread's credentials.
		runtime.LockOSThread() // never unlocked: the thread ends with its changed ids
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 65534, 65534, 65534); e != 0 {
			got <- answer{err: e}
			return
		}
		r, err := serviceAPI{f: w.keyless}.Status(context.Background(), api.StatusRequest{Fingerprint: fp})
		got <- answer{r, err}
	}()
	a := <-got
	r, err := a.r, a.err
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(r)
	if !r.Redacted || r.Plan != nil || r.Fingerprint != fp || r.Operation != "noop" || r.Refusal == nil {
		t.Fatalf("keyless status: %s", b)
	}
	for _, s := range []string{"secretive", w.h.dir} {
		if strings.Contains(string(b), s) {
			t.Errorf("keyless status shows %q: %s", s, b)
		}
	}
	// With the key, it is all there.
	r, err = serviceAPI{f: w.client}.Status(context.Background(), api.StatusRequest{Fingerprint: fp})
	if err != nil || r.Redacted || r.Plan == nil || r.Plan.Params["name"] != "secretive" {
		t.Fatalf("status with the agent's key: %+v %v", r, err)
	}
}
