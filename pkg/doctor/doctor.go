// Package doctor checks a deployment against the trust boundary of docs/DESIGN.md §13
// and names each weakness with a fix: what an agent account could read,
// change, replace or become that decides what runs, or that would let it
// do the production write itself.
//
// # Modes
//
// A configuration that names [service] socket is a runner-service
// deployment (docs/DEPLOYMENT.md): three kinds of account, the agent, the
// service (the owner of the state directory) and the run_as accounts the
// operations run as. Doctor checks what one account (the invoking one, or
// the one named by --as) can reach there. A configuration without a socket
// is local mode: prod-write runs in-process as whoever invokes it, so there
// is no boundary to check, and doctor says so in one warning.
//
// # Limits
//
// Reach is judged by file modes and ownership, as the kernel would without
// ACLs, capabilities, sudo rules or polkit: doctor reads none of those
// (docs/DEPLOYMENT.md says what to check by hand).
package doctor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/BurntSushi/toml"
	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/execute"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/runner"
	"github.com/prod-write/prod-write/pkg/store"
)

// Severities of a finding.
const (
	Critical = "critical" // the agent can cross the boundary
	Warning  = "warning"  // a guarantee is weaker than it looks
	Info     = "info"     // not a weakness; something to know
)

// Finding is one weakness (or note) with its fix.
type Finding struct {
	Severity string `json:"severity"`
	Check    string `json:"check"`
	Path     string `json:"path,omitempty"`
	Message  string `json:"message"`
	Fix      string `json:"fix,omitempty"`
}

// Account is whose reach is checked: a uid and its groups.
type Account struct {
	Name string
	UID  int
	GIDs []int
}

// Current is the invoking account (real uid and groups).
func Current() Account {
	gids, _ := os.Getgroups()
	gids = append(gids, os.Getgid())
	name := strconv.Itoa(os.Getuid())
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	return Account{Name: name, UID: os.Getuid(), GIDs: gids}
}

// Lookup finds an account by name, with its groups, from the system's
// user database.
func Lookup(name string) (Account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return Account{}, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	a := Account{Name: u.Username, UID: uid}
	ids, err := u.GroupIds()
	if err != nil {
		return Account{}, err
	}
	for _, g := range ids {
		n, _ := strconv.Atoi(g)
		a.GIDs = append(a.GIDs, n)
	}
	gid, _ := strconv.Atoi(u.Gid)
	if !slices.Contains(a.GIDs, gid) {
		a.GIDs = append(a.GIDs, gid)
	}
	return a, nil
}

// runAsAccount is what doctor needs of an operation's run_as account.
type runAsAccount struct {
	uid  int
	home string
}

// lookupRunAs resolves a run_as name; tests replace it, so that they need
// not add accounts to the host.
var lookupRunAs = func(name string) (runAsAccount, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return runAsAccount{}, err
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return runAsAccount{}, err
	}
	return runAsAccount{uid: uid, home: u.HomeDir}, nil
}

// binaries lists prod-write's binaries on this host: the running one and
// the three that may be installed beside it. Tests replace it.
var binaries = func() []string {
	self, err := os.Executable()
	if err != nil {
		return nil
	}
	if real, err := filepath.EvalSymlinks(self); err == nil {
		self = real
	}
	out := []string{self}
	for _, name := range []string{"prod-write", "prod-write-cli", "prod-write-net"} {
		if p := filepath.Join(filepath.Dir(self), name); p != self {
			out = append(out, p)
		}
	}
	return out
}

// unitFiles lists where the service's systemd units and drop-ins may be
// installed (packaging/systemd): whoever can change one chooses what runs
// with the service's capabilities. Tests replace it.
var unitFiles = func() []string {
	var out []string
	for _, dir := range []string{"/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system"} {
		for _, name := range []string{"prod-write.service", "prod-write.socket", "prod-write.service.d", "prod-write.socket.d"} {
			out = append(out, filepath.Join(dir, name))
		}
	}
	return out
}

// walkLimit bounds every directory walk doctor makes (a run_as home, the
// configuration's tree), so that a huge tree costs seconds, not hours. A
// variable so that tests can reach it.
var walkLimit = 10000

type stat struct {
	mode os.FileMode
	uid  int
	gid  int
}

func lstat(p string) (stat, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return stat{}, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return stat{mode: fi.Mode(), uid: int(st.Uid), gid: int(st.Gid)}, nil
}

// can reports whether a has the permission bit (4 read, 2 write, 1
// search) on s, by the file's mode (ACLs are not consulted;
// docs/DEPLOYMENT.md says so).
func (a Account) can(s stat, bit os.FileMode) bool {
	if a.UID == 0 {
		return true
	}
	perm := s.mode.Perm()
	switch {
	case s.uid == a.UID:
		return perm&(bit<<6) != 0
	case slices.Contains(a.GIDs, s.gid):
		return perm&(bit<<3) != 0
	}
	return perm&bit != 0
}

