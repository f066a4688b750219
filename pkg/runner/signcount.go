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

// credLocks serialises the runs of one process before they reach flock,
// so that a run waiting for another of its own process waits on a mutex
// rather than in a blocking system call. (flock(2) locks belong to the
// open file description, so two goroutines each opening the file would be
// serialised by flock alone too: TestPasskeyLockBetweenProcesses holds
// the lock from the test's own open file.)
var credLocks sync.Map // path → *sync.Mutex

// lockContended, set by tests only, is told that a run is about to wait
// for a credential's lock that another holds: by this process (the mutex)
// or by another (process, flock). It lets a test see a run waiting at the
// lock without sleeping.
var lockContended func(path string, process bool)

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
		if !mu.TryLock() {
			if lockContended != nil {
				lockContended(path, false)
			}
			mu.Lock()
		}
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			mu.Unlock()
			unlock()
			return nil, fmt.Errorf("passkey sign-count lock: %w", err)
		}
		err = flockExclusive(f, path)
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

// flockExclusive takes flock(2) LOCK_EX of f, waiting for another holder.
func flockExclusive(f *os.File, path string) error {
	err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
		return err
	}
	if errors.Is(err, unix.EWOULDBLOCK) && lockContended != nil {
		lockContended(path, true)
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
