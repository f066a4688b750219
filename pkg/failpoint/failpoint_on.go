//go:build failpoints

package failpoint

import (
	"os"
	"syscall"
)

// Enabled reports whether this build has failpoints.
const Enabled = true

var armed = os.Getenv("PROD_WRITE_FAILPOINT")

// Hit kills the process with SIGKILL, as a crash would, when
// $PROD_WRITE_FAILPOINT is name.
func Hit(name string) {
	if armed == name {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
