package execute

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Snapshot is a private, sealed, read-only in-memory copy of a file's bytes.
//
// The bytes live in a memfd that no path names, so nobody who can write the
// original path can reach them, and the seals forbid everyone (root, the
// program, this process) from changing them: what was hashed is what the
// program reads, or, for the program itself, what the kernel executes.
type Snapshot struct {
	File   *os.File // read-only descriptor of the sealed memfd
	Size   int64
	SHA256 string // "sha256:" + 64 lowercase hex digits

	// source is the file it was copied from, unchanged during the copy
	// (zero when unknown, or when it changed meanwhile): see IsAt.
	source Identity
}

// TooLargeError reports a file that held more than the allowed bytes.
type TooLargeError struct {
	Path string
	Max  int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is larger than its max_size of %d bytes", e.Path, e.Max)
}

const (
	copyBuffer    = 1 << 20
	progressEvery = 64 << 20
	// memfd names are limited to 249 bytes; the name is only a debugging aid
	// (it shows in /proc/PID/fd), so cutting it is harmless.
	maxMemfdName = 200
)

// TakeSnapshot copies path into a sealed memfd, hashing the bytes in the same
// pass that copies them, so the digest describes exactly the copy and never
// a second read of a file that may have changed in between.
//
// exec asks for a memfd the kernel will execute; otherwise the memfd is made
// non-executable where the kernel allows it. max < 0 means no limit; more
// than max bytes gives a *TooLargeError. progress may be nil; otherwise it is
// called with (done, total) at most every 64 MiB and once at the end, total
// being the size the file had when it was opened.
func TakeSnapshot(path string, max int64, exec bool, progress func(done, total int64)) (*Snapshot, error) {
	src, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return SnapshotFile(src, path, max, exec, progress)
}

// openRegular opens path for reading if it names a regular file.
func openRegular(path string) (*os.File, error) {
	// Refuse before opening: opening a FIFO blocks, and opening a device can
	// have side effects.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}
	// O_NONBLOCK so that a FIFO swapped in after the Stat cannot hang us; the
	// fstat of what was actually opened is the check that counts.
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
}

// SnapshotFile is TakeSnapshot of a file already open, named path in
// messages: the runner service snapshots what a caller opened and handed
// over, and never opens a path a caller names.
func SnapshotFile(src *os.File, path string, max int64, exec bool, progress func(done, total int64)) (*Snapshot, error) {
	fi, err := src.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, notRegular(path, fi.Mode())
	}

	mem, err := createMemfd("prod-write:"+filepath.Base(path), exec)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", path, err)
	}
	// The writable descriptor never leaves this function.
	defer mem.Close()

	// From byte 0 whatever the descriptor's offset: one handed over by a
	// runner service's client shares its offset with the caller.
	var before, after unix.Stat_t
	known := unix.Fstat(int(src.Fd()), &before) == nil
	size, sum, err := copyHashed(mem, io.NewSectionReader(src, 0, math.MaxInt64), max, fi.Size(), progress)
	if err == errTooLarge {
		return nil, &TooLargeError{Path: path, Max: max}
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", path, err)
	}
	snap, err := seal(mem, path, size, sum)
	if err != nil {
		return nil, err
	}
	// The source's identity, only when nothing changed it while it was
	// copied: then its bytes are the snapshot's.
	if known && unix.Fstat(int(src.Fd()), &after) == nil && identityOf(&before) == identityOf(&after) && after.Size == size {
		snap.source = identityOf(&after)
	}
	return snap, nil
}

// seal seals mem, written, and returns its read-only snapshot.
func seal(mem *os.File, path string, size int64, sum string) (*Snapshot, error) {
	if _, err := unix.FcntlInt(mem.Fd(), unix.F_ADD_SEALS,
		unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
		return nil, fmt.Errorf("snapshot of %s: sealing: %w", path, err)
	}
	// Hand out a read-only descriptor of the same memfd: the seals already
	// stop writes, and this way nothing downstream even holds a writable one,
	// and its offset starts at 0.
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", mem.Fd()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: reopening read-only: %w", path, err)
	}
	return &Snapshot{
		File:   os.NewFile(uintptr(fd), "snapshot of "+path),
		Size:   size,
		SHA256: sum,
	}, nil
}

// SealedBytes is a snapshot of b, content a caller supplied inline (MCP
// over HTTP), named name in messages: a sealed, read-only memfd like a
// file's snapshot, never on any disk. Whoever reads it hashes it as a
// file handed over (docs/adr/0039-inline-files-over-mcp-http.md).
func SealedBytes(name string, b []byte) (*os.File, error) {
	mem, err := createMemfd("prod-write:inline:"+name, false)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", name, err)
	}
	defer mem.Close()
	if _, err := mem.Write(b); err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", name, err)
	}
	snap, err := seal(mem, name, int64(len(b)), "")
	if err != nil {
		return nil, err
	}
	return snap.File, nil
}

// Close releases the snapshot's memory once nothing else holds it.
func (s *Snapshot) Close() error {
	if s == nil || s.File == nil {
		return nil
	}
	return s.File.Close()
}

func notRegular(path string, mode os.FileMode) error {
	return fmt.Errorf("snapshot of %s: not a regular file (mode %s)", path, mode)
}

// createMemfd makes a close-on-exec, sealable memfd. Since Linux 6.3 a memfd
// states whether it may be executed; older kernels reject both flags with
// EINVAL and make every memfd executable, which is then the best there is.
func createMemfd(name string, exec bool) (*os.File, error) {
	if len(name) > maxMemfdName {
		name = name[:maxMemfdName]
	}
	flags := unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	mode := unix.MFD_NOEXEC_SEAL
	if exec {
		mode = unix.MFD_EXEC
	}
	fd, err := unix.MemfdCreate(name, flags|mode)
	if err == unix.EINVAL {
		fd, err = unix.MemfdCreate(name, flags)
	}
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	return os.NewFile(uintptr(fd), "memfd:"+name), nil
}

var errTooLarge = errors.New("too large")

// copyBuffers are reused: a fresh 1 MiB buffer per snapshot was a tenth of
// the runner service's CPU per run, zeroing it and collecting it.
var copyBuffers = sync.Pool{New: func() any { b := make([]byte, copyBuffer); return &b }}

// copyHashed copies src to dst and returns how many bytes it copied and their
// sha256, or errTooLarge as soon as more than max bytes have been read.
func copyHashed(dst io.Writer, src io.Reader, max, total int64, progress func(done, total int64)) (int64, string, error) {
	if max >= 0 {
		// One byte past the limit is enough to know the file is over it.
		src = io.LimitReader(src, max+1)
	}
	sum := sha256.New()
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	var done int64
	next := int64(progressEvery)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			done += int64(n)
			if max >= 0 && done > max {
				return 0, "", errTooLarge
			}
			sum.Write(buf[:n])
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return 0, "", werr
			}
			if progress != nil && done >= next {
				progress(done, total)
				next = (done/progressEvery + 1) * progressEvery
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, "", err
		}
	}
	if progress != nil {
		progress(done, total)
	}
	return done, "sha256:" + hex.EncodeToString(sum.Sum(nil)), nil
}
