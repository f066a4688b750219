package execute

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFileSnapshotIsNotExecutable: a file parameter's snapshot is data. On
// kernels that can say so (Linux 6.3+, MFD_NOEXEC_SEAL) it is sealed
// non-executable, so the bytes a caller hands over as a file cannot be run
// from the snapshot; only the program's own snapshot is executable.
func TestFileSnapshotIsNotExecutable(t *testing.T) {
	probe, err := unix.MemfdCreate("prod-write-probe", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING|unix.MFD_NOEXEC_SEAL)
	if err != nil {
		t.Skipf("the kernel cannot make a non-executable memfd: %v", err)
	}
	unix.Close(probe)

	b, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	path := writeFile(t, filepath.Join(t.TempDir(), "true"), string(b), 0o755)

	file := snap(t, path, false)
	var st unix.Stat_t
	if err := unix.Fstat(int(file.File.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o111 != 0 {
		t.Errorf("file snapshot has mode %04o, want no execute bits", st.Mode&0o7777)
	}
	seals, err := unix.FcntlInt(file.File.Fd(), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_EXEC == 0 {
		t.Errorf("file snapshot seals %#x (%v), want F_SEAL_EXEC", seals, err)
	}

	started := false
	_, err = Run(Spec{Program: file, Argv: []string{path}, Started: func(int) { started = true }})
	if err == nil || started {
		t.Fatalf("a file snapshot ran as a program (err %v)", err)
	}
	if !errors.Is(err, syscall.EACCES) {
		t.Errorf("executing a file snapshot: %v, want EACCES", err)
	}

	// The same bytes snapshotted as the program do run.
	if res, _, _ := run(t, Spec{Program: snap(t, path, true), Argv: []string{path}}); res.ExitCode != 0 {
		t.Errorf("program snapshot: exit %d", res.ExitCode)
	}
}
