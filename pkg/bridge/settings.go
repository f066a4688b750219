package bridge

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
)

// Defaults of [requests] (docs/CONFIG.md).
const (
	defaultRemindAfter = 30 * time.Minute
	defaultCheckEvery  = 10 * time.Second
)

// RequestSettings reads [requests]: the settings of decision requests,
// and how often bridge serve checks them.
func RequestSettings(c *config.Config) (Settings, time.Duration, error) {
	r := c.Requests
	s := Settings{TTL: DefaultRequestTTL, RemindAfter: defaultRemindAfter, EscalateSlack: r.EscalateSlackChannel, EscalateGitHub: r.EscalateGitHub}
	every := defaultCheckEvery
	if r.EscalateSlackChannel != "" || r.EscalateGitHub != "" {
		s.EscalateAfter = DefaultEscalateAfter
	}
	for _, d := range []struct {
		key, v string
		to     *time.Duration
		min    time.Duration
	}{{"ttl", r.TTL, &s.TTL, time.Second}, {"remind_after", r.RemindAfter, &s.RemindAfter, 0}, {"escalate_after", r.EscalateAfter, &s.EscalateAfter, 0}, {"check_every", r.CheckEvery, &every, 100 * time.Millisecond}} {
		if d.v == "" {
			continue
		}
		v, err := time.ParseDuration(d.v)
		if err != nil || v < d.min || v < 0 {
			return s, 0, &config.Error{Path: c.Path, Msg: fmt.Sprintf("requests.%s %q: want a Go duration of at least %s", d.key, d.v, d.min)}
		}
		*d.to = v
	}
	if r.EscalateGitHub != "" && !operations.ValidGitHubMention(r.EscalateGitHub) {
		return s, 0, &config.Error{Path: c.Path, Msg: fmt.Sprintf("requests.escalate_github %q: want @login or @org/team", r.EscalateGitHub)}
	}
	return s, every, nil
}

// LedgerOf is the ledger of posts under c's state directory.
func LedgerOf(c *config.Config) *Ledger {
	return &Ledger{Dir: filepath.Join(c.State, "bridge", "posts")}
}

// EventsOf is the log of the bridges' events under c's state directory.
func EventsOf(c *config.Config) *Events {
	return &Events{Dir: filepath.Join(c.State, "bridge", "events")}
}
