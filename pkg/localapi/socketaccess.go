package localapi

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"syscall"

	"github.com/prod-write/prod-write/pkg/refusal"
)

// unreachableRefusal is the refusal of a client that could not connect to the
// runner service's socket. When connect(2) was refused for permission
// (EACCES), the socket admits its group only (docs/DEPLOYMENT.md, the
// callers' group): the refusal names that group and what this account
// lacks, as [socketAccess] finds it. Otherwise the service is not there.
func unreachableRefusal(socket string, err error) *refusal.Error {
	if errors.Is(err, syscall.EACCES) {
		return lookSocketAccess(socket).refusal(socket, err)
	}
	return refusal.New(ServiceUnavailable, "cannot reach the runner service at %s: %v", socket, err).Needs("a running prod-write serve (docs/DEPLOYMENT.md)")
}

// socketAccess is what decides whether this account may connect to the
// socket: its group and mode, and this account's groups.
type socketAccess struct {
	// statErr is why the socket could not be stat'ed: a directory on its
	// path this account may not search.
	statErr error
	mode    os.FileMode
	gid     uint32
	group   string // the group's name, or its number when it has none
	account string // this account's name, or its uid
	// held: this process has the group (or owns the socket). member:
	// the group database lists the account in it, which a session
	// started before it was added does not hold.
	held, member bool
}

// lookSocketAccess finds the socketAccess of the socket at path for this
// process.
func lookSocketAccess(path string) socketAccess {
	var a socketAccess
	a.account = strconv.Itoa(os.Getuid())
	u, uerr := user.Current()
	if uerr == nil {
		a.account = u.Username
	}
	fi, err := os.Stat(path)
	if err != nil {
		a.statErr = err
		return a
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		a.statErr = errors.New("no owner known")
		return a
	}
	a.mode, a.gid = fi.Mode().Perm(), st.Gid
	a.group = strconv.FormatUint(uint64(st.Gid), 10)
	if g, err := user.LookupGroupId(a.group); err == nil {
		a.group = g.Name
	}
	groups, _ := os.Getgroups()
	a.held = int(st.Uid) == os.Geteuid() || int(st.Gid) == os.Getegid() || slices.Contains(groups, int(st.Gid))
	if uerr == nil {
		ids, _ := u.GroupIds()
		a.member = slices.Contains(ids, strconv.FormatUint(uint64(st.Gid), 10))
	}
	return a
}

// refusal says why connecting to socket was refused for permission, and
// what this account needs.
func (a socketAccess) refusal(socket string, err error) *refusal.Error {
	switch {
	case a.statErr != nil:
		return refusal.New(ServiceUnavailable, "cannot connect to the runner service's socket %s: %v (this account, %s, cannot reach the socket: %v)", socket, err, a.account, a.statErr).
			Needs(fmt.Sprintf("search permission for %s on the directories above %s (docs/DEPLOYMENT.md)", a.account, socket))
	case a.held:
		return refusal.New(ServiceUnavailable, "cannot connect to the runner service's socket %s: %v (its mode %04o does not let its group, %s, which this account holds, connect)", socket, err, a.mode, a.group).
			Needs(`a socket its group may write: [service] socket_mode = "0660" in the service's configuration, or the socket unit's SocketMode=0660 (docs/DEPLOYMENT.md)`)
	case a.member:
		return refusal.New(ServiceUnavailable, "cannot connect to the runner service's socket %s: %v (only group %s may connect: %s is a member, but this session started before it was added)", socket, err, a.group, a.account).
			Needs(fmt.Sprintf("a new login of %s, which then holds group %s (or `newgrp %s` in this shell)", a.account, a.group, a.group))
	default:
		return refusal.New(ServiceUnavailable, "cannot connect to the runner service's socket %s: %v (only group %s may connect, and %s is not a member)", socket, err, a.group, a.account).
			Needs(fmt.Sprintf("membership of group %s for %s (`sudo usermod -aG %s %s`), then a new login (docs/DEPLOYMENT.md)", a.group, a.account, a.group, a.account))
	}
}
