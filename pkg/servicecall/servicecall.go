// Package servicecall is the runner service's side of a call: the state
// the service loads and keeps warm (the registry, trust policy and runner
// key it judges by, its secrets and program snapshots), and what it takes
// from one caller. It takes nothing but objects: the kernel's peer
// credentials, and descriptors the client opened. A directory or file
// handed over counts as the path a plan binds only if the service's own
// namespace resolves that path to the same object; the program runs as
// the operation's run_as account, never the caller's or the service's;
// and a caller's slots are its principal's, or a share of a small pool
// for callers with no key of the policy
// (docs/adr/0036-the-service-never-waits-on-a-caller.md). It knows no
// command line: pkg/cli's serve wires it to the socket.
package servicecall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/decisionlog"
	"github.com/prod-write/prod-write/pkg/execute"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/refusal"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/service"
	"golang.org/x/sys/unix"
)

// CwdError is a working directory handed over that stands for no path
// here (removed, not a directory, or without a name in the service's
// namespace): the call is wrong, as a command line can be.
type CwdError struct{ Err error }

func (e *CwdError) Error() string { return e.Err.Error() }

func (e *CwdError) Unwrap() error { return e.Err }

// State is what the service loaded and keeps warm.
type State struct {
	Cfg *config.Config
	// RemoteSecret reads a secret from SSM when [service] secrets says so.
	RemoteSecret func(ctx context.Context, name string) (string, error)
	// secretChecks are the remote secrets' last readability checks
	// (SecretReadable), guarded by secretMu.
	secretMu     sync.Mutex
	secretChecks map[string]secretCheck
	loaded       atomic.Pointer[Loaded]
	UID          uint32 // the service's own account
	Starter      *execute.CaplessStarter
	// Snapshots keeps programs' sealed Snapshots between runs.
	Snapshots execute.SnapshotCache
	Log       *log.Logger
	// Decisions is the service's decision log (nil when off): callers
	// never name it.
	Decisions decisionlog.Sink
}

// Loaded is one consistent load of the policy the service judges by.
type Loaded struct {
	Registry  *operations.Registry
	Policy    *approval.Policy
	RunnerKey *keys.Private
	Runner    *approval.Principal
	RunnerErr error
	// Replaced is closed once a reload replaces this load: a wait in
	// progress judges again at once, by the new one.
	Replaced chan struct{}
}

func (s *State) Current() *Loaded { return s.loaded.Load() }

// Load reads the registry, trust policy and runner key. On error the state
// is unchanged: a broken edit never leaves the service judging by half a
// policy.
func (s *State) Load() error {
	reg, err := runner.LoadRegistry(s.Cfg)
	if err != nil {
		return err
	}
	policy, err := approval.LoadPolicy(s.Cfg.Trust)
	if err != nil {
		return err
	}
	if err := runner.CheckPins(s.Cfg, policy, reg); err != nil {
		return err
	}
	// What it loads must be what replay will judge its runs by.
	warning, err := runner.CheckHistory(s.Cfg, policy, reg, time.Now())
	if err != nil {
		return err
	}
	policy.CacheVerifications()
	for _, w := range reg.Warnings {
		s.Log.Printf("warning: %s", w)
	}
	for _, w := range runner.NoRunAs(reg) {
		s.Log.Printf("warning: %s", w)
	}
	if warning != "" {
		s.Log.Printf("warning: %s", warning)
	}
	lp := &Loaded{Registry: reg, Policy: policy, Replaced: make(chan struct{})}
	lp.RunnerKey, lp.Runner, lp.RunnerErr = runner.LoadIdentity(s.Cfg, policy)
	if old := s.loaded.Swap(lp); old != nil {
		close(old.Replaced)
	}
	s.Snapshots.Purge()
	return nil
}

// Secret reads a production Secret from the service's own credentials
// directory: one file per Secret, named as the variable. Never from a
// caller, never from the service's environment.
func (s *State) Secret(name string) (string, error) {
	if s.RemoteSecret != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return s.RemoteSecret(ctx, name)
	}
	fl, err := s.openSecret(name)
	if err != nil {
		return "", err
	}
	defer fl.Close()
	b, err := io.ReadAll(io.LimitReader(fl, 64<<10))
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

// SecretReadable says whether Secret would read name, without reading its
// value: what status and file check before a run (runner.Runnable). A
// file of the credentials directory is opened and checked, not read. A
// remote secret is read, its value dropped, and the answer kept for
// secretCheckFor, so that callers polling status do not make the service
// ask the secret store at each call.
func (s *State) SecretReadable(name string) error {
	if s.RemoteSecret == nil {
		fl, err := s.openSecret(name)
		if err == nil {
			fl.Close()
		}
		return err
	}
	s.secretMu.Lock()
	defer s.secretMu.Unlock()
	if c, ok := s.secretChecks[name]; ok && time.Since(c.at) < secretCheckFor {
		return c.err
	}
	_, err := s.Secret(name)
	if s.secretChecks == nil {
		s.secretChecks = map[string]secretCheck{}
	}
	s.secretChecks[name] = secretCheck{at: time.Now(), err: err}
	return err
}

