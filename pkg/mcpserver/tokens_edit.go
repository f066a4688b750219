package mcpserver

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"

	"github.com/BurntSushi/toml"
	"golang.org/x/sys/unix"

	"github.com/prod-write/prod-write/approval"
	"github.com/prod-write/prod-write/pkg/durable"
	"github.com/prod-write/prod-write/pkg/keys"
	"github.com/prod-write/prod-write/pkg/mcpapi"
	"github.com/prod-write/prod-write/pkg/tomlpos"
)

// TokenPrefix begins every bearer token [TokensEditor.Add] makes, so that
// one found where it should not be (a log, a commit, a paste) says what it
// is to a person and to a secret scanner.
const TokenPrefix = "pwmcp_"

// NewFileMode is the mode of a tokens file Add makes: it holds hashes
// only, which the service's account must read.
const NewFileMode = 0o644

// TokensEditor reads and edits tokens files for `prod-write mcp token`
// (docs/adr/0061-mcp-tokens-on-the-cli.md). Every file it writes is one
// the service's own parser accepts, written durably (pkg/durable) with the mode, owner
// and group it had, while it holds an exclusive lock on the file's
// directory, so that two edits at once do not lose one. It edits the text,
// adding or removing one [[token]] table: comments, origins and the
// [oauth] table stay as they were.
type TokensEditor struct{}

var _ mcpapi.TokensFile = TokensEditor{}

// List implements [mcpapi.TokensFile].
func (TokensEditor) List(path string) ([]mcpapi.TokenEntry, error) {
	data, _, err := readTokensFile(path)
	if err != nil {
		return nil, err
	}
	t, err := parseTokens(path, data, true)
	if err != nil {
		return nil, err
	}
	out := make([]mcpapi.TokenEntry, 0, len(t.list))
	for _, tok := range t.list {
		out = append(out, entryOf(tok))
	}
	return out, nil
}

// Add implements [mcpapi.TokensFile]. The token is 32 bytes from the
// system's random source, base64url after [TokenPrefix]; only its sha256
// is written.
func (TokensEditor) Add(path, principal, scope string, allowRun bool) (string, mcpapi.TokenEntry, error) {
	unlock, err := lockDir(path)
	if err != nil {
		return "", mcpapi.TokenEntry{}, err
	}
	defer unlock()
	data, write, err := editable(path)
	if err != nil {
		return "", mcpapi.TokenEntry{}, err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", mcpapi.TokenEntry{}, fmt.Errorf("making a token: %w", err)
	}
	token := TokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	var entry bytes.Buffer
	enc := toml.NewEncoder(&entry)
	enc.Indent = ""
	if err := enc.Encode(struct {
		Token []tokenEntry `toml:"token"`
	}{[]tokenEntry{{SHA256: HashToken(token), Principal: principal, Scope: scope, AllowRun: allowRun}}}); err != nil {
		return "", mcpapi.TokenEntry{}, fmt.Errorf("writing the entry: %w", err)
	}
	next := bytes.Clone(data)
	if len(next) > 0 && !bytes.HasSuffix(next, []byte("\n")) {
		next = append(next, '\n')
	}
	if len(bytes.TrimSpace(next)) > 0 {
		next = append(next, '\n')
	}
	next = append(next, entry.Bytes()...)
	t, err := parseTokens(path, next, true)
	if err != nil {
		// The file was malformed before, or the entry is (a principal
		// or scope the format refuses): nothing is written.
		return "", mcpapi.TokenEntry{}, err
	}
	added, ok := t.Resolve(token)
	if !ok {
		return "", mcpapi.TokenEntry{}, &approval.ConfigError{File: path, Msg: "the entry appended is not read back as a [[token]] table (the file declares its tokens otherwise, as an inline array?): add it by hand"}
	}
	if err := write(next); err != nil {
		return "", mcpapi.TokenEntry{}, err
	}
	return token, entryOf(added), nil
}

