package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
}

// Events is the record of events, in the state directory beside the
// ledger, one file per event, written atomically:
//
//	DIR/HEX/KIND-ID.json
type Events struct {
	Dir string
}

func (e Event) path(dir string) string {
	sum := sha256.Sum256([]byte(e.Record + "\x00" + e.Where))
	return filepath.Join(dir, strings.TrimPrefix(e.Fingerprint, "sha256:"), e.Kind+"-"+hex.EncodeToString(sum[:12])+".json")
}

// Has reports whether an event of kind about record at where is recorded.
func (s *Events) Has(fp, kind, record, where string) bool {
	_, err := os.Stat(Event{Kind: kind, Fingerprint: fp, Record: record, Where: where}.path(s.Dir))
	return err == nil
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
