package keys_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/pkg/keys"
)

func newKeyFile(t *testing.T) (string, *keys.Private) {
	t.Helper()
	k, err := keys.Generate()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "k.key")
	if err := k.WriteNew(path); err != nil {
		t.Fatal(err)
	}
	return path, k
}

func TestWriteNewMode(t *testing.T) {
	path, k := newKeyFile(t)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode %04o, want 0600", fi.Mode().Perm())
	}
	got, err := keys.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Public(), k.Public()) {
		t.Error("Load returned a different key than WriteNew stored")
	}
}

func TestWriteNewNeverOverwrites(t *testing.T) {
	path, k := newKeyFile(t)
	before, _ := os.ReadFile(path)
	other, _ := keys.Generate()
	err := other.WriteNew(path)
	if !errors.Is(err, os.ErrExist) {
		t.Fatalf("WriteNew over an existing key: %v, want os.ErrExist", err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("WriteNew changed an existing key file")
	}
	if got, _ := keys.Load(path); !bytes.Equal(got.Public(), k.Public()) {
		t.Fatal("the stored key is no longer the first one")
	}
	// Not through a symlink either: O_EXCL refuses a dangling link.
	link := filepath.Join(t.TempDir(), "link.key")
	target := filepath.Join(t.TempDir(), "elsewhere.key")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := other.WriteNew(link); !errors.Is(err, os.ErrExist) {
		t.Errorf("WriteNew through a dangling symlink: %v, want os.ErrExist", err)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("WriteNew created the symlink's target")
	}
}

func TestLoadRefusesInsecureModes(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{
		{0o600, true}, {0o400, true}, {0o700, true},
		{0o644, false}, {0o640, false}, {0o604, false}, {0o660, false},
		{0o620, false}, {0o602, false}, {0o601, false}, {0o610, false}, {0o666, false}, {0o777, false},
	} {
		t.Run(fmt.Sprintf("%04o", tc.mode), func(t *testing.T) {
			path, _ := newKeyFile(t)
			if err := os.Chmod(path, tc.mode); err != nil {
				t.Fatal(err)
			}
			k, err := keys.Load(path)
			if tc.ok {
				if err != nil || k == nil {
					t.Fatalf("Load at %04o: %v", tc.mode, err)
				}
				return
			}
			var ie *keys.InsecureError
			if !errors.As(err, &ie) {
				t.Fatalf("Load at %04o: %v, want an *InsecureError", tc.mode, err)
			}
			if k != nil {
				t.Error("Load returned a key along with the refusal")
			}
			if ie.Path != path || ie.Mode.Perm() != tc.mode {
				t.Errorf("InsecureError{Path: %q, Mode: %04o}, want %q and %04o", ie.Path, ie.Mode.Perm(), path, tc.mode)
			}
			msg := err.Error()
			if !strings.Contains(msg, path) || !strings.Contains(msg, fmt.Sprintf("%04o", tc.mode)) {
				t.Errorf("message %q does not name the file and its mode", msg)
			}
		})
	}
}

// The message says who may do what: a 0640 key is one its group may read,
// not one "others" may, and the fix takes away just that.
func TestInsecureErrorNamesWhoMay(t *testing.T) {
	for _, tc := range []struct {
		mode os.FileMode
		what string
		want string
	}{
		{0o640, "read or write", "k has mode 0640: its group may read it (chmod go-r k)"},
		{0o604, "read or write", "k has mode 0604: others may read it (chmod go-r k)"},
		{0o644, "read or write", "k has mode 0644: its group and others may read it (chmod go-r k)"},
		{0o660, "read or write", "k has mode 0660: its group may read and write it (chmod go-rw k)"},
		{0o610, "read or write", "k has mode 0610: its group may execute it (chmod go-x k)"},
		{0o777, "read or write", "k has mode 0777: its group and others may read, write and execute it (chmod go-rwx k)"},
		// A policy file: only writing is refused, and reading is left.
		{0o664, "write", "k has mode 0664: its group may write it (chmod go-w k)"},
		{0o666, "write", "k has mode 0666: its group and others may write it (chmod go-w k)"},
		{0o602, "write", "k has mode 0602: others may write it (chmod go-w k)"},
	} {
		err := &keys.InsecureError{Path: "k", Mode: tc.mode, What: tc.what}
		if got := err.Error(); got != tc.want {
			t.Errorf("%04o (%s):\n got %s\nwant %s", tc.mode, tc.what, got, tc.want)
		}
	}
}

// TestLoadChecksTheTargetOfASymlink: the mode that matters is the key
// file's, whatever the link's.
func TestLoadChecksTheTargetOfASymlink(t *testing.T) {
	path, _ := newKeyFile(t)
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "link.key")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	var ie *keys.InsecureError
	if _, err := keys.Load(link); !errors.As(err, &ie) {
		t.Errorf("Load through a symlink to a 0644 key: %v, want an *InsecureError", err)
	}
}

func TestLoadNotAKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for name, data := range map[string][]byte{
		"garbage":     []byte("not a key\n"),
		"public":      []byte("ed25519:MlApyfyXNVs2Aqsy7vDaD5PpPMZgYlrjxG0DiYxi1qU=\n"),
		"wrong-block": []byte("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAMlApyfyXNVs2Aqsy7vDaD5PpPMZgYlrjxG0DiYxi1qU=\n-----END PUBLIC KEY-----\n"),
		"bad-der":     []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"),
	} {
		if _, err := keys.Load(write(name, data)); !errors.Is(err, keys.ErrNotAKey) {
			t.Errorf("%s: %v, want ErrNotAKey", name, err)
		}
	}
	if _, err := keys.Load(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing key: %v, want os.ErrNotExist", err)
	}
}

var publicRE = regexp.MustCompile(`^ed25519:[A-Za-z0-9+/]{43}=$`)

func TestPublicForm(t *testing.T) {
	k := keys.FromSeed(bytes.Repeat([]byte{7}, 32))
	s := k.Public().String()
	if !publicRE.MatchString(s) {
		t.Fatalf("public key %q is not ed25519: + 44 characters of standard base64", s)
	}
	back, err := keys.ParsePublic(s)
	if err != nil || !bytes.Equal(back, k.Public()) {
		t.Fatalf("ParsePublic(%q) = %x, %v", s, back, err)
	}
	if id := k.Public().ID(); !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(id) {
		t.Errorf("ID %q is not 64 hex digits", id)
	}
	for _, bad := range []string{
		strings.TrimPrefix(s, "ed25519:"),
		"ED25519:" + strings.TrimPrefix(s, "ed25519:"),
		s[:len(s)-1],        // padding cut
		s + "=",             // padding added
		s[:len(s)-2] + "B=", // non-zero trailing bits: not the strict encoding
		"ed25519:AAAA",      // too short
		strings.Replace(s, "ed25519:", "ed25519: ", 1),
	} {
		if _, err := keys.ParsePublic(bad); err == nil {
			t.Errorf("ParsePublic(%q) accepted it", bad)
		}
	}
}

func TestSignVerify(t *testing.T) {
	k := keys.FromSeed(bytes.Repeat([]byte{1}, 32))
	other := keys.FromSeed(bytes.Repeat([]byte{2}, 32))
	sig, err := k.Sign(context.Background(), []byte("payload"))
	if err != nil {
		t.Fatal(err)
	}
	if err := (keys.Verifier{Key: k.Public()}).Verify(context.Background(), []byte("payload"), sig); err != nil {
		t.Errorf("a good signature does not verify: %v", err)
	}
	if err := (keys.Verifier{Key: other.Public()}).Verify(context.Background(), []byte("payload"), sig); err == nil {
		t.Error("a signature verified under another key")
	}
	if err := (keys.Verifier{Key: k.Public()}).Verify(context.Background(), []byte("payloaD"), sig); err == nil {
		t.Error("a signature verified over other bytes")
	}
	if id, _ := k.KeyID(); id != k.Public().ID() {
		t.Errorf("key ids differ: signer %s, its public key %s", id, k.Public().ID())
	}
}
