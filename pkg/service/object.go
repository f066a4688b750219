package service

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotThatPath is SameObject's error when a descriptor is not the object
// its path names in the service's own namespace.
var ErrNotThatPath = errors.New("not the object that path names in the runner service's namespace")

// SameObject reports whether the handed-over descriptor fd is the object
// that path names in the service's own mount namespace. The kernel's name
// for a descriptor (readlink of /proc/self/fd/N) is the path in the
// namespace where it was opened, so a caller in a user namespace of its
// own, with its directory bind-mounted over a reviewed one, hands over a
// descriptor that reads back as the reviewed path. A descriptor stands for
// a path only when this holds (docs/DESIGN.md §13,
// docs/adr/0036-the-service-never-waits-on-a-caller.md):
//
//   - path, opened here with O_PATH|O_NOFOLLOW (never read; its last
//     component may not be a symbolic link, the kernel's names have none),
//     is the same device, inode and mount as fd; or
//   - the service may not search its way to path (a directory private to
//     the caller), and fd is on a mount of the service's own namespace: a
//     caller cannot mount anything there, so the kernel's name for fd is
//     its path here.
func SameObject(fd *os.File, path string) error {
	want, err := objectID(int(fd.Fd()))
	if err != nil {
		return fmt.Errorf("the descriptor handed over: %w", err)
	}
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.EACCES) {
		here, merr := mountedHere(want.mnt)
		switch {
		case merr != nil:
			return fmt.Errorf("%s: %w", path, merr)
		case !here:
			return fmt.Errorf("%s: %w (it was opened on a mount of another namespace)", path, ErrNotThatPath)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w: %w", path, ErrNotThatPath, err)
	}
	defer unix.Close(pfd)
	got, err := objectID(pfd)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if got != want {
		return fmt.Errorf("%s: %w (another file system or file is mounted or linked there for the caller)", path, ErrNotThatPath)
	}
	return nil
}

// mountedHere reports whether mount id m is a mount of this process's
// mount namespace (the calling thread's, which in the service is every
// thread's). Mount ids are unique on the system while mounted.
func mountedHere(m uint64) (bool, error) {
	f, err := os.Open("/proc/thread-self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	want := strconv.FormatUint(m, 10) + " "
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), want) {
			return true, nil
		}
	}
	return false, sc.Err()
}

// object is what tells two open files apart: device, inode, mount.
type object struct {
	devMajor, devMinor uint32
	ino                uint64
	mnt                uint64
}

func objectID(fd int) (object, error) {
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH|unix.AT_STATX_DONT_SYNC, unix.STATX_INO|unix.STATX_MNT_ID, &st); err != nil {
		return object{}, fmt.Errorf("statx: %w", err)
	}
	o := object{devMajor: st.Dev_major, devMinor: st.Dev_minor, ino: st.Ino}
	if st.Mask&unix.STATX_MNT_ID != 0 {
		o.mnt = st.Mnt_id
		return o, nil
	}
	// Kernels before 5.8: the mount id is in fdinfo (since 3.15).
	m, err := fdinfoMountID(fd)
	if err != nil {
		return object{}, err
	}
	o.mnt = m
	return o, nil
}

func fdinfoMountID(fd int) (uint64, error) {
	f, err := os.Open("/proc/thread-self/fdinfo/" + strconv.Itoa(fd))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "mnt_id:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, errors.New("no mount id for the descriptor")
}