// readable reports whether a can open path for reading: search permission
// on every directory on the way to the file (after symbolic links), and
// read permission on the file.
func (a Account) readable(path string) bool {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	real, err = filepath.Abs(real)
	if err != nil {
		return false
	}
	for p := filepath.Dir(real); ; p = filepath.Dir(p) {
		d, err := lstat(p)
		if err != nil || !a.can(d, 1) {
			return false
		}
		if p == filepath.Dir(p) {
			break
		}
	}
	s, err := lstat(real)
	return err == nil && a.can(s, 4)
}

// changeable reports whether a can change path: write it, or replace it
// (or a symbolic link on the way to it) through a directory above it that
// it can write. It returns the place that allows it.
func (a Account) changeable(path string) (string, bool) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", false
	}
	if at, ok := a.changeableChain(abs); ok {
		return at, true
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil && real != abs {
		return a.changeableChain(real)
	}
	return "", false
}

func (a Account) changeableChain(abs string) (string, bool) {
	s, err := lstat(abs)
	if err != nil {
		return "", false
	}
	// A symbolic link's own mode means nothing; its directory decides.
	if s.mode&os.ModeSymlink == 0 && a.can(s, 2) {
		return abs, true
	}
	child := s
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		d, err := lstat(p)
		if err != nil {
			return "", false
		}
		sticky := d.mode&os.ModeSticky != 0
		if d.mode&os.ModeSymlink == 0 && a.can(d, 2) && !(sticky && child.uid != a.UID) {
			return p, true
		}
		if p == filepath.Dir(p) {
			return "", false
		}
		child = d
	}
}

// Check examines the deployment of c from the point of view of a, the
// invoking account. When a is root, which reaches everything, the checks of
// reach are skipped with a note: pass the agent's account to [CheckAs].
func Check(c *config.Config, a Account) []Finding { return examine(c, a, false) }

// CheckAs examines the deployment of c from the point of view of a, an
// account an agent runs as, named by the administrator (--as). Unlike
// [Check], an a that is root is then itself a weakness.
func CheckAs(c *config.Config, a Account) []Finding { return examine(c, a, true) }

// maxEvidenceChecked bounds how many plans' evidence doctor reads.
const maxEvidenceChecked = 10000

// unreadableEvidence names every evidence record of the embedded store that
// cannot be read, decoded or verified: the gate refuses a plan while it has
// one (evidence_unreadable, docs/DESIGN.md §3), since it may be a veto.
func (d *doctor) unreadableEvidence() {
	if d.c.Store.Backend != "embedded" {
		return
	}
	root := d.c.StoreDir()
	dirs, err := os.ReadDir(filepath.Join(root, "evidence"))
	if err != nil {
		return
	}
	st := &store.Dir{Root: root}
	for i, e := range dirs {
		if i == maxEvidenceChecked {
			d.add(Info, "evidence-unreadable", root, fmt.Sprintf("checked the evidence of the first %d plans only", maxEvidenceChecked), "")
			return
		}
		fp := "sha256:" + e.Name()
		envs, problems, err := st.Evidence(fp)
		if err != nil {
			continue
		}
		for _, p := range problems {
			d.add(Critical, "evidence-unreadable", p.Path, fmt.Sprintf("evidence of plan %s cannot be read (%s): the gate refuses the plan while it is there", fp, p.Err),
				"restore the record from a backup, or remove it once you know it is not a veto")
		}
		if d.policy == nil {
			continue
		}
		for _, env := range envs {
			if _, err := d.policy.Open(env); err != nil {
				id, _ := approval.ID(env)
				d.add(Critical, "evidence-unreadable", filepath.Join(root, "evidence", e.Name(), id+".json"),
					fmt.Sprintf("evidence of plan %s cannot be verified (%v): the gate refuses the plan while it is there", fp, err),
					"restore the record from a backup, or remove it once you know it is not a veto")
			}
		}
	}
}

// doctor carries one run of the checks.
type doctor struct {
	c   *config.Config
	a   Account
	out []Finding

	reg    *operations.Registry
	policy *approval.Policy
}

func (d *doctor) add(sev, check, path, msg, fix string) {
	d.out = append(d.out, Finding{Severity: sev, Check: check, Path: path, Message: msg, Fix: fix})
}

