// Package doctor checks a deployment against the trust boundary of SPEC §13
// and names each weakness with a fix: what an agent account could change,
// read or replace that decides whether something runs.
package doctor

import (
	"bytes"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"syscall"

	"github.com/BurntSushi/toml"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/operations"
	"github.com/prod-write/prod-write/pkg/config"
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

// can reports whether a has the permission bit (4 read, 2 write) on s, by
// the file's mode (ACLs are not consulted; docs/DEPLOYMENT.md says so).
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

// Check examines the deployment of c from a's point of view.
func Check(c *config.Config, a Account) []Finding {
	var out []Finding
	add := func(sev, check, path, msg, fix string) {
		out = append(out, Finding{Severity: sev, Check: check, Path: path, Message: msg, Fix: fix})
	}
	if a.UID == 0 {
		add(Info, "checked-as-root", "", "checking as root, who can change everything: pass --as AGENT_USER to check what an agent account can reach", "")
	} else {
		writable := func(check, path, what string) {
			if at, ok := a.changeable(path); ok {
				add(Critical, check, path, fmt.Sprintf("%s can change the %s (through %s)", a.Name, what, at),
					fmt.Sprintf("make %s and every directory above it owned by root and not writable by %s (e.g. chown root:root, chmod go-w)", path, a.Name))
			}
		}
		writable("config-writable", c.Path, "configuration")
		writable("policy-writable", c.Trust, "trust policy")
		writable("registry-writable", c.Registry, "registry directory")
		files, _ := filepath.Glob(filepath.Join(c.Registry, "*.toml"))
		for _, f := range files {
			writable("registry-writable", f, "operation file")
		}
		for _, p := range []string{c.State, c.StoreDir(), c.JournalPath()} {
			if at, ok := a.changeable(p); ok {
				add(Critical, "state-writable", p, fmt.Sprintf("%s can write the state directory outside prod-write (through %s): plans, evidence, consumption markers or receipts could be deleted or replaced", a.Name, at),
					"make the state directory owned by the prod-write group with mode 2770, and run prod-write setgid to that group (docs/DEPLOYMENT.md)")
			}
		}
		if reg, err := operations.Load(c.Registry, c.SecurePath); err == nil {
			for _, op := range reg.All() {
				if at, ok := a.changeable(op.ProgramPath); ok {
					add(Critical, "program-writable", op.ProgramPath, fmt.Sprintf("operation %s runs %s, which %s can change (through %s)", op.Name, op.ProgramPath, a.Name, at),
						"install the program in a root-owned directory and list only such directories in secure_path")
				}
			}
		}
	}

	keyCheck := func(check, path, what string) {
		s, err := lstat(path)
		if err != nil {
			add(Critical, check+"-missing", path, fmt.Sprintf("the %s %s cannot be read: %v", what, path, err), "create it with prod-write keygen --out "+path)
			return
		}
		if s.mode.Perm()&0o007 != 0 {
			add(Critical, "key-readable", path, fmt.Sprintf("the %s has mode %04o: other users can read or write it", what, s.mode.Perm()), "chmod 0600 (or 0640 with the prod-write group) "+path)
		}
		if a.UID != 0 && s.uid != a.UID && a.can(s, 4) {
			add(Critical, "key-readable", path, fmt.Sprintf("%s can read the %s", a.Name, what), "make it readable only by root and the prod-write group")
		}
	}
	if c.RunnerKey == "" {
		add(Critical, "runner-key-missing", c.Path, "no runner_key is configured: this host cannot sign receipts", "set runner_key in prod-write.toml to a key whose principal holds the runner role")
	} else {
		keyCheck("runner-key", c.RunnerKey, "runner key")
	}
	if c.Bridge.Key != "" {
		keyCheck("bridge-key", c.Bridge.Key, "bridge key")
	}
	for _, secret := range []struct{ path, what string }{
		{c.Bridge.SlackSigningSecretFile, "Slack signing secret"},
		{c.Bridge.SlackBotTokenFile, "Slack bot token"},
		{c.Bridge.GitHubTokenFile, "GitHub token"},
	} {
		if secret.path != "" {
			keyCheck("bridge-secret", c.Abs(secret.path), secret.what+" file")
		}
	}

	if fs, err := statfsType(c.State); err == nil && fs == tmpfsMagic {
		add(Warning, "state-not-durable", c.State, "the state directory is on tmpfs: fsync does not make receipts or consumption survive a reboot", "put the state directory on a disk-backed filesystem (ext4, xfs)")
	}

	out = append(out, trustFindings(c)...)

	if c.Pin.Trust == "" || c.Pin.Registry == "" {
		p, perr := approval.LoadPolicy(c.Trust)
		reg, rerr := operations.Load(c.Registry, c.SecurePath)
		if perr == nil && rerr == nil {
			add(Info, "pins", c.Path, fmt.Sprintf("the policy is not pinned; to pin what is there now, add [pin] trust = %q and registry = %q", p.Digest, reg.Digest), "")
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i].Severity) < rank(out[j].Severity) })
	return out
}

func rank(s string) int {
	return map[string]int{Critical: 0, Warning: 1, Info: 2}[s]
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
