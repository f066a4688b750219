package localapi

import (
	"fmt"
	"strings"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
)

// planContext is the plan context of the domain package (pkg/runner),
// with the methods of the commands that add evidence to it.
type planContext struct {
	*runner.PlanContext
}

// loadPlan loads the plan stored under fp, as f's caller sees it.
func loadPlan(f *Env, fp string) (*planContext, error) {
	pc, err := f.Runner().Load(fp)
	if err != nil {
		return nil, err
	}
	return &planContext{pc}, nil
}

// MinFingerprintPrefix is how many hex digits a fingerprint prefix needs,
// as git's abbreviated object names.
const MinFingerprintPrefix = 12

// ResolveFingerprint takes a whole fingerprint, or a unique prefix of one
// (at least 12 hex digits, with or without "sha256:") of a stored plan.
func (f *Env) ResolveFingerprint(c *config.Config, fp string) (string, error) {
	if store.CheckFingerprint(fp) == nil {
		return fp, nil
	}
	h := strings.TrimPrefix(fp, "sha256:")
	if len(h) < MinFingerprintPrefix || len(h) >= 64 || strings.Trim(h, "0123456789abcdef") != "" {
		return "", &UsageError{Msg: fmt.Sprintf("%q is not a fingerprint: want sha256: and 64 hex digits, or a unique prefix of at least %d", fp, MinFingerprintPrefix)}
	}
	st, err := f.Store(c)
	if err != nil {
		return "", err
	}
	lister, ok := st.(interface {
		PlansWithPrefix(string) ([]string, error)
	})
	if !ok {
		return "", &UsageError{Msg: fmt.Sprintf("%q: this store looks up whole fingerprints only; give all 64 hex digits", fp)}
	}
	found, err := lister.PlansWithPrefix(h)
	if err != nil {
		return "", fmt.Errorf("looking up the fingerprint prefix %s: %w", fp, err)
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", refusal.New(refusal.PlanAbsent, "no stored plan's fingerprint starts with %s", h).Needs("a signed plan (prod-write plan --key …)")
	}
	return "", &UsageError{Msg: fmt.Sprintf("the prefix %s is ambiguous: %d stored plans start with it", h, len(found))}
}

// actor loads the acting key for a command that acts on pc's plan in role,
// refusing anyone acting on a plan they planned, except to veto it
// (runner.PlanContext.Acts).
func (pc *planContext) actor(f *Env, role string, veto bool) (*keys.Private, *approval.Principal, error) {
	k, pr, err := f.Actor(pc.Policy, role)
	if err != nil {
		if r, ok := refusal.As(err); ok {
			r.For(pc.Plan.Operation, pc.Plan.Fingerprint)
		}
		return nil, nil, err
	}
	if err := pc.Acts(pr, role, veto); err != nil {
		return nil, nil, err
	}
	return k, pr, nil
}
