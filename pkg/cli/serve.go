package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/decisionlog"
	"github.com/prod-write/prod-write/pkg/execute"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/plans"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/service"
)

// ServeOptions are serve's inputs.
type ServeOptions struct {
	F *Factory `json:"-"`
	// Ready, if set, is called once the socket listens (tests).
	Ready func() `json:"-"`
}

// NewCmdServe builds `serve`.
func NewCmdServe(f *Factory, runF func(*ServeOptions) error) *cobra.Command {
	opts := &ServeOptions{F: f}
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the runner service: the trust boundary between agents and production (SPEC §13)",
		Long: `serve is the runner service. It runs under a dedicated account, loads the
policy, registry, runner key and secrets it alone owns, keeps them warm, and
serves prod-write's commands on the Unix socket named by [service] socket in
prod-write.toml (or the socket systemd hands over). Clients are prod-write
commands whose configuration names that socket.

It takes nothing from a caller but what the protocol carries: the calling
account (SO_PEERCRED), the command's flags, and descriptors the client opened
(its stdio, working directory, key and files). Programs run as their
operation's run_as account, with an environment built from scratch and
secrets from the service's credentials directory.

SIGHUP reloads the trust policy, registry and runner key without dropping
calls in progress (a status --wait judges again at once, by the new policy).
It does not read prod-write.toml again: a change there (service.mcp_listen,
the socket, paths, backends) is logged as needing a restart.
SIGINT or SIGTERM stops accepting, on the socket and over MCP HTTP alike,
ends the waits in progress at once (a wait is only a question: a status
--wait client asks again, and says the service went away if none answers;
wait_for_decision answers pending) and waits for the other calls: a run is
never cut short, and its outcome receipt is written.`,
		Example: `  prod-write serve --config /etc/prod-write/prod-write.toml`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if runF != nil {
				return runF(opts)
			}
			return serveRun(opts)
		},
	}
}

// serviceState is what the service loaded and keeps warm.
type serviceState struct {
	cfg *config.Config
	// remoteSecret reads a secret from SSM when [service] secrets says so.
	remoteSecret func(ctx context.Context, name string) (string, error)
	loaded       atomic.Pointer[loadedPolicy]
	uid          uint32 // the service's own account
	starter      *execute.CaplessStarter
	// snapshots keeps programs' sealed snapshots between runs.
	snapshots execute.SnapshotCache
	log       *log.Logger
	// decisions is the service's decision log (nil when off): callers
	// never name it.
	decisions decisionlog.Sink
}

// loadedPolicy is one consistent load of the policy the service judges by.
type loadedPolicy struct {
	reg       *operations.Registry
	policy    *approval.Policy
	runnerKey *keys.Private
	runner    *approval.Principal
	runnerErr error
	// replaced is closed once a reload replaces this load: a wait in
	// progress judges again at once, by the new one.
	replaced chan struct{}
}

func (s *serviceState) current() *loadedPolicy { return s.loaded.Load() }

// load reads the registry, trust policy and runner key. On error the state
// is unchanged: a broken edit never leaves the service judging by half a
// policy.
func (s *serviceState) load() error {
	reg, err := loadOps(s.cfg)
	if err != nil {
		return err
	}
	policy, err := approval.LoadPolicy(s.cfg.Trust)
	if err != nil {
		return err
	}
	if err := runner.CheckPins(s.cfg, policy, reg); err != nil {
		return err
	}
	policy.CacheVerifications()
	for _, w := range reg.Warnings {
		s.log.Printf("warning: %s", w)
	}
	lp := &loadedPolicy{reg: reg, policy: policy, replaced: make(chan struct{})}
	lp.runnerKey, lp.runner, lp.runnerErr = runner.LoadIdentity(s.cfg, policy)
	if old := s.loaded.Swap(lp); old != nil {
		close(old.replaced)
	}
	s.snapshots.Purge()
	return nil
}

// secret reads a production secret from the service's own credentials
// directory: one file per secret, named as the variable. Never from a
// caller, never from the service's environment.
func (s *serviceState) secret(name string) (string, error) {
	if s.remoteSecret != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return s.remoteSecret(ctx, name)
	}
	dir := s.cfg.Service.Credentials
	if dir == "" {
		// systemd's LoadCredential= sets it in the service's own
		// environment, which the unit decides, not any caller.
		dir = os.Getenv("CREDENTIALS_DIRECTORY")
	}
	if dir == "" {
		return "", errors.New("no credentials directory is configured ([service] credentials)")
	}
	fl, err := os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", err
	}
	defer fl.Close()
	fi, err := fl.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", errors.New("not a regular file")
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("mode %04o lets others read or write it", fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(fl, 64<<10))
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

