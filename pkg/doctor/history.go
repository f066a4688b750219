package doctor

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/gitbranch"
	"github.com/prod-write/prod-write/receipts"
)

// history judges the trust policy and registry on disk by the history
// replay will judge their runs by.
func (d *doctor) history() {
	if d.policy == nil || d.reg == nil {
		return // their own findings say why
	}
	d.out = append(d.out, History(d.c, d.policy.Digest, d.reg.All(), "", time.Now())...)
}

// History judges a trust policy (by digest) and operation definitions by
// the history beside the trust policy (history/versions.toml, which
// `prod-write history record` keeps): what is on disk, or, with served
// naming it, what the runner service serves. A version the history does
// not have in force now is a warning: replay will fail every run made
// under it. So is a missing history, unless the trust policy is tracked
// in a git work tree, whose branch replay judges by instead
// (docs/adr/0059-the-protected-branch-is-the-history.md).
func History(c *config.Config, policy string, defs []*operations.Operation, served string, now time.Time) []Finding {
	err := receipts.CheckInForce(c.HistoryDir(), policy, defs, now)
	var nif *receipts.NotInForceError
	record := fmt.Sprintf("prod-write history record --config %s, as the account that edits the policy; then reload the service (docs/DEPLOYMENT.md, \"Changing the policy\")", c.Path)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, receipts.ErrNoHistory):
		if served != "" {
			return nil // said of what is on disk
		}
		if repo, _ := gitbranch.Find(c.Trust); repo != nil {
			if rel, err := repo.Rel(c.Trust); err == nil {
				if ok, _ := repo.Tracks(rel); ok {
					return []Finding{{Severity: Info, Check: "history-git", Path: c.Trust,
						Message: fmt.Sprintf("no %s: replay judges by the first-parent history of the git work tree %s", receipts.VersionsFile, repo.Root()),
						Fix:     "replay in CI against a full-depth checkout of the protected branch the policy is deployed from (docs/CI.md)"}}
				}
			}
		}
		return []Finding{{Severity: Warning, Check: "history-absent", Path: c.HistoryDir(),
			Message: fmt.Sprintf("no %s beside the trust policy: replay knows only the current policy and registry, so after the next change to either it fails every earlier run (unknown_policy, unknown_definition)", receipts.VersionsFile),
			Fix:     "start the history: " + record + "; or keep trust.toml and the registry in git and replay against the protected branch (docs/CI.md)"}}
	case errors.As(err, &nif):
		what := "on disk"
		if served != "" {
			what = "served by " + served
		}
		return []Finding{{Severity: Warning, Check: "history-lacks-version", Path: nif.Path,
			Message: fmt.Sprintf("the history does not have in force now what is %s: %s; replay will fail every run made under it", what, strings.Join(nif.Missing, ", ")),
			Fix:     record}}
	default:
		return []Finding{{Severity: Warning, Check: "history-unreadable", Path: c.HistoryDir(), Message: err.Error(),
			Fix: "fix or restore the history: replay does not start while it does not load"}}
	}
}
