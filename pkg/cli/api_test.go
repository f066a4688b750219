package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/execute"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/passkeytest"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/service"
	"github.com/prod-write/prod-write/pkg/servicecall"
)

// apiWorld is one deployment reached two ways: in-process, and through a
// runner service (this process's serviceHandler on a real socket), with
// the same clock.
type apiWorld struct {
	h       *runHarness
	st      *servicecall.State // the service's, which MCP over HTTP's backend shares
	base    *Factory           // the service's own Factory
	local   *Factory
	client  *Factory // a client of the service, with the agent's key
	keyless *Factory // a client of the service, with no key
	// factory builds a Factory with env; clientConfig is the client's
	// configuration.
	factory      func(env map[string]string) *Factory
	clientConfig string
	// passkey is alice's, listed in the policy.
	passkey *passkeytest.Authenticator
	// clock is the world's time as the service reads it (another
	// goroutine): setNow moves it and h's together.
	clock atomic.Value
}

// setNow sets the clock of every Factory of the world.
func (w *apiWorld) setNow(t time.Time) {
	w.h.now = t
	w.clock.Store(t)
}

// as returns f in-process and f a client of the service, each acting
// with principal's key.
func (w *apiWorld) as(principal string) (local, client *Factory) {
	key := w.h.key(principal)
	return w.factory(map[string]string{"PROD_WRITE_CONFIG": filepath.Join(w.h.dir, "prod-write.toml"), "PROD_WRITE_KEY": key}),
		w.factory(map[string]string{"PROD_WRITE_CONFIG": w.clientConfig, "PROD_WRITE_KEY": key})
}