func serveRun(o *ServeOptions) error {
	f := o.F
	if f.Net == nil {
		// The service also serves the bridges and MCP, and posts
		// decisions: it is prod-write-net (docs/adr/0011-runner-service.md).
		return f.handOff("the runner service serves the bridges and MCP")
	}
	c, err := f.Config()
	if err != nil {
		return err
	}
	if c.Service.Socket == "" {
		return &config.Error{Path: c.Path, Msg: "serve needs [service] socket: where to listen"}
	}
	// Only the callers' group may connect by default; who may act is
	// still decided by signatures (docs/adr/0036-the-service-never-waits-on-a-caller.md).
	mode := os.FileMode(0o660)
	if c.Service.SocketMode != "" {
		m, err := strconv.ParseUint(c.Service.SocketMode, 8, 32)
		if err != nil || m > 0o777 {
			return &config.Error{Path: c.Path, Msg: fmt.Sprintf("service.socket_mode %q: want an octal mode such as \"0660\"", c.Service.SocketMode)}
		}
		mode = os.FileMode(m)
	}
	// Nothing of the service's own environment reaches a secret, a proxy
	// or a CA: bridge tokens come from their files, and the network
	// clients are built without proxy or CA settings from anyone's
	// environment (docs/adr/0011-runner-service.md).
	f.LookupEnv = func(string) (string, bool) { return "", false }
	for _, v := range proxyAndCAVariables {
		os.Unsetenv(v)
	}
	st := &serviceState{cfg: c, uid: uint32(os.Getuid()), log: log.New(f.IO.Err, "prod-write serve: ", log.LstdFlags|log.Lmsgprefix)}
	if err := st.load(); err != nil {
		return err
	}
	if st.decisions, err = decisionSinkFor(c, &decisionlog.Stream{W: f.IO.Out}); err != nil {
		return err
	}
	if fl, ok := st.decisions.(*decisionlog.File); ok {
		// A log that cannot be opened stops the service here, not at
		// its first refusal.
		if err := fl.Check(); err != nil {
			return &config.Error{Path: c.Path, Msg: "log.decisions", Err: err}
		}
	}
	if c.Service.Secrets != "" {
		if f.AWS == nil {
			return &config.Error{Path: c.Path, Msg: "service.secrets needs the AWS backends (prod-write-net)"}
		}
		if st.remoteSecret, err = f.AWS.SecretSource(c); err != nil {
			return err
		}
	}
	var bridges *BridgeService
	if slackEnabled(c.Bridge) || githubEnabled(c.Bridge) || pageEnabled(c.Bridge) {
		lp := st.current()
		if bridges, err = newBridgeService(f, c, lp.reg, lp.policy, nil); err != nil {
			return err
		}
	}
	if st.starter, err = execute.NewCaplessStarter(); err != nil {
		return err
	}
	// The service's files are its own; nothing a caller does changes this.
	syscall.Umask(0o077)
	l, err := service.Listen(c.Service.Socket, mode)
	if err != nil {
		return &config.Error{Path: c.Path, Msg: "listening on " + c.Service.Socket, Err: err}
	}
	if g := c.Service.SocketGroup; g != "" {
		if err := chgrp(c.Service.Socket, g); err != nil {
			l.Close()
			return &config.Error{Path: c.Path, Msg: "service.socket_group " + g, Err: err}
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	started, _ := os.ReadFile(c.Path)
	go func() {
		for range hup {
			st.configChanged(started)
			if err := st.load(); err != nil {
				st.log.Printf("reload failed, still judging by the policy loaded before: %v", err)
				continue
			}
			st.log.Printf("reloaded the trust policy and registry (%s)", st.current().reg.Digest)
		}
	}()
	st.log.Printf("listening on %s (uid %d)", c.Service.Socket, st.uid)
	// The witnesses' cadence: never in a run's path (ADR 0044).
	go st.witnessLoop(ctx)
	if o.Ready != nil {
		o.Ready()
	}
	errc := make(chan error, 2)
	if bridges != nil {
		go func() {
			if err := f.Net.ServeBridge(ctx, bridges); err != nil {
				errc <- fmt.Errorf("bridges: %w", err)
				stop()
			}
		}()
	}
	// The socket's server counts the calls of MCP over HTTP too: a stop
	// treats them alike (docs/adr/0031-waits-through-the-service.md).
	srv := &service.Server{Handler: &serviceHandler{st: st, base: f}, Log: st.log, Classify: st.pools}
	// Done once the service has no call left: MCP over HTTP then shuts
	// down. Its listener closes as the service stops (srv.OnStop), before
	// any call learns of the stop.
	mcpCtx, mcpDone := context.WithCancel(context.Background())
	defer mcpDone()
	var mcpEnded chan error // nil without MCP over HTTP
	if c.Service.MCPListen != "" {
		if c.Service.MCPTokens == "" {
			return &config.Error{Path: c.Path, Msg: "service.mcp_listen needs service.mcp_tokens: the file of hashed bearer tokens"}
		}
		slog := slog.New(slog.NewTextHandler(f.IO.Err, nil))
		backendFor := func(principal string) (mcpapi.Backend, error) { return st.mcpBackend(f, principal) }
		// Started before the socket accepts: a tokens file that names no
		// principal of the policy stops the service here.
		mcpErr := make(chan error, 1)
		go func() {
			mcpErr <- f.Net.ServeMCPHTTP(mcpCtx, c.Service, backendFor, srv, slog)
		}()
		select {
		case err := <-mcpErr:
			if err == nil {
				err = errors.New("it stopped without saying why")
			}
			return &config.Error{Path: c.Path, Msg: "serving MCP over HTTP", Err: err}
		case <-time.After(200 * time.Millisecond):
		}
		mcpEnded = make(chan error, 1)
		go func() {
			err := <-mcpErr
			if err != nil {
				// It failed while serving: the service stops.
				stop()
			}
			mcpEnded <- err
		}()
	}
	err = srv.Serve(ctx, l)
	if mcpEnded != nil {
		// Every call has ended, over HTTP too: MCP over HTTP shuts
		// down, and its last answers are written before we exit.
		mcpDone()
		if merr := <-mcpEnded; merr != nil {
			err = errors.Join(err, fmt.Errorf("mcp: %w", merr))
		}
	}
	st.log.Printf("stopped")
	select {
	case berr := <-errc:
		return errors.Join(err, berr)
	default:
	}
	return err
}

// configChanged logs, on SIGHUP, that prod-write.toml changed since the
// service started: a reload reads the trust policy, registry and runner
// key again, never prod-write.toml (its listeners, paths and backends are
// the service's from its start), so a change there, such as a new
// service.mcp_listen, needs a restart. Said plainly rather than half
// applied (issue 29).
func (s *serviceState) configChanged(started []byte) {
	now, err := os.ReadFile(s.cfg.Path)
	if err != nil || bytes.Equal(now, started) {
		return
	}
	what := ""
	if nc, err := config.Load(s.cfg.Path); err == nil && nc.Service.MCPListen != s.cfg.Service.MCPListen {
		what = fmt.Sprintf(" (service.mcp_listen %q is still %q)", nc.Service.MCPListen, s.cfg.Service.MCPListen)
	}
	s.log.Printf("%s changed since the service started%s: a reload does not read it; restart the service to apply it", s.cfg.Path, what)
}

// chgrp gives the socket at path the group named g.
func chgrp(path, g string) error {
	gr, err := user.LookupGroup(g)
	if err != nil {
		return err
	}
	gid, err := strconv.Atoi(gr.Gid)
	if err != nil {
		return err
	}
	return os.Lchown(path, -1, gid)
}

// proxyAndCAVariables are the environment variables through which Go's
// HTTP and TLS stacks would take a proxy or trusted CAs.
var proxyAndCAVariables = []string{
	"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy",
	"SSL_CERT_FILE", "SSL_CERT_DIR",
}

// mcpBackend is the backend of MCP over HTTP acting for principal: the
// CLI's code paths with a Factory the service builds (no client: no files,
// no working directory but an operation's declared cwd, no environment),
// signing with the principal's key from the service's mcp_keys directory
// when it has one there.
func (s *serviceState) mcpBackend(base *Factory, principal string) (mcpapi.Backend, error) {
	pr, ok := s.current().policy.ByID(principal)
	if !ok {
		return nil, fmt.Errorf("token principal %q is not in the trust policy", principal)
	}
	sc := &serviceCall{svc: s, files: map[string]*os.File{}, hosted: true}
	if dir := s.cfg.Service.MCPKeys; dir != "" {
		kf, err := os.Open(filepath.Join(dir, principal+".key"))
		switch {
		case err == nil:
			k, err := keys.LoadFile(kf, kf.Name())
			if err != nil {
				kf.Close()
				return nil, err
			}
			if kp, ok := s.current().policy.ByKey(k.Public().ID()); !ok || kp.ID != principal {
				kf.Close()
				return nil, fmt.Errorf("%s is not %s's key", kf.Name(), principal)
			}
			sc.key = kf
		case !errors.Is(err, os.ErrNotExist):
			return nil, err
		}
	}
	f := &Factory{
		IO: &IOStreams{Out: io.Discard, Err: io.Discard}, Now: base.Now, JSON: true, AWS: base.AWS, Net: base.Net, call: sc,
		Getwd:     sc.getwd,
		LookupEnv: func(string) (string, bool) { return "", false },
	}
	return &hostedBackend{mcpBackend: newMCPBackend(f), pr: pr, sc: sc}, nil
}

// hostedBackend acts for a token's principal, with or without its key.
type hostedBackend struct {
	*mcpBackend
	pr *approval.Principal
	// sc is shared by the principal's calls; one that supplies files
	// inline has a copy of its own (forCall).
	sc *serviceCall
}

func (h *hostedBackend) Principal() (*approval.Principal, error) { return h.pr, nil }

// Plan plans with each file's content supplied inline: a hosted caller
// shares no file system with the service, and names no path on its disk
// (docs/adr/0039-inline-files-over-mcp-http.md).
func (h *hostedBackend) Plan(req mcpapi.PlanRequest) (*api.PlanResult, error) {
	if len(req.Files) > 0 {
		return nil, refusal.New(refusal.ParamInvalid, "MCP over HTTP takes a file's content inline, never a path on the runner service's disk").For(req.Operation, "").Needs("each file as {\"content\": …}")
	}
	reg, err := h.Registry()
	if err != nil {
		return nil, err
	}
	op, ok := reg.Get(req.Operation)
	if !ok {
		return nil, refusal.New(refusal.OperationAbsent, "no operation named %q is in the registry", req.Operation).For(req.Operation, "")
	}
	b, done, err := h.forCall(op.Name, slices.Collect(maps.Keys(op.Files)), req.Inline)
	if err != nil {
		return nil, err
	}
	defer done()
	files := map[string]string{}
	for name := range req.Inline {
		files[name] = operations.InlinePath(name)
	}
	return localAPI{f: b.f}.Plan(context.Background(), api.PlanRequest{Operation: req.Operation, Target: req.Target, Params: req.Params, Files: files})
}

// Run runs with the content of each file the plan binds as supplied
// inline, supplied again: the plan kept none of it.
func (h *hostedBackend) Run(fp string, inline map[string][]byte) (*mcpapi.RunResult, error) {
	if len(inline) == 0 {
		return h.mcpBackend.Run(fp, nil)
	}
	var declared []string
	plan, err := h.storedPlan(fp)
	if err != nil {
		return nil, err
	}
	for _, fl := range plan.Files {
		if _, ok := operations.InlineName(fl.Path); ok {
			declared = append(declared, fl.Name)
		}
	}
	b, done, err := h.forCall(plan.Operation, declared, inline)
	if err != nil {
		return nil, err
	}
	defer done()
	return b.Run(fp, nil)
}

// storedPlan is the plan stored under fp, verified.
func (h *hostedBackend) storedPlan(fp string) (*operations.Plan, error) {
	return h.mcpBackend.f.storedPlan(fp)
}

// storedPlan is the plan stored under fp (or a prefix of it), verified by
// f's policy, read without asking the caller anything.
func (f *Factory) storedPlan(fp string) (*operations.Plan, error) {
	c, err := f.Config()
	if err != nil {
		return nil, err
	}
	p, err := f.Policy(c)
	if err != nil {
		return nil, err
	}
	st, err := f.Store(c)
	if err != nil {
		return nil, err
	}
	if fp, err = f.resolveFingerprint(c, fp); err != nil {
		return nil, err
	}
	return plans.StoredPlan(st, p, fp)
}

// forCall returns a backend for one call whose files, supplied inline,
// are each a sealed memfd of this call alone, and done, which frees them.
// What a hosted caller supplies is attacker input to a privileged
// process: a name that is not one of names (the operation's files, or
// the plan's inline ones) is refused, and so is content over
// mcpapi.MaxInlineFile or, in all, mcpapi.MaxInlineTotal, before any of
// it is copied; nothing of it is written to disk, and no error quotes it.
func (h *hostedBackend) forCall(operation string, names []string, inline map[string][]byte) (*mcpBackend, func(), error) {
	total := 0
	for _, name := range slices.Sorted(maps.Keys(inline)) {
		if !slices.Contains(names, name) {
			return nil, nil, refusal.New(refusal.ParamInvalid, "operation %s declares no file %q supplied inline", operation, name).For(operation, "")
		}
		n := len(inline[name])
		total += n
		if n > mcpapi.MaxInlineFile {
			return nil, nil, refusal.New(refusal.ParamInvalid, "file %s: %d bytes supplied inline, over MCP HTTP's bound of %d", name, n, mcpapi.MaxInlineFile).For(operation, "")
		}
		if total > mcpapi.MaxInlineTotal {
			return nil, nil, refusal.New(refusal.ParamInvalid, "files supplied inline: over MCP HTTP's bound of %d bytes in all", mcpapi.MaxInlineTotal).For(operation, "")
		}
	}
	sc := *h.sc
	sc.inline = map[string]*os.File{}
	done := func() {
		for _, fl := range sc.inline {
			fl.Close()
		}
	}
	for name, content := range inline {
		fl, err := execute.SealedBytes(name, content)
		if err != nil {
			done()
			return nil, nil, err
		}
		sc.inline[name] = fl
	}
	g := *h.mcpBackend.f
	g.call, g.Getwd = &sc, sc.getwd
	return &mcpBackend{f: &g}, done, nil
}

// serviceHandler runs each call as the command it names, with a Factory
// built from the call alone.
type serviceHandler struct {
	st   *serviceState
	base *Factory
}

// serviceCall is one client's call as the commands see it.
type serviceCall struct {
	c       *service.Call
	svc     *serviceState
	key     *os.File
	cwd     *os.File
	cwdPath string
	cwdErr  error               // why the directory handed over stands for no path
	files   map[string]*os.File // handed over or fetched, by parameter name
	// stop is closed once the service stops (service.Handler): a wait
	// ends then, and stopped says that it did, for the log.
	stop    <-chan struct{}
	stopped bool
	// finishOutput ends the relay of a program's output (nil: no
	// client to relay to).
	finishOutput func() int64
	// hosted is a call of MCP over HTTP: no client, no directory but
	// [service] mcp_cwd.
	hosted bool
	// mayRead memoizes mayReadPlans.
	mayRead *bool
	// inline are the files a hosted call supplied inline, by name: sealed
	// memfds of that call alone (hostedBackend.forCall).
	inline map[string]*os.File
}

// relayGrace is how long a run's outcome receipt waits, at most, for a
// client to take the output still buffered for it.
const relayGrace = time.Second

// file returns the descriptor of file parameter name: the one handed over
// with the request, or else one the client opens now for path.
func (sc *serviceCall) file(name, path string) (*os.File, error) {
	if bound, ok := operations.InlineName(path); ok {
		return sc.inlineFile(name, bound)
	}
	if fl, ok := sc.files[name]; ok {
		// Handed over with the request: the caller named it.
		if sc.c != nil {
			if err := sameObject(fl, path); err != nil {
				return nil, err
			}
		}
		return fl, nil
	}
	if sc.c != nil && !sc.mayReadPlans() {
		// The question would name the path a stored plan binds.
		return nil, refusal.New(refusal.PrincipalUnknown, "file %s of the plan is its caller's to hand over, and a caller with no key of the trust policy is asked for none (nor told its path)", name).Needs("--key FILE or PROD_WRITE_KEY: a key of a principal of trust.toml")
	}
	if sc.c == nil {
		return nil, &operations.InputError{Err: fmt.Errorf("file %s of this plan is a path its planner handed over, and MCP over HTTP has no client to hand it over (it takes files inline only)", name)}
	}
	fl, err := sc.c.File(path)
	if err != nil {
		return nil, &operations.InputError{Err: fmt.Errorf("file %s: %w", name, err)}
	}
	sc.files[name] = fl
	if err := sameObject(fl, path); err != nil {
		return nil, err
	}
	return fl, nil
}

// inlineFile is file parameter name, bound as supplied inline under the
// name bound: the content this call supplied, never a file of the
// service's. A plan stores none of it (docs/adr/0039-inline-files-over-mcp-http.md).
func (sc *serviceCall) inlineFile(name, bound string) (*os.File, error) {
	if bound != name {
		return nil, &operations.InputError{Err: fmt.Errorf("file %s is bound as the inline content of another file", name)}
	}
	if fl, ok := sc.inline[name]; ok {
		return fl, nil
	}
	// Refusals, so that status still shows the plan and its evidence to
	// whoever judges it.
	if sc.hosted {
		return nil, refusal.New(refusal.ParamInvalid, "file %s was supplied inline when planned, and no plan keeps its content: supply the same content again", name).Needs("file " + name + ": the same content, supplied inline to run (files." + name + ")")
	}
	return nil, refusal.New(refusal.ParamInvalid, "file %s was supplied inline over MCP HTTP: only a call there that supplies the same content can run this plan", name).Needs("file " + name + ": the same content, supplied inline to run over MCP HTTP")
}

// sameObject refuses a descriptor handed over for path that is not the
// object path names in the service's own namespace: the plan, its
// approval and the receipt would name a path the program never read
// (docs/adr/0036-the-service-never-waits-on-a-caller.md).
func sameObject(fl *os.File, path string) error {
	if err := service.SameObject(fl, path); err != nil {
		return refusal.New(refusal.FingerprintMismatch, "the descriptor handed over does not stand for %s: %v", path, err).Needs("a path the runner service resolves to the same object as the caller (no bind mount or link of the caller's own over it)")
	}
	return nil
}

func (sc *serviceCall) close() {
	for n, fl := range sc.files {
		if _, handed := sc.c.Files["file:"+n]; !handed {
			fl.Close()
		}
	}
}

// credential is the account the program runs as: the operation's run_as,
// never the caller's, never the service's own, never root unless the
// configuration allows it (docs/adr/0011-runner-service.md).
func (sc *serviceCall) credential(pc *runner.PlanContext) (*syscall.Credential, error) {
	name := pc.Op.RunAs
	refuse := func(format string, args ...any) error {
		return pc.Refuse(refusal.RunAsRefused, format, args...).Needs("a run_as account in the operation (docs/DEPLOYMENT.md)")
	}
	if name == "" {
		return nil, refuse("operation %s declares no run_as: the service runs programs only as an operation's own account", pc.Op.Name)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, refuse("run_as account %q of operation %s: %v", name, pc.Op.Name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, refuse("run_as account %q has no numeric ids", name)
	}
	shared := sc.svc.cfg.Service.AllowSharedAccount
	peer := ^uint32(0) // MCP over HTTP: no account calls
	if sc.c != nil {
		peer = sc.c.Peer.UID
	}
	switch {
	case uid == 0 && !sc.svc.cfg.Service.AllowRoot:
		return nil, refuse("run_as is root, and [service] allow_root is not set")
	case uint32(uid) == peer && !shared:
		return nil, refuse("run_as account %q is the caller's own: the program would hold no privilege the caller lacks", name)
	case uint32(uid) == sc.svc.uid && !shared:
		return nil, refuse("run_as account %q is the service's own: the program could rewrite the journal and read the runner key", name)
	}
	if uint32(uid) == sc.svc.uid && uint32(gid) == uint32(os.Getgid()) && sc.svc.uid != 0 {
		// Allowed as the service's own account: nothing to change, and an
		// unprivileged service could not call setgroups anyway.
		return nil, nil
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, refuse("groups of run_as account %q: %v", name, err)
	}
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			cred.Groups = append(cred.Groups, uint32(n))
		}
	}
	if err := sc.canEnter(pc, cred); err != nil {
		return nil, refuse("run_as account %q cannot enter the working directory: %v", name, err)
	}
	return cred, nil
}

// canEnter checks, before anything is consumed, that the program's account
// may enter its working directory: otherwise the fork fails after the
// approval is spent. The check reads the mode bits (an ACL that denies
// more is still caught at fork, with the approval spent).
func (sc *serviceCall) canEnter(pc *runner.PlanContext, cred *syscall.Credential) error {
	var st unix.Stat_t
	var err error
	switch {
	case pc.Op.Cwd != "" || sc.hosted: // declared, or [service] mcp_cwd
		err = unix.Stat(pc.Plan.Cwd, &st)
	case sc.cwd != nil:
		err = unix.Fstat(int(sc.cwd.Fd()), &st)
	default:
		return errors.New("none was handed over")
	}
	if err != nil {
		return err
	}
	if cred.Uid == 0 {
		return nil
	}
	mode := st.Mode & 0o777
	var bit uint32
	switch {
	case st.Uid == cred.Uid:
		bit = mode & 0o100
	case st.Gid == cred.Gid || slices.Contains(cred.Groups, st.Gid):
		bit = mode & 0o010
	default:
		bit = mode & 0o001
	}
	if bit == 0 {
		return fmt.Errorf("mode %04o, owner uid %d, group %d", mode, st.Uid, st.Gid)
	}
	return nil
}

// prepare sets what the service decides of an execution: the capless fork
// and, when the operation declares no cwd, the directory the caller handed
// over, entered through its descriptor (so a symlink swapped after the
// check changes nothing).
func (sc *serviceCall) prepare(spec *execute.Spec, pc *runner.PlanContext) {
	spec.Start = sc.svc.starter.Start
	if pc.Op.Cwd == "" && sc.cwd != nil {
		// The child enters it before execve, while the descriptor, open
		// in the service, is still open in the child: /proc/self/fd/N is
		// the directory itself, whatever its path now names.
		spec.Dir = "/proc/self/fd/" + strconv.Itoa(int(sc.cwd.Fd()))
	}
}

// cwdPath is the kernel's name for a directory descriptor: absolute, with
// symlinks resolved. A directory removed since is refused.
func cwdPath(d *os.File) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", errors.New("the working directory handed over is not a directory")
	}
	if st.Nlink == 0 {
		return "", errors.New("the working directory handed over has been removed")
	}
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(d.Fd())))
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("the working directory handed over has no path here (%q)", p)
	}
	// The kernel's name is the path in the caller's namespace: it counts
	// only if ours resolves it to the same directory.
	if err := sameObject(d, p); err != nil {
		return "", err
	}
	return p, nil
}

