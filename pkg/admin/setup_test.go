package admin

import (
	"errors"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/localapi"
)

// A missing service account is refused, by name, before anything is
// written: setup creates no account, and a key or directory chowned to a
// uid nobody holds yet would be given to whoever is created next with it.
func TestSetupServiceRefusesAMissingAccount(t *testing.T) {
	root := t.TempDir()
	_, err := SetupService(SetupServiceRequest{
		Root: root, Etc: "/etc/prod-write", State: "/var/lib/prod-write", Socket: "/run/prod-write/prod-write.sock",
		User: "pw-missing", SocketGroup: "",
		LookupUser: func(name string) (*user.User, error) { return nil, user.UnknownUserError(name) },
	})
	var de *localapi.DataError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), `no account "pw-missing"`) {
		t.Fatalf("got %v, want a refusal naming the account", err)
	}
	if localapi.ExitCode(err) != localapi.ExitDataErr {
		t.Errorf("exit %d, want %d", localapi.ExitCode(err), localapi.ExitDataErr)
	}
	if ents, _ := os.ReadDir(root); len(ents) != 0 {
		t.Errorf("setup wrote %v", ents)
	}
}

// root as the service account is refused: the service must not be root.
func TestSetupServiceRefusesRoot(t *testing.T) {
	root := t.TempDir()
	_, err := SetupService(SetupServiceRequest{
		Root: root, Etc: "/etc/prod-write", State: "/var/lib/prod-write", Socket: "/run/prod-write/prod-write.sock",
		User: "root",
		LookupUser: func(name string) (*user.User, error) {
			return &user.User{Username: name, Uid: "0", Gid: "0", HomeDir: "/root"}, nil
		},
	})
	if err == nil || !strings.Contains(err.Error(), "must not be root") {
		t.Fatalf("got %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc")); err == nil {
		t.Error("setup wrote /etc")
	}
}