// secretCheck is a remote secret's last readability check.
type secretCheck struct {
	at  time.Time
	err error
}

// secretCheckFor is how long a remote secret's check is kept.
const secretCheckFor = time.Minute

// openSecret opens the credentials directory's file of name, checked: a
// regular file, not a link, that no one else may read or write.
func (s *State) openSecret(name string) (*os.File, error) {
	dir := s.Cfg.Service.Credentials
	if dir == "" {
		// systemd's LoadCredential= sets it in the service's own
		// environment, which the unit decides, not any caller.
		dir = os.Getenv("CREDENTIALS_DIRECTORY")
	}
	if dir == "" {
		return nil, errors.New("no credentials directory is configured ([service] credentials)")
	}
	fl, err := os.OpenFile(filepath.Join(dir, name), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, err
	}
	fi, err := fl.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = errors.New("not a regular file")
	} else if err == nil && fi.Mode().Perm()&0o077 != 0 {
		err = fmt.Errorf("mode %04o lets others read or write it", fi.Mode().Perm())
	}
	if err != nil {
		fl.Close()
		return nil, err
	}
	return fl, nil
}

// ConfigChanged logs, on SIGHUP, that prod-write.toml changed since the
// service started: a reload reads the trust policy, registry and runner
// key again, never prod-write.toml (its listeners, paths and backends are
// the service's from its start), so a change there, such as a new
// service.mcp_listen, needs a restart. Said plainly rather than half
// applied.
func (s *State) ConfigChanged(started []byte) {
	now, err := os.ReadFile(s.Cfg.Path)
	if err != nil || bytes.Equal(now, started) {
		return
	}
	what := ""
	if nc, err := config.Load(s.Cfg.Path); err == nil && nc.Service.MCPListen != s.Cfg.Service.MCPListen {
		what = fmt.Sprintf(" (service.mcp_listen %q is still %q)", nc.Service.MCPListen, s.Cfg.Service.MCPListen)
	}
	s.Log.Printf("%s changed since the service started%s: a reload does not read it; restart the service to apply it", s.Cfg.Path, what)
}

// Call is one client's call as the commands see it.
type Call struct {
	Socket  *service.Call
	State   *State
	Key     *os.File
	Cwd     *os.File
	CwdPath string
	CwdErr  error               // why the directory handed over stands for no path
	Files   map[string]*os.File // handed over or fetched, by parameter name
	// Stop is closed once the service stops (service.Handler): a wait
	// ends then, and stopped says that it did, for the log.
	Stop    <-chan struct{}
	Stopped bool
	// FinishOutput ends the relay of a program's output (nil: no
	// client to relay to).
	FinishOutput func() int64
	// Hosted is a call of MCP over HTTP: no client, no directory but
	// [service] mcp_cwd.
	Hosted bool
	// keyed memoizes Keyed.
	keyed *bool
	// Inline are the files a hosted call supplied inline, by name: sealed
	// memfds of that call alone (hostedBackend.forCall). A plan's kept
	// content is fetched by localapi's inlineFile.
	Inline map[string]*os.File
}

// File returns the descriptor of File parameter name: the one handed over
// with the request, or else one the client opens now for path.
func (sc *Call) File(name, path string) (*os.File, error) {
	if _, ok := operations.InlineName(path); ok {
		// Read through runner.CallerFiles.Inline, never as a path.
		return nil, &operations.InputError{Err: fmt.Errorf("file %s is bound as supplied inline, not as a path", name)}
	}
	if fl, ok := sc.Files[name]; ok {
		// Handed over with the request: the caller named it.
		if sc.Socket != nil {
			if err := sameObject(fl, path); err != nil {
				return nil, err
			}
		}
		return fl, nil
	}
	if sc.Socket != nil && !sc.MayReadPlans() {
		// The question would name the path a stored plan binds.
		return nil, refusal.New(refusal.PrincipalUnknown, "file %s of the plan is its caller's to hand over, and a caller with no key of the trust policy is asked for none (nor told its path)", name).Needs("--key FILE or PROD_WRITE_KEY: a key of a principal of trust.toml")
	}
	if sc.Socket == nil {
		return nil, &operations.InputError{Err: fmt.Errorf("file %s of this plan is a path its planner handed over, and MCP over HTTP has no client to hand it over (it takes files inline only)", name)}
	}
	fl, err := sc.Socket.File(path)
	if err != nil {
		return nil, &operations.InputError{Err: fmt.Errorf("file %s: %w", name, err)}
	}
	sc.Files[name] = fl
	if err := sameObject(fl, path); err != nil {
		return nil, err
	}
	return fl, nil
}

