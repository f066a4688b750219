package receipts

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
)

// DefaultRollout is how long a replaced version of the trust policy or an
// operation definition still counts after its replacement landed: the
// time hosts take to load the new one.
const DefaultRollout = time.Hour

// BranchTree is what one commit of a protected branch holds
// (gitbranch.Commit): paths are slash-separated, relative to the
// repository's root.
type BranchTree interface {
	// ID is the object id at p ("" when there is nothing): equal ids
	// hold equal content.
	ID(p string) string
	ReadFile(p string) ([]byte, error)
	// ReadDir lists the regular files directly in the directory p.
	ReadDir(p string) ([]string, error)
}

// BranchCommit is one commit of a protected branch's first-parent chain.
type BranchCommit struct {
	Hash string
	// When it landed, as far as the branch can say: its committer time,
	// never before an earlier commit's.
	When time.Time
	Tree BranchTree
}

// Branch is a protected branch's first-parent history (oldest first) and
// where the trust policy and registry are in it.
type Branch struct {
	// Where names the branch for messages ("the first-parent history of
	// HEAD (…) in /repo").
	Where   string
	Commits []BranchCommit
	// Trust is the trust policy's path and Registry the registry's
	// directory, relative to the repository's root.
	Trust, Registry string
	// Rollout is how long a replaced version still counts after the
	// commit that replaced it.
	Rollout time.Duration
}

// BranchHistory is the history replay judges by when the trust policy and
// registry live in a git work tree (docs/adr/0059-the-protected-branch-is-the-history.md):
// every version on the branch's first-parent chain, each in force from
// the first commit that holds it until the commit that replaced it plus
// the rollout. current and defs are the work tree's, which must be the
// chain's newest: a history judged by a policy the branch does not hold
// would be no history of the branch.
func BranchHistory(b Branch, current *approval.Policy, defs []*operations.Operation) (*History, error) {
	h := &History{
		Policies:        map[string]*approval.Policy{current.Digest: current},
		Definitions:     map[string]bool{},
		PolicyTimes:     map[string][]Version{},
		DefinitionTimes: map[string][]Version{},
		Where:           b.Where,
		fromFiles:       map[string]bool{},
		skipped:         map[string]string{},
	}
	var (
		trustID, regID string
		trust          string                // the digest in force
		ops            = map[string]string{} // operation name → digest in force
		parsed         = map[string][]*operations.Operation{}
	)
	open := func(times map[string][]Version, name, digest string, at time.Time) {
		times[digest] = append(times[digest], Version{Name: name, Digest: digest, Since: at})
	}
	closeAt := func(times map[string][]Version, digest string, at time.Time) {
		ivs := times[digest]
		ivs[len(ivs)-1].Until = at.Add(b.Rollout)
	}
	for _, c := range b.Commits {
		if id := c.Tree.ID(b.Trust); id != trustID {
			trustID = id
			if p, digest := branchPolicy(h, b, c); p != nil && digest != trust {
				if trust != "" {
					closeAt(h.PolicyTimes, trust, c.When)
				}
				if _, ok := h.Policies[digest]; !ok {
					h.Policies[digest] = p
				}
				open(h.PolicyTimes, "", digest, c.When)
				trust = digest
			}
		}
		if id := c.Tree.ID(b.Registry); id != regID {
			regID = id
			now, ok := branchRegistry(h, b, c, parsed)
			if !ok {
				continue // a registry no host could load: the one before stays
			}
			for name, digest := range ops {
				if now[name] != digest {
					closeAt(h.DefinitionTimes, digest, c.When)
					delete(ops, name)
				}
			}
			for name, digest := range now {
				if _, ok := ops[name]; !ok {
					h.Definitions[digest] = true
					open(h.DefinitionTimes, name, digest, c.When)
					ops[name] = digest
				}
			}
		}
	}
	head := "the branch holds none"
	if len(b.Commits) > 0 {
		head = "HEAD is " + b.Commits[len(b.Commits)-1].Hash
	}
	if trust != current.Digest {
		return nil, &BranchError{Msg: fmt.Sprintf("%s differs from the trust policy of %s: replay judges by the committed history, so commit the change (or replay a checkout of the protected branch as it is)", b.Trust, b.Where)}
	}
	want := map[string]string{}
	for _, op := range defs {
		want[op.Name] = op.Digest
	}
	if !maps.Equal(ops, want) {
		return nil, &BranchError{Msg: fmt.Sprintf("the registry %s differs from the one of %s (%s): replay judges by the committed history, so commit the change (or replay a checkout of the protected branch as it is)", b.Registry, b.Where, head)}
	}
	return h, nil
}

// BranchError is a work tree replay cannot judge by its branch's history.
type BranchError struct{ Msg string }

func (e *BranchError) Error() string { return e.Msg }

// branchPolicy reads and parses the trust policy commit c holds, with the
// freeze calendars it names as c holds them. A policy that is absent or
// does not parse is no version: no host could have loaded it, so the one
// before stays in force; why is kept for the message of a receipt that
// names it anyway.
func branchPolicy(h *History, b Branch, c BranchCommit) (*approval.Policy, string) {
	data, err := c.Tree.ReadFile(b.Trust)
	if err != nil {
		return nil, ""
	}
	sum := sha256.Sum256(data)
	digest := "sha256:" + hex.EncodeToString(sum[:])
	if p := h.Policies[digest]; p != nil {
		return p, digest
	}
	dir := path.Dir(b.Trust)
	name := fmt.Sprintf("%s at commit %.12s", b.Trust, c.Hash)
	p, err := approval.ParsePolicyWith(name, data, func(file, _ string) ([]byte, error) {
		if path.IsAbs(file) {
			return nil, fmt.Errorf("freeze calendar %s: an absolute path is outside the branch", file)
		}
		return c.Tree.ReadFile(path.Join(dir, file))
	})
	if err != nil {
		h.skipped[digest] = err.Error()
		return nil, ""
	}
	return p, digest
}

// branchRegistry is the operation definitions commit c's registry holds,
// by name (none when it holds no registry directory). ok is false for a
// registry that does not load, which no host could have served. parsed caches each operation file by its object id.
func branchRegistry(h *History, b Branch, c BranchCommit, parsed map[string][]*operations.Operation) (map[string]string, bool) {
	if c.Tree.ID(b.Registry) == "" {
		// No directory: git keeps none empty, so the commit removed the
		// last operation (or added none yet).
		return map[string]string{}, true
	}
	names, err := c.Tree.ReadDir(b.Registry)
	if err != nil {
		return nil, false
	}
	sort.Strings(names)
	out := map[string]string{}
	for _, n := range names {
		if !strings.HasSuffix(n, ".toml") {
			continue
		}
		p := path.Join(b.Registry, n)
		id := c.Tree.ID(p)
		ops, ok := parsed[id]
		if !ok {
			data, err := c.Tree.ReadFile(p)
			if err == nil {
				ops, err = operations.Parse(fmt.Sprintf("%s at commit %.12s", p, c.Hash), data)
			}
			if err != nil {
				return nil, false
			}
			parsed[id] = ops
		}
		for _, op := range ops {
			if _, dup := out[op.Name]; dup {
				return nil, false
			}
			out[op.Name] = op.Digest
		}
	}
	return out, true
}
