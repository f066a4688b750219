package receipts

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/tomlpos"
)

// VersionsFile is the file of a history directory that says when each
// version was in force (docs/adr/0023-history-record.md).
const VersionsFile = "versions.toml"

// Versions is history/versions.toml: when each version of the protected
// trust policy and each operation definition was in force. Replay fails a
// receipt naming a version outside every interval in which it was in
// force (superseded, not_yet_in_force).
type Versions struct {
	// Recorded is when `history record` last changed the file: a version
	// it finds new was deployed no earlier than that, so that is when its
	// interval starts (zero: the history began with it).
	Recorded  time.Time `toml:"recorded"`
	Trust     []Version `toml:"trust"`
	Operation []Version `toml:"operation"`
}

// Version is one interval in which a version was in force.
type Version struct {
	// Name is the operation's (operation entries only).
	Name   string `toml:"name"`
	Digest string `toml:"digest"`
	// Since is when it came into force (zero: before anything the history
	// knows). Until is when it stopped counting: its successor's
	// recording plus the rollout (zero: it is still in force).
	Since time.Time `toml:"since"`
	Until time.Time `toml:"until"`
}

// In reports whether t falls in v's interval.
func (v Version) In(t time.Time) bool {
	return !t.Before(v.Since) && (v.Until.IsZero() || t.Before(v.Until))
}

// ParseVersions decodes a versions file strictly: unknown keys, a digest
// that is not sha256:HEX, an operation entry without its name (or a trust
// entry with one) and an interval that ends before it begins are errors.
func ParseVersions(name string, data []byte) (*Versions, error) {
	var v Versions
	if err := tomlpos.Decode(data, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	check := func(kind string, i int, e Version) error {
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s: %s entry %d: %s", name, kind, i+1, fmt.Sprintf(format, args...))
		}
		hexd, ok := strings.CutPrefix(e.Digest, "sha256:")
		if b, err := hex.DecodeString(hexd); !ok || err != nil || len(b) != sha256.Size || strings.ToLower(hexd) != hexd {
			return bad("digest %q is not sha256:HEX", e.Digest)
		}
		if (kind == "operation") != (e.Name != "") {
			return bad("name is required for an operation entry and only there")
		}
		if !e.Until.IsZero() && !e.Since.Before(e.Until) {
			return bad("until %s is not after since %s", stamp(e.Until), stamp(e.Since))
		}
		return nil
	}
	for i, e := range v.Trust {
		if err := check("trust", i, e); err != nil {
			return nil, err
		}
	}
	for i, e := range v.Operation {
		if err := check("operation", i, e); err != nil {
			return nil, err
		}
	}
	return &v, nil
}

// Format writes v as history record writes it: one table per interval,
// in a stable order, so that records make small reviewable diffs.
func (v *Versions) Format() []byte {
	var b bytes.Buffer
	b.WriteString("# When each version of the protected trust policy and registry was in force.\n")
	b.WriteString("# Written by `prod-write history record`; reviewed like trust.toml (docs/REPLAY.md).\n")
	if !v.Recorded.IsZero() {
		fmt.Fprintf(&b, "\nrecorded = %s\n", v.Recorded.UTC().Format(time.RFC3339Nano))
	}
	write := func(table string, e Version) {
		fmt.Fprintf(&b, "\n[[%s]]\n", table)
		if e.Name != "" {
			fmt.Fprintf(&b, "name = %q\n", e.Name)
		}
		fmt.Fprintf(&b, "digest = %q\n", e.Digest)
		if !e.Since.IsZero() {
			fmt.Fprintf(&b, "since = %s\n", e.Since.UTC().Format(time.RFC3339Nano))
		}
		if !e.Until.IsZero() {
			fmt.Fprintf(&b, "until = %s\n", e.Until.UTC().Format(time.RFC3339Nano))
		}
	}
	for _, e := range v.Trust {
		write("trust", e)
	}
	for _, e := range v.Operation {
		write("operation", e)
	}
	return b.Bytes()
}

// timesOf collects the intervals of each digest.
func timesOf(vs []Version) map[string][]Version {
	m := map[string][]Version{}
	for _, e := range vs {
		m[e.Digest] = append(m[e.Digest], e)
	}
	return m
}

// inForce judges t against the intervals of one version: "" when it was in
// force then (or the version has no interval: unindexed), else
// NotYetInForce or Superseded.
func inForce(ivs []Version, t time.Time) string {
	if len(ivs) == 0 {
		return ""
	}
	early := true
	for _, v := range ivs {
		if v.In(t) {
			return ""
		}
		if !t.Before(v.Since) {
			early = false
		}
	}
	if early {
		return NotYetInForce
	}
	return Superseded
}

