package runner

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/store"
)

// SignCounts reads the stored sign count of every passkey credential the
// policy holds, for the gate's Input.SignCounts: an assertion whose count
// is not above its credential's is refused (docs/adr/0043-passkey-assertions-as-evidence.md).
func (pc *PlanContext) SignCounts() (map[string]uint32, error) {
	ids := pc.Policy.PasskeyCredentialIDs()
	if len(ids) == 0 {
		return nil, nil
	}
	counts, err := pc.Store.SignCounts(ids)
	if err != nil {
		return nil, fmt.Errorf("reading passkey sign counts: %w", err)
	}
	return counts, nil
}

// advanceSignCounts advances the stored sign count of each passkey dec
// spends, by the store's conditional write, under a lock per credential
// that the caller holds (unlock) until the intent receipt is appended: so
// the journal's order of intents is the order of the advances, which is
// what replay checks the counts along. An advance refused (a count not
// above the stored one: another run spent it, or a clone) refuses the run
// before its intent. A count of 0 is an authenticator without a counter
// (WebAuthn §6.1.1), which the gate judges and nothing advances.
func advanceSignCounts(pc *PlanContext, dec *approval.Decision, runID string) (unlock func(), err error) {
	spent := dec.PasskeysSpent()
	if len(spent) == 0 {
		return func() {}, nil
	}
	var creds []string
	for _, s := range spent {
		creds = append(creds, s.Credential)
	}
	unlock, err = lockCredentials(filepath.Join(pc.Config.State, "signcount-locks"), creds)
	if err != nil {
		return nil, err
	}
	for _, s := range spent {
		if s.SignCount == 0 {
			continue
		}
		err := pc.Store.AdvanceSignCount(s.Credential, s.SignCount, runID)
		if errors.Is(err, store.ErrSignCount) {
			unlock()
			return nil, refusal.New(refusal.SignatureInvalid, "%v; nothing ran (another run spent this count, or the passkey was cloned)", err).
				For(pc.Plan.Operation, pc.Plan.Fingerprint)
		}
		if err != nil {
			unlock()
			return nil, fmt.Errorf("advancing the passkey sign count (nothing ran): %w", err)
		}
	}
	return unlock, nil
}

// credLocks serialises the runs of one process as flock serialises
// processes: flock(2) locks belong to the open file, so two goroutines
// opening the file each would both hold it.
var credLocks sync.Map // path → *sync.Mutex

// lockCredentials takes, in the sorted order of creds (so two runs never
// deadlock), an exclusive lock per credential: a mutex within this process
// and flock(2) of DIR/KEY.lock between processes. unlock releases them.
func lockCredentials(dir string, creds []string) (unlock func(), err error) {
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("passkey sign-count locks: %w", err)
	}
	var held []func()
	unlock = func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i]()
		}
	}
	for _, c := range creds {
		path := filepath.Join(dir, store.CredKey(c)+".lock")
		m, _ := credLocks.LoadOrStore(path, &sync.Mutex{})
		mu := m.(*sync.Mutex)
		mu.Lock()
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			mu.Unlock()
			unlock()
			return nil, fmt.Errorf("passkey sign-count lock: %w", err)
		}
		for {
			err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
		if err != nil {
			f.Close()
			mu.Unlock()
			unlock()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		held = append(held, func() { f.Close(); mu.Unlock() })
	}
	return unlock, nil
}
