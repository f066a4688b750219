package localapi

import (
	"context"
	"github.com/prod-write/prod-write/pkg/api"
	"io"
	"os"
	"strings"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/plans"
	"github.com/prod-write/prod-write/pkg/service"
	"github.com/prod-write/prod-write/pkg/servicecall"
)

// StoredPlan is the plan stored under fp (or a prefix of it), verified by
// f's policy, read without asking the caller anything.
func (f *Env) StoredPlan(fp string) (*operations.Plan, error) {
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
	if fp, err = f.ResolveFingerprint(c, fp); err != nil {
		return nil, err
	}
	return plans.StoredPlan(st, p, fp)
}

// ServiceHandler answers each typed call of the runner service with an Env
// built from the call alone.
type ServiceHandler struct {
	State *servicecall.State
	Base  *Env
}

// RelayGrace is how long a run's outcome receipt waits, at most, for a
// client to take the output still buffered for it.
const RelayGrace = time.Second

// Serve implements service.Handler.
func (h *ServiceHandler) Serve(ctx context.Context, c *service.Call) int {
	sc := &servicecall.Call{Socket: c, State: h.State, Key: c.Files["key"], Cwd: c.Files["cwd"], Files: map[string]*os.File{}, Stop: ctx.Done()}
	defer sc.Close()
	for n, fl := range c.Files {
		if name, ok := strings.CutPrefix(n, "file:"); ok {
			sc.Files[name] = fl
		}
	}
	f := &Env{
		IO:    &Streams{Out: io.Discard, Err: io.Discard},
		Now:   h.Base.Now,
		JSON:  c.Request.JSON,
		AWS:   h.Base.AWS,
		Net:   h.Base.Net,
		Call:  sc,
		Getwd: sc.Getwd,
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
	if c.Request.Op == api.CallRun.Op {
		relay := c.Relay()
		defer relay.Finish(RelayGrace)
		f.IO.Out, f.IO.Err = relay.Writer(1), relay.Writer(2)
		sc.FinishOutput = func() int64 { return relay.Finish(RelayGrace) }
	} else {
		f.IO.Out, f.IO.Err = c.Output(1), c.Output(2)
	}
	start := time.Now()
	if sc.Cwd != nil {
		// A directory that does not stand for its path is refused only
		// by the calls that bind it (Getwd, CallerCwd): status from
		// there is still answered.
		sc.CwdPath, sc.CwdErr = servicecall.CwdPath(sc.Cwd)
	}
	// A typed call: its outcome, or why it could not be made, is the
	// reply; the service prints nothing for a caller.
	code := h.ServeAPI(f, sc)
	gone := ""
	select {
	case <-c.Gone():
		gone = "; the client went away"
	default:
		if sc.Stopped {
			gone = "; the service is stopping"
		}
	}
	h.State.Log.Printf("uid %d pid %d: %s: exit %d (%s%s)", c.Peer.UID, c.Peer.PID, c.Request.Op, code, time.Since(start).Round(time.Microsecond), gone)
	return code
}
