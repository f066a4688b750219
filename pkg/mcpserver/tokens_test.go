package mcpserver_test

import (
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/mcpserver"
)

// A tokens file maps each hash to its principal and scope; a bearer
// resolves only by its exact bytes.
func TestTokensResolve(t *testing.T) {
	tokens := loadTokens(t,
		tokenEntry("ro-secret", "gateway", readOnly),
		tokenEntry("agent-secret", "agent", agentRun),
	)
	if tokens.Len() != 2 {
		t.Fatalf("Len = %d, want 2", tokens.Len())
	}
	tok, ok := tokens.Resolve("ro-secret")
	if !ok || tok.Principal != "gateway" || tok.Scope != readOnly || !strings.HasSuffix(tok.Source, "tokens.toml:1") {
		t.Errorf("ro-secret: %+v, %v", tok, ok)
	}
	tok, ok = tokens.Resolve("agent-secret")
	if !ok || tok.Principal != "agent" || tok.Scope != agentRun || !strings.HasSuffix(tok.Source, "tokens.toml:7") {
		t.Errorf("agent-secret: %+v, %v", tok, ok)
	}
	for _, bad := range []string{"", "ro-secre", "ro-secret ", "RO-SECRET", mcpserver.HashToken("ro-secret")} {
		if tok, ok := tokens.Resolve(bad); ok {
			t.Errorf("%q resolves to %+v", bad, tok)
		}
	}
	var none *mcpserver.Tokens
	if _, ok := none.Resolve("ro-secret"); ok {
		t.Error("a nil Tokens resolves a bearer")
	}
}

