package receipts

import (
	"fmt"
	"io/fs"
	"path"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/keys"
)

// memTree is one commit's files, in memory: trust.toml and operations/.
type memTree map[string]string

func (m memTree) ID(p string) string {
	if p == "operations" {
		var b strings.Builder
		for k, v := range m {
			if strings.HasPrefix(k, "operations/") {
				fmt.Fprintf(&b, "%s=%s;", k, v)
			}
		}
		return b.String()
	}
	if v, ok := m[p]; ok {
		return "blob:" + v
	}
	return ""
}

func (m memTree) ReadFile(p string) ([]byte, error) {
	if v, ok := m[p]; ok {
		return []byte(v), nil
	}
	return nil, fs.ErrNotExist
}

func (m memTree) ReadDir(dir string) ([]string, error) {
	var out []string
	for k := range m {
		if path.Dir(k) == dir {
			out = append(out, path.Base(k))
		}
	}
	return out, nil
}

// TestBranchIntervalsProperty: on any first-parent chain of policy
// versions, at any time at or after the first commit, the version the
// newest commit not after that time holds is in force; a version whose
// last commit was replaced more than the rollout before is superseded at
// that time unless it holds again; a time before the first commit holding
// a version finds it not yet in force.
func TestBranchIntervalsProperty(t *testing.T) {
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("[[principal]]\nid = \"runner\"\nroles = [\"runner\"]\nkey = %q\n", k.Public().String())
	op := "[[operation]]\nname = \"noop\"\nprogram = \"/bin/true\"\ntargets = [\"staging\"]\ndescription = %q\n"
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 12).Draw(rt, "commits")
		rollout := time.Duration(rapid.IntRange(0, 120).Draw(rt, "rollout minutes")) * time.Minute
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		b := Branch{Trust: "trust.toml", Registry: "operations", Rollout: rollout}
		versions := make([]int, n) // the trust version each commit holds
		times := make([]time.Time, n)
		at := start
		for i := range n {
			at = at.Add(time.Duration(rapid.IntRange(0, 180).Draw(rt, "gap minutes")) * time.Minute)
			versions[i] = rapid.IntRange(0, 3).Draw(rt, "version")
			times[i] = at
			tree := memTree{"trust.toml": base + fmt.Sprintf("# v%d\n", versions[i]), "operations/noop.toml": fmt.Sprintf(op, fmt.Sprint(versions[i]%2))}
			b.Commits = append(b.Commits, BranchCommit{Hash: fmt.Sprintf("%040d", i), When: at, Tree: tree})
		}
		last := b.Commits[n-1].Tree.(memTree)
		current, err := approval.ParsePolicy("trust.toml", []byte(last["trust.toml"]))
		if err != nil {
			rt.Fatal(err)
		}
		defs, err := parseOps(last["operations/noop.toml"])
		if err != nil {
			rt.Fatal(err)
		}
		h, err := BranchHistory(b, current, defs)
		if err != nil {
			rt.Fatal(err)
		}
		digestOf := func(v int) string {
			p, err := approval.ParsePolicy("trust.toml", []byte(base+fmt.Sprintf("# v%d\n", v)))
			if err != nil {
				rt.Fatal(err)
			}
			return p.Digest
		}
		probe := start.Add(time.Duration(rapid.IntRange(-60, int(at.Sub(start)/time.Minute)+240).Draw(rt, "probe minutes")) * time.Minute)
		// The commit in force at probe: the newest not after it.
		idx := -1
		for i := range n {
			if !times[i].After(probe) {
				idx = i
			}
		}
		for v := range 4 {
			d := digestOf(v)
			got := inForce(h.PolicyTimes[d], probe)
			held := false
			first := time.Time{}
			for i := range n {
				if versions[i] == v {
					held = true
					if first.IsZero() {
						first = times[i]
					}
				}
			}
			switch {
			case !held:
				if len(h.PolicyTimes[d]) != 0 || h.Policies[d] != nil {
					rt.Fatalf("v%d is on no commit but the history knows it", v)
				}
			case idx >= 0 && versions[idx] == v:
				if got != "" {
					rt.Fatalf("v%d holds at the commit in force at %s, but is %s", v, probe, got)
				}
			case probe.Before(first):
				if got != NotYetInForce {
					rt.Fatalf("v%d first landed at %s, judged at %s: %q, want not_yet_in_force", v, first, probe, got)
				}
			default:
				// Held earlier, replaced since: in force only within
				// the rollout after the commit that replaced it.
				replaced := time.Time{}
				for i := range n {
					if times[i].After(probe) {
						break
					}
					if i > 0 && versions[i-1] == v && versions[i] != v {
						replaced = times[i]
					}
				}
				want := Superseded
				if !replaced.IsZero() && probe.Before(replaced.Add(rollout)) {
					want = ""
				}
				if got != want {
					rt.Fatalf("v%d replaced at %s, judged at %s with rollout %s: %q, want %q", v, replaced, probe, rollout, got, want)
				}
			}
		}
	})
}

func parseOps(data string) ([]*operations.Operation, error) {
	return operations.Parse("operations/noop.toml", []byte(data))
}
