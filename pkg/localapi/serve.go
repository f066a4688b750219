package localapi

import (
	"context"
	"errors"
	"fmt"
	"github.com/prod-write/prod-write/pkg/api"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"syscall"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/decisionlog"
	"github.com/prod-write/prod-write/pkg/execute"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/service"
	"github.com/prod-write/prod-write/pkg/servicecall"
)

// Serve is the runner service (`prod-write serve`): it loads what the
// service alone owns, listens on the configured socket, and serves the API
// there, the bridges and MCP over HTTP beside it, until SIGINT or SIGTERM
// (SIGHUP reloads the policy and registry). ready, if set, is called once
// the socket listens. f must have the network backends (prod-write-net).
func Serve(f *Env, ready func()) error {
	if f.Net == nil {
		return errors.New("the runner service needs the network backends (" + NetBinary + ")")
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
	st := &servicecall.State{Cfg: c, UID: uint32(os.Getuid()), Log: log.New(f.IO.Err, "prod-write serve: ", log.LstdFlags|log.Lmsgprefix)}
	if err := st.Load(); err != nil {
		return err
	}
	if st.Decisions, err = DecisionSinkFor(c, &decisionlog.Stream{W: f.IO.Out}); err != nil {
		return err
	}
	if fl, ok := st.Decisions.(*decisionlog.File); ok {
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
		if st.RemoteSecret, err = f.AWS.SecretSource(c); err != nil {
			return err
		}
	}
	var bridges *BridgeService
	if SlackEnabled(c.Bridge) || GitHubEnabled(c.Bridge) || PageEnabled(c.Bridge) {
		lp := st.Current()
		if bridges, err = NewBridgeService(f, c, lp.Registry, lp.Policy, nil); err != nil {
			return err
		}
	}
	if st.Starter, err = execute.NewCaplessStarter(); err != nil {
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
			st.ConfigChanged(started)
			if err := st.Load(); err != nil {
				st.Log.Printf("reload failed, still judging by the policy loaded before: %v", err)
				continue
			}
			st.Log.Printf("reloaded the trust policy and registry (%s)", st.Current().Registry.Digest)
			if bridges != nil && bridges.Live != nil {
				// The Slack and GitHub bridges judge every click and
				// comment from now on by the new policy: an approver
				// added counts, one removed is refused there, not
				// shown as an approval the gate then refuses.
				lp := st.Current()
				bridges.Live.Set(lp.Policy, lp.Registry)
			}
			if bridges != nil && bridges.Page != nil {
				// The approval page judges sign-ins and decisions by the
				// new policy: a pasted passkey signs in, a removed one
				// no longer does.
				lp := st.Current()
				src := bridges.Page.Source()
				src.Policy, src.Registry, src.Page = lp.Policy, lp.Registry, PageOrigin(c, lp.Policy)
				if err := bridges.Page.Reload(src); err != nil {
					st.Log.Printf("the approval page keeps the policy loaded before: %v", err)
				}
			}
		}
	}()
	st.Log.Printf("listening on %s (uid %d)", c.Service.Socket, st.UID)
	// The witnesses' cadence: never in a run's path (ADR 0044).
	go WitnessLoop(ctx, st)
	if ready != nil {
		ready()
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
	srv := &service.Server{Handler: &ServiceHandler{State: st, Base: f}, Ops: api.Ops(), Log: st.Log, Classify: st.Pools}
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
		backendFor := func(principal string) (mcpapi.Backend, error) {
			return HostedMCPBackend(st, f, principal)
		}
		// Started before the socket accepts: a tokens file that names no
		// principal of the policy stops the service here.
		mcpErr, listening := make(chan error, 1), make(chan struct{})
		go func() {
			mcpErr <- f.Net.ServeMCPHTTP(mcpCtx, c.Service, backendFor, srv, slog, func() { close(listening) })
		}()
		select {
		case err := <-mcpErr:
			if err == nil {
				err = errors.New("it stopped without saying why")
			}
			return &config.Error{Path: c.Path, Msg: "serving MCP over HTTP", Err: err}
		case <-listening:
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
	st.Log.Printf("stopped")
	select {
	case berr := <-errc:
		return errors.Join(err, berr)
	default:
	}
	return err
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