// A tokens file that group or others can write is refused, as the trust
// policy is: whoever can add a line gives themselves a principal.
func TestLoadTokensRefusesWritableFile(t *testing.T) {
	for _, mode := range []os.FileMode{0o666, 0o620, 0o602} {
		path := filepath.Join(t.TempDir(), "tokens.toml")
		if err := os.WriteFile(path, []byte(tokenEntry("x", "agent", agent)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := mcpserver.LoadTokens(path)
		var insecure *keys.InsecureError
		if !errors.As(err, &insecure) || insecure.Path != path {
			t.Errorf("mode %04o: err %v, want an InsecureError", mode, err)
		}
	}
	// Readable by others is fine: it holds hashes only.
	path := filepath.Join(t.TempDir(), "tokens.toml")
	if err := os.WriteFile(path, []byte(tokenEntry("x", "agent", agent)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := mcpserver.LoadTokens(path); err != nil {
		t.Errorf("mode 0644: %v", err)
	}
}

// Every mistake in a tokens file is an error naming the file and the line.
func TestLoadTokensRefuses(t *testing.T) {
	h := mcpserver.HashToken("secret")
	entry := func(lines ...string) string {
		return "# tokens\n[[token]]\n" + strings.Join(lines, "\n") + "\n"
	}
	tests := []struct {
		name, data, want string
	}{
		{"unknown key", entry(`sha256 = "`+h+`"`, `principal = "agent"`, `scope = "agent"`, `token = "secret"`), `tokens.toml:6: unknown key "token.token"`},
		{"unknown top-level key", "version = 2\n" + entry(`sha256 = "`+h+`"`, `principal = "agent"`, `scope = "agent"`), `tokens.toml:1: unknown key "version"`},
		{"syntax", entry(`sha256 = "`+h+`"`, `principal = agent`), `tokens.toml:4:`},
		{"wrong type", entry(`sha256 = "`+h+`"`, `principal = "agent"`, `scope = "agent"`, `allow_run = "yes"`), `tokens.toml:`},
		{"no tokens", "# nothing\n", `declares no [[token]]`},
		{"hash missing", entry(`principal = "agent"`, `scope = "agent"`), `tokens.toml:2: token 1: sha256 must be 64 hex digits`},
		{"token instead of hash", entry(`sha256 = "secret"`, `principal = "agent"`, `scope = "agent"`), `tokens.toml:2: token 1: sha256 must be 64 hex digits`},
		{"hash of nothing", entry(`sha256 = "`+mcpserver.HashToken("")+`"`, `principal = "agent"`, `scope = "agent"`), `tokens.toml:2: token 1: sha256 is the hash of the empty string`},
		{"principal missing", entry(`sha256 = "`+h+`"`, `scope = "agent"`), `tokens.toml:2: token 1: principal is required`},
		{"scope missing", entry(`sha256 = "`+h+`"`, `principal = "agent"`), `tokens.toml:2: token 1: scope is required`},
		{"unknown scope", entry(`sha256 = "`+h+`"`, `principal = "agent"`, `scope = "admin"`), `tokens.toml:2: token 1: unknown scope "admin"`},
		{"read-only that runs", entry(`sha256 = "`+h+`"`, `principal = "agent"`, `scope = "read-only"`, `allow_run = true`), `tokens.toml:2: token 1: allow_run is true on a read-only token`},
		{"duplicate hash", entry(`sha256 = "`+h+`"`, `principal = "agent"`, `scope = "agent"`) + entry(`sha256 = "`+strings.ToUpper(h)+`"`, `principal = "gateway"`, `scope = "read-only"`), `tokens.toml:7: token 2: sha256 is already the token's at`},
	}
	for _, tt := range tests {
		path := filepath.Join(t.TempDir(), "tokens.toml")
		if err := os.WriteFile(path, []byte(tt.data), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := mcpserver.LoadTokens(path)
		var cfg *approval.ConfigError
		if !errors.As(err, &cfg) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want a ConfigError containing %q", tt.name, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") && !strings.Contains(tt.data, `"secret"`) {
			t.Errorf("%s: error %v echoes a token", tt.name, err)
		}
	}
}

// The parser never panics, and what it accepts is well formed: every token
// names a principal, and none is read-only yet runs.
func FuzzLoadTokens(f *testing.F) {
	h := mcpserver.HashToken("secret")
	f.Add([]byte(tokenEntry("secret", "agent", agentRun)))
	f.Add([]byte(tokenEntry("secret", "gateway", readOnly) + tokenEntry("other", "agent", agent)))
	f.Add([]byte(`token = [{sha256 = "` + h + `", principal = "a", scope = "agent"}]`))
	f.Add([]byte("[[token]]\nsha256 = \"" + h + "\"\n[[token]]\nsha256 = \"" + h + "\"\n"))
	f.Add([]byte("[token]\nsha256 = 1\n"))
	f.Add([]byte("[[token]]\n'sha256' = \"\"\"\n[[token]]\n\"\"\"\nx.y.z = 1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tokens, err := mcpserver.ParseTokens("tokens.toml", data)
		if err != nil {
			if tokens != nil {
				t.Fatal("tokens returned with an error")
			}
			return
		}
		if tokens.Len() == 0 {
			t.Fatal("no tokens accepted without an error")
		}
		if _, ok := tokens.Resolve(""); ok {
			t.Fatal("the empty bearer resolves")
		}
		for _, tok := range tokens.All() {
			if tok.Principal == "" || tok.Source == "" || tok.Scope.ReadOnly && tok.Scope.AllowRun {
				t.Fatalf("accepted a malformed token: %+v", tok)
			}
		}
	})
}

// A bearer resolves only when all 32 bytes of its sha256 match an entry:
// a comparison of a prefix would let any token whose hash shares those
// bytes with a real one through (4 bytes: 2^32 guesses), and one of a
// suffix or of the bytes up to the last the same. Each entry below is a
// bearer's hash with one byte changed; alongside the bearer's own entry
// (before or after it), the bearer still resolves to its own principal.
func TestTokenSharingAllButOneByteOfAHashIsRefused(t *testing.T) {
	const bearer = "agent-secret"
	near := func(i int) string {
		sum, err := hex.DecodeString(mcpserver.HashToken(bearer))
		if err != nil {
			t.Fatal(err)
		}
		sum[i] ^= 0x80
		return hex.EncodeToString(sum)
	}
	entry := func(sum, principal string) string {
		return fmt.Sprintf("[[token]]\nsha256 = %q\nprincipal = %q\nscope = \"agent\"\n", sum, principal)
	}
	for _, i := range []int{0, 4, 16, 31} {
		t.Run(fmt.Sprintf("byte %d differs", i), func(t *testing.T) {
			tokens, err := mcpserver.ParseTokens("tokens.toml", []byte(entry(near(i), "mallory")))
			if err != nil {
				t.Fatal(err)
			}
			if tok, ok := tokens.Resolve(bearer); ok {
				t.Fatalf("a bearer whose hash differs from the entry's in byte %d only resolves to %+v", i, tok)
			}
			for _, file := range []string{
				entry(near(i), "mallory") + entry(mcpserver.HashToken(bearer), "agent"),
				entry(mcpserver.HashToken(bearer), "agent") + entry(near(i), "mallory"),
			} {
				tokens, err := mcpserver.ParseTokens("tokens.toml", []byte(file))
				if err != nil {
					t.Fatal(err)
				}
				if tok, ok := tokens.Resolve(bearer); !ok || tok.Principal != "agent" {
					t.Errorf("beside its own entry, the bearer resolves to %+v, %v; want agent", tok, ok)
				}
			}
		})
	}
}