// getwd is the caller's working directory, as the plan binds it.
func (sc *serviceCall) getwd() (string, error) {
	if sc.hosted {
		// MCP over HTTP: no client, no directory but the configured one.
		return sc.svc.cfg.Service.MCPCwd, nil
	}
	if sc.cwdErr != nil {
		if _, ok := refusal.As(sc.cwdErr); ok {
			return "", sc.cwdErr
		}
		return "", &usageError{msg: sc.cwdErr.Error()}
	}
	return sc.cwdPath, nil
}

// Slots of the service's pools (docs/adr/0036-the-service-never-waits-on-a-caller.md).
const (
	// principalCalls is each principal's own pool, and root's: no other
	// caller can take them.
	principalCalls = 64
	// keylessCalls is the pool every caller without a key of the policy
	// shares, keylessPerAccount its share for one account.
	keylessCalls      = 4
	keylessPerAccount = 2
)

// pools names the slots a call draws on: its principal's own when it
// handed over a key of the policy, root's and the service's own accounts'
// own, and otherwise a share of the small keyless pool. The key is read
// (a regular file of at most 4 KiB, by pread) only to know whose pool.
func (s *serviceState) pools(c *service.Call) []service.Pool {
	if pr := s.principalOf(c.Files["key"]); pr != nil {
		return []service.Pool{{Name: "principal:" + pr.ID, Size: principalCalls}}
	}
	uid := strconv.FormatUint(uint64(c.Peer.UID), 10)
	if c.Peer.UID == 0 || c.Peer.UID == s.uid {
		return []service.Pool{{Name: "uid:" + uid, Size: principalCalls}}
	}
	return []service.Pool{{Name: "keyless", Size: keylessCalls}, {Name: "keyless:uid:" + uid, Size: keylessPerAccount}}
}

