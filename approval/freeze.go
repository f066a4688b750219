package approval

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
	// Time zones are read from the binary, never from the host: run on a
	// host and replay in CI must place a freeze at the same instant
	// (docs/adr/0021-freezes.md).
	_ "time/tzdata"
)

// RoleFreeze may grant one plan through a freeze (docs/adr/0021-freezes.md).
const RoleFreeze = "freeze"

// Freeze is a window during which the mutating operations it covers do not
// run, whatever approval they have, unless a principal with the freeze
// role grants the plan ([FreezeGrant]). It lives in the trust policy, so
// replay judges each run by the freezes of the policy version it ran under
// (docs/adr/0021-freezes.md).
type Freeze struct {
	Name string `toml:"name" json:"name"`
	// Start and End are RFC 3339 times with an offset, or local times
	// (2006-01-02T15:04[:05], or a date) read in TimeZone: a time zone is
	// always explicit. The window is [Start, End).
	Start    string `toml:"start" json:"start"`
	End      string `toml:"end" json:"end"`
	TimeZone string `toml:"time_zone" json:"time_zone,omitempty"`
	// Operations and Targets narrow what is frozen; empty means all.
	Operations []string `toml:"operations" json:"operations,omitempty"`
	Targets    []string `toml:"targets" json:"targets,omitempty"`
	Reason     string   `toml:"reason" json:"reason,omitempty"`

	from, until time.Time
}

// From is when the freeze begins.
func (f *Freeze) From() time.Time { return f.from }

// Until is when the freeze ends (exclusive).
func (f *Freeze) Until() time.Time { return f.until }

// Covers reports whether f freezes operation op on target at t.
func (f *Freeze) Covers(op, target string, t time.Time) bool {
	if t.Before(f.from) || !t.Before(f.until) {
		return false
	}
	return (len(f.Operations) == 0 || slices.Contains(f.Operations, op)) &&
		(len(f.Targets) == 0 || slices.Contains(f.Targets, target))
}

// FreezeCalendar is an iCalendar file of freeze windows, bound to the
// policy by its digest: the policy's digest then names the calendar too,
// so a policy version in the history means one set of freezes.
type FreezeCalendar struct {
	File       string   `toml:"file" json:"file"`
	SHA256     string   `toml:"sha256" json:"sha256"`
	Operations []string `toml:"operations" json:"operations,omitempty"`
	Targets    []string `toml:"targets" json:"targets,omitempty"`
}

// CalendarReader returns the bytes of a freeze calendar the policy names
// by file and digest. The caller checks the digest.
type CalendarReader func(file, digest string) ([]byte, error)

// DirCalendars reads calendars relative to dir (trust.toml's directory),
// by [ReadCalendarFile].
func DirCalendars(dir string) CalendarReader {
	return func(file, _ string) ([]byte, error) {
		if !filepath.IsAbs(file) {
			file = filepath.Join(dir, file)
		}
		return ReadCalendarFile(file)
	}
}

// MaxCalendar bounds a freeze calendar's size.
const MaxCalendar = 1 << 20

// ReadCalendarFile reads the freeze calendar at path: a regular file of at
// most MaxCalendar bytes. Whoever can write where the policy points can
// make the file huge, or put a FIFO or a device there: it is checked
// before it is opened (opening a FIFO blocks, opening a device may act)
// and again once open, and no more than MaxCalendar+1 bytes are read.
// Every error names the file.
func ReadCalendarFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("reading freeze calendar: %w", err)
	}
	if err := calendarIsRegular(path, fi); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("reading freeze calendar: %w", err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("reading freeze calendar %s: %w", path, err)
	}
	if err := calendarIsRegular(path, fi); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxCalendar+1))
	if err != nil {
		return nil, fmt.Errorf("reading freeze calendar %s: %w", path, err)
	}
	if len(data) > MaxCalendar {
		return nil, fmt.Errorf("freeze calendar %s is larger than %d bytes", path, MaxCalendar)
	}
	return data, nil
}

// calendarIsRegular refuses a calendar that is not a regular file.
func calendarIsRegular(path string, fi os.FileInfo) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("freeze calendar %s is not a regular file", path)
	}
	return nil
}

// FreezeGrant lets one plan run through one freeze: signed by a principal
// with the freeze role, bound to the fingerprint, expiring. It is not
// consumed: the approval still is.
type FreezeGrant struct {
	Fingerprint string    `json:"fingerprint"`
	Freeze      string    `json:"freeze"`
	Granter     string    `json:"granter"`
	Reason      string    `json:"reason"`
	Issued      time.Time `json:"issued"`
	Expires     time.Time `json:"expires"`
}

// TypeFreezeGrant is a freeze grant's DSSE payload type.
const TypeFreezeGrant = "application/vnd.prod-write.freeze-grant+json"

