package mcpserver

import (
	"bytes"
	"log/slog"
	"os"
	"reflect"
	"sync"
	"syscall"
	"time"
)

// TokensFile is the tokens file the runner service serves MCP over HTTP
// by. It is loaded at start ([OpenTokensFile]) and read again at the
// first request after it changed, so that a token `prod-write mcp token
// add` appends is served, and one `prod-write mcp token revoke` removes is
// refused, from the next request on, with no restart and no reload
// (docs/adr/0061-mcp-tokens-on-the-cli.md).
//
// A changed file that cannot be loaded (malformed, no longer a regular
// file, writable by group or others, gone) is logged once, and the tokens
// before it are still served: the service never stops serving for an
// edit in progress, as a reload (SIGHUP) keeps the policy it had. The
// [oauth] table is read at start only, with its introspection secrets:
// the [[token]] entries and origins of a changed file are served, and a
// changed [oauth] table is logged and waits for a restart.
type TokensFile struct {
	path string
	log  *slog.Logger
	stat func(string) (os.FileInfo, error) // os.Stat; tests freeze it

	mu  sync.Mutex
	cur *Tokens
	// seen is the identity of the last version of the file read, served
	// or refused, and data its bytes (nil when it could not be read).
	seen fileID
	data []byte
	// logged is the last refusal logged, so that each is logged once.
	logged string
}

// racyWindow is how long after a file's last change its identity is not
// trusted alone: a change within one tick of the file system's clock, of
// the same size and on an inode number just freed, would leave it as it
// was (git's "racily clean" entries). Until then, the bytes are compared.
const racyWindow = 2 * time.Second

// OpenTokensFile loads the tokens file at path, refusing anything but a
// regular file that neither group nor others can write (whoever can add a
// line to it can give themselves a principal), a file that declares no
// token and no [oauth], and one whose introspection clients' secrets
// cannot be read. log, when not nil, gets
// a line for each change read and each refused.
func OpenTokensFile(path string, log *slog.Logger) (*TokensFile, error) {
	data, fi, err := readTokensFile(path)
	if err != nil {
		return nil, err
	}
	t, err := parseTokensFile(path, data, true)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &TokensFile{path: path, log: log, stat: os.Stat, cur: t, seen: idOf(fi), data: data}, nil
}

// Path is the file's path.
func (f *TokensFile) Path() string { return f.path }

// Tokens returns the tokens of the file as it is now: those loaded
// before, read again first if the file changed since.
func (f *TokensFile) Tokens() *Tokens {
	fi, err := f.stat(f.path)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		f.refuse(err)
		return f.cur
	}
	if id := idOf(fi); id == f.seen && time.Since(id.changed()) > racyWindow {
		return f.cur
	}
	data, fi, err := readTokensFile(f.path)
	if err != nil {
		f.seen, f.data = idOf(fi), nil
		f.refuse(err)
		return f.cur
	}
	id := idOf(fi)
	if id == f.seen && f.data != nil && bytes.Equal(data, f.data) {
		return f.cur
	}
	f.seen, f.data = id, data
	t, err := parseTokensFile(f.path, data, false)
	if err != nil {
		f.refuse(err)
		return f.cur
	}
	if !reflect.DeepEqual(t.oauthTable, f.cur.oauthTable) {
		f.log.Warn("mcp over http: the tokens file's [oauth] table changed: it is read at start only, so the one loaded then is still served until the service restarts", "file", f.path)
	}
	t.oauth, t.oauthTable = f.cur.oauth, f.cur.oauthTable
	f.cur, f.logged = t, ""
	f.log.Info("mcp over http: the tokens file changed and was read again", "file", f.path, "tokens", t.Len())
	return t
}

// refuse logs, once, that the file as it is now is not served.
func (f *TokensFile) refuse(err error) {
	if msg := err.Error(); msg != f.logged {
		f.logged = msg
		f.log.Error("mcp over http: the tokens file changed but cannot be loaded: the tokens loaded before are still served", "file", f.path, "err", err)
	}
}

// fileID tells a file's versions apart: a file replaced by a rename (as
// durable writes are) has a new inode, one rewritten in place a new size or
// modification time; a chmod or chown, which may make a refused file
// loadable, changes its ctime.
type fileID struct {
	dev, ino     uint64
	size         int64
	mtime        time.Time
	ctimeSec     int64
	ctimeNanosec int64
}

// changed is when the file last changed, its content or its inode.
func (id fileID) changed() time.Time {
	if c := time.Unix(id.ctimeSec, id.ctimeNanosec); c.After(id.mtime) {
		return c
	}
	return id.mtime
}

// idOf is fi's identity; that of no file when fi is nil.
func idOf(fi os.FileInfo) fileID {
	if fi == nil {
		return fileID{}
	}
	id := fileID{size: fi.Size(), mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.dev, id.ino = uint64(st.Dev), st.Ino
		id.ctimeSec, id.ctimeNanosec = st.Ctim.Sec, st.Ctim.Nsec
	}
	return id
}
