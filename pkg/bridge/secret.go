package bridge

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/prod-write/prod-write/pkg/keys"
)

// Environment variables the bridges read their secrets from. A secret is
// never taken from a flag: flags show in ps, shell history and CI logs.
const (
	EnvSlackSigningSecret = "PROD_WRITE_SLACK_SIGNING_SECRET"
	EnvSlackBotToken      = "PROD_WRITE_SLACK_BOT_TOKEN"
	EnvGitHubToken        = "PROD_WRITE_GITHUB_TOKEN"
)

// Secret is a credential. It prints as "[redacted]" through every fmt verb,
// so a secret passed to a logger or an error by mistake does not leak; the
// value is had only through [Secret.Reveal].
type Secret struct{ v string }

// Reveal returns the secret's value, for the one call that needs it.
func (s Secret) Reveal() string { return s.v }

// Empty reports whether the secret is unset.
func (s Secret) Empty() bool { return s.v == "" }

// Format implements fmt.Formatter: every verb prints "[redacted]".
func (s Secret) Format(f fmt.State, _ rune) { io.WriteString(f, "[redacted]") }

// String implements fmt.Stringer.
func (s Secret) String() string { return "[redacted]" }

// MissingSecretError is a secret found neither in the environment nor in a
// configured file.
type MissingSecretError struct {
	Env, Key string
}

func (e *MissingSecretError) Error() string {
	return fmt.Sprintf("set %s, or name a file holding it as %s in prod-write.toml", e.Env, e.Key)
}

// LoadSecret returns the secret from the environment variable env if it is
// set and non-empty, else from file (when file is not ""). A file must be
// readable by its owner only, like a key. Errors name the variable or the
// file, never the value.
func LoadSecret(lookupEnv func(string) (string, bool), env, configKey, file string) (Secret, error) {
	if v, ok := lookupEnv(env); ok && strings.TrimSpace(v) != "" {
		return Secret{v: strings.TrimSpace(v)}, nil
	}
	if file == "" {
		return Secret{}, &MissingSecretError{Env: env, Key: configKey}
	}
	f, err := os.Open(file)
	if err != nil {
		return Secret{}, fmt.Errorf("reading %s: %w", configKey, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Secret{}, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return Secret{}, &keys.InsecureError{Path: file, Mode: fi.Mode(), What: "read or write"}
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(io.LimitReader(f, 64<<10)); err != nil {
		return Secret{}, fmt.Errorf("reading %s: %w", file, err)
	}
	v := strings.TrimSpace(buf.String())
	if v == "" {
		return Secret{}, fmt.Errorf("%s (%s) is empty", file, configKey)
	}
	return Secret{v: v}, nil
}

// Redact replaces every occurrence of a secret's value in s. Errors from
// HTTP clients go through it before they are logged or returned, as a second
// line of defence: slack-go and go-github send tokens in bodies and headers,
// which their errors do not quote, but a future version might.
func Redact(s string, secrets ...Secret) string {
	for _, sec := range secrets {
		if len(sec.v) >= 4 {
			s = strings.ReplaceAll(s, sec.v, "[redacted]")
		}
	}
	return s
}