// KindFreezeGrant is a freeze grant as people read it.
const KindFreezeGrant = "freeze-grant"

// FreezeByName returns the policy's freezes called name.
func (p *Policy) FreezeByName(name string) []*Freeze {
	var out []*Freeze
	for _, f := range p.Freezes {
		if f.Name == name {
			out = append(out, f)
		}
	}
	return out
}

// Frozen returns the freezes covering op on target at t, earliest end
// first.
func (p *Policy) Frozen(op, target string, t time.Time) []*Freeze {
	var out []*Freeze
	for _, f := range p.Freezes {
		if f.Covers(op, target, t) {
			out = append(out, f)
		}
	}
	return out
}

var localLayouts = []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"}

// freezeTime reads a freeze bound: RFC 3339 with an offset, or a local
// time in zone. Without either it is an error: a freeze whose instant
// depends on the host's zone would be judged differently by run and
// replay.
func freezeTime(s, zone string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		if zone != "" {
			return time.Time{}, fmt.Errorf("%q has an offset and time_zone is %q: give one of them", s, zone)
		}
		return t, nil
	}
	if zone == "" {
		return time.Time{}, fmt.Errorf("%q has no time zone: give an offset (2024-12-20T00:00:00+01:00) or time_zone = \"Europe/Paris\"", s)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil || zone == "Local" {
		return time.Time{}, fmt.Errorf("time_zone %q is not an IANA time zone name", zone)
	}
	for _, l := range localLayouts {
		if t, err := time.ParseInLocation(l, s, loc); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time (2006-01-02T15:04:05, 2006-01-02T15:04 or 2006-01-02, or RFC 3339)", s)
}

// loadFreezes checks the inline freezes and expands the calendars into
// freezes, sorted by start.
func (p *Policy) loadFreezes(name string, read CalendarReader) error {
	for i, f := range p.Freezes {
		bad := func(format string, args ...any) error {
			return &ConfigError{File: name, Msg: fmt.Sprintf("freeze %d (%q): ", i+1, f.Name) + fmt.Sprintf(format, args...)}
		}
		if f.Name == "" {
			return bad("name is required")
		}
		var err error
		if f.from, err = freezeTime(f.Start, f.TimeZone); err != nil {
			return bad("start: %v", err)
		}
		if f.until, err = freezeTime(f.End, f.TimeZone); err != nil {
			return bad("end: %v", err)
		}
		if !f.until.After(f.from) {
			return bad("end %s is not after start %s", f.End, f.Start)
		}
	}
	for i, c := range p.Calendars {
		bad := func(format string, args ...any) error {
			return &ConfigError{File: name, Msg: fmt.Sprintf("freeze_calendar %d (%q): ", i+1, c.File) + fmt.Sprintf(format, args...)}
		}
		if c.File == "" || c.SHA256 == "" {
			return bad("file and sha256 are required: the policy binds its calendar by digest")
		}
		if read == nil {
			return bad("no calendar can be read here")
		}
		data, err := read(c.File, c.SHA256)
		if err != nil {
			return bad("%v", err)
		}
		if len(data) > MaxCalendar {
			return bad("larger than %d bytes", MaxCalendar)
		}
		sum := sha256.Sum256(data)
		if got := "sha256:" + hex.EncodeToString(sum[:]); got != c.SHA256 {
			return bad("the file hashes to %s, the policy says %s", got, c.SHA256)
		}
		events, err := ParseICalendar(data)
		if err != nil {
			return bad("%v", err)
		}
		for _, e := range events {
			p.Freezes = append(p.Freezes, &Freeze{Name: e.Summary, Start: e.Start.Format(time.RFC3339), End: e.End.Format(time.RFC3339),
				Operations: c.Operations, Targets: c.Targets, from: e.Start, until: e.End})
		}
	}
	sort.SliceStable(p.Freezes, func(i, j int) bool { return p.Freezes[i].from.Before(p.Freezes[j].from) })
	return nil
}

// frozenReason names the freeze that holds a plan back, and until when.
func frozenReason(f *Freeze, others int) string {
	s := fmt.Sprintf("freeze %q holds operations it covers until %s", f.Name, f.until.UTC().Format(time.RFC3339))
	if f.Reason != "" {
		s += " (" + f.Reason + ")"
	}
	if others > 0 {
		s += fmt.Sprintf("; %d more freeze(s) cover this plan now", others)
	}
	return s + ": even a Gera go does not open the gate during a freeze"
}

// joinNames lists freeze names for a message.
func joinNames(fs []*Freeze) string {
	var names []string
	for _, f := range fs {
		if !slices.Contains(names, f.Name) {
			names = append(names, f.Name)
		}
	}
	return strings.Join(names, ", ")
}