func examine(c *config.Config, a Account, named bool) []Finding {
	d := &doctor{c: c, a: a}
	reg, err := runner.LoadRegistry(c)
	if err != nil {
		d.add(Critical, "registry-invalid", c.Registry, err.Error(), "fix the registry: nothing can run while it does not load")
	} else {
		d.reg = reg
		for _, w := range reg.Warnings {
			d.add(Warning, "registry-file-ignored", c.Registry, w, "rename it to end in .toml to load it, or move it out of the registry directory")
		}
		for _, op := range reg.All() {
			for _, name := range op.Env.Pass {
				if looksLikeCredential(name) {
					d.add(Warning, "env-pass-credential", op.Source, fmt.Sprintf("operation %s passes %s by value (env.pass): its value is bound into every plan and shown to every principal who reads one, and it looks like a credential", op.Name, name),
						fmt.Sprintf("move %s to env.secret: the service reads it from its own credentials, and no plan, record or receipt holds its value (docs/DEPLOYMENT.md)", name))
				}
			}
			if op.Unavailable != "" {
				d.add(Info, "operation-unavailable", op.Source, op.Unavailable,
					"install "+op.Program+" in a directory of secure_path if this host should run it; otherwise nothing to do (docs/DISTRIBUTED.md)")
			} else if mode, why := execute.Mode(op.ProgramPath); mode != "path" {
				d.add(Info, "program-from-snapshot", op.Source, fmt.Sprintf("operation %s runs %s from a sealed snapshot, as /proc/self/fd/3 (%s): a program that finds itself through $0 or its own path (a wrapper such as Debian's psql) does not work so", op.Name, op.ProgramPath, why),
					"install the program where only root can change it or any directory above it: it then runs by its path (docs/adr/0060-programs-run-by-their-path.md)")
			}
		}
	}
	// Read without LoadPolicy's refusal of a weak mode: a policy others
	// can write is reported as such, and must not hide whose keys lie
	// around.
	if data, err := os.ReadFile(c.Trust); err == nil {
		d.policy, _ = approval.ParsePolicy(c.Trust, data)
	}

	d.setuidBinaries()
	if c.Service.Socket == "" {
		d.add(Warning, "boundary", c.Path,
			"no [service] socket is configured, so there is no trust boundary: prod-write runs in-process as the account that invokes it, and an agent holding that account can read the runner key and the state, and run the operations' programs itself, without approval",
			"configure the runner service and point callers at its socket (docs/DEPLOYMENT.md); local mode is for a laptop, CI or a demo")
	} else {
		d.runAsPolicy()
		d.descriptors()
		d.credentialsNote()
		d.secretsPresent()
		switch {
		case a.UID == 0 && named:
			d.add(Critical, "run-as-reachable", "", fmt.Sprintf("%s is root: it can become every run_as account and the service account, and read every key and secret", a.Name),
				"run the agent under its own unprivileged account, which owns nothing of the deployment")
		case a.UID == 0:
			d.add(Info, "checked-as-root", "", "checking as root, who can reach everything: pass --as AGENT_USER to check what an agent account can reach", "")
		default:
			d.reach()
		}
	}
	d.keyFiles()
	d.unreadableEvidence()
	if fs, err := statfsType(c.State); err == nil && fs == tmpfsMagic {
		d.add(Warning, "state-not-durable", c.State, "the state directory is on tmpfs: fsync does not make receipts or consumption survive a reboot", "put the state directory on a disk-backed filesystem (ext4, xfs)")
	}
	d.out = append(d.out, trustFindings(c)...)
	d.out = append(d.out, witnessFindings(c, d.policy)...)
	d.history()
	if (c.Pin.Trust == "" || c.Pin.Registry == "") && d.policy != nil && d.reg != nil {
		d.add(Info, "pins", c.Path, fmt.Sprintf("the policy is not pinned; to pin what is there now, add [pin] trust = %q and registry = %q", d.policy.Digest, d.reg.Digest), "")
	}
	sort.SliceStable(d.out, func(i, j int) bool { return rank(d.out[i].Severity) < rank(d.out[j].Severity) })
	return d.out
}