// sameObject refuses a descriptor handed over for path that is not the
// object path names in the service's own namespace: the plan, its
// approval and the receipt would name a path the program never read
// (docs/adr/0036-the-service-never-waits-on-a-caller.md).
func sameObject(fl *os.File, path string) error {
	if err := service.SameObject(fl, path); err != nil {
		return refusal.New(refusal.FingerprintMismatch, "the descriptor handed over does not stand for %s: %v", path, err).Needs("a path the runner service resolves to the same object as the caller (no bind mount or link of the caller's own over it)")
	}
	return nil
}

func (sc *Call) Close() {
	for n, fl := range sc.Files {
		if _, handed := sc.Socket.Files["file:"+n]; !handed {
			fl.Close()
		}
	}
}

// Credential is the account the program runs as: the operation's run_as,
// never the caller's, never the service's own, never root unless the
// configuration allows it (docs/adr/0011-runner-service.md).
func (sc *Call) Credential(pc *runner.PlanContext) (*syscall.Credential, error) {
	cred, err := sc.Account(pc)
	if err != nil || cred == nil {
		return cred, err
	}
	if err := sc.canEnter(pc, cred); err != nil {
		return nil, pc.Refuse(refusal.RunAsRefused, "run_as account %q cannot enter the working directory: %v", pc.Op.RunAs, err).Needs("a run_as account in the operation (docs/DEPLOYMENT.md)")
	}
	return cred, nil
}

// Account is Credential without the working directory, which is the
// running caller's: what status and file check of the account before a
// run (runner.PlanContext.Runnable).
func (sc *Call) Account(pc *runner.PlanContext) (*syscall.Credential, error) {
	name := pc.Op.RunAs
	refuse := func(format string, args ...any) error {
		return pc.Refuse(refusal.RunAsRefused, format, args...).Needs("a run_as account in the operation (docs/DEPLOYMENT.md)")
	}
	if name == "" {
		return nil, refuse("operation %s declares no run_as: the service runs programs only as an operation's own account", pc.Op.Name)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, refuse("run_as account %q of operation %s: %v", name, pc.Op.Name, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, refuse("run_as account %q has no numeric ids", name)
	}
	shared := sc.State.Cfg.Service.AllowSharedAccount
	peer := ^uint32(0) // MCP over HTTP: no account calls
	if sc.Socket != nil {
		peer = sc.Socket.Peer.UID
	}
	switch {
	case uid == 0 && !sc.State.Cfg.Service.AllowRoot:
		return nil, refuse("run_as is root, and [service] allow_root is not set")
	case uint32(uid) == peer && !shared:
		return nil, refuse("run_as account %q is the caller's own: the program would hold no privilege the caller lacks", name)
	case uint32(uid) == sc.State.UID && !shared:
		return nil, refuse("run_as account %q is the service's own: the program could rewrite the journal and read the runner key", name)
	}
	if uint32(uid) == sc.State.UID && uint32(gid) == uint32(os.Getgid()) && sc.State.UID != 0 {
		// Allowed as the service's own account: nothing to change, and an
		// unprivileged service could not call setgroups anyway.
		return nil, nil
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	gids, err := u.GroupIds()
	if err != nil {
		return nil, refuse("groups of run_as account %q: %v", name, err)
	}
	for _, g := range gids {
		if n, err := strconv.ParseUint(g, 10, 32); err == nil {
			cred.Groups = append(cred.Groups, uint32(n))
		}
	}
	return cred, nil
}

// canEnter checks, before anything is consumed, that the program's account
// may enter its working directory: otherwise the fork fails after the
// approval is spent. The check reads the mode bits (an ACL that denies
// more is still caught at fork, with the approval spent).
func (sc *Call) canEnter(pc *runner.PlanContext, cred *syscall.Credential) error {
	var st unix.Stat_t
	var err error
	switch {
	case pc.Op.Cwd != "" || sc.Hosted: // declared, or [service] mcp_cwd
		err = unix.Stat(pc.Plan.Cwd, &st)
	case sc.Cwd != nil:
		err = unix.Fstat(int(sc.Cwd.Fd()), &st)
	default:
		return errors.New("none was handed over")
	}
	if err != nil {
		return err
	}
	if cred.Uid == 0 {
		return nil
	}
	mode := st.Mode & 0o777
	var bit uint32
	switch {
	case st.Uid == cred.Uid:
		bit = mode & 0o100
	case st.Gid == cred.Gid || slices.Contains(cred.Groups, st.Gid):
		bit = mode & 0o010
	default:
		bit = mode & 0o001
	}
	if bit == 0 {
		return fmt.Errorf("mode %04o, owner uid %d, group %d", mode, st.Uid, st.Gid)
	}
	return nil
}

// Prepare sets what the service decides of an execution: the capless fork
// and, when the operation declares no cwd, the directory the caller handed
// over, entered through its descriptor (so a symlink swapped after the
// check changes nothing).
func (sc *Call) Prepare(spec *execute.Spec, pc *runner.PlanContext) {
	spec.Start = sc.State.Starter.Start
	if pc.Op.Cwd == "" && sc.Cwd != nil {
		// The child enters it before execve, while the descriptor, open
		// in the service, is still open in the child: /proc/self/fd/N is
		// the directory itself, whatever its path now names.
		spec.Dir = "/proc/self/fd/" + strconv.Itoa(int(sc.Cwd.Fd()))
	}
}

// CwdPath is the kernel's name for a directory descriptor: absolute, with
// symlinks resolved. A directory removed since is refused.
func CwdPath(d *os.File) (string, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(d.Fd()), &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", errors.New("the working directory handed over is not a directory")
	}
	if st.Nlink == 0 {
		return "", errors.New("the working directory handed over has been removed")
	}
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(d.Fd())))
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("the working directory handed over has no path here (%q)", p)
	}
	// The kernel's name is the path in the caller's namespace: it counts
	// only if ours resolves it to the same directory.
	if err := sameObject(d, p); err != nil {
		return "", err
	}
	return p, nil
}

