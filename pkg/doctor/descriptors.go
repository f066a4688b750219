package doctor

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// MinDescriptors is the least descriptor limit doctor finds enough for the
// runner service: each connection its listeners hold is a descriptor (the
// socket's 256 calls, MCP over HTTP's 512, the page's and the bridges' 256
// each; docs/DEPLOYMENT.md, "Listener limits"), besides its store,
// journal and each run's snapshots. The unit sets LimitNOFILE=65536.
const MinDescriptors = 4096

// descriptors warns when the runner service that listens on the socket
// may open fewer than MinDescriptors: past its limit, accepting fails on
// every listener, and agents' calls wait. The service is the socket's
// peer (SO_PEERCRED); a socket systemd made has systemd for its peer, and
// then the unit's LimitNOFILE is what counts, which doctor cannot read.
func (d *doctor) descriptors() {
	sock := d.c.Service.Socket
	pid, err := socketPeer(sock)
	if err != nil || pid <= 1 {
		return
	}
	soft, err := openFilesLimit(pid)
	if err != nil || soft >= MinDescriptors {
		return
	}
	d.add(Warning, "service-descriptors", sock,
		fmt.Sprintf("the runner service (pid %d) may open %d descriptors, under the %d its listeners and runs can hold: past it, every listener stops accepting and agents' calls wait", pid, soft, MinDescriptors),
		"raise its limit: LimitNOFILE=65536 in its unit (as the one make install writes), or `ulimit -n 65536` before prod-write serve (docs/DEPLOYMENT.md)")
}

// socketPeer is the pid of the process listening on the Unix socket at
// path, as the kernel says.
func socketPeer(path string) (int, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) { cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) }); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return int(cred.Pid), nil
}

// openFilesLimit is the soft limit of open files of process pid, from
// /proc/PID/limits.
func openFilesLimit(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "Max open files")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) < 1 {
			break
		}
		if fields[0] == "unlimited" {
			return 1 << 62, nil
		}
		return strconv.ParseInt(fields[0], 10, 64)
	}
	return 0, fmt.Errorf("/proc/%d/limits: no Max open files", pid)
}