// Change is one thing [RecordHistory] wrote.
type Change struct {
	// Kind is "trust" or "operation"; What is "recorded" (a version came
	// into force) or "superseded" (an interval was closed).
	Kind   string `json:"kind"`
	What   string `json:"what"`
	Name   string `json:"name,omitempty"`
	Digest string `json:"digest"`
	// At is when the interval starts (recorded; zero: before anything the
	// history knows) or ends (superseded).
	At time.Time `json:"at,omitzero"`
}

// RecordHistory records the current trust policy (its file's bytes) and
// registry definitions in the history directory dir: each version's
// content by digest (created exclusively; an existing file must hold the
// same bytes), and in versions.toml an interval for each version newly in
// force, closing at now+rollout the interval of each version they replace
// (an operation gone from the registry is closed too). A new version's
// interval starts at the record before this one that changed the history
// (versions.toml's recorded): it can have been deployed at any time since,
// and runs made under it before this record are its runs. The first
// record's versions have been in force since before the history began.
// Running it again with nothing changed writes nothing. It is meant to be
// run by CI on the protected branch once the change is deployed
// (docs/adr/0023-history-record.md): whoever can write dir decides what
// replay accepts.
func RecordHistory(dir string, trust []byte, defs []*operations.Operation, now time.Time, rollout time.Duration) ([]Change, error) {
	now = now.UTC().Truncate(time.Second)
	until := now.Add(rollout)
	var changes []Change
	sum := sha256.Sum256(trust)
	trustDigest := "sha256:" + hex.EncodeToString(sum[:])
	if err := putHistoryFile(filepath.Join(dir, "trust"), trustDigest, ".toml", trust); err != nil {
		return nil, err
	}
	current := map[string]string{} // operation name → digest
	for _, op := range defs {
		c := *op
		c.ProgramPath, c.Unavailable, c.Source = "", "", ""
		b, err := json.Marshal(&c)
		if err != nil {
			return nil, err
		}
		if err := putHistoryFile(filepath.Join(dir, "operations"), op.Digest, ".json", append(b, '\n')); err != nil {
			return nil, err
		}
		current[op.Name] = op.Digest
	}
	path := filepath.Join(dir, VersionsFile)
	v := &Versions{}
	// since is when what is new here can first have been deployed: the
	// last record that changed the history (zero for the first record).
	var since time.Time
	old, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// The first record: every version already in the history was
		// replaced by now at the latest.
		known, err := historyDigests(dir)
		if err != nil {
			return nil, err
		}
		for _, k := range known {
			if k.kind == "trust" && k.digest != trustDigest {
				v.Trust = append(v.Trust, Version{Digest: k.digest, Until: until})
			}
			if k.kind == "operation" && !slices.Contains(mapValues(current), k.digest) {
				v.Operation = append(v.Operation, Version{Name: k.name, Digest: k.digest, Until: until})
			}
		}
	case err != nil:
		return nil, fmt.Errorf("reading history: %w", err)
	default:
		if v, err = ParseVersions(path, old); err != nil {
			return nil, err
		}
		since = v.lastRecord()
	}
	// The trust policy: one version in force at a time.
	open := false
	for i := range v.Trust {
		e := &v.Trust[i]
		if !e.Until.IsZero() {
			continue
		}
		if e.Digest == trustDigest {
			open = true
			continue
		}
		e.Until = until
		changes = append(changes, Change{Kind: "trust", What: "superseded", Digest: e.Digest, At: until})
	}
	if !open {
		v.Trust = append(v.Trust, Version{Digest: trustDigest, Since: since})
		changes = append(changes, Change{Kind: "trust", What: "recorded", Digest: trustDigest, At: since})
	}
	// Operations: one definition in force per name.
	openOp := map[string]bool{}
	for i := range v.Operation {
		e := &v.Operation[i]
		if !e.Until.IsZero() {
			continue
		}
		if current[e.Name] == e.Digest {
			openOp[e.Name] = true
			continue
		}
		e.Until = until
		changes = append(changes, Change{Kind: "operation", What: "superseded", Name: e.Name, Digest: e.Digest, At: until})
	}
	names := make([]string, 0, len(current))
	for n := range current {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if !openOp[n] {
			v.Operation = append(v.Operation, Version{Name: n, Digest: current[n], Since: since})
			changes = append(changes, Change{Kind: "operation", What: "recorded", Name: n, Digest: current[n], At: since})
		}
	}
	if len(changes) > 0 || len(old) == 0 {
		v.Recorded = now
	}
	out := v.Format()
	if bytes.Equal(out, old) {
		return changes, nil
	}
	if err := durable.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := durable.WriteFile(path, out, 0o644); err != nil {
		return nil, err
	}
	return changes, nil
}

