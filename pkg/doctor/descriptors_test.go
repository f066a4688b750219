package doctor

import (
	"net"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/pkg/config"
)

// doctor reads the limit of the process that listens on the socket (here
// this test's own), never a number the configuration or a caller states:
// under MinDescriptors it warns, at or above it it says nothing, and with
// no service listening it says nothing either.
func TestDescriptorsOfTheServiceThatListens(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "pw.sock")
	var was unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &was); err != nil {
		t.Fatal(err)
	}
	if was.Max < MinDescriptors {
		t.Skipf("this process's hard limit %d is under %d: it cannot stand for a service with enough", was.Max, MinDescriptors)
	}
	t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &was) })
	find := func() []Finding {
		d := &doctor{c: &config.Config{Service: config.Service{Socket: sock}}}
		d.descriptors()
		return d.out
	}
	if got := find(); len(got) != 0 {
		t.Fatalf("no service listening: %+v", got)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, tc := range []struct {
		soft uint64
		warn bool
	}{{1024, true}, {MinDescriptors - 1, true}, {MinDescriptors, false}} {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: tc.soft, Max: was.Max}); err != nil {
			t.Fatal(err)
		}
		got := find()
		warned := len(got) == 1 && got[0].Check == "service-descriptors" && got[0].Severity == Warning && strings.Contains(got[0].Message, " may open ")
		if warned != tc.warn {
			t.Errorf("soft limit %d: %+v, want a warning: %v", tc.soft, got, tc.warn)
		}
	}
}
