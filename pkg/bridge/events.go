package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/store"
)

// Kinds of [Event].
const (
	EventReminded  = "reminded"
	EventEscalated = "escalated"
	EventDecided   = "decided"
	EventExpired   = "expired"
	// EventUnapproved: a decision announced as approved stopped being
	// approved before the plan ran (the gate closed again), and its post
	// was told so.
	EventUnapproved = "unapproved"
	// EventRan: the plan ran after its decision was announced as
	// approved; nothing is said, and the post is followed no more.
	EventRan = "ran"
)

// Event is something the bridges did about a request after posting it: a
// reminder, an escalation, telling the requester how it ended. Events are
// recorded so that each happens once per post and so that status shows
// them; like the ledger they decide nothing the gate judges.
type Event struct {
	Kind        string `json:"kind"`
	Fingerprint string `json:"fingerprint"`
	Record      string `json:"record"`
	// Where is the post it concerns ([Post.Where]).
	Where string    `json:"where"`
	At    time.Time `json:"at"`
	// Detail is what was said or where it went, for people.
	Detail string `json:"detail,omitempty"`
	// Round counts the times the post's decision had been announced as
	// approved and then stopped being approved before this event: the
	// decided, expired, unapproved and ran events of a post are once per
	// round, reminders and escalations once per post.
	Round int `json:"round,omitempty"`
	// Approved marks a decided event that announced the gate open; Runs
	// is how many runs of the plan the store had counted then (uses of
	// its evidence spent), so that a later run is told from the gate
	// closing again.
	Approved bool `json:"approved,omitempty"`
	Runs     int  `json:"runs,omitempty"`
	// Final marks an unapproved event that also closed the decision
	// (denied or expired): its post takes no more answers.
	Final bool `json:"final,omitempty"`
}

// Events is the record of events, in the state directory beside the
// ledger, one file per event, written atomically:
//
//	DIR/HEX/KIND-ID.json
type Events struct {
	Dir string
}

func (e Event) path(dir string) string {
	key := e.Record + "\x00" + e.Where
	if e.Round > 0 {
		key += fmt.Sprintf("\x00%d", e.Round) // round 0 keeps the name events had before rounds
	}
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(dir, strings.TrimPrefix(e.Fingerprint, "sha256:"), e.Kind+"-"+hex.EncodeToString(sum[:12])+".json")
}

// Has reports whether an event of kind about record at where is recorded.
func (s *Events) Has(fp, kind, record, where string) bool {
	_, err := os.Stat(Event{Kind: kind, Fingerprint: fp, Record: record, Where: where}.path(s.Dir))
	return err == nil
}

// Get returns the event of kind about record at where in round, or nil
// when none is recorded.
func (s *Events) Get(fp, kind, record, where string, round int) (*Event, error) {
	if err := store.CheckFingerprint(fp); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(Event{Kind: kind, Fingerprint: fp, Record: record, Where: where, Round: round}.path(s.Dir))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var e Event
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("reading a %s event: %w", kind, err)
	}
	if e.Kind != kind || e.Fingerprint != fp || e.Record != record || e.Where != where || e.Round != round {
		return nil, fmt.Errorf("the %s event of %s at %s is misfiled", kind, fp, where)
	}
	return &e, nil
}

// Add records e durably.
func (s *Events) Add(e Event) error {
	if err := store.CheckFingerprint(e.Fingerprint); err != nil {
		return err
	}
	path := e.path(s.Dir)
	if err := durable.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("recording event: %w", err)
	}
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return durable.WriteFile(path, append(data, '\n'), 0o600)
}

// List returns the events of plan fp, oldest first.
func (s *Events) List(fp string) ([]Event, error) {
	if err := store.CheckFingerprint(fp); err != nil {
		return nil, err
	}
	dir := filepath.Join(s.Dir, strings.TrimPrefix(fp, "sha256:"))
	out, err := readJSONDir(dir, func(e Event) bool { return e.Fingerprint == fp }) // else misfiled
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].At.Before(out[j].At) })
	return out, nil
}
