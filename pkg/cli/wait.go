package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prod-write/prod-write/pkg/api"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/localapi"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// serviceWaitMax bounds one wait inside the runner service, so that a
// waiting client never holds a service slot for long: the client asks
// again.
const serviceWaitMax = 30 * time.Second

// waitTimeout parses --timeout; 0 means none.
func waitTimeout(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, &localapi.UsageError{Msg: fmt.Sprintf("--timeout %q: want a positive Go duration such as 10m", s)}
	}
	return d, nil
}

// statusWait is status --wait: the API's Wait (in-process, or the runner
// service's, whose client asks again each time one of the service's
// bounded waits ends), rendered here, on the caller's side. It says once,
// on stderr, that it waits.
func statusWait(o *StatusOptions) error {
	f := o.F
	timeout, err := waitTimeout(o.Timeout)
	if err != nil {
		return err
	}
	a, err := f.api()
	if err != nil {
		return err
	}
	if la, ok := a.(localapi.API); ok && f.IO.ErrTTY && !f.JSON {
		la.Progress = localapi.ProgressPrinter(f.IO.Err)
		a = la
	}
	said := false
	r, err := a.Wait(context.Background(), api.WaitRequest{Fingerprint: o.Fingerprint, Timeout: timeout, Progress: func(s *api.StatusResult) {
		if !said && s.Request != nil {
			fmt.Fprintf(f.IO.Err, "prod-write: waiting for a decision on %s: %s; missing: %s\n", s.Request.ID, s.Request.Sentence(), strings.Join(s.Request.Missing, "; "))
		}
		said = true
	}})
	if err != nil {
		return err
	}
	if r.Pending {
		if perr := printStatus(f, r.Status); perr != nil {
			var ee *ExitError
			if !errors.As(perr, &ee) && !isRefusal(perr) {
				return perr
			}
		}
		return &ExitError{Code: ExitTimeout, Msg: "--timeout passed with the decision still pending"}
	}
	return printStatus(f, r.Status)
}

// clientContext is done once the client of a call in the service has gone
// (service.Call.Gone) or the service stops; in local mode, and for MCP
// over HTTP, only when cancelled.
func (f *Factory) clientContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	if f.Call == nil || f.Call.Socket == nil {
		return ctx, cancel
	}
	gone, stop := f.Call.Socket.Gone(), f.Call.Stop
	go func() {
		select {
		case <-gone:
			cancel()
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// serviceStopping reports whether the service serving f's call stops.
func (f *Factory) serviceStopping() bool {
	if f.Call == nil || f.Call.Stop == nil {
		return false
	}
	select {
	case <-f.Call.Stop:
		return true
	default:
		return false
	}
}

// clientGone reports whether the client of a call in the service has gone.
func (f *Factory) clientGone() bool {
	if f.Call == nil || f.Call.Socket == nil {
		return false
	}
	select {
	case <-f.Call.Socket.Gone():
		return true
	default:
		return false
	}
}

func isRefusal(err error) bool { _, ok := refusal.As(err); return ok }

// askedWords says where a request was put and to whom, for people.
func askedWords(a bridge.Asked) string {
	who := strings.Join(a.Who, ", ")
	if who == "" {
		who = "nobody holds role " + a.Role
	}
	var where string
	switch a.Channel {
	case bridge.KindSlack:
		where = fmt.Sprintf("slack channel %s, thread %s", a.SlackChannel, a.SlackThread)
	case bridge.KindGitHub:
		where = fmt.Sprintf("github %s#%d", a.GitHubRepo, a.GitHubIssue)
	default:
		where = "cli"
	}
	if a.Escalation {
		where += " (escalation)"
	}
	return fmt.Sprintf("%s: %s (%s)", where, a.What, who)
}
