package bridge

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/prod-write/prod-write/operations"
)

// DiffRules say how a bridge shows approvers what a plan's files hold
// (docs/BRIDGES.md, "What approvers see"; ADR 0027, ADR 0063). The new
// side, what the plan binds, is always the content kept with the plan
// (bridge.Input.Contents), checked against the plan's sum: never a path
// read again, so a file the agent deletes or replaces after planning still
// shows what was planned, and what is shown never depends on what the
// service can see at a path. A file larger than [DiffMaxInput], one the
// operation marks secret (files.NAME.secret), or one whose content was not
// kept (planned before content was kept) is not shown, and says so.
//
// A file parameter that names, with diff_against, the file it replaces
// shows a diff against that file's current bytes. That side is read by the
// process that posts (the filer's `file` in local mode, the runner service
// or `bridge serve` otherwise), and only when all of these hold:
//
//   - the path is the operation's: a caller picks only the target and
//     params it is expanded with, [operations.Operation.DiffPath];
//   - that path, symbolic links resolved, lies under one of Roots, the
//     directories the deployment declares (bridge.diff_roots; none, and no
//     current side is ever read);
//   - it is a regular file readable by every account on the host (mode
//     o+r): a key or a credentials file (0600, 0640) is never shown, even
//     under a root.
//
// A file parameter with no diff_against shows its content, whole.
type DiffRules struct {
	Roots []string
}

// FileDiff is what one file parameter changes.
type FileDiff struct {
	// File is the parameter's name; Against the path it replaces, or ""
	// when the operation names none: then Hunks are its whole content.
	File    string `json:"file"`
	Against string `json:"against,omitempty"`
	// Created says the path does not exist yet: the diff is from nothing.
	Created bool     `json:"created,omitempty"`
	Hunks   []string `json:"hunks,omitempty"`
	// Cut says the hunks were cut to the size caps.
	Cut bool `json:"cut,omitempty"`
	// NotShown says why nothing is shown, or "".
	NotShown string `json:"not_shown,omitempty"`
}

// Diffs are what the plan's file parameters hold, in the plan's order,
// from contents, the content kept with the plan by sum.
func (r *DiffRules) Diffs(p *operations.Plan, op *operations.Operation, contents map[string][]byte) []FileDiff {
	var out []FileDiff
	for _, f := range p.Files {
		path, err := op.DiffPath(f.Name, p.Target, p.Params)
		d := FileDiff{File: f.Name, Against: path}
		var old, cur []byte
		if err == nil && op.Files[f.Name].Secret {
			err = fmt.Errorf("the operation marks it secret (files.%s.secret)", f.Name)
		}
		if err == nil {
			cur, err = Kept(f, contents)
		}
		if err == nil && path != "" {
			old, d.Created, err = r.readCurrent(path)
		}
		if err == nil {
			d.Hunks, d.Cut, err = UnifiedDiff(old, cur)
		}
		if err != nil {
			d.NotShown = err.Error()
			d.Hunks, d.Cut = nil, false
		}
		out = append(out, d)
	}
	return out
}

// Kept is file f's content as kept with the plan: contents' bytes under
// f's sum, when they are f's size and sum, else why none is shown.
func Kept(f operations.File, contents map[string][]byte) ([]byte, error) {
	if f.Size > DiffMaxInput {
		return nil, fmt.Errorf("over %d KiB", DiffMaxInput>>10)
	}
	data, ok := contents[f.SHA256]
	if !ok {
		return nil, errors.New("its content was not kept with the plan")
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != f.Size || "sha256:"+hex.EncodeToString(sum[:]) != f.SHA256 {
		return nil, errors.New("the content the store keeps is not what the plan binds")
	}
	return data, nil
}

// errNotShared is why a file not every account can read is not shown.
var errNotShared = errors.New("not readable by every account on this host, so it may hold secrets")

// readCurrent reads the file at path, the current side, under the rules.
// A path that does not exist (yet) under a root is the empty file.
func (r *DiffRules) readCurrent(path string) (data []byte, created bool, err error) {
	if len(r.Roots) == 0 {
		return nil, false, errors.New("bridge.diff_roots names no directory a diff may be read from")
	}
	real, err := filepath.EvalSymlinks(path)
	if errors.Is(err, fs.ErrNotExist) {
		// Not there yet: its directory must still be under a root.
		dir, derr := filepath.EvalSymlinks(filepath.Dir(path))
		if derr != nil {
			return nil, false, fmt.Errorf("%s cannot be read: %w", path, derr)
		}
		real, created = filepath.Join(dir, filepath.Base(path)), true
	} else if err != nil {
		return nil, false, fmt.Errorf("%s cannot be read: %w", path, err)
	}
	if !r.under(real) {
		return nil, false, fmt.Errorf("%s is outside bridge.diff_roots", path)
	}
	if created {
		return nil, true, nil
	}
	// O_NOFOLLOW: the resolved path was checked, so a link swapped in
	// since is refused, not followed.
	data, err = readShared(real, syscall.O_NOFOLLOW)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	return data, false, nil
}

// under reports whether the resolved path p is a root or below one.
func (r *DiffRules) under(p string) bool {
	for _, root := range r.Roots {
		real, err := filepath.EvalSymlinks(root)
		if err != nil || !filepath.IsAbs(real) {
			continue
		}
		if p == real || strings.HasPrefix(p, strings.TrimSuffix(real, "/")+"/") {
			return true
		}
	}
	return false
}

// readShared reads a regular file every account may read, at most
// DiffMaxInput bytes (more is an error).
func readShared(path string, flags int) ([]byte, error) {
	// Check before opening (a FIFO blocks, a device may act), then check
	// what was opened.
	if fi, err := os.Stat(path); err != nil {
		return nil, err
	} else if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	fh, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY|flags, 0)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, errors.New("not a regular file")
	case fi.Mode().Perm()&0o004 == 0:
		return nil, errNotShared
	case fi.Size() > DiffMaxInput:
		return nil, fmt.Errorf("larger than %d bytes", DiffMaxInput)
	}
	data, err := io.ReadAll(io.LimitReader(fh, DiffMaxInput+1))
	if err != nil {
		return nil, err
	}
	if len(data) > DiffMaxInput {
		return nil, fmt.Errorf("larger than %d bytes", DiffMaxInput)
	}
	return data, nil
}
