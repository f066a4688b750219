package cli

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/bridge"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/refusal"
)

// Defaults of [requests] (docs/CONFIG.md).
const (
	defaultRemindAfter = 30 * time.Minute
	defaultEscalate    = bridge.DefaultEscalateAfter
	defaultCheckEvery  = 10 * time.Second
)

// requestSettings reads [requests].
func requestSettings(c *config.Config) (bridge.Settings, time.Duration, error) {
	r := c.Requests
	s := bridge.Settings{TTL: bridge.DefaultRequestTTL, RemindAfter: defaultRemindAfter, EscalateSlack: r.EscalateSlackChannel, EscalateGitHub: r.EscalateGitHub}
	every := defaultCheckEvery
	if r.EscalateSlackChannel != "" || r.EscalateGitHub != "" {
		s.EscalateAfter = defaultEscalate
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

func eventLog(c *config.Config) *bridge.Events {
	return &bridge.Events{Dir: filepath.Join(c.State, "bridge", "events")}
}

// requestOf derives the decision request of a judged plan: nil when the
// plan needs no human. Where it was posted and what the bridges did since
// are read from the state directory; a problem reading them leaves them
// out (they decide nothing).
func (pc *planContext) requestOf(dec *approval.Decision, r *refusal.Error, now time.Time) (*bridge.DecisionRequest, error) {
	s, _, err := requestSettings(pc.Config)
	if err != nil {
		return nil, err
	}
	posts, _ := ledger(pc.Config).Posts(pc.Plan.Fingerprint)
	events, _ := eventLog(pc.Config).List(pc.Plan.Fingerprint)
	j := &bridge.Judgement{Plan: pc.Plan, Op: pc.Op, Decision: dec, Refusal: r, Now: now}
	return j.Request(pc.Policy, posts, events, s), nil
}