// Revoke implements [mcpapi.TokensFile]: it removes the lines of the one
// [[token]] table whose ID begins with id, from the comment lines right
// above its header to its last key, and a blank line it leaves doubled.
func (TokensEditor) Revoke(path, id string) (mcpapi.TokenEntry, error) {
	id = strings.ToLower(id)
	if len(id) < 6 || len(id) > 2*sha256.Size || strings.Trim(id, "0123456789abcdef") != "" {
		return mcpapi.TokenEntry{}, &mcpapi.TokenIDError{ID: id}
	}
	unlock, err := lockDir(path)
	if err != nil {
		return mcpapi.TokenEntry{}, err
	}
	defer unlock()
	data, write, err := editable(path)
	if err != nil {
		return mcpapi.TokenEntry{}, err
	}
	if data == nil {
		return mcpapi.TokenEntry{}, fmt.Errorf("reading tokens: %w", &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist})
	}
	t, err := parseTokens(path, data, true)
	if err != nil {
		return mcpapi.TokenEntry{}, err
	}
	match := -1
	var sources []string
	for i, tok := range t.list {
		if strings.HasPrefix(hex.EncodeToString(tok.sum[:]), id) {
			match = i
			sources = append(sources, tok.Source)
		}
	}
	if len(sources) != 1 {
		return mcpapi.TokenEntry{}, &mcpapi.TokenIDError{ID: id, Sources: sources}
	}
	gone := t.list[match]
	starts := tokenLines(data)
	if len(starts) != len(t.list) {
		return mcpapi.TokenEntry{}, &approval.ConfigError{File: path, Msg: "its [[token]] tables are not one a header each (an inline array?): remove the entry by hand"}
	}
	lines := strings.SplitAfter(string(data), "\n")
	code := tomlpos.CodeLines(data)
	first := starts[match] - 1 // 0-based
	last := first
	for i := first + 1; i < len(code) && !tableHeaderRE().MatchString(code[i]); i++ {
		if strings.TrimSpace(code[i]) != "" {
			last = i // a key of the entry; comments and blank lines after the last belong to what follows
		}
	}
	// Comment lines right above the header are the entry's, unless they
	// begin the file: then they are the file's.
	above := first
	for above > 0 && strings.TrimSpace(code[above-1]) == "" && !blank(lines[above-1]) {
		above--
	}
	if above > 0 {
		first = above
	}
	kept := append(append([]string{}, lines[:first]...), lines[last+1:]...)
	if first > 0 && blank(kept[first-1]) && (first == len(kept) || blank(kept[first])) {
		kept = append(kept[:first-1], kept[first:]...)
	}
	next := []byte(strings.Join(kept, ""))
	after, err := parseTokens(path, next, true)
	if err != nil {
		return mcpapi.TokenEntry{}, fmt.Errorf("%s: the file without the entry at %s would not be read (%w): remove it by hand", path, gone.Source, err)
	}
	if after.Len() != t.Len()-1 {
		return mcpapi.TokenEntry{}, &approval.ConfigError{File: path, Msg: fmt.Sprintf("removing the lines of the entry at %s would not remove that entry alone: remove it by hand", gone.Source)}
	}
	for _, tok := range after.list {
		if tok.sum == gone.sum {
			return mcpapi.TokenEntry{}, &approval.ConfigError{File: path, Msg: fmt.Sprintf("removing the lines of the entry at %s leaves its hash: remove it by hand", gone.Source)}
		}
	}
	if err := write(next); err != nil {
		return mcpapi.TokenEntry{}, err
	}
	return entryOf(gone), nil
}

var tableHeaderRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\s*\[`) })

func blank(line string) bool { return strings.TrimSpace(line) == "" }

func entryOf(tok Token) mcpapi.TokenEntry {
	return mcpapi.TokenEntry{ID: tok.ID(), Principal: tok.Principal, Scope: tok.ScopeName(), AllowRun: tok.Scope.AllowRun, Source: tok.Source}
}

// lockDir takes an exclusive lock on path's directory until unlock is
// called: the tokens file itself is replaced by a rename, so a lock on it
// would be on the file before.
func lockDir(path string) (unlock func(), err error) {
	dir := filepath.Dir(path)
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("locking the tokens file's directory: %w", err)
	}
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		d.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return func() { d.Close() }, nil
}

// editable reads the tokens file at path for an edit, and returns its
// bytes (nil when there is no file yet) and the function that writes the
// edited file durably with the mode, owner and group it had (a new file:
// [NewFileMode], the caller's). It refuses a file, or a directory, that
// another account may write: whoever can write the file can give
// themselves a principal, and whoever can write the directory can
// replace the file.
func editable(path string) ([]byte, func([]byte) error, error) {
	dir := filepath.Dir(path)
	di, err := os.Stat(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("reading tokens: %w", err)
	}
	if err := othersMayWrite(dir, di); err != nil {
		return nil, nil, err
	}
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, func(b []byte) error { return durable.WriteFile(path, b, NewFileMode) }, nil
	}
	data, fi, err := readTokensFile(path)
	if err != nil {
		return nil, nil, err
	}
	if err := othersMayWrite(path, fi); err != nil {
		return nil, nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nil, nil, &approval.ConfigError{File: path, Msg: "cannot tell its owner"}
	}
	owner := durable.Owner{UID: int(st.Uid), GID: int(st.Gid)}
	return data, func(b []byte) error { return durable.WriteFileOwned(path, b, fi.Mode().Perm(), owner) }, nil
}

// othersMayWrite refuses a file or directory that its group or others may
// write, or that an account other than root and the caller owns.
func othersMayWrite(path string, fi os.FileInfo) error {
	if fi.Mode().Perm()&0o022 != 0 {
		return &keys.InsecureError{Path: path, Mode: fi.Mode(), What: "write"}
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return &approval.ConfigError{File: path, Msg: fmt.Sprintf("owned by uid %d, which may write it and so give itself a principal: chown root", st.Uid)}
	}
	return nil
}