// looksLikeCredential reports whether an environment variable's name says
// it holds a credential: *PASSWORD*, *PASSWD*, *TOKEN*, *SECRET*, *KEY*,
// *CREDENTIAL*, in any case.
func looksLikeCredential(name string) bool {
	n := strings.ToUpper(name)
	for _, w := range []string{"PASSWORD", "PASSWD", "TOKEN", "SECRET", "KEY", "CREDENTIAL"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

func rank(s string) int {
	return map[string]int{Critical: 0, Warning: 1, Info: 2}[s]
}

// setuidBinaries flags a setuid or setgid prod-write: there is no setuid mode
// (docs/DESIGN.md §13). Such a binary runs whatever its invoker asks with its owner's
// privilege and no boundary at all: it no longer drops privilege, opens
// files as the caller or runs programs as anyone else.
func (d *doctor) setuidBinaries() {
	for _, p := range binaries() {
		fi, err := os.Stat(p)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			st := fi.Sys().(*syscall.Stat_t)
			d.add(Critical, "setuid-binary", p, fmt.Sprintf("%s is setuid or setgid (mode %s, owner %d:%d): there is no setuid mode any more, and it would run whatever its invoker asks with that account's privilege and no boundary", p, fi.Mode(), st.Uid, st.Gid),
				fmt.Sprintf("chmod u-s,g-s %s, and deploy the runner service instead (docs/DEPLOYMENT.md)", p))
		}
	}
}

// runAsPolicy checks what the registry says each operation runs as, which
// does not depend on the account checked. The service account is the
// owner of the state directory.
func (d *doctor) runAsPolicy() {
	if d.reg == nil {
		return
	}
	if d.c.Service.AllowSharedAccount {
		d.add(Warning, "shared-account", d.c.Path, "[service] allow_shared_account = true: the service runs a program as the caller's own account or as its own when run_as names it, so those operations have no separation",
			"remove allow_shared_account (it is for a one-account demo or test) and give each operation a run_as account of its own")
	}
	svc := -1
	if s, err := os.Stat(d.c.State); err == nil {
		svc = int(s.Sys().(*syscall.Stat_t).Uid)
	}
	for _, op := range d.reg.All() {
		src := op.Source
		if i := strings.LastIndexByte(src, ':'); i > 0 {
			src = src[:i]
		}
		if op.RunAs == "" {
			if op.IsMutating() {
				d.add(Critical, "run-as-missing", src, fmt.Sprintf("mutating operation %s names no run_as account: under the service it has no account of its own to hold its production permission, and it must never run as the caller or as the service", op.Name),
					fmt.Sprintf("add run_as = \"ACCOUNT\" to %s: an account (e.g. deployer) that holds only the permission this operation needs", op.Name))
			}
			continue
		}
		u, err := lookupRunAs(op.RunAs)
		if err != nil {
			d.add(Warning, "run-as-unknown", src, fmt.Sprintf("operation %s runs as %s, which is no account on this host: the service cannot run it", op.Name, op.RunAs),
				fmt.Sprintf("create it: useradd --system --shell /usr/sbin/nologin %s", op.RunAs))
			continue
		}
		if u.uid == 0 {
			if d.c.Service.AllowRoot {
				d.add(Info, "run-as-root", src, fmt.Sprintf("operation %s runs as root ([service] allow_root = true)", op.Name), "")
			} else {
				d.add(Critical, "run-as-root", src, fmt.Sprintf("operation %s runs as root without [service] allow_root: the service refuses it, and root is more than any one production write needs", op.Name),
					fmt.Sprintf("give %s a run_as account that holds only the permission it needs", op.Name))
			}
		}
		if u.uid == svc {
			d.add(Critical, "run-as-service", src, fmt.Sprintf("operation %s runs as %s, the service's own account (owner of %s): its program could read the runner key, the secrets and the state, and forge or delete receipts", op.Name, op.RunAs, d.c.State),
				fmt.Sprintf("give %s a run_as account of its own, distinct from the service account", op.Name))
		}
	}
}

// reach checks what d.a, an unprivileged account, can read, change or
// become under the service.
func (d *doctor) reach() {
	c, a := d.c, d.a
	if s, err := os.Stat(c.State); err == nil && int(s.Sys().(*syscall.Stat_t).Uid) == a.UID {
		d.add(Critical, "service-reachable", c.State, fmt.Sprintf("%s owns the state directory: it is the service account, which holds every key, secret and receipt", a.Name),
			"run the agent under an account of its own; only the service account (prod-write) may own the state")
	}

	writable := func(check, path, what, fix string) {
		if path == "" {
			return
		}
		if at, ok := a.changeable(path); ok {
			d.add(Critical, check, path, fmt.Sprintf("%s can change the %s (through %s)", a.Name, what, at), fix)
		}
	}
	rootOwned := func(path string) string {
		return fmt.Sprintf("make %s and every directory above it owned by root and not writable by %s (chown root:root, chmod go-w)", path, a.Name)
	}
	writable("config-writable", c.Path, "configuration", rootOwned(c.Path))
	writable("policy-writable", c.Trust, "trust policy", rootOwned(c.Trust))
	writable("registry-writable", c.Registry, "registry directory", rootOwned(c.Registry))
	files, _ := filepath.Glob(filepath.Join(c.Registry, "*.toml"))
	for _, f := range files {
		writable("registry-writable", f, "operation file", rootOwned(f))
	}
	// The history decides what replay accepts and what the service
	// loads (docs/adr/0059-the-protected-branch-is-the-history.md).
	for _, p := range []string{c.HistoryDir(), filepath.Join(c.HistoryDir(), "versions.toml"), filepath.Join(c.HistoryDir(), "trust"), filepath.Join(c.HistoryDir(), "operations")} {
		if _, err := os.Lstat(p); err == nil {
			writable("history-writable", p, "history replay judges runs by", rootOwned(p))
		}
	}
	writable("mcp-tokens-writable", c.Service.MCPTokens, "MCP bearer token file", rootOwned(c.Service.MCPTokens))
	for _, p := range binaries() {
		if _, err := os.Stat(p); err == nil {
			writable("binary-writable", p, "prod-write binary", rootOwned(p))
		}
	}
	for _, p := range unitFiles() {
		if _, err := os.Lstat(p); err == nil {
			writable("unit-writable", p, "service's systemd unit", rootOwned(p))
		}
	}
	if d.reg != nil {
		for _, op := range d.reg.All() {
			if op.Unavailable != "" {
				continue // no program here to change; reported with the registry
			}
			if at, ok := a.changeable(op.ProgramPath); ok {
				d.add(Critical, "program-writable", op.ProgramPath, fmt.Sprintf("operation %s runs %s, which %s can change (through %s)", op.Name, op.ProgramPath, a.Name, at),
					"install the program in a root-owned directory and list only such directories in secure_path")
			}
		}
	}

	stateFix := fmt.Sprintf("make %s owned by the service account and private to it (chown -R prod-write:prod-write %s; chmod 0700 %s)", c.State, c.State, c.State)
	journalDir := filepath.Dir(c.JournalPath())
	through := map[string]bool{}
	for _, p := range []string{c.State, c.StoreDir(), journalDir, c.JournalPath()} {
		if at, ok := a.changeable(p); ok && !through[at] {
			through[at] = true
			d.add(Critical, "state-writable", p, fmt.Sprintf("%s can write the state outside prod-write (through %s): plans, evidence, consumption markers or receipts could be deleted or replaced", a.Name, at), stateFix)
		}
	}
	for _, p := range []string{c.State, c.StoreDir(), journalDir, c.JournalPath()} {
		if a.readable(p) {
			d.add(Critical, "state-readable", p, fmt.Sprintf("%s can read %s: the store and journal are the service's alone", a.Name, p), stateFix)
			break
		}
	}

	d.socket()
	d.credentials()
	d.runAsReach()
	d.principalKeys()
}

// socket checks that the account cannot put its own listener where callers
// connect: they hand the service their key and stdio as descriptors.
func (d *doctor) socket() {
	sock, a := d.c.Service.Socket, d.a
	fix := fmt.Sprintf("let systemd create %s (prod-write.socket): its directory root-owned, mode 0755; without systemd, the service's: install -d -o prod-write -g prod-write -m 0755 %s (docs/DEPLOYMENT.md)", filepath.Dir(sock), filepath.Dir(sock))
	if at, ok := a.changeable(filepath.Dir(sock)); ok {
		d.add(Critical, "socket-replaceable", sock, fmt.Sprintf("%s can replace the service's socket (through %s): a listener of its own would receive callers' keys and stdio", a.Name, at), fix)
		return
	}
	if s, err := lstat(sock); err == nil && s.uid == a.UID {
		d.add(Critical, "socket-replaceable", sock, fmt.Sprintf("%s owns the socket %s: it may be listening on it in the service's place", a.Name, sock), fix)
	}
}

// credentialsDir is the directory of production secrets doctor can see:
// [service] credentials, or when the service takes them from systemd
// ($CREDENTIALS_DIRECTORY, which doctor cannot see), the credentials
// directory beside the configuration that docs/DEPLOYMENT.md loads them
// from.
func (d *doctor) credentialsDir() string {
	if d.c.Service.Credentials != "" {
		return d.c.Service.Credentials
	}
	if p := filepath.Join(d.c.Dir, "credentials"); dirExists(p) {
		return p
	}
	return ""
}

func dirExists(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// credentialsNote says when there is no credentials directory to check
// although an operation needs a secret.
func (d *doctor) credentialsNote() {
	if d.credentialsDir() != "" || d.reg == nil {
		return
	}
	if slices.ContainsFunc(d.reg.All(), func(op *operations.Operation) bool { return len(op.Env.Secret) > 0 }) {
		d.add(Info, "credentials", d.c.Path, "no credentials directory to check: the service reads $CREDENTIALS_DIRECTORY, filled by systemd from the unit's LoadCredential= sources, which doctor does not read", "keep those sources in a directory only root or prod-write can read, e.g. /etc/prod-write/credentials (0700)")
	}
}

// secretsPresent checks that each env.secret of each operation has its
// file in the credentials directory: run refuses a plan whose secret it
// cannot read, and status says so (docs/DEPLOYMENT.md). A directory the
// checking account cannot list says nothing.
func (d *doctor) secretsPresent() {
	dir := d.credentialsDir()
	if dir == "" || d.reg == nil || d.c.Service.Secrets != "" {
		return
	}
	if _, err := os.ReadDir(dir); err != nil {
		return
	}
	for _, op := range d.reg.All() {
		for _, name := range op.Env.Secret {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err == nil && fi.Mode().IsRegular() {
				continue
			}
			d.add(Warning, "secret-missing", filepath.Join(dir, name), fmt.Sprintf("operation %s needs the secret %s, which is not a file in %s: run refuses its plans, and status says so", op.Name, name, dir),
				fmt.Sprintf("(umask 077 && printf '%%s' \"$VALUE\" > %s) && chown prod-write:prod-write %s", filepath.Join(dir, name), filepath.Join(dir, name)))
		}
	}
}

func (d *doctor) credentials() {
	dir, a := d.credentialsDir(), d.a
	if dir == "" {
		return
	}
	fix := fmt.Sprintf("chown -R prod-write:prod-write %s; chmod 0700 %s; chmod 0600 each file in it", dir, dir)
	if at, ok := a.changeable(dir); ok {
		d.add(Critical, "credentials-writable", dir, fmt.Sprintf("%s can change the credentials directory (through %s): it could replace a production secret with its own", a.Name, at), fix)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if a.readable(p) {
			d.add(Critical, "secret-readable", p, fmt.Sprintf("%s can read the production secret %s", a.Name, e.Name()), fix)
		}
	}
}

// runAsReach checks whether the account can become, or act as, a run_as
// account: the same uid, or a home it can write (a login file, an
// authorized_keys, a shell's startup file).
func (d *doctor) runAsReach() {
	if d.reg == nil {
		return
	}
	a := d.a
	seen := map[string]bool{}
	for _, op := range d.reg.All() {
		if op.RunAs == "" || seen[op.RunAs] {
			continue
		}
		seen[op.RunAs] = true
		u, err := lookupRunAs(op.RunAs)
		if err != nil {
			continue
		}
		if u.uid == a.UID {
			d.add(Critical, "run-as-reachable", "", fmt.Sprintf("%s has the uid of run_as account %s (%d): it holds the production permission itself and can write without approval", a.Name, op.RunAs, u.uid),
				fmt.Sprintf("give the agent and %s distinct accounts", op.RunAs))
			continue
		}
		d.home(op.RunAs, u.home)
	}
}

func (d *doctor) home(name, home string) {
	a := d.a
	if home == "" || home == "/" || !dirExists(home) {
		return
	}
	fix := fmt.Sprintf("make %s and everything in it owned by %s (or root) and not writable by %s", home, name, a.Name)
	if at, ok := a.changeable(home); ok {
		d.add(Critical, "run-as-home-writable", home, fmt.Sprintf("%s can change the home directory of run_as account %s (through %s): a startup file or authorized_keys there lets it act as %s", a.Name, name, at, name), fix)
		return
	}
	n := 0
	err := filepath.WalkDir(home, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == home {
			return nil
		}
		if n++; n > walkLimit {
			return errWalkLimit
		}
		if e.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		s, err := lstat(p)
		if err != nil || !a.can(s, 2) {
			return nil
		}
		d.add(Critical, "run-as-home-writable", p, fmt.Sprintf("%s can change %s in the home of run_as account %s: a startup file or authorized_keys there lets it act as %s", a.Name, p, name, name), fix)
		if e.IsDir() {
			return fs.SkipDir
		}
		return nil
	})
	if errors.Is(err, errWalkLimit) {
		d.add(Info, "run-as-home-partial", home, fmt.Sprintf("the home of %s has more than %d entries: only the first were checked", name, walkLimit), "")
	}
}

var errWalkLimit = errors.New("walk limit")

// keyFiles checks the keys and secret files the configuration names:
// present, and with a mode that only their owner can read (prod-write
// refuses to load anything else). Who can reach them is [doctor.reach]'s.
func (d *doctor) keyFiles() {
	c := d.c
	var modeOf func(check, path, what string, s os.FileInfo)
	mode := func(check, path, what string, missingFix string) {
		s, err := os.Stat(path)
		if err != nil {
			d.add(Critical, check+"-missing", path, fmt.Sprintf("the %s %s cannot be read: %v", what, path, err), missingFix)
			return
		}
		modeOf(check, path, what, s)
	}
	// A bridge's files are read only when that bridge is on (slack_channel,
	// github_repo), as serve and bridge serve read them: one that is off
	// needs none of them present, but a present one others can read is
	// still reported.
	optional := func(on bool, check, path, what, missingFix string) {
		if on {
			mode(check, path, what, missingFix)
		} else if s, err := os.Stat(path); err == nil {
			modeOf(check, path, what, s)
		}
	}
	modeOf = func(check, path, what string, s os.FileInfo) {
		if s.Mode().Perm()&0o077 != 0 {
			sev := Warning // the service refuses to load it
			if s.Mode().Perm()&0o004 != 0 {
				sev = Critical // and anyone who can reach the directory can read it
			}
			d.add(sev, "key-mode", path, fmt.Sprintf("the %s has mode %04o: prod-write refuses to load a key or secret that others can read", what, s.Mode().Perm()),
				"chmod 0600 "+path)
		}
	}
	if c.RunnerKey == "" {
		d.add(Critical, "runner-key-missing", c.Path, "no runner_key is configured: this host cannot sign receipts", "set runner_key in prod-write.toml to a key whose principal holds the runner role")
	} else {
		mode("runner-key", c.RunnerKey, "runner key", "create it as the service account: prod-write keygen --out "+c.RunnerKey)
	}
	slack, github := c.Bridge.SlackChannel != "", c.Bridge.GitHubRepo != ""
	if c.Bridge.Key != "" {
		optional(slack || github, "bridge-key", c.Bridge.Key, "bridge key", "create it as the service account: prod-write keygen --out "+c.Bridge.Key)
	}
	for _, s := range d.bridgeSecrets() {
		optional(s.slack && slack || !s.slack && github, "bridge-secret", s.path, s.what, "write the secret into "+s.path+" (mode 0600, owned by the service account)")
	}
	// MCP over HTTPS (docs/adr/0047-mcp-http-limits-tls-origin-body.md):
	// serve refuses to start with a key others can read, or none.
	if k := c.Service.MCPTLSKey; k != "" {
		optional(c.Service.MCPListen != "", "mcp-tls-key", k, "MCP TLS key", "write the key of service.mcp_tls_cert into "+k+" (mode 0600, owned by the service account)")
	}
	// Token introspection's client secrets (ADR 0047): serve reads each
	// at load and refuses one others can read, or none.
	for _, p := range introspectionSecrets(c.Service.MCPTokens) {
		optional(c.Service.MCPListen != "", "mcp-introspection-secret", p, "MCP introspection client secret", "write the introspection client's secret into "+p+" (mode 0600, owned by the service account)")
	}
}

// introspectionSecrets are the client_secret_file paths of the MCP tokens
// file's [[oauth.introspection]] entries, relative ones resolved against
// the file's directory as serve resolves them. A tokens file that cannot
// be read or decoded names none here: serve refuses it, and reach says
// who can change it.
func introspectionSecrets(tokens string) []string {
	if tokens == "" {
		return nil
	}
	var f struct {
		OAuth struct {
			Introspection []struct {
				ClientSecretFile string `toml:"client_secret_file"`
			} `toml:"introspection"`
		} `toml:"oauth"`
	}
	if _, err := toml.DecodeFile(tokens, &f); err != nil {
		return nil
	}
	var out []string
	for _, in := range f.OAuth.Introspection {
		p := in.ClientSecretFile
		if p == "" {
			continue
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(filepath.Dir(tokens), p)
		}
		out = append(out, p)
	}
	return out
}

type namedFile struct {
	path, what string
	slack      bool // read by the Slack bridge, else by the GitHub bridge
}

func (d *doctor) bridgeSecrets() []namedFile {
	var out []namedFile
	for _, s := range []namedFile{
		{d.c.Bridge.SlackSigningSecretFile, "Slack signing secret file", true},
		{d.c.Bridge.SlackBotTokenFile, "Slack bot token file", true},
		{d.c.Bridge.GitHubTokenFile, "GitHub token file", false},
	} {
		if s.path != "" {
			out = append(out, namedFile{d.c.Abs(s.path), s.what, s.slack})
		}
	}
	return out
}

// principalKeys finds private keys the account can read: the ones the
// configuration names, and every *.key under the configuration's directory
// (init --demo keeps a cast's keys there) and beside the named keys. A key
// is matched to its principal through the trust policy.
func (d *doctor) principalKeys() {
	c, a := d.c, d.a
	done := map[string]bool{}
	for _, k := range []namedFile{{path: c.RunnerKey, what: "runner key"}, {path: c.Bridge.Key, what: "bridge key"}} {
		if k.path == "" {
			continue
		}
		done[realPath(k.path)] = true
		if !a.readable(k.path) {
			continue
		}
		who := ""
		if pr := d.principalOf(k.path); pr != nil {
			who = fmt.Sprintf(", the key of principal %s (roles %s)", pr.ID, strings.Join(pr.Roles, ", "))
		}
		d.add(Critical, "key-readable", k.path, fmt.Sprintf("%s can read the %s%s: it could sign as the service", a.Name, k.what, who),
			fmt.Sprintf("make it readable by the service account alone (chown prod-write:prod-write %s; chmod 0600 %s)", k.path, k.path))
	}
	for _, s := range d.bridgeSecrets() {
		done[realPath(s.path)] = true
		if a.readable(s.path) {
			d.add(Critical, "secret-readable", s.path, fmt.Sprintf("%s can read the %s", a.Name, s.what),
				fmt.Sprintf("make it readable by the service account alone (chown prod-write:prod-write %s; chmod 0600 %s)", s.path, s.path))
		}
	}

	for _, p := range d.keyCandidates() {
		rp := realPath(p)
		if done[rp] {
			continue
		}
		done[rp] = true
		if !a.readable(p) {
			continue
		}
		pr := d.principalOf(p)
		if pr == nil || !slices.ContainsFunc(pr.Roles, func(r string) bool { return r != approval.RoleAgent }) {
			continue
		}
		s, err := os.Stat(p)
		if err != nil {
			continue
		}
		roles := strings.Join(pr.Roles, ", ")
		if int(s.Sys().(*syscall.Stat_t).Uid) == a.UID {
			d.add(Warning, "principal-key-held", p, fmt.Sprintf("%s owns the private key of principal %s (roles %s): whoever controls the account acts as %s", a.Name, pr.ID, roles, pr.ID),
				fmt.Sprintf("if %s is an agent's account, move the key to the person or host that holds %s's roles", a.Name, pr.ID))
			continue
		}
		d.add(Critical, "principal-key-readable", p, fmt.Sprintf("%s can read the private key of principal %s (roles %s): it could sign as %s", a.Name, pr.ID, roles, pr.ID),
			fmt.Sprintf("chmod 0600 %s, owned by whoever holds %s's roles, or move it off this host", p, pr.ID))
	}
}

func realPath(p string) string {
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	return p
}

// keyCandidates lists *.key files under the configuration's directory
// (not inside the state, whose store can be large) and beside the keys
// the configuration names.
func (d *doctor) keyCandidates() []string {
	c := d.c
	var out []string
	n := 0
	state := realPath(c.State)
	_ = filepath.WalkDir(c.Dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if n++; n > walkLimit {
			return fs.SkipAll
		}
		if e.IsDir() && realPath(p) == state {
			return fs.SkipDir
		}
		if !e.IsDir() && strings.HasSuffix(p, ".key") {
			out = append(out, p)
		}
		return nil
	})
	for _, k := range []string{c.RunnerKey, c.Bridge.Key} {
		if k != "" {
			m, _ := filepath.Glob(filepath.Join(filepath.Dir(k), "*.key"))
			out = append(out, m...)
		}
	}
	return out
}