// principalOf is the principal of the policy whose key kf holds, or nil.
func (s *serviceState) principalOf(kf *os.File) *approval.Principal {
	if kf == nil {
		return nil
	}
	k, err := keys.LoadFile(kf, "the key handed over")
	if err != nil {
		return nil
	}
	pr, ok := s.current().policy.ByKey(k.Public().ID())
	if !ok {
		return nil
	}
	return pr
}

// mayReadPlans reports whether the caller may read what plans bind: it
// handed over a key of the policy, or it is root or the service's own
// account, which can read the store's files anyway.
func (sc *serviceCall) mayReadPlans() bool {
	if sc.mayRead == nil {
		p := sc.c.Peer.UID
		ok := p == 0 || p == sc.svc.uid || sc.svc.principalOf(sc.key) != nil
		sc.mayRead = &ok
	}
	return *sc.mayRead
}

// isOperator reports whether the caller runs the service: root or the
// service's own account.
func (sc *serviceCall) isOperator() bool {
	p := sc.c.Peer.UID
	return p == 0 || p == sc.svc.uid
}

// isOperator reports whether f's caller is the service's operator: in
// this process (local mode: whoever can write the state directory, or
// the service's own calls), or a service call's caller that is
// (serviceCall.isOperator). MCP over HTTP's callers are principals, not
// operators.
func (f *Factory) isOperator() bool {
	if f.call == nil {
		return true
	}
	return f.call.c != nil && f.call.isOperator()
}

