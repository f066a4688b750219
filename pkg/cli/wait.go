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