// principalOf returns the principal whose private key is in the file at
// path, or nil.
func (d *doctor) principalOf(path string) *approval.Principal {
	if d.policy == nil {
		return nil
	}
	pub, err := publicKeyOf(path)
	if err != nil {
		return nil
	}
	pr, _ := d.policy.ByKey(pub.ID())
	return pr
}

// publicKeyOf reads the private key in the file at path and returns its
// public half. keys.Load refuses a file that others can read, which is
// exactly the file doctor is looking at; rather than parse keys a second
// way, doctor copies the bytes into a memory file (memfd) of mode 0600 and
// has keys.Load read that: the key is parsed by pkg/keys alone, and never
// copied to disk.
func publicKeyOf(path string) (keys.Public, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, 4097))
	f.Close()
	if err != nil {
		return nil, err
	}
	defer clear(data)
	if len(data) == 0 || len(data) > 4096 || !bytes.Contains(data, []byte("PRIVATE KEY")) {
		return nil, keys.ErrNotAKey
	}
	fd, err := unix.MemfdCreate("prod-write-doctor-key", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	mem := os.NewFile(uintptr(fd), "memfd")
	defer mem.Close()
	if err := mem.Chmod(0o600); err != nil {
		return nil, err
	}
	if _, err := mem.Write(data); err != nil {
		return nil, err
	}
	k, err := keys.Load(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return nil, err
	}
	return k.Public(), nil
}

