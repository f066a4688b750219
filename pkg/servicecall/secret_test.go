package servicecall_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prod-write/prod-write/pkg/config"
	"github.com/prod-write/prod-write/pkg/servicecall"
)

// The service reads a secret from its credentials directory only as a
// regular file of its own, never readable or writable by group or others,
// and never through a link: whoever can place a link or a special file
// there, or read a file it left open to others, must not decide or learn
// what the program gets.
func TestSecretFromTheCredentialsDirectory(t *testing.T) {
	// elsewhere is a file of the service's own, mode 0600, outside the
	// credentials directory: the kind of file a link would hand over.
	elsewhere := filepath.Join(t.TempDir(), "runner.key")
	if err := os.WriteFile(elsewhere, []byte("another file's bytes\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	write := func(mode os.FileMode) func(string) error {
		return func(p string) error {
			if err := os.WriteFile(p, []byte("s3cret\n"), 0o600); err != nil {
				return err
			}
			return os.Chmod(p, mode)
		}
	}
	for _, tc := range []struct {
		name   string
		make   func(path string) error
		want   string // the secret, "" when refused
		refuse string // what the refusal says
	}{
		{name: "a file of mode 0600", make: write(0o600), want: "s3cret"},
		{name: "a file of mode 0400", make: write(0o400), want: "s3cret"},
		{name: "a link hands the program another file's bytes", make: func(p string) error { return os.Symlink(elsewhere, p) }, refuse: syscall.ELOOP.Error()},
		{name: "a link to a file in the directory itself", make: func(p string) error {
			if err := write(0o600)(p + ".real"); err != nil {
				return err
			}
			return os.Symlink(p+".real", p)
		}, refuse: syscall.ELOOP.Error()},
		{name: "a secret readable by the group used silently", make: write(0o640), refuse: "lets others read or write it"},
		{name: "a secret readable by others used silently", make: write(0o604), refuse: "lets others read or write it"},
		{name: "a secret writable by the group used silently", make: write(0o620), refuse: "lets others read or write it"},
		{name: "a secret writable by others used silently", make: write(0o602), refuse: "lets others read or write it"},
		// A FIFO of mode 0600 would wedge the service if opened blocking,
		// and read as an empty secret if opened without writers.
		{name: "a fifo wedges the service or hands over an empty secret", make: func(p string) error { return syscall.Mkfifo(p, 0o600) }, refuse: "not a regular file"},
		{name: "a directory", make: func(p string) error { return os.Mkdir(p, 0o700) }, refuse: "not a regular file"},
		{name: "a missing secret read as empty", make: func(string) error { return nil }, refuse: syscall.ENOENT.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := tc.make(filepath.Join(dir, "PW_SECRET")); err != nil {
				t.Fatal(err)
			}
			s := &servicecall.State{Cfg: &config.Config{Service: config.Service{Credentials: dir}}}
			type result struct {
				v   string
				err error
			}
			done := make(chan result, 1)
			go func() {
				v, err := s.Secret("PW_SECRET")
				done <- result{v, err}
			}()
			var got result
			select {
			case got = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("reading the secret did not return: the service is wedged")
			}
			if tc.refuse == "" {
				if got.err != nil || got.v != tc.want {
					t.Fatalf("secret = %q, %v; want %q", got.v, got.err, tc.want)
				}
				return
			}
			if got.err == nil {
				t.Fatalf("secret = %q, want refused (%s)", got.v, tc.refuse)
			}
			if !strings.Contains(got.err.Error(), tc.refuse) {
				t.Errorf("refused with %q, want it to say %q", got.err, tc.refuse)
			}
		})
	}
}