// mayReadPlans reports whether f's caller may read what plans bind: in
// this process (local mode, or the service's own calls and MCP over
// HTTP's, whose callers are principals), or a service call's caller that
// may (serviceCall.mayReadPlans).
func (f *Factory) mayReadPlans() bool {
	return f.call == nil || f.call.c == nil || f.call.mayReadPlans()
}

// Serve implements service.Handler.
func (h *serviceHandler) Serve(ctx context.Context, c *service.Call) int {
	sc := &serviceCall{c: c, svc: h.st, key: c.Files["key"], cwd: c.Files["cwd"], files: map[string]*os.File{}, stop: ctx.Done()}
	defer sc.close()
	for n, fl := range c.Files {
		if name, ok := strings.CutPrefix(n, "file:"); ok {
			sc.files[name] = fl
		}
	}
	f := &Factory{
		IO:    &IOStreams{Out: io.Discard, Err: io.Discard},
		Now:   h.base.Now,
		JSON:  c.Request.JSON,
		AWS:   h.base.AWS,
		Net:   h.base.Net,
		call:  sc,
		Getwd: sc.getwd,
		// The service reads no environment for a call: not the caller's
		// (it has none here) and not its own, so a bridge token or a
		// secret can only come from the service's files.
		LookupEnv: func(string) (string, bool) { return "", false },
	}
	if fl := c.Files["stdin"]; fl != nil {
		// Handed to a program that runs, as it is; never read here.
		f.IO.In = fl
	}
	// What the caller is to see goes back over the call's own socket,
	// never onto a descriptor the caller handed over
	// (docs/adr/0036-the-service-never-waits-on-a-caller.md). A program's
	// output is relayed through a bounded buffer the program never waits
	// on; a command's result is sent with a deadline.
	f.IO.ErrTTY = c.Request.ErrTTY
	if c.Request.Op == "run" {
		relay := c.Relay()
		defer relay.Finish(relayGrace)
		f.IO.Out, f.IO.Err = relay.Writer(1), relay.Writer(2)
		sc.finishOutput = func() int64 { return relay.Finish(relayGrace) }
	} else {
		f.IO.Out, f.IO.Err = c.Output(1), c.Output(2)
	}
	start := time.Now()
	if sc.cwd != nil {
		// A directory that does not stand for its path is refused only
		// by the calls that bind it (Getwd, CallerCwd): status from
		// there is still answered.
		sc.cwdPath, sc.cwdErr = cwdPath(sc.cwd)
	}
	var err error
	var code int
	// A typed call: its outcome is the reply, nothing is printed (err
	// is a call that could not be answered at all).
	code, err = h.serveAPI(f, sc)
	if err != nil {
		printError(f, err)
	}
	gone := ""
	select {
	case <-c.Gone():
		gone = "; the client went away"
	default:
		if sc.stopped {
			gone = "; the service is stopping"
		}
	}
	h.st.log.Printf("uid %d pid %d: %s: exit %d (%s%s)", c.Peer.UID, c.Peer.PID, c.Request.Op, code, time.Since(start).Round(time.Microsecond), gone)
	return code
}