// trustFindings reads the trust policy leniently, so that a principal
// without a key is named rather than only failing the whole policy.
func trustFindings(c *config.Config) []Finding {
	data, err := os.ReadFile(c.Trust)
	if err != nil {
		return []Finding{{Severity: Critical, Check: "policy-unreadable", Path: c.Trust, Message: err.Error(), Fix: "create the trust policy"}}
	}
	var raw struct {
		Principal []struct {
			ID  string `toml:"id"`
			Key string `toml:"key"`
		} `toml:"principal"`
	}
	var out []Finding
	if _, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&raw); err == nil {
		for _, p := range raw.Principal {
			if p.Key == "" {
				out = append(out, Finding{Severity: Critical, Check: "principal-without-key", Path: c.Trust,
					Message: fmt.Sprintf("principal %q has no key: nothing it signs can verify, and the policy does not load", p.ID),
					Fix:     "add its public key (prod-write keygen prints it) or remove the principal"})
			}
		}
	}
	if _, err := approval.ParsePolicy(c.Trust, data); err != nil && len(out) == 0 {
		out = append(out, Finding{Severity: Critical, Check: "policy-invalid", Path: c.Trust, Message: err.Error(), Fix: "fix the trust policy"})
	}
	return out
}

const tmpfsMagic = 0x01021994

func statfsType(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Type), nil
}