func newAPIWorld(t *testing.T) *apiWorld {
	h := newRunHarness(t)
	// Under the service a mutating operation needs a run_as account of
	// its own (docs/DEPLOYMENT.md): each has one, which local mode ignores.
	op := "[[operation]]\nname = \"noop\"\ndescription = \"does nothing\"\nprogram = \"true\"\ntargets = [\"staging\"]\nrun_as = \"nobody\"\n[operation.params.name]\npattern = \"^[a-z]+$\"\n[operation.approval]\npaths = [\"record+approvals\", \"gera\", \"break-glass\"]\n" +
		// An operation with file parameters, the largest allowed more than
		// MCP over HTTP's bound.
		"[[operation]]\nname = \"push\"\ndescription = \"pushes files\"\nprogram = \"true\"\ntargets = [\"staging\"]\nrun_as = \"nobody\"\n" +
		"[operation.files.config]\nmax_size = \"64KiB\"\n[operation.files.blob]\nmax_size = \"8MiB\"\n" +
		// An operation that says something, run as nobody through the
		// service (as root, here, in process).
		"[[operation]]\nname = \"say\"\ndescription = \"says something\"\nprogram = \"echo\"\nargs = [\"said\"]\ntargets = [\"staging\"]\nrun_as = \"nobody\"\ncwd = \"/\"\n[operation.params.name]\npattern = \"^[a-z]+$\"\n[operation.approval]\npaths = [\"gera\"]\n"
	if err := os.WriteFile(filepath.Join(h.dir, "operations", "noop.toml"), []byte(op), 0o644); err != nil {
		t.Fatal(err)
	}
	demo := filepath.Join(h.dir, "operations", "config.toml")
	b, err := os.ReadFile(demo)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(demo, bytes.Replace(b, []byte("program = \"install\"\n"), []byte("program = \"install\"\nrun_as = \"nobody\"\n"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	// cab grants through freezes and breaks glass; past is a freeze.
	code, stdout, stderr := h.run("keygen", "--out", h.key("cab"), "--json")
	var kg struct {
		PublicKey string `json:"public_key"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &kg) != nil || kg.PublicKey == "" {
		t.Fatalf("keygen: %d %s %s", code, stdout, stderr)
	}
	tf, err := os.OpenFile(filepath.Join(h.dir, "trust.toml"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(tf, "\n[[principal]]\nid = \"cab\"\nroles = [\"freeze\", \"break-glass\"]\nkey = %q\n\n[[freeze]]\nname = \"past\"\nstart = \"2001-01-01\"\nend = \"2001-01-02\"\ntime_zone = \"UTC\"\n", kg.PublicKey)
	// A bridge, whose answers AnswerAttested admits.
	code, stdout, stderr = h.run("keygen", "--out", h.key("slackbridge"), "--json")
	if code != 0 || json.Unmarshal([]byte(stdout), &kg) != nil || kg.PublicKey == "" {
		t.Fatalf("keygen: %d %s %s", code, stdout, stderr)
	}
	fmt.Fprintf(tf, "\n[[principal]]\nid = \"slackbridge\"\nroles = [\"bridge\"]\nkey = %q\n", kg.PublicKey)
	// The approval page's origin, for passkey enrolment.
	fmt.Fprint(tf, "\n[passkey]\norigin = \"https://approve.example.test\"\n")
	if err := tf.Close(); err != nil {
		t.Fatal(err)
	}
	// Alice's passkey, for the approval page's calls.
	pk, err := passkeytest.New()
	if err != nil {
		t.Fatal(err)
	}
	pasteUnder(t, h, "alice", credentialSnippet(t, pk))
	w := &apiWorld{h: h, passkey: pk}
	w.clock.Store(h.now)
	factory := func(env map[string]string) *Factory {
		return &Factory{Env: localapi.Env{
			IO: &IOStreams{Out: io.Discard, Err: io.Discard}, Now: func() time.Time { return w.clock.Load().(time.Time) },
			LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
			Getwd:     func() (string, error) { return h.dir, nil },
		}}
	}
	w.factory = factory
	w.local = factory(map[string]string{"PROD_WRITE_CONFIG": filepath.Join(h.dir, "prod-write.toml"), "PROD_WRITE_KEY": h.key("agent")})

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
	st := &servicecall.State{Cfg: cfg, Log: log.New(io.Discard, "", 0), UID: ^uint32(0)}
	if err := st.Load(); err != nil {
		t.Fatal(err)
	}
	if st.Starter, err = execute.NewCaplessStarter(); err != nil {
		t.Fatal(err)
	}
	w.st, w.base = st, factory(nil)
	srv := &service.Server{Handler: &localapi.ServiceHandler{State: st, Base: &w.base.Env}, Ops: api.Ops(), Classify: st.Pools}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
	client := filepath.Join(pub, "client.toml")
	if err := os.WriteFile(client, []byte("[service]\nsocket = \""+sock+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.clientConfig = client
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
// results, field by field: one API beneath every front end
// (docs/adr/0038-one-typed-api.md).
func TestAPIAnswersAlikeEverywhere(t *testing.T) {
	w := newAPIWorld(t)
	fp := w.h.plan("noop", "--param", "name=alpha")
	code, stdout, stderr := w.h.run("file", fp, "--key", w.h.key("smith"), "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high", "--json")
	var rec struct {
		ID string `json:"id"`
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &rec) != nil {
		t.Fatal(stderr)
	}
	filed := rec.ID
	bridgeLocal, bridgeClient := w.as("slackbridge")
	asBridge := func(a api.API) api.API {
		if _, ok := a.(localapi.API); ok {
			return localapi.API{Env: &bridgeLocal.Env}
		}
		return localapi.ServiceClient{Env: &bridgeClient.Env}
	}
	// A run, so that the journal has entries to show.
	ran := w.h.plan("noop", "--param", "name=ran")
	if code, _, stderr := w.h.run("gera", "go", ran, "--key", w.h.key("gera")); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := w.h.run("run", ran); code != 0 {
		t.Fatal(stderr)
	}
	ctx := context.Background()
	enroller, err := passkeytest.New()
	if err != nil {
		t.Fatal(err)
	}
	implementations := []struct {
		name string
		api  api.API
	}{
		{"in-process", localapi.API{Env: &w.local.Env}},
		{"socket", localapi.ServiceClient{Env: &w.client.Env}},
	}
	calls := []struct {
		name string
		call func(api.API) (any, error)
	}{
		{"ops", func(a api.API) (any, error) { return a.Ops(ctx) }},
		{"whoami", func(a api.API) (any, error) { return a.Whoami(ctx) }},
		{"status", func(a api.API) (any, error) { return a.Status(ctx, api.StatusRequest{Fingerprint: fp}) }},
		{"wait that runs out", func(a api.API) (any, error) {
			// Ended by its context: the world's clock may stand still.
			wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			return a.Wait(wctx, api.WaitRequest{Fingerprint: fp})
		}},
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
		{"receipts show", func(a api.API) (any, error) { return a.ReceiptsShow(ctx, api.ReceiptsShowRequest{ID: "1"}) }},
		{"receipts show of a run", func(a api.API) (any, error) {
			r, err := localapi.API{Env: &w.local.Env}.ReceiptsShow(ctx, api.ReceiptsShowRequest{ID: "2"})
			if err != nil {
				return nil, err
			}
			return a.ReceiptsShow(ctx, api.ReceiptsShowRequest{ID: r.Entries[0].RunID})
		}},
		{"receipts show of no entry", func(a api.API) (any, error) { return a.ReceiptsShow(ctx, api.ReceiptsShowRequest{ID: "999"}) }},
		{"receipts list", func(a api.API) (any, error) { return a.ReceiptsList(ctx, api.ReceiptsListRequest{}) }},
		{"receipts list --last 1", func(a api.API) (any, error) { return a.ReceiptsList(ctx, api.ReceiptsListRequest{Last: 1}) }},
		{"receipts list with a negative --last refused", func(a api.API) (any, error) { return a.ReceiptsList(ctx, api.ReceiptsListRequest{Last: -1}) }},
		{"replay", func(a api.API) (any, error) {
			var rows []api.ReplayVerdict
			r, err := a.Replay(ctx, api.ReplayRequest{Each: func(r api.ReplayVerdict) { rows = append(rows, r) }})
			if err == nil && (len(rows) != 2 || !r.Summary.OK) {
				t.Errorf("replay of one run: %+v and %d verdicts", r, len(rows))
			}
			return struct {
				Result *api.ReplayResult
				Rows   []api.ReplayVerdict
			}{r, rows}, err
		}},
		{"receipts prove", func(a api.API) (any, error) { return a.ReceiptsProve(ctx, api.ReceiptsProveRequest{Seq: 1}) }},
		{"receipts prove of no entry", func(a api.API) (any, error) { return a.ReceiptsProve(ctx, api.ReceiptsProveRequest{Seq: 99}) }},
		{"receipts prove beyond the journal refused", func(a api.API) (any, error) {
			return a.ReceiptsProve(ctx, api.ReceiptsProveRequest{Seq: 1, Size: 99})
		}},
		{"receipts checkpoint", func(a api.API) (any, error) {
			return a.ReceiptsCheckpoint(ctx, api.ReceiptsCheckpointRequest{})
		}},
		{"receipts checkpoint --witness with no witness refused", func(a api.API) (any, error) {
			return a.ReceiptsCheckpoint(ctx, api.ReceiptsCheckpointRequest{Witness: true})
		}},
		{"receipts consistency", func(a api.API) (any, error) {
			head, err := localapi.API{Env: &w.local.Env}.ReceiptsCheckpoint(ctx, api.ReceiptsCheckpointRequest{Note: true})
			if err != nil {
				return nil, err
			}
			return a.ReceiptsConsistency(ctx, api.ReceiptsConsistencyRequest{Old: w.note(t, 1), New: head.Note})
		}},
		{"receipts consistency of a forked view refused", func(a api.API) (any, error) {
			return a.ReceiptsConsistency(ctx, api.ReceiptsConsistencyRequest{Old: w.note(t, 1, "{}\n"), New: w.note(t, 2)})
		}},
		{"receipts consistency of no note refused", func(a api.API) (any, error) {
			return a.ReceiptsConsistency(ctx, api.ReceiptsConsistencyRequest{Old: "nonsense", New: w.note(t, 2)})
		}},
		{"receipts export", func(a api.API) (any, error) {
			var out bytes.Buffer
			r, err := a.ReceiptsExport(ctx, api.ReceiptsExportRequest{InToto: true, Out: &out})
			if err == nil && (r.Runs != 1 || strings.Count(out.String(), "\n") != 1) {
				t.Errorf("export of one run: %+v and %q", r, out.String())
			}
			return struct {
				Result *api.ReceiptsExportResult
				Out    string
			}{r, out.String()}, err
		}},
		{"receipts export with no format refused", func(a api.API) (any, error) {
			return a.ReceiptsExport(ctx, api.ReceiptsExportRequest{Out: io.Discard})
		}},
		{"decision data", func(a api.API) (any, error) { return a.DecisionData(ctx, api.DecisionDataRequest{Fingerprint: fp}) }},
		{"decision data of no plan", func(a api.API) (any, error) {
			return a.DecisionData(ctx, api.DecisionDataRequest{Fingerprint: "sha256:" + fp[len(fp)-64:len(fp)-1] + "0"})
		}},
		{"ops show", func(a api.API) (any, error) { return a.OpsShow(ctx, api.OpsShowRequest{Name: "push"}) }},
		{"ops show refused", func(a api.API) (any, error) { return a.OpsShow(ctx, api.OpsShowRequest{Name: "nope"}) }},
		{"plans complete", func(a api.API) (any, error) {
			return a.PlansComplete(ctx, api.PlansCompleteRequest{Prefix: fp[len("sha256:") : len("sha256:")+3]})
		}},
		{"plans complete refused", func(a api.API) (any, error) { return a.PlansComplete(ctx, api.PlansCompleteRequest{Prefix: "../"}) }},
		// Passkey enrolment: the code itself is random, so its length
		// is compared; one software authenticator answers both
		// implementations' enrolments (the policy lists neither).
		{"passkey code", func(a api.API) (any, error) {
			r, err := a.PasskeyCode(ctx, api.PasskeyCodeRequest{Principal: "alice", TTL: time.Hour})
			if err != nil {
				return nil, err
			}
			return []any{r.FormatVersion, r.Principal, r.Expires, len(r.Code)}, nil
		}},
		{"passkey code for no principal refused", func(a api.API) (any, error) {
			return a.PasskeyCode(ctx, api.PasskeyCodeRequest{Principal: "mallory"})
		}},
		{"passkey enroll", func(a api.API) (any, error) {
			b, err := a.PasskeyEnrollBegin(ctx, api.PasskeyEnrollBeginRequest{})
			if err != nil {
				return nil, err
			}
			resp, err := enroller.Register(b.Options, passkeytest.Registration{Origin: "https://approve.example.test"})
			if err != nil {
				return nil, err
			}
			r, err := a.PasskeyEnrollFinish(ctx, api.PasskeyEnrollFinishRequest{Response: resp})
			return []any{b.Principal, b.Authorised, b.Expires, r}, err
		}},
		{"passkey enroll with a spent code refused", func(a api.API) (any, error) {
			c, err := localapi.API{Env: &w.local.Env}.PasskeyCode(ctx, api.PasskeyCodeRequest{Principal: "alice"})
			if err != nil {
				return nil, err
			}
			if _, err := a.PasskeyEnrollBegin(ctx, api.PasskeyEnrollBeginRequest{Code: c.Code}); err != nil {
				return nil, err
			}
			return a.PasskeyEnrollBegin(ctx, api.PasskeyEnrollBeginRequest{Code: c.Code})
		}},
		{"passkey enroll finish of a challenge not issued refused", func(a api.API) (any, error) {
			resp, err := enroller.Register([]byte(`{"publicKey":{"challenge":"bm90IGlzc3VlZCBieSB0aGUgc2VydmljZSwgMzI","rp":{"id":"approve.example.test"}}}`), passkeytest.Registration{Origin: "https://approve.example.test"})
			if err != nil {
				return nil, err
			}
			return a.PasskeyEnrollFinish(ctx, api.PasskeyEnrollFinishRequest{Response: resp})
		}},
		// The approval page's calls (ADR 0048), made with the bridge's
		// key; the nonce and issued time are the service's, so the
		// statement is compared for its form.
		{"passkey challenge by a caller that is not a bridge refused", func(a api.API) (any, error) {
			return a.PasskeyChallenge(ctx, api.PasskeyChallengeRequest{Fingerprint: fp, Decision: approval.Approve, Record: filed})
		}},
		{"passkey challenge and attested", func(a api.API) (any, error) {
			b := asBridge(a)
			st, err := b.PasskeyChallenge(ctx, api.PasskeyChallengeRequest{Fingerprint: fp, Decision: approval.Approve, Record: filed})
			if err != nil {
				return nil, err
			}
			slack, err := keys.Load(w.h.key("slackbridge"))
			if err != nil {
				return nil, err
			}
			env := assertAndSign(t, w.passkey, slack, decision(st, "alice"), "https://approve.example.test")
			r, err := b.PasskeyAttested(ctx, api.PasskeyAttestedRequest{Envelope: env})
			if err != nil {
				return nil, err
			}
			return []any{st.FormatVersion, st.Fingerprint, st.Decision, st.Record, st.Version, len(st.Nonce), st.Expires.Sub(st.Issued),
				r.FormatVersion, r.Fingerprint, r.Approver, r.Decision, r.Credential, r.UserVerified}, nil
		}},
		{"passkey attested of a nonce not issued refused", func(a api.API) (any, error) {
			slack, err := keys.Load(w.h.key("slackbridge"))
			if err != nil {
				return nil, err
			}
			st := &api.PasskeyChallengeResult{Fingerprint: fp, Decision: approval.Approve, Record: filed, Nonce: make([]byte, 32), Issued: w.h.now, Expires: w.h.now.Add(time.Hour)}
			return a.PasskeyAttested(ctx, api.PasskeyAttestedRequest{Envelope: assertAndSign(t, w.passkey, slack, decision(st, "alice"), "https://approve.example.test")})
		}},
		{"passkey attested not signed by a bridge refused", func(a api.API) (any, error) {
			alice, err := keys.Load(w.h.key("alice"))
			if err != nil {
				return nil, err
			}
			st := &api.PasskeyChallengeResult{Fingerprint: fp, Decision: approval.Approve, Record: filed, Nonce: make([]byte, 32), Issued: w.h.now, Expires: w.h.now.Add(time.Hour)}
			return a.PasskeyAttested(ctx, api.PasskeyAttestedRequest{Envelope: assertAndSign(t, w.passkey, alice, decision(st, "alice"), "https://approve.example.test")})
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
					// A row named "…refused" is a refusal in every
					// implementation (the others must answer alike); any
					// other but a lookup of what is absent must succeed.
					refused := strings.HasSuffix(c.name, "refused")
					switch {
					case refused && err == nil:
						t.Fatalf("%s: answered %v; want it refused", im.name, want)
					case !refused && !strings.HasSuffix(c.name, "of no plan") && !strings.HasSuffix(c.name, "of no entry") && err != nil:
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
	// The calls that sign a record: each implementation acts on its own
	// fresh plan (the same but for one parameter), with the same clock, so
	// the results are the same once what names the plan is normalised
	// (fingerprint, parameter, record ids, run id).
	h := w.h
	file := func(t *testing.T, fp string) string {
		if code, _, stderr := h.run("file", fp, "--key", h.key("smith"), "--summary", "s", "--effect", "e", "--blast-radius", "b", "--rollback", "r", "--certainty", "high"); code != 0 {
			t.Fatal(stderr)
		}
		return ""
	}
	// A review must be issued after the record it reviews: each
	// implementation's breaks glass at start and is reviewed a second
	// later (so the second's break-glass sees the first's run reviewed).
	start := h.now
	t.Cleanup(func() { w.setNow(start) })
	breakAndRun := func(t *testing.T, fp string) string {
		w.setNow(start)
		defer w.setNow(start.Add(time.Second))
		if code, _, stderr := h.run("break-glass", fp, "--reason", "r", "--incident", "INC-1", "--key", h.key("cab")); code != 0 {
			t.Fatal(stderr)
		}
		if code, _, stderr := h.run("run", fp); code != 0 {
			t.Fatal(stderr)
		}
		code, stdout, stderr := h.run("receipts", "list", "--json")
		if code != 0 {
			t.Fatal(stderr)
		}
		run := ""
		dec := json.NewDecoder(strings.NewReader(stdout))
		for {
			var r struct {
				RunID       string `json:"run_id"`
				Fingerprint string `json:"fingerprint"`
				Kind        string `json:"kind"`
			}
			if dec.Decode(&r) != nil {
				break
			}
			if r.Fingerprint == fp && r.Kind == "intent" {
				run = r.RunID
			}
		}
		if run == "" {
			t.Fatalf("no run of %s in receipts list: %s", fp, stdout)
		}
		return run
	}
	// fileRecord files a certainty record on fp and returns its id.
	fileRecord := func(t *testing.T, fp string) string {
		file(t, fp)
		st, err := (localapi.API{Env: &w.local.Env}).Status(ctx, api.StatusRequest{Fingerprint: fp})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range st.Evidence {
			if e.Kind == approval.KindRecord {
				return e.ID
			}
		}
		t.Fatalf("no record of %s", fp)
		return ""
	}
	// attested is a Slack click by user on record, as the bridge whose
	// key signer holds signs it: for approver, a second before now.
	attested := func(t *testing.T, signer, fp, record, approver, user string) api.AnswerAttestedRequest {
		k, err := keys.Load(h.key(signer))
		if err != nil {
			t.Fatal(err)
		}
		issued := w.clock.Load().(time.Time).UTC().Add(-time.Second)
		ch := approval.Channel{Kind: "slack", SlackUser: user, SlackTeam: "T1", SlackActionTS: "1700000000.000001"}
		env, err := approval.Sign(k, approval.TypeTrinity, approval.Answer{Fingerprint: fp, Record: record, Answer: "approve",
			Approver: approver, Channel: &ch, Issued: issued, Expires: issued.Add(approval.DefaultAnswerTTL)})
		if err != nil {
			t.Fatal(err)
		}
		return api.AnswerAttestedRequest{Fingerprint: fp, Record: record, Verdict: "approve", Channel: ch, Issued: issued, Envelope: env}
	}
	geraLocal, _ := w.as("gera")
	// A go for one run; it returns the start of the decision's id, as a
	// refusal names it.
	geraGo := func(t *testing.T, fp string) string {
		r, err := (localapi.API{Env: &geraLocal.Env}).Gera(ctx, api.GeraRequest{Fingerprint: fp, Decision: "go", Uses: 1, Reason: "r"})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID[:12]
	}
	writes := []struct {
		name  string
		op    string // "noop" unless set
		actor string
		// setup prepares the plan fp in local mode; what it returns is
		// call's arg.
		setup func(t *testing.T, fp string) string
		call  func(a api.API, fp, arg string) (any, error)
	}{
		{"file", "", "smith", nil, func(a api.API, fp, _ string) (any, error) {
			return a.File(ctx, api.FileRequest{Fingerprint: fp, Summary: "s", Effect: "e", BlastRadius: "b", Rollback: "r", Certainty: "medium", TTL: time.Hour})
		}},
		{"decide approve", "", "alice", file, func(a api.API, fp, _ string) (any, error) {
			return a.Decide(ctx, api.DecideRequest{Fingerprint: fp, Answer: "approve", Reason: "ok"})
		}},
		{"decide deny without a record", "", "alice", nil, func(a api.API, fp, _ string) (any, error) {
			return a.Decide(ctx, api.DecideRequest{Fingerprint: fp, Answer: "deny"})
		}},
		{"decide approve by the filer", "", "smith", file, func(a api.API, fp, _ string) (any, error) {
			return a.Decide(ctx, api.DecideRequest{Fingerprint: fp, Answer: "approve"})
		}},
		// Checked by the API as by the command line: the service takes
		// requests from any client.
		{"decide maybe", "", "alice", file, func(a api.API, fp, _ string) (any, error) {
			return a.Decide(ctx, api.DecideRequest{Fingerprint: fp, Answer: "maybe"})
		}},
		{"gera go for no runs", "", "gera", nil, func(a api.API, fp, _ string) (any, error) {
			return a.Gera(ctx, api.GeraRequest{Fingerprint: fp, Decision: "go"})
		}},
		{"file with no summary", "", "smith", nil, func(a api.API, fp, _ string) (any, error) {
			return a.File(ctx, api.FileRequest{Fingerprint: fp, Effect: "e", BlastRadius: "b", Rollback: "r", Certainty: "high"})
		}},
		{"break-glass with no incident", "", "cab", nil, func(a api.API, fp, _ string) (any, error) {
			return a.BreakGlass(ctx, api.BreakGlassRequest{Fingerprint: fp, Reason: "r", Incident: " "})
		}},
		{"gera go", "", "gera", nil, func(a api.API, fp, _ string) (any, error) {
			return a.Gera(ctx, api.GeraRequest{Fingerprint: fp, Decision: "go", Uses: 3, Reason: "r"})
		}},
		{"gera no-go", "", "gera", nil, func(a api.API, fp, _ string) (any, error) {
			return a.Gera(ctx, api.GeraRequest{Fingerprint: fp, Decision: "no-go", Uses: 3})
		}},
		{"withdraw", "", "agent", nil, func(a api.API, fp, _ string) (any, error) {
			return a.Withdraw(ctx, api.WithdrawRequest{Fingerprint: fp})
		}},
		{"withdraw by another", "", "alice", nil, func(a api.API, fp, _ string) (any, error) {
			return a.Withdraw(ctx, api.WithdrawRequest{Fingerprint: fp})
		}},
		{"freeze grant", "", "cab", nil, func(a api.API, fp, _ string) (any, error) {
			return a.FreezeGrant(ctx, api.FreezeGrantRequest{Fingerprint: fp, Freeze: "past", Reason: "INC-1"})
		}},
		{"freeze grant through no freeze", "", "cab", nil, func(a api.API, fp, _ string) (any, error) {
			return a.FreezeGrant(ctx, api.FreezeGrantRequest{Fingerprint: fp, Freeze: "nope", Reason: "INC-1"})
		}},
		{"break-glass", "", "cab", nil, func(a api.API, fp, _ string) (any, error) {
			return a.BreakGlass(ctx, api.BreakGlassRequest{Fingerprint: fp, Reason: "api down", Incident: "INC-2"})
		}},
		// Run: the program's output is written to the request's streams,
		// relayed by the service, and is not in the result.
		{"run", "say", "agent", geraGo, func(a api.API, fp, _ string) (any, error) {
			var out, errb bytes.Buffer
			r, err := a.Run(ctx, api.RunRequest{Fingerprint: fp, Stdout: &out, Stderr: &errb})
			if err != nil {
				return nil, err
			}
			if r.Receipt != r.Intent+1 {
				return nil, fmt.Errorf("intent %d, outcome %d", r.Intent, r.Receipt)
			}
			// Their places in the journal: each run appends its own.
			r.Intent, r.Receipt = 0, 0
			return struct {
				*api.RunResult
				Stdout string `json:"stdout"`
				Stderr string `json:"stderr"`
			}{r, out.String(), errb.String()}, nil
		}},
		{"run again, its go spent", "say", "agent", func(t *testing.T, fp string) string {
			id := geraGo(t, fp)
			if _, err := (localapi.API{Env: &w.local.Env}).Run(ctx, api.RunRequest{Fingerprint: fp}); err != nil {
				t.Fatal(err)
			}
			return id
		}, func(a api.API, fp, _ string) (any, error) {
			return a.Run(ctx, api.RunRequest{Fingerprint: fp})
		}},
		{"break-glass review", "", "alice", breakAndRun, func(a api.API, _, run string) (any, error) {
			return a.BreakGlassReview(ctx, api.BreakGlassReviewRequest{Run: run, Notes: "fine"})
		}},
		// A bridge's answer: admitted only as the service's own checks
		// make it (bridge.Source.Admit), whoever calls.
		{"answer attested", "", "agent", fileRecord, func(a api.API, fp, record string) (any, error) {
			return a.AnswerAttested(ctx, attested(t, "slackbridge", fp, record, "alice", "UALICE"))
		}},
		{"answer attested by an approver's key", "", "agent", fileRecord, func(a api.API, fp, record string) (any, error) {
			return a.AnswerAttested(ctx, attested(t, "alice", fp, record, "alice", "UALICE"))
		}},
		{"answer attested for another approver by the bridge", "", "agent", fileRecord, func(a api.API, fp, record string) (any, error) {
			return a.AnswerAttested(ctx, attested(t, "slackbridge", fp, record, "bob", "UALICE"))
		}},
	}
	for i, c := range writes {
		t.Run(c.name, func(t *testing.T) {
			local, client := w.as(c.actor)
			var want, wantErr string
			for j, im := range []struct {
				name string
				api  api.API
			}{{"in-process", localapi.API{Env: &local.Env}}, {"socket", localapi.ServiceClient{Env: &client.Env}}} {
				// A parameter of its own, so a plan of its own.
				name := strings.Repeat(string(rune('a'+i)), 2) + []string{"local", "socket"}[j]
				op := c.op
				if op == "" {
					op = "noop"
				}
				fp := h.plan(op, "--param", "name="+name)
				arg := ""
				if c.setup != nil {
					arg = c.setup(t, fp)
				}
				got, err := c.call(im.api, fp, arg)
				b, _ := json.Marshal(got)
				g, errText := normalised(t, b, fp, name, arg), ""
				if err != nil {
					g, errText = "", normalised(t, []byte(err.Error()), fp, name, arg)
				}
				if j == 0 {
					want, wantErr = g, errText
					if strings.Contains(c.name, " by ") || strings.Contains(c.name, " no ") || strings.HasSuffix(c.name, " maybe") || strings.HasSuffix(c.name, " spent") {
						if err == nil {
							t.Fatalf("%s: no refusal: %s", im.name, b)
						}
					} else if err != nil {
						t.Fatalf("%s: %v", im.name, err)
					}
					continue
				}
				if g != want || errText != wantErr {
					t.Errorf("%s answers\n%s (%q)\nwhere in-process answers\n%s (%q)", im.name, g, errText, want, wantErr)
				}
			}
		})
	}

	// The MCP tools return the API's results: in-process, through the
	// service, and over HTTP (the service's hosted backend, as
	// mcpserver's HTTP handler calls it), field by field.
	hosted, err := localapi.HostedMCPBackend(w.st, &w.base.Env, "agent")
	if err != nil {
		t.Fatal(err)
	}
	backends := []struct {
		name string
		b    mcpapi.Backend
	}{
		{"MCP in-process", localapi.NewMCPBackend(&w.local.Env)},
		{"MCP through the service", localapi.NewMCPBackend(&w.client.Env)},
		{"MCP over HTTP", hosted},
	}
	local := localapi.API{Env: &w.local.Env}
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
	wantShow, err := local.ReceiptsShow(ctx, api.ReceiptsShowRequest{ID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			entries, err := be.b.Receipt("1")
			if err != nil {
				t.Fatal(err)
			}
			if g, w := asJSON(t, entries), asJSON(t, wantShow.Entries); !reflect.DeepEqual(g, w) {
				t.Errorf("receipt %v, want %v", g, w)
			}
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
		r, err := localapi.ServiceClient{Env: &w.keyless.Env}.Status(context.Background(), api.StatusRequest{Fingerprint: fp})
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
	r, err = localapi.ServiceClient{Env: &w.client.Env}.Status(context.Background(), api.StatusRequest{Fingerprint: fp})
	if err != nil || r.Redacted || r.Plan == nil || r.Plan.Params["name"] != "secretive" {
		t.Fatalf("status with the agent's key: %+v %v", r, err)
	}
}

// normalised is b with what names one implementation's plan replaced:
// its fingerprint, its parameter, the run arg names, and the ids of the
// records signed for it (each record binds the fingerprint).
func normalised(t *testing.T, b []byte, fp, param, run string) string {
	t.Helper()
	s := strings.NewReplacer(fp, "FP", param, "PARAM").Replace(string(b))
	if run != "" {
		s = strings.ReplaceAll(s, run, "RUN")
	}
	var doc map[string]any
	if json.Unmarshal([]byte(s), &doc) != nil {
		return s // an error's text
	}
	for _, k := range []string{"id", "record"} {
		if _, ok := doc[k].(string); ok {
			doc[k] = "ID"
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// A caller with no key of the policy, through the service, is refused each
// call that signs a record (file, decide, gera, withdraw, freeze grant,
// break-glass and its review) by the key lookup, and the refusal shows
// nothing the plan binds: no argv, params, file paths or environment
// values. Nothing is stored. Tried without a key, and with a key the
// policy does not know.
func TestAPIWritesRefuseAKeylessCaller(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to call as a second account")
	}
	w := newAPIWorld(t)
	h := w.h
	cfg := filepath.Join(h.dir, "secret-app.toml")
	if err := os.WriteFile(cfg, []byte("password = \"hunter2\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.env["AWS_REGION"] = "region-value-kept-private"
	push := h.plan("config-push", "--param", "service=secretive", "--file", "config="+cfg)
	noop := h.plan("noop", "--param", "name=secretive")
	secretish := []string{"secretive", cfg, h.dir, "region-value-kept-private", "hunter2"}

	// A key of no principal, readable by nobody's account.
	foreign := filepath.Join(filepath.Dir(w.clientConfig), "foreign.key")
	if code, _, stderr := h.run("keygen", "--out", foreign); code != 0 {
		t.Fatal(stderr)
	}
	if err := os.Chown(foreign, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	foreignKey := w.factory(map[string]string{"PROD_WRITE_CONFIG": w.clientConfig, "PROD_WRITE_KEY": foreign})
	foreignKey.Getwd = func() (string, error) { return "/", nil }

	evidence := func(fp string) int {
		r, err := localapi.API{Env: &w.local.Env}.Status(context.Background(), api.StatusRequest{Fingerprint: fp})
		if err != nil {
			t.Fatal(err)
		}
		return len(r.Evidence)
	}
	before := map[string]int{push: evidence(push), noop: evidence(noop)}
	ctx := context.Background()
	for _, fp := range []string{push, noop} {
		calls := map[string]func(api.API) (any, error){
			"file": func(a api.API) (any, error) {
				return a.File(ctx, api.FileRequest{Fingerprint: fp, Summary: "s", Effect: "e", BlastRadius: "b", Rollback: "r", Certainty: "high"})
			},
			"decide approve": func(a api.API) (any, error) {
				return a.Decide(ctx, api.DecideRequest{Fingerprint: fp, Answer: "approve"})
			},
			"decide deny": func(a api.API) (any, error) { return a.Decide(ctx, api.DecideRequest{Fingerprint: fp, Answer: "deny"}) },
			"gera go": func(a api.API) (any, error) {
				return a.Gera(ctx, api.GeraRequest{Fingerprint: fp, Decision: "go", Uses: 1})
			},
			"gera no-go": func(a api.API) (any, error) { return a.Gera(ctx, api.GeraRequest{Fingerprint: fp, Decision: "no-go"}) },
			"withdraw":   func(a api.API) (any, error) { return a.Withdraw(ctx, api.WithdrawRequest{Fingerprint: fp}) },
			"freeze grant": func(a api.API) (any, error) {
				return a.FreezeGrant(ctx, api.FreezeGrantRequest{Fingerprint: fp, Freeze: "past", Reason: "r"})
			},
			"break-glass": func(a api.API) (any, error) {
				return a.BreakGlass(ctx, api.BreakGlassRequest{Fingerprint: fp, Reason: "r", Incident: "INC-1"})
			},
			"break-glass review": func(a api.API) (any, error) {
				return a.BreakGlassReview(ctx, api.BreakGlassReviewRequest{Run: fp[7:19]})
			},
		}
		for name, call := range calls {
			for who, f := range map[string]*Factory{"no key": w.keyless, "a key of no principal": foreignKey} {
				type answer struct {
					r   any
					err error
				}
				got := make(chan answer, 1)
				go func() {
					// nobody (65534), on this thread alone, as in
					// TestAPIStatusRedactedForAKeylessCaller.
					runtime.LockOSThread() // never unlocked: the thread ends with its changed ids
					if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 65534, 65534, 65534); e != 0 {
						got <- answer{err: e}
						return
					}
					r, err := call(localapi.ServiceClient{Env: &f.Env})
					got <- answer{r, err}
				}()
				a := <-got
				if a.err == nil {
					t.Errorf("%s with %s: not refused: %+v", name, who, a.r)
					continue
				}
				if errors.Is(a.err, unix.EPERM) {
					t.Fatal(a.err)
				}
				b, _ := json.Marshal(a.err)
				text := a.err.Error() + string(b)
				for _, s := range secretish {
					if strings.Contains(text, s) {
						t.Errorf("%s with %s shows %q: %s", name, who, s, text)
					}
				}
				// Refused by the key (none, or of no principal), or by
				// what the registry says of every plan's operation.
				if !strings.Contains(text, "key") && !strings.Contains(text, "does not allow break-glass") {
					t.Errorf("%s with %s: refused for another reason: %s", name, who, text)
				}
			}
		}
	}
	for fp, n := range before {
		if got := evidence(fp); got != n {
			t.Errorf("%s: %d pieces of evidence after keyless calls, %d before", fp, got, n)
		}
	}
}

// asNobody calls call as nobody (65534), on a thread of its own:
// SO_PEERCRED records the connecting thread's credentials.
func asNobody[T any](t *testing.T, call func() (T, error)) (T, error) {
	t.Helper()
	type answer struct {
		r   T
		err error
	}
	got := make(chan answer, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with its changed ids
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, 65534, 65534, 65534); e != 0 {
			var zero T
			got <- answer{zero, e}
			return
		}
		r, err := call()
		got <- answer{r, err}
	}()
	a := <-got
	if errors.Is(a.err, unix.EPERM) {
		t.Fatal(a.err)
	}
	return a.r, a.err
}

// A caller with no key of the policy reads a run's receipts through the
// service redacted (docs/adr/0040-what-a-keyless-caller-reads-of-a-receipt.md):
// no argv, params, file paths or environment values, nor the evidence;
// the kinds, sequence numbers, run id, fingerprint, operation, target,
// exit status and digests still there. Its receipts list shows no
// break-glass reason or incident either.
func TestAPIReceiptsRedactedForAKeylessCaller(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to call as a second account")
	}
	w := newAPIWorld(t)
	h := w.h
	cfg := filepath.Join(h.dir, "secret-app.toml")
	if err := os.WriteFile(cfg, []byte("password = \"hunter2\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.env["AWS_REGION"] = "region-value-kept-private"
	h.env["DEPLOY_TOKEN"] = "token-value-kept-private"
	push := h.plan("config-push", "--param", "service=secretive", "--file", "config="+cfg)
	// Run on the break-glass path, so the intent carries a breaker's
	// reason too.
	noop := h.plan("noop", "--param", "name=secretive")
	if code, _, stderr := h.run("gera", "go", push, "--key", h.key("gera")); code != 0 {
		t.Fatal(stderr)
	}
	h.run("run", push) // what install makes of it does not matter: the receipts are written
	if code, _, stderr := h.run("break-glass", noop, "--reason", "reason-kept-private", "--incident", "INC-kept-private", "--key", h.key("cab")); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := h.run("run", noop); code != 0 {
		t.Fatal(stderr)
	}
	secretish := []string{"secretive", cfg, "region-value-kept-private", "token-value-kept-private", "hunter2", "reason-kept-private", "INC-kept-private"}
	ctx := context.Background()
	full, err := localapi.API{Env: &w.local.Env}.ReceiptsShow(ctx, api.ReceiptsShowRequest{ID: "1"})
	if err != nil {
		t.Fatal(err)
	}
	run := full.Entries[0].RunID
	// Export restates every run whole: refused, and nothing sent.
	var exported bytes.Buffer
	_, err = asNobody(t, func() (*api.ReceiptsExportResult, error) {
		return localapi.ServiceClient{Env: &w.keyless.Env}.ReceiptsExport(ctx, api.ReceiptsExportRequest{InToto: true, Out: &exported})
	})
	if r, ok := refusal.As(err); !ok || r.Code != refusal.PrincipalUnknown || exported.Len() != 0 {
		t.Errorf("keyless receipts export: %v, and %d bytes sent; want refused principal_unknown and nothing", err, exported.Len())
	}
	// A plan's envelope and evidence (a bridge's DecisionData): refused,
	// and nothing of the plan in the refusal.
	dd, err := asNobody(t, func() (*api.DecisionDataResult, error) {
		return localapi.ServiceClient{Env: &w.keyless.Env}.DecisionData(ctx, api.DecisionDataRequest{Fingerprint: push})
	})
	if r, ok := refusal.As(err); !ok || r.Code != refusal.PrincipalUnknown || dd != nil {
		t.Errorf("keyless decision data: %+v, %v; want refused principal_unknown", dd, err)
	} else {
		for _, s := range secretish {
			if strings.Contains(err.Error(), s) {
				t.Errorf("keyless decision data's refusal shows %q: %v", s, err)
			}
		}
	}
	// A prefix of at least 6 characters, not digits only (which would
	// name a sequence number).
	prefix := run[:6]
	for n := 7; strings.Trim(prefix, "0123456789") == "" && n <= len(run); n++ {
		prefix = run[:n]
	}
	for _, id := range []string{"1", "2", "3", run, prefix} {
		r, err := asNobody(t, func() (*api.ReceiptsShowResult, error) {
			return localapi.ServiceClient{Env: &w.keyless.Env}.ReceiptsShow(ctx, api.ReceiptsShowRequest{ID: id})
		})
		if err != nil {
			t.Fatalf("receipts show %s without a key: %v", id, err)
		}
		b, _ := json.Marshal(r)
		for _, s := range secretish {
			if strings.Contains(string(b), s) {
				t.Errorf("keyless receipts show %s shows %q: %s", id, s, b)
			}
		}
		for _, e := range r.Entries {
			if !e.Redacted || e.Explanation != nil || e.Kind == "" || e.Seq == 0 || e.RunID == "" {
				t.Errorf("keyless receipts show %s: %s", id, b)
			}
			if in := e.Intent; in != nil && (in.Plan != nil || len(in.Evidence) != 0 || in.Fingerprint == "" || in.Operation == nil || e.Target != "staging") {
				t.Errorf("keyless receipts show %s: intent %s", id, b)
			}
			if o := e.Outcome; o != nil && o.Stdout.SHA256 == "" {
				t.Errorf("keyless receipts show %s: outcome %s", id, b)
			}
		}
	}
	// With the key, it is all there.
	r, err := localapi.ServiceClient{Env: &w.client.Env}.ReceiptsShow(ctx, api.ReceiptsShowRequest{ID: "1"})
	if err != nil || r.Entries[0].Redacted || r.Entries[0].Intent == nil || r.Entries[0].Intent.Plan == nil || r.Entries[0].Explanation == nil {
		t.Fatalf("receipts show with the agent's key: %+v %v", r, err)
	}
	// receipts list, text and JSON: operation names and fingerprints,
	// no break-glass reason or incident.
	for _, args := range [][]string{{"receipts", "list"}, {"receipts", "list", "--json"}} {
		out, err := asNobody(t, func() (string, error) {
			var o, e strings.Builder
			f := w.factory(map[string]string{"PROD_WRITE_CONFIG": w.clientConfig})
			f.IO = &IOStreams{In: strings.NewReader(""), Out: &o, Err: &e}
			f.Getwd = func() (string, error) { return "/", nil }
			if code := Run(args, f); code != 0 {
				return "", fmt.Errorf("exit %d: %s", code, e.String())
			}
			return o.String() + e.String(), nil
		})
		if err != nil {
			t.Fatalf("%q without a key: %v", args, err)
		}
		if !strings.Contains(out, noop) && !strings.Contains(out, noop[:23]) {
			t.Errorf("%q without a key lists no run of %s:\n%s", args, noop, out)
		}
		for _, s := range secretish {
			if strings.Contains(out, s) {
				t.Errorf("%q without a key shows %q:\n%s", args, s, out)
			}
		}
	}
}