// lastRecord is when the last record that changed v was made: recorded,
// or for a file written before it was kept, the latest start of an
// interval.
func (v *Versions) lastRecord() time.Time {
	if !v.Recorded.IsZero() {
		return v.Recorded
	}
	var last time.Time
	for _, e := range slices.Concat(v.Trust, v.Operation) {
		if e.Since.After(last) {
			last = e.Since
		}
	}
	return last
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// putHistoryFile creates sub/sha256-HEX.ext holding data, exclusively; an
// existing file must already hold exactly data.
func putHistoryFile(sub, digest, ext string, data []byte) error {
	hexd, ok := strings.CutPrefix(digest, "sha256:")
	if !ok {
		return fmt.Errorf("history: digest %q is not sha256:HEX", digest)
	}
	if err := durable.MkdirAll(sub, 0o755); err != nil {
		return err
	}
	path := filepath.Join(sub, "sha256-"+hexd+ext)
	err := durable.CreateOnce(path, data, 0o644)
	if errors.Is(err, fs.ErrExist) {
		have, rerr := os.ReadFile(path)
		if rerr != nil {
			return fmt.Errorf("reading history: %w", rerr)
		}
		if !bytes.Equal(have, data) {
			return fmt.Errorf("history: %s exists and holds other bytes", path)
		}
		return nil
	}
	return err
}

type historyDigest struct{ kind, name, digest string }

// historyDigests lists the versions a history directory holds (by file
// name; LoadHistory verifies them).
func historyDigests(dir string) ([]historyDigest, error) {
	var out []historyDigest
	for _, sub := range []struct{ dir, ext, kind string }{{"trust", ".toml", "trust"}, {"operations", ".json", "operation"}} {
		entries, err := os.ReadDir(filepath.Join(dir, sub.dir))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading history: %w", err)
		}
		for _, e := range entries {
			name, _ := strings.CutSuffix(e.Name(), sub.ext)
			hexd, ok := strings.CutPrefix(name, "sha256-")
			if !ok {
				continue
			}
			d := historyDigest{kind: sub.kind, digest: "sha256:" + hexd}
			if sub.kind == "operation" {
				var op struct {
					Name string `json:"name"`
				}
				b, err := os.ReadFile(filepath.Join(dir, sub.dir, e.Name()))
				if err != nil {
					return nil, fmt.Errorf("reading history: %w", err)
				}
				if json.Unmarshal(b, &op) != nil || op.Name == "" {
					return nil, fmt.Errorf("history: %s names no operation", filepath.Join(dir, sub.dir, e.Name()))
				}
				d.name = op.Name
			}
			out = append(out, d)
		}
	}
	return out, nil
}

// ErrNoHistory is a history directory without a versions.toml: nothing
// says when any version was in force.
var ErrNoHistory = errors.New("no " + VersionsFile)

// NotInForceError names what a history does not have in force at a time:
// a version a host loaded that replay will later fail (unknown_policy,
// unknown_definition, superseded, not_yet_in_force).
type NotInForceError struct {
	Path    string
	At      time.Time
	Missing []string // "the trust policy sha256:…", "operation NAME sha256:…"
}

func (e *NotInForceError) Error() string {
	return fmt.Sprintf("%s does not have in force at %s %s: replay would fail every run under it; record it with `prod-write history record` (docs/DEPLOYMENT.md, \"Changing the policy\")",
		e.Path, e.At.UTC().Format(time.RFC3339), strings.Join(e.Missing, ", "))
}

// CheckInForce checks that the history in dir has in force at t the trust
// policy whose digest is policy and every operation of defs: what a
// runner service loads must be what replay will judge its runs by. It
// returns ErrNoHistory when dir has no versions.toml, and a
// [*NotInForceError] naming each version it lacks.
func CheckInForce(dir, policy string, defs []*operations.Operation, t time.Time) error {
	path := filepath.Join(dir, VersionsFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ErrNoHistory
	}
	if err != nil {
		return fmt.Errorf("reading history: %w", err)
	}
	v, err := ParseVersions(path, data)
	if err != nil {
		return err
	}
	e := &NotInForceError{Path: path, At: t}
	if inForce(timesOf(v.Trust)[policy], t) != "" || len(timesOf(v.Trust)[policy]) == 0 {
		e.Missing = append(e.Missing, "the trust policy "+policy)
	}
	ops := timesOf(v.Operation)
	for _, op := range defs {
		if ivs := ops[op.Digest]; len(ivs) == 0 || inForce(ivs, t) != "" {
			e.Missing = append(e.Missing, fmt.Sprintf("operation %s %s", op.Name, op.Digest))
		}
	}
	if len(e.Missing) > 0 {
		return e
	}
	return nil
}