// Getwd is the caller's working directory, as the plan binds it.
func (sc *Call) Getwd() (string, error) {
	if sc.Hosted {
		// MCP over HTTP: no client, no directory but the configured one.
		return sc.State.Cfg.Service.MCPCwd, nil
	}
	if sc.CwdErr != nil {
		if _, ok := refusal.As(sc.CwdErr); ok {
			return "", sc.CwdErr
		}
		return "", &CwdError{Err: sc.CwdErr}
	}
	return sc.CwdPath, nil
}

// Slots of the service's pools (docs/adr/0036-the-service-never-waits-on-a-caller.md).
const (
	// principalCalls is each principal's own pool, and root's: no other
	// caller can take them.
	principalCalls = 64
	// keylessCalls is the pool every caller without a key of the policy
	// shares, keylessPerAccount its share for one account.
	keylessCalls      = 4
	keylessPerAccount = 2
)

// Pools names the slots a call draws on: its principal's own when it
// handed over a key of the policy, root's and the service's own accounts'
// own, and otherwise a share of the small keyless pool. The key is read
// (a regular file of at most 4 KiB, by pread) only to know whose pool.
func (s *State) Pools(c *service.Call) []service.Pool {
	if pr := s.PrincipalOf(c.Files["key"]); pr != nil {
		return []service.Pool{{Name: "principal:" + pr.ID, Size: principalCalls}}
	}
	uid := strconv.FormatUint(uint64(c.Peer.UID), 10)
	if c.Peer.UID == 0 || c.Peer.UID == s.UID {
		return []service.Pool{{Name: "uid:" + uid, Size: principalCalls}}
	}
	return []service.Pool{{Name: "keyless", Size: keylessCalls}, {Name: "keyless:uid:" + uid, Size: keylessPerAccount}}
}

// PrincipalOf is the principal of the policy whose key kf holds, or nil.
func (s *State) PrincipalOf(kf *os.File) *approval.Principal {
	if kf == nil {
		return nil
	}
	k, err := keys.LoadFile(kf, "the key handed over")
	if err != nil {
		return nil
	}
	pr, ok := s.Current().Policy.ByKey(k.Public().ID())
	if !ok {
		return nil
	}
	return pr
}

// MayReadPlans reports whether the caller may read what plans bind: it
// handed over a key of the policy, or it is root or the service's own
// account, which can read the store's files anyway.
func (sc *Call) MayReadPlans() bool {
	return sc.IsOperator() || sc.Keyed()
}

// Keyed reports whether the caller handed over a key of the policy.
func (sc *Call) Keyed() bool {
	if sc.keyed == nil {
		ok := sc.State.PrincipalOf(sc.Key) != nil
		sc.keyed = &ok
	}
	return *sc.keyed
}

// IsOperator reports whether the caller runs the service: root or the
// service's own account.
func (sc *Call) IsOperator() bool {
	p := sc.Socket.Peer.UID
	return p == 0 || p == sc.State.UID
}
