package localapi

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/gitbranch"
	"github.com/prod-write/prod-write/receipts"
)

// RegistryBeside is the registry that goes with the trust policy at trust
// when no registry is named: the one a prod-write.toml beside it names,
// else operations/ beside it, else "" (the configured one). So `replay
// --trust trusted/trust.toml` of a checkout of the protected branch needs
// nothing else. In a git work tree operations/ beside it is the registry
// even when it is not there: git keeps no empty directory, so a branch
// whose last operation was removed holds none (ReadRegistryBeside).
func RegistryBeside(trust string) string {
	dir := filepath.Dir(trust)
	if c, err := config.Load(filepath.Join(dir, config.FileName)); err == nil && c.Registry != "" {
		return c.Registry
	}
	ops := filepath.Join(dir, "operations")
	if fi, err := os.Stat(ops); err == nil && fi.IsDir() {
		return ops
	}
	if repo, err := gitbranch.Find(trust); err == nil && repo != nil {
		return ops
	}
	return ""
}

// readRegistry is ReadDefinitions of registry, where a registry beside a
// trust policy in a git work tree that is not there is empty: the branch
// removed its last operation.
func readRegistry(registry, trust string, beside bool) ([]*operations.Operation, error) {
	defs, err := ReadDefinitions(registry)
	if err != nil && beside && errors.Is(err, fs.ErrNotExist) {
		if repo, ferr := gitbranch.Find(trust); ferr == nil && repo != nil {
			return nil, nil
		}
	}
	return defs, err
}

// LoadReplayHistory is what replay judges the trust policy at trust and
// the registry at registry by (docs/REPLAY.md, "History";
// docs/adr/0059-the-protected-branch-is-the-history.md), in this order:
//
//   - dir, when named (--history);
//   - history/ beside the trust policy, when it has a versions.toml:
//     kept by `prod-write history record`;
//   - the first-parent history of the git work tree that tracks the
//     trust policy: each version in force from the first commit that
//     holds it until the commit that replaced it plus rollout;
//   - else history/ beside the trust policy (or nothing but the current
//     versions, when there is none).
func LoadReplayHistory(trust, registry, dir string, rollout time.Duration, policy *approval.Policy, defs []*operations.Operation) (*receipts.History, error) {
	if rollout < 0 {
		return nil, &UsageError{Msg: "--rollout must not be negative"}
	}
	if rollout == 0 {
		rollout = receipts.DefaultRollout
	}
	if dir != "" {
		return receipts.LoadHistory(dir, policy, defs)
	}
	dir = filepath.Join(filepath.Dir(trust), "history")
	if _, err := os.Stat(filepath.Join(dir, receipts.VersionsFile)); err == nil {
		return receipts.LoadHistory(dir, policy, defs)
	}
	h, err := branchHistory(trust, registry, rollout, policy, defs)
	if h != nil || err != nil {
		return h, err
	}
	return receipts.LoadHistory(dir, policy, defs)
}

// branchHistory is the history of the git branch checked out where the
// trust policy is, or nil when the trust policy is in no git work tree
// or is not tracked at its HEAD.
func branchHistory(trust, registry string, rollout time.Duration, policy *approval.Policy, defs []*operations.Operation) (*receipts.History, error) {
	repo, err := gitbranch.Find(trust)
	if err != nil || repo == nil {
		return nil, err
	}
	trustRel, err := repo.Rel(trust)
	if err != nil {
		return nil, nil
	}
	tracked, err := repo.Tracks(trustRel)
	if err != nil || !tracked {
		return nil, err
	}
	regRel, err := repo.Rel(registry)
	if err != nil {
		return nil, &config.Error{Path: registry, Msg: fmt.Sprintf("the registry is outside the git work tree %s that holds the trust policy: replay judges both by that branch's history", repo.Root())}
	}
	commits, err := repo.FirstParents()
	if errors.Is(err, gitbranch.ErrShallow) {
		return nil, &config.Error{Path: repo.Root(), Msg: "a shallow clone: replay judges by the branch's whole first-parent history, which it cuts off; clone with full history (actions/checkout: fetch-depth: 0; git: git fetch --unshallow)"}
	}
	if err != nil {
		return nil, &config.Error{Path: repo.Root(), Msg: "reading the branch's history", Err: err}
	}
	b := receipts.Branch{Trust: trustRel, Registry: regRel, Rollout: rollout, Commits: make([]receipts.BranchCommit, len(commits))}
	for i, c := range commits {
		b.Commits[i] = receipts.BranchCommit{Hash: c.Hash, When: c.When, Tree: c}
	}
	head := "none"
	if n := len(commits); n > 0 {
		head = commits[n-1].Hash[:12]
	}
	b.Where = fmt.Sprintf("the first-parent history of HEAD (%s) in %s", head, repo.Root())
	h, err := receipts.BranchHistory(b, policy, defs)
	var be *receipts.BranchError
	if errors.As(err, &be) {
		return nil, &config.Error{Path: repo.Root(), Msg: be.Msg}
	}
	return h, err
}
