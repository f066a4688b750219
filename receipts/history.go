package receipts

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/strictjson"
)

// History is what replay judges receipts by (docs/DESIGN.md §7, docs/adr/0017):
// every version of the protected trust policy, by digest, and every
// operation definition the protected registry holds or held, by digest.
// A receipt naming a policy digest or carrying a definition that is not
// here fails, whatever it says about itself.
type History struct {
	// Policies by digest ("sha256:…" of the file's bytes), the current
	// one included.
	Policies map[string]*approval.Policy
	// Definitions holds the digest of every operation definition.
	Definitions map[string]bool
	// PolicyTimes and DefinitionTimes are when each version was in force
	// (history/versions.toml, docs/adr/0023-history-record.md), by
	// digest. A version without intervals is not bounded in time: the
	// current one before it is recorded, or any when there is no
	// versions.toml.
	PolicyTimes     map[string][]Version
	DefinitionTimes map[string][]Version
	// Where names the history in messages: a history directory, or a
	// branch's first-parent history.
	Where string

	fromFiles map[string]bool   // definitions read from history/operations
	skipped   map[string]string // digest → why a branch's version is none
}

// unknown says why digest is no version of the history.
func (h *History) unknown(digest string) string {
	if why := h.skipped[digest]; why != "" {
		return fmt.Sprintf("; its version on the branch does not load: %s", why)
	}
	if h.Where != "" && strings.HasPrefix(h.Where, "the first-parent") {
		return " (a version never merged there, or one a rewrite of the branch removed)"
	}
	return ""
}

// SigningPolicies are the policy versions whose runner keys count for a
// receipt of time t that names no policy (an outcome, a repair): those
// versions.toml says were in force at t. A rotated runner key signs
// receipts of its time only.
func (h *History) SigningPolicies(t time.Time) []*approval.Policy {
	var out []*approval.Policy
	for d, ivs := range h.PolicyTimes {
		if p := h.Policies[d]; p != nil && len(ivs) > 0 && inForce(ivs, t) == "" {
			out = append(out, p)
		}
	}
	return out
}

// LoadHistory reads dir (which may not exist: then only the current
// versions count) and adds the current policy and registry definitions.
// The layout is
//
//	DIR/trust/sha256-HEX.toml        a past trust.toml, byte for byte
//	DIR/operations/sha256-HEX.json   a past operation definition (JSON)
//	DIR/calendars/sha256-HEX.ics     a freeze calendar a past policy binds
//
// Each file's name is its own digest, checked here: a file that does not
// hash to its name is an error, so the history holds by mechanism what
// the protected branch reviewed, whatever else is copied in.
func LoadHistory(dir string, current *approval.Policy, defs []*operations.Operation) (*History, error) {
	h := &History{Policies: map[string]*approval.Policy{current.Digest: current}, Definitions: map[string]bool{}, fromFiles: map[string]bool{}, Where: "the history in " + dir}
	for _, op := range defs {
		h.Definitions[op.Digest] = true
	}
	if dir == "" {
		return h, nil
	}
	read := func(sub, ext string, fn func(path, digest string, data []byte) error) error {
		entries, err := os.ReadDir(filepath.Join(dir, sub))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading history: %w", err)
		}
		for _, e := range entries {
			name, ok := strings.CutSuffix(e.Name(), ext)
			hexd, ok2 := strings.CutPrefix(name, "sha256-")
			if !ok || !ok2 || e.IsDir() {
				return fmt.Errorf("history: %s is not named sha256-HEX%s", filepath.Join(dir, sub, e.Name()), ext)
			}
			path := filepath.Join(dir, sub, e.Name())
			data, err := os.ReadFile(path)
			if err != nil {
				return fmt.Errorf("reading history: %w", err)
			}
			if err := fn(path, "sha256:"+hexd, data); err != nil {
				return err
			}
		}
		return nil
	}
	err := read("trust", ".toml", func(path, digest string, data []byte) error {
		sum := sha256.Sum256(data)
		if "sha256:"+hex.EncodeToString(sum[:]) != digest {
			return fmt.Errorf("history: %s does not hash to its name", path)
		}
		// A past policy's freeze calendars are in the history by digest
		// (DIR/calendars/sha256-HEX.ics), checked against the digest the
		// policy binds them by.
		p, err := approval.ParsePolicyWith(path, data, func(_, digest string) ([]byte, error) {
			return approval.ReadCalendarFile(filepath.Join(dir, "calendars", strings.Replace(digest, ":", "-", 1)+".ics"))
		})
		if err != nil {
			return err
		}
		if _, ok := h.Policies[digest]; !ok {
			h.Policies[digest] = p
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = read("operations", ".json", func(path, digest string, data []byte) error {
		var op operations.Operation
		// As `ops list --json` prints one: a final newline is allowed.
		if err := strictjson.Unmarshal(bytes.TrimSuffix(data, []byte{'\n'}), &op); err != nil {
			return fmt.Errorf("history: %s: %w", path, err)
		}
		d, err := op.DefinitionDigest()
		if err != nil || d != digest {
			return fmt.Errorf("history: %s is not the definition its name says", path)
		}
		h.Definitions[digest] = true
		h.fromFiles[digest] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	return h, h.loadVersions(dir, current)
}

// loadVersions reads DIR/versions.toml, when there is one. Every version
// the history holds must then have an interval in it, and every interval
// must name a version the history holds: a version left out would be
// judged by no time at all.
func (h *History) loadVersions(dir string, current *approval.Policy) error {
	path := filepath.Join(dir, VersionsFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading history: %w", err)
	}
	v, err := ParseVersions(path, data)
	if err != nil {
		return fmt.Errorf("history: %w", err)
	}
	h.PolicyTimes, h.DefinitionTimes = timesOf(v.Trust), timesOf(v.Operation)
	for d := range h.PolicyTimes {
		if h.Policies[d] == nil {
			return fmt.Errorf("history: %s names trust policy %s, which is not in %s", path, d, filepath.Join(dir, "trust"))
		}
	}
	for d := range h.DefinitionTimes {
		if !h.Definitions[d] {
			return fmt.Errorf("history: %s names operation definition %s, which is not in %s", path, d, filepath.Join(dir, "operations"))
		}
	}
	for d := range h.Policies {
		if d != current.Digest && len(h.PolicyTimes[d]) == 0 {
			return fmt.Errorf("history: trust policy %s has no interval in %s (prod-write history record adds it)", d, path)
		}
	}
	for d := range h.fromFiles {
		if len(h.DefinitionTimes[d]) == 0 {
			return fmt.Errorf("history: operation definition %s has no interval in %s (prod-write history record adds it)", d, path)
		}
	}
	return nil
}
